/* What the files of src/ share. Never installed. Internal names start with spool__. */
#ifndef SPOOL_INTERNAL_H
#define SPOOL_INTERNAL_H

#include <spool/spool.h>

#include <pthread.h>
#include <stdarg.h>

#if defined(__GNUC__)
#define SPOOL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SPOOL__PRINTF(f, a)
#endif

/* ---- status.c: this thread's last error ------------------------------------------------- */

/* Size of this thread's message buffer, NUL included. */
#define SPOOL__MESSAGE 1024

/* Copies this thread's message out and back, around work whose failures the caller must not
 * see (spool_report succeeds even when one of its lines is unavailable). */
void spool__save_error(char out[SPOOL__MESSAGE]);
void spool__restore_error(const char saved[SPOOL__MESSAGE]);

/* Sets this thread's message to the formatted text and returns s, so that a failure reads
 * `return spool__fail(SPOOL_ERR_INVALID, "spool_alloc: ptr is NULL");`. */
spool_status spool__fail(spool_status s, const char *fmt, ...) SPOOL__PRINTF(2, 3);

/* For a failed CUDA call: the message is "<context>: <api> failed: <cudaErrorName> (<string>)".
 * Maps err to a status: cudaErrorMemoryAllocation -> SPOOL_ERR_OOM, no device or no driver ->
 * SPOOL_ERR_NO_DEVICE, cudaErrorNotSupported -> SPOOL_ERR_UNSUPPORTED, else SPOOL_ERR_CUDA. */
spool_status spool__fail_cuda(cudaError_t err, const char *api, const char *fmt, ...)
    SPOOL__PRINTF(3, 4);

/* Appends to this thread's message (e.g. a cleanup that failed too) and returns s. */
spool_status spool__append(spool_status s, const char *fmt, ...) SPOOL__PRINTF(2, 3);

/* For a second CUDA failure on a path that is already failing: appends "; <what> also failed:
 * <cudaErrorName>" to the first failure's message, clears the runtime's last error, returns s. */
spool_status spool__also_failed(spool_status s, cudaError_t err, const char *what);

/* Puts "<context>: " in front of this thread's message and returns s. */
spool_status spool__prefix(spool_status s, const char *context);

/* Clears the CUDA runtime's last error after a failure spool reports through its status, so
 * that the caller's next cudaGetLastError speaks only of the caller's own calls.
 * spool__fail_cuda calls it. */
void spool__clear_cuda_error(void);

/* The status spool__fail_cuda would return for err. */
spool_status spool__status_of_cuda(cudaError_t err);

/* ---- units.c: sizes in text ------------------------------------------------------------- */

/* Largest text spool__format_size writes, NUL included. */
#define SPOOL__SIZE_TEXT 32

/* Writes bytes for people: "0 B", "255 B", "1.00 KiB", "1.50 GiB", "max" for UINT64_MAX. */
const char *spool__format_size(uint64_t bytes, char out[SPOOL__SIZE_TEXT]);

/* Parses a config size ("512", "4KiB", "1.5G", "2MB", "max"), case-insensitive units, spaces
 * between number and unit allowed. Returns 0 and sets *out, or -1 with a short reason in
 * why[0..why_len) ("unknown unit 'Gx'", "too large", "not a whole number of bytes"). */
int spool__parse_size(const char *text, size_t len, uint64_t *out, char *why, size_t why_len);

/* ---- track.c: what the pool knows of its buffers ------------------------------------------- */

/* Where a buffer was allocated or freed: a file and line (SPOOL_ALLOC, SPOOL_FREE) or a tag
 * (spool_alloc_tagged); all NULL/0 when unknown. The strings are the caller's, kept by pointer. */
typedef struct spool__site {
  const char *file;
  const char *tag;
  int line;
} spool__site;

/* Writes a site for people: "a.c:10", "tag 'scratch'", or that it is unknown. */
#define SPOOL__SITE_TEXT 320
const char *spool__site_text(const spool__site *s, char *out, size_t len);

typedef struct spool__buffer {
  uintptr_t ptr;        /* 0 marks an empty slot */
  uint64_t size;        /* bytes asked for */
  uint64_t seq;         /* allocation number, from 1 */
  cudaStream_t stream;  /* stream it was allocated on */
  spool__site born;     /* where it was allocated (track=full) */
  spool__site died;     /* where it was freed (graveyard records, track=full) */
  uint64_t born_ns;     /* CLOCK_MONOTONIC at allocation (track=full), for the age */
} spool__buffer;

