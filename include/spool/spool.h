/* spool: a stream-ordered device-memory allocator over CUDA's cudaMemPool.
 *
 * The whole C API. Conventions, for every function below unless its comment says otherwise:
 *  - It returns a spool_status; SPOOL_OK is 0. On failure spool_last_error() says what happened
 *    in words (the CUDA error name and the numbers involved) until this thread's next failure.
 *  - Results come back through out-parameters, which are written only on success, except where a
 *    comment says they are cleared on failure (spool_alloc sets *ptr to NULL).
 *  - A failed call leaves the pool as it was: nothing allocated, nothing freed; only the failure
 *    counters of spool_stats (alloc_failures, ooms) move. Exceptions are named where they occur.
 *  - Where a comment lists SPOOL_ERR_CUDA, a CUDA failure that means out of memory, no usable
 *    device or an unsupported feature comes back as SPOOL_ERR_OOM, SPOOL_ERR_NO_DEVICE or
 *    SPOOL_ERR_UNSUPPORTED instead.
 *  - After a CUDA failure that spool reports through its status, spool clears the runtime's last
 *    error, so that cudaGetLastError() afterwards speaks only of the caller's own calls (sticky
 *    errors stay, as CUDA keeps returning them).
 *  - The caller owns every pointer it passes in; spool never keeps one past the call unless the
 *    comment says so. spool owns the spool_pool objects it creates until spool_pool_destroy.
 *  - No spool function runs at process exit: there are no atexit handlers and no destructors.
 *    Destroy your pools before main returns if you want them destroyed.
 */
#ifndef SPOOL_SPOOL_H
#define SPOOL_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include <spool/export.h>
#include <spool/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

/* SPOOL_VERSION of the library actually linked (major * 10000 + minor * 100 + patch), to compare
 * with the SPOOL_VERSION this header was compiled with. Thread safe. */
SPOOL_EXPORT unsigned spool_version(void);

/* "MAJOR.MINOR.PATCH" of the library actually linked; static storage. Thread safe. */
SPOOL_EXPORT const char *spool_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------------------------- */

/* X(NAME, string). Values are assigned in this order from 0 and never reordered: new statuses are
 * appended. */
#define SPOOL_STATUS_MAP(X)                                                                       \
  X(OK, "success")                                                                                \
  X(ERR_INVALID, "invalid argument")                                                              \
  X(ERR_OOM, "out of device memory")                                                              \
  X(ERR_CUDA, "CUDA runtime error")                                                               \
  X(ERR_NO_DEVICE, "no usable CUDA device")                                                       \
  X(ERR_UNSUPPORTED, "not supported by this device, driver or build")                             \
  X(ERR_CONFIG, "invalid configuration")                                                          \
  X(ERR_DOUBLE_FREE, "pointer freed twice")                                                       \
  X(ERR_UNKNOWN_POINTER, "pointer was not allocated by spool")                                    \
  X(ERR_WRONG_POOL, "pointer belongs to another pool")                                            \
  X(ERR_LEAKS, "buffers were still allocated when the pool was destroyed")                        \
  X(ERR_HOST_OOM, "out of host memory")                                                           \
  X(ERR_IO, "file could not be read or written")                                                  \
  X(ERR_INTERIOR_POINTER, "pointer points inside a buffer, not at its start")                   \
  X(ERR_BATCH_MEMBER, "pointer is a sub-buffer of a batch: free the batch's first pointer")      \
  X(ERR_SCOPE_ENDED, "scope was already ended")

typedef enum spool_status {
#define SPOOL__STATUS_ENUM(name, str) SPOOL_##name,
  SPOOL_STATUS_MAP(SPOOL__STATUS_ENUM)
#undef SPOOL__STATUS_ENUM
  SPOOL_STATUS_COUNT /* number of statuses; not a status */
} spool_status;

/* "SPOOL_ERR_OOM". A value outside the enum gets "SPOOL_STATUS_<n>" (thread-local storage, valid
 * until this thread's next call with an unknown value). Never NULL. Thread safe. */
SPOOL_EXPORT const char *spool_status_name(spool_status s);

/* "out of device memory". A value outside the enum gets "unknown status". Static storage, never
 * NULL. Thread safe. */
SPOOL_EXPORT const char *spool_status_string(spool_status s);

/* This thread's last failure in words, e.g. "spool_alloc: out of device memory: asked 3.00 GiB
 * on device 0; pool holds 1.20 GiB in use, 1.50 GiB reserved; device has 0.40 GiB free of
 * 80.00 GiB". Like errno it is set by failures only: read it right after a call that returned
 * an error. "" when this thread has seen no failure. Thread-local storage owned by spool, valid
 * until this thread's next spool call. Thread safe. */
SPOOL_EXPORT const char *spool_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------------------------- */

#define SPOOL_MAX_PEERS 64 /* most devices a peer_access list can name */

/* Where a pool's memory comes from (config key `pool`). */
typedef enum spool_pool_source {
  SPOOL_POOL_OWN = 0,     /* `own`: a new cudaMemPool, created and destroyed by spool (default) */
  SPOOL_POOL_DEFAULT = 1, /* `default`: the device's default pool (the one cudaMallocAsync uses),
                             adopted: configured as below but never destroyed by spool */
} spool_pool_source;

/* How much the pool knows of each live buffer (config key `track`). */
typedef enum spool_track {
  SPOOL_TRACK_OFF = 0,    /* `off`: counts of buffers only; frees go to the driver unchecked,
                             bytes_in_use stays 0, leaks are counted but cannot be listed */
  SPOOL_TRACK_COUNTS = 1, /* `counts` (default): a table of live buffers (size, stream, number,
                             call site or tag) and of recent frees (where freed): double frees,
                             foreign and interior pointers are caught before they reach the
                             driver, leaks are listed and freed */
  SPOOL_TRACK_FULL = 2,   /* `full`: counts, plus the time of every allocation, so that the leak
                             report gives each buffer's age (a clock read per allocation) */
} spool_track;

#define SPOOL_REPORT_PATH_MAX 1024 /* longest `report` path, NUL included */

/* Whether the pool can be shared with other processes (config key `ipc`). */
typedef enum spool_ipc {
  SPOOL_IPC_NONE = 0,     /* `none` (default): an ordinary pool, this process only */
  SPOOL_IPC_POSIX_FD = 1, /* `posix_fd`: shareable through a file descriptor (spool_pool_export);
                             CUDA never gives its memory back, so release_threshold must be max */
} spool_ipc;

/* One pool's settings. Fields carry the names of the text keys. Start from spool_config_init()
 * so that fields added by later versions get their defaults. */
