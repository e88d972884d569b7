/* Compiled against the installed headers; prints the version so the test can compare. */
#include <spool/spool.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  spool_config cfg;
  spool_config_init(&cfg);
  if (spool_version() != SPOOL_VERSION || strcmp(spool_version_string(), SPOOL_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s, library %s\n", SPOOL_VERSION_STRING, spool_version_string());
    return 1;
  }
  printf("spool %s\n", spool_version_string());
  return cfg.release_threshold == UINT64_MAX ? 0 : 1;
}
