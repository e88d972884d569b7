/* The leak report: every live buffer, grouped by the call site that allocated it, biggest group
 * first; and the sweep at destroy that writes it and frees what was left. */
#include "capture.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- grouping ------------------------------------------------------------------------------ */

/* NULL sorts before any string, so that a NULL and an empty tag are two sites, as they read. */
static int text_order(const char *a, const char *b) {
  if (!a || !b) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

/* The one order of sites; two sites are the same exactly when it says 0. */
static int site_order(const spool__site *a, const spool__site *b) {
  int c = text_order(a->tag, b->tag);
  if (c == 0) c = text_order(a->file, b->file);
  if (c == 0) c = (a->line > b->line) - (a->line < b->line);
  return c;
}

static int by_site_then_seq(const void *x, const void *y) {
  const spool__buffer *a = x, *b = y;
  int c = site_order(&a->born, &b->born);
  return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

typedef struct group {
  size_t first, n;  /* a run of the sorted buffers */
  uint64_t bytes;
} group;

/* Biggest group first; ties by more buffers, then by the order of the sorted runs, so that the
 * same leaks always print in the same order. */
static int by_bytes_desc(const void *x, const void *y) {
  const group *a = x, *b = y;
  if (a->bytes != b->bytes) return (a->bytes < b->bytes) - (a->bytes > b->bytes);
  if (a->n != b->n) return (a->n < b->n) - (a->n > b->n);
  return (a->first > b->first) - (a->first < b->first);
}

/* Splits the sorted buffers into runs of one site each; returns how many. */
static size_t make_groups(const spool__buffer *bufs, size_t n, group *groups) {
  size_t g = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || site_order(&bufs[i].born, &bufs[i - 1].born) != 0)
      groups[g++] = (group){i, 0, 0};
    groups[g - 1].n++;
    groups[g - 1].bytes += bufs[i].size;
  }
  return g;
}

/* ---- printing ------------------------------------------------------------------------------ */

static void print_buffer(FILE *out, const spool__buffer *b, uint64_t now) {
  char size[SPOOL__SIZE_TEXT];
  fprintf(out, "    %p  %10s  stream %p  allocation #%" PRIu64, (void *)b->ptr,
          spool__format_size(b->size, size), (void *)b->stream, b->seq);
  if (b->born.batch) fprintf(out, "  batch of %" PRIu32, b->born.batch);
  if (b->born_ns && now >= b->born_ns)
    fprintf(out, "  age %.3f s", (double)(now - b->born_ns) / 1e9);
  fputc('\n', out);
}

/* The fallback when there is no memory to sort: one line per buffer, as they lie. */
static void print_buffer_plain(const spool__buffer *b, void *out) { print_buffer(out, b, 0); }

static void print_groups(FILE *out, spool__buffer *bufs, size_t n, group *groups) {
  char size[SPOOL__SIZE_TEXT];
  uint64_t now = spool__now_ns();
  qsort(bufs, n, sizeof *bufs, by_site_then_seq);
  size_t ng = make_groups(bufs, n, groups);
  qsort(groups, ng, sizeof *groups, by_bytes_desc);
  for (size_t g = 0; g < ng; g++) {
    fprintf(out, "  %s in %zu buffer%s at ", spool__format_size(groups[g].bytes, size),
            groups[g].n, groups[g].n == 1 ? "" : "s");
    char site[SPOOL__SITE_TEXT];
    fprintf(out, "%s\n", spool__site_text(&bufs[groups[g].first].born, site, sizeof site));
    for (size_t i = 0; i < groups[g].n; i++) print_buffer(out, &bufs[groups[g].first + i], now);
  }
}

/* Every live buffer of the pool: its own table's (uncached path) and every stream cache's. */
static void each_live(spool_pool *pool, void (*fn)(const spool__buffer *, void *), void *arg) {
  pthread_mutex_lock(&pool->lock);
  spool__table_each(&pool->live, fn, arg);
  pthread_mutex_unlock(&pool->lock);
  spool__census_each_live(pool, fn, arg);
}

typedef struct snapshot {
  spool__buffer *bufs;
  size_t n, cap;
  uint64_t bytes;
  bool oom;
} snapshot;

static void collect(const spool__buffer *b, void *arg) {
  snapshot *s = arg;
  if (s->n == s->cap && !s->oom) {
    size_t cap;
    spool__buffer *bufs = spool__grow_array(s->bufs, s->cap, sizeof *bufs, 64, &cap);
    if (bufs) s->bufs = bufs, s->cap = cap;
    else s->oom = true;
  }
  s->bytes += b->size;
  if (!s->oom) s->bufs[s->n++] = *b;
}

spool_status spool__leak_report(spool_pool *pool, FILE *out, const char *context) {
  snapshot snap = {0};
  each_live(pool, collect, &snap);
  size_t n = snap.n;
  group *groups = n && !snap.oom ? malloc(n * sizeof *groups) : NULL;

  spool_status s = SPOOL_OK;
  char size[SPOOL__SIZE_TEXT];
  if (snap.oom || (n && !groups)) {
    s = spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory to list the live buffers", context);
  } else {
    fprintf(out, "spool: leak report, pool %p on device %d: ", (void *)pool, pool->device);
    if (n == 0) fprintf(out, "no live buffers\n");
    else fprintf(out, "%zu live buffer%s, %s\n", n, n == 1 ? "" : "s",
                 spool__format_size(snap.bytes, size));
    if (n) print_groups(out, snap.bufs, n, groups);
    if (fflush(out) != 0 || ferror(out))
      s = spool__fail(SPOOL_ERR_IO, "%s: writing the leak report failed", context);
  }
  free(snap.bufs);
  free(groups);
  return s;
}

