/* spool as PyTorch's CUDA allocator: the C functions that torch.cuda.memory.CUDAPluggableAllocator
 * calls, and a few that the Python package (python/spool/) calls through ctypes.
 *
 * The plug-in (libspool_torch.so, built from plugin/ with its own copy of spool, so that it is one
 * file to load by path) keeps one spool pool per device, made at the device's first allocation
 * from spool's defaults, then the plug-in's (chunk_idle=1000000: free heap chunks wait for
 * empty_cache or an out-of-memory, as PyTorch's own segments do), then SPOOL_CONF, then the
 * text given to spool_torch_configure (the config's `device` is ignored: each pool gets its
 * own device). Tensors are spool buffers:
 * allocated and freed in stream order on the stream PyTorch names, so spool's stream caches,
 * out-of-memory policy, cross-stream hand-off and statistics work for PyTorch as they do for C.
 *
 * Failures: PyTorch's allocator interface has no status return. Where the caller is PyTorch, a
 * failure throws a C++ exception through the plug-in's C frames (they are compiled with
 * -fexceptions, and nothing is locked or half done when it is thrown): c10::OutOfMemoryError
 * when the device is out of memory (Python sees torch.OutOfMemoryError), std::runtime_error
 * otherwise (Python sees RuntimeError); the message is spool's own (spool_last_error()).
 * spool_torch_free cannot throw (PyTorch frees in destructors): it writes its failure to stderr
 * and counts it. The functions meant for ctypes return a spool_status and leave the message in
 * spool_torch_last_error().
 *
 * Not installed: a header for the plug-in's sources and its tests. The exported names are what
 * python/spool/ looks up. */
#ifndef SPOOL_TORCH_H
#define SPOOL_TORCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SPOOL_TORCH_API __attribute__((visibility("default")))
#else
#define SPOOL_TORCH_API
#endif

/* Devices the plug-in serves: ordinals 0 to SPOOL_TORCH_MAX_DEVICES - 1. */
#define SPOOL_TORCH_MAX_DEVICES 64

/* ---- what PyTorch calls (CUDAPluggableAllocator and its hooks) ------------------------------- */

/* The allocation function: size bytes on device, in stream order on stream (the current stream
 * PyTorch passes). Makes the device's pool at its first call. size 0 returns NULL and allocates
 * nothing (PyTorch keeps a null data pointer for an empty tensor). Never returns NULL for
 * size > 0: it throws (see above) when the pool cannot be made, the memory-fraction limit
 * would be passed, or spool_alloc fails. Thread safe (autograd's threads allocate too). The
 * caller owns the pointer and gives it back with spool_torch_free. */
SPOOL_TORCH_API void *spool_torch_alloc(size_t size, int device, cudaStream_t stream);

/* The free function: ptr (from spool_torch_alloc with this size, device and stream) is freed in
 * stream order on stream, as spool_free does; streams recorded with spool_torch_record_stream
 * are waited for too. NULL: nothing. Never throws: a failure (a pointer spool did not give out,
 * a CUDA error) is written to stderr with spool's message and counted ("free_failures" in
 * spool_torch_stats_json); the pointer then stays allocated. Thread safe. */
SPOOL_TORCH_API void spool_torch_free(void *ptr, size_t size, int device, cudaStream_t stream);

/* Tensor.record_stream: the buffer at ptr is also used on stream, so its memory is reused only
 * once stream's work queued before the free is done (spool_record_stream, spool's cross-stream
 * hand-off). NULL ptr (an empty tensor): nothing. Throws std::runtime_error with spool's message
 * when ptr is not the start of a live buffer of the plug-in's pools, or spool refuses (track=off,
 * a capture, more than 8 streams). Thread safe. */
SPOOL_TORCH_API void spool_torch_record_stream(void *ptr, cudaStream_t stream);

/* torch.cuda.empty_cache (the reset hook): for every pool made so far, synchronizes its device
 * (memory freed on a stream whose work is still queued is in use until then) and trims the pool
 * to what is in use (spool_trim(pool, 0), which first gives the stream caches' blocks back).
 * Throws std::runtime_error with spool's message if a device or a pool fails, after trying them
 * all. Thread safe. */
SPOOL_TORCH_API void spool_torch_empty_cache(void);

/* The init hook: PyTorch passes its device count when the allocator is first used. Remembered
 * for messages only; no CUDA call. Thread safe. */
