/* Tests of cudasim itself: the simulated runtime must behave as documented in cudasim.c before
 * spool's suites can trust it. Every test starts from cudasim_reset(). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUresult and CUstream for the simulated driver entry point */
#include <cuda_runtime_api.h>

#include "cudasim.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t ck_e_ = (call);                                                                   \
    ck_assert_msg(ck_e_ == cudaSuccess, "%s failed: %s", #call, cudaGetErrorName(ck_e_));         \
  } while (0)

#define CK_ERR(call, want)                                                                        \
  do {                                                                                            \
    cudaError_t ck_e_ = (call);                                                                   \
    ck_assert_msg(ck_e_ == (want), "%s returned %s, expected %s", #call, cudaGetErrorName(ck_e_), \
                  cudaGetErrorName(want));                                                        \
  } while (0)

static void setup(void) { cudasim_reset(); }

static cudaStream_t new_stream(void) {
  cudaStream_t s = NULL;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

static cudaMemPool_t new_pool(int device, size_t max_size) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
#if CUDART_VERSION >= 12020
  props.maxSize = max_size;
#else
  (void)max_size;
#endif
  cudaMemPool_t p = NULL;
  CK(cudaMemPoolCreate(&p, &props));
  return p;
}

/* cudaMemPoolCreate's error in *err; the pool or NULL. */
static cudaMemPool_t new_pool_raw(cudaError_t *err) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t p = NULL;
  *err = cudaMemPoolCreate(&p, &props);
  return *err == cudaSuccess ? p : NULL;
}

static uint64_t attr_u64(cudaMemPool_t p, enum cudaMemPoolAttr a) {
  uint64_t v = 0;
  CK(cudaMemPoolGetAttribute(p, a, &v));
  return v;
}

static void set_threshold(cudaMemPool_t p, uint64_t v) {
  CK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &v));
}

static uint64_t reserved(cudaMemPool_t p) { return attr_u64(p, cudaMemPoolAttrReservedMemCurrent); }
static uint64_t used(cudaMemPool_t p) { return attr_u64(p, cudaMemPoolAttrUsedMemCurrent); }

static void *alloc(cudaMemPool_t p, size_t size, cudaStream_t s) {
  void *ptr = NULL;
  CK(cudaMallocFromPoolAsync(&ptr, size, p, s));
  ck_assert_ptr_nonnull(ptr);
  return ptr;
}

/* ---- errors, driver, devices ----------------------------------------------------------------- */

START_TEST(error_names) {
  ck_assert_str_eq(cudaGetErrorName(cudaSuccess), "cudaSuccess");
  ck_assert_str_eq(cudaGetErrorString(cudaSuccess), "no error");
  ck_assert_str_eq(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  ck_assert_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  ck_assert_str_eq(cudaGetErrorName(cudaErrorInsufficientDriver), "cudaErrorInsufficientDriver");
  ck_assert_str_eq(cudaGetErrorName(cudaErrorInvalidResourceHandle),
                   "cudaErrorInvalidResourceHandle");
  ck_assert_str_eq(cudaGetErrorString(cudaErrorNoDevice), "no CUDA-capable device is detected");
  ck_assert_str_eq(cudaGetErrorName((cudaError_t)12345), "unrecognized error code");
  ck_assert_str_eq(cudaGetErrorString((cudaError_t)12345), "unrecognized error code");
}
END_TEST

START_TEST(last_error) {
  CK(cudaGetLastError());
  CK_ERR(cudaSetDevice(7), cudaErrorInvalidDevice);
  CK(cudaSetDevice(0)); /* success does not clear it */
  CK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  CK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  CK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
  CK(cudaGetLastError());
  cudaStream_t s = new_stream();
  cudasim_hold(s);
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  CK_ERR(cudaStreamQuery(s), cudaErrorNotReady); /* a status, not an error */
  CK(cudaGetLastError());
}
END_TEST

START_TEST(no_driver) {
  cudasim_set_driver_version(0);
  int n = -1, v = -1;
  CK_ERR(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
  CK(cudaDriverGetVersion(&v));
  ck_assert_int_eq(v, 0);
  CK(cudaRuntimeGetVersion(&v));
  ck_assert_int_eq(v, CUDART_VERSION);
  cudaStream_t s;
  CK_ERR(cudaStreamCreate(&s), cudaErrorInsufficientDriver);
  cudaMemPool_t p;
  CK_ERR(cudaDeviceGetDefaultMemPool(&p, 0), cudaErrorInsufficientDriver);
  CK_ERR(cudaPeekAtLastError(), cudaErrorInsufficientDriver);
  CK_ERR(cudaGetLastError(), cudaErrorInsufficientDriver);
  ck_assert_str_eq(cudaGetErrorName(cudaErrorInsufficientDriver), "cudaErrorInsufficientDriver");
  cudasim_set_driver_version(12080);
  CK(cudaDriverGetVersion(&v));
  ck_assert_int_eq(v, 12080);
  CK(cudaGetDeviceCount(&n));
  ck_assert_int_eq(n, 1);
}
END_TEST

START_TEST(no_device) {
  cudasim_set_device_count(0);
  int n = -1, v = 0;
  CK_ERR(cudaGetDeviceCount(&n), cudaErrorNoDevice);
  ck_assert_int_eq(n, 0);
  CK_ERR(cudaSetDevice(0), cudaErrorNoDevice);
  cudaStream_t s;
  CK_ERR(cudaStreamCreate(&s), cudaErrorNoDevice);
  cudaMemPool_t p;
  CK_ERR(cudaDeviceGetDefaultMemPool(&p, 0), cudaErrorNoDevice);
  size_t f, t;
  CK_ERR(cudaMemGetInfo(&f, &t), cudaErrorNoDevice);
  CK(cudaDriverGetVersion(&v));
  ck_assert_int_eq(v, 13000);
  ck_assert_int_eq(cudasim_stream_count(), 0);
}
END_TEST

START_TEST(devices) {
  cudasim_set_device_count(3);
  int n = 0, d = -1, v = -1;
  CK(cudaGetDeviceCount(&n));
  ck_assert_int_eq(n, 3);
  CK(cudaGetDevice(&d));
  ck_assert_int_eq(d, 0);
  CK(cudaSetDevice(2));
  CK(cudaGetDevice(&d));
  ck_assert_int_eq(d, 2);
  CK_ERR(cudaSetDevice(3), cudaErrorInvalidDevice);
  CK_ERR(cudaSetDevice(-1), cudaErrorInvalidDevice);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 1));
  ck_assert_int_eq(v, 1);
  cudasim_set_pools_supported(1, 0);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 1));
  ck_assert_int_eq(v, 0);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
  ck_assert_int_eq(v, 132);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  ck_assert_int_eq(v, cudaMemHandleTypePosixFileDescriptor);
  CK_ERR(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 3), cudaErrorInvalidDevice);
  cudasim_set_capacity(1, 8 * GiB);
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 1));
  ck_assert_str_eq(prop.name, "cudasim device 1");
  ck_assert_uint_eq(prop.totalGlobalMem, 8 * GiB);
  ck_assert_int_eq(prop.major, 9);
  ck_assert_int_eq(prop.minor, 0);
  ck_assert_int_eq(prop.multiProcessorCount, 132);
  CK_ERR(cudaGetDeviceProperties(&prop, 5), cudaErrorInvalidDevice);
}
END_TEST

