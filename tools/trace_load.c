/* Any trace file, whatever wrote it: a spool trace, RMM's logging CSV or a PyTorch memory
 * snapshot, told apart by content, read by the reader that knows the format. */
#include "trace_read.h"

#include "import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file in memory: traces are read once, front to back, and checked as a whole. */
static int slurp(const char *path, unsigned char **data, size_t *len, char err[TF_ERR]) {
  FILE *f = fopen(path, "rb");
  if (!f) return tf_fail(err, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *d = malloc(cap);
  while (d) {
    n += fread(d + n, 1, cap - n, f);
    if (n < cap) break;
    unsigned char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(d, cap * 2);
    if (!bigger) free(d);
    d = bigger;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!d) return tf_fail(err, "%s: no memory to read it", path);
  if (bad) {
    free(d);
    return tf_fail(err, "%s: read error", path);
  }
  *data = d;
  *len = n;
  return 0;
}

int tf_load(const char *path, tf_trace *t, char err[TF_ERR]) {
  memset(t, 0, sizeof *t);
  unsigned char *d = NULL;
  size_t n = 0;
  if (slurp(path, &d, &n, err) != 0) return -1;
  int rc;
  if (tf_is_rmm(d, n)) rc = tf_parse_rmm(d, n, path, t, err);
  else if (tf_is_pickle(d, n)) rc = tf_load_snapshot(path, t, err);
  else rc = tf_parse(d, n, path, t, err);
  free(d);
  return rc;
}
