/* cudasim: a host-side simulation of the part of the CUDA runtime that spool calls, for tests.
 *
 * The runtime functions themselves (cudaMallocFromPoolAsync, cudaStreamSynchronize, ...) are
 * defined by cudasim with the exact signatures of the real cuda_runtime_api.h; a test program
 * links `spool_sim` and `cudasim` instead of libcudart. This header is cudasim's control API:
 * it shapes the simulated machine and injects faults. Test scaffolding only, never linked into
 * the library.
 *
 * Model (see cudasim.c for the details and the simplifications it makes):
 *  - devices with a memory capacity; pools reserve memory from it in 2 MiB segments;
 *  - streams and events with deferred completion: work enqueued on a stream completes at once,
 *    unless the stream is held, in which case it completes only at a synchronize or a release;
 *  - a pool releases free memory down to its release threshold at every stream, event or device
 *    synchronize, and down to minBytesToKeep at cudaMemPoolTrimTo, as CUDA does;
 *  - device memory is real host memory, so cudaMemset and cudaMemcpy work on it;
 *  - stream capture records work into graphs instead of running it, with CUDA's rules (what
 *    invalidates a capture, which calls the capture modes forbid), graph memory nodes, and the
 *    driver's cuStreamIsCapturing through cudaGetDriverEntryPoint[ByVersion];
 *  - every stream has a cudaStreamGetId that is never reused; handles are never reused either,
 *    unless a test asks (cudasim_stream_create_at).
 * All functions are thread safe.
 */
#ifndef CUDASIM_H
#define CUDASIM_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the contract (DESIGN.md) ---------------------------------------------------------- */

/* Fresh devices, streams, pools and counters; every armed failure cleared; 1 device of
 * CUDASIM_DEFAULT_CAPACITY bytes, driver version 13000, pools supported, all peers accessible. */
void cudasim_reset(void);

/* Number of devices; default 1. 0 makes device calls fail with cudaErrorNoDevice. */
void cudasim_set_device_count(int n);

/* Device memory in bytes; reservations beyond it fail with cudaErrorMemoryAllocation. */
void cudasim_set_capacity(int device, size_t bytes);

/* The nth next call of api (by name, e.g. "cudaMallocFromPoolAsync"; nth 1 is the very next
 * call) fails with err and does nothing else. Several may be armed at once. */
void cudasim_fail(const char *api, int nth, cudaError_t err);

/* Work enqueued on s stops completing ... */
void cudasim_hold(cudaStream_t s);

/* ... until released (its pending work completes now); a synchronize completes it too. */
void cudasim_release(cudaStream_t s);

/* How often api was called since the last reset, failed calls included. */
long cudasim_calls(const char *api);

/* Every API called since the last reset and how often (failed calls included), in the order of
 * their first call: fills names[i] (static storage) and counts[i] for i < cap and returns how
 * many APIs there are, so that a test can see every call an operation makes. */
size_t cudasim_calls_all(const char **names, long *counts, size_t cap);

/* ---- more control, for the tests' needs ------------------------------------------------- */

#define CUDASIM_DEFAULT_CAPACITY ((size_t)16 << 30) /* 16 GiB */
#define CUDASIM_GRANULARITY ((size_t)2 << 20)       /* pools reserve in multiples of 2 MiB */
/* What a pool on an H200 reserves at a time (bench/pool_segments.c, driver 580.159.04): a
 * segment of a multiple of 32 MiB for an allocation no segment has room for (512 B, 2 MiB and
 * 32 MiB each reserve 32 MiB, 33 MiB 64, 100 MiB 128), later small ones packed into a segment's
 * free space. */
#define CUDASIM_H200_POOL_SEGMENT ((size_t)32 << 20)

/* The unit pools reserve segments in, a multiple of CUDASIM_GRANULARITY: CUDASIM_GRANULARITY
 * after a reset (the unit the tests are written in), CUDASIM_H200_POOL_SEGMENT for memory
 * figures that read as an H200's (spool_bench_sim). Other values are ignored. */
void cudasim_set_pool_segment(size_t bytes);

/* What cudaDriverGetVersion reports; default 13000. 0 means no driver is installed: then every
 * call but cudaDriverGetVersion and cudaRuntimeGetVersion fails with
 * cudaErrorInsufficientDriver. */