typedef struct spool_config {
  int device;                  /* CUDA device ordinal. Default 0. */
  uint64_t release_threshold;  /* reserved bytes the pool keeps at a synchronize instead of
                                  returning them to the driver. Default UINT64_MAX: keep all. */
  uint64_t reserve;            /* bytes to reserve at create (alloc + free + synchronize), so the
                                  first allocations find memory ready. Default 0. Must not exceed
                                  release_threshold, or the first synchronize would give it back. */
  uint64_t max_size;           /* most bytes the pool may reserve; 0 means no limit (the device's
                                  memory). Default 0. Needs CUDA 12.2 (build and driver); own pools
                                  only, since CUDA fixes it when the pool is created. */
  bool reuse_follow_event_dependencies;   /* cudaMemPoolReuseFollowEventDependencies. Default on. */
  bool reuse_allow_opportunistic;         /* cudaMemPoolReuseAllowOpportunistic. Default on. */
  bool reuse_allow_internal_dependencies; /* cudaMemPoolReuseAllowInternalDependencies. Default
                                             on. */
  int peer_access[SPOOL_MAX_PEERS]; /* other devices given read-write access to the pool's
                                       memory; the pool's own device, if listed, is skipped (it
                                       always has access). Default: none. */
  int peer_access_count;            /* entries used in peer_access */
  spool_pool_source pool;           /* key `pool`: own | default. Default own. */
  spool_track track;                /* key `track`: off | counts | full. Default counts. */
  char report[SPOOL_REPORT_PATH_MAX]; /* file the leak report is appended to; "" (default):
                                       the SPOOL_REPORT environment variable, else stderr */
  unsigned oom_retries;             /* times an allocation that ran out of memory is retried
                                       after the pool gave back what it could. Default 2. */
  bool poison;                      /* fill new buffers with 0xA5 and freed ones with 0xDD
                                       (cudaMemsetAsync, in stream order), and keep freed heap
                                       blocks out of reuse for a while (quarantine). Default
                                       off. Needs track=counts or full (the size of a freed
                                       buffer). */
  unsigned quarantine;              /* with poison=on: freed blocks each stream keeps out of
                                       reuse (and at most SPOOL_QUARANTINE_BYTES of them), so
                                       that a read after the free sees 0xDD instead of the next
                                       owner's data. 0 to 65536. Default
                                       SPOOL_QUARANTINE_DEFAULT. */
  bool cache;                       /* the stream-ordered heap in front of the pool: chunks
                                       from the pool, split and merged into blocks, each
                                       stream's freed blocks reused on it without a CUDA call.
                                       Default on; off: every allocation and free goes to the
                                       pool (cudaMallocFromPoolAsync / cudaFreeAsync). */
  uint64_t front_limit;             /* bytes of freed blocks each stream keeps ready in front of
                                       the heap, for a repeat of their size at the cost of a
                                       hit; a free beyond it goes into the heap (except one
                                       block of the size the stream allocated last, kept
                                       until the stream asks another size, and what a brief
                                       stream keeps: front_brief). 0: one block per stream,
                                       no brief fronts. Default SPOOL_FRONT_LIMIT_DEFAULT. */
  bool front_brief;                 /* a stream that frees its buffers within a few of its own
                                       allocations, with few live at once (a temporary per
                                       kernel, of ever-changing sizes), keeps freed blocks up to
                                       its own peak bytes in use in its front beyond
                                       front_limit, and may take a block of any larger size
                                       from it: a hit per pair, for about one block of its
                                       largest size per stream. Default on; off: every stream
                                       keeps to front_limit and to blocks within twice the
                                       size. */
  uint64_t heap_max_block;          /* larger allocations skip the heap and go to the pool. At
                                       most SPOOL_HEAP_MAX_BLOCK_LIMIT (the default). */
  unsigned chunk_idle;              /* heap allocations a chunk whose blocks are all free may
                                       wait for a user before it goes back to the pool. Default
                                       SPOOL_CHUNK_IDLE_DEFAULT; 0: at once. */
  unsigned fence_every;             /* heap operations on a stream between the events it records
                                       so that other streams may reuse what it freed: fewer is
                                       less memory, more is fewer CUDA calls. 1 to 65536.
                                       Default SPOOL_FENCE_EVERY_DEFAULT. */
  uint64_t fence_bytes;             /* a free of a heap block of at least this many bytes
                                       records its stream's fence at once (one event), so that
                                       other streams may reuse the block as soon as the work
                                       queued before the free is done, not fence_every
                                       operations later. 0 (default): never. */
  bool capture_check;               /* ask the driver (about 15 ns on an H200) whether the
                                       stream is being captured into a graph before using its
                                       cache, at the allocation (bypass the cache if so: a
                                       reused pointer would be baked into the graph) and at the
                                       free (refuse a cached buffer: the cache would hand it out
                                       before the graph ran). Default on; off only for code that
                                       never captures. */
  bool cache_owner;                 /* a stream's cache used by one thread belongs to it: that
                                       thread takes no lock on a hit or a free (another thread
                                       takes the cache back with a process-wide barrier, Linux
                                       membarrier). Default on; where the barrier is missing,
                                       every cache takes its lock. */
  spool_ipc ipc;                    /* key `ipc`: none | posix_fd. Default none. posix_fd needs
                                       pool=own and release_threshold=max. */
  bool nvtx;                        /* tell memory tools (compute-sanitizer, through the NVTX
                                       memory API) which parts of the heap's chunks are live
                                       buffers, so that they report a use after spool_free or a
                                       write past a buffer as they do for cudaMallocAsync.
                                       Default on: with no tool attached it costs one branch;
                                       off skips even that. */
  char trace[SPOOL_REPORT_PATH_MAX]; /* file the pool records its calls to (docs/trace.md),
                                       %p: the process id, %n: the pool's number; "" (default):
                                       the SPOOL_TRACE environment variable, else no trace */
} spool_config;

/* Defaults: 1 MiB of ready blocks per stream keeps a stream's repeated small sizes on the hit
 * path; a stream that repeats one size keeps that one block whatever its size (a loop of 64 MiB
 * buffers still hits). More holds memory idle that the heap could merge: on cudasim, 4 MiB
 * instead of 1 MiB took random sizes on 4 streams from 204 to 268 MiB reserved. An all-free
 * chunk waits 256 heap allocations before it goes back, which keeps a steady loop from taking
 * and returning chunks. */
#define SPOOL_FRONT_LIMIT_DEFAULT ((uint64_t)1 << 20)   /* 1 MiB */
#define SPOOL_HEAP_MAX_BLOCK_LIMIT ((uint64_t)1 << 40)  /* 1 TiB */
#define SPOOL_CHUNK_IDLE_DEFAULT 256u
/* On cudasim's replay of the bench, a fence every 64 heap operations instead of 16 took churn
 * from 1.14 to 1.15 reserved/live and random on 4 streams from 204 to 264 MiB; every 256, to
 * 1.21 and 296 MiB. */
#define SPOOL_FENCE_EVERY_DEFAULT 16u
/* Quarantine: the last 64 freed blocks of a stream, at most 256 MiB of them. */
#define SPOOL_QUARANTINE_DEFAULT 64u
#define SPOOL_QUARANTINE_BYTES ((uint64_t)256 << 20)

/* Fills *cfg with the documented defaults above. cfg must not be NULL. Thread safe. */
SPOOL_EXPORT void spool_config_init(spool_config *cfg);

