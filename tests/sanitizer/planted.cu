/* planted: one memory error, or none, in a program that uses spool, for compute-sanitizer to
 * find (run.sh runs it under memcheck, one mode per process: a faulting kernel leaves the
 * context unusable).
 *
 *   planted uaf      a kernel writes a buffer after spool_free (the stream keeps the block)
 *   planted oob      a kernel writes 24 bytes past a 1000-byte buffer (into the block's slack)
 *   planted batch    a kernel writes past a batch member, into the padding before the next
 *   planted scope    a kernel writes a scope piece after spool_scope_end
 *   planted raw      the uaf case on cudaMallocAsync / cudaFreeAsync, for comparison
 *   planted clean    all of the above done right: the tool must report nothing
 *
 * Exit status: 0 when the program ran to its end, 2 for a bad mode, 77 when no device. */
#include <spool/spool.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

__global__ void fill(unsigned *p, size_t n, unsigned v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + (unsigned)i;
}

static void launch(void *p, size_t bytes, cudaStream_t s) {
  size_t n = bytes / sizeof(unsigned);
  fill<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((unsigned *)p, n, 7u);
}

static int fail(const char *what, spool_status s) {
  fprintf(stderr, "planted: %s: %s: %s\n", what, spool_status_name(s), spool_last_error());
  return 1;
}

#define CK(call)                                   \
  do {                                             \
    spool_status s_ = (call);                      \
    if (s_ != SPOOL_OK) return fail(#call, s_);    \
  } while (0)

static int uaf(spool_pool *p, cudaStream_t s, bool plant) {
  void *a;
  CK(spool_alloc(p, &a, 4096, s));
  launch(a, 4096, s); /* queued before the free: fine */
  CK(spool_free(p, a, s));
  if (plant) launch(a, 4096, s);
  return 0;
}

static int oob(spool_pool *p, cudaStream_t s, bool plant) {
  void *a;
  CK(spool_alloc(p, &a, 1000, s));
  launch(a, plant ? 1024 : 1000, s);
  CK(spool_free(p, a, s));
  return 0;
}

static int batch(spool_pool *p, cudaStream_t s, bool plant) {
  size_t sizes[2] = {1000, 1000};
  void *m[2];
  CK(spool_alloc_batch(p, s, 2, sizes, m, 256)); /* the second member starts at 1024 */
  launch(m[0], plant ? 1024 : 1000, s);
  launch(m[1], 1000, s);
  CK(spool_free(p, m[0], s));
  return 0;
}

static int scope(spool_pool *p, cudaStream_t s, bool plant) {
  spool_scope *sc;
  void *a;
  CK(spool_scope_begin(p, s, &sc));
  CK(spool_scope_alloc(sc, &a, 4096));
  launch(a, 4096, s);
  CK(spool_scope_end(sc));
  if (plant) launch(a, 4096, s);
  return 0;
}

static int raw(cudaStream_t s) {
  void *a;
  if (cudaMallocAsync(&a, 4096, s) != cudaSuccess) return 1;
  launch(a, 4096, s);
  if (cudaFreeAsync(a, s) != cudaSuccess) return 1;
  launch(a, 4096, s);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return 77;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (strcmp(mode, "raw") == 0) {
    int r = raw(s);
    (void)cudaStreamSynchronize(s);
    return r;
  }
  spool_pool *p;
  CK(spool_pool_create(&p, NULL));
  int r;
  if (strcmp(mode, "uaf") == 0) r = uaf(p, s, true);
  else if (strcmp(mode, "oob") == 0) r = oob(p, s, true);
  else if (strcmp(mode, "batch") == 0) r = batch(p, s, true);
  else if (strcmp(mode, "scope") == 0) r = scope(p, s, true);
  else if (strcmp(mode, "clean") == 0)
    r = uaf(p, s, false) || oob(p, s, false) || batch(p, s, false) || scope(p, s, false);
  else {
    fprintf(stderr, "planted: unknown mode '%s' (uaf, oob, batch, scope, raw, clean)\n", mode);
    return 2;
  }
  printf("planted %s: %s\n", mode, r ? "did not run to its end" : "ran");
  if (cudaStreamSynchronize(s) != cudaSuccess) return r; /* the planted fault, as expected */
  if (spool_pool_destroy(p) != SPOOL_OK) return fail("spool_pool_destroy", SPOOL_OK);
  (void)cudaStreamDestroy(s);
  return r;
}
