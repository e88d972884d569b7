/* The trace: a binary record of every call a pool was given and how it answered (the layout is
 * trace_format.h, the words docs/trace.md). Each thread fills a block of its own, under a lock
 * only it and a flush take; a full block goes to the file at once in one write, so that a crash
 * loses only the blocks still being filled. Nothing here calls CUDA but the create's
 * cudaMemGetInfo. At process exit an atexit handler writes the partial blocks of every trace
 * still open (plain file writes: pools a framework never destroys still leave a whole trace). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, getpid */
#endif
#include "internal.h"
#include "trace_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SITE_SLOTS 64 /* a block's recent sites, direct-mapped: a repeat costs no text */

typedef struct site_slot {
  const void *key; /* the site's file or tag pointer */
  int line;
  uint32_t id;
} site_slot;

/* One thread's block in one trace. Kept until the trace closes: flushes walk the list without
 * the trace's lock, since entries are only ever added at its head. */
typedef struct tbuf {
  pthread_mutex_t lock; /* the owning thread while it records; a flush */
  uint64_t thread;
  uint32_t used;    /* payload bytes */
  uint32_t records;
  uint32_t sites;   /* site ids handed out in this block */
  uint64_t first_seq;
  site_slot slots[SITE_SLOTS];
  struct tbuf *next;
  /* header and payload side by side: one write per block */
  alignas(8) unsigned char block[sizeof(spool_trace_block) + SPOOL_TRACE_BLOCK_PAYLOAD];
} tbuf;

struct spool__trace {
  struct spool__trace *next_open; /* the traces still open, under open_lock */
  pthread_mutex_t lock; /* the file's writes and the list's head */
  int fd;
  uint64_t id;          /* unique in the process: the key of threads' slots */
  uint64_t t0;          /* CLOCK_MONOTONIC at the start */
  atomic_uint_fast64_t seq;
  _Atomic(tbuf *) bufs;
  bool write_failed;    /* reported once, on stderr: the pool goes on without its trace */
};

/* ---- the thread's block ---------------------------------------------------------------------- */

static atomic_uint_fast64_t traces_made;

/* A thread records for few pools at once: a few slots, keyed by trace id (never reused, so a
 * slot of a closed trace never matches). */
#define THREAD_SLOTS 4
static _Thread_local struct {
  uint64_t id;
  tbuf *buf;
} thread_slots[THREAD_SLOTS];
static _Thread_local unsigned thread_slot_next;

static tbuf *find_or_add(spool__trace *t, uint64_t me) {
  pthread_mutex_lock(&t->lock);
  tbuf *b = atomic_load(&t->bufs);
  while (b && b->thread != me) b = b->next;
  if (!b && (b = calloc(1, sizeof *b)) != NULL) {
    pthread_mutex_init(&b->lock, NULL);
    b->thread = me;
    b->next = atomic_load(&t->bufs);
    atomic_store(&t->bufs, b);
  }
  pthread_mutex_unlock(&t->lock);
  return b;
}

static tbuf *my_buf(spool__trace *t) {
  for (unsigned i = 0; i < THREAD_SLOTS; i++)
    if (thread_slots[i].id == t->id) return thread_slots[i].buf;
  tbuf *b = find_or_add(t, spool__thread_id());
  if (b) {
    unsigned i = thread_slot_next++ % THREAD_SLOTS;
    thread_slots[i].id = t->id;
    thread_slots[i].buf = b;
  }
  return b;
}

/* ---- writing --------------------------------------------------------------------------------- */