/* Open addressing, linear probing, backward-shift deletion: no tombstones, no allocation once
 * the table has grown to the working set. Not thread safe: the pool's lock guards it. */
typedef struct spool__table {
  spool__buffer *slots;
  size_t cap;   /* power of two, or 0 before the first insert */
  size_t count;
} spool__table;

/* Adds b (b->ptr must not be in t). Returns SPOOL_OK or SPOOL_ERR_HOST_OOM (t unchanged). */
spool_status spool__table_insert(spool__table *t, const spool__buffer *b);
/* Removes ptr and copies its record to *out (out may be NULL). Returns 1 when found, else 0. */
int spool__table_remove(spool__table *t, uintptr_t ptr, spool__buffer *out);
/* The record of ptr, or NULL. Valid until the next change of t. */
const spool__buffer *spool__table_find(const spool__table *t, uintptr_t ptr);
/* The live buffer that ptr points inside of (not at its start), or NULL. A scan: error paths
 * only. */
const spool__buffer *spool__table_containing(const spool__table *t, uintptr_t ptr);
/* Calls fn for every record, in no particular order. */
void spool__table_each(const spool__table *t, void (*fn)(const spool__buffer *, void *), void *arg);
void spool__table_free(spool__table *t);

/* Recent frees, so that a second free of the same pointer is told from a pointer never seen:
 * the last SPOOL__GRAVE_CAP frees, forgotten in the order they happened, and at once when the
 * address is handed out again. Guarded by the pool's lock. */
#define SPOOL__GRAVE_CAP 4096
typedef struct spool__graveyard {
  spool__table freed;
  uintptr_t *ring;  /* the freed pointers, oldest at head */
  uint64_t *seqs;   /* their allocation numbers, to skip records already replaced */
  size_t head, count;
} spool__graveyard;

/* Remembers b as freed. Best effort: without host memory the free is simply not remembered. */
void spool__grave_bury(spool__graveyard *g, const spool__buffer *b);
/* Forgets ptr (its address was handed out again). */
void spool__grave_forget(spool__graveyard *g, uintptr_t ptr);
void spool__grave_free(spool__graveyard *g);

/* Every live pool, so that a free given to the wrong pool can name the right one. */
void spool__registry_add(spool_pool *pool);
void spool__registry_remove(spool_pool *pool);
/* The pool a pointer belongs to, as it was when asked: the pool's address is for messages
 * only (it may be destroyed by the time it is read). */
typedef struct spool__owner {
  const void *pool;
  int device;
  spool__buffer buffer;
} spool__owner;

/* Looks for ptr (at the start of or inside a live buffer) in every pool but self. Returns 1 and
 * fills *out when found, else 0. Takes the registry lock and each pool's lock in turn: the
 * caller must hold no pool lock. */
int spool__registry_owner(const spool_pool *self, uintptr_t ptr, spool__owner *out);
/* Trims every registered pool on self's device but self to what it uses (out-of-memory path).
 * Takes the registry lock only; CUDA's pool calls are thread safe. */
void spool__registry_trim_device(const spool_pool *self);

/* ---- the pool ----------------------------------------------------------------------------- */

typedef struct spool__counters {
  uint64_t bytes_in_use, bytes_in_use_peak;
  uint64_t buffers_in_use, buffers_in_use_peak;
  uint64_t allocs, frees, bytes_allocated;
  uint64_t alloc_failures, ooms, trims;
  uint64_t oom_retries, oom_recoveries, oom_handler_calls, bad_frees;
  uint64_t next_seq;
} spool__counters;

struct spool_pool {
  cudaMemPool_t handle;
  int device;
  bool owned;            /* created by spool: destroyed by spool */
  spool_config cfg;
  pthread_mutex_t lock;  /* guards live, graves, counters and the oom handler */
  spool__table live;
  spool__graveyard graves;
  spool__counters c;
  spool_oom_fn oom_fn;
  void *oom_user;
  spool_pool *registry_next; /* guarded by the registry's lock */
  /* issue 6 (ipc.c) */
  bool imported;         /* made by spool_pool_import: CUDA allows no allocations from it; set
                            before the pool is handed out, read without the lock */
  uint64_t ipc_exports;  /* successful spool_pool_export calls; guarded by lock */
  uint64_t ipc_pointers; /* pointers exported (exporter) or imported (importer); guarded by lock */
};

