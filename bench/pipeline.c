/* The image pipeline over the allocator under test (see pipeline.h). */
#include "pipeline.h"

#include <string.h>

#include "kernels.h"
#include "loops.h"

#define LAUNCH(call) bench_cuda_ok((call), #call, __FILE__, __LINE__)

bool pipeline_open(pipeline *pl, int w, int h, const cudaStream_t *streams, int lanes) {
  memset(pl, 0, sizeof *pl);
  if (lanes < 1 || lanes > BENCH_MAX_STREAMS)
    return bench_fail("pipeline: %d lanes (1..%d)", lanes, BENCH_MAX_STREAMS);
  pl->w = w, pl->h = h, pl->streams = streams, pl->lanes = lanes;
  const size_t px = (size_t)w * (size_t)h;
  for (int i = 0; i < lanes; ++i) {
    CUDA_TRY(cudaMalloc((void **)&pl->rgb[i], 3 * px));
    CUDA_TRY(cudaMalloc((void **)&pl->out[i], px));
  }
  CUDA_TRY(cudaMalloc((void **)&pl->sum, (size_t)lanes * sizeof *pl->sum));
  CUDA_TRY(cudaMemset(pl->sum, 0, (size_t)lanes * sizeof *pl->sum));
  return true;
}

bool pipeline_close(pipeline *pl) {
  bool ok = bench_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize()", __FILE__, __LINE__);
  void *bufs[2 * BENCH_MAX_STREAMS + 1] = {pl->sum};
  for (int i = 0; i < BENCH_MAX_STREAMS; ++i) {
    bufs[1 + 2 * i] = pl->rgb[i];
    bufs[2 + 2 * i] = pl->out[i];
  }
  for (int i = 0; i < 2 * BENCH_MAX_STREAMS + 1; ++i)
    if (bufs[i] != NULL)
      ok = bench_cuda_ok(cudaFree(bufs[i]), "cudaFree", __FILE__, __LINE__) && ok;
  memset(pl, 0, sizeof *pl);
  return ok;
}

/* A frame's temporaries: t[0..4] = lum, hblur, vblur, grad, peak. */
typedef struct temps {
  void *t[PIPELINE_PAIRS];
  size_t n[PIPELINE_PAIRS];
} temps;

static bool tmp_alloc(allocator *a, temps *tp, int i, size_t n, cudaStream_t s, live_count *live) {
  if (!a->alloc(a, &tp->t[i], n, s)) return false;
  tp->n[i] = n;
  live_add(live, n);
  return true;
}

static bool tmp_free(allocator *a, temps *tp, int i, cudaStream_t s, live_count *live) {
  void *p = tp->t[i];
  tp->t[i] = NULL;
  live_sub(live, tp->n[i]);
  return a->free(a, p, s);
}

/* The kernels and the allocations, in the sample's order; stops at the first failure. */
static bool frame_body(allocator *a, const pipeline *pl, int lane, int frame, temps *tp,
                       live_count *live) {
  const int w = pl->w, h = pl->h;
  const size_t px = (size_t)w * (size_t)h;
  const cudaStream_t s = pl->streams[lane];
  return LAUNCH(bench_synth(pl->rgb[lane], w, h, frame, s)) &&
         tmp_alloc(a, tp, 0, px * sizeof(float), s, live) &&
         LAUNCH(bench_luma(pl->rgb[lane], tp->t[0], w, h, s)) &&
         tmp_alloc(a, tp, 1, px * sizeof(float), s, live) &&
         LAUNCH(bench_blur_h(tp->t[0], tp->t[1], w, h, s)) && tmp_free(a, tp, 0, s, live) &&
         tmp_alloc(a, tp, 2, px * sizeof(float), s, live) &&
         LAUNCH(bench_blur_v(tp->t[1], tp->t[2], w, h, s)) && tmp_free(a, tp, 1, s, live) &&
         tmp_alloc(a, tp, 3, px * sizeof(float), s, live) &&
         tmp_alloc(a, tp, 4, sizeof(unsigned), s, live) &&
         bench_cuda_ok(cudaMemsetAsync(tp->t[4], 0, sizeof(unsigned), s), "cudaMemsetAsync(peak)",
                       __FILE__, __LINE__) &&
         LAUNCH(bench_sobel(tp->t[2], tp->t[3], tp->t[4], w, h, s)) &&
         tmp_free(a, tp, 2, s, live) &&
         LAUNCH(bench_normalise(tp->t[3], tp->t[4], pl->out[lane], pl->sum + lane, w, h, s)) &&
         tmp_free(a, tp, 3, s, live) && tmp_free(a, tp, 4, s, live);
}

/* One frame; on failure whatever temporaries are left go back, so nothing leaks. */
static bool frame(allocator *a, const pipeline *pl, int lane, int f, live_count *live) {
  temps tp;
  memset(&tp, 0, sizeof tp);
  if (frame_body(a, pl, lane, f, &tp, live)) return true;
  for (int i = 0; i < PIPELINE_PAIRS; ++i)
    if (tp.t[i] != NULL) (void)tmp_free(a, &tp, i, pl->streams[lane], live);
  return false;
}

bool pipeline_run(allocator *a, const pipeline *pl, int first, int frames, int group,
                  live_count *live, double *queue_ns, double *wall_ns) {
  *queue_ns = 0, *wall_ns = 0;
  for (int g = 0; g < frames; g += group) {
    const int end = g + group < frames ? g + group : frames;
    const double t0 = bench_now_ns();
    for (int f = first + g; f < first + end; ++f)
      if (!frame(a, pl, f % pl->lanes, f, live)) return false;
    const double t1 = bench_now_ns();
    if (!sync_streams(pl->streams, pl->lanes)) return false;
    *queue_ns += t1 - t0;
    *wall_ns += bench_now_ns() - t0;
  }
  return true;
}
