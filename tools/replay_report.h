/* The figures of a replay, as the table row or JSON members that spool-replay and
 * spool-advise print. */
#ifndef SPOOL_TOOLS_REPLAY_REPORT_H
#define SPOOL_TOOLS_REPLAY_REPORT_H

#include <stdio.h>

#include "replay.h"

void tool_print_result_header(FILE *out);
void tool_print_result_row(FILE *out, const char *config, const rp_result *r);
/* ,"ops":...,"ooms":... (the members after the caller's first one) */
void tool_print_result_json(FILE *out, const rp_result *r);

#endif
