/* torch_strategy.h where spool_bench is built without PyTorch (and in spool_bench_sim, which
 * runs on cudasim): the strategies are not in the build, and a call that gets here anyway says
 * how to have them. */
#include "torch_strategy.h"

#include <stdio.h>

#define NOT_BUILT                                                                                 \
  "this spool_bench was built without PyTorch's allocator (configure with "                      \
  "-DSPOOL_BENCH_TORCH=ON; scripts/bench does when python3 has torch)"

static bool not_built(void) { return bench_fail("%s", NOT_BUILT); }

bool bench_torch_built(void) { return false; }

bool bench_torch_describe(char *out, size_t len) {
  (void)out, (void)len;
  return false;
}

bool bench_torch_usable(char *why, size_t len) {
  snprintf(why, len, "%s", NOT_BUILT);
  return false;
}

bool bench_torch_setup(int device, bool expandable) {
  (void)device, (void)expandable;
  return not_built();
}

bool bench_torch_alloc(struct allocator *a, void **p, size_t n, cudaStream_t s) {
  (void)a, (void)n, (void)s;
  *p = NULL;
  return not_built();
}

bool bench_torch_free(struct allocator *a, void *p, cudaStream_t s) {
  (void)a, (void)p, (void)s;
  return not_built();
}

bool bench_torch_reset_peaks(int device) {
  (void)device;
  return not_built();
}

bool bench_torch_peaks(int device, uint64_t *reserved, uint64_t *allocated) {
  (void)device;
  *reserved = 0, *allocated = 0;
  return not_built();
}

bool bench_torch_teardown(int device, bool expandable) {
  (void)device, (void)expandable;
  return true; /* nothing was set up */
}
