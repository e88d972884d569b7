/* The five-kernel image pipeline of samples/pipeline.cu (what scripts/demo runs), with its
 * temporaries taken from the allocator under test. Per frame, on the frame's stream:
 *
 *   synth_frame  input RGB8 (per lane, made once)
 *   1 luma       -> lum   (temp)
 *   2 blur_h     lum   -> hblur (temp)             free lum
 *   3 blur_v     hblur -> vblur (temp)             free hblur
 *   4 sobel      vblur -> grad (temp), peak (temp) free vblur
 *   5 normalise  grad, peak -> output (per lane)   free grad, peak
 *
 * 5 alloc+free pairs per frame: four of w*h floats (31.6 MiB at 3840x2160) and one of 4 B.
 * Frames go round robin over the lanes' streams. */
#ifndef SPOOL_BENCH_PIPELINE_H
#define SPOOL_BENCH_PIPELINE_H

#include "strategy.h"
#include "workload.h"

enum { PIPELINE_PAIRS = 5 }; /* alloc+free pairs per frame */

typedef struct pipeline {
  int w, h;
  const cudaStream_t *streams;     /* one per lane */
  int lanes;                       /* at most BENCH_MAX_STREAMS */
  uint8_t *rgb[BENCH_MAX_STREAMS]; /* per lane, cudaMalloc'd once: not part of what is compared */
  uint8_t *out[BENCH_MAX_STREAMS];
  unsigned long long *sum;         /* output checksums, one per lane */
} pipeline;

/* Makes the long-lived buffers of `lanes` lanes, lane i on streams[i]. pipeline_close releases
 * whatever was made. */
bool pipeline_open(pipeline *pl, int w, int h, const cudaStream_t *streams, int lanes);
bool pipeline_close(pipeline *pl);

/* frames frames numbered from first, round robin, in groups of `group` frames: the host time
 * to queue each group is summed into *queue_ns, and the group's time until its streams are
 * synchronized into *wall_ns. Queuing a few frames at a time keeps the host from waiting for
 * the GPU, so *queue_ns is what the host spends: launches and allocator calls (and, for
 * cudaFree, its waits for the device). */
bool pipeline_run(allocator *a, const pipeline *pl, int first, int frames, int group,
                  live_count *live, double *queue_ns, double *wall_ns);

#endif /* SPOOL_BENCH_PIPELINE_H */