/* Applies `key=value` settings from text on top of *cfg. Entries are separated by commas or
 * newlines; `#` starts a comment to the end of the line; spaces around keys and values are
 * ignored; a value in double quotes (`report="/tmp/a, b.txt"`) is taken as it is, commas and
 * `#` included. Sizes take B, KiB/MiB/GiB/TiB and K/M/G/T (powers of 1024), KB/MB/GB/TB (powers of
 * 1000), decimals (`1.5GiB`) and `max`; booleans on/off/true/false/1/0. A key given twice keeps
 * the last value.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (cfg or text NULL); SPOOL_ERR_CONFIG (unknown key, bad
 * value: the message names the line, the key, what was expected and the nearest valid key).
 * It allocates nothing. On failure *cfg is unchanged. Thread safe for distinct cfg. */
SPOOL_EXPORT spool_status spool_config_parse(spool_config *cfg, const char *text);

/* spool_config_parse on the contents of the file at path; messages name the path and line. A
 * UTF-8 mark at the start is skipped. Returns what spool_config_parse returns (SPOOL_ERR_CONFIG
 * also for a NUL byte, with its line, and for a file over 1 MiB, which is read no further),
 * SPOOL_ERR_IO when the file cannot be read (the message gives the path and the system's
 * reason) and SPOOL_ERR_HOST_OOM. On failure *cfg is unchanged. Thread safe for distinct cfg. */
SPOOL_EXPORT spool_status spool_config_load(spool_config *cfg, const char *path);

/* spool_config_parse on the environment variable SPOOL_CONF, if it is set (unset or empty:
 * SPOOL_OK, *cfg unchanged); a UTF-8 mark at its start is skipped, as in files. Messages name
 * SPOOL_CONF and the line. Returns what spool_config_parse returns. Thread safe for distinct
 * cfg, as long as no thread changes the environment meanwhile. */
SPOOL_EXPORT spool_status spool_config_from_env(spool_config *cfg);

/* Checks the settings against each other without touching CUDA (reserve within
 * release_threshold and max_size, peer list without duplicates or negative ordinals, ...).
 * spool_pool_create calls it. Returns SPOOL_OK, SPOOL_ERR_INVALID (cfg NULL) or
 * SPOOL_ERR_CONFIG naming the fields and their values. Thread safe. */
SPOOL_EXPORT spool_status spool_config_validate(const spool_config *cfg);

/* Writes *cfg as config text that spool_config_parse reads back to the same settings, one
 * `key=value` per line, NUL-terminated, into buf of len bytes. Returns SPOOL_OK,
 * SPOOL_ERR_INVALID (cfg or buf NULL, or len too small: the message gives the size needed, and
 * buf is untouched). To learn the size first, use spool_config_format_sized. Thread safe. */
SPOOL_EXPORT spool_status spool_config_format(const spool_config *cfg, char *buf, size_t len);

/* spool_config_format that also says how big buf must be: *needed is set to the text's length
 * plus its NUL, on SPOOL_OK and on a buffer too small alike. len 0 (buf may then be NULL) asks
 * for the size only: SPOOL_OK, nothing written. The usual pattern:
 *   size_t n; spool_config_format_sized(cfg, NULL, 0, &n); buf = malloc(n);
 *   spool_config_format_sized(cfg, buf, n, &n);
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (cfg or needed NULL, buf NULL with len > 0, len too small
 * but not 0: buf untouched, *needed set). On the other failures *needed is 0. Thread safe;
 * buf and needed are the caller's. */
SPOOL_EXPORT spool_status spool_config_format_sized(const spool_config *cfg, char *buf,
                                                    size_t len, size_t *needed);

/* ---------------------------------------------------------------------------------------------
 * Pools
 * ------------------------------------------------------------------------------------------- */

typedef struct spool_pool spool_pool; /* opaque */

/* Creates a pool as cfg says: a new cudaMemPool on cfg->device (or the device's default pool,
 * with pool=default), configured with the release threshold, the reuse flags and the peer access
 * list, and primed with `reserve` bytes. cfg NULL means the defaults, then SPOOL_CONF on top.
 * The current device of the calling thread is the same afterwards.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL); SPOOL_ERR_CONFIG (settings that contradict
 * each other, a peer that is no device); SPOOL_ERR_NO_DEVICE (no driver, no device, or no device
 * cfg->device, with CUDA's reason); SPOOL_ERR_UNSUPPORTED (driver older than 11.2, a device
 * without memory pools, max_size without CUDA 12.2, a peer that cannot access the device);
 * SPOOL_ERR_OOM (reserve could not be met); SPOOL_ERR_CUDA; SPOOL_ERR_HOST_OOM. On failure
 * *pool is NULL and nothing is left behind (the one exception, said in the message: when CUDA
 * refuses every way of freeing the reserve, it stays allocated in the pool). Thread safe. The
 * caller owns *pool and must pass it to spool_pool_destroy. */
SPOOL_EXPORT spool_status spool_pool_create(spool_pool **pool, const spool_config *cfg);

/* Like spool_pool_create, but over an existing cudaMemPool_t that the caller keeps owning:
 * spool configures it as cfg says (release threshold, reuse flags, peer access, reserve; cfg NULL:
 * defaults then SPOOL_CONF; cfg->pool is ignored) and never destroys it. cfg->device must be the
 * device the pool's memory lives on (CUDA cannot tell spool). Settings changed on an adopted pool
 * stay changed after spool_pool_destroy; a failed adopt puts them back. Returns what
 * spool_pool_create returns, and SPOOL_ERR_INVALID for a NULL handle, SPOOL_ERR_CONFIG for
 * max_size (fixed when the pool was created) or a device without read-write access to the pool.
 * Thread safe. */
SPOOL_EXPORT spool_status spool_pool_adopt(spool_pool **pool, cudaMemPool_t handle,
                                           const spool_config *cfg);

/* Destroys the pool. Buffers still allocated are leaks: the leak report (see spool_leaks) is
 * appended to the file named by cfg.report, else by the environment variable SPOOL_REPORT, else
 * written to stderr; then all are freed after a device synchronize (their streams may be gone;
 * with track=off spool cannot free them), and the call returns SPOOL_ERR_LEAKS (or
 * SPOOL_ERR_CUDA when CUDA refused to synchronize or free: the message then says how many
 * leaked buffers, or how much of the heap's chunks, stay allocated: CUDA keeps a destroyed
 * pool's memory until it is freed). An own pool is
 * then destroyed with cudaMemPoolDestroy; an adopted one is left to its owner. NULL: SPOOL_OK,
 * nothing done. Returns SPOOL_OK, SPOOL_ERR_LEAKS, SPOOL_ERR_CUDA; the pool is gone in every
 * case. A pointer that is no live pool (destroyed already) is SPOOL_ERR_INVALID, nothing done:
 * only its address is compared, so this catches a second destroy unless a new pool has been
 * given the same address since. Not thread safe with other calls on the same pool: no other
 * thread may use it meanwhile, and the pointer is invalid after. */
SPOOL_EXPORT spool_status spool_pool_destroy(spool_pool *pool);

