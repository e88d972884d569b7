/* check_faults: every CUDA call of every public operation, failed in turn. For each operation
 * (one row of the table below) a clean run counts the calls it makes (cudasim_calls_all); then,
 * for each of those calls, a fresh run makes exactly that call fail (cudasim_fail) and checks
 * what spool promises of a failed call:
 *  - the status is SPOOL_ERR_CUDA for a CUDA error (SPOOL_ERR_OOM, or a recovery, for an
 *    allocation that ran out of memory), or SPOOL_OK where the call was one spool may do
 *    without (a report's device line, the capture query's fast way);
 *  - spool_last_error() names the call that failed, and the runtime's last error is cleared;
 *  - the pool stays usable: a buffer can be allocated and freed afterwards;
 *  - once the caller has freed what it holds, bytes_in_use and buffers_in_use are 0 and
 *    spool_pool_destroy returns SPOOL_OK (no leak left behind by the failure);
 *  - after destroy, cudasim holds no allocation and no pool.
 * One line per operation goes to stdout: calls swept, failures injected, how they came back.
 *
 * Sim only: a real GPU cannot fail a chosen call on demand. */
#include "test_main.h"

#include <unistd.h>

#define MAX_APIS 96
#define SMALL (4 * KiB)

/* ---- one run of an operation --------------------------------------------------------------- */

/* What a run holds: the pool, its streams, and what the setup and the operation made. */
typedef struct fault_run {
  spool_pool *pool;
  cudaStream_t s, s2;
  void *held[4]; /* the setup's buffers, freed on s once the run is checked */
  int nheld;
  void *got[4]; /* the operation's buffers, freed on s when it succeeded */
  int ngot;
  spool_scope *scope;
  cudaEvent_t ev;
  bool capturing; /* s is being captured (begun by the setup) */
  int fd;
  spool_pool *imported;
  spool_ipc_pointer xp;
  void *mapped; /* the buffer imported by the operation */
  char path[64];
  cudaMemPool_t own;    /* a pool the test made, for spool_pool_adopt */
  spool_pool *other[2]; /* pools an operation made besides r->pool */
} fault_run;

typedef struct fault_row {
  const char *name;
  const char *config;                  /* the pool's settings on top of the defaults */
  void (*setup)(fault_run *);          /* NULL: none */
  spool_status (*op)(fault_run *);     /* the operation swept */
  void (*settle)(fault_run *, spool_status); /* NULL: none; ends what the op left open */
} fault_row;

static void hold(fault_run *r, size_t size) {
  r->held[r->nheld++] = test_alloc_on(r->pool, size, r->s);
}

static spool_status alloc_got(fault_run *r, size_t size, cudaStream_t s) {
  void *p = TEST_SENTINEL;
  spool_status st = spool_alloc(r->pool, &p, size, s);
  if (st == SPOOL_OK) r->got[r->ngot++] = p;
  else ck_assert_ptr_null(p);
  return st;
}

/* A free that failed leaves the buffer with the caller, who frees it again later. */
static spool_status free_held(fault_run *r, int i) {
  spool_status st = spool_free(r->pool, r->held[i], r->s);
  if (st == SPOOL_OK) r->held[i] = NULL;
  return st;
}

/* ---- setups ---------------------------------------------------------------------------------- */

static void front_holds_small(fault_run *r) {
  void *p = test_alloc_on(r->pool, SMALL, r->s);
  CK_SPOOL(spool_free(r->pool, p, r->s));
}

static void hold_small(fault_run *r) { hold(r, SMALL); }

/* A page-aligned batch that starts past its allocation (a spacer before it). */
static void hold_aligned_batch(fault_run *r) {
  hold(r, 512);
  size_t sizes[2] = {SMALL, SMALL};
  void *ptrs[2];
  CK_SPOOL(spool_alloc_batch(r->pool, r->s, 2, sizes, ptrs, 4096));
  r->held[r->nheld++] = ptrs[0];
}
static void hold_uncached(fault_run *r) { hold(r, 4 * MiB); }
static void hold_large(fault_run *r) { hold(r, 40 * MiB); }