/* ---- device.c: device selection and memory ------------------------------------------------ */

/* Runs the support checks for device: driver >= 11.2, the ordinal exists, memory pools are
 * supported. Returns SPOOL_OK or the failure with its message (context names the caller). */
spool_status spool__device_check(int device, const char *context);

/* Makes device current for the calling thread, remembering the old one in *saved; leave puts
 * it back and returns s, or its own failure when s is SPOOL_OK (a failure of its own on a path
 * that already failed is added to that message). No-ops when device already is the current one.
 */
spool_status spool__device_enter(int device, int *saved, const char *context);
spool_status spool__device_leave(int device, int saved, spool_status s, const char *context);

/* cudaMemGetInfo for device, keeping the calling thread's current device. */
spool_status spool__device_meminfo(int device, size_t *free_bytes, size_t *total_bytes);

/* The same for figures that are nice to have (reports, messages): true when they were read;
 * a failure leaves this thread's message as it was. */
bool spool__device_meminfo_quiet(int device, size_t *free_bytes, size_t *total_bytes);

/* ---- oom.c: what an allocation does when the device is out of memory ------------------------ */

/* Called after cudaMallocFromPoolAsync failed with cudaErrorMemoryAllocation: gives back what
 * the pools can, retries (cfg.oom_retries), then asks the handler. Returns SPOOL_OK with *out
 * set, or the failure with its message (SPOOL_ERR_OOM with the numbers). Takes no lock while
 * calling CUDA or the handler. */
spool_status spool__alloc_after_oom(spool_pool *pool, void **out, size_t size,
                                    cudaStream_t stream);

/* ---- leaks.c: the leak report ------------------------------------------------------------- */

/* Writes the leak report of pool to out (the pool's lock must not be held). */
spool_status spool__leak_report(spool_pool *pool, FILE *out, const char *context);

/* At destroy: writes the report (report= file, SPOOL_REPORT, or stderr), then frees every live
 * buffer after a device synchronize. Returns SPOOL_OK when there were none, SPOOL_ERR_LEAKS, or
 * SPOOL_ERR_CUDA. */
spool_status spool__free_leaks(spool_pool *pool);

/* ---- issue 6: several devices and processes (devices.c, peer.c, ipc.c) ---------------------- */

/* devices.c. The device of stream (for 0, cudaStreamLegacy and cudaStreamPerThread: the calling
 * thread's current device) must be the pool's: SPOOL_ERR_INVALID naming both otherwise. Where
 * the runtime cannot tell (built with CUDA < 12.8, which lacks cudaStreamGetDevice, or the query
 * fails, e.g. for a destroyed stream) the check passes and the allocation judges the stream. */
spool_status spool__stream_device_check(const spool_pool *pool, cudaStream_t stream,
                                        const char *context);

/* devices.c: the report's lines on access (peer.c) and IPC (ipc.c); they never fail the report
 * and leave this thread's last error as it was. */
void spool__report_multi(spool_pool *pool, FILE *out);
void spool__report_access(spool_pool *pool, FILE *out);
void spool__report_ipc(spool_pool *pool, FILE *out);

/* ipc.c. The config's ipc rules (spool_config_validate); the device and platform support for
 * cfg->ipc, checked before a pool is created (owned: spool creates the cudaMemPool); the handle
 * types of a new pool; the refusals of spool_alloc (imported pool, shareable pool on a capturing
 * stream) and spool_trim (IPC pools never shrink). */
spool_status spool__ipc_validate(const spool_config *cfg);
spool_status spool__ipc_check_create(const spool_config *cfg, bool owned, const char *context);
enum cudaMemAllocationHandleType spool__ipc_handle_types(const spool_config *cfg);
spool_status spool__ipc_alloc_check(const spool_pool *pool, cudaStream_t stream);
spool_status spool__ipc_trim_check(const spool_pool *pool);

/* pool.c, for spool_pool_import: a pool object over handle (no CUDA calls); NULL without host
 * memory. */
spool_pool *spool__pool_new(const spool_config *cfg, cudaMemPool_t handle, bool owned);

/* ---- time --------------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds (track=full: buffer ages). */
uint64_t spool__now_ns(void);

#endif /* SPOOL_INTERNAL_H */