/* The cudaMemPool_t under the pool, for CUDA calls spool does not wrap; NULL for a NULL pool.
 * The pool keeps owning it: do not destroy it. Thread safe. */
SPOOL_EXPORT cudaMemPool_t spool_pool_handle(const spool_pool *pool);

/* The device ordinal the pool's memory lives on; -1 for a NULL pool. Thread safe. */
SPOOL_EXPORT int spool_pool_device(const spool_pool *pool);

/* The settings the pool was created with. NULL for a NULL pool. Owned by the pool, valid until
 * spool_pool_destroy. Thread safe. */
SPOOL_EXPORT const spool_config *spool_pool_config(const spool_pool *pool);

/* ---------------------------------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------------------------------- */

/* Allocates size bytes for use on stream, in stream order (cudaMallocFromPoolAsync): the memory
 * may be used by work queued on stream after this call, and by other streams once they wait for
 * it. The pointer is aligned to at least 256 bytes. size 0 gives *ptr = NULL and SPOOL_OK.
 * When the device is out of memory, the allocation first gives back what it can (see
 * spool_oom_fn and the README): it flushes the stream caches and trims this pool and the other
 * spool pools on the device to what they use, synchronizes the device before later retries
 * (none of this while stream is being captured), and may call the out-of-memory handler. These effects stay even when the
 * allocation fails in the end; they are the named exception to "a failed call leaves the pool
 * as it was". With poison=on the new buffer is filled with 0xA5 on stream.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or ptr NULL; stream belongs to another device than
 * the pool: see "Several devices"); SPOOL_ERR_UNSUPPORTED (an imported pool; a shareable pool
 * while stream is capturing: see "Sharing a pool"); SPOOL_ERR_OOM (the message gives the
 * size asked, the pool's in-use and reserved bytes, its limit, the device's free and total
 * memory, and the retries made); SPOOL_ERR_CUDA (another CUDA failure, e.g. an invalid
 * stream); SPOOL_ERR_HOST_OOM. On failure *ptr is NULL. Thread safe. The caller owns *ptr and
 * returns it with spool_free. */
SPOOL_EXPORT spool_status spool_alloc(spool_pool *pool, void **ptr, size_t size,
                                      cudaStream_t stream);

/* spool_alloc that records where it was called from (with track=counts or full; ignored with
 * off), for the leak report and for messages about the buffer. file must outlive the buffer
 * (__FILE__ does).
 * Use it through SPOOL_ALLOC. Returns what spool_alloc returns. Thread safe. */
SPOOL_EXPORT spool_status spool_alloc_at(spool_pool *pool, void **ptr, size_t size,
                                         cudaStream_t stream, const char *file, int line);
#define SPOOL_ALLOC(pool, ptr, size, stream)                                                      \
  spool_alloc_at((pool), (ptr), (size), (stream), __FILE__, __LINE__)

/* spool_alloc that names the buffer with the caller's tag (track=counts or full) in the leak report
 * and in messages. spool keeps the pointer, not a copy: tag must outlive the buffer (a string
 * literal does). Returns what spool_alloc returns. Thread safe. */
SPOOL_EXPORT spool_status spool_alloc_tagged(spool_pool *pool, void **ptr, size_t size,
                                             cudaStream_t stream, const char *tag);

/* Frees ptr in stream order (cudaFreeAsync): the memory is reused once stream's work queued so
 * far is done, and at once by later allocations on the same stream. The stream need not be the
 * one ptr was allocated on. NULL ptr: SPOOL_OK, nothing done. With poison=on the buffer is first
 * overwritten with 0xDD on stream.
 * During a stream capture only memory allocated in that capture (a graph allocation) may be
 * freed; a buffer allocated outside it is refused with SPOOL_ERR_INVALID, nothing freed and the
 * capture intact (free it after cudaStreamEndCapture), for every buffer, cached or not. With
 * capture_check=off spool does not ask: a cached buffer goes back to its cache and the
 * driver judges the others (it refuses them and invalidates the capture). A graph allocation
 * freed outside a capture whose graph never ran (destroyed before a launch, or the capture
 * abandoned: cudaStreamEndCapture failed) has no memory behind it: CUDA refuses the free with
 * cudaErrorInvalidValue, spool drops the record and returns SPOOL_OK.
 * A buffer with streams recorded by spool_record_stream is freed as spool_free_after says.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL; see capture above); with track=counts or full,
 * for a ptr that is not a live buffer of this pool (nothing reaches the driver, the message names
 * the buffer): SPOOL_ERR_BATCH_MEMBER (a sub-buffer of a batch other than its first pointer),
 * SPOOL_ERR_DOUBLE_FREE (freed already, among the pool's last 4096 frees),
 * SPOOL_ERR_WRONG_POOL (a live buffer of another spool pool), SPOOL_ERR_INTERIOR_POINTER
 * (inside a live buffer of this pool), SPOOL_ERR_UNKNOWN_POINTER (none of these); with
 * track=off the driver judges ptr; SPOOL_ERR_CUDA (ptr stays allocated; with poison=on its
 * contents may already be overwritten with 0xDD, which the message says). A pointer freed
 * already whose address another thread is being handed at the same moment may be reported as
 * unknown rather than freed twice; nothing is freed either way. Thread safe. */
SPOOL_EXPORT spool_status spool_free(spool_pool *pool, void *ptr, cudaStream_t stream);

/* spool_free that records where it was called from (track=counts or full), so that a later double
 * free can say where the first free was. file must outlive the pool's memory of the free
 * (__FILE__ does). Use it through SPOOL_FREE. Returns what spool_free returns. Thread safe. */
SPOOL_EXPORT spool_status spool_free_at(spool_pool *pool, void *ptr, cudaStream_t stream,
                                        const char *file, int line);
#define SPOOL_FREE(pool, ptr, stream) spool_free_at((pool), (ptr), (stream), __FILE__, __LINE__)

/* Puts the stream's front into the heap, waits for the stream (cudaStreamSynchronize), makes
 * every range it freed reusable by all streams, and gives every all-free chunk of the heap back
 * to the pool on stream. Call it before destroying a stream that was given to spool: CUDA may
 * hand the same handle to a new stream, which must not inherit blocks the old one may still be
 * using, and what the stream freed would otherwise wait for its next fence. Live buffers
 * allocated on stream stay valid (free them on any live stream). Using stream with the pool
 * again afterwards is allowed: it starts with an empty front. A stream spool never saw:
 * SPOOL_OK, nothing done.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL, or stream being captured into a graph);
 * SPOOL_ERR_CUDA (CUDA refused to synchronize or free on stream: the message asks whether it
 * was destroyed already; what it freed stays in the heap and goes back at spool_trim or
 * spool_pool_destroy after a device synchronize). Thread safe, but no other thread may use
 * stream with the pool meanwhile. */
SPOOL_EXPORT spool_status spool_stream_release(spool_pool *pool, cudaStream_t stream);