/* A chunk in the heap with room, and nothing of the size asked in the front. */
static void heap_has_room(fault_run *r) { hold(r, 64 * KiB); }

/* The stream has freed a block that sits pending in the heap, and cached ones in front. */
static void stream_holds_memory(fault_run *r) {
  for (int i = 0; i < 3; i++) {
    void *p = NULL;
    CK_SPOOL(spool_alloc(r->pool, &p, SMALL << i, r->s2));
    CK_SPOOL(spool_free(r->pool, p, r->s2));
  }
  void *big = test_alloc_on(r->pool, 40 * MiB, r->s2);
  CK_SPOOL(spool_free(r->pool, big, r->s2));
}

static void scope_begun(fault_run *r) { CK_SPOOL(spool_scope_begin(r->pool, r->s, &r->scope)); }

static void scope_with_chunk(fault_run *r) {
  scope_begun(r);
  void *p = NULL;
  CK_SPOOL(spool_scope_alloc(r->scope, &p, SMALL));
}

static void recorded_on_s2(fault_run *r) {
  hold(r, SMALL);
  CK_SPOOL(spool_record_stream(r->pool, r->held[0], r->s2));
}

static void event_recorded(fault_run *r) {
  hold(r, SMALL);
  CK_CUDA(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming));
  CK_CUDA(cudaEventRecord(r->ev, r->s2));
}

static void capture_begun(fault_run *r) {
  CK_CUDA(cudaStreamBeginCapture(r->s, cudaStreamCaptureModeGlobal));
  r->capturing = true;
}

static void capture_holds_buffer(fault_run *r) {
  capture_begun(r);
  void *p = test_alloc_on(r->pool, SMALL, r->s);
  r->held[r->nheld++] = p;
}

/* A buffer of a capture whose graph was destroyed without a launch. */
static void capture_abandoned(fault_run *r) {
  capture_holds_buffer(r);
  cudaGraph_t g = NULL;
  CK_CUDA(cudaStreamEndCapture(r->s, &g));
  r->capturing = false;
  CK_CUDA(cudaGraphDestroy(g));
}

/* The device is nearly full of what s2's cache holds: the next chunk needs the flush. */
static void device_full_of_cache(fault_run *r) {
  cudasim_set_capacity(0, 64 * MiB);
  void *p = test_alloc_on(r->pool, 40 * MiB, r->s2);
  CK_SPOOL(spool_free(r->pool, p, r->s2));
}

static void pool_to_adopt(fault_run *r) {
  struct cudaMemPoolProps props = {.allocType = cudaMemAllocationTypePinned,
                                   .location = {.type = cudaMemLocationTypeDevice, .id = 0}};
  CK_CUDA(cudaMemPoolCreate(&r->own, &props));
}

static void two_devices(fault_run *r) { cudasim_set_device_count(2); (void)r; }

static void config_file(fault_run *r) {
  snprintf(r->path, sizeof r->path, "/tmp/check_faults_%ld.conf", (long)getpid());
  FILE *f = fopen(r->path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("release_threshold=1GiB\nfront_limit=2MiB\n", f);
  ck_assert_int_eq(fclose(f), 0);
}

static void exported(fault_run *r) { CK_SPOOL(spool_pool_export(r->pool, &r->fd)); }

static void imported_with_pointer(fault_run *r) {
  exported(r);
  CK_SPOOL(spool_pool_import(r->fd, &r->imported));
  hold(r, SMALL);
  CK_SPOOL(spool_export_pointer(r->pool, r->held[0], &r->xp));
  CK_CUDA(cudaStreamSynchronize(r->s)); /* the allocation has completed before the import */
}

/* ---- operations ------------------------------------------------------------------------------ */

static spool_status op_create(fault_run *r) {
  spool_pool *p = TEST_SENTINEL;
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "reserve=4MiB, release_threshold=64MiB"));
  spool_status st = spool_pool_create(&p, &cfg);
  if (st == SPOOL_OK) r->pool = p;
  else ck_assert_ptr_null(p);
  return st;
}

