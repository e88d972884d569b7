/* Traces of other allocators (tools/import_rmm.c): RMM's logging CSV read as a trace, its peak
 * and streams as the file has them, and a bad line refused by its number and field. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "import.h"
#include "test_cpu.h"
#include "trace_stats.h"

#define NAME "hand.csv"

/* Peak live: 1000 + 3000 + 500 = 4500 bytes (lines 4-6), on two streams and two threads. */
static const char CSV[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "140573312345856,1634567890.000100,allocate,0x7f8a40000000,1000,0x0\n"
    "140573312345856,1634567890.000200,allocate,0x7f8a40001000,3000,0x7f8a38001020\r\n"
    "140573312399999,1634567890.000300,allocate,0x7f8a40004000,500,0x7f8a38001020\n"
    "140573312345856,1634567890.000400,deallocate,0x7f8a40000000,1000,0x0\n"
    "140573312399999,1634567890.000500,allocate failure,0x0,99999999,0x0\n"
    "140573312345856,1634567890.000600,deallocate,0x7f8a40001000,3000,0x7f8a38001020\n"
    "\n";

static void parse_ok(const char *text, tf_trace *t) {
  char err[TF_ERR];
  ck_assert(tf_is_rmm((const unsigned char *)text, strlen(text)));
  ck_assert_msg(tf_parse_rmm((const unsigned char *)text, strlen(text), NAME, t, err) == 0,
                "%s", err);
}

static void refused(const char *text, const char *words) {
  tf_trace t;
  char err[TF_ERR] = "";
  ck_assert_int_eq(tf_parse_rmm((const unsigned char *)text, strlen(text), NAME, &t, err), -1);
  ck_assert_msg(strstr(err, words) != NULL, "message \"%s\" lacks \"%s\"", err, words);
}

START_TEST(rmm_log_reads_with_its_peak_streams_and_threads) {
  tf_trace t;
  parse_ok(CSV, &t);
  ck_assert_str_eq(t.format, "rmm");
  ck_assert_uint_eq(t.n, 6);
  ck_assert_uint_eq(t.ev[1].time_ns, 100000); /* from the first line's time */
  ck_assert_uint_eq(t.ev[2].thread, 2);
  ts_stats s;
  char err[TF_ERR];
  ck_assert_int_eq(ts_compute(&t, &s, err), 0);
  ck_assert_uint_eq(s.peak_live_bytes, 4500);
  ck_assert_uint_eq(s.allocs, 3);
  ck_assert_uint_eq(s.frees, 2);
  ck_assert_uint_eq(s.ooms, 1);
  ck_assert_uint_eq(s.nstreams, 2);
  ck_assert_uint_eq(s.leaks, 1);
  ck_assert_uint_eq(s.leak_bytes, 500);
  tf_free(&t);
}
END_TEST

START_TEST(rmm_log_with_clock_times_reads_too) {
  tf_trace t;
  parse_ok("Thread,Time,Action,Pointer,Size,Stream\n"
           "7,10:28:07:529553,allocate,0x1000,64,0x0\n"
           "7,10:28:08.529553,deallocate,0x1000,64,0x0\n", &t);
  ck_assert_uint_eq(t.ev[1].time_ns, 1000000000u);
  tf_free(&t);
}
END_TEST

START_TEST(rmm_log_bad_lines_are_refused_by_line_and_field) {
  refused("Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x10,8,0x0\n"
          "1,0.2,allocate,0x20,eight,0x0\n", "hand.csv: line 3: Size 'eight' is not a number");
  refused("Thread,Time,Action,Pointer,Size,Stream\n1,0.1,resize,0x10,8,0x0\n",
          "line 2: Action 'resize'");
  refused("Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x10,8\n",
          "line 2: 5 fields (expected 6");
  refused("Thread,Time,Action,Pointer,Size,Stream\n1,noon,allocate,0x10,8,0x0\n",
          "line 2: Time 'noon'");
  refused("Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x10,8,0x0,extra\n",
          "line 2: 7 fields");
}
END_TEST

START_TEST(content_tells_the_formats_apart) {
  ck_assert(!tf_is_rmm((const unsigned char *)"SPOOLTRC", 8));
  ck_assert(!tf_is_pickle((const unsigned char *)"Thread,", 7));
  ck_assert(tf_is_pickle((const unsigned char *)"\x80\x04\x95", 3));
  ck_assert(!tf_is_pickle((const unsigned char *)"\x80", 1));
}
END_TEST

static Suite *suite(void) {
  Suite *su = suite_create("trace_import");
  TCase *tc = tcase_create("trace_import");
  tcase_add_test(tc, rmm_log_reads_with_its_peak_streams_and_threads);
  tcase_add_test(tc, rmm_log_with_clock_times_reads_too);
  tcase_add_test(tc, rmm_log_bad_lines_are_refused_by_line_and_field);
  tcase_add_test(tc, content_tells_the_formats_apart);
  suite_add_tcase(su, tc);
  return su;
}

int main(void) { return test_cpu_main(suite()); }