/* With a trace (config key `trace`, or SPOOL_TRACE): records a flush event and writes every
 * thread's partly filled block to the trace file, so that the file holds everything recorded
 * so far (full blocks are written as they fill; spool_trim, spool_stream_release and
 * spool_pool_destroy flush too). No CUDA calls. Without a trace: nothing. Returns SPOOL_OK;
 * SPOOL_ERR_INVALID (pool NULL). A failed write is reported once on stderr and ends the trace;
 * the pool goes on. Thread safe. */
SPOOL_EXPORT spool_status spool_trace_flush(spool_pool *pool);

/* Called when an allocation still fails after the pool gave back what it could and retried
 * oom_retries times: free memory (or decide to do without) and return nonzero to have the
 * allocation tried once more, 0 to let it fail with SPOOL_ERR_OOM. Called at most
 * SPOOL_OOM_HANDLER_CALLS times per allocation, on the allocating thread, without spool's locks
 * held: it may call spool_free and spool_trim on this pool (not spool_alloc, which could recurse).
 */
typedef int (*spool_oom_fn)(spool_pool *pool, size_t bytes, cudaStream_t stream, void *user);
#define SPOOL_OOM_HANDLER_CALLS 3

/* Sets the pool's out-of-memory handler (NULL: none, the default); user is passed to it and
 * stays the caller's. Returns SPOOL_OK or SPOOL_ERR_INVALID (pool NULL). Thread safe; an
 * allocation already in its out-of-memory path may still call the previous handler. */
SPOOL_EXPORT spool_status spool_set_oom_handler(spool_pool *pool, spool_oom_fn fn, void *user);

/* Returns reserved memory the pool does not use to the driver until it holds keep_bytes or only
 * what is in use (cudaMemPoolTrimTo). Memory freed on a stream whose work is not yet done is
 * still in use; synchronize first to give it back too.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL); SPOOL_ERR_UNSUPPORTED (a shareable or
 * imported pool, whose memory CUDA never gives back); SPOOL_ERR_CUDA. Thread safe. */
SPOOL_EXPORT spool_status spool_trim(spool_pool *pool, size_t keep_bytes);

/* ---------------------------------------------------------------------------------------------
 * Batches, scopes and stream hand-off (src/batch.c, src/scope.c, src/handoff.c)
 * ------------------------------------------------------------------------------------------- */

/* Allocates count sub-buffers as one allocation (one spool_alloc on stream, so the stream cache
 * may serve it): ptrs[i] gets sizes[i] bytes at an address that is a multiple of alignment, in
 * order, without overlap. alignment 0 means 256; otherwise a power of two up to
 * SPOOL_BATCH_ALIGN_MAX (2 MiB: pages for I/O, TMA descriptors). Pool memory is 256-aligned, so
 * above 256 the allocation takes alignment - 256 bytes more and ptrs[0] may lie up to that far
 * past its start. Free the whole batch with spool_free(pool, ptrs[0], stream) (or
 * spool_free_after; spool_record_stream takes ptrs[0] too); spool_free of any other sub-pointer
 * is refused with SPOOL_ERR_BATCH_MEMBER, naming the batch. A size of 0 gets a pointer to no
 * bytes (it may equal the next sub-buffer's). All sizes 0: every ptrs[i] is NULL and nothing is
 * allocated. The batch counts as one buffer in spool_stats, of the sum of the padded sizes plus
 * the alignment's extra bytes, and the leak report lists it as "batch of <count>" at the
 * allocation's start.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool, sizes or ptrs NULL, count 0 or above UINT32_MAX,
 * alignment not a power of two up to SPOOL_BATCH_ALIGN_MAX (the message gives both), the total
 * overflows, sizes and ptrs overlapping:
 * then ptrs, which is sizes too, is left as it was); otherwise what spool_alloc returns. On
 * failure ptrs[0..count) are NULL and nothing is allocated. A trailing sub-buffer of no bytes
 * points inside the batch (one byte is added for it). Thread safe. sizes is
 * read during the call only; the caller owns the batch and frees it with spool_free. */
#define SPOOL_BATCH_ALIGN_MAX (2 << 20) /* largest alignment of spool_alloc_batch: 2 MiB */
SPOOL_EXPORT spool_status spool_alloc_batch(spool_pool *pool, cudaStream_t stream, size_t count,
                                            const size_t *sizes, void **ptrs, size_t alignment);

/* spool_alloc_batch that records where it was called from, as spool_alloc_at does. Use it
 * through SPOOL_ALLOC_BATCH. */
SPOOL_EXPORT spool_status spool_alloc_batch_at(spool_pool *pool, cudaStream_t stream,
                                               size_t count, const size_t *sizes, void **ptrs,
                                               size_t alignment, const char *file, int line);
#define SPOOL_ALLOC_BATCH(pool, stream, count, sizes, ptrs, alignment)                             \
  spool_alloc_batch_at((pool), (stream), (count), (sizes), (ptrs), (alignment), __FILE__, __LINE__)

/* A scope: temporaries for work on one stream, all freed together, in stream order, when the
 * scope ends. Opaque; owned by the pool. */
typedef struct spool_scope spool_scope;

/* Begins a scope on stream. Allocations from it (spool_scope_alloc) are carved from chunks
 * the scope takes with spool_alloc on stream (1 MiB first, doubling up to 64 MiB, or the size
 * of a larger request), so that most of them cost no CUDA call but the capture check
 * (capture_check); spool_scope_end gives the chunks back with spool_free on stream, to the
 * stream's cache, where the next scope on that stream finds them (spool_trim and cache_limit
 * bound what stays reserved).
 * Scopes nest: a scope begun on a stream by a thread that has a scope open on that stream is
 * its child, and must end before its parent (ending a parent with open children is
 * SPOOL_ERR_INVALID and ends nothing). A scope begun while stream is being captured into a
 * graph takes its chunks from the graph (never from the cache) and ends in the same capture,
 * or after that capture is over (ended, or abandoned: then its chunks are freed as any graph
 * allocation is after its graph; not inside a later capture); one begun outside a capture must
 * end outside it.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or scope NULL); SPOOL_ERR_CUDA (the stream's capture
 * state cannot be read: destroyed?); SPOOL_ERR_HOST_OOM. Nothing is allocated on the device
 * until the first spool_scope_alloc. On failure *scope is NULL. Thread safe. The pool owns
 * *scope: it is valid until spool_scope_end; a scope still open at spool_pool_destroy shows in
 * the leak report (its chunks, tag 'spool_scope chunk') and is freed with the pool. */
SPOOL_EXPORT spool_status spool_scope_begin(spool_pool *pool, cudaStream_t stream,
                                            spool_scope **scope);