SPOOL_TORCH_API void spool_torch_init(int device_count);

/* torch.cuda.set_per_process_memory_fraction: later allocations on device fail with
 * c10::OutOfMemoryError when the bytes PyTorch holds there (asked for and not yet freed, as
 * spool_torch_alloc and spool_torch_free count them) would pass fraction times the device's
 * total memory (cudaMemGetInfo, now). What the pool keeps reserved for reuse does not count: the
 * limit is on tensors, and spool's own limit on reserved memory is the config's max_size.
 * Allocations made before stay. Throws std::runtime_error for a fraction outside [0, 1], a
 * device out of range, or a failing cudaMemGetInfo. Thread safe. */
SPOOL_TORCH_API void spool_torch_set_memory_fraction(double fraction, int device);

/* ---- what python/spool/ calls (ctypes) ------------------------------------------------------- */

/* Sets the config of the pools to come: spool's defaults and the plug-in's, then SPOOL_CONF,
 * then text on top (NULL or "": nothing on top), checked with spool_config_validate. Returns
 * SPOOL_OK; SPOOL_ERR_CONFIG (bad text or SPOOL_CONF: the message names the key and line);
 * SPOOL_ERR_INVALID (a pool has been made already: the config can no longer change). On
 * failure the config is as it was. Thread safe. text stays the caller's. */
SPOOL_TORCH_API int spool_torch_configure(const char *text);

/* spool_torch_alloc for callers that cannot take a C++ exception (the CuPy and Numba adapters
 * of the Python package call it through ctypes, so that every framework in a process shares the
 * device's one pool): the same pool, limits and counters, but a failure is returned, never
 * thrown. *out is the buffer (NULL for size 0, and on failure); free it with spool_torch_free
 * with the same size and device. Returns SPOOL_OK; SPOOL_ERR_INVALID (out NULL, device out of
 * range); SPOOL_ERR_OOM (spool's out of memory, or the memory-fraction limit); what spool_alloc
 * or making the pool returned. The message is in spool_torch_last_error(). Thread safe. */
SPOOL_TORCH_API int spool_torch_try_alloc(void **out, size_t size, int device,
                                          cudaStream_t stream);

/* Writes device's statistics as one JSON object into buf (len bytes, NUL-terminated): the keys
 * of spool_stats_json (spool_stats's fields, "device", "device_free", "device_total") and the
 * plug-in's own: "torch_bytes_in_use" (bytes PyTorch holds on the device as the plug-in counts
 * them), "torch_limit" (the memory-fraction limit in bytes, or null) and "free_failures".
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (buf NULL or len 0, device out of range, no pool on the
 * device yet (it is made at the device's first allocation), len too small: the message gives
 * the size needed, and buf holds ""); SPOOL_ERR_CUDA. Thread safe; buf stays the caller's. */
SPOOL_TORCH_API int spool_torch_stats_json(int device, char *buf, size_t len);

/* ---- what C code in the same process calls ---------------------------------------------------- */

struct spool_pool;

/* The plug-in's pool of device, for C (or C++, or ctypes) code in the process that shares
 * memory with the frameworks: made as at the device's first allocation when there is none yet
 * (the config of spool_torch_configure and SPOOL_CONF). The library also exports spool's C API
 * (include/spool/spool.h, shipped in the package's include/ folder: spool.include_dir()), so
 * code linked to this library, not to libspool, calls spool_alloc, spool_free, spool_stats_get
 * and the rest on this pool with the same state as the frameworks: one working set, one report,
 * one set of counters (torch.cuda.memory_stats counts its buffers too). The buffers do not count
 * against torch.cuda.set_per_process_memory_fraction, which limits the frameworks' allocations.
 * The pool stays the plug-in's: never destroy it. Returns SPOOL_OK; SPOOL_ERR_INVALID (out NULL,
 * device out of range); what making the pool returned (message in spool_torch_last_error()).
 * Thread safe. */
SPOOL_TORCH_API int spool_torch_pool(int device, struct spool_pool **out);

/* ---- what spool's allocator class for PyTorch calls (python/spool/_torch_native.cpp) --------- */

/* spool's counters of a device's pool and the plug-in's, as PyTorch's memory statistics read
 * them (torch.cuda.memory_stats and the functions on it). A struct of this header rather than
 * spool_stats, so that the class, built against the installed PyTorch on the user's machine,
 * needs only this file. Fields may be appended: size says how many the caller knows. */