/* The pool is gone whatever destroy returns. */
static spool_status op_destroy(fault_run *r) {
  CK_SPOOL(spool_free(r->pool, r->held[0], r->s));
  r->nheld = 0;
  spool_status st = spool_pool_destroy(r->pool);
  r->pool = NULL;
  return st;
}

static spool_status op_alloc_small(fault_run *r) { return alloc_got(r, SMALL, r->s); }
static spool_status op_alloc_medium(fault_run *r) { return alloc_got(r, 8 * KiB, r->s); }
static spool_status op_alloc_large(fault_run *r) { return alloc_got(r, 40 * MiB, r->s); }
static spool_status op_alloc_uncached(fault_run *r) { return alloc_got(r, 4 * MiB, r->s); }
static spool_status op_free(fault_run *r) { return free_held(r, 0); }
static spool_status op_free_last(fault_run *r) { return free_held(r, r->nheld - 1); }

static spool_status alloc_batch(fault_run *r, size_t align) {
  size_t sizes[3] = {100, SMALL, 0};
  void *ptrs[3] = {TEST_SENTINEL, TEST_SENTINEL, TEST_SENTINEL};
  spool_status st = spool_alloc_batch(r->pool, r->s, 3, sizes, ptrs, align);
  if (st == SPOOL_OK) r->got[r->ngot++] = ptrs[0];
  else for (int i = 0; i < 3; i++) ck_assert_ptr_null(ptrs[i]);
  return st;
}

static spool_status op_alloc_batch(fault_run *r) { return alloc_batch(r, 0); }
static spool_status op_alloc_batch_aligned(fault_run *r) { return alloc_batch(r, 4096); }

static spool_status op_scope_begin(fault_run *r) {
  spool_scope *sc = TEST_SENTINEL;
  spool_status st = spool_scope_begin(r->pool, r->s, &sc);
  if (st == SPOOL_OK) r->scope = sc;
  else ck_assert_ptr_null(sc);
  return st;
}

static spool_status op_scope_alloc(fault_run *r) {
  void *p = TEST_SENTINEL;
  spool_status st = spool_scope_alloc(r->scope, &p, SMALL);
  if (st != SPOOL_OK) ck_assert_ptr_null(p);
  return st;
}

static spool_status op_scope_end(fault_run *r) {
  spool_status st = spool_scope_end(r->scope);
  if (st == SPOOL_OK) r->scope = NULL;
  return st;
}

static spool_status op_record_stream(fault_run *r) {
  return spool_record_stream(r->pool, r->held[0], r->s2);
}

static spool_status op_free_after(fault_run *r) {
  spool_status st = spool_free_after(r->pool, r->held[0], r->s, r->ev);
  if (st == SPOOL_OK) r->held[0] = NULL;
  return st;
}

static spool_status op_stream_release(fault_run *r) { return spool_stream_release(r->pool, r->s2); }
static spool_status op_trim(fault_run *r) { return spool_trim(r->pool, 0); }

static spool_status op_stats_get(fault_run *r) {
  spool_stats st;
  return spool_stats_get(r->pool, &st);
}

static spool_status op_reset_peaks(fault_run *r) { return spool_stats_reset_peaks(r->pool); }

/* write (spool_report, spool_leaks) into a file that is thrown away. */
static spool_status into_tmpfile(fault_run *r, spool_status (*write)(spool_pool *, FILE *)) {
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  spool_status st = write(r->pool, f);
  fclose(f);
  return st;
}

static spool_status op_report(fault_run *r) { return into_tmpfile(r, spool_report); }
static spool_status op_leaks(fault_run *r) { return into_tmpfile(r, spool_leaks); }

