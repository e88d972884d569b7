/* cudasim: the control API (cudasim.h).
 * One part of the simulated runtime: the model is described at the top of cudasim.c; what the
 * parts share is in cudasim_internal.h. */
#include "cudasim_internal.h"

/* ---- control API ----------------------------------------------------------------------------- */

/* Everything about captures and graphs goes; graph and exec handles to the graveyard. */
static void reset_graphs(void) {
  while (cudasim__g.captures) {
    sim_capture *c = cudasim__g.captures;
    cudasim__g.captures = c->next;
    c->graph->capture = NULL;
    free(c);
  }
  while (cudasim__g.execs)
    (void)cudasim__exec_destroy(cudasim__g.execs);
  while (cudasim__g.graphs)
    cudasim__graph_free(cudasim__g.graphs);
  while (cudasim__g.gallocs) { /* the live ones nobody freed */
    sim_galloc *ga = cudasim__g.gallocs;
    cudasim__g.gallocs = ga->next;
    munmap(ga->base, ga->charged);
    free(ga);
  }
}

void cudasim_reset(void) {
  cudasim__lock();
  reset_graphs();
  cudasim__sim6_reset(); /* imports unmapped, export records dropped */
  while (cudasim__g.pools)
    cudasim__pool_unlink_free(cudasim__g.pools);
  while (cudasim__g.regions) {
    sim_region *r = cudasim__g.regions;
    cudasim__g.regions = r->next;
    munmap(r->base, r->charged);
    free(r);
  }
  while (cudasim__g.streams) {
    struct CUstream_st *s = cudasim__g.streams;
    cudasim__g.streams = s->next;
    s->cap = NULL;
    s->next = cudasim__graveyard.streams;
    cudasim__graveyard.streams = s;
  }
  while (cudasim__g.events) {
    struct CUevent_st *ev = cudasim__g.events;
    cudasim__g.events = ev->next;
    ev->next = cudasim__graveyard.events;
    cudasim__graveyard.events = ev;
  }
  for (size_t i = 0; i < cudasim__g.narmed; i++)
    free(cudasim__g.armed[i].name);
  free(cudasim__g.armed);
  free(cudasim__g.counts);
  unsigned long gen = cudasim__g.gen;
  memset(&cudasim__g, 0, sizeof cudasim__g);
  cudasim__g.gen = gen;
  cudasim__sim_defaults(); /* bumps the generation: every thread's state is stale now */
  cudasim__tls_sync();
  cudasim__unlock();
}

void cudasim_set_device_count(int n) {
  cudasim__lock();
  cudasim__g.ndev = n < 0 ? 0 : n > SIM_MAX_DEV ? SIM_MAX_DEV : n;
  cudasim__unlock();
}

void cudasim_set_capacity(int device, size_t bytes) {
  cudasim__lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    cudasim__g.dev[device].capacity = bytes;
  cudasim__unlock();
}

void cudasim_set_pool_segment(size_t bytes) {
  cudasim__lock();
  if (bytes && bytes % CUDASIM_GRANULARITY == 0)
    cudasim__g.pool_segment = bytes;
  cudasim__unlock();
}

void cudasim_fail(const char *api, int nth, cudaError_t err) {
  if (!api || nth < 1)
    return;
  cudasim__lock();
  if (cudasim__g.narmed == cudasim__g.caparmed) {
    size_t cap = cudasim__g.caparmed ? 2 * cudasim__g.caparmed : 16;
    sim_armed *a = realloc(cudasim__g.armed, cap * sizeof *a);
    if (!a) {
      cudasim__unlock();
      return;
    }
    cudasim__g.armed = a;
    cudasim__g.caparmed = cap;
  }
  size_t len = strlen(api) + 1;
  char *name = malloc(len);
  if (name) {
    memcpy(name, api, len);
    cudasim__g.armed[cudasim__g.narmed].name = name;
    cudasim__g.armed[cudasim__g.narmed].at = cudasim__calls_of(api) + nth;
    cudasim__g.armed[cudasim__g.narmed].err = err;
    cudasim__g.narmed++;
  }
  cudasim__unlock();
}

/* Resolves s for the control API without creating anything on an error path. */
static struct CUstream_st *control_stream(cudaStream_t s) {
  struct CUstream_st *out;
  if (cudasim__g.driver == 0 || cudasim__g.ndev == 0 || cudasim__stream_get(s, &out) != cudaSuccess)
    return NULL;
  return out;
}