START_TEST(peers) {
  cudasim_set_device_count(2);
  int can = -1;
  CK(cudaDeviceCanAccessPeer(&can, 0, 0));
  ck_assert_int_eq(can, 0);
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  ck_assert_int_eq(can, 1);
  cudasim_set_can_access_peer(1, 0, 0);
  CK(cudaDeviceCanAccessPeer(&can, 1, 0));
  ck_assert_int_eq(can, 0);
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  ck_assert_int_eq(can, 1);
  CK_ERR(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
  CK_ERR(cudaDeviceCanAccessPeer(&can, -1, 0), cudaErrorInvalidDevice);
}
END_TEST

/* ---- fault injection and counting ------------------------------------------------------------ */

START_TEST(fail_nth) {
  cudaStream_t s;
  cudasim_fail("cudaStreamCreate", 2, cudaErrorMemoryAllocation);
  cudasim_fail("cudaStreamCreate", 4, cudaErrorUnknown);
  cudasim_fail("cudaEventCreate", 1, cudaErrorLaunchFailure);
  ck_assert_int_eq(cudasim_armed(), 3);
  CK(cudaStreamCreate(&s));
  s = (cudaStream_t)(uintptr_t)0x1234;
  CK_ERR(cudaStreamCreate(&s), cudaErrorMemoryAllocation);
  ck_assert_ptr_eq(s, (cudaStream_t)(uintptr_t)0x1234); /* nothing else happened */
  CK_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  CK(cudaStreamCreate(&s));
  CK_ERR(cudaStreamCreate(&s), cudaErrorUnknown);
  CK(cudaStreamCreate(&s));
  ck_assert_int_eq(cudasim_stream_count(), 3);
  ck_assert_int_eq(cudasim_calls("cudaStreamCreate"), 5);
  cudaEvent_t ev;
  CK_ERR(cudaEventCreate(&ev), cudaErrorLaunchFailure);
  CK(cudaEventCreate(&ev));
  ck_assert_int_eq(cudasim_armed(), 0);
  /* nth counts from the moment of arming */
  cudasim_fail("cudaStreamCreate", 1, cudaErrorNotPermitted);
  CK_ERR(cudaStreamCreate(&s), cudaErrorNotPermitted);
}
END_TEST

START_TEST(fail_does_nothing) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  void *ptr = (void *)(uintptr_t)0x5A5A5A50u;
  cudasim_fail("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  CK_ERR(cudaMallocFromPoolAsync(&ptr, MiB, p, s), cudaErrorMemoryAllocation);
  ck_assert_ptr_eq(ptr, (void *)(uintptr_t)0x5A5A5A50u);
  ck_assert_uint_eq(reserved(p), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_pending(s), 0);
  ptr = alloc(p, MiB, s);
  cudasim_hold(s);
  cudasim_fail("cudaFreeAsync", 1, cudaErrorIllegalAddress);
  CK_ERR(cudaFreeAsync(ptr, s), cudaErrorIllegalAddress);
  ck_assert_int_eq(cudasim_pending(s), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  CK(cudaFreeAsync(ptr, s));
  ck_assert_int_eq(cudasim_pending(s), 1);
  /* an armed failure fires even when the call would fail anyway for another reason */
  cudasim_set_driver_version(0);
  cudasim_fail("cudaStreamSynchronize", 1, cudaErrorUnknown);
  CK_ERR(cudaStreamSynchronize(s), cudaErrorUnknown);
  CK_ERR(cudaStreamSynchronize(s), cudaErrorInsufficientDriver);
}
END_TEST

START_TEST(calls_counted) {
  ck_assert_int_eq(cudasim_calls("cudaMalloc"), 0);
  void *p;
  CK(cudaMalloc(&p, 100));
  CK(cudaFree(p));
  CK(cudaFree(NULL));
  CK_ERR(cudaFree((char *)p + 1), cudaErrorInvalidValue);
  ck_assert_int_eq(cudasim_calls("cudaMalloc"), 1);
  ck_assert_int_eq(cudasim_calls("cudaFree"), 3);
  ck_assert_int_eq(cudasim_calls("cudaNoSuchCall"), 0);
  (void)cudaGetErrorName(cudaSuccess);
  ck_assert_int_eq(cudasim_calls("cudaGetErrorName"), 1);
  cudasim_hold(NULL); /* the control API is not counted */
  ck_assert_int_eq(cudasim_calls("cudasim_hold"), 0);
}
END_TEST

START_TEST(calls_all_lists_every_api_in_first_call_order) {
  ck_assert_uint_eq(cudasim_calls_all(NULL, NULL, 0), 0);
  void *p;
  CK(cudaMalloc(&p, 100));
  CK(cudaFree(p));
  CK(cudaFree(NULL));
  const char *names[4] = {NULL};
  long counts[4] = {0};
  ck_assert_uint_eq(cudasim_calls_all(names, counts, 4), 2);
  ck_assert_str_eq(names[0], "cudaMalloc");
  ck_assert_int_eq(counts[0], 1);
  ck_assert_str_eq(names[1], "cudaFree");
  ck_assert_int_eq(counts[1], 2);
  ck_assert_uint_eq(cudasim_calls_all(names, counts, 1), 2); /* the total, whatever fits */
  cudasim_reset();
  ck_assert_uint_eq(cudasim_calls_all(names, counts, 4), 0);
}
END_TEST

/* ---- streams and events ---------------------------------------------------------------------- */

START_TEST(hold_release) {
  cudaStream_t s = new_stream();
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  ck_assert_int_eq(cudasim_pending(s), 0); /* not held: completes at once */
  cudasim_hold(s);
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  CK(cudaEventRecord(ev, s));
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  ck_assert_int_eq(cudasim_pending(s), 3);
  CK_ERR(cudaStreamQuery(s), cudaErrorNotReady);
  CK_ERR(cudaEventQuery(ev), cudaErrorNotReady);
  CK(cudaEventSynchronize(ev)); /* completes up to the event only */
  CK(cudaEventQuery(ev));
  ck_assert_int_eq(cudasim_pending(s), 1);
  CK(cudaStreamSynchronize(s));
  ck_assert_int_eq(cudasim_pending(s), 0);
  CK(cudaStreamQuery(s));
  CK(cudaMemsetAsync(NULL, 0, 0, s)); /* the hold stays after a synchronize */
  ck_assert_int_eq(cudasim_pending(s), 1);
  cudasim_release(s);
  ck_assert_int_eq(cudasim_pending(s), 0);
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  ck_assert_int_eq(cudasim_pending(s), 0);
  CK(cudaEventDestroy(ev));
  CK_ERR(cudaEventQuery(ev), cudaErrorInvalidResourceHandle);
}
END_TEST

/* cudaStreamWaitEvent outside capture: the waiting stream's work completes only once the
 * event's work has; a synchronize of the waiting stream completes what it waits for; a
 * destroyed stream is waited for no more. */
START_TEST(stream_waits) {
  cudaStream_t a = new_stream(), b = new_stream(), c = new_stream();
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudasim_hold(a);
  CK(cudaMemsetAsync(NULL, 0, 0, a));
  CK(cudaEventRecord(ev, a));
  CK(cudaStreamWaitEvent(b, ev, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, b));
  ck_assert_int_eq(cudasim_pending(b), 1); /* b is not held, but waits for a */
  CK_ERR(cudaStreamQuery(b), cudaErrorNotReady);
  CK(cudaMemsetAsync(NULL, 0, 0, a)); /* after the event: b does not wait for it */
  cudasim_release(a);
  ck_assert_int_eq(cudasim_pending(b), 0);
  CK(cudaStreamQuery(b));
  /* A wait on an event that is done already: nothing to wait for. */
  CK(cudaStreamWaitEvent(b, ev, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, b));
  ck_assert_int_eq(cudasim_pending(b), 0);
  /* Synchronizing the waiting stream completes the work it waits for. */
  cudasim_hold(a);
  CK(cudaMemsetAsync(NULL, 0, 0, a));
  CK(cudaEventRecord(ev, a));
  CK(cudaMemsetAsync(NULL, 0, 0, a));
  CK(cudaStreamWaitEvent(c, ev, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, c));
  ck_assert_int_eq(cudasim_pending(c), 1);
  CK(cudaStreamSynchronize(c));
  ck_assert_int_eq(cudasim_pending(c), 0);
  ck_assert_int_eq(cudasim_pending(a), 1); /* up to the event only */
  /* A stream destroyed while another waits for it: the wait is over. */
  CK(cudaEventRecord(ev, a));
  CK(cudaStreamWaitEvent(c, ev, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, c));
  ck_assert_int_eq(cudasim_pending(c), 1);
  CK(cudaStreamDestroy(a));
  ck_assert_int_eq(cudasim_pending(c), 0);
  CK(cudaEventDestroy(ev));
}
END_TEST

START_TEST(device_sync) {
  cudasim_set_device_count(2);
  cudaStream_t a = new_stream(), b = new_stream();
  CK(cudaSetDevice(1));
  cudaStream_t c = new_stream();
  cudasim_hold(a);
  cudasim_hold(b);
  cudasim_hold(c);
  CK(cudaMemsetAsync(NULL, 0, 0, a));
  CK(cudaMemsetAsync(NULL, 0, 0, b));
  CK(cudaMemsetAsync(NULL, 0, 0, c));
  CK(cudaSetDevice(0));
  CK(cudaDeviceSynchronize());
  ck_assert_int_eq(cudasim_pending(a), 0);
  ck_assert_int_eq(cudasim_pending(b), 0);
  ck_assert_int_eq(cudasim_pending(c), 1); /* another device */
  CK(cudaStreamDestroy(c));                 /* completes it, drops the hold */
  ck_assert_int_eq(cudasim_stream_count(), 2);
  ck_assert_int_eq(cudasim_pending(c), -1);
  CK_ERR(cudaStreamSynchronize(c), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaStreamDestroy(c), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaStreamDestroy(cudaStreamPerThread), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(stream_properties) {
  cudaStream_t s, q;
  unsigned flags = 9;
  int prio = 9, least = 9, greatest = 9;
  CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -100));
  CK(cudaStreamGetFlags(s, &flags));
  ck_assert_uint_eq(flags, cudaStreamNonBlocking);
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CK(cudaStreamGetPriority(s, &prio));
  ck_assert_int_eq(prio, greatest); /* clamped */
  CK(cudaStreamCreate(&q));
  CK(cudaStreamGetFlags(q, &flags));
  ck_assert_uint_eq(flags, cudaStreamDefault);
  CK_ERR(cudaStreamCreateWithFlags(&q, 0x80), cudaErrorInvalidValue);
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  CK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventRecord(ev, s));
  CK(cudaStreamWaitEvent(q, ev, 0));
  CK_ERR(cudaStreamWaitEvent(q, (cudaEvent_t)(uintptr_t)0x999, 0),
         cudaErrorInvalidResourceHandle);
  float ms = -1.0f;
  CK_ERR(cudaEventElapsedTime(&ms, ev, ev), cudaErrorInvalidResourceHandle);
  cudaEvent_t e1, e2;
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  CK(cudaEventRecord(e1, NULL));
  CK(cudaEventRecord(e2, cudaStreamPerThread));
  CK(cudaEventElapsedTime(&ms, e1, e2));
  ck_assert(ms == 0.0f);
  CK_ERR(cudaEventCreateWithFlags(&e1, cudaEventInterprocess), cudaErrorInvalidValue);
  CK_ERR(cudaStreamQuery((cudaStream_t)(uintptr_t)0x999), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(legacy_stream) {
  cudasim_hold(NULL);
  CK(cudaMemsetAsync(NULL, 0, 0, cudaStreamLegacy));
  ck_assert_int_eq(cudasim_pending(NULL), 1);
  ck_assert_int_eq(cudasim_pending(cudaStreamLegacy), 1);
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 0);
  ck_assert_int_eq(cudasim_stream_count(), 0); /* built-in streams are not counted */
  CK(cudaDeviceSynchronize());
  ck_assert_int_eq(cudasim_pending(NULL), 0);
}
END_TEST

typedef struct ptds_probe {
  long pending_before, pending_after;
  cudaError_t last;
  int device;
} ptds_probe;

static void *ptds_thread(void *arg) {
  ptds_probe *pr = arg;
  pr->pending_before = cudasim_pending(cudaStreamPerThread);
  cudasim_hold(cudaStreamPerThread);
  (void)cudaMemsetAsync(NULL, 0, 0, cudaStreamPerThread);
  (void)cudaMemsetAsync(NULL, 0, 0, cudaStreamPerThread);
  pr->pending_after = cudasim_pending(cudaStreamPerThread);
  pr->last = cudaPeekAtLastError();
  (void)cudaGetDevice(&pr->device);
  (void)cudaSetDevice(42); /* this thread's last error only */
  return NULL;
}

START_TEST(per_thread_stream) {
  cudasim_set_device_count(2);
  CK(cudaSetDevice(1));
  CK_ERR(cudaSetDevice(9), cudaErrorInvalidDevice);
  cudasim_hold(cudaStreamPerThread);
  CK(cudaMemsetAsync(NULL, 0, 0, cudaStreamPerThread));
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 1);
  ck_assert_int_eq(cudasim_pending(NULL), 0);
  ptds_probe pr;
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, ptds_thread, &pr), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_int_eq(pr.pending_before, 0);
  ck_assert_int_eq(pr.pending_after, 2);
  ck_assert_int_eq(pr.last, cudaSuccess); /* last error is per thread */
  ck_assert_int_eq(pr.device, 0);         /* current device is per thread */
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 1);
  CK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
  CK(cudaStreamSynchronize(cudaStreamPerThread));
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 0);
  /* per device, too */
  CK(cudaSetDevice(0));
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 0);
}
END_TEST

/* ---- pools ----------------------------------------------------------------------------------- */

START_TEST(pool_create_rules) {
  cudasim_set_device_count(2);
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 1;
  cudaMemPool_t p = NULL;
  CK(cudaMemPoolCreate(&p, &props));
  ck_assert_int_eq(cudasim_pool_count(), 1);
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrReleaseThreshold), 0);
  props.location.id = 2;
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorInvalidDevice);
  props.location.id = 0;
  props.location.type = cudaMemLocationTypeHost;
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorInvalidValue);
  props.location.type = cudaMemLocationTypeDevice;
  props.allocType = cudaMemAllocationTypeInvalid;
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorInvalidValue);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  CK(cudaMemPoolCreate(&p, &props));
  props.handleTypes = cudaMemHandleTypeWin32;
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorNotSupported);
  props.handleTypes = cudaMemHandleTypeNone;
  cudasim_set_pools_supported(0, 0);
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorNotSupported);
  CK_ERR(cudaDeviceGetDefaultMemPool(&p, 0), cudaErrorNotSupported);
  ck_assert_int_eq(cudasim_pool_count(), 2);
  CK_ERR(cudaMemPoolCreate(&p, NULL), cudaErrorInvalidValue);
}
END_TEST

