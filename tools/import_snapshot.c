/* A PyTorch memory snapshot is a pickle of plain dicts and lists; spool_snapshot.py (Python's
 * standard library only) turns its device trace into RMM's CSV on its standard output, which
 * import_rmm.c reads. */
#define _POSIX_C_SOURCE 200809L /* read */
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper.h"

bool tf_is_pickle(const unsigned char *d, size_t len) {
  return len >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5;
}

/* All the helper writes. NULL without memory. */
static char *read_all(int fd, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (ssize_t got = 1; buf && got > 0; n += got > 0 ? (size_t)got : 0) {
    if (n == cap) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) free(buf);
      buf = bigger;
      cap *= 2;
      if (!buf) break;
    }
    got = read(fd, buf + n, cap - n);
  }
  *len = n;
  return buf;
}

int tf_load_snapshot(const char *path, tf_trace *t, char err[TF_ERR]) {
  memset(t, 0, sizeof *t);
  const char *args[] = {"to-csv", path};
  tool_helper h;
  char why[TF_ERR];
  if (tool_helper_start("spool_snapshot.py", args, 2, false, true, &h, why) != 0)
    return snprintf(err, TF_ERR, "%.200s: a PyTorch snapshot: %.280s", path, why), -1;
  size_t n = 0;
  char *csv = read_all(h.from, &n);
  int status = tool_helper_wait(&h), rc = -1;
  if (!csv) snprintf(err, TF_ERR, "%s: no memory for the snapshot", path);
  else if (status != 0)
    snprintf(err, TF_ERR, "%s: the snapshot helper failed (its message is above; exit %d)",
             path, status);
  else rc = tf_parse_rmm((const unsigned char *)csv, n, path, t, err);
  free(csv);
  if (rc == 0) t->format = "torch";
  return rc;
}
