/* How a cudaMemPool reserves memory: for each sequence of allocations (sizes in bytes), from a
 * fresh pool (release threshold max), the pool's reserved bytes after each allocation. cudasim
 * models what this prints (tests/cudasim). Build and run on a GPU machine:
 *
 *   cc -O2 -I/usr/local/cuda/include bench/pool_segments.c -L/usr/local/cuda/lib64 -lcudart \
 *      -o /tmp/pool_segments && /tmp/pool_segments
 */
#include <stdint.h>
#include <stdio.h>
#include <cuda_runtime_api.h>

#define MIB ((size_t)1 << 20)
#define KIB ((size_t)1 << 10)

static int check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static int sequence(const char *name, const size_t *sizes, int n) {
  struct cudaMemPoolProps props = {0};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  if (check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate")) return 1;
  uint64_t max = UINT64_MAX;
  if (check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &max), "threshold"))
    return 1;
  void *p[16];
  printf("%-28s", name);
  for (int i = 0; i < n; i++) {
    if (check(cudaMallocFromPoolAsync(&p[i], sizes[i], pool, 0), "cudaMallocFromPoolAsync"))
      return 1;
    uint64_t reserved = 0;
    if (check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
              "reserved"))
      return 1;
    printf(" %.4g->%.4g", (double)sizes[i] / MIB, (double)reserved / MIB);
  }
  printf("  (MiB asked -> MiB reserved)\n");
  for (int i = 0; i < n; i++)
    if (check(cudaFreeAsync(p[i], 0), "cudaFreeAsync")) return 1;
  if (check(cudaStreamSynchronize(0), "sync")) return 1;
  return check(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
}

int main(void) {
  static const size_t singles[] = {512,      2 * MIB,  4 * MIB,  20 * MIB, 31 * MIB, 32 * MIB,
                                   33 * MIB, 34 * MIB, 40 * MIB, 64 * MIB, 66 * MIB, 100 * MIB};
  int bad = 0;
  for (unsigned i = 0; i < sizeof singles / sizeof singles[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "one of %.4g MiB", (double)singles[i] / MIB);
    bad |= sequence(name, &singles[i], 1);
  }
  static const size_t two2[] = {2 * MIB, 2 * MIB, 2 * MIB};
  static const size_t mix[] = {20 * MIB, 2 * MIB, 20 * MIB};
  static const size_t big_small[] = {32 * MIB, 4 * KIB, 32 * MIB};
  static const size_t many[] = {2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB,
                                2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB,
                                2 * MIB, 2 * MIB};
  static const size_t odd[] = {34 * MIB, 30 * MIB, 3 * MIB};
  bad |= sequence("three of 2 MiB", two2, 3);
  bad |= sequence("20, 2, 20 MiB", mix, 3);
  bad |= sequence("32 MiB, 4 KiB, 32 MiB", big_small, 3);
  bad |= sequence("sixteen of 2 MiB", many, 16);
  bad |= sequence("34, 30, 3 MiB", odd, 3);
  return bad;
}
