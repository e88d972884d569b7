/* Traces of other allocators, read by content: RMM's logging CSV, and PyTorch's memory
 * snapshots (a pickle, turned into that CSV by spool_snapshot.py, which needs python3 and no
 * PyTorch). */
#ifndef SPOOL_TOOLS_IMPORT_H
#define SPOOL_TOOLS_IMPORT_H

#include <stdbool.h>

#include "trace_read.h"

/* Whether d starts as RMM's CSV does (its header line). */
bool tf_is_rmm(const unsigned char *d, size_t len);
/* RMM's CSV into *t (format "rmm"). 0, or -1 with err naming the file, the line and the
 * field. */
int tf_parse_rmm(const unsigned char *d, size_t len, const char *name, tf_trace *t,
                 char err[TF_ERR]);
/* Whether d starts as a pickle of protocol 2 or later does. */
bool tf_is_pickle(const unsigned char *d, size_t len);
/* A PyTorch memory snapshot at path into *t (format "torch"), through the helper. */
int tf_load_snapshot(const char *path, tf_trace *t, char err[TF_ERR]);

#endif
