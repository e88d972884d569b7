/* What the tools share of the command line and of their output's words. */
#ifndef SPOOL_TOOLS_TOOL_TEXT_H
#define SPOOL_TOOLS_TOOL_TEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A whole number >= 0 that fits an int. */
bool tool_parse_int(const char *text, int *out);
/* A size: a whole or decimal number with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB
 * (powers of 1024, any case). */
bool tool_parse_size(const char *text, uint64_t *out);
/* Prints "<tool>: bad argument '<what>'" and the usage to stderr; returns 1. */
int tool_usage_error(const char *tool, const char *what, const char *usage);
/* "1.50 MiB" */
const char *tool_size_text(uint64_t n, char buf[32]);
/* text as a JSON string, quotes included. */
void tool_json_string(FILE *out, const char *text);


/* The replaying tools' command line: TRACE, --json, --device N, --capacity SIZE, and with
 * configs also --config TEXT (at most TOOL_CONFIGS). */
#define TOOL_CONFIGS 32
typedef struct tool_args {
  const char *trace;
  const char *configs[TOOL_CONFIGS];
  int nconfigs, device;
  bool json;
  uint64_t capacity; /* 0: not given */
} tool_args;
/* 0, or 1 after the usage error (printed). */
int tool_parse_args(int argc, char **argv, bool configs, const char *tool, const char *usage,
                    tool_args *a);

#endif
