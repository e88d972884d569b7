/* Command-line values and output words of the tools, in one place so that they agree. */
#include "tool_text.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool tool_parse_int(const char *text, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < 0 || v > INT_MAX) return false;
  *out = (int)v;
  return true;
}

bool tool_parse_size(const char *text, uint64_t *out) {
  static const char *const units[] = {"b", "k", "m", "g", "t"};
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || v < 0 || !isdigit((unsigned char)text[0])) return false;
  size_t n = strlen(end);
  if (n == 3 && tolower((unsigned char)end[1]) == 'i' && tolower((unsigned char)end[2]) == 'b')
    n = 1; /* KiB and K are the same */
  if (n > 1) return false;
  unsigned u = 0;
  if (n == 1) {
    while (u < 5 && tolower((unsigned char)end[0]) != units[u][0]) u++;
    if (u == 5) return false;
  }
  for (unsigned i = 0; i < u; i++) v *= 1024;
  if (v >= 18446744073709551615.0) return false;
  *out = (uint64_t)v;
  return true;
}

int tool_usage_error(const char *tool, const char *what, const char *usage) {
  fprintf(stderr, "%s: bad argument '%s'\n%s", tool, what, usage);
  return 1;
}

const char *tool_size_text(uint64_t n, char buf[32]) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  unsigned u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(buf, 32, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

void tool_json_string(FILE *out, const char *text) {
  fputc('"', out);
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
    else if (*c < 0x20) fprintf(out, "\\u%04x", *c);
    else fputc(*c, out);
  }
  fputc('"', out);
}

int tool_parse_args(int argc, char **argv, bool configs, const char *tool, const char *usage,
                    tool_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--json")) a->json = true;
    else if (configs && !strcmp(argv[i], "--config") && v && a->nconfigs < TOOL_CONFIGS)
      a->configs[a->nconfigs++] = v, i++;
    else if (!strcmp(argv[i], "--device") && v && tool_parse_int(v, &a->device)) i++;
    else if (!strcmp(argv[i], "--capacity") && v && tool_parse_size(v, &a->capacity)) i++;
    else if (argv[i][0] != '-' && !a->trace) a->trace = argv[i];
    else return tool_usage_error(tool, argv[i], usage);
  }
  return a->trace ? 0 : tool_usage_error(tool, "no TRACE", usage);
}