START_TEST(default_pool) {
  cudaMemPool_t d = NULL, cur = NULL;
  CK(cudaDeviceGetDefaultMemPool(&d, 0));
  CK(cudaDeviceGetMemPool(&cur, 0));
  ck_assert_ptr_eq(d, cur);
  ck_assert_int_eq(cudasim_pool_count(), 0); /* default pools are not counted */
  ck_assert_uint_eq(attr_u64(d, cudaMemPoolAttrReleaseThreshold), 0);
  CK_ERR(cudaMemPoolDestroy(d), cudaErrorInvalidValue);
  cudaMemPool_t p = new_pool(0, 0);
  CK(cudaDeviceSetMemPool(0, p));
  CK(cudaDeviceGetMemPool(&cur, 0));
  ck_assert_ptr_eq(cur, p);
  void *ptr = NULL;
  CK(cudaMallocAsync(&ptr, 1000, NULL)); /* from the current pool */
  ck_assert_uint_eq(used(p), 1024);
  ck_assert_uint_eq(used(d), 0);
  CK(cudaFreeAsync(ptr, NULL));
  CK(cudaMemPoolDestroy(p)); /* the default becomes current again */
  CK(cudaDeviceGetMemPool(&cur, 0));
  ck_assert_ptr_eq(cur, d);
  CK_ERR(cudaMemPoolDestroy(p), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaMemPoolTrimTo(p, 0), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaDeviceSetMemPool(0, p), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(alloc_basics) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  void *ptr = NULL;
  CK_ERR(cudaMallocFromPoolAsync(&ptr, 0, p, s), cudaErrorInvalidValue);
  CK_ERR(cudaMallocFromPoolAsync(NULL, 1, p, s), cudaErrorInvalidValue);
  CK_ERR(cudaMallocFromPoolAsync(&ptr, 1, p, (cudaStream_t)(uintptr_t)0x77),
         cudaErrorInvalidResourceHandle);
  void *a = alloc(p, 1, s), *b = alloc(p, 300, s);
  /* 512-byte blocks, as an H200 lays them out. */
  ck_assert_uint_eq((uintptr_t)a % 512, 0);
  ck_assert_uint_eq((uintptr_t)b % 512, 0);
  ck_assert_uint_eq(used(p), 512 + 512);
  ck_assert_uint_eq(reserved(p), 2 * MiB);
  ck_assert_int_eq(cudasim_live_allocations(), 2);
  CK_ERR(cudaFreeAsync(NULL, s), cudaErrorInvalidValue);
  CK_ERR(cudaFreeAsync((char *)b + 256, s), cudaErrorInvalidValue);
  CK(cudaFreeAsync(b, s));
  CK_ERR(cudaFreeAsync(b, s), cudaErrorInvalidValue); /* double free */
  ck_assert_uint_eq(used(p), 512);
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrUsedMemHigh), 1024);
  /* the free may name any pool's block: it finds the owner */
  cudaMemPool_t other = new_pool(0, 0);
  (void)other;
  CK(cudaFreeAsync(a, NULL));
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  /* a big allocation is cheap: memory is committed lazily */
  void *big = alloc(p, GiB + 1, s);
  ck_assert_uint_eq(reserved(p), GiB + 4 * MiB); /* 2 MiB for a and b, then GiB + 2 MiB */
  CK(cudaFreeAsync(big, s));
}
END_TEST

/* With an H200's 32 MiB segments (bench/pool_segments.c measured them): an allocation no
 * segment has room for reserves a multiple of 32 MiB; a later small one packs into a segment's
 * free space; a reset goes back to 2 MiB units. */
START_TEST(pool_segments_of_an_h200) {
  cudasim_set_pool_segment(CUDASIM_H200_POOL_SEGMENT);
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream();
  void *a = alloc(p, 512, s);
  ck_assert_uint_eq(reserved(p), 32 * MiB);
  void *b = alloc(p, 20 * MiB, s); /* in the first segment's free space */
  ck_assert_uint_eq(reserved(p), 32 * MiB);
  void *c = alloc(p, 33 * MiB, s);
  ck_assert_uint_eq(reserved(p), 96 * MiB);
  void *d = alloc(p, 30 * MiB, s); /* the rest of c's 64 MiB */
  ck_assert_uint_eq(reserved(p), 96 * MiB);
  void *e = alloc(p, 100 * MiB, s);
  ck_assert_uint_eq(reserved(p), 224 * MiB);
  void *all[] = {a, b, c, d, e};
  for (int i = 0; i < 5; i++) CK(cudaFreeAsync(all[i], s));
  CK(cudaStreamSynchronize(s));
  cudasim_set_pool_segment(3 * MiB); /* not a multiple of 2 MiB: ignored */
  cudaMemPool_t q = new_pool(0, 0);
  void *f = alloc(q, 512, s);
  ck_assert_uint_eq(reserved(q), 32 * MiB);
  CK(cudaFreeAsync(f, s));
  CK(cudaStreamSynchronize(s));
  cudasim_reset();
  p = new_pool(0, 0);
  void *g = alloc(p, 512, new_stream());
  ck_assert_uint_eq(reserved(p), 2 * MiB);
  CK(cudaFreeAsync(g, NULL));
}
END_TEST

START_TEST(reuse_same_stream) {
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream();
  cudasim_hold(s);
  void *a = alloc(p, 2 * MiB, s);
  CK(cudaFreeAsync(a, s));
  ck_assert_int_eq(cudasim_pending(s), 2);
  void *b = alloc(p, 2 * MiB, s); /* stream order makes the pending free safe */
  ck_assert_ptr_eq(a, b);
  ck_assert_uint_eq(reserved(p), 2 * MiB);
}
END_TEST

START_TEST(reuse_other_stream) {
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s1 = new_stream(), s2 = new_stream();
  cudasim_hold(s1);
  void *a = alloc(p, 2 * MiB, s1);
  CK(cudaFreeAsync(a, s1));
  void *b = alloc(p, 2 * MiB, s2); /* the free has not completed: not reusable by s2 */
  ck_assert_ptr_ne(a, b);
  ck_assert_uint_eq(reserved(p), 4 * MiB);
  CK(cudaFreeAsync(b, s2));
  cudasim_release(s1);
  ck_assert_uint_eq(reserved(p), 4 * MiB); /* a release is no synchronize */
  void *c = alloc(p, 2 * MiB, s2);
  void *d = alloc(p, 2 * MiB, s2);
  ck_assert(c == a || c == b);
  ck_assert(d == a || d == b);
  ck_assert_uint_eq(reserved(p), 4 * MiB);
}
END_TEST

START_TEST(coalesce) {
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream();
  char *a = alloc(p, MiB, s), *b = alloc(p, MiB, s);
  ck_assert_ptr_eq(b, a + MiB); /* carved from one 2 MiB segment */
  ck_assert_uint_eq(reserved(p), 2 * MiB);
  CK(cudaFreeAsync(a, s));
  CK(cudaFreeAsync(b, s));
  char *c = alloc(p, 2 * MiB, s);
  ck_assert_ptr_eq(c, a);
  ck_assert_uint_eq(reserved(p), 2 * MiB);
}
END_TEST

START_TEST(release_at_sync) {
  cudaMemPool_t keep = new_pool(0, 0), drop = new_pool(0, 0);
  set_threshold(keep, UINT64_MAX);
  cudaStream_t s = new_stream(), h = new_stream();
  cudasim_hold(h);
  void *pending = alloc(drop, 2 * MiB, h);
  CK(cudaFreeAsync(pending, h));
  CK(cudaFreeAsync(alloc(keep, 4 * MiB, s), s));
  CK(cudaFreeAsync(alloc(drop, 4 * MiB, s), s)); /* cannot reuse h's pending free */
  ck_assert_uint_eq(reserved(drop), 6 * MiB);
  CK(cudaStreamSynchronize(s));
  ck_assert_uint_eq(reserved(keep), 4 * MiB);
  ck_assert_uint_eq(reserved(drop), 2 * MiB); /* the segment whose free is pending stays */
  CK(cudaStreamSynchronize(h));
  ck_assert_uint_eq(reserved(drop), 0);
  ck_assert_uint_eq(attr_u64(drop, cudaMemPoolAttrReservedMemHigh), 6 * MiB);
  /* a threshold between: whole segments go while above it */
  set_threshold(keep, 3 * MiB);
  CK(cudaDeviceSynchronize());
  ck_assert_uint_eq(reserved(keep), 0);
  void *x = alloc(keep, 2 * MiB, s), *y = alloc(keep, 2 * MiB, s), *z = alloc(keep, 2 * MiB, s);
  CK(cudaFreeAsync(x, s));
  CK(cudaFreeAsync(y, s));
  CK(cudaFreeAsync(z, s));
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  CK(cudaEventRecord(ev, s));
  CK(cudaEventSynchronize(ev));
  ck_assert_uint_eq(reserved(keep), 2 * MiB);
  /* the default pool keeps nothing by default */
  void *m = NULL;
  CK(cudaMallocAsync(&m, 3 * MiB, s));
  CK(cudaFreeAsync(m, s));
  cudaMemPool_t d;
  CK(cudaDeviceGetDefaultMemPool(&d, 0));
  ck_assert_uint_eq(reserved(d), 4 * MiB);
  CK(cudaStreamSynchronize(s));
  ck_assert_uint_eq(reserved(d), 0);
}
END_TEST

START_TEST(trim_to) {
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream(), h = new_stream();
  void *a = alloc(p, 2 * MiB, s), *b = alloc(p, 2 * MiB, s), *c = alloc(p, 2 * MiB, s);
  void *live = alloc(p, 2 * MiB, s);
  cudasim_hold(h);
  void *pend = alloc(p, 2 * MiB, s);
  CK(cudaFreeAsync(pend, h));
  CK(cudaFreeAsync(a, s));
  CK(cudaFreeAsync(b, s));
  CK(cudaFreeAsync(c, s));
  ck_assert_uint_eq(reserved(p), 10 * MiB);
  CK(cudaMemPoolTrimTo(p, 7 * MiB)); /* 10 -> 8; 6 would be below 7 */
  ck_assert_uint_eq(reserved(p), 8 * MiB);
  CK(cudaMemPoolTrimTo(p, 0)); /* the live and the pending segments stay */
  ck_assert_uint_eq(reserved(p), 4 * MiB);
  cudasim_release(h);
  CK(cudaFreeAsync(live, s));
  CK(cudaMemPoolTrimTo(p, 0));
  ck_assert_uint_eq(reserved(p), 0);
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrReservedMemHigh), 10 * MiB);
}
END_TEST

START_TEST(capacity_limit) {
  cudasim_set_capacity(0, 8 * MiB);
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  size_t f = 0, t = 0;
  void *a = alloc(p, 5 * MiB, s);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t, 8 * MiB);
  ck_assert_uint_eq(f, 2 * MiB);
  void *b = (void *)(uintptr_t)0x5A5A5A50u;
  CK_ERR(cudaMallocFromPoolAsync(&b, 3 * MiB, p, s), cudaErrorMemoryAllocation);
  ck_assert_ptr_eq(b, (void *)(uintptr_t)0x5A5A5A50u);
  CK_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  ck_assert_uint_eq(reserved(p), 6 * MiB);
  ck_assert_uint_eq(used(p), 5 * MiB);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  ck_assert_int_eq(cudasim_pending(s), 0); /* a failed allocation enqueues nothing */
  void *m = NULL;
  CK_ERR(cudaMalloc(&m, 3 * MiB), cudaErrorMemoryAllocation);
  CK(cudaMalloc(&m, 1)); /* charged 2 MiB */
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, 0);
  CK(cudaFree(m));
  CK(cudaFreeAsync(a, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, 8 * MiB);
}
END_TEST