typedef struct spool_torch_counters {
  size_t size;                  /* set by the caller to sizeof(spool_torch_counters) */
  uint64_t bytes_in_use, bytes_in_use_peak;       /* spool_stats's fields of the same names ... */
  uint64_t buffers_in_use, buffers_in_use_peak;
  uint64_t bytes_reserved, bytes_reserved_peak;
  uint64_t bytes_allocated;                       /* asked by all allocations since create */
  uint64_t allocs, frees, ooms, oom_retries;
  uint64_t chunk_allocs, chunk_frees;
  uint64_t bytes_cached, largest_free_block;      /* ... to here */
  uint64_t torch_bytes_in_use;                    /* as in spool_torch_stats_json */
} spool_torch_counters;

/* Fills *out with device's counters; all zero (size kept) when the device has no pool yet, as
 * PyTorch reports a device it has not allocated on. Returns SPOOL_OK; SPOOL_ERR_INVALID (out
 * NULL, out->size smaller than this struct, device out of range); SPOOL_ERR_CUDA (the pool's
 * attributes could not be read). The message is in spool_torch_last_error(). Thread safe. */
SPOOL_TORCH_API int spool_torch_counters_get(int device, spool_torch_counters *out);

/* torch.cuda.reset_peak_memory_stats: spool_stats_reset_peaks on device's pool (every peak
 * becomes its current value, the pool's high-water marks included). No pool yet: SPOOL_OK,
 * nothing to do. Returns what spool_stats_reset_peaks returns, and SPOOL_ERR_INVALID for a
 * device out of range. Thread safe. */
SPOOL_TORCH_API int spool_torch_reset_peaks(int device);

/* The caching allocator's cacheInfo, which cuDNN's benchmark reads to bound the workspace of
 * the algorithms it tries: *largest becomes the largest allocation device's pool could serve
 * now. Started from *largest as passed, or, when that is 0, from the device's free memory
 * (cudaMemGetInfo), as PyTorch's own allocator starts; raised to the pool's largest idle block
 * (largest_free_block), then capped by what max_size leaves the pool to reserve and by the
 * memory-fraction limit. Returns SPOOL_OK; SPOOL_ERR_INVALID (largest NULL, device out of
 * range); SPOOL_ERR_CUDA. Thread safe. */
SPOOL_TORCH_API int spool_torch_cache_info(int device, size_t *largest);

/* This thread's last failure of a plug-in function, in words ("" if none): the message of the
 * last status other than SPOOL_OK, or of the last exception thrown. Thread-local storage owned
 * by the plug-in, valid until this thread's next plug-in call. Thread safe. */
SPOOL_TORCH_API const char *spool_torch_last_error(void);

/* spool's version as "MAJOR.MINOR.PATCH" (static storage), to check what was loaded. Thread
 * safe. */
SPOOL_TORCH_API const char *spool_torch_version(void);

/* ---- internals: the plug-in's sources and its tests ------------------------------------------ */

/* Throws for a failure, never returns (plugin/spool_torch_throw.cc): c10::OutOfMemoryError when
 * oom is nonzero and PyTorch's c10 libraries are loaded, std::runtime_error otherwise, with
 * message. function, file and line say where (c10 shows them). Call it with no lock held and
 * nothing to clean up: it unwinds through the caller's frame. */
void spool__torch_throw(int oom, const char *function, const char *file, int line,
                        const char *message);

/* Replaces spool__torch_throw (NULL: back to it), so that C tests can see what would be thrown:
 * a test's function returns, and the plug-in function then returns too (spool_torch_alloc with
 * NULL). Not for production use. Thread safe. */
typedef void (*spool__torch_throw_fn)(int oom, const char *function, const char *file, int line,
                                      const char *message);
void spool__torch_set_throw(spool__torch_throw_fn fn);

/* Destroys the pools and forgets the config, the limits and the counters, as if the plug-in had
 * just been loaded, so that tests in one process start alike. Returns the first failure of
 * spool_pool_destroy (SPOOL_ERR_LEAKS when buffers were left: they are freed). No other thread
 * may use the plug-in meanwhile. Tests only. */
int spool__torch_forget(void);

#ifdef __cplusplus
}
#endif

#endif /* SPOOL_TORCH_H */