void cudasim_hold(cudaStream_t s) {
  cudasim__lock();
  struct CUstream_st *st = control_stream(s);
  if (st)
    st->held = 1;
  cudasim__unlock();
}

void cudasim_release(cudaStream_t s) {
  cudasim__lock();
  struct CUstream_st *st = control_stream(s);
  if (st) {
    st->held = 0;
    if (!cudasim__stream_blocked(st))
      st->completed = st->ticket;
    cudasim__progress();
    cudasim__reap_all();
  }
  cudasim__unlock();
}

long cudasim_calls(const char *api) {
  cudasim__lock();
  long n = api ? cudasim__calls_of(api) : 0;
  cudasim__unlock();
  return n;
}

size_t cudasim_calls_all(const char **names, long *counts, size_t cap) {
  cudasim__lock();
  size_t n = cudasim__g.ncounts;
  for (size_t i = 0; i < n && i < cap; i++) {
    if (names) names[i] = cudasim__g.counts[i].name;
    if (counts) counts[i] = cudasim__g.counts[i].n;
  }
  cudasim__unlock();
  return n;
}

void cudasim_set_driver_version(int version) {
  cudasim__lock();
  cudasim__g.driver = version;
  cudasim__unlock();
}

void cudasim_set_pools_supported(int device, int supported) {
  cudasim__lock();
  if (device >= 0 && device < SIM_MAX_DEV)
    cudasim__g.dev[device].pools_supported = supported != 0;
  cudasim__unlock();
}

void cudasim_set_can_access_peer(int device, int peer, int can) {
  cudasim__lock();
  if (device >= 0 && device < SIM_MAX_DEV && peer >= 0 && peer < SIM_MAX_DEV)
    cudasim__g.no_peer[device][peer] = !can;
  cudasim__unlock();
}

int cudasim_pool_count(void) {
  int n = 0;
  cudasim__lock();
  for (struct CUmemPoolHandle_st *p = cudasim__g.pools; p; p = p->next)
    n += !p->is_default && !p->destroyed;
  cudasim__unlock();
  return n;
}

long cudasim_live_allocations(void) {
  cudasim__lock();
  long n = cudasim__g.live;
  cudasim__unlock();
  return n;
}

int cudasim_stream_count(void) {
  int n = 0;
  cudasim__lock();
  for (struct CUstream_st *s = cudasim__g.streams; s; s = s->next)
    n += s->kind == SIM_USER;
  cudasim__unlock();
  return n;
}

long cudasim_pending(cudaStream_t s) {
  cudasim__lock();
  struct CUstream_st *st = control_stream(s);
  long n = st ? (long)(st->ticket - st->completed) : -1;
  cudasim__unlock();
  return n;
}

int cudasim_armed(void) {
  cudasim__lock();
  int n = (int)cudasim__g.narmed;
  cudasim__unlock();
  return n;
}

cudaStream_t cudasim_stream_create_at(cudaStream_t reuse, unsigned flags) {
  struct CUstream_st *s = NULL;
  cudasim__lock();
  int ok = cudasim__g.driver != 0 && cudasim__g.ndev > 0 && cudasim__valid_dev(cudasim__t.device) &&
           reuse && !(flags & ~(unsigned)cudaStreamNonBlocking);
  for (struct CUstream_st **link = &cudasim__graveyard.streams; ok && *link; link = &(*link)->next)
    if (*link == reuse) {
      s = reuse;
      *link = s->next;
      break;
    }
  if (s) {
    memset(s, 0, sizeof *s);
    s->device = cudasim__t.device;
    s->flags = flags;
    s->kind = SIM_USER;
    s->id = ++cudasim__last_stream_id; /* the address comes back, the id never does */
    s->next = cudasim__g.streams;
    cudasim__g.streams = s;
  }
  cudasim__unlock();
  return s;
}

int cudasim_capturing(cudaStream_t s) {
  cudasim__lock();
  struct CUstream_st *st = control_stream(s);
  int status = st ? (int)cudasim__capture_status(st) : -1;
  cudasim__unlock();
  return status;
}

long cudasim_graph_allocations(void) {
  long n = 0;
  cudasim__lock();
  for (sim_galloc *ga = cudasim__g.gallocs; ga; ga = ga->next)
    n += ga->live;
  cudasim__unlock();
  return n;
}