START_TEST(max_size_limit) {
#if CUDART_VERSION >= 12020
  cudaMemPool_t p = new_pool(0, 4 * MiB);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream();
  void *a = alloc(p, 3 * MiB, s);
  void *b = NULL;
  CK_ERR(cudaMallocFromPoolAsync(&b, 2 * MiB, p, s), cudaErrorMemoryAllocation);
  ck_assert_uint_eq(reserved(p), 4 * MiB);
  ck_assert_uint_eq(used(p), 3 * MiB);
  b = alloc(p, MiB, s); /* the rest of the segment still fits */
  CK_ERR(cudaMallocFromPoolAsync(&b, 256, p, s), cudaErrorMemoryAllocation);
  CK_ERR(cudaMallocFromPoolAsync(&b, 8 * MiB, p, s), cudaErrorMemoryAllocation);
  CK(cudaFreeAsync(a, s));
  b = alloc(p, 2 * MiB, s);
  ck_assert_uint_eq(reserved(p), 4 * MiB);
#endif
}
END_TEST

START_TEST(attributes) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  int flag = -1;
  for (int a = cudaMemPoolReuseFollowEventDependencies;
       a <= cudaMemPoolReuseAllowInternalDependencies; a++) {
    CK(cudaMemPoolGetAttribute(p, (enum cudaMemPoolAttr)a, &flag));
    ck_assert_int_eq(flag, 1);
    flag = 0;
    CK(cudaMemPoolSetAttribute(p, (enum cudaMemPoolAttr)a, &flag));
    flag = -1;
    CK(cudaMemPoolGetAttribute(p, (enum cudaMemPoolAttr)a, &flag));
    ck_assert_int_eq(flag, 0);
  }
  set_threshold(p, 123);
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrReleaseThreshold), 123);
  uint64_t v = 0;
  CK_ERR(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReservedMemCurrent, &v), cudaErrorInvalidValue);
  CK_ERR(cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemCurrent, &v), cudaErrorInvalidValue);
  void *a = alloc(p, 4 * MiB, s), *b = alloc(p, MiB, s);
  CK(cudaFreeAsync(a, s));
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrUsedMemHigh), 5 * MiB);
  v = 1;
  CK_ERR(cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemHigh, &v), cudaErrorInvalidValue);
  v = 0;
  CK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemHigh, &v));
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrUsedMemHigh), MiB);
  CK(cudaStreamSynchronize(s)); /* threshold 123: the 4 MiB segment goes */
  ck_assert_uint_eq(reserved(p), 2 * MiB);
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrReservedMemHigh), 6 * MiB);
  CK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReservedMemHigh, &v));
  ck_assert_uint_eq(attr_u64(p, cudaMemPoolAttrReservedMemHigh), 2 * MiB);
  CK_ERR(cudaMemPoolSetAttribute(p, (enum cudaMemPoolAttr)99, &v), cudaErrorInvalidValue);
  CK_ERR(cudaMemPoolGetAttribute(p, (enum cudaMemPoolAttr)99, &v), cudaErrorInvalidValue);
  CK_ERR(cudaMemPoolGetAttribute((cudaMemPool_t)(uintptr_t)0x10, cudaMemPoolAttrUsedMemHigh, &v),
         cudaErrorInvalidResourceHandle);
  CK(cudaFreeAsync(b, s));
}
END_TEST

START_TEST(access) {
  cudasim_set_device_count(3);
  cudaMemPool_t p = new_pool(0, 0);
  struct cudaMemAccessDesc d[2];
  memset(d, 0, sizeof d);
  d[0].location.type = cudaMemLocationTypeDevice;
  d[0].flags = cudaMemAccessFlagsProtReadWrite;
  d[1] = d[0];
  d[0].location.id = 0; /* the pool's own device */
  CK_ERR(cudaMemPoolSetAccess(p, d, 1), cudaErrorInvalidDevice);
  d[0].location.id = 3;
  CK_ERR(cudaMemPoolSetAccess(p, d, 1), cudaErrorInvalidDevice);
  d[0].location.type = cudaMemLocationTypeHost;
  d[0].location.id = 1;
  CK_ERR(cudaMemPoolSetAccess(p, d, 1), cudaErrorInvalidValue);
  d[0].location.type = cudaMemLocationTypeDevice;
  d[1].location.id = 2;
  cudasim_set_can_access_peer(2, 0, 0);
  CK_ERR(cudaMemPoolSetAccess(p, d, 2), cudaErrorInvalidDevice);
  struct cudaMemLocation loc = {cudaMemLocationTypeDevice, 1};
  enum cudaMemAccessFlags fl = cudaMemAccessFlagsProtRead;
  CK(cudaMemPoolGetAccess(&fl, p, &loc));
  ck_assert_int_eq(fl, cudaMemAccessFlagsProtNone); /* the failed call changed nothing */
  CK(cudaMemPoolSetAccess(p, d, 1));
  CK(cudaMemPoolGetAccess(&fl, p, &loc));
  ck_assert_int_eq(fl, cudaMemAccessFlagsProtReadWrite);
  loc.id = 0;
  fl = cudaMemAccessFlagsProtNone;
  CK(cudaMemPoolGetAccess(&fl, p, &loc));
  ck_assert_int_eq(fl, cudaMemAccessFlagsProtReadWrite);
  loc.id = 2;
  CK(cudaMemPoolGetAccess(&fl, p, &loc));
  ck_assert_int_eq(fl, cudaMemAccessFlagsProtNone);
  loc.id = 5;
  CK_ERR(cudaMemPoolGetAccess(&fl, p, &loc), cudaErrorInvalidDevice);
  d[0].flags = cudaMemAccessFlagsProtNone;
  CK(cudaMemPoolSetAccess(p, d, 1));
  loc.id = 1;
  CK(cudaMemPoolGetAccess(&fl, p, &loc));
  ck_assert_int_eq(fl, cudaMemAccessFlagsProtNone);
  CK(cudaMemPoolSetAccess(p, NULL, 0));
}
END_TEST

START_TEST(destroy_with_live_blocks) {
  cudaMemPool_t p = new_pool(0, 0);
  set_threshold(p, UINT64_MAX);
  cudaStream_t s = new_stream();
  void *a = alloc(p, 4 * MiB, s);
  CK(cudaMemPoolDestroy(p));
  ck_assert_int_eq(cudasim_pool_count(), 0);
  size_t f, t;
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t - f, 4 * MiB); /* still reserved */
  CK(cudaMemset(a, 1, 4 * MiB));    /* and usable */
  cudasim_hold(s);
  CK(cudaFreeAsync(a, s));
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t - f, 4 * MiB); /* the free has not completed */
  cudasim_release(s);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t, f);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
}
END_TEST

/* ---- memory operations ----------------------------------------------------------------------- */