void cudasim_set_driver_version(int version);

/* cudaDevAttrMemoryPoolsSupported of device; default 1. */
void cudasim_set_pools_supported(int device, int supported);

/* What cudaDeviceCanAccessPeer(&can, device, peer) reports; default 1 for distinct devices. */
void cudasim_set_can_access_peer(int device, int peer, int can);

/* Pools created and not yet destroyed (default pools not counted). */
int cudasim_pool_count(void);

/* Allocations live on all devices: pool blocks not yet freed plus cudaMalloc'd memory. */
long cudasim_live_allocations(void);

/* Streams created and not yet destroyed. */
int cudasim_stream_count(void);

/* Operations enqueued on s that have not completed. */
long cudasim_pending(cudaStream_t s);

/* ---- additions -------------------------------------------------------------------------------
 * Notes on the functions above: the control functions are not counted by cudasim_calls and never
 * fail by injection. cudasim_hold, cudasim_release and cudasim_pending take NULL /
 * cudaStreamLegacy (the calling thread's current device's legacy stream) and cudaStreamPerThread
 * (the calling thread's); on an unknown or destroyed stream hold and release do nothing and
 * cudasim_pending returns -1. cudasim_release completes the work but, unlike a synchronize, does
 * not make pools release memory (the real runtime releases only at synchronize calls). */

/* Failures armed with cudasim_fail that have not fired yet (to check that a test used them). */
int cudasim_armed(void);

/* Whether the calling thread is inside a simulated call: a test's host-allocation hook tells
 * cudasim's own allocations from the library's by it. Takes no lock. */
int cudasim_inside(void);

/* ---- stream capture, graphs, stream handles ---------------------------------------------------
 * cudasim models stream capture and the graphs it makes (see cudasim.c for what and how). The
 * simulated driver function cuStreamIsCapturing (handed out by cudaGetDriverEntryPoint*) is
 * counted by cudasim_calls("cuStreamIsCapturing") and can be made to fail with
 * cudasim_fail("cuStreamIsCapturing", nth, err): it then returns err as a CUresult, the same
 * number where the driver has that code, CUDA_ERROR_NOT_INITIALIZED for
 * cudaErrorInsufficientDriver, CUDA_ERROR_UNKNOWN otherwise. */

/* A new stream (current device, flags as cudaStreamCreateWithFlags) at the address of the
 * destroyed stream reuse, as the real runtime may hand out a freed stream's address again; its
 * cudaStreamGetId is new. NULL when reuse is not a destroyed stream, flags are invalid or there
 * is no device. Without this call, handles are never reused. */
cudaStream_t cudasim_stream_create_at(cudaStream_t reuse, unsigned flags);

/* The capture status of s (cudaStreamCaptureStatusNone, Active or Invalidated), without the
 * checks and side effects of the runtime calls; -1 for an unknown or destroyed stream. */
int cudasim_capturing(cudaStream_t s);

/* Graph allocations live now: allocated by a graph launch and not freed yet (by a free node,
 * cudaFreeAsync or cudaFree). They are not counted by cudasim_live_allocations. */
long cudasim_graph_allocations(void);
/* ---- several devices and processes (see cudasim_ipc.c) ------------------------------------ */

/* Whether pools on device may be created with cudaMemHandleTypePosixFileDescriptor
 * (cudaDevAttrMemoryPoolSupportedHandleTypes); default 1 where pools are supported. */
void cudasim_set_ipc_supported(int device, int supported);

/* Buffers imported with cudaMemPoolImportPointer and not yet freed. */
int cudasim_imports(void);

/* Stands for a kernel on stream s that reads (write 0) or writes (write 1) [ptr, ptr + bytes):
 * cudaSuccess, and one operation enqueued on s, when the range lies in one live allocation
 * that s's device may access that way (its own device's memory, or a pool's access flags for
 * it); cudaErrorIllegalAddress otherwise, as a GPU would report at the next synchronize (here
 * at once, and not sticky). The test does the loads and stores itself on success. */
cudaError_t cudasim_kernel(cudaStream_t s, const void *ptr, size_t bytes, int write);

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H */
