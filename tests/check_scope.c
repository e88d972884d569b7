#include "test_main.h"
static Suite *suite(void) { Suite *su = suite_create("scope"); return su; }
int main(void) { return test_main(suite()); }
