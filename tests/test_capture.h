/* The capture a test has open, for the suites that capture (check_capture, check_capture_odd).
 * A failed assertion inside a capture jumps past its end, and a capture left open makes the
 * later tests' CUDA calls fail too (the gpu suites run in one process, and a global-mode capture
 * forbids this thread the unsafe calls): the teardown, end_open_capture, ends it. */
#ifndef SPOOL_TEST_CAPTURE_H
#define SPOOL_TEST_CAPTURE_H

#include "test_main.h"

static cudaStream_t open_capture;

static inline void begin_capture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  CK_CUDA(cudaStreamBeginCapture(s, mode));
  open_capture = s;
}

static inline cudaError_t end_capture(cudaStream_t s, cudaGraph_t *graph) {
  open_capture = NULL;
  return cudaStreamEndCapture(s, graph);
}

static inline void end_open_capture(void) {
  if (!open_capture) return;
  cudaGraph_t g = NULL;
  if (cudaStreamEndCapture(open_capture, &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
  open_capture = NULL;
}

/* Instantiates graph, launches it once on s, and returns the first byte at ptr afterwards;
 * the graph and its executable graph are destroyed. */
static inline unsigned char launch_once_and_read(cudaGraph_t graph, cudaStream_t s,
                                                 const void *ptr) {
  cudaGraphExec_t exec = NULL;
  CK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CK_CUDA(cudaGraphLaunch(exec, s));
  unsigned char first = 0;
  CK_CUDA(cudaMemcpyAsync(&first, ptr, 1, cudaMemcpyDeviceToHost, s));
  CK_CUDA(cudaStreamSynchronize(s));
  CK_CUDA(cudaGraphExecDestroy(exec));
  CK_CUDA(cudaGraphDestroy(graph));
  return first;
}

/* A test case with the usual fixture and end_open_capture after each test. */
static inline TCase *test_capture_tcase(const char *name) {
  TCase *tc = test_tcase(name);
  tcase_add_checked_fixture(tc, NULL, end_open_capture);
  return tc;
}

#endif /* SPOOL_TEST_CAPTURE_H */