static spool_status op_stats_json(fault_run *r) {
  char buf[8192];
  return spool_stats_json(r->pool, buf, sizeof buf);
}

static spool_status op_config_load(fault_run *r) {
  spool_config cfg = test_config();
  spool_status st = spool_config_load(&cfg, r->path);
  unlink(r->path);
  return st;
}

static spool_status op_adopt(fault_run *r) {
  spool_pool *p = TEST_SENTINEL;
  spool_config cfg = test_config();
  CK_SPOOL(spool_config_parse(&cfg, "reserve=4MiB, release_threshold=64MiB"));
  spool_status st = spool_pool_adopt(&p, r->own, &cfg);
  if (st == SPOOL_OK) r->other[0] = p;
  else ck_assert_ptr_null(p);
  return st;
}

static spool_status op_set_access(fault_run *r) {
  return spool_pool_set_access(r->pool, 1, SPOOL_ACCESS_READ_WRITE);
}

static spool_status op_create_all(fault_run *r) {
  int count = -1;
  spool_status st = spool_pools_create_all(r->other, 2, &count, NULL);
  if (st == SPOOL_OK) ck_assert_int_eq(count, 2);
  else ck_assert(count == 0 && !r->other[0] && !r->other[1]);
  return st;
}

static spool_status op_export(fault_run *r) {
  int fd = 1234;
  spool_status st = spool_pool_export(r->pool, &fd);
  if (st == SPOOL_OK) close(fd);
  else ck_assert_int_eq(fd, -1);
  return st;
}

static spool_status op_import(fault_run *r) {
  spool_pool *p = TEST_SENTINEL;
  spool_status st = spool_pool_import(r->fd, &p);
  if (st == SPOOL_OK) r->imported = p;
  else ck_assert_ptr_null(p);
  return st;
}

static spool_status op_export_pointer(fault_run *r) {
  spool_ipc_pointer x;
  return spool_export_pointer(r->pool, r->held[0], &x);
}

static spool_status op_import_pointer(fault_run *r) {
  void *p = TEST_SENTINEL;
  spool_status st = spool_import_pointer(r->imported, &r->xp, &p);
  if (st == SPOOL_OK) r->mapped = p;
  else ck_assert_ptr_null(p);
  return st;
}

/* ---- settling what an operation left open ---------------------------------------------------- */

static void end_scope(fault_run *r, spool_status st) {
  (void)st;
  if (r->scope) CK_SPOOL(spool_scope_end(r->scope));
  r->scope = NULL;
}

/* The graph is destroyed unlaunched: what the capture allocated and freed never existed. A
 * failed free is tried again inside the capture, as a caller would. */
static void end_capture(fault_run *r, spool_status st) {
  (void)st;
  for (int i = 0; i < r->ngot; i++) CK_SPOOL(spool_free(r->pool, r->got[i], r->s));
  r->ngot = 0;
  for (int i = 0; i < r->nheld; i++)
    if (r->held[i]) CK_SPOOL(spool_free(r->pool, r->held[i], r->s));
  r->nheld = 0;
  cudaGraph_t g = NULL;
  CK_CUDA(cudaStreamEndCapture(r->s, &g));
  r->capturing = false;
  CK_CUDA(cudaGraphDestroy(g));
}

/* The importer gives its buffer back, and that free completes, before the exporter's. */
static void close_import(fault_run *r, spool_status st) {
  (void)st;
  if (r->mapped) {
    CK_SPOOL(spool_free(r->imported, r->mapped, r->s));
    CK_CUDA(cudaStreamSynchronize(r->s));
  }
  if (r->imported) CK_SPOOL(spool_pool_destroy(r->imported));
  r->imported = NULL;
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}

/* The pools an operation made are destroyed (cleanly), and the test's own pool, which a failed
 * adopt left with the settings it had (a new pool's: threshold 0) and nothing reserved. */