static bool write_all(int fd, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Under b's lock: writes b's block, if it holds anything, and starts an empty one. */
static void write_block(spool__trace *t, tbuf *b) {
  if (b->records == 0) return;
  spool_trace_block h = {SPOOL_TRACE_BLOCK_MAGIC, b->used, b->records, 0, b->thread,
                         b->first_seq};
  unsigned char *payload = b->block + sizeof h;
  h.checksum = spool_trace_fnv1a(payload, b->used);
  memcpy(b->block, &h, sizeof h);
  pthread_mutex_lock(&t->lock);
  if (!t->write_failed && !write_all(t->fd, b->block, sizeof h + b->used)) {
    t->write_failed = true;
    fprintf(stderr, "spool: trace: writing a block failed (%s); the trace ends here\n",
            strerror(errno));
  }
  pthread_mutex_unlock(&t->lock);
  b->used = b->records = b->sites = 0;
  b->first_seq = 0;
  memset(b->slots, 0, sizeof b->slots);
}

/* Under b's lock: room for n more payload bytes, writing the block first if it is full. */
static unsigned char *room(spool__trace *t, tbuf *b, uint32_t n) {
  if (b->used + n > SPOOL_TRACE_BLOCK_PAYLOAD) write_block(t, b);
  unsigned char *at = b->block + sizeof(spool_trace_block) + b->used;
  b->used += n;
  b->records++;
  return at;
}

/* Under b's lock: the block-local id of site, defining it with a site record when new. */
static uint32_t site_id(spool__trace *t, tbuf *b, const spool__site *site) {
  const char *text = site->tag ? site->tag : site->file;
  if (!text) return 0;
  uintptr_t k = (uintptr_t)text ^ ((uintptr_t)site->line * 0x9E3779B97F4A7C15u);
  site_slot *slot = &b->slots[(k >> 4) % SITE_SLOTS];
  if (slot->key == text && slot->line == site->line && slot->id) return slot->id;
  size_t len = strnlen(text, SPOOL_TRACE_SITE_MAX);
  uint32_t padded = (uint32_t)((len + 7) & ~(size_t)7);
  uint32_t need = (uint32_t)sizeof(spool_trace_record) + padded;
  if (b->used + need > SPOOL_TRACE_BLOCK_PAYLOAD) write_block(t, b); /* slots start over */
  spool_trace_record r = {.kind = SPOOL_TRACE_SITE, .site = ++b->sites,
                          .flags = site->tag ? SPOOL_TRACE_TAG : 0,
                          .size = (uint64_t)(site->line < 0 ? 0 : site->line),
                          .aux = (uint32_t)len};
  unsigned char *at = room(t, b, need);
  memcpy(at, &r, sizeof r);
  memset(at + sizeof r, 0, padded);
  memcpy(at + sizeof r, text, len);
  *slot = (site_slot){text, site->line, r.site};
  return r.site;
}

uint64_t spool__trace_seq(spool_pool *pool) {
  return atomic_fetch_add_explicit(&pool->trace->seq, 1, memory_order_relaxed) + 1;
}

void spool__trace_event(spool_pool *pool, const spool__trace_ev *ev) {
  spool__trace *t = pool->trace;
  tbuf *b = my_buf(t);
  if (!b) return; /* no host memory: the event goes unrecorded rather than failing the call */
  spool_trace_record r = {.kind = ev->kind, .status = (uint8_t)ev->status, .flags = ev->flags,
                          .seq = ev->seq ? ev->seq : spool__trace_seq(pool),
                          .time_ns = spool__now_ns() - t->t0, .ptr = (uintptr_t)ev->ptr,
                          .size = ev->size, .stream = (uintptr_t)ev->stream, .aux = ev->aux};
  pthread_mutex_lock(&b->lock);
  /* a site record and the event that names it share a block */
  size_t need = sizeof r + (ev->site ? sizeof r + SPOOL_TRACE_SITE_MAX + 1 : 0);
  if (b->used + need > SPOOL_TRACE_BLOCK_PAYLOAD) write_block(t, b);
  if (ev->site) r.site = site_id(t, b, ev->site);
  if (b->records == 0 || b->first_seq == 0) b->first_seq = r.seq;
  memcpy(room(t, b, sizeof r), &r, sizeof r);
  pthread_mutex_unlock(&b->lock);
}

static void flush_trace(spool__trace *t) {
  for (tbuf *b = atomic_load(&t->bufs); b; b = b->next) {
    pthread_mutex_lock(&b->lock);
    write_block(t, b);
    pthread_mutex_unlock(&b->lock);
  }
}

void spool__trace_flush(spool_pool *pool) {
  if (pool->trace) flush_trace(pool->trace);
}

void spool__trace_chunk(spool_pool *pool, int kind, uintptr_t addr, uint64_t bytes,
                        cudaStream_t stream) {
  spool__trace_ev ev = {.kind = (uint8_t)kind, .ptr = (const void *)addr, .size = bytes,
                        .stream = stream};
  spool__trace_event(pool, &ev);
}

void spool__trace_point(spool_pool *pool, int kind, spool_status s, uint64_t size,
                        cudaStream_t stream) {
  spool__trace_ev ev = {.kind = (uint8_t)kind, .status = s, .size = size, .stream = stream};
  spool__trace_event(pool, &ev);
  spool__trace_flush(pool);
}

/* ---- the traces still open, for the exit ---------------------------------------------------- */

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static spool__trace *open_traces;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* Holds open_lock throughout, so that no trace is closed and freed under it. */
static void flush_at_exit(void) {
  pthread_mutex_lock(&open_lock);
  for (spool__trace *t = open_traces; t; t = t->next_open) flush_trace(t);
  pthread_mutex_unlock(&open_lock);
}

static void register_exit(void) { (void)atexit(flush_at_exit); }

static void add_open(spool__trace *t) {
  pthread_once(&exit_once, register_exit);
  pthread_mutex_lock(&open_lock);
  t->next_open = open_traces;
  open_traces = t;
  pthread_mutex_unlock(&open_lock);
}

static void remove_open(spool__trace *t) {
  pthread_mutex_lock(&open_lock);
  for (spool__trace **at = &open_traces; *at; at = &(*at)->next_open)
    if (*at == t) {
      *at = t->next_open;
      break;
    }
  pthread_mutex_unlock(&open_lock);
}

/* ---- open and close -------------------------------------------------------------------------- */

/* The path with %p (process id), %n (the pool's number) and %% replaced. false when it does
 * not fit. */
static bool expand(const char *in, uint64_t pool_id, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = in; *p; p++) {
    char num[24];
    const char *put = num;
    if (p[0] == '%' && p[1] == 'p') snprintf(num, sizeof num, "%ld", (long)getpid()), p++;
    else if (p[0] == '%' && p[1] == 'n') snprintf(num, sizeof num, "%llu",
                                                   (unsigned long long)pool_id), p++;
    else if (p[0] == '%' && p[1] == '%') num[0] = '%', num[1] = '\0', p++;
    else num[0] = *p, num[1] = '\0';
    size_t n = strlen(put);
    if (o + n >= len) return false;
    memcpy(out + o, put, n);
    o += n;
  }
  out[o] = '\0';
  return true;
}

