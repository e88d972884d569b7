/* One layout for a replay's figures wherever they are printed. */
#include "replay_report.h"

#include <inttypes.h>

#include "tool_text.h"

void tool_print_result_header(FILE *out) {
  fprintf(out, "%-40s %9s %14s %14s %9s %6s %8s %6s\n", "config", "ns/call", "peak reserved",
          "peak live", "res/live", "util", "hit rate", "OOMs");
}

void tool_print_result_row(FILE *out, const char *config, const rp_result *r) {
  char res[32], live[32];
  fprintf(out, "%-40.40s %9.1f %14s %14s %9.3f %5.1f%% %7.1f%% %6" PRIu64 "\n",
          config[0] ? config : "(defaults)", r->ns_per_op, tool_size_text(r->peak_reserved, res),
          tool_size_text(r->peak_live, live), r->reserved_over_live, 100 * r->utilization,
          100 * r->hit_rate, r->ooms);
}

void tool_print_result_json(FILE *out, const rp_result *r) {
  fprintf(out, ",\"ops\":%" PRIu64 ",\"ns_per_op\":%.1f,\"peak_reserved\":%" PRIu64
          ",\"peak_live\":%" PRIu64 ",\"reserved_over_live\":%.4f,\"utilization\":%.4f"
          ",\"hit_rate\":%.4f,\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"allocs\":%" PRIu64
          ",\"frees\":%" PRIu64 ",\"failed_allocs\":%" PRIu64 ",\"ooms\":%" PRIu64,
          r->ops, r->ns_per_op, r->peak_reserved, r->peak_live, r->reserved_over_live,
          r->utilization, r->hit_rate, r->hits, r->misses, r->allocs, r->frees,
          r->failed_allocs, r->ooms);
}
