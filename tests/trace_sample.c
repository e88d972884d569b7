/* Writes a small trace to argv[1] on cudasim, for the tools' command-line test: three streams,
 * a working set that grows and shrinks, a trim, a hand-off and a stream release. With
 * --exit-early: 10 allocations, then exit without destroying the pool, as a framework does. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#include "cudasim.h"

#define CHECK(call)                                                                           \
  do {                                                                                        \
    if ((call) != SPOOL_OK) {                                                                 \
      fprintf(stderr, "trace_sample: %s: %s\n", #call, spool_last_error());                   \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

int main(int argc, char **argv) {
  bool early = argc == 3 && strcmp(argv[2], "--exit-early") == 0;
  if (argc != 2 && !early) return fprintf(stderr, "usage: trace_sample TRACE [--exit-early]\n"), 1;
  spool_config cfg;
  spool_config_init(&cfg);
  snprintf(cfg.trace, sizeof cfg.trace, "%s", argv[1]);
  spool_pool *p;
  CHECK(spool_pool_create(&p, &cfg));
  cudaStream_t s[3];
  for (int k = 0; k < 3; k++)
    if (cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking) != cudaSuccess) return 1;
  void *held[16] = {0};
  if (early) {
    for (int i = 0; i < 10; i++) CHECK(spool_alloc(p, &held[i], 4096, s[0]));
    exit(0); /* the trace's atexit handler writes the partial block */
  }
  for (int i = 0; i < 600; i++) {
    int k = i % 3, h = i % 16;
    if (held[h]) CHECK(spool_free(p, held[h], s[k]));
    CHECK(SPOOL_ALLOC(p, &held[h], (size_t)(1 + (i * 37) % 97) * 8192, s[k]));
    if (i % 50 == 49) CHECK(spool_record_stream(p, held[h], s[(k + 1) % 3]));
    if (i == 300) CHECK(spool_trim(p, 0));
  }
  for (int h = 0; h < 16; h++) CHECK(spool_free(p, held[h], s[0]));
  for (int k = 0; k < 3; k++) {
    CHECK(spool_stream_release(p, s[k]));
    if (cudaStreamDestroy(s[k]) != cudaSuccess) return 1;
  }
  CHECK(spool_pool_destroy(p));
  return 0;
}