START_TEST(memset_memcpy) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  unsigned char host[4096], back[4096];
  for (size_t i = 0; i < sizeof host; i++)
    host[i] = (unsigned char)(i * 7);
  unsigned char *d = alloc(p, sizeof host, s), *e = alloc(p, sizeof host, s);
  CK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));
  CK(cudaMemsetAsync(d + 100, 0xAB, 50, s));
  CK(cudaMemcpyAsync(e, d, sizeof host, cudaMemcpyDeviceToDevice, s));
  CK(cudaMemcpy(back, e, sizeof back, cudaMemcpyDefault));
  for (size_t i = 0; i < sizeof host; i++)
    ck_assert_uint_eq(back[i], i >= 100 && i < 150 ? 0xAB : host[i]);
  CK(cudaMemset(e, 0, sizeof host));
  CK(cudaMemcpy(back, e, 16, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(back[3], 0);
  CK_ERR(cudaMemset(d, 0, sizeof host + 1), cudaErrorInvalidValue); /* past the block */
  CK_ERR(cudaMemcpy(back, host, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  CK_ERR(cudaMemcpy(back, d, 16, (enum cudaMemcpyKind)17), cudaErrorInvalidMemcpyDirection);
  CK(cudaMemcpy(back, host, 16, cudaMemcpyHostToHost));
  CK(cudaFreeAsync(d, s));
  CK_ERR(cudaMemset(d, 0, 16), cudaErrorInvalidValue); /* freed */
  CK_ERR(cudaMemsetAsync(e, 0, 16, (cudaStream_t)(uintptr_t)0x42), cudaErrorInvalidResourceHandle);
  cudasim_hold(s);
  CK(cudaMemcpyAsync(back, e, 16, cudaMemcpyDeviceToHost, s));
  ck_assert_int_eq(cudasim_pending(s), 1); /* data moved at once, completion deferred */
  void *m = NULL;
  CK(cudaMalloc(&m, 1000));
  CK(cudaMemset(m, 0x11, 1000));
  CK(cudaMemcpy(back, m, 1000, cudaMemcpyDefault));
  ck_assert_uint_eq(back[999], 0x11);
  CK_ERR(cudaMemset(m, 0, 1001), cudaErrorInvalidValue);
  ck_assert_int_eq(cudasim_live_allocations(), 2);
  CK(cudaFree(m)); /* implies a device synchronize */
  ck_assert_int_eq(cudasim_pending(s), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
}
END_TEST

START_TEST(cuda_free_of_pool_block) {
  cudaMemPool_t p = new_pool(0, 0);
  void *a = alloc(p, MiB, NULL);
  CK(cudaFree(a));
  ck_assert_uint_eq(used(p), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------------- */

#define N_THREADS 8
#define N_ITERS 300

typedef struct worker {
  cudaMemPool_t pool;
  int failures;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  cudaStream_t s;
  void *live[16] = {0};
  uint64_t x = (uint64_t)(uintptr_t)arg | 1;
  if (cudaStreamCreate(&s) != cudaSuccess) {
    w->failures++;
    return NULL;
  }
  for (int i = 0; i < N_ITERS; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t slot = (size_t)(x % 16);
    if (live[slot]) {
      unsigned char c = 0;
      if (cudaMemcpy(&c, live[slot], 1, cudaMemcpyDeviceToHost) != cudaSuccess ||
          c != (unsigned char)slot) /* nobody else wrote into this buffer */
        w->failures++;
      w->failures += cudaFreeAsync(live[slot], s) != cudaSuccess;
      live[slot] = NULL;
    } else {
      size_t size = (size_t)(x >> 20) % (3 * MiB) + 1;
      if (cudaMallocFromPoolAsync(&live[slot], size, w->pool, s) != cudaSuccess ||
          cudaMemsetAsync(live[slot], (int)slot, size, s) != cudaSuccess)
        w->failures++;
    }
    if (i % 50 == 0)
      w->failures += cudaStreamSynchronize(s) != cudaSuccess;
  }
  for (size_t k = 0; k < 16; k++)
    if (live[k])
      w->failures += cudaFreeAsync(live[k], s) != cudaSuccess;
  w->failures += cudaStreamDestroy(s) != cudaSuccess;
  return NULL;
}

START_TEST(threads_smoke) {
  cudaMemPool_t p = new_pool(0, 0);
  worker w[N_THREADS];
  pthread_t th[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    w[i].pool = p;
    w[i].failures = 0;
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) {
    ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_int_eq(w[i].failures, 0);
  }
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_stream_count(), 0);
  ck_assert_uint_eq(used(p), 0);
  CK(cudaDeviceSynchronize());
  ck_assert_uint_eq(reserved(p), 0);
}
END_TEST

/* ---- stream identity and handle reuse -------------------------------------------------------- */

static unsigned long long stream_id(cudaStream_t s) {
  unsigned long long id = 0;
  CK(cudaStreamGetId(s, &id));
  return id;
}

static void *ptds_id_thread(void *arg) {
  unsigned long long *ids = arg;
  ids[0] = stream_id(cudaStreamPerThread);
  ids[1] = stream_id(cudaStreamPerThread);
  ids[2] = stream_id(NULL);
  return NULL;
}

START_TEST(stream_ids) {
  cudaStream_t a = new_stream(), b = new_stream();
  unsigned long long ia = stream_id(a), ib = stream_id(b);
  unsigned long long legacy = stream_id(NULL), ptds = stream_id(cudaStreamPerThread);
  ck_assert_uint_ne(ia, ib);
  ck_assert_uint_ne(legacy, ptds);
  ck_assert_uint_ne(legacy, ia);
  ck_assert_uint_eq(stream_id(cudaStreamLegacy), legacy);
  ck_assert_uint_eq(stream_id(a), ia); /* stable */
  unsigned long long other[3];
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, ptds_id_thread, other), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_uint_eq(other[0], other[1]);
  ck_assert_uint_ne(other[0], ptds); /* each thread's per-thread stream is its own */
  ck_assert_uint_eq(other[2], legacy); /* the legacy stream is the device's */
  CK(cudaStreamDestroy(a));
  unsigned long long id = 7;
  CK_ERR(cudaStreamGetId(a, &id), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaStreamGetId(b, NULL), cudaErrorInvalidValue);
  unsigned long long ic = stream_id(new_stream());
  ck_assert_uint_gt(ic, ib); /* never reused */
  cudasim_reset(); /* not even across a reset */
  ck_assert_uint_gt(stream_id(new_stream()), ic);
}
END_TEST

START_TEST(stream_device) {
  cudasim_set_device_count(2);
  cudaStream_t s0 = new_stream();
  CK(cudaSetDevice(1));
  cudaStream_t s1 = new_stream();
  int d = -1;
  CK(cudaStreamGetDevice(s0, &d));
  ck_assert_int_eq(d, 0);
  CK(cudaStreamGetDevice(s1, &d));
  ck_assert_int_eq(d, 1);
  CK(cudaStreamGetDevice(NULL, &d));
  ck_assert_int_eq(d, 1); /* the built-in streams: the current device's */
  CK(cudaStreamGetDevice(cudaStreamPerThread, &d));
  ck_assert_int_eq(d, 1);
  CK(cudaSetDevice(0));
  CK(cudaStreamGetDevice(cudaStreamLegacy, &d));
  ck_assert_int_eq(d, 0);
  CK_ERR(cudaStreamGetDevice(s0, NULL), cudaErrorInvalidValue);
  CK(cudaStreamDestroy(s1));
  CK_ERR(cudaStreamGetDevice(s1, &d), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(stream_handle_reuse) {
  cudaStream_t s = new_stream(), live = new_stream();
  unsigned long long old_id = stream_id(s);
  CK(cudaStreamDestroy(s));
  ck_assert_ptr_null(cudasim_stream_create_at(live, 0)); /* not destroyed */
  ck_assert_ptr_null(cudasim_stream_create_at(NULL, 0));
  ck_assert_ptr_null(cudasim_stream_create_at(s, 0x80)); /* bad flags */
  cudaStream_t again = cudasim_stream_create_at(s, cudaStreamNonBlocking);
  ck_assert_ptr_eq(again, s);
  ck_assert_uint_ne(stream_id(again), old_id); /* same address, new stream */
  unsigned flags = 0;
  CK(cudaStreamGetFlags(again, &flags));
  ck_assert_uint_eq(flags, cudaStreamNonBlocking);
  ck_assert_int_eq(cudasim_stream_count(), 2);
  CK(cudaMemsetAsync(NULL, 0, 0, again));
  ck_assert_ptr_null(cudasim_stream_create_at(s, 0)); /* live again */
  CK(cudaStreamDestroy(again));
  CK_ERR(cudaStreamSynchronize(again), cudaErrorInvalidResourceHandle);
}
END_TEST

/* ---- stream capture -------------------------------------------------------------------------- */

static cudaGraph_t end_capture(cudaStream_t s) {
  cudaGraph_t gr = NULL;
  CK(cudaStreamEndCapture(s, &gr));
  ck_assert_ptr_nonnull(gr);
  return gr;
}

static size_t node_count(cudaGraph_t gr) {
  size_t n = 99;
  CK(cudaGraphGetNodes(gr, NULL, &n));
  return n;
}

static enum cudaGraphNodeType node_type(cudaGraph_t gr, size_t i) {
  cudaGraphNode_t nodes[16];
  size_t n = 16;
  enum cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  CK(cudaGraphGetNodes(gr, nodes, &n));
  ck_assert_uint_lt(i, n);
  CK(cudaGraphNodeGetType(nodes[i], &type));
  return type;
}

static cudaGraphExec_t instantiate(cudaGraph_t gr) {
  cudaGraphExec_t x = NULL;
  CK(cudaGraphInstantiate(&x, gr, 0));
  return x;
}

START_TEST(capture_records_instead_of_running) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  unsigned char *d = alloc(p, 256, s), host[256], back[256];
  memset(host, 7, sizeof host);
  CK(cudaMemset(d, 0, 256));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusActive);
  CK(cudaMemcpyAsync(d, host, 256, cudaMemcpyHostToDevice, s));
  CK(cudaMemsetAsync(d, 9, 16, s));
  ck_assert_int_eq(cudasim_pending(s), 0);
  cudaGraph_t gr = end_capture(s);
  CK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
  CK(cudaMemcpy(back, d, 256, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(back[0], 0); /* nothing ran */
  ck_assert_uint_eq(back[200], 0);
  ck_assert_uint_eq(node_count(gr), 2);
  ck_assert_int_eq(node_type(gr, 0), cudaGraphNodeTypeMemcpy);
  ck_assert_int_eq(node_type(gr, 1), cudaGraphNodeTypeMemset);
  cudaGraphExec_t x = instantiate(gr);
  cudasim_hold(s);
  CK(cudaGraphLaunch(x, s));
  ck_assert_int_eq(cudasim_pending(s), 2); /* one operation a node */
  CK(cudaMemcpy(back, d, 256, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(back[0], 9); /* in capture order */
  ck_assert_uint_eq(back[200], 7);
  memset(host, 3, sizeof host); /* a memcpy node reads its source when it runs */
  CK(cudaGraphLaunch(x, NULL));
  CK(cudaMemcpy(back, d, 256, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(back[200], 3);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(gr));
  CK_ERR(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
  CK_ERR(cudaGraphDestroy(gr), cudaErrorInvalidValue);
}
END_TEST

START_TEST(capture_begin_end_rules) {
  cudaStream_t s = new_stream();
  cudaGraph_t gr = (cudaGraph_t)(uintptr_t)0x99;
  CK_ERR(cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)7), cudaErrorInvalidValue);
  CK_ERR(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal),
         cudaErrorStreamCaptureUnsupported);
  CK_ERR(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
         cudaErrorStreamCaptureUnsupported);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorIllegalState);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK_ERR(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  CK_ERR(cudaStreamEndCapture(s, NULL), cudaErrorInvalidValue);
  CK_ERR(cudaStreamDestroy(s), cudaErrorStreamCaptureUnsupported); /* stays, invalidated */
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  ck_assert_ptr_null(gr);
  CK(cudaStreamDestroy(s));
  /* an empty capture is a valid, empty graph; capture ids are unique */
  cudaStream_t q = new_stream();
  unsigned long long id1 = 0, id2 = 0;
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamBeginCapture(q, cudaStreamCaptureModeRelaxed));
  CK(cudaStreamGetCaptureInfo(q, &st, &id1, NULL, NULL, NULL, NULL));
  gr = end_capture(q);
  CK(cudaStreamBeginCapture(q, cudaStreamCaptureModeRelaxed));
  CK(cudaStreamGetCaptureInfo(q, &st, &id2, NULL, NULL, NULL, NULL));
  ck_assert_uint_ne(id1, id2);
  cudaGraph_t gr2 = end_capture(q);
  ck_assert_uint_eq(node_count(gr), 0);
  cudaGraphExec_t x = instantiate(gr);
  CK(cudaGraphLaunch(x, q));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(gr));
  CK(cudaGraphDestroy(gr2));
}
END_TEST

START_TEST(capture_info) {
  cudaStream_t s = new_stream();
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  unsigned long long id = 0;
  cudaGraph_t gr = NULL;
  const cudaGraphNode_t *deps = NULL;
  const cudaGraphEdgeData *edges = NULL;
  size_t n = 9;
  CK(cudaStreamGetCaptureInfo(s, &st, &id, &gr, &deps, NULL, &n));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
  CK_ERR(cudaStreamGetCaptureInfo(s, NULL, NULL, NULL, NULL, NULL, NULL), cudaErrorInvalidValue);
  CK_ERR(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, NULL, &edges, NULL), cudaErrorInvalidValue);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamGetCaptureInfo(s, &st, &id, &gr, &deps, &edges, &n));
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
  ck_assert_uint_ne(id, 0);
  ck_assert_ptr_nonnull(gr);
  ck_assert_uint_eq(n, 0);
  CK(cudaMemsetAsync(NULL, 0, 0, s));
  CK(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &n));
  ck_assert_uint_eq(n, 1);
  cudaGraphNode_t node = NULL;
  size_t one = 1;
  CK(cudaGraphGetNodes(gr, &node, &one));
  ck_assert_ptr_eq(deps[0], node); /* the node the next one will follow */
  CK_ERR(cudaGraphDestroy(gr), cudaErrorInvalidValue); /* the capture's, for now */
  cudaGraphExec_t x = instantiate(gr); /* allowed meanwhile */
  cudaGraph_t done = end_capture(s);
  ck_assert_ptr_eq(done, gr);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(done));
}
END_TEST

START_TEST(capture_sync_invalidates) {
  cudaStream_t s = new_stream();
  cudaGraph_t gr = (cudaGraph_t)(uintptr_t)0x99;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaMemsetAsync(NULL, 0, 0, s), cudaErrorStreamCaptureInvalidated);
  CK_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureInvalidated);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  ck_assert_ptr_null(gr);
  CK(cudaStreamSynchronize(s)); /* usable again */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK_ERR(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamQuery(s));
  CK_ERR(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(capture_device_sync) {
  cudasim_set_device_count(2);
  CK(cudaSetDevice(1));
  cudaStream_t s = new_stream();
  CK(cudaSetDevice(0));
  cudaStream_t other = new_stream();
  cudaGraph_t gr;
  /* relaxed: this thread may make unsafe calls, but a device synchronize of the capture's
   * device is invalid whatever the mode */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaDeviceSynchronize()); /* device 0 */
  CK(cudaStreamSynchronize(other));
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusActive);
  CK(cudaSetDevice(1));
  CK_ERR(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaDeviceSynchronize());
}
END_TEST

