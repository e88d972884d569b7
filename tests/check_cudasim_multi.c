/* Tests of cudasim's multi-device and IPC model (cudasim_ipc.c): stream devices,
 * pointer attributes, shareable and imported pools, and cudasim_kernel's access rules, so that
 * check_multi_sim and check_ipc_sim can trust them. Every test starts from cudasim_reset(). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cudasim.h"

#define MiB ((size_t)1 << 20)

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

static cudaStream_t stream_on(int device) {
  cudaStream_t s = NULL;
  CK(cudaSetDevice(device));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaSetDevice(0));
  return s;
}

static cudaMemPool_t pool_on(int device, enum cudaMemAllocationHandleType types) {
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = types;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t p = NULL;
  CK(cudaMemPoolCreate(&p, &props));
  return p;
}

static uint64_t attr(cudaMemPool_t p, enum cudaMemPoolAttr a) {
  uint64_t v = 0;
  CK(cudaMemPoolGetAttribute(p, a, &v));
  return v;
}

START_TEST(stream_devices) {
  cudasim_set_device_count(2);
  cudaStream_t s1 = stream_on(1);
  int d = -1;
  CK(cudaStreamGetDevice(s1, &d));
  ck_assert_int_eq(d, 1);
  CK(cudaStreamGetDevice(NULL, &d)); /* the current device's */
  ck_assert_int_eq(d, 0);
  CK(cudaSetDevice(1));
  CK(cudaStreamGetDevice(cudaStreamPerThread, &d));
  ck_assert_int_eq(d, 1);
  CK_ERR(cudaStreamGetDevice(s1, NULL), cudaErrorInvalidValue);
  CK(cudaStreamDestroy(s1));
  CK_ERR(cudaStreamGetDevice(s1, &d), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(pointer_attributes) {
  cudasim_set_device_count(2);
  cudaMemPool_t p = pool_on(1, cudaMemHandleTypeNone);
  void *ptr = NULL, *region = NULL;
  CK(cudaMallocFromPoolAsync(&ptr, 4096, p, NULL));
  CK(cudaMalloc(&region, 100));
  struct cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, (char *)ptr + 100));
  ck_assert_int_eq(a.type, cudaMemoryTypeDevice);
  ck_assert_int_eq(a.device, 1);
  CK(cudaPointerGetAttributes(&a, region));
  ck_assert_int_eq(a.type, cudaMemoryTypeDevice);
  ck_assert_int_eq(a.device, 0);
  int host = 0;
  CK(cudaPointerGetAttributes(&a, &host));
  ck_assert_int_eq(a.type, cudaMemoryTypeUnregistered);
  CK(cudaFree(region));
  CK(cudaFreeAsync(ptr, NULL));
  CK(cudaMemPoolDestroy(p));
}
END_TEST

START_TEST(ipc_support) {
  int types = -1;
  CK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  ck_assert_int_eq(types, cudaMemHandleTypePosixFileDescriptor);
  cudasim_set_ipc_supported(0, 0);
  CK(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  ck_assert_int_eq(types, 0);
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t p = NULL;
  CK_ERR(cudaMemPoolCreate(&p, &props), cudaErrorNotSupported);
  ck_assert_int_eq(cudasim_pool_count(), 0);
  /* an ordinary pool cannot be exported */
  p = pool_on(0, cudaMemHandleTypeNone);
  int fd = -1;
  CK_ERR(cudaMemPoolExportToShareableHandle(&fd, p, cudaMemHandleTypePosixFileDescriptor, 0),
         cudaErrorInvalidValue);
  CK(cudaMemPoolDestroy(p));
}
END_TEST

START_TEST(shareable_pool_never_shrinks) {
  cudaMemPool_t p = pool_on(0, cudaMemHandleTypePosixFileDescriptor);
  uint64_t zero = 0;
  CK(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &zero));
  void *ptr = NULL;
  CK(cudaMallocFromPoolAsync(&ptr, 4 * MiB, p, NULL));
  CK(cudaFreeAsync(ptr, NULL));
  CK(cudaDeviceSynchronize());
  CK(cudaMemPoolTrimTo(p, 0));
  ck_assert_uint_eq(attr(p, cudaMemPoolAttrReservedMemCurrent), 4 * MiB);
  CK(cudaMemPoolDestroy(p));
}
END_TEST