/* Allocates size bytes (256-aligned) from the scope, for work on the scope's stream; valid until
 * the scope ends. No free: spool_free of it is refused (SPOOL_ERR_INTERIOR_POINTER, naming the
 * scope's chunk). size 0 gives *ptr = NULL. Refused (SPOOL_ERR_INVALID) when the stream's
 * capture state is not the one the scope began in: a piece of a chunk from outside a capture
 * would be freed before the graph using it runs (asked every call with capture_check=on, the
 * default; only for new chunks with off). Most calls only move a pointer; when the current
 * chunk is full, the scope takes a new one with spool_alloc.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (scope or ptr NULL, size too large, the capture state
 * above); SPOOL_ERR_CUDA (the capture state cannot be read); SPOOL_ERR_SCOPE_ENDED
 * (the scope was ended: caught while the pool lives and the scope's slot has not been reused by
 * 64 later scopes); otherwise what spool_alloc returns. On failure *ptr is NULL. Thread safe
 * (the scope has a lock), though a scope is meant for one thread's work on one stream. */
SPOOL_EXPORT spool_status spool_scope_alloc(spool_scope *scope, void **ptr, size_t size);

/* The stream a scope was begun on (NULL for a NULL or ended scope). Thread safe. */
SPOOL_EXPORT cudaStream_t spool_scope_stream(const spool_scope *scope);

/* Ends the scope: frees every chunk it took with spool_free on its stream, in stream order, so
 * the memory is reused once the stream's work queued so far is done (at once by later work on
 * the same stream). The scope object goes back to the pool.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (scope NULL; it has open child scopes; the scope began
 * outside a capture and the stream is being captured now: the message says so; nothing is
 * ended);
 * SPOOL_ERR_SCOPE_ENDED (ended already, as spool_scope_alloc says); SPOOL_ERR_CUDA (a chunk's
 * free failed: the chunks not yet freed stay with the scope, which stays open). Thread safe. */
SPOOL_EXPORT spool_status spool_scope_end(spool_scope *scope);

/* Marks the live buffer at ptr as used by other_stream, as PyTorch's Tensor.record_stream does:
 * when it is freed, its memory is reused only once other_stream's work queued up to the free is
 * done too (and the freeing stream's, as always). other_stream must still exist at the free.
 * Recording the buffer's own stream, or a stream already recorded, does nothing. Cost: finding
 * a buffer that a stream cache served scans the caches' tables, and while any buffer of the pool
 * has streams recorded, every spool_free of the pool looks in the hand-off table (a lock and a
 * short scan): meant for buffers shared across streams, not for every temporary. other_stream
 * may belong to another device (a peer using the buffer). cudaStreamPerThread means the
 * per-thread stream of the thread that frees the buffer, not of the caller.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or ptr NULL; track=off; the buffer or other_stream is
 * being captured into a graph; more than 8 streams recorded); SPOOL_ERR_UNKNOWN_POINTER,
 * SPOOL_ERR_INTERIOR_POINTER, SPOOL_ERR_BATCH_MEMBER (ptr is not a live buffer's start);
 * SPOOL_ERR_HOST_OOM. Thread safe. */
SPOOL_EXPORT spool_status spool_record_stream(spool_pool *pool, void *ptr,
                                              cudaStream_t other_stream);

/* Frees ptr once both stream's work queued so far and event (as recorded now) are done, without
 * making stream wait for event. The event stays the caller's: spool makes a pool-owned stream
 * wait for it during the call and keeps nothing of it. Streams recorded with
 * spool_record_stream are waited for too. A plain spool_free of a buffer with recorded streams
 * takes this path as well: the free goes to the pool's hand-off stream, which waits (on the
 * device, no host blocking) for the freeing stream and every recorded stream, so none of them
 * is made to wait for another.
 * Returns what spool_free returns, and SPOOL_ERR_INVALID (event NULL; stream or a recorded
 * stream is being captured into a graph); SPOOL_ERR_CUDA (an event could not be recorded or
 * waited for: a recorded stream destroyed? nothing is freed). Thread safe. */
SPOOL_EXPORT spool_status spool_free_after(spool_pool *pool, void *ptr, cudaStream_t stream,
                                           cudaEvent_t event);

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */

/* Counters as the library keeps them, and the pool's own attributes. Peaks are since create or
 * the last spool_stats_reset_peaks. */
typedef struct spool_stats {
  size_t size;                   /* set by spool_stats_get to sizeof(spool_stats) */
  uint64_t bytes_in_use;         /* bytes asked for by live buffers */
  uint64_t bytes_in_use_peak;
  uint64_t buffers_in_use;       /* live buffers */
  uint64_t buffers_in_use_peak;
  uint64_t bytes_reserved;       /* cudaMemPoolAttrReservedMemCurrent: held from the device */
  uint64_t bytes_reserved_peak;  /* cudaMemPoolAttrReservedMemHigh */
  uint64_t allocs;               /* successful allocations since create (size 0 not counted) */
  uint64_t frees;                /* successful frees since create (NULL not counted) */
  uint64_t bytes_used;           /* cudaMemPoolAttrUsedMemCurrent: the pool's view of memory in
                                    use, rounded to its granularity */
  uint64_t bytes_used_peak;      /* cudaMemPoolAttrUsedMemHigh */
  uint64_t bytes_allocated;      /* bytes asked for by all successful allocations since create */
  uint64_t alloc_failures;       /* allocations that returned an error */
  uint64_t ooms;                 /* of those, out of device memory */
  uint64_t trims;                /* successful spool_trim calls */
  uint64_t oom_retries;          /* allocations tried again after running out of memory (by
                                    the policy or at the handler's request) */
  uint64_t oom_recoveries;       /* of those, allocations that then succeeded */
  uint64_t oom_handler_calls;    /* calls of the out-of-memory handler */
  uint64_t bad_frees;            /* frees refused: double, foreign, interior or wrong pool */
  uint64_t cache_hits;           /* allocations served by a stream's front (a block freed on
                                    the same stream, of the same size class: no CUDA call) */
  uint64_t cache_misses;         /* heap allocations the front could not serve: placed in the
                                    heap's free ranges, or in a new chunk from the pool */
  uint64_t bytes_cached;         /* bytes the heap holds ready but not in use: the fronts'
                                    blocks, the frees waiting for their stream's next miss
                                    to go into the heap, and the free ranges of its chunks */
  uint64_t cache_flushes;        /* times a stream's front was emptied into the heap by
                                    spool_trim, out of memory or spool_stream_release */
  /* the heap (appended after the fields above; read only when size says they are there) */
  uint64_t bytes_front;          /* of bytes_cached: in the streams' fronts */
  uint64_t bytes_heap;           /* in the heap's chunks (taken from the pool), used or free */
  uint64_t largest_free_block;   /* the largest free range of the heap's chunks */
  uint64_t chunk_allocs;         /* chunks taken from the pool since create */
  uint64_t chunk_frees;          /* chunks given back to the pool (idle, trim, release) */
  uint64_t fences;               /* fence events recorded, so that other streams can reuse
                                    what a stream freed */
} spool_stats;

/* Fills *out (out->size is set to sizeof(spool_stats)). Library counters are exact; pool
 * attributes are read from CUDA (for an adopted pool they include other users' memory).
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or out NULL); SPOOL_ERR_CUDA. Thread safe. */
SPOOL_EXPORT spool_status spool_stats_get(spool_pool *pool, spool_stats *out);