static void destroy_others(fault_run *r, spool_status st) {
  if (r->own && st != SPOOL_OK) {
    ck_assert_uint_eq(test_pool_attr_u64(r->own, cudaMemPoolAttrReleaseThreshold), 0);
    ck_assert_uint_eq(test_pool_attr_u64(r->own, cudaMemPoolAttrReservedMemCurrent), 0);
  }
  for (int i = 0; i < 2; i++)
    if (r->other[i]) CK_SPOOL(spool_pool_destroy(r->other[i]));
  if (r->own) CK_CUDA(cudaMemPoolDestroy(r->own));
}

static void drop_event(fault_run *r, spool_status st) {
  (void)st;
  CK_CUDA(cudaEventDestroy(r->ev));
}

/* ---- the table ------------------------------------------------------------------------------ */

#define IPC "ipc=posix_fd"

static const fault_row ROWS[] = {
    {"pool create (reserve)", NULL, NULL, op_create, NULL},
    {"pool destroy", NULL, stream_holds_memory, op_destroy, NULL},
    {"pool adopt (reserve)", NULL, pool_to_adopt, op_adopt, destroy_others},
    {"pools_create_all (2 devices)", NULL, two_devices, op_create_all, destroy_others},
    {"pool_set_access (a peer)", NULL, two_devices, op_set_access, NULL},
    {"alloc, front hit", NULL, front_holds_small, op_alloc_small, NULL},
    {"free, into the front", NULL, hold_small, op_free, NULL},
    {"alloc, heap miss: new chunk", NULL, NULL, op_alloc_small, NULL},
    {"alloc, heap miss: fit in a chunk", "fence_every=1", heap_has_room, op_alloc_medium, NULL},
    {"free, past the front", "front_limit=0, fence_every=1, chunk_idle=0", hold_small, op_free,
     NULL},
    {"alloc, large chunk", NULL, NULL, op_alloc_large, NULL},
    {"free, large chunk", "chunk_idle=0", hold_large, op_free, NULL},
    {"alloc, out of memory: flush, trim", NULL, device_full_of_cache, op_alloc_large, NULL},
    {"alloc, uncached", "heap_max_block=1MiB", NULL, op_alloc_uncached, NULL},
    {"free, uncached", "heap_max_block=1MiB", hold_uncached, op_free, NULL},
    {"alloc, poison", "poison=on", NULL, op_alloc_small, NULL},
    {"free, poison", "poison=on, heap_max_block=1MiB", hold_uncached, op_free, NULL},
    {"alloc, track=full", "track=full", NULL, op_alloc_small, NULL},
    {"alloc_batch", NULL, NULL, op_alloc_batch, NULL},
    {"alloc_batch, page-aligned", NULL, hold_small, op_alloc_batch_aligned, NULL},
    {"free, page-aligned batch", "poison=on", hold_aligned_batch, op_free_last, NULL},
    {"scope_begin", NULL, NULL, op_scope_begin, end_scope},
    {"scope_alloc, new chunk", NULL, scope_begun, op_scope_alloc, end_scope},
    {"scope_end", NULL, scope_with_chunk, op_scope_end, end_scope},
    {"record_stream", NULL, hold_small, op_record_stream, NULL},
    {"free, hand-off", NULL, recorded_on_s2, op_free, NULL},
    {"free_after", NULL, event_recorded, op_free_after, drop_event},
    {"stream_release", NULL, stream_holds_memory, op_stream_release, NULL},
    {"trim", NULL, stream_holds_memory, op_trim, NULL},
    {"stats_get", NULL, hold_small, op_stats_get, NULL},
    {"stats_reset_peaks", NULL, hold_small, op_reset_peaks, NULL},
    {"report", NULL, hold_small, op_report, NULL},
    {"stats_json", NULL, hold_small, op_stats_json, NULL},
    {"leaks", NULL, hold_small, op_leaks, NULL},
    {"config_load", NULL, config_file, op_config_load, NULL},
    {"pool_export", IPC, NULL, op_export, NULL},
    {"pool_import", IPC, exported, op_import, close_import},
    {"export_pointer", IPC, hold_small, op_export_pointer, NULL},
    {"import_pointer", IPC, imported_with_pointer, op_import_pointer, close_import},
    {"alloc, in a capture", NULL, capture_begun, op_alloc_small, end_capture},
    {"free, in a capture", NULL, capture_holds_buffer, op_free, end_capture},
    {"free, after an unlaunched capture", "poison=on", capture_abandoned, op_free, NULL},
};
#define NROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