START_TEST(export_and_import) {
  cudaMemPool_t p = pool_on(0, cudaMemHandleTypePosixFileDescriptor);
  uint32_t *ptr = NULL;
  CK(cudaMallocFromPoolAsync((void **)&ptr, 4096, p, NULL));
  ptr[0] = 17; /* simulated device memory is host memory */
  int fd = -1;
  CK(cudaMemPoolExportToShareableHandle(&fd, p, cudaMemHandleTypePosixFileDescriptor, 0));
  ck_assert_int_ge(fd, 0);
  int other = dup(fd); /* another descriptor of the same file imports the same pool */
  cudaMemPool_t q = NULL;
  CK(cudaMemPoolImportFromShareableHandle(&q, (void *)(intptr_t)other,
                                          cudaMemHandleTypePosixFileDescriptor, 0));
  int devnull = open("/dev/null", O_RDONLY);
  cudaMemPool_t none = NULL;
  CK_ERR(cudaMemPoolImportFromShareableHandle(&none, (void *)(intptr_t)devnull,
                                              cudaMemHandleTypePosixFileDescriptor, 0),
         cudaErrorInvalidValue);
  close(devnull);
  struct cudaMemPoolPtrExportData data;
  CK(cudaMemPoolExportPointer(&data, ptr));
  CK_ERR(cudaMemPoolExportPointer(&data, ptr + 1), cudaErrorInvalidValue); /* not a start */
  uint32_t *mine = NULL;
  CK_ERR(cudaMemPoolImportPointer((void **)&mine, p, &data), cudaErrorInvalidValue);
  CK(cudaMemPoolImportPointer((void **)&mine, q, &data));
  ck_assert_ptr_ne(mine, ptr);
  ck_assert_uint_eq(mine[0], 17); /* the same pages */
  mine[1] = 23;
  ck_assert_uint_eq(ptr[1], 23);
  ck_assert_uint_eq(attr(q, cudaMemPoolAttrUsedMemCurrent), 4096);
  ck_assert_int_eq(cudasim_imports(), 1);
  CK(cudaMemcpy(&ptr[2], mine, 4, cudaMemcpyDefault)); /* an import is device memory */
  void *more = NULL;
  CK_ERR(cudaMallocFromPoolAsync(&more, 4096, q, NULL), cudaErrorInvalidValue);
  enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
  struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = 0};
  CK(cudaMemPoolGetAccess(&f, q, &loc));
  ck_assert_int_eq(f, cudaMemAccessFlagsProtReadWrite);
  CK(cudaFreeAsync(mine, NULL)); /* the importer first */
  ck_assert_int_eq(cudasim_imports(), 0);
  ck_assert_uint_eq(attr(q, cudaMemPoolAttrUsedMemCurrent), 0);
  CK(cudaFreeAsync(ptr, NULL));
  CK(cudaMemPoolDestroy(q));
  CK(cudaMemPoolDestroy(p));
  CK_ERR(cudaMemPoolImportFromShareableHandle(&q, (void *)(intptr_t)fd,
                                              cudaMemHandleTypePosixFileDescriptor, 0),
         cudaErrorInvalidValue); /* the pool is gone */
  close(other);
  close(fd);
}
END_TEST

START_TEST(kernel_access) {
  cudasim_set_device_count(2);
  cudaMemPool_t p = pool_on(0, cudaMemHandleTypeNone);
  cudaStream_t s0 = stream_on(0), s1 = stream_on(1);
  char *ptr = NULL;
  void *region = NULL;
  CK(cudaMallocFromPoolAsync((void **)&ptr, 4096, p, s0));
  CK(cudasim_kernel(s0, ptr, 4096, 1));
  CK_ERR(cudasim_kernel(s0, ptr, 4097, 0), cudaErrorIllegalAddress); /* past the end */
  CK_ERR(cudasim_kernel(s1, ptr, 4096, 0), cudaErrorIllegalAddress);
  struct cudaMemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = 1;
  d.flags = cudaMemAccessFlagsProtRead;
  CK(cudaMemPoolSetAccess(p, &d, 1));
  CK(cudasim_kernel(s1, ptr + 100, 100, 0));
  CK_ERR(cudasim_kernel(s1, ptr, 4096, 1), cudaErrorIllegalAddress);
  d.flags = cudaMemAccessFlagsProtReadWrite;
  CK(cudaMemPoolSetAccess(p, &d, 1));
  CK(cudasim_kernel(s1, ptr, 4096, 1));
  CK(cudaMalloc(&region, 64)); /* on device 0 */
  CK(cudasim_kernel(s0, region, 64, 1));
  CK_ERR(cudasim_kernel(s1, region, 64, 0), cudaErrorIllegalAddress);
  CK(cudaFreeAsync(ptr, s0));
  CK_ERR(cudasim_kernel(s0, ptr, 4096, 0), cudaErrorIllegalAddress); /* freed */
  CK(cudaFree(region));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s0));
  CK(cudaMemPoolDestroy(p));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_multi");
  TCase *tc = tcase_create("issue6");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, stream_devices);
  tcase_add_test(tc, pointer_attributes);
  tcase_add_test(tc, ipc_support);
  tcase_add_test(tc, shareable_pool_never_shrinks);
  tcase_add_test(tc, export_and_import);
  tcase_add_test(tc, kernel_access);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