/* Sets every peak to its current value, the pool's high-water marks included. Returns SPOOL_OK;
 * SPOOL_ERR_INVALID (pool NULL); SPOOL_ERR_CUDA: then the library's peaks are unchanged, but if
 * CUDA reset the reserved high-water mark before refusing the used one, that reset stands (CUDA
 * cannot undo it). Thread safe. */
SPOOL_EXPORT spool_status spool_stats_reset_peaks(spool_pool *pool);

/* Writes a human report to out: device, settings, bytes and buffers in use and reserved with
 * peaks, totals, and the device's free and total memory (cudaMemGetInfo; when that fails, the
 * line says why and the report still succeeds). Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or out
 * NULL); SPOOL_ERR_CUDA (the pool's attributes could not be read: nothing is written);
 * SPOOL_ERR_IO (the write failed). Thread safe; out is the caller's and is not closed. */
SPOOL_EXPORT spool_status spool_report(spool_pool *pool, FILE *out);

/* Writes the stats as one JSON object into buf (len bytes, NUL-terminated): the keys are the
 * spool_stats field names (size excluded), plus "device", "streams" (each stream's bytes),
 * "device_free" and "device_total" (cudaMemGetInfo; null when it fails).
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL, buf NULL with len > 0, or len too small, 0
 * included: the message gives the size needed, and buf holds "" when len > 0); SPOOL_ERR_CUDA.
 * To learn the size as a number, use spool_stats_json_sized. Thread safe. */
SPOOL_EXPORT spool_status spool_stats_json(spool_pool *pool, char *buf, size_t len);

/* spool_stats_json that also says how big buf must be: *needed is set to the JSON's length plus
 * its NUL, on SPOOL_OK and on a buffer too small alike. len 0 (buf may then be NULL) asks for the
 * size only: SPOOL_OK, nothing written. The figures move between two calls (buffers come and go,
 * streams appear), so the next call may need more: allocate some room to spare, or call again
 * with the larger *needed while it returns SPOOL_ERR_INVALID for a buffer too small.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or needed NULL, buf NULL with len > 0, len too
 * small but not 0: buf holds "", *needed set); SPOOL_ERR_CUDA. On the other failures *needed is
 * 0. Thread safe; buf and needed are the caller's. */
SPOOL_EXPORT spool_status spool_stats_json_sized(spool_pool *pool, char *buf, size_t len,
                                                 size_t *needed);

/* Writes the leak report: every live buffer (size, stream, call site or tag, allocation number,
 * age), grouped by call site with totals, biggest group first; "no live buffers" when there are
 * none. spool_pool_destroy writes the same report when buffers are left. Returns SPOOL_OK;
 * SPOOL_ERR_INVALID (pool or out NULL); SPOOL_ERR_UNSUPPORTED (track=off: nothing to list; the
 * count is in the message); SPOOL_ERR_HOST_OOM; SPOOL_ERR_IO. Thread safe. */
SPOOL_EXPORT spool_status spool_leaks(spool_pool *pool, FILE *out);

/* ---------------------------------------------------------------------------------------------
 * Several devices
 *
 * A pool's memory lives on one device (cfg.device). spool_alloc refuses a stream of another
 * device: CUDA would allow it, but the buffer would still live on the pool's device, out of
 * reach of the stream's kernels unless that device has peer access, and spool's out-of-memory
 * and leak handling synchronize the pool's device, not the stream's. Use one pool per device
 * (spool_pools_create_all) and spool_pool_of to find a pointer's pool.
 * ------------------------------------------------------------------------------------------- */

/* Creates one pool per visible device from one config: pools[i] lives on device i. cfg->device
 * is ignored; every other setting applies to each pool, peer_access included (a pool skips its
 * own device in the list, so peer_access=[0,1] on two devices lets each reach the other's
 * memory). cfg NULL means the defaults, then SPOOL_CONF on top. capacity is the number of slots
 * in pools; *count is set to the number of devices.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pools or count NULL, or fewer slots than devices: the
 * message gives both numbers); SPOOL_ERR_NO_DEVICE (no driver or no device); otherwise what
 * spool_pool_create returns for the first device that fails, with "device <n>" in the message.
 * On failure the pools created so far are destroyed, pools[0..capacity) are NULL and *count is
 * 0. Thread safe. The caller owns the pools: spool_pools_destroy_all destroys them. */
SPOOL_EXPORT spool_status spool_pools_create_all(spool_pool **pools, int capacity, int *count,
                                                 const spool_config *cfg);

/* Destroys pools[0..count) with spool_pool_destroy (NULL entries are skipped) and sets every
 * entry to NULL. Returns SPOOL_OK; SPOOL_ERR_INVALID (pools NULL with count > 0, count < 0);
 * else the first failure of spool_pool_destroy, after destroying all of them. Not thread safe
 * with other calls on these pools. */
SPOOL_EXPORT spool_status spool_pools_destroy_all(spool_pool **pools, int count);

/* Finds the live spool pool that gave out ptr: ptr is the start of, or points inside, a live
 * buffer of *pool (a buffer imported with spool_import_pointer counts). Pools with track=off
 * know only the buffers their stream caches served (cache=on, the default). It scans every pool (a lookup per pool for a
 * buffer's start, a pass over the live buffers for an interior pointer): meant for error paths
 * and tools, not for every allocation.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL); SPOOL_ERR_UNKNOWN_POINTER (no tracking pool
 * holds ptr; the message says whether CUDA knows ptr as device memory, and of which device).
 * On failure *pool is NULL. Thread safe; *pool is valid only as long as no thread destroys it. */
SPOOL_EXPORT spool_status spool_pool_of(const void *ptr, spool_pool **pool);

/* ---------------------------------------------------------------------------------------------
 * Peer access
 * ------------------------------------------------------------------------------------------- */

/* What a device may do with a pool's memory. The values are CUDA's cudaMemAccessFlags. */
typedef enum spool_access {
  SPOOL_ACCESS_NONE = 0,       /* kernels of that device fault on the memory */
  SPOOL_ACCESS_READ = 1,       /* read only, where CUDA supports it (else SPOOL_ERR_UNSUPPORTED) */
  SPOOL_ACCESS_READ_WRITE = 3, /* read and write, as the pool's own device */
} spool_access;

/* Sets what device may do with the pool's memory, for all its buffers, live and future
 * (cudaMemPoolSetAccess): kernels and copies queued on that device then use the memory directly.
 * The pool's own device always has read-write access: asking read-write for it is SPOOL_OK and
 * calls nothing; asking less is SPOOL_ERR_INVALID (CUDA cannot take it away). Any other device
 * must be able to access the pool's device (cudaDeviceCanAccessPeer); setting NONE where there is
 * no access already calls nothing. CUDA maps or unmaps every buffer of the pool: grant access
 * once, not around every kernel. The config's peer_access list is applied this way at create.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL, mode not a spool_access, device not an ordinal
 * of this process (the message gives the count), the owner asked for less than read-write);
 * SPOOL_ERR_UNSUPPORTED (device is not a peer of the pool's device, or CUDA refuses read-only
 * access here: the message says which); SPOOL_ERR_CUDA. On failure the access is as it was.
 * Thread safe. */
