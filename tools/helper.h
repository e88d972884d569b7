/* Running the Python helpers of the tools (spool_snapshot.py, spool_plot.py) without a shell:
 * python3 (or SPOOL_PYTHON) with the helper's path and the arguments given. */
#ifndef SPOOL_TOOLS_HELPER_H
#define SPOOL_TOOLS_HELPER_H

#include <stdio.h>
#include <sys/types.h>

#include "trace_read.h"

typedef struct tool_helper {
  pid_t pid;
  int to;   /* the helper's standard input, or -1 */
  int from; /* its standard output, or -1 */
} tool_helper;

/* Starts helper (a file name: looked up in SPOOL_HELPER_DIR, share/spool beside the tool's
 * bin/, the configured share/spool, then the source tree) with up to 4 arguments; feed: a
 * pipe to its standard input; read: one from its standard output. 0, or -1 with err naming
 * what is missing. */
int tool_helper_start(const char *helper, const char *const *args, int nargs, bool feed,
                      bool read, tool_helper *h, char err[TF_ERR]);
/* Closes what is still open and waits: the helper's exit status, or -1 when it did not exit. */
int tool_helper_wait(tool_helper *h);
/* Runs helper with args and writes t to its standard input with emit(t, f): 0 once the helper
 * exited 0, else -1 with err "<out>: <what> failed (exit N)" (out: the file it was to write). */
int tool_helper_feed(const char *helper, const char *const *args, int nargs, const tf_trace *t,
                     void (*emit)(const tf_trace *, FILE *), const char *out, const char *what,
                     char err[TF_ERR]);

#endif