static uint64_t unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool write_header(spool__trace *t, const spool_pool *pool) {
  char conf[SPOOL_TRACE_CONFIG_MAX + 1];
  spool_config c = pool->cfg;
  c.trace[0] = '\0'; /* a replay of the config must not trace over the recording */
  if (spool_config_format(&c, conf, sizeof conf) != SPOOL_OK) conf[0] = '\0';
  size_t total = 0, free_bytes = 0;
  (void)spool__device_meminfo_quiet(pool->device, &free_bytes, &total);
  spool_trace_header h = {.version = SPOOL_TRACE_VERSION, .header_bytes = sizeof h,
                          .record_bytes = sizeof(spool_trace_record), .bom = SPOOL_TRACE_BOM,
                          .device = pool->device, .config_bytes = (uint32_t)strlen(conf),
                          .start_unix_ns = unix_ns(), .device_total = total,
                          .pid = (uint64_t)getpid(), .pool_id = pool->id};
  memcpy(h.magic, SPOOL_TRACE_MAGIC, sizeof h.magic);
  return write_all(t->fd, (const unsigned char *)&h, sizeof h) &&
         write_all(t->fd, (const unsigned char *)conf, h.config_bytes);
}

spool_status spool__trace_open(spool_pool *pool, const char *ctx) {
  const char *want = pool->cfg.trace[0] ? pool->cfg.trace : getenv("SPOOL_TRACE");
  if (!want || !*want) return SPOOL_OK;
  char path[SPOOL_REPORT_PATH_MAX];
  if (!expand(want, pool->id, path, sizeof path))
    return spool__fail(SPOOL_ERR_CONFIG, "%s: trace path '%s' is longer than %d bytes once "
                       "expanded", ctx, want, SPOOL_REPORT_PATH_MAX - 1);
  spool__trace *t = calloc(1, sizeof *t);
  if (!t) return spool__fail(SPOOL_ERR_HOST_OOM, "%s: no host memory for the trace", ctx);
  t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t->fd < 0) {
    int err = errno;
    free(t);
    return spool__fail(SPOOL_ERR_CONFIG, "%s: trace: cannot open '%s' for writing: %s%s", ctx,
                       path, strerror(err), pool->cfg.trace[0] ? "" : " (from SPOOL_TRACE)");
  }
  pthread_mutex_init(&t->lock, NULL);
  t->id = atomic_fetch_add(&traces_made, 1) + 1;
  t->t0 = spool__now_ns();
  if (!write_header(t, pool)) {
    int err = errno;
    close(t->fd);
    pthread_mutex_destroy(&t->lock);
    free(t);
    return spool__fail(SPOOL_ERR_CONFIG, "%s: trace: writing the header of '%s' failed: %s",
                       ctx, path, strerror(err));
  }
  pool->trace = t;
  add_open(t);
  return SPOOL_OK;
}

void spool__trace_close(spool_pool *pool) {
  spool__trace *t = pool->trace;
  if (!t) return;
  remove_open(t);
  flush_trace(t);
  for (tbuf *b = atomic_load(&t->bufs), *next; b; b = next) {
    next = b->next;
    pthread_mutex_destroy(&b->lock);
    free(b);
  }
  if (close(t->fd) != 0 && !t->write_failed)
    fprintf(stderr, "spool: trace: closing the file failed (%s)\n", strerror(errno));
  pthread_mutex_destroy(&t->lock);
  free(t);
  pool->trace = NULL;
}

spool_status spool_trace_flush(spool_pool *pool) {
  if (!pool) return spool__fail(SPOOL_ERR_INVALID, "spool_trace_flush: pool is NULL");
  if (pool->trace) spool__trace_point(pool, SPOOL_TRACE_FLUSH, SPOOL_OK, 0, NULL);
  return SPOOL_OK;
}