SPOOL_EXPORT spool_status spool_pool_set_access(spool_pool *pool, int device, spool_access mode);

/* What device may do with the pool's memory now (cudaMemPoolGetAccess); the pool's own device
 * reads SPOOL_ACCESS_READ_WRITE. Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or mode NULL, device
 * not an ordinal of this process); SPOOL_ERR_CUDA. *mode is written only on success. Thread
 * safe. */
SPOOL_EXPORT spool_status spool_pool_get_access(spool_pool *pool, int device, spool_access *mode);

/* ---------------------------------------------------------------------------------------------
 * Sharing a pool with other processes (IPC)
 *
 * The exporter creates its pool with ipc=posix_fd and hands another process a descriptor of it
 * (spool_pool_export, then a Unix domain socket with SCM_RIGHTS: a process can import the pool
 * only with a descriptor it was given), plus, for each buffer to share, the bytes of
 * spool_export_pointer (any channel will do). The importer makes a pool of its own from the
 * descriptor (spool_pool_import), maps buffers into it (spool_import_pointer) and gives them back
 * with spool_free. CUDA's rules, and what spool does about them:
 *  - An imported buffer may be used only once its allocation has completed in the exporter: the
 *    exporter synchronizes the stream (or records an IPC event) before it sends the data.
 *  - The importer frees a buffer, and that free completes (synchronize the stream), before the
 *    exporter frees it: the exporter must wait for word from every importer. spool cannot see
 *    the other process, so this rule is the callers' to keep; spool_pool_destroy of an imported
 *    pool frees (after a synchronize) whatever is still imported.
 *  - Imported pools cannot allocate: spool_alloc returns SPOOL_ERR_UNSUPPORTED.
 *  - Shareable and imported pools never give memory back to the device (CUDA ignores the
 *    release threshold and trims of IPC pools): ipc=posix_fd needs release_threshold=max, and
 *    spool_trim returns SPOOL_ERR_UNSUPPORTED. Size such a pool with max_size.
 *  - An allocation during stream capture becomes a graph allocation, which CUDA cannot share:
 *    spool_alloc from a shareable pool on a capturing stream returns SPOOL_ERR_UNSUPPORTED.
 *  - An imported pool is accessible from its own device only; the exporter's peer access does
 *    not carry over: call spool_pool_set_access in the importer.
 * POSIX (Linux) only; elsewhere these functions return SPOOL_ERR_UNSUPPORTED.
 * ------------------------------------------------------------------------------------------- */

/* What a process needs to import one buffer: CUDA's export data and the buffer's size. Plain
 * bytes without pointers into either process: send it as it is. */
typedef struct spool_ipc_pointer {
  struct cudaMemPoolPtrExportData cuda; /* cudaMemPoolExportPointer's opaque data */
  uint64_t size;                        /* bytes asked for; 0 when the exporter has track=off */
  uint32_t magic;                       /* SPOOL_IPC_POINTER_MAGIC */
  uint32_t version;                     /* SPOOL_IPC_POINTER_VERSION */
} spool_ipc_pointer;
#define SPOOL_IPC_POINTER_MAGIC 0x50495053u /* "SPIP" */
#define SPOOL_IPC_POINTER_VERSION 1u

/* Writes to *fd a new file descriptor of the pool (cudaMemPoolExportToShareableHandle), for
 * another process to import: send it over a Unix domain socket (SCM_RIGHTS). The descriptor is
 * close-on-exec, so that child processes do not inherit it unasked. Each call makes a new one.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool or fd NULL); SPOOL_ERR_UNSUPPORTED (the pool was not
 * created with ipc=posix_fd, or was itself imported; not a POSIX system); SPOOL_ERR_IO (the
 * descriptor could not be made close-on-exec; it is closed); SPOOL_ERR_CUDA. On failure *fd is
 * -1. Thread safe. The caller owns *fd and closes it (after sending it). */
SPOOL_EXPORT spool_status spool_pool_export(spool_pool *pool, int *fd);

/* Makes a pool from a descriptor that another process exported with spool_pool_export and sent
 * to this one (cudaMemPoolImportFromShareableHandle). The new pool lives on the device the
 * exporter's pool lives on (found as the one device with access to it: it must be visible
 * here), has the default settings with ipc=posix_fd (spool_pool_config shows them, report= from
 * SPOOL_REPORT), cannot allocate, and holds the buffers imported into it with
 * spool_import_pointer. fd stays the caller's: close it when the call returns.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool NULL, fd negative or not open in this process: only
 * a process that was given the descriptor can import); SPOOL_ERR_NO_DEVICE; SPOOL_ERR_UNSUPPORTED
 * (not a POSIX system; the pool lives on a device this process cannot see); SPOOL_ERR_CUDA (fd is
 * not a pool's descriptor, or CUDA refused); SPOOL_ERR_HOST_OOM. On failure *pool is NULL and
 * nothing is left behind. Thread safe. The caller owns *pool and must pass it to
 * spool_pool_destroy. */
SPOOL_EXPORT spool_status spool_pool_import(int fd, spool_pool **pool);

/* Fills *out with what another process needs to import the buffer at ptr
 * (cudaMemPoolExportPointer). ptr must be the start of a live buffer of pool (checked unless
 * track=off); it stays the exporter's, who frees it only after every importer has freed it.
 * CUDA exports pointers only of a pool already shared: a pool never passed to spool_pool_export
 * is exported once here (the descriptor closed at once).
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool, ptr or out NULL); SPOOL_ERR_UNSUPPORTED (pool not
 * shareable or imported); with track=counts or full, SPOOL_ERR_INTERIOR_POINTER,
 * SPOOL_ERR_WRONG_POOL or SPOOL_ERR_UNKNOWN_POINTER as spool_free says; SPOOL_ERR_CUDA. *out is
 * written only on success. Thread safe. */
SPOOL_EXPORT spool_status spool_export_pointer(spool_pool *pool, void *ptr,
                                               spool_ipc_pointer *out);

/* Maps the buffer described by *in (from spool_export_pointer in the exporting process) into
 * pool, a pool made by spool_pool_import (cudaMemPoolImportPointer), and writes its address in
 * this process to *ptr. Use it once its allocation has completed in the exporter; give it back
 * with spool_free(pool, ptr, stream) and synchronize before telling the exporter.
 * Returns SPOOL_OK; SPOOL_ERR_INVALID (pool, in or ptr NULL; pool not imported; *in not made by
 * spool_export_pointer of this version); SPOOL_ERR_CUDA (the buffer is not in the pool the
 * descriptor was for, or CUDA refused); SPOOL_ERR_HOST_OOM. On failure *ptr is NULL and nothing
 * is mapped. Thread safe. The buffer belongs to pool until spool_free. */
SPOOL_EXPORT spool_status spool_import_pointer(spool_pool *pool, const spool_ipc_pointer *in,
                                               void **ptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPOOL_SPOOL_H */