START_TEST(capture_events) {
  cudaStream_t s = new_stream(), q = new_stream();
  cudaEvent_t ev, plain;
  CK(cudaEventCreate(&ev));
  CK(cudaEventCreate(&plain));
  CK(cudaEventRecord(plain, q));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaEventRecord(ev, s));
  CK(cudaEventQuery(plain)); /* relaxed: allowed for an event recorded outside */
  ck_assert_int_eq(cudasim_pending(s), 0);
  CK_ERR(cudaEventQuery(ev), cudaErrorCapturedEvent);
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaEventSynchronize(ev), cudaErrorStreamCaptureInvalidated);
  cudaGraph_t gr;
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK_ERR(cudaEventQuery(ev), cudaErrorInvalidValue); /* its capture is gone */
  CK(cudaEventRecord(ev, s));
  CK(cudaEventQuery(ev));
  /* synchronize and elapsed time refuse a captured event too */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaEventRecord(ev, s));
  float ms;
  CK_ERR(cudaEventElapsedTime(&ms, plain, ev), cudaErrorCapturedEvent);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaEventRecord(ev, s));
  CK_ERR(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
}
END_TEST

START_TEST(capture_external_event) {
  cudaStream_t s = new_stream();
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK_ERR(cudaEventRecordWithFlags(ev, s, 0x10), cudaErrorInvalidValue);
  CK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));
  cudaGraph_t gr = end_capture(s);
  ck_assert_uint_eq(node_count(gr), 1);
  ck_assert_int_eq(node_type(gr, 0), cudaGraphNodeTypeEventRecord);
  cudaGraphExec_t x = instantiate(gr);
  cudasim_hold(s);
  CK(cudaGraphLaunch(x, s)); /* the node records the event on the launch stream */
  CK_ERR(cudaEventQuery(ev), cudaErrorNotReady);
  cudasim_release(s);
  CK(cudaEventQuery(ev));
}
END_TEST

/* Runs fn(arg) on a new thread and waits for it. */
static void on_thread(void *(*fn)(void *), void *arg) {
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, fn, arg), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
}

typedef struct unsafe_probe {
  enum cudaStreamCaptureMode mode; /* the thread's mode for the call */
  cudaError_t err;
} unsafe_probe;

static void *malloc_thread(void *arg) {
  unsafe_probe *pr = arg;
  enum cudaStreamCaptureMode mode = pr->mode;
  void *m = NULL;
  pr->err = cudaThreadExchangeStreamCaptureMode(&mode);
  if (pr->err == cudaSuccess)
    pr->err = cudaMalloc(&m, 100);
  if (pr->err == cudaSuccess)
    pr->err = cudaFree(m);
  return NULL;
}

static cudaError_t malloc_on_thread(enum cudaStreamCaptureMode mode) {
  unsafe_probe pr = {mode, cudaErrorUnknown};
  on_thread(malloc_thread, &pr);
  return pr.err;
}

START_TEST(global_mode_prohibits_unsafe_calls) {
  cudaStream_t s = new_stream();
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(malloc_on_thread(cudaStreamCaptureModeThreadLocal)); /* ignores other threads' captures */
  CK(malloc_on_thread(cudaStreamCaptureModeRelaxed));
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusActive);
  CK_ERR(malloc_on_thread(cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(malloc_on_thread(cudaStreamCaptureModeGlobal)); /* no capture: fine */
  /* a thread-local capture restricts only its own thread */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(malloc_on_thread(cudaStreamCaptureModeGlobal));
  void *m;
  CK_ERR(cudaMalloc(&m, 1), cudaErrorStreamCaptureUnsupported);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  /* a relaxed capture restricts nobody */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(malloc_on_thread(cudaStreamCaptureModeGlobal));
  CK(cudaMalloc(&m, 1));
  CK(cudaFree(m));
  gr = end_capture(s);
  CK(cudaGraphDestroy(gr));
}
END_TEST

/* Each potentially unsafe call, made by the capturing thread in global mode, is refused and
 * invalidates; the same call after cudaThreadExchangeStreamCaptureMode(relaxed) runs. */
START_TEST(unsafe_calls_and_relaxed_mode) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  void *d = alloc(p, 1024, s);
  uint64_t v = 0;
  unsigned char byte = 0;
  struct cudaMemLocation loc = {cudaMemLocationTypeDevice, 0};
  enum cudaMemAccessFlags fl;
  cudaGraph_t gr;
  for (int call = 0; call < 10; call++) {
    for (int relaxed = 0; relaxed < 2; relaxed++) {
      enum cudaStreamCaptureMode mode =
          relaxed ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeGlobal;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      CK(cudaThreadExchangeStreamCaptureMode(&mode));
      cudaError_t e = cudaErrorUnknown;
      void *m = NULL;
      cudaMemPool_t q = NULL;
      switch (call) {
      case 0: e = cudaMalloc(&m, 1); break;
      case 1: e = cudaFree(NULL); break;
      case 2: e = cudaMemPoolTrimTo(p, 0); break;
      case 3: e = cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &v); break;
      case 4: e = cudaMemPoolGetAttribute(p, cudaMemPoolAttrReservedMemCurrent, &v); break;
      case 5: e = cudaMemPoolGetAccess(&fl, p, &loc); break;
      case 6: e = cudaEventQuery(ev); break;
      case 7: e = cudaMemcpy(&byte, d, 1, cudaMemcpyDeviceToHost); break;
      case 8: e = cudaMemset(d, 0, 1); break;
      case 9: q = new_pool_raw(&e); break;
      }
      CK(cudaThreadExchangeStreamCaptureMode(&mode)); /* back to global */
      ck_assert_int_eq(mode, relaxed ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeGlobal);
      if (relaxed) {
        ck_assert_msg(e == cudaSuccess, "call %d in relaxed mode: %s", call, cudaGetErrorName(e));
        gr = end_capture(s);
        CK(cudaGraphDestroy(gr));
      } else {
        ck_assert_msg(e == cudaErrorStreamCaptureUnsupported, "call %d: %s", call,
                      cudaGetErrorName(e));
        CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
      }
      if (m)
        CK(cudaFree(m));
      if (q)
        CK(cudaMemPoolDestroy(q));
    }
  }
  enum cudaStreamCaptureMode bad = (enum cudaStreamCaptureMode)9;
  CK_ERR(cudaThreadExchangeStreamCaptureMode(&bad), cudaErrorInvalidValue);
  CK_ERR(cudaThreadExchangeStreamCaptureMode(NULL), cudaErrorInvalidValue);
}
END_TEST

START_TEST(legacy_stream_implicit) {
  cudaStream_t blocking, nonblocking = new_stream();
  CK(cudaStreamCreate(&blocking));
  cudaGraph_t gr;
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamBeginCapture(nonblocking, cudaStreamCaptureModeRelaxed));
  CK(cudaMemsetAsync(NULL, 0, 0, NULL)); /* a non-blocking capture leaves the legacy alone */
  CK(cudaStreamSynchronize(NULL));
  gr = end_capture(nonblocking);
  CK(cudaGraphDestroy(gr));
  CK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
  CK_ERR(cudaStreamIsCapturing(NULL, &st), cudaErrorStreamCaptureImplicit);
  ck_assert_int_eq(cudasim_capturing(blocking), cudaStreamCaptureStatusActive); /* no harm */
  CK_ERR(cudaMemsetAsync(NULL, 0, 0, cudaStreamLegacy), cudaErrorStreamCaptureImplicit);
  ck_assert_int_eq(cudasim_capturing(blocking), cudaStreamCaptureStatusInvalidated);
  CK_ERR(cudaStreamEndCapture(blocking, &gr), cudaErrorStreamCaptureInvalidated);
  /* the per-thread stream is blocking too; synchronous copies run on the legacy stream */
  unsigned char a = 1, b = 0;
  CK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed));
  CK_ERR(cudaMemcpy(&b, &a, 1, cudaMemcpyHostToHost), cudaErrorStreamCaptureImplicit);
  CK_ERR(cudaStreamEndCapture(cudaStreamPerThread, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamIsCapturing(NULL, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
}
END_TEST

START_TEST(fork_and_join) {
  cudaStream_t s = new_stream(), side = new_stream();
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(side, fork, 0)); /* side joins the capture */
  unsigned long long id_s = 0, id_side = 1;
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamGetCaptureInfo(s, &st, &id_s, NULL, NULL, NULL, NULL));
  CK(cudaStreamGetCaptureInfo(side, &st, &id_side, NULL, NULL, NULL, NULL));
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
  ck_assert_uint_eq(id_s, id_side);
  CK(cudaMemsetAsync(NULL, 0, 0, side));
  ck_assert_int_eq(cudasim_pending(side), 0);
  CK(cudaEventRecord(join, side));
  CK(cudaStreamWaitEvent(s, join, 0));
  cudaGraph_t gr = end_capture(s);
  ck_assert_uint_eq(node_count(gr), 1);
  ck_assert_int_eq(cudasim_capturing(side), cudaStreamCaptureStatusNone);
  CK(cudaGraphDestroy(gr));
  /* work after the last join: unjoined; the capture still ends */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(side, fork, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, side));
  gr = (cudaGraph_t)(uintptr_t)0x99;
  CK_ERR(cudaStreamEndCapture(side, &gr), cudaErrorStreamCaptureUnmatched); /* not the origin */
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(side, fork, 0));
  CK(cudaMemsetAsync(NULL, 0, 0, side));
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureUnjoined);
  ck_assert_ptr_null(gr);
  ck_assert_int_eq(cudasim_capturing(side), cudaStreamCaptureStatusNone);
}
END_TEST

START_TEST(capture_wait_rules) {
  cudaStream_t s = new_stream(), q = new_stream(), r = new_stream();
  cudaEvent_t outside, never, other;
  CK(cudaEventCreate(&outside));
  CK(cudaEventCreate(&never));
  CK(cudaEventCreate(&other));
  CK(cudaEventRecord(outside, q));
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamWaitEvent(s, never, 0)); /* never recorded: a no-op */
  CK_ERR(cudaStreamWaitEvent(s, outside, 0x4), cudaErrorInvalidValue);
  CK(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal)); /* a wait node */
  CK_ERR(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  /* two captures cannot merge */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamBeginCapture(r, cudaStreamCaptureModeGlobal));
  CK(cudaEventRecord(other, r));
  CK_ERR(cudaStreamWaitEvent(s, other, 0), cudaErrorStreamCaptureMerge);
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK_ERR(cudaStreamEndCapture(r, &gr), cudaErrorStreamCaptureInvalidated);
  /* the wait node, kept */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal));
  gr = end_capture(s);
  ck_assert_int_eq(node_type(gr, 0), cudaGraphNodeTypeWaitEvent);
}
END_TEST

typedef struct end_probe {
  cudaStream_t s;
  cudaError_t err;
} end_probe;