spool_status spool_leaks(spool_pool *pool, FILE *out) {
  static const char ctx[] = "spool_leaks";
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "%s: pool is NULL", ctx);
  if (!out) return spool__fail(SPOOL_ERR_INVALID, "%s: out is NULL", ctx);
  if (pool->cfg.track == SPOOL_TRACK_OFF) {
    uint64_t live = 0, bytes = 0;
    spool__live_totals(pool, &bytes, &live);
    return spool__fail(SPOOL_ERR_UNSUPPORTED,
                       "%s: track=off keeps no list of buffers (%" PRIu64 " live); set "
                       "track=counts or full", ctx, live);
  }
  return spool__leak_report(pool, out, ctx);
}

/* ---- at destroy ---------------------------------------------------------------------------- */

/* Where the report goes: report=, else SPOOL_REPORT, else stderr. A file that cannot be opened
 * is said on stderr, and the report goes there instead. */
static FILE *open_report(const spool_pool *p, bool *close_it) {
  const char *path = p->cfg.report[0] ? p->cfg.report : getenv("SPOOL_REPORT");
  *close_it = false;
  if (!path || !*path) return stderr;
  FILE *f = fopen(path, "a");
  if (!f) {
    fprintf(stderr, "spool: cannot append the leak report to %s (%s); writing it here\n", path,
            strerror(errno));
    return stderr;
  }
  *close_it = true;
  return f;
}

typedef struct free_pass {
  cudaError_t err;
  uintptr_t ptr;   /* the first that failed */
  uint64_t failed; /* how many failed: every one is tried */
} free_pass;

/* A heap buffer goes back with its chunk when the heap is destroyed, right after this. */
static void free_one(const spool__buffer *b, void *arg) {
  free_pass *f = arg;
  if (b->blk) return;
  cudaError_t err = cudaFreeAsync((void *)b->ptr, cudaStreamLegacy);
  if (err != cudaSuccess && spool__graph_never_ran(b, err, cudaStreamLegacy)) {
    spool__clear_cuda_error(); /* its graph never ran: nothing to free */
    return;
  }
  if (err != cudaSuccess && f->failed++ == 0) {
    f->err = err;
    f->ptr = b->ptr;
  }
  if (err != cudaSuccess) spool__clear_cuda_error();
}

/* Frees every leaked buffer. Their streams may already be destroyed, and work queued on them may
 * still use the memory: a device synchronize makes freeing on the legacy stream safe. */
static spool_status free_all(spool_pool *p, uint64_t *stay) {
  static const char ctx[] = "spool_pool_destroy: freeing leaked buffers";
  int saved = 0;
  spool_status s = spool__device_enter(p->device, &saved, ctx);
  if (s != SPOOL_OK) return s;
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    s = spool__fail_cuda(err, "cudaDeviceSynchronize", "%s", ctx);
  } else {
    free_pass f = {cudaSuccess, 0, 0};
    each_live(p, free_one, &f);
    *stay = f.failed;
    if (f.failed)
      s = spool__fail_cuda(f.err, "cudaFreeAsync", "%s: %p", ctx, (void *)f.ptr);
  }
  return spool__device_leave(p->device, saved, s, ctx);
}

spool_status spool__free_leaks(spool_pool *pool) {
  static const char ctx[] = "spool_pool_destroy";
  uint64_t n = 0, bytes = 0;
  spool__live_totals(pool, &bytes, &n);
  if (n == 0) return SPOOL_OK;
  bool close_it;
  FILE *out = open_report(pool, &close_it);
  if (pool->cfg.track == SPOOL_TRACK_OFF) {
    fprintf(out, "spool: pool %p on device %d destroyed with %" PRIu64 " live buffers; "
                 "track=off: spool can neither list nor free them\n",
            (void *)pool, pool->device, n);
  } else if (spool__leak_report(pool, out, ctx) == SPOOL_ERR_HOST_OOM) {
    /* No memory to sort: list them as they lie. (After a write error, writing more is moot.) */
    fprintf(out, "spool: leak report, pool %p on device %d: %" PRIu64 " live buffers, unsorted:\n",
            (void *)pool, pool->device, n);
    each_live(pool, print_buffer_plain, out);
  }
  if (close_it && fclose(out) != 0) fprintf(stderr, "spool: closing the leak report failed\n");
  uint64_t stay = n; /* all of them, unless the free pass says how many */
  spool_status s = pool->cfg.track == SPOOL_TRACK_OFF ? SPOOL_OK : free_all(pool, &stay);
  if (s != SPOOL_OK && stay == n)
    return spool__append(s, "; %" PRIu64 " leaked buffer%s (see the leak report) could not be "
                         "freed and stay allocated", n, n == 1 ? "" : "s");
  if (s != SPOOL_OK)
    return spool__append(s, "; %" PRIu64 " of the %" PRIu64 " leaked buffers (see the leak "
                         "report) could not be freed and stay allocated", stay, n);
  return spool__fail(SPOOL_ERR_LEAKS,
                     "%s: %" PRIu64 " buffer%s still allocated on device %d (see the leak "
                     "report); %s", ctx, n, n == 1 ? " was" : "s were", pool->device,
                     pool->cfg.track == SPOOL_TRACK_OFF ? "track=off: not freed" : "freed now");
}