/* ---- the sweep ------------------------------------------------------------------------------- */

/* Calls that report errors rather than make them: failing them means nothing. */
static bool injectable(const char *api) {
  static const char *const reporters[] = {"cudaGetErrorName", "cudaGetErrorString",
                                          "cudaGetLastError", "cudaPeekAtLastError"};
  for (size_t i = 0; i < sizeof reporters / sizeof reporters[0]; i++)
    if (strcmp(api, reporters[i]) == 0) return false;
  return true;
}

static bool allocates(const char *api) {
  return strcmp(api, "cudaMallocFromPoolAsync") == 0 || strcmp(api, "cudaMallocAsync") == 0 ||
         strcmp(api, "cudaMalloc") == 0;
}

/* The status of a call failing with err: SPOOL_ERR_OOM for memory, SPOOL_ERR_CUDA otherwise,
 * except that a device count CUDA cannot give means no usable device. */
static spool_status want_of(const char *api, cudaError_t err) {
  if (err == cudaErrorMemoryAllocation) return SPOOL_ERR_OOM;
  if (strcmp(api, "cudaGetDeviceCount") == 0) return SPOOL_ERR_NO_DEVICE;
  return SPOOL_ERR_CUDA;
}

static void run_setup(const fault_row *row, fault_run *r) {
  memset(r, 0, sizeof *r);
  r->fd = -1;
  cudasim_reset();
  r->s = test_stream_create();
  r->s2 = test_stream_create();
  if (row->op != op_create) r->pool = test_pool_with(row->config);
  if (row->setup) row->setup(r);
}

/* The promises of a failed call, checked after one run (where: which call failed, for
 * messages). */
static void run_finish(const fault_row *row, fault_run *r, spool_status st, const char *where) {
  if (row->settle) row->settle(r, st);
  if (r->pool) {
    void *p = NULL;
    ck_assert_msg(spool_alloc(r->pool, &p, SMALL, r->s) == SPOOL_OK &&
                      spool_free(r->pool, p, r->s) == SPOOL_OK,
                  "%s, %s: the pool is not usable afterwards: %s", row->name, where,
                  spool_last_error());
    for (int i = 0; i < r->nheld; i++)
      if (r->held[i]) CK_SPOOL(spool_free(r->pool, r->held[i], r->s));
    for (int i = 0; i < r->ngot && st == SPOOL_OK; i++)
      CK_SPOOL(spool_free(r->pool, r->got[i], r->s));
    spool_stats sts = test_stats(r->pool);
    ck_assert_msg(sts.bytes_in_use == 0 && sts.buffers_in_use == 0,
                  "%s, %s: %" PRIu64 " bytes in %" PRIu64 " buffers in use after every free",
                  row->name, where, sts.bytes_in_use, sts.buffers_in_use);
    spool_status ds = spool_pool_destroy(r->pool);
    ck_assert_msg(ds == SPOOL_OK, "%s, %s: destroy returned %s: %s", row->name, where,
                  spool_status_name(ds), spool_last_error());
  }
  CK_CUDA(cudaStreamDestroy(r->s));
  CK_CUDA(cudaStreamDestroy(r->s2));
  /* A destroy that CUDA refused to give chunks back, or to destroy the pool, cannot be tried
   * again (the pool object is gone): the message says what stays (the one exception). */
  if (row->op == op_destroy && st != SPOOL_OK && strstr(spool_last_error(), " stay"))
    return;
  ck_assert_msg(cudasim_live_allocations() == 0 && cudasim_pool_count() == 0,
                "%s, %s: cudasim holds %ld allocations and %d pools after destroy", row->name,
                where, cudasim_live_allocations(), cudasim_pool_count());
}