static void *end_thread(void *arg) {
  end_probe *pr = arg;
  cudaGraph_t gr = NULL;
  pr->err = cudaStreamEndCapture(pr->s, &gr);
  if (gr)
    (void)cudaGraphDestroy(gr);
  return NULL;
}

START_TEST(end_capture_thread) {
  end_probe pr = {new_stream(), cudaErrorUnknown};
  CK(cudaStreamBeginCapture(pr.s, cudaStreamCaptureModeGlobal));
  on_thread(end_thread, &pr);
  ck_assert_int_eq(pr.err, cudaErrorStreamCaptureWrongThread);
  ck_assert_int_eq(cudasim_capturing(pr.s), cudaStreamCaptureStatusActive);
  CK(cudaGraphDestroy(end_capture(pr.s)));
  CK(cudaStreamBeginCapture(pr.s, cudaStreamCaptureModeRelaxed)); /* any thread may end it */
  on_thread(end_thread, &pr);
  ck_assert_int_eq(pr.err, cudaSuccess);
  ck_assert_int_eq(cudasim_capturing(pr.s), cudaStreamCaptureStatusNone);
}
END_TEST

/* ---- graph memory ---------------------------------------------------------------------------- */

START_TEST(graph_allocation_lifetime) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  size_t f0, f, t;
  CK(cudaMemGetInfo(&f0, &t));
  unsigned char *d = NULL, back[64];
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocFromPoolAsync((void **)&d, 4 * MiB, p, s));
  ck_assert_ptr_nonnull(d);
  CK(cudaMemsetAsync(d, 0x5C, 64, s));
  cudaGraph_t gr = end_capture(s);
  ck_assert_uint_eq(used(p), 0); /* the graph's memory, not the pool's */
  ck_assert_uint_eq(reserved(p), 0);
  ck_assert_int_eq(node_type(gr, 0), cudaGraphNodeTypeMemAlloc);
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK_ERR(cudaMemset(d, 0, 64), cudaErrorInvalidValue);   /* not live before a launch */
  CK_ERR(cudaFreeAsync(d, s), cudaErrorInvalidValue);
  cudaGraphExec_t x = instantiate(gr), x2;
  CK_ERR(cudaGraphInstantiate(&x2, gr, 0), cudaErrorInvalidValue); /* one at a time */
  CK(cudaGraphLaunch(x, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 1);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f0 - f, 4 * MiB);
  CK(cudaMemcpy(back, d, 64, cudaMemcpyDeviceToHost)); /* usable after the launch */
  ck_assert_uint_eq(back[63], 0x5C);
  CK_ERR(cudaGraphLaunch(x, s), cudaErrorInvalidValue); /* its allocation is still live */
  CK(cudaFreeAsync(d, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, f0);
  CK(cudaGraphLaunch(x, s)); /* same address again */
  CK(cudaMemset(d, 1, 64));
  /* destroying the graph and its executable graph does not free a live allocation */
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(gr));
  ck_assert_int_eq(cudasim_graph_allocations(), 1);
  CK(cudaMemcpy(back, d, 64, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(back[0], 1);
  CK(cudaFree(d));
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK_ERR(cudaFree(d), cudaErrorInvalidValue);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, f0);
}
END_TEST

/* An allocation node whose graph never runs (its capture invalidated, or the graph destroyed
 * before a launch) never gets memory: freeing its address afterwards is cudaErrorInvalidValue,
 * and nothing stays reserved or live. */
START_TEST(graph_allocation_that_never_ran) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  size_t f0, f, t;
  CK(cudaMemGetInfo(&f0, &t));
  void *d = NULL, *e = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocFromPoolAsync(&d, 4 * MiB, p, s));
  CK_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported); /* invalidates */
  cudaGraph_t gr = (cudaGraph_t)(uintptr_t)0x99;
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  ck_assert_ptr_null(gr);
  CK_ERR(cudaFreeAsync(d, s), cudaErrorInvalidValue);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocFromPoolAsync(&e, 4 * MiB, p, s));
  gr = end_capture(s);
  cudaGraphExec_t x = instantiate(gr);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(gr));
  CK_ERR(cudaFreeAsync(e, s), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, f0);
}
END_TEST

START_TEST(graph_allocation_freed_in_graph) {
  cudaStream_t s = new_stream();
  void *d = NULL;
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, 1000, s));
  CK(cudaMemsetAsync(d, 0, 1000, s));
  CK(cudaFreeAsync(d, s));
  CK_ERR(cudaMemsetAsync(d, 0, 1001, s), cudaErrorInvalidValue); /* past the allocation */
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, 1000, s));
  CK(cudaFreeAsync(d, s));
  CK_ERR(cudaFreeAsync(d, s), cudaErrorInvalidValue); /* twice in one graph */
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, 1000, s));
  CK(cudaMemsetAsync(d, 0, 1000, s));
  CK(cudaFreeAsync(d, s));
  gr = end_capture(s);
  ck_assert_int_eq(node_type(gr, 2), cudaGraphNodeTypeMemFree);
  cudaGraphExec_t x = instantiate(gr);
  CK(cudaGraphLaunch(x, s));
  CK(cudaGraphLaunch(x, s)); /* nothing left live: it may run again */
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK_ERR(cudaFreeAsync(d, s), cudaErrorInvalidValue);
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(gr));
  size_t f, t;
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(f, t);
}
END_TEST

START_TEST(capture_free_of_uncaptured_memory) {
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  void *a = alloc(p, MiB, s);
  cudaGraph_t gr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK_ERR(cudaFreeAsync(a, s), cudaErrorInvalidValue); /* only graph allocations */
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(cudasim_live_allocations(), 1);
  ck_assert_uint_eq(used(p), MiB);
  CK(cudaFreeAsync(a, s));
}
END_TEST

START_TEST(graph_allocation_freed_by_another_graph) {
  cudaStream_t s = new_stream();
  void *d = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, MiB, s));
  cudaGraph_t ga = end_capture(s);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaFreeAsync(d, s));
  cudaGraph_t gf = end_capture(s);
  cudaGraphExec_t xa = instantiate(ga), xf = instantiate(gf);
  CK_ERR(cudaGraphLaunch(xf, s), cudaErrorInvalidValue); /* nothing live to free yet */
  CK(cudaGraphLaunch(xa, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 1);
  CK(cudaGraphLaunch(xf, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK(cudaGraphLaunch(xa, s));
  CK(cudaGraphExecDestroy(xa));
  CK(cudaGraphDestroy(ga));
  CK(cudaGraphLaunch(xf, s)); /* the free node keeps the address */
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
}
END_TEST

START_TEST(auto_free_on_launch) {
  cudaStream_t s = new_stream();
  void *d = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, MiB, s));
  cudaGraph_t gr = end_capture(s);
  cudaGraphExec_t x = NULL;
  CK_ERR(cudaGraphInstantiate(&x, gr, 0x100), cudaErrorInvalidValue);
  CK_ERR(cudaGraphInstantiate(&x, gr, cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                          cudaGraphInstantiateFlagDeviceLaunch),
         cudaErrorInvalidValue);
  CK(cudaGraphInstantiate(&x, gr, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  CK(cudaGraphLaunch(x, s));
  CK(cudaGraphLaunch(x, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 1);
  size_t f, t;
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t - f, 2 * MiB);
  CK(cudaFreeAsync(d, s));
}
END_TEST

START_TEST(graph_launch_capacity) {
  cudasim_set_capacity(0, 8 * MiB);
  cudaStream_t s = new_stream();
  void *a = NULL, *b = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&a, 6 * MiB, s));
  CK(cudaFreeAsync(a, s));
  CK(cudaMallocAsync(&b, 6 * MiB, s)); /* fits at the graph's peak: 6 MiB */
  cudaGraph_t gr = end_capture(s);
  cudaGraphExec_t x = instantiate(gr);
  void *m;
  CK(cudaMalloc(&m, 4 * MiB));
  CK_ERR(cudaGraphLaunch(x, s), cudaErrorMemoryAllocation);
  ck_assert_int_eq(cudasim_graph_allocations(), 0); /* nothing ran */
  ck_assert_int_eq(cudasim_pending(s), 0);
  CK(cudaFree(m));
  CK(cudaGraphLaunch(x, s));
  ck_assert_int_eq(cudasim_graph_allocations(), 1);
  CK(cudaFreeAsync(b, s));
}
END_TEST

START_TEST(graph_api_misc) {
  cudaGraph_t gr = NULL;
  CK_ERR(cudaGraphCreate(&gr, 1), cudaErrorInvalidValue);
  CK(cudaGraphCreate(&gr, 0));
  ck_assert_uint_eq(node_count(gr), 0);
  cudaGraphNode_t nodes[2] = {(cudaGraphNode_t)(uintptr_t)1, (cudaGraphNode_t)(uintptr_t)1};
  size_t n = 2;
  CK(cudaGraphGetNodes(gr, nodes, &n));
  ck_assert_uint_eq(n, 0);
  ck_assert_ptr_null(nodes[0]);
  CK_ERR(cudaGraphGetNodes(gr, NULL, NULL), cudaErrorInvalidValue);
  enum cudaGraphNodeType type;
  CK_ERR(cudaGraphNodeGetType((cudaGraphNode_t)(uintptr_t)0x40, &type), cudaErrorInvalidValue);
  cudaGraphExec_t x = NULL, y = NULL;
  CK(cudaGraphInstantiateWithFlags(&x, gr, 0));
  CK(cudaGraphInstantiate(&y, gr, 0)); /* no memory nodes: several at once */
  cudaStream_t s = new_stream();
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK_ERR(cudaGraphLaunch(x, s), cudaErrorStreamCaptureUnsupported); /* no child graphs */
  ck_assert_int_eq(cudasim_capturing(s), cudaStreamCaptureStatusActive);
  CK(cudaGraphDestroy(end_capture(s)));
  CK(cudaGraphDestroy(gr));
  CK(cudaGraphLaunch(x, s)); /* an executable graph outlives its graph */
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphExecDestroy(y));
  CK_ERR(cudaGraphExecDestroy(y), cudaErrorInvalidValue);
  CK_ERR(cudaGraphInstantiate(&x, gr, 0), cudaErrorInvalidValue);
}
END_TEST

/* ---- driver entry points --------------------------------------------------------------------- */

typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);

static is_capturing_fn entry_point(const char *symbol, unsigned long long flags,
                                   enum cudaDriverEntryPointQueryResult *found) {
  void *p = (void *)(uintptr_t)0x1;
  is_capturing_fn fn = NULL;
  CK(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, flags, found));
  memcpy(&fn, &p, sizeof fn); /* ISO C has no cast from void * to a function pointer */
  return fn;
}

