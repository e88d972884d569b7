/* Every live pool of the process, so that a free given to the wrong pool can name the right one,
 * a destroyed pool is told from a live one, and running out of memory can trim the others on the
 * same device. The list has its own lock; each pool's lock is taken in turn under it. */
#include "capture.h"

/* The one piece of process-wide state: a list of pools, only read on error paths. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static spool_pool *registry_head;

void spool__registry_add(spool_pool *pool) {
  pthread_mutex_lock(&registry_lock);
  pool->registry_next = registry_head;
  registry_head = pool;
  pthread_mutex_unlock(&registry_lock);
}

bool spool__registry_remove(spool_pool *pool) {
  bool found = false;
  pthread_mutex_lock(&registry_lock);
  for (spool_pool **at = &registry_head; *at; at = &(*at)->registry_next) {
    if (*at == pool) {
      *at = pool->registry_next;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

/* Looks ptr up in every pool but self: at a buffer's start only (hash lookups), or inside one
 * too (scans). */
static int registry_find(const spool_pool *self, uintptr_t ptr, bool inside, spool__owner *out) {
  int found = 0;
  pthread_mutex_lock(&registry_lock);
  for (spool_pool *p = registry_head; p && !found; p = p->registry_next) {
    if (p == self) continue;
    pthread_mutex_lock(&p->lock);
    const spool__buffer *b = spool__table_find(&p->live, ptr);
    if (!b && inside) b = spool__table_containing(&p->live, ptr);
    if (b) out->buffer = *b;
    pthread_mutex_unlock(&p->lock);
    found = b || (inside ? spool__census_containing(p, ptr, &out->buffer)
                         : spool__census_find_live(p, ptr, &out->buffer));
    if (found) {
      out->pool = p;
      out->device = p->device;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

int spool__registry_owner_of_start(const spool_pool *self, uintptr_t ptr, spool__owner *out) {
  return registry_find(self, ptr, false, out);
}

int spool__registry_owner(const spool_pool *self, uintptr_t ptr, spool__owner *out) {
  return registry_find(self, ptr, true, out);
}

void spool__registry_trim_device(const spool_pool *self) {
  pthread_mutex_lock(&registry_lock);
  for (spool_pool *p = registry_head; p; p = p->registry_next) {
    if (p == self || p->device != self->device) continue;
    (void)spool__census_flush_all(p, "spool_alloc"); /* failures: the trim gives what it can */
    enum cudaStreamCaptureMode mode;
    bool relaxed = spool__relaxed_enter(&mode); /* other threads' captures */
    if (cudaMemPoolTrimTo(p->handle, 0) != cudaSuccess) spool__clear_cuda_error();
    spool__relaxed_leave(relaxed, mode);
  }
  pthread_mutex_unlock(&registry_lock);
}
