/* The words of a refused free, from the facts the heap found (spool__refusal): an interior
 * pointer (a batch's sub-buffer and a scope's memory named as such), another pool's buffer, a
 * second free, or a pointer no pool knows. Nothing here looks anything up: the caller gathered
 * the facts under the locks that make them hold together. */
#include "internal.h"

#include <inttypes.h>

static const char FREE[] = "spool_free";

/* The tag of scope chunks (scope.c allocates them with it), for the leak report and refusals. */
const char spool__scope_tag[] = "spool_scope chunk";

const char *spool__buffer_text(const spool__buffer *b, char *out, size_t len) {
  char size[SPOOL__SIZE_TEXT], site[SPOOL__SITE_TEXT];
  snprintf(out, len, "%p (%s, allocation #%" PRIu64 " on stream %p, allocated at %s)",
           (void *)b->ptr, spool__format_size(b->size, size), b->seq, (void *)b->stream,
           spool__site_text(&b->born, site, sizeof site));
  return out;
}

spool_status spool__batch_refusal(const spool_pool *pool, const void *ptr,
                                  const spool__buffer *b, const char *here) {
  if (b->born.batch == 0) return SPOOL_OK;
  char size[SPOOL__SIZE_TEXT], site[SPOOL__SITE_TEXT];
  /* An aligned batch begins past its allocation's start: name the pointer the caller holds. */
  uintptr_t first = spool__aligned_first(pool, b->ptr);
  return spool__fail(SPOOL_ERR_BATCH_MEMBER,
                     "spool_free: %p is a sub-buffer (%" PRIuPTR " bytes in) of batch %p (%" PRIu32
                     " sub-buffers, %s, allocation #%" PRIu64 " on stream %p, allocated at %s); "
                     "free the whole batch with its first pointer %p (this free at %s); nothing "
                     "was freed", ptr, (uintptr_t)ptr - first, (void *)first, b->born.batch,
                     spool__format_size(b->size, size), b->seq, (void *)b->stream,
                     spool__site_text(&b->born, site, sizeof site), (void *)first, here);
}

spool_status spool__scope_refusal(const void *ptr, const spool__buffer *b, const char *here) {
  if (b->born.tag != spool__scope_tag) return SPOOL_OK;
  char size[SPOOL__SIZE_TEXT];
  return spool__fail(SPOOL_ERR_INTERIOR_POINTER,
                     "spool_free: %p is memory of a scope (%" PRIuPTR " bytes into its chunk %p "
                     "of %s on stream %p): scope memory is freed by spool_scope_end, never by "
                     "spool_free (this free at %s); nothing was freed", ptr,
                     (uintptr_t)ptr - b->ptr, (void *)b->ptr, spool__format_size(b->size, size),
                     (void *)b->stream, here);
}

/* "; it was freed already at a.c:20 (allocation #4)", or "" */
static const char *freed_note(const spool__refusal *r, char *out, size_t len) {
  char gone[SPOOL__SITE_TEXT];
  out[0] = '\0';
  if (r->freed)
    snprintf(out, len, "; %p was freed already, at %s (allocation #%" PRIu64 ")",
             (void *)r->freed_buf.ptr, spool__site_text(&r->freed_buf.died, gone, sizeof gone),
             r->freed_buf.seq);
  return out;
}

static spool_status interior(const spool_pool *pool, const void *ptr, const spool__refusal *r,
                             const char *here, const char *note) {
  char buf[512];
  spool_status named = spool__batch_refusal(pool, ptr, &r->inside_buf, here);
  if (named == SPOOL_OK) named = spool__scope_refusal(ptr, &r->inside_buf, here);
  if (named != SPOOL_OK) return named;
  return spool__fail(SPOOL_ERR_INTERIOR_POINTER,
                     "%s: %p points %" PRIuPTR " bytes into buffer %s; free the buffer's start "
                     "(this free at %s)%s; nothing was freed", FREE, ptr,
                     (uintptr_t)ptr - r->inside_buf.ptr,
                     spool__buffer_text(&r->inside_buf, buf, sizeof buf), here, note);
}

static spool_status other_pool(const spool_pool *p, const void *ptr, const spool__refusal *r,
                               const char *here, const char *note) {
  char buf[512];
  uintptr_t into = (uintptr_t)ptr - r->owner.buffer.ptr;
  return spool__fail(SPOOL_ERR_WRONG_POOL,
                     "%s: %p belongs to another pool (%p on device %d)%s: buffer %s; free %s "
                     "through that pool (this free at %s, to pool %p on device %d)%s; nothing "
                     "was freed", FREE, ptr, r->owner.pool, r->owner.device,
                     into ? ", pointing inside a buffer" : "",
                     spool__buffer_text(&r->owner.buffer, buf, sizeof buf),
                     into ? "the buffer's start" : "it", here, (const void *)p, p->device, note);
}

spool_status spool__refuse_free(const spool_pool *p, const void *ptr, const spool__site *site,
                                const spool__refusal *r) {
  char buf[512], here[SPOOL__SITE_TEXT], note[SPOOL__SITE_TEXT + 64], gone[SPOOL__SITE_TEXT];
  spool__site_text(site, here, sizeof here);
  freed_note(r, note, sizeof note);
  if (r->inside) return interior(p, ptr, r, here, note);
  if (r->other) return other_pool(p, ptr, r, here, note);
  if (r->freed)
    return spool__fail(SPOOL_ERR_DOUBLE_FREE,
                       "%s: %p was already freed: buffer %s, freed at %s; this second free at %s; "
                       "nothing was freed", FREE, ptr,
                       spool__buffer_text(&r->freed_buf, buf, sizeof buf),
                       spool__site_text(&r->freed_buf.died, gone, sizeof gone), here);
  return spool__fail(SPOOL_ERR_UNKNOWN_POINTER,
                     "%s: %p was never allocated by this pool (%p on device %d), nor by another "
                     "live spool pool, or was freed too long ago for spool to remember (this "
                     "free at %s); nothing was freed", FREE, ptr, (const void *)p, p->device,
                     here);
}