START_TEST(driver_entry_point) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSuccess;
  ck_assert_ptr_null((void *)(uintptr_t)entry_point("cuNoSuchThing", cudaEnableDefault, &found));
  ck_assert_int_eq(found, cudaDriverEntryPointSymbolNotFound);
  is_capturing_fn fn = entry_point("cuStreamIsCapturing", cudaEnableDefault, &found);
  ck_assert_int_eq(found, cudaDriverEntryPointSuccess);
  ck_assert(fn != NULL);
  void *p = NULL;
  CK(cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &p, 9020, 0, &found));
  ck_assert_int_eq(found, cudaDriverEntryPointVersionNotSufficent);
  ck_assert_ptr_null(p);
  CK_ERR(cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &p, 13010, 0, &found),
         cudaErrorInvalidValue); /* newer than the driver */
  CK_ERR(cudaGetDriverEntryPointByVersion(NULL, &p, 12000, 0, &found), cudaErrorInvalidValue);
  CK_ERR(cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &p, 12000, 8, &found),
         cudaErrorInvalidValue);
  CK(cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &p, 12000, 0, NULL));
  ck_assert_ptr_nonnull(p);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the old call spool falls back on */
  void *q = NULL;
  CK(cudaGetDriverEntryPoint("cuStreamIsCapturing", &q, cudaEnableDefault, &found));
#pragma GCC diagnostic pop
  ck_assert_ptr_eq(q, p);
  ck_assert_int_eq(cudasim_calls("cuStreamIsCapturing"), 0);

  cudaStream_t s = new_stream();
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_SUCCESS);
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_SUCCESS);
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CK_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_SUCCESS);
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  cudaGraph_t gr;
  CK_ERR(cudaStreamEndCapture(s, &gr), cudaErrorStreamCaptureInvalidated);
  CK_ERR(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
  ck_assert_int_eq(fn(NULL, &st), CUDA_SUCCESS);
  ck_assert_int_eq(fn(CU_STREAM_LEGACY, &st), CUDA_SUCCESS);
  ck_assert_int_eq(fn(CU_STREAM_PER_THREAD, &st), CUDA_SUCCESS);
  ck_assert_int_eq(fn((CUstream)s, NULL), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(cudasim_calls("cuStreamIsCapturing"), 7);
  CK(cudaGetLastError()); /* the driver API leaves the runtime's last error alone */
  cudasim_fail("cuStreamIsCapturing", 1, cudaErrorInvalidResourceHandle);
  cudasim_fail("cuStreamIsCapturing", 2, cudaErrorInvalidPitchValue);
  cudasim_fail("cuStreamIsCapturing", 3, cudaErrorStreamCaptureImplicit);
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_ERROR_INVALID_HANDLE);
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_ERROR_UNKNOWN); /* no such driver code */
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CK(cudaStreamDestroy(s));
  ck_assert_int_eq(fn((CUstream)s, &st), CUDA_ERROR_INVALID_HANDLE);
  CK(cudaGetLastError());
}
END_TEST

START_TEST(driver_entry_point_per_thread) {
  enum cudaDriverEntryPointQueryResult found;
  is_capturing_fn legacy = entry_point("cuStreamIsCapturing", cudaEnableLegacyStream, &found);
  is_capturing_fn ptsz =
      entry_point("cuStreamIsCapturing", cudaEnablePerThreadDefaultStream, &found);
  ck_assert_int_eq(found, cudaDriverEntryPointSuccess);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal));
  ck_assert_int_eq(ptsz(NULL, &st), CUDA_SUCCESS); /* handle 0 is this thread's stream */
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ck_assert_int_eq(legacy(CU_STREAM_PER_THREAD, &st), CUDA_SUCCESS);
  ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  /* handle 0 is the legacy stream, which a capturing per-thread stream makes unusable */
  ck_assert_int_eq(legacy(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  ck_assert_int_eq(cudasim_capturing(cudaStreamPerThread), cudaStreamCaptureStatusActive);
  CK(cudaGraphDestroy(end_capture(cudaStreamPerThread)));
}
END_TEST

START_TEST(reset_ends_captures) {
  cudaStream_t s = new_stream();
  void *d = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync(&d, MiB, s));
  cudaGraph_t gr = end_capture(s);
  cudaGraphExec_t x = instantiate(gr);
  CK(cudaGraphLaunch(x, s));
  cudaStream_t q = new_stream();
  CK(cudaStreamBeginCapture(q, cudaStreamCaptureModeGlobal));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudasim_reset();
  ck_assert_int_eq(cudasim_graph_allocations(), 0);
  CK_ERR(cudaGraphLaunch(x, NULL), cudaErrorInvalidValue);
  CK_ERR(cudaGraphDestroy(gr), cudaErrorInvalidValue);
  void *m;
  CK(cudaMalloc(&m, 1)); /* no capture left to forbid it */
  mode = cudaStreamCaptureModeGlobal;
  CK(cudaThreadExchangeStreamCaptureMode(&mode));
  ck_assert_int_eq(mode, cudaStreamCaptureModeGlobal); /* the thread's mode was reset too */
}
END_TEST

/* ---- reset ----------------------------------------------------------------------------------- */

START_TEST(reset_clears) {
  cudasim_set_device_count(2);
  cudasim_set_capacity(0, 64 * MiB);
  cudasim_set_can_access_peer(0, 1, 0);
  cudasim_set_pools_supported(1, 0);
  CK(cudaSetDevice(1));
  cudaMemPool_t p = new_pool(0, 0);
  cudaStream_t s = new_stream();
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  (void)alloc(p, MiB, s);
  void *m;
  CK(cudaMalloc(&m, MiB));
  cudasim_hold(cudaStreamPerThread);
  CK(cudaMemsetAsync(NULL, 0, 0, cudaStreamPerThread));
  cudasim_fail("cudaMalloc", 3, cudaErrorUnknown);
  CK_ERR(cudaSetDevice(5), cudaErrorInvalidDevice);
  cudasim_set_driver_version(11000);

  cudasim_reset();
  ck_assert_int_eq(cudasim_pool_count(), 0);
  ck_assert_int_eq(cudasim_stream_count(), 0);
  ck_assert_int_eq(cudasim_live_allocations(), 0);
  ck_assert_int_eq(cudasim_armed(), 0);
  ck_assert_int_eq(cudasim_calls("cudaMalloc"), 0);
  ck_assert_int_eq(cudasim_pending(cudaStreamPerThread), 0);
  CK(cudaGetLastError());
  int n = 0, d = -1, v = 0;
  CK(cudaGetDeviceCount(&n));
  ck_assert_int_eq(n, 1);
  CK(cudaGetDevice(&d));
  ck_assert_int_eq(d, 0);
  CK(cudaDriverGetVersion(&v));
  ck_assert_int_eq(v, 13000);
  size_t f, t;
  CK(cudaMemGetInfo(&f, &t));
  ck_assert_uint_eq(t, CUDASIM_DEFAULT_CAPACITY);
  ck_assert_uint_eq(f, t);
  CK_ERR(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaEventQuery(ev), cudaErrorInvalidResourceHandle);
  CK_ERR(cudaMemPoolTrimTo(p, 0), cudaErrorInvalidResourceHandle);
  cudasim_set_device_count(2);
  CK(cudaDeviceCanAccessPeer(&v, 0, 1));
  ck_assert_int_eq(v, 1);
  CK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 1));
  ck_assert_int_eq(v, 1);
  void *x;
  for (int i = 0; i < 3; i++)
    CK(cudaMalloc(&x, 1));
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------- */

static TCase *tcase(const char *name) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 60);
  return tc;
}

static Suite *sim_suite(void) {
  Suite *s = suite_create("cudasim");
  TCase *tc = tcase("errors");
  tcase_add_test(tc, error_names);
  tcase_add_test(tc, last_error);
  tcase_add_test(tc, no_driver);
  tcase_add_test(tc, no_device);
  suite_add_tcase(s, tc);
  tc = tcase("devices");
  tcase_add_test(tc, devices);
  tcase_add_test(tc, peers);
  suite_add_tcase(s, tc);
  tc = tcase("faults");
  tcase_add_test(tc, fail_nth);
  tcase_add_test(tc, fail_does_nothing);
  tcase_add_test(tc, calls_counted);
  tcase_add_test(tc, calls_all_lists_every_api_in_first_call_order);
  suite_add_tcase(s, tc);
  tc = tcase("streams");
  tcase_add_test(tc, hold_release);
  tcase_add_test(tc, stream_waits);
  tcase_add_test(tc, device_sync);
  tcase_add_test(tc, stream_properties);
  tcase_add_test(tc, legacy_stream);
  tcase_add_test(tc, per_thread_stream);
  suite_add_tcase(s, tc);
  tc = tcase("pools");
  tcase_add_test(tc, pool_create_rules);
  tcase_add_test(tc, default_pool);
  tcase_add_test(tc, alloc_basics);
  tcase_add_test(tc, pool_segments_of_an_h200);
  tcase_add_test(tc, reuse_same_stream);
  tcase_add_test(tc, reuse_other_stream);
  tcase_add_test(tc, coalesce);
  tcase_add_test(tc, release_at_sync);
  tcase_add_test(tc, trim_to);
  tcase_add_test(tc, capacity_limit);
  tcase_add_test(tc, max_size_limit);
  tcase_add_test(tc, attributes);
  tcase_add_test(tc, access);
  tcase_add_test(tc, destroy_with_live_blocks);
  suite_add_tcase(s, tc);
  tc = tcase("memory");
  tcase_add_test(tc, memset_memcpy);
  tcase_add_test(tc, cuda_free_of_pool_block);
  suite_add_tcase(s, tc);
  tc = tcase("threads");
  tcase_add_test(tc, threads_smoke);
  suite_add_tcase(s, tc);
  tc = tcase("stream identity");
  tcase_add_test(tc, stream_ids);
  tcase_add_test(tc, stream_device);
  tcase_add_test(tc, stream_handle_reuse);
  suite_add_tcase(s, tc);
  tc = tcase("capture");
  tcase_add_test(tc, capture_records_instead_of_running);
  tcase_add_test(tc, capture_begin_end_rules);
  tcase_add_test(tc, capture_info);
  tcase_add_test(tc, capture_sync_invalidates);
  tcase_add_test(tc, capture_device_sync);
  tcase_add_test(tc, capture_events);
  tcase_add_test(tc, capture_external_event);
  tcase_add_test(tc, global_mode_prohibits_unsafe_calls);
  tcase_add_test(tc, unsafe_calls_and_relaxed_mode);
  tcase_add_test(tc, legacy_stream_implicit);
  tcase_add_test(tc, fork_and_join);
  tcase_add_test(tc, capture_wait_rules);
  tcase_add_test(tc, end_capture_thread);
  suite_add_tcase(s, tc);
  tc = tcase("graph memory");
  tcase_add_test(tc, graph_allocation_lifetime);
  tcase_add_test(tc, graph_allocation_that_never_ran);
  tcase_add_test(tc, graph_allocation_freed_in_graph);
  tcase_add_test(tc, capture_free_of_uncaptured_memory);
  tcase_add_test(tc, graph_allocation_freed_by_another_graph);
  tcase_add_test(tc, auto_free_on_launch);
  tcase_add_test(tc, graph_launch_capacity);
  tcase_add_test(tc, graph_api_misc);
  suite_add_tcase(s, tc);
  tc = tcase("driver entry points");
  tcase_add_test(tc, driver_entry_point);
  tcase_add_test(tc, driver_entry_point_per_thread);
  suite_add_tcase(s, tc);
  tc = tcase("reset");
  tcase_add_test(tc, reset_clears);
  tcase_add_test(tc, reset_ends_captures);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(sim_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