/* The CUDA calls of one clean run of the operation: names[i] was called counts[i] times. The
 * process looks the driver's capture query up once (capture.c): a first run makes it, so that
 * the counted run and every failed one make the same calls. */
static size_t clean_run(const fault_row *row, const char **names, long *counts) {
  fault_run r;
  run_setup(row, &r);
  CK_SPOOL(row->op(&r));
  run_finish(row, &r, SPOOL_OK, "warm-up");
  run_setup(row, &r);
  const char *before_names[MAX_APIS];
  long before[MAX_APIS];
  size_t nb = cudasim_calls_all(before_names, before, MAX_APIS);
  CK_SPOOL(row->op(&r));
  size_t n = cudasim_calls_all(names, counts, MAX_APIS);
  ck_assert_uint_le(n, MAX_APIS);
  for (size_t i = 0; i < nb; i++) counts[i] -= before[i]; /* the first nb are the same names */
  run_finish(row, &r, SPOOL_OK, "no failure");
  return n;
}

typedef struct tally {
  long calls, injected, errors, tolerated, recovered;
} tally;

/* One run with call k of api failing with err; checks the status and the message. */
static void failed_run(const fault_row *row, const char *api, long k, cudaError_t err,
                       tally *t) {
  char where[160];
  snprintf(where, sizeof where, "call %ld of %s failing with %s", k, api, cudaGetErrorName(err));
  fault_run r;
  run_setup(row, &r);
  cudasim_fail(api, (int)k, err);
  spool_status st = row->op(&r);
  cudaError_t left = cudaGetLastError();
  ck_assert_msg(cudasim_armed() == 0, "%s, %s: the call was never made", row->name, where);
  ck_assert_msg(left == cudaSuccess, "%s, %s: the runtime's last error is still %s", row->name,
                where, cudaGetErrorName(left));
  t->injected++;
  spool_status want = want_of(api, err);
  if (st == SPOOL_OK) {
    if (err == cudaErrorMemoryAllocation) t->recovered++;
    else t->tolerated++;
  } else {
    ck_assert_msg(st == want, "%s, %s: returned %s, expected %s: %s", row->name, where,
                  spool_status_name(st), spool_status_name(want), spool_last_error());
    ck_assert_msg(strstr(spool_last_error(), api) != NULL, "%s, %s: the message lacks %s: %s",
                  row->name, where, api, spool_last_error());
    t->errors++;
  }
  run_finish(row, &r, st, where);
}

START_TEST(every_failed_cuda_call_leaves_the_pool_as_it_was) {
  const fault_row *row = &ROWS[_i];
  const char *names[MAX_APIS];
  long counts[MAX_APIS];
  size_t n = clean_run(row, names, counts);
  tally t = {0};
  for (size_t a = 0; a < n; a++) {
    if (counts[a] <= 0 || !injectable(names[a])) continue;
    t.calls += counts[a];
    for (long k = 1; k <= counts[a]; k++) {
      failed_run(row, names[a], k, cudaErrorInvalidValue, &t);
      if (allocates(names[a])) failed_run(row, names[a], k, cudaErrorMemoryAllocation, &t);
    }
  }
  printf("fault sweep: %-34s %3ld calls swept, %3ld failures injected: %ld reported, %ld "
         "tolerated, %ld recovered; all ok\n",
         row->name, t.calls, t.injected, t.errors, t.tolerated, t.recovered);
  fflush(stdout);
}
END_TEST

int main(void) {
  Suite *s = suite_create("faults");
  TCase *tc = test_tcase("sweep");
  tcase_add_loop_test(tc, every_failed_cuda_call_leaves_the_pool_as_it_was, 0, NROWS);
  suite_add_tcase(s, tc);
  return test_main(s);
}
