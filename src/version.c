/* The version of the library actually linked, next to the one a header was compiled with. */
#include "internal.h"

unsigned spool_version(void) { return SPOOL_VERSION; }

const char *spool_version_string(void) { return SPOOL_VERSION_STRING; }
