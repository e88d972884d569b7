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

/* ---- errors, driver, devices ------------------------------------------------------------------- */

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

/* ---- fault injection and counting --------------------------------------------------------------- */

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

/* ---- streams and events ------------------------------------------------------------------------- */

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

/* ---- pools ------------------------------------------------------------------------------------- */

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

/* ---- memory operations --------------------------------------------------------------------------- */

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

/* ---- threads ------------------------------------------------------------------------------------- */

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

/* ---- reset ------------------------------------------------------------------------------------- */

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

/* ---- suite ------------------------------------------------------------------------------------- */

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
  suite_add_tcase(s, tc);
  tc = tcase("streams");
  tcase_add_test(tc, hold_release);
  tcase_add_test(tc, device_sync);
  tcase_add_test(tc, stream_properties);
  tcase_add_test(tc, legacy_stream);
  tcase_add_test(tc, per_thread_stream);
  suite_add_tcase(s, tc);
  tc = tcase("pools");
  tcase_add_test(tc, pool_create_rules);
  tcase_add_test(tc, default_pool);
  tcase_add_test(tc, alloc_basics);
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
  tc = tcase("reset");
  tcase_add_test(tc, reset_clears);
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
