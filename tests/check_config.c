/* check_config: the config text form, sizes with units, validation and formatting. Label cpu:
 * no CUDA call is made. Links spool_sim for the internals (spool__parse_size and friends). */
#define _POSIX_C_SOURCE 200809L /* mkstemp, setenv, mkdtemp */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <spool/spool.h>

#include "internal.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define KiB (1ull << 10)

/* ---- helpers ------------------------------------------------------------------------------- */

static int cfg_equal(const spool_config *a, const spool_config *b) {
  return a->device == b->device && a->release_threshold == b->release_threshold &&
         a->reserve == b->reserve && a->max_size == b->max_size &&
         a->reuse_follow_event_dependencies == b->reuse_follow_event_dependencies &&
         a->reuse_allow_opportunistic == b->reuse_allow_opportunistic &&
         a->reuse_allow_internal_dependencies == b->reuse_allow_internal_dependencies &&
         a->peer_access_count == b->peer_access_count && a->pool == b->pool &&
         a->track == b->track && a->oom_retries == b->oom_retries && a->poison == b->poison &&
         a->ipc == b->ipc &&
         strncmp(a->report, b->report, sizeof a->report) == 0 &&
         (a->peer_access_count <= 0 ||
          memcmp(a->peer_access, b->peer_access,
                 (size_t)a->peer_access_count * sizeof a->peer_access[0]) == 0);
}

/* Parses text into a fresh default config and expects success. */
static spool_config parsed(const char *text) {
  spool_config cfg;
  spool_status st;
  spool_config_init(&cfg);
  st = spool_config_parse(&cfg, text);
  ck_assert_msg(st == SPOOL_OK, "parse '%s': %s: %s", text, spool_status_name(st),
                spool_last_error());
  return cfg;
}

/* Expects parse to fail with SPOOL_ERR_CONFIG, every fragment in the message, and cfg unchanged. */
static void parse_fails(const char *text, const char *frag1, const char *frag2, const char *frag3) {
  spool_config cfg, before;
  spool_status st;
  const char *frags[3];
  int i;
  frags[0] = frag1;
  frags[1] = frag2;
  frags[2] = frag3;
  spool_config_init(&cfg);
  cfg.device = 3; /* something other than the defaults, to see it kept */
  cfg.reserve = 7;
  before = cfg;
  st = spool_config_parse(&cfg, text);
  ck_assert_msg(st == SPOOL_ERR_CONFIG, "parse '%s' gave %s (%s)", text, spool_status_name(st),
                spool_last_error());
  for (i = 0; i < 3; i++) {
    if (frags[i] != NULL)
      ck_assert_msg(strstr(spool_last_error(), frags[i]) != NULL,
                    "parse '%s': message '%s' lacks '%s'", text, spool_last_error(), frags[i]);
  }
  ck_assert_msg(cfg_equal(&cfg, &before), "parse '%s' changed cfg on failure", text);
}

static uint64_t size_of(const char *text) {
  uint64_t v = 12345;
  char why[128] = "";
  int rc = spool__parse_size(text, strlen(text), &v, why, sizeof why);
  ck_assert_msg(rc == 0, "parse_size '%s' failed: %s", text, why);
  return v;
}

static void size_fails(const char *text, const char *reason) {
  uint64_t v = 12345;
  char why[128] = "";
  int rc = spool__parse_size(text, strlen(text), &v, why, sizeof why);
  ck_assert_msg(rc == -1, "parse_size '%s' succeeded with %llu", text, (unsigned long long)v);
  ck_assert_msg(v == 12345, "parse_size '%s' wrote *out on failure", text);
  ck_assert_msg(strstr(why, reason) != NULL, "parse_size '%s': reason '%s' lacks '%s'", text, why,
                reason);
}

/* Writes text to a new temporary file; the caller unlinks path. */
static void temp_file(char path[64], const char *text, size_t len) {
  int fd;
  strcpy(path, "/tmp/check_config_XXXXXX");
  fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq((long)write(fd, text, len), (long)len);
  close(fd);
}

/* ---- defaults ------------------------------------------------------------------------------ */

START_TEST(test_defaults) {
  spool_config cfg;
  memset(&cfg, 0x5a, sizeof cfg);
  spool_config_init(&cfg);
  ck_assert_int_eq(cfg.device, 0);
  ck_assert(cfg.release_threshold == UINT64_MAX);
  ck_assert(cfg.reserve == 0);
  ck_assert(cfg.max_size == 0);
  ck_assert(cfg.reuse_follow_event_dependencies);
  ck_assert(cfg.reuse_allow_opportunistic);
  ck_assert(cfg.reuse_allow_internal_dependencies);
  ck_assert_int_eq(cfg.peer_access_count, 0);
  ck_assert_int_eq(cfg.pool, SPOOL_POOL_OWN);
  ck_assert_int_eq(cfg.track, SPOOL_TRACK_COUNTS);
  ck_assert_str_eq(cfg.report, "");
  ck_assert_uint_eq(cfg.oom_retries, 2);
  ck_assert(!cfg.poison);
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(NULL); /* a no-op, not a crash */
}
END_TEST

START_TEST(test_empty_texts) {
  spool_config def, cfg;
  spool_config_init(&def);
  cfg = parsed("");
  ck_assert(cfg_equal(&cfg, &def));
  cfg = parsed("   \n\n , ,, \t\n# only a comment\n  # another\r\n");
  ck_assert(cfg_equal(&cfg, &def));
}
END_TEST

/* ---- every key ----------------------------------------------------------------------------- */

START_TEST(test_key_device) {
  ck_assert_int_eq(parsed("device=0").device, 0);
  ck_assert_int_eq(parsed("device=3").device, 3);
  ck_assert_int_eq(parsed("device = 007").device, 7);
  ck_assert_int_eq(parsed("device=2147483647").device, 2147483647);
}
END_TEST

START_TEST(test_key_sizes) {
  spool_config cfg = parsed("release_threshold=4GiB, reserve=1GiB, max_size=8GiB");
  ck_assert(cfg.release_threshold == 4 * GiB);
  ck_assert(cfg.reserve == GiB);
  ck_assert(cfg.max_size == 8 * GiB);
  cfg = parsed("release_threshold=0\nreserve=max\nmax_size=1.5G");
  ck_assert(cfg.release_threshold == 0);
  ck_assert(cfg.reserve == UINT64_MAX);
  ck_assert(cfg.max_size == 1610612736ull);
}
END_TEST

START_TEST(test_key_bools) {
  static const char *const on[] = {"on", "ON", "On", "true", "TRUE", "True", "1"};
  static const char *const off[] = {"off", "OFF", "Off", "false", "FALSE", "fAlSe", "0"};
  char text[200];
  spool_config cfg;
  size_t i;
  for (i = 0; i < sizeof on / sizeof on[0]; i++) {
    snprintf(text, sizeof text,
             "reuse_follow_event_dependencies=%s, reuse_allow_opportunistic=%s,"
             "reuse_allow_internal_dependencies=%s",
             off[i], off[i], off[i]);
    cfg = parsed(text);
    ck_assert(!cfg.reuse_follow_event_dependencies);
    ck_assert(!cfg.reuse_allow_opportunistic);
    ck_assert(!cfg.reuse_allow_internal_dependencies);
    snprintf(text, sizeof text,
             "reuse_follow_event_dependencies=%s, reuse_allow_opportunistic=%s,"
             "reuse_allow_internal_dependencies=%s",
             on[i], on[i], on[i]);
    ck_assert_int_eq(spool_config_parse(&cfg, text), SPOOL_OK);
    ck_assert(cfg.reuse_follow_event_dependencies);
    ck_assert(cfg.reuse_allow_opportunistic);
    ck_assert(cfg.reuse_allow_internal_dependencies);
  }
  /* each flag on its own */
  cfg = parsed("reuse_allow_opportunistic=off");
  ck_assert(cfg.reuse_follow_event_dependencies);
  ck_assert(!cfg.reuse_allow_opportunistic);
  ck_assert(cfg.reuse_allow_internal_dependencies);
}
END_TEST

START_TEST(test_key_peer_access) {
  spool_config cfg = parsed("peer_access=[1,2]");
  char text[400];
  int i, n;
  ck_assert_int_eq(cfg.peer_access_count, 2);
  ck_assert_int_eq(cfg.peer_access[0], 1);
  ck_assert_int_eq(cfg.peer_access[1], 2);
  cfg = parsed("peer_access = [ 3 , 0 ,5 ] , device=1");
  ck_assert_int_eq(cfg.peer_access_count, 3);
  ck_assert_int_eq(cfg.peer_access[0], 3);
  ck_assert_int_eq(cfg.peer_access[1], 0);
  ck_assert_int_eq(cfg.peer_access[2], 5);
  ck_assert_int_eq(cfg.device, 1);
  cfg = parsed("peer_access=4");
  ck_assert_int_eq(cfg.peer_access_count, 1);
  ck_assert_int_eq(cfg.peer_access[0], 4);
  /* [] empties an earlier list */
  cfg = parsed("peer_access=[1,2,3]\npeer_access=[]");
  ck_assert_int_eq(cfg.peer_access_count, 0);
  cfg = parsed("peer_access=[ ]");
  ck_assert_int_eq(cfg.peer_access_count, 0);
  /* exactly SPOOL_MAX_PEERS */
  n = snprintf(text, sizeof text, "peer_access=[");
  for (i = 0; i < SPOOL_MAX_PEERS; i++)
    n += snprintf(text + n, sizeof text - (size_t)n, i ? ",%d" : "%d", i);
  snprintf(text + n, sizeof text - (size_t)n, "]");
  cfg = parsed(text);
  ck_assert_int_eq(cfg.peer_access_count, SPOOL_MAX_PEERS);
  ck_assert_int_eq(cfg.peer_access[SPOOL_MAX_PEERS - 1], SPOOL_MAX_PEERS - 1);
}
END_TEST

START_TEST(test_key_pool) {
  ck_assert_int_eq(parsed("pool=default").pool, SPOOL_POOL_DEFAULT);
  ck_assert_int_eq(parsed("pool=own").pool, SPOOL_POOL_OWN);
  ck_assert_int_eq(parsed("pool=Default").pool, SPOOL_POOL_DEFAULT);
  ck_assert_int_eq(parsed("pool=default\npool=OWN").pool, SPOOL_POOL_OWN);
}
END_TEST

START_TEST(test_key_track) {
  ck_assert_int_eq(parsed("track=off").track, SPOOL_TRACK_OFF);
  ck_assert_int_eq(parsed("track=counts").track, SPOOL_TRACK_COUNTS);
  ck_assert_int_eq(parsed("track=full").track, SPOOL_TRACK_FULL);
  ck_assert_int_eq(parsed("track = FULL").track, SPOOL_TRACK_FULL);
  ck_assert_int_eq(parsed("track=Off").track, SPOOL_TRACK_OFF);
  ck_assert_int_eq(parsed("track=full\ntrack=counts").track, SPOOL_TRACK_COUNTS);
}
END_TEST

START_TEST(test_key_oom_retries) {
  ck_assert_uint_eq(parsed("oom_retries=0").oom_retries, 0);
  ck_assert_uint_eq(parsed("oom_retries=5").oom_retries, 5);
  ck_assert_uint_eq(parsed("oom_retries = 007").oom_retries, 7);
  ck_assert_uint_eq(parsed("oom_retries=100").oom_retries, 100); /* the most */
}
END_TEST

static void validate_fails(const spool_config *cfg, const char *frag1, const char *frag2);
static void round_trip(const spool_config *cfg);

START_TEST(test_key_heap) {
  spool_config cfg = parsed("cache=off, front_limit=2GiB, heap_max_block=1.5MiB, "
                            "chunk_idle=1000, capture_check=off, cache_owner=off");
  ck_assert(!cfg.cache);
  ck_assert(!cfg.capture_check);
  ck_assert(!cfg.cache_owner);
  ck_assert_uint_eq(cfg.front_limit, (uint64_t)2 << 30);
  ck_assert_uint_eq(cfg.heap_max_block, (uint64_t)3 << 19);
  ck_assert_uint_eq(cfg.chunk_idle, 1000);
  ck_assert_uint_eq(parsed("front_limit=0").front_limit, 0); /* one block per stream */
  ck_assert_uint_eq(parsed("chunk_idle=0").chunk_idle, 0);   /* back at once */
  ck_assert_uint_eq(parsed("heap_max_block=1TiB").heap_max_block, (uint64_t)1 << 40);
  parse_fails("cache=maybe", "line 1", "cache", "on, off");
  parse_fails("front_limit=lots", "front_limit", "size", NULL);
  parse_fails("chunk_idle=1000001", "chunk_idle", "0 to 1000000", NULL);
  parse_fails("chunk_idle=-1", "chunk_idle", NULL, NULL);
  ck_assert_uint_eq(parsed("quarantine=0").quarantine, 0);
  ck_assert_uint_eq(parsed("quarantine=1000").quarantine, 1000);
  parse_fails("quarantine=65537", "quarantine", "0 to 65536", NULL);
  ck_assert_uint_eq(parsed("fence_every=64").fence_every, 64);
  ck_assert_uint_eq(parsed("fence_every=1").fence_every, 1);
  parse_fails("fence_every=0", "fence_every", "never let another stream", NULL);
  parse_fails("fence_every=65537", "fence_every", "1 to 65536", NULL);
  parse_fails("cach=on", "unknown key", "'cache'", NULL);
  /* too large for the heap: refused at its line; a struct filled in code, by validate */
  parse_fails("cache=on\nheap_max_block=2TiB", "line 2", "heap_max_block", "larger than 1 TiB");
  spool_config big = parsed("");
  big.heap_max_block = (uint64_t)2 << 40;
  validate_fails(&big, "heap_max_block", "2.00 TiB");
  round_trip(&cfg);
}
END_TEST

/* A config written for the size-class caches is refused with the keys that replaced theirs. */
START_TEST(test_retired_cache_keys_name_their_successors) {
  parse_fails("cache_limit=1GiB", "key 'cache_limit' is gone", "front_limit", "chunk_idle");
  parse_fails("cache=on\ncache_max_block=64MiB", "line 2", "key 'cache_max_block' is gone",
              "heap_max_block");
}
END_TEST

START_TEST(test_key_poison) {
  ck_assert(parsed("poison=on").poison);
  ck_assert(parsed("poison=TRUE").poison);
  ck_assert(parsed("poison=1").poison);
  ck_assert(!parsed("poison=on, poison=off").poison);
  ck_assert(!parsed("poison=false").poison);
  ck_assert(!parsed("poison=0").poison);
}
END_TEST

START_TEST(test_key_report) {
  spool_config cfg;
  ck_assert_str_eq(parsed("report=/tmp/leaks.txt").report, "/tmp/leaks.txt");
  ck_assert_str_eq(parsed("report =  /tmp/leaks.txt  ").report, "/tmp/leaks.txt"); /* trimmed */
  ck_assert_str_eq(parsed("report=/tmp/my leaks.txt").report, "/tmp/my leaks.txt");
  ck_assert_str_eq(parsed("report=relative/x.log, device=1").report, "relative/x.log");
  ck_assert_str_eq(parsed("report=/data/run[3]/l.txt, device=1").report, "/data/run[3]/l.txt");
  ck_assert_str_eq(parsed("report=/tmp/x # where leaks go").report, "/tmp/x");
  ck_assert_str_eq(parsed("report=C:\\spool\\leaks.txt").report, "C:\\spool\\leaks.txt");
  /* quoted: commas, '#', brackets and edge spaces are part of the path */
  cfg = parsed("report=\"/tmp/a,b.txt\"");
  ck_assert_str_eq(cfg.report, "/tmp/a,b.txt");
  cfg = parsed("device=1, report = \"/tmp/a#1,[2.txt\" , reserve=3 # a comment, \"quoted\"");
  ck_assert_str_eq(cfg.report, "/tmp/a#1,[2.txt");
  ck_assert_int_eq(cfg.device, 1);
  ck_assert(cfg.reserve == 3);
  ck_assert_str_eq(parsed("report=\"  spaced  \"").report, "  spaced  ");
  ck_assert_str_eq(parsed("report=\"/tmp/x\"\r\ndevice=2").report, "/tmp/x"); /* CRLF */
  ck_assert_str_eq(parsed("report=\"/tmp/a=b\"").report, "/tmp/a=b");
  ck_assert_str_eq(parsed("report=\"/tmp/a\"#\" closed before the comment").report, "/tmp/a");
  /* quotes belong to this key's type only; elsewhere they are part of a bad value */
  parse_fails("device=\"1\"", "device: expected an integer >= 0, got '\"1\"'", NULL, NULL);
  parse_fails("pool=\"own,default\"", "pool: expected own or default, got '\"own,default\"'",
              NULL, NULL);
  /* "" is the empty path: back to SPOOL_REPORT, else stderr */
  cfg = parsed("report=/tmp/x\nreport=\"\"");
  ck_assert_str_eq(cfg.report, "");
  /* a shorter path leaves nothing of a longer one behind */
  cfg = parsed("report=/tmp/a/long/path.txt\nreport=/x");
  ck_assert_str_eq(cfg.report, "/x");
  ck_assert_int_eq(cfg.report[3], '\0');
  ck_assert_int_eq(cfg.report[10], '\0');
}
END_TEST

/* The longest path fits, one byte more is refused with the length and the limit. */
START_TEST(test_key_report_length) {
  static char text[SPOOL_REPORT_PATH_MAX + 64];
  char expect[128];
  spool_config cfg;
  size_t n = (size_t)snprintf(text, sizeof text, "report=/");
  memset(text + n, 'p', SPOOL_REPORT_PATH_MAX - 2); /* '/' + 1022 = 1023 bytes */
  text[n + SPOOL_REPORT_PATH_MAX - 2] = '\0';
  cfg = parsed(text);
  ck_assert_uint_eq(strlen(cfg.report), SPOOL_REPORT_PATH_MAX - 1);
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  strcat(text, "p"); /* 1024 bytes */
  snprintf(expect, sizeof expect, "(%d bytes long, most is %d)", SPOOL_REPORT_PATH_MAX,
           SPOOL_REPORT_PATH_MAX - 1);
  parse_fails(text, "config line 1: report: expected a file path or \"\"", "got '/ppp", expect);
  /* quoted the same: the quotes do not count */
  n = (size_t)snprintf(text, sizeof text, "report=\"/");
  memset(text + n, 'q', SPOOL_REPORT_PATH_MAX - 2);
  strcpy(text + n + SPOOL_REPORT_PATH_MAX - 2, "\"");
  ck_assert_uint_eq(strlen(parsed(text).report), SPOOL_REPORT_PATH_MAX - 1);
  strcpy(text + n + SPOOL_REPORT_PATH_MAX - 2, "q\"");
  parse_fails(text, "report:", expect, NULL);
}
END_TEST

START_TEST(test_last_wins_and_layering) {
  spool_config cfg = parsed("reserve=1GiB, reserve=2GiB\nreserve=3GiB");
  ck_assert(cfg.reserve == 3 * GiB);
  /* parse applies on top: keys not named keep their values */
  ck_assert_int_eq(spool_config_parse(&cfg, "device=2"), SPOOL_OK);
  ck_assert(cfg.reserve == 3 * GiB);
  ck_assert_int_eq(cfg.device, 2);
}
END_TEST

START_TEST(test_syntax_mix) {
  spool_config cfg = parsed("# spool settings\n"
                            "  device = 1   # the second GPU\n"
                            "release_threshold=4GiB,reserve = 512 MiB , # trailing comma\n"
                            "\r\n"
                            "\tmax_size=8GiB\r\n"
                            "peer_access=[0, 2], pool=own,,reuse_allow_opportunistic=off\n"
                            "# reserve=1  (commented out)\n"
                            "reuse_allow_internal_dependencies=0#no space before the comment");
  ck_assert_int_eq(cfg.device, 1);
  ck_assert(cfg.release_threshold == 4 * GiB);
  ck_assert(cfg.reserve == 512 * MiB);
  ck_assert(cfg.max_size == 8 * GiB);
  ck_assert_int_eq(cfg.peer_access_count, 2);
  ck_assert_int_eq(cfg.peer_access[1], 2);
  ck_assert(!cfg.reuse_allow_opportunistic);
  ck_assert(!cfg.reuse_allow_internal_dependencies);
  ck_assert(cfg.reuse_follow_event_dependencies);
}
END_TEST

/* ---- sizes --------------------------------------------------------------------------------- */

START_TEST(test_size_units) {
  ck_assert(size_of("0") == 0);
  ck_assert(size_of("12345") == 12345);
  ck_assert(size_of("18446744073709551615") == UINT64_MAX);
  ck_assert(size_of("1B") == 1);
  ck_assert(size_of("1b") == 1);
  ck_assert(size_of("1KiB") == KiB);
  ck_assert(size_of("1MiB") == MiB);
  ck_assert(size_of("1GiB") == GiB);
  ck_assert(size_of("1TiB") == (1ull << 40));
  ck_assert(size_of("1K") == KiB);
  ck_assert(size_of("1M") == MiB);
  ck_assert(size_of("1G") == GiB);
  ck_assert(size_of("1T") == (1ull << 40));
  ck_assert(size_of("1KB") == 1000);
  ck_assert(size_of("1MB") == 1000000);
  ck_assert(size_of("1GB") == 1000000000);
  ck_assert(size_of("1TB") == 1000000000000ull);
  /* case variants */
  ck_assert(size_of("1kib") == KiB);
  ck_assert(size_of("1KIB") == KiB);
  ck_assert(size_of("2gIb") == 2 * GiB);
  ck_assert(size_of("1k") == KiB);
  ck_assert(size_of("1g") == GiB);
  ck_assert(size_of("1kb") == 1000);
  ck_assert(size_of("1Gb") == 1000000000);
  ck_assert(size_of("3tb") == 3000000000000ull);
  /* spaces */
  ck_assert(size_of("4 GiB") == 4 * GiB);
  ck_assert(size_of("  4\tGiB  ") == 4 * GiB);
  ck_assert(size_of("512 B") == 512);
  /* max */
  ck_assert(size_of("max") == UINT64_MAX);
  ck_assert(size_of("MAX") == UINT64_MAX);
  ck_assert(size_of(" Max ") == UINT64_MAX);
}
END_TEST

START_TEST(test_size_decimals) {
  ck_assert(size_of("1.5GiB") == 1610612736ull);
  ck_assert(size_of("1.5G") == 1610612736ull);
  ck_assert(size_of("0.5KiB") == 512);
  ck_assert(size_of("0.25K") == 256);
  ck_assert(size_of("2.5MB") == 2500000);
  ck_assert(size_of("1.000GB") == 1000000000);
  ck_assert(size_of("0.001KB") == 1);
  ck_assert(size_of("1.0B") == 1);
  ck_assert(size_of("7.0") == 7);
  ck_assert(size_of("1.50000000000000000000000000GiB") == 1610612736ull); /* long, still exact */
  ck_assert(size_of("0.0009765625MiB") == 1024);                           /* 2^-10 MiB */
  ck_assert(size_of("16383.999999999068677425384521484375TiB") ==
            (16384ull << 40) - 1024); /* near the top, decimals exact */
  /* the units the messages print go back in: PiB and EiB, with P/E and PB/EB */
  ck_assert(size_of("4PiB") == 4ull << 50);
  ck_assert(size_of("2P") == 2ull << 50);
  ck_assert(size_of("1PB") == 1000ull * 1000 * 1000 * 1000 * 1000);
  ck_assert(size_of("15EiB") == 15ull << 60);
  ck_assert(size_of("1.5E") == 3ull << 59);
  ck_assert(size_of("18EB") == 18000000000000000000ull);
}
END_TEST

START_TEST(test_size_errors) {
  size_fails("", "empty");
  size_fails("   ", "empty");
  size_fails("4Gx", "unknown unit 'Gx'");
  size_fails("4 gigabytes", "unknown unit 'gigabytes'");
  size_fails("16EiB", "too large (most is 16 EiB - 1 bytes, or max)"); /* the messages' unit */
  size_fails("16E", "too large");
  size_fails("1e9", "unknown unit 'e9'");
  size_fails("0x10", "unknown unit 'x10'");
  size_fails("1.5.5G", "unknown unit '.5G'");
  size_fails("18446744073709551616", "too large (most is 16 EiB - 1 bytes, or max)");
  size_fails("99999999999999999999999", "too large");
  size_fails("16777216TiB", "too large");
  size_fails("18446744073709551615.5", "not a whole number of bytes"); /* whole part fits */
  size_fails("1.3B", "not a whole number of bytes");
  size_fails("0.1KiB", "not a whole number of bytes");
  size_fails("1.5", "not a whole number of bytes");
  size_fails("0.0001KB", "not a whole number of bytes");
  size_fails("-1", "negative");
  size_fails("-1GiB", "negative");
  size_fails("GiB", "not a number");
  size_fails("abc", "not a number");
  size_fails("+5", "not a number");
  size_fails(".5G", "no digit before '.'");
  size_fails("1.G", "no digits after '.'");
  size_fails("maximum", "not a number");
}
END_TEST

START_TEST(test_size_length_bound) {
  /* spool__parse_size reads len bytes only: no NUL needed after them */
  uint64_t v = 0;
  char why[64];
  ck_assert_int_eq(spool__parse_size("4GiBxyz", 4, &v, why, sizeof why), 0);
  ck_assert(v == 4 * GiB);
  ck_assert_int_eq(spool__parse_size("12", 1, &v, why, sizeof why), 0);
  ck_assert(v == 1);
  /* a NULL or zero-length why is allowed */
  ck_assert_int_eq(spool__parse_size("x", 1, &v, NULL, 0), -1);
}
END_TEST

START_TEST(test_format_size) {
  char out[SPOOL__SIZE_TEXT];
  ck_assert_str_eq(spool__format_size(0, out), "0 B");
  ck_assert_str_eq(spool__format_size(255, out), "255 B");
  ck_assert_str_eq(spool__format_size(1023, out), "1023 B");
  ck_assert_str_eq(spool__format_size(1024, out), "1.00 KiB");
  ck_assert_str_eq(spool__format_size(1536, out), "1.50 KiB");
  ck_assert_str_eq(spool__format_size(1610612736ull, out), "1.50 GiB");
  ck_assert_str_eq(spool__format_size(3 * GiB, out), "3.00 GiB");
  ck_assert_str_eq(spool__format_size(MiB - 1, out), "1.00 MiB"); /* rounds up a unit */
  ck_assert_str_eq(spool__format_size(MiB + 5 * KiB, out), "1.00 MiB");
  ck_assert_str_eq(spool__format_size(MiB + 6 * KiB, out), "1.01 MiB");
  ck_assert_str_eq(spool__format_size(1ull << 40, out), "1.00 TiB");
  ck_assert_str_eq(spool__format_size(1ull << 50, out), "1.00 PiB");
  ck_assert_str_eq(spool__format_size(1ull << 60, out), "1.00 EiB");
  ck_assert_str_eq(spool__format_size(UINT64_MAX - 1, out), "16.00 EiB");
  ck_assert_str_eq(spool__format_size(UINT64_MAX, out), "max");
  ck_assert_str_eq(spool__format_size(1000000000, out), "953.67 MiB");
}
END_TEST

/* ---- errors -------------------------------------------------------------------------------- */

START_TEST(test_error_unknown_key) {
  parse_fails("device=1\nrelase_threshold=4GiB", "config line 2: unknown key 'relase_threshold'",
              "(did you mean 'release_threshold'?)", NULL);
  parse_fails("release-threshold=1", "did you mean 'release_threshold'?", NULL, NULL);
  parse_fails("Reserve=1", "unknown key 'Reserve' (did you mean 'reserve'?)", NULL, NULL);
  parse_fails("max_szie=1", "did you mean 'max_size'?", NULL, NULL);
  parse_fails("peer_acess=[1]", "did you mean 'peer_access'?", NULL, NULL);
  parse_fails("reuse_allow_oportunistic=on", "did you mean 'reuse_allow_opportunistic'?", NULL,
              NULL);
  parse_fails("pol=own", "did you mean 'pool'?", NULL, NULL);
  parse_fails("trak=full", "did you mean 'track'?", NULL, NULL);
  parse_fails("reprot=/tmp/x", "did you mean 'report'?", NULL, NULL);
  parse_fails("oom_retry=3", "did you mean 'oom_retries'?", NULL, NULL);
  parse_fails("oom-retries=3", "did you mean 'oom_retries'?", NULL, NULL);
  parse_fails("poisson=on", "did you mean 'poison'?", NULL, NULL);
  /* nothing close: the message lists the keys */
  parse_fails("colour=blue", "config line 1: unknown key 'colour' (valid keys: device, ",
              "release_threshold",
              "oom_retries, poison, quarantine, cache, front_limit, front_brief, heap_max_block, "
              "chunk_idle, fence_every, fence_bytes, capture_check, cache_owner, ipc, nvtx, "
              "trace)");
  parse_fails("dev=1", "unknown key 'dev' (valid keys:", NULL, NULL);
  /* keys are case-sensitive, and a long key is cut in the message */
  parse_fails("DEVICE=1", "did you mean 'device'?", NULL, NULL);
  parse_fails("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1",
              "unknown key 'aaaa", "...' (valid keys", NULL);
}
END_TEST

START_TEST(test_error_syntax) {
  parse_fails("reserve", "config line 1: 'reserve' has no '=' (expected key=value)", NULL, NULL);
  parse_fails("device=1\n\n  reserve 4GiB ", "config line 3: 'reserve 4GiB' has no '='", NULL,
              NULL);
  parse_fails("=4GiB", "config line 1: '=4GiB' has no key before '='", NULL, NULL);
  parse_fails("reserve=", "config line 1: reserve: empty value (expected a size such as", NULL,
              NULL);
  parse_fails("device=  # nothing", "device: empty value (expected an integer >= 0)", NULL, NULL);
  /* a list without brackets: the hint says how to write one */
  parse_fails("peer_access=1,2", "config line 1: '2' has no '='", "peer_access=[1,2]", NULL);
}
END_TEST

START_TEST(test_error_values) {
  parse_fails("device=x", "config line 1: device: expected an integer >= 0, got 'x' (not an integer)",
              NULL, NULL);
  parse_fails("device=1.5", "got '1.5' (not an integer)", NULL, NULL);
  parse_fails("device=-1", "device: expected an integer >= 0, got '-1' (negative)", NULL, NULL);
  parse_fails("device=+1", "not an integer", NULL, NULL);
  parse_fails("device=2147483648", "too large (most is 2147483647)", NULL, NULL);
  parse_fails("device=1 2", "got '1 2'", NULL, NULL);
  parse_fails("reuse_allow_opportunistic=yes",
              "config line 1: reuse_allow_opportunistic: expected on, off, true, false, 1 or 0, "
              "got 'yes'",
              NULL, NULL);
  parse_fails("reuse_follow_event_dependencies=2", "got '2'", NULL, NULL);
  parse_fails("pool=mine", "pool: expected own or default, got 'mine'", NULL, NULL);
  parse_fails("device=1\ntrack=some", "config line 2: track: expected off, counts or full, got "
              "'some'", NULL, NULL);
  parse_fails("track=2", "track: expected off, counts or full, got '2'", NULL, NULL);
  parse_fails("track=", "config line 1: track: empty value (expected off, counts or full)", NULL,
              NULL);
  parse_fails("poison=yes",
              "config line 1: poison: expected on, off, true, false, 1 or 0, got 'yes'", NULL,
              NULL);
  parse_fails("poison=", "poison: empty value (expected on, off", NULL, NULL);
}
END_TEST

START_TEST(test_error_oom_retries) {
  parse_fails("device=1\noom_retries=101",
              "config line 2: oom_retries: expected an integer from 0 to 100, got '101' (too "
              "large (most is 100))",
              NULL, NULL);
  parse_fails("oom_retries=99999999999999999999", "(too large (most is 100))", NULL, NULL);
  parse_fails("oom_retries=-1",
              "oom_retries: expected an integer from 0 to 100, got '-1' (negative)", NULL, NULL);
  parse_fails("oom_retries=x", "oom_retries: expected an integer from 0 to 100, got 'x' (not an "
              "integer)", NULL, NULL);
  parse_fails("oom_retries=2.5", "got '2.5' (not an integer)", NULL, NULL);
  parse_fails("oom_retries=+2", "got '+2' (not an integer)", NULL, NULL);
  parse_fails("oom_retries=1 2", "got '1 2' (not an integer)", NULL, NULL);
  parse_fails("oom_retries=", "oom_retries: empty value (expected an integer from 0 to 100)",
              NULL, NULL);
}
END_TEST

START_TEST(test_error_report) {
  static const char expected[] = "report: expected a file path or \"\" (in double quotes if it "
                                 "has ',' or '#')";
  /* a bare empty value is an error for every key: "" says "none" */
  parse_fails("report=", "config line 1: report: empty value (expected a file path or \"\" (in "
              "double quotes if it has ',' or '#'))",
              NULL, NULL);
  parse_fails("report= # none", "report: empty value", NULL, NULL);
  /* unclosed quote: the rest of the line is the value, the next line is not */
  parse_fails("device=1\nreport=\"/tmp/a, device=2\ndevice=3", "config line 2: ", expected,
              "got '\"/tmp/a, device=2' (no closing '\"')");
  parse_fails("report=\"", "got '\"' (no closing '\"')", NULL, NULL);
  parse_fails("report=\"/tmp/a\"x", "config line 1: report:",
              "got '\"/tmp/a\"x' (text after the closing '\"')", NULL);
  parse_fails("report=\"/tmp/a\" \"b\"", "(text after the closing '\"')", NULL, NULL);
  parse_fails("report=\"/tmp/a\"b\"", "(text after the closing '\"')", NULL, NULL);
  /* a quote inside a bare value */
  parse_fails("report=/tmp/a\"b\"", "config line 1: report:",
              "got '/tmp/a\"b\"' ('\"' may only enclose the whole value)", NULL);
  /* a bare unclosed '[' would swallow the entries after it: refused, with the fix */
  parse_fails("report=/tmp/a[1, device=2", "config line 1: report:",
              "got '/tmp/a[1, device=2' (unclosed '[': put a path with one in double quotes)",
              NULL);
  /* a bare comma splits as always: the rest is an entry without '=' */
  parse_fails("report=/tmp/a,b.txt", "config line 1: 'b.txt' has no '='", NULL, NULL);
  /* inside an open quote '#' is text, so the quote is still open at the end of the line */
  parse_fails("report=\"/tmp/a#b\nreport=x", "config line 1: report:",
              "got '\"/tmp/a#b' (no closing '\"')", NULL);
}
END_TEST

START_TEST(test_error_sizes) {
  parse_fails("release_threshold=4Gx",
              "config line 1: release_threshold: expected a size such as 512MiB, 4GiB, 1.5G or "
              "max, got '4Gx' (unknown unit 'Gx')",
              NULL, NULL);
  parse_fails("reserve=99999999999999999999", "reserve: expected a size",
              "(too large (most is 16 EiB - 1 bytes, or max))", NULL);
  parse_fails("max_size=20000000TiB", "max_size:", "too large", NULL);
  parse_fails("reserve=1.3B", "got '1.3B' (not a whole number of bytes)", NULL, NULL);
  parse_fails("reserve=0.1KiB", "(not a whole number of bytes)", NULL, NULL);
  parse_fails("reserve=-4GiB", "got '-4GiB' (negative)", NULL, NULL);
  parse_fails("reserve=lots", "got 'lots' (not a number)", NULL, NULL);
}
END_TEST

START_TEST(test_error_lists) {
  char text[400];
  int i, n;
  parse_fails("peer_access=[1,2", "config line 1: peer_access: expected a list of device "
              "ordinals such as [1,2], [] or 1, got '[1,2' (no closing ']')",
              NULL, NULL);
  /* an unclosed bracket swallows the rest of the line, never the next one */
  parse_fails("peer_access=[1, device=2\ndevice=3", "config line 1:", "(no closing ']')", NULL);
  parse_fails("peer_access=[1,1]", "(device 1 is listed twice)", NULL, NULL);
  parse_fails("peer_access=[0,3,5,3]", "(device 3 is listed twice)", NULL, NULL);
  parse_fails("peer_access=[1,x]", "got '[1,x]' ('x': not an integer)", NULL, NULL);
  parse_fails("peer_access=[1,-2]", "('-2': negative)", NULL, NULL);
  parse_fails("peer_access=[1,,2]", "(empty entry in the list)", NULL, NULL);
  parse_fails("peer_access=[1,2,]", "(empty entry in the list)", NULL, NULL);
  parse_fails("peer_access=[1]x", "(text after ']')", NULL, NULL);
  parse_fails("peer_access=[[1]]", "not an integer", NULL, NULL);
  parse_fails("peer_access=-1", "('-1': negative)", NULL, NULL);
  parse_fails("peer_access=two", "('two': not an integer)", NULL, NULL);
  n = snprintf(text, sizeof text, "peer_access=[");
  for (i = 0; i <= SPOOL_MAX_PEERS; i++)
    n += snprintf(text + n, sizeof text - (size_t)n, i ? ",%d" : "%d", i);
  snprintf(text + n, sizeof text - (size_t)n, "]");
  parse_fails(text, "(more than 64 devices)", NULL, NULL);
}
END_TEST

START_TEST(test_error_line_numbers) {
  parse_fails("device=1\nreserve=1GiB\n# comment\n\ndevice=q", "config line 5: device:", NULL,
              NULL);
  parse_fails("device=1, reserve=2, bogus=3", "config line 1: unknown key 'bogus'", NULL, NULL);
  parse_fails("a=1 # comment, with a comma\n", "config line 1: unknown key 'a'", NULL, NULL);
  parse_fails("\r\n\r\nreserve=x\r\n", "config line 3:", NULL, NULL);
  /* the first error wins, and nothing before it is applied */
  parse_fails("device=5\nreserve=x\ndevice=y", "config line 2:", NULL, NULL);
}
END_TEST

START_TEST(test_unchanged_on_error) {
  spool_config cfg, before;
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_parse(&cfg, "device=2, peer_access=[1], pool=default, "
                                            "report=/tmp/keep, track=off"),
                   SPOOL_OK);
  before = cfg;
  ck_assert_int_eq(spool_config_parse(&cfg, "device=4\npeer_access=[2,3]\nreserve=1GiB\n"
                                            "reuse_allow_opportunistic=off\npool=own\n"
                                            "track=full, report=\"/tmp/other,x\", poison=on\n"
                                            "oom_retries=9\nmax_size=?"),
                   SPOOL_ERR_CONFIG);
  ck_assert_str_eq(cfg.report, "/tmp/keep");
  ck_assert_int_eq(cfg.track, SPOOL_TRACK_OFF);
  ck_assert(cfg_equal(&cfg, &before));
  ck_assert_int_eq(cfg.device, 2);
  ck_assert_int_eq(cfg.peer_access_count, 1);
}
END_TEST

START_TEST(test_null_args) {
  spool_config cfg;
  char buf[16];
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_parse(NULL, "device=1"), SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "cfg is NULL"));
  ck_assert_int_eq(spool_config_parse(&cfg, NULL), SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "text is NULL"));
  ck_assert_int_eq(spool_config_load(NULL, "/nonexistent"), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_load(&cfg, NULL), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_from_env(NULL), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_validate(NULL), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_format(NULL, buf, sizeof buf), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_format(&cfg, NULL, 100), SPOOL_ERR_INVALID);
  ck_assert_str_eq(spool_status_name(spool_config_parse(NULL, "")), "SPOOL_ERR_INVALID");
}
END_TEST

/* ---- files and the environment ------------------------------------------------------------- */

START_TEST(test_load_file) {
  static const char text[] = "# a spool config\ndevice = 1\nrelease_threshold=2GiB, reserve=1GiB\n"
                             "peer_access=[0]\n"
                             "report = \"/var/log/spool, #1.txt\"   # quoted: ',' and '#'\r\n"
                             "track=full, oom_retries=4, poison=on\n";
  char path[64];
  spool_config cfg;
  temp_file(path, text, sizeof text - 1);
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_OK);
  unlink(path);
  ck_assert_int_eq(cfg.device, 1);
  ck_assert(cfg.release_threshold == 2 * GiB);
  ck_assert(cfg.reserve == GiB);
  ck_assert_int_eq(cfg.peer_access_count, 1);
  ck_assert_str_eq(cfg.report, "/var/log/spool, #1.txt");
  ck_assert_int_eq(cfg.track, SPOOL_TRACK_FULL);
  ck_assert_uint_eq(cfg.oom_retries, 4);
  ck_assert(cfg.poison);
}
END_TEST

START_TEST(test_load_errors_name_path_and_line) {
  static const char text[] = "device=1\n\nreserve=4Gx\n";
  char path[64], expect[128];
  spool_config cfg, before;
  temp_file(path, text, sizeof text - 1);
  spool_config_init(&cfg);
  before = cfg;
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_ERR_CONFIG);
  unlink(path);
  snprintf(expect, sizeof expect, "%s:3: reserve: expected a size", path);
  ck_assert_msg(strstr(spool_last_error(), expect) != NULL, "'%s' lacks '%s'", spool_last_error(),
                expect);
  ck_assert(cfg_equal(&cfg, &before));
}
END_TEST

START_TEST(test_load_missing_and_directory) {
  spool_config cfg;
  char dir[64];
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_load(&cfg, "/nonexistent/spool.conf"), SPOOL_ERR_IO);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "'/nonexistent/spool.conf'"));
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "No such file or directory"));
  strcpy(dir, "/tmp/check_config_dir_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(spool_config_load(&cfg, dir), SPOOL_ERR_IO); /* fopen takes it, fread not */
  ck_assert_ptr_nonnull(strstr(spool_last_error(), dir));
  rmdir(dir);
}
END_TEST

START_TEST(test_load_large_file) {
  /* Far more than one read buffer: the line count must survive the buffer growing. */
  size_t lines = 20000, i, len = 0;
  char *text = malloc(lines * 32), path[64], expect[128];
  spool_config cfg;
  ck_assert_ptr_nonnull(text);
  for (i = 0; i < lines - 1; i++)
    len += (size_t)sprintf(text + len, "reserve=%zu  # line %zu\n", i, i + 1);
  len += (size_t)sprintf(text + len, "reserve=bad");
  temp_file(path, text, len);
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_ERR_CONFIG);
  snprintf(expect, sizeof expect, "%s:%zu: reserve:", path, lines);
  ck_assert_msg(strstr(spool_last_error(), expect) != NULL, "'%s' lacks '%s'", spool_last_error(),
                expect);
  /* without the last line it loads, and the last value wins */
  temp_file(path, text, len - strlen("reserve=bad"));
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_OK);
  unlink(path);
  ck_assert(cfg.reserve == lines - 2);
  free(text);
}
END_TEST

START_TEST(test_load_odd_bytes) {
  static const char bom[] = "\xEF\xBB\xBF" "device=2\n";
  static const char nul[] = "device=2\nreserve=1\0GiB\n";
  char path[64];
  spool_config cfg;
  spool_config_init(&cfg);
  temp_file(path, bom, sizeof bom - 1);
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_OK);
  unlink(path);
  ck_assert_int_eq(cfg.device, 2);
  temp_file(path, nul, sizeof nul - 1);
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_ERR_CONFIG);
  unlink(path);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), ":2: contains a NUL byte"));
  temp_file(path, "", 0); /* an empty file is an empty config */
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_OK);
  unlink(path);
}
END_TEST

/* A device or a huge file is refused at once, not read until memory runs out. */
START_TEST(test_load_device_and_huge_files_refused_at_once) {
  spool_config cfg;
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_load(&cfg, "/dev/zero"), SPOOL_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "/dev/zero:1: contains a NUL byte"));
  size_t len = ((size_t)1 << 20) + 4096, i;
  char *text = malloc(len), path[64];
  ck_assert_ptr_nonnull(text);
  for (i = 0; i < len; i++) text[i] = i % 64 == 63 ? '\n' : '#';
  temp_file(path, text, len);
  ck_assert_int_eq(spool_config_load(&cfg, path), SPOOL_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "larger than 1 MiB: not a config file"));
  unlink(path);
  free(text);
}
END_TEST

/* Control bytes in a bad entry are shown as \xNN, never written raw to the terminal; a UTF-8
 * mark in front of SPOOL_CONF is skipped as it is in a file. */
START_TEST(test_messages_show_control_bytes) {
  parse_fails("dev\x1b[2Jice=1", "unknown key 'dev\\x1B[2Jice'", NULL, NULL);
  parse_fails("device=\t\x01", "device", "\\x01", NULL);
  spool_config cfg;
  spool_config_init(&cfg);
  setenv("SPOOL_CONF", "\xEF\xBB\xBF" "device=3", 1);
  ck_assert_int_eq(spool_config_from_env(&cfg), SPOOL_OK);
  unsetenv("SPOOL_CONF");
  ck_assert_int_eq(cfg.device, 3);
}
END_TEST

START_TEST(test_from_env) {
  spool_config cfg, before;
  spool_config_init(&cfg);
  before = cfg;
  unsetenv("SPOOL_CONF");
  ck_assert_int_eq(spool_config_from_env(&cfg), SPOOL_OK);
  ck_assert(cfg_equal(&cfg, &before));
  setenv("SPOOL_CONF", "", 1);
  ck_assert_int_eq(spool_config_from_env(&cfg), SPOOL_OK);
  ck_assert(cfg_equal(&cfg, &before));
  setenv("SPOOL_CONF", "release_threshold=4GiB, reserve=1GiB\npool=default", 1);
  ck_assert_int_eq(spool_config_from_env(&cfg), SPOOL_OK);
  ck_assert(cfg.release_threshold == 4 * GiB);
  ck_assert(cfg.reserve == GiB);
  ck_assert_int_eq(cfg.pool, SPOOL_POOL_DEFAULT);
  before = cfg;
  setenv("SPOOL_CONF", "device=1\nreserv=2GiB", 1);
  ck_assert_int_eq(spool_config_from_env(&cfg), SPOOL_ERR_CONFIG);
  ck_assert_ptr_nonnull(strstr(spool_last_error(),
                               "SPOOL_CONF line 2: unknown key 'reserv' (did you mean 'reserve'?)"));
  ck_assert(cfg_equal(&cfg, &before));
  unsetenv("SPOOL_CONF");
}
END_TEST

/* ---- validation ---------------------------------------------------------------------------- */

static void validate_fails(const spool_config *cfg, const char *frag1, const char *frag2) {
  spool_status st = spool_config_validate(cfg);
  ck_assert_msg(st == SPOOL_ERR_CONFIG, "validate gave %s", spool_status_name(st));
  ck_assert_msg(strstr(spool_last_error(), frag1) != NULL, "'%s' lacks '%s'", spool_last_error(),
                frag1);
  if (frag2 != NULL)
    ck_assert_msg(strstr(spool_last_error(), frag2) != NULL, "'%s' lacks '%s'",
                  spool_last_error(), frag2);
}

START_TEST(test_validate) {
  spool_config cfg;
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);

  cfg.device = -1;
  validate_fails(&cfg, "device is -1", NULL);
  spool_config_init(&cfg);

  cfg.release_threshold = GiB;
  cfg.reserve = 2 * GiB;
  validate_fails(&cfg, "reserve 2.00 GiB (2147483648 bytes) is more than release_threshold "
                       "1.00 GiB (1073741824 bytes)",
                 "the first synchronize would give it back");
  cfg.reserve = GiB; /* equal is fine */
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  cfg.release_threshold = 0;
  cfg.reserve = 0;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  cfg.max_size = GiB;
  cfg.reserve = GiB + 1;
  validate_fails(&cfg, "reserve 1.00 GiB (1073741825 bytes) is more than max_size 1.00 GiB "
                       "(1073741824 bytes)",
                 NULL);
  cfg.max_size = 0; /* no limit */
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  cfg.max_size = 4096; /* small, but no invented floor */
  cfg.reserve = 0;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  cfg.peer_access_count = -1;
  validate_fails(&cfg, "peer_access_count is -1", NULL);
  cfg.peer_access_count = SPOOL_MAX_PEERS + 1;
  validate_fails(&cfg, "peer_access_count is 65 (expected 0 to 64)", NULL);
  cfg.peer_access_count = 2;
  cfg.peer_access[0] = 1;
  cfg.peer_access[1] = -3;
  validate_fails(&cfg, "peer_access[1] is -3", NULL);
  cfg.peer_access_count = 3;
  cfg.peer_access[1] = 2;
  cfg.peer_access[2] = 1;
  validate_fails(&cfg, "peer_access lists device 1 twice", NULL);
  cfg.peer_access[2] = 0; /* the own device listed is fine: create skips it */
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  cfg.pool = (spool_pool_source)7;
  validate_fails(&cfg, "pool is 7", NULL);
  cfg.pool = SPOOL_POOL_DEFAULT;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  cfg.track = (spool_track)3;
  validate_fails(&cfg, "config: track is 3 (expected SPOOL_TRACK_OFF, SPOOL_TRACK_COUNTS or "
                       "SPOOL_TRACK_FULL)",
                 NULL);
  cfg.track = (spool_track)-1;
  validate_fails(&cfg, "track is -1", NULL);
  cfg.track = SPOOL_TRACK_OFF;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  cfg.track = SPOOL_TRACK_FULL;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  cfg.oom_retries = 101; /* the parser's bound holds for a struct filled in code too */
  validate_fails(&cfg, "config: oom_retries is 101 (expected 0 to 100)", NULL);
  cfg.oom_retries = 4000000000u;
  validate_fails(&cfg, "oom_retries is 4000000000", NULL);
  cfg.oom_retries = 100;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  cfg.oom_retries = 0;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  spool_config_init(&cfg);

  /* report: terminated within its array, and nothing config text cannot give back */
  memset(cfg.report, 'r', sizeof cfg.report);
  validate_fails(&cfg, "config: report has no terminating NUL within its 1024 bytes", NULL);
  cfg.report[SPOOL_REPORT_PATH_MAX - 1] = '\0';
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  strcpy(cfg.report, "/tmp/a\"b");
  validate_fails(&cfg, "config: report holds '\"' at byte 6", "cannot hold");
  strcpy(cfg.report, "/tmp/a\nb");
  validate_fails(&cfg, "config: report holds a line break at byte 6", NULL);
  strcpy(cfg.report, " /tmp/a,b#c[ ");
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  /* trace: the same rules, named as trace */
  memset(cfg.trace, 't', sizeof cfg.trace);
  validate_fails(&cfg, "config: trace has no terminating NUL within its 1024 bytes", NULL);
  strcpy(cfg.trace, "/tmp/t\nx");
  validate_fails(&cfg, "config: trace holds a line break at byte 6", NULL);
  ck_assert_int_eq(spool_config_parse(&cfg, "trace=\"/tmp/run %p, %n.sptr\""), SPOOL_OK);
  ck_assert_str_eq(cfg.trace, "/tmp/run %p, %n.sptr");
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
  round_trip(&cfg);
  cfg.poison = true;
  ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
}
END_TEST

/* ---- formatting ---------------------------------------------------------------------------- */

static void round_trip(const spool_config *cfg) {
  char buf[4096];
  spool_config back;
  ck_assert_int_eq(spool_config_format(cfg, buf, sizeof buf), SPOOL_OK);
  spool_config_init(&back);
  back.device = 99; /* every key must be written, so nothing of this survives */
  back.reserve = 99;
  back.peer_access_count = 1;
  back.peer_access[0] = 99;
  back.pool = SPOOL_POOL_DEFAULT;
  back.reuse_allow_opportunistic = !cfg->reuse_allow_opportunistic;
  back.track = cfg->track == SPOOL_TRACK_FULL ? SPOOL_TRACK_OFF : SPOOL_TRACK_FULL;
  strcpy(back.report, "/left/over/from/before");
  back.oom_retries = cfg->oom_retries + 1;
  back.poison = !cfg->poison;
  back.ipc = cfg->ipc == SPOOL_IPC_NONE ? SPOOL_IPC_POSIX_FD : SPOOL_IPC_NONE;
  ck_assert_msg(spool_config_parse(&back, buf) == SPOOL_OK, "%s", spool_last_error());
  ck_assert_msg(cfg_equal(&back, cfg), "round trip changed:\n%s", buf);
}

START_TEST(test_format_defaults) {
  static const char expect[] = "device=0\n"
                               "release_threshold=max\n"
                               "reserve=0\n"
                               "max_size=0\n"
                               "reuse_follow_event_dependencies=on\n"
                               "reuse_allow_opportunistic=on\n"
                               "reuse_allow_internal_dependencies=on\n"
                               "peer_access=[]\n"
                               "pool=own\n"
                               "track=counts\n"
                               "report=\"\"\n"
                               "oom_retries=2\n"
                               "poison=off\n"
                               "quarantine=64\n"
                               "cache=on\n"
                               "front_limit=1048576\n"
                               "front_brief=on\n"
                               "heap_max_block=1099511627776\n"
                               "chunk_idle=256\n"
                               "fence_every=16\n"
                               "fence_bytes=0\n"
                               "capture_check=on\n"
                               "cache_owner=on\n"
                               "ipc=none\n"
                               "nvtx=on\n"
                               "trace=\"\"\n";
  char buf[1024];
  spool_config cfg;
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  ck_assert_str_eq(buf, expect);
  round_trip(&cfg);
  /* exactly enough room */
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof expect), SPOOL_OK);
  ck_assert_str_eq(buf, expect);
}
END_TEST

START_TEST(test_format_round_trip) {
  spool_config cfg;
  int i;
  spool_config_init(&cfg);
  cfg.device = 3;
  cfg.release_threshold = 1610612737ull; /* not a round number: must come back exactly */
  cfg.reserve = 12345;
  cfg.max_size = UINT64_MAX - 1;
  cfg.reuse_follow_event_dependencies = false;
  cfg.reuse_allow_internal_dependencies = false;
  cfg.peer_access_count = 2;
  cfg.peer_access[0] = 1;
  cfg.peer_access[1] = 2;
  cfg.pool = SPOOL_POOL_DEFAULT;
  round_trip(&cfg);
  cfg.reuse_allow_opportunistic = false;
  cfg.peer_access_count = SPOOL_MAX_PEERS;
  for (i = 0; i < SPOOL_MAX_PEERS; i++) cfg.peer_access[i] = SPOOL_MAX_PEERS * 1000 - i;
  cfg.release_threshold = 0;
  cfg.max_size = 1;
  round_trip(&cfg);
  /* and from text: parse, format, parse gives the same */
  cfg = parsed("device=1, release_threshold=1.5GiB, reserve=3MB, peer_access=7, pool=default");
  round_trip(&cfg);
  cfg = parsed("track=full, report=\"/tmp/a,b.txt\", oom_retries=100, poison=on");
  round_trip(&cfg);
}
END_TEST

/* The new keys' text, and a report path of every awkward kind through format and parse. */
START_TEST(test_format_safety_keys) {
  static const char *const paths[] = {
      "/tmp/leaks.txt",  "relative/leaks",  "/tmp/a,b.txt", "/tmp/#1.txt", " /lead/space",
      "/trail/space ",   "\t/tab",          "/run[3]/x",    "/open[x",      "/close]x",
      "/has space/x",    "C:\\spool\\x.log", "/a=b",         "/'single'",    "/\r/cr",
      "", /* none */
  };
  static const char *const bare[] = {"/tmp/leaks.txt", "relative/leaks", "/has space/x",
                                     "/a=b", "/'single'", "C:\\spool\\x.log", "/\r/cr"};
  char buf[4096], line[SPOOL_REPORT_PATH_MAX + 32];
  spool_config cfg;
  size_t i;
  spool_config_init(&cfg);
  cfg.track = SPOOL_TRACK_OFF;
  cfg.oom_retries = 0;
  cfg.poison = true;
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  ck_assert_ptr_nonnull(strstr(buf, "\ntrack=off\nreport=\"\"\noom_retries=0\npoison=on\n"));
  cfg.track = SPOOL_TRACK_FULL;
  cfg.oom_retries = 100;
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  ck_assert_ptr_nonnull(strstr(buf, "\ntrack=full\n"));
  ck_assert_ptr_nonnull(strstr(buf, "\noom_retries=100\n"));
  round_trip(&cfg);
  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    size_t j;
    int is_bare = 0;
    strcpy(cfg.report, paths[i]);
    ck_assert_int_eq(spool_config_validate(&cfg), SPOOL_OK);
    round_trip(&cfg);
    ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
    for (j = 0; j < sizeof bare / sizeof bare[0]; j++) is_bare |= strcmp(paths[i], bare[j]) == 0;
    /* plain paths stay bare; anything with ',', '#', brackets or edge spaces is quoted */
    snprintf(line, sizeof line, is_bare ? "\nreport=%s\n" : "\nreport=\"%s\"\n", paths[i]);
    ck_assert_msg(strstr(buf, line) != NULL, "'%s' formatted as:\n%s", paths[i], buf);
  }
  /* the longest path, bare and quoted */
  memset(cfg.report, 'x', SPOOL_REPORT_PATH_MAX - 1);
  cfg.report[0] = '/';
  cfg.report[SPOOL_REPORT_PATH_MAX - 1] = '\0';
  round_trip(&cfg);
  cfg.report[5] = ',';
  round_trip(&cfg);
  cfg.report[SPOOL_REPORT_PATH_MAX - 2] = ' ';
  round_trip(&cfg);
}
END_TEST

START_TEST(test_format_too_small) {
  char buf[32];
  spool_config cfg;
  spool_config_init(&cfg);
  memset(buf, 'x', sizeof buf);
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "buf has 32 bytes, the text needs 415"));
  ck_assert_int_eq(buf[0], 'x'); /* untouched on failure */
  ck_assert_int_eq(spool_config_format(&cfg, buf, 0), SPOOL_ERR_INVALID);
}
END_TEST

/* spool_config_format_sized(cfg, NULL, 0, &n) is the size query: SPOOL_OK with n the text's
 * length and NUL; n bytes take the text, n - 1 are refused with n set and buf untouched. */
START_TEST(test_format_sized_query_returns_the_size) {
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.peer_access_count = 2, cfg.peer_access[0] = 1, cfg.peer_access[1] = 3;
  size_t needed = 0;
  ck_assert_int_eq(spool_config_format_sized(&cfg, NULL, 0, &needed), SPOOL_OK);
  char full[1024];
  ck_assert_int_eq(spool_config_format(&cfg, full, sizeof full), SPOOL_OK);
  ck_assert_uint_eq(needed, strlen(full) + 1);
  char *buf = malloc(needed);
  ck_assert_ptr_nonnull(buf);
  size_t again = 0;
  ck_assert_int_eq(spool_config_format_sized(&cfg, buf, needed, &again), SPOOL_OK);
  ck_assert_uint_eq(again, needed);
  ck_assert_str_eq(buf, full);
  memset(buf, 'x', needed);
  again = 0;
  ck_assert_int_eq(spool_config_format_sized(&cfg, buf, needed - 1, &again), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(again, needed);
  ck_assert_int_eq(buf[0], 'x');
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "spool_config_format_sized: buf has"));
  free(buf);
}
END_TEST

START_TEST(test_format_sized_bad_arguments) {
  spool_config cfg;
  spool_config_init(&cfg);
  size_t needed = 99;
  char buf[16];
  ck_assert_int_eq(spool_config_format_sized(NULL, buf, sizeof buf, &needed), SPOOL_ERR_INVALID);
  ck_assert_uint_eq(needed, 0);
  ck_assert_int_eq(spool_config_format_sized(&cfg, NULL, 0, NULL), SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "needed is NULL"));
  ck_assert_int_eq(spool_config_format_sized(&cfg, NULL, 100, &needed), SPOOL_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(spool_last_error(), "buf is NULL, len 100"));
  /* The old entry point keeps its answers: no size query there. */
  ck_assert_int_eq(spool_config_format(&cfg, NULL, 0), SPOOL_ERR_INVALID);
}
END_TEST

START_TEST(test_format_one_short) {
  char buf[512];
  spool_config cfg;
  size_t need;
  spool_config_init(&cfg);
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  need = strlen(buf) + 1;
  ck_assert_int_eq(spool_config_format(&cfg, buf, need - 1), SPOOL_ERR_INVALID);
  ck_assert_int_eq(spool_config_format(&cfg, buf, need), SPOOL_OK);
}
END_TEST

START_TEST(test_format_invalid_cfg_is_safe) {
  /* format must not read out of bounds for a cfg that validate would reject */
  char buf[2048];
  spool_config cfg;
  spool_config_init(&cfg);
  cfg.peer_access_count = 1000;
  cfg.pool = (spool_pool_source)9;
  cfg.track = (spool_track)-2;
  memset(cfg.report, 'r', sizeof cfg.report); /* no NUL: read no further than the array */
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  ck_assert_ptr_nonnull(strstr(buf, "pool=9\n"));
  ck_assert_ptr_nonnull(strstr(buf, "track=-2\n"));
  ck_assert_uint_eq(strcspn(strstr(buf, "report=") + 7, "\n"), SPOOL_REPORT_PATH_MAX);
  cfg.peer_access_count = -5;
  ck_assert_int_eq(spool_config_format(&cfg, buf, sizeof buf), SPOOL_OK);
  ck_assert_ptr_nonnull(strstr(buf, "peer_access=[]\n"));
}
END_TEST

/* ---- the suite ----------------------------------------------------------------------------- */

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc;

  tc = tcase_create("defaults");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_empty_texts);
  suite_add_tcase(s, tc);

  tc = tcase_create("keys");
  tcase_add_test(tc, test_key_device);
  tcase_add_test(tc, test_key_sizes);
  tcase_add_test(tc, test_key_bools);
  tcase_add_test(tc, test_key_peer_access);
  tcase_add_test(tc, test_key_pool);
  tcase_add_test(tc, test_key_track);
  tcase_add_test(tc, test_key_oom_retries);
  tcase_add_test(tc, test_key_poison);
  tcase_add_test(tc, test_key_heap);
  tcase_add_test(tc, test_retired_cache_keys_name_their_successors);
  tcase_add_test(tc, test_key_report);
  tcase_add_test(tc, test_key_report_length);
  tcase_add_test(tc, test_last_wins_and_layering);
  tcase_add_test(tc, test_syntax_mix);
  suite_add_tcase(s, tc);

  tc = tcase_create("sizes");
  tcase_add_test(tc, test_size_units);
  tcase_add_test(tc, test_size_decimals);
  tcase_add_test(tc, test_size_errors);
  tcase_add_test(tc, test_size_length_bound);
  tcase_add_test(tc, test_format_size);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_test(tc, test_error_unknown_key);
  tcase_add_test(tc, test_error_syntax);
  tcase_add_test(tc, test_error_values);
  tcase_add_test(tc, test_error_oom_retries);
  tcase_add_test(tc, test_error_report);
  tcase_add_test(tc, test_error_sizes);
  tcase_add_test(tc, test_error_lists);
  tcase_add_test(tc, test_error_line_numbers);
  tcase_add_test(tc, test_unchanged_on_error);
  tcase_add_test(tc, test_null_args);
  suite_add_tcase(s, tc);

  tc = tcase_create("sources");
  tcase_add_test(tc, test_load_file);
  tcase_add_test(tc, test_load_errors_name_path_and_line);
  tcase_add_test(tc, test_load_missing_and_directory);
  tcase_add_test(tc, test_load_large_file);
  tcase_add_test(tc, test_load_odd_bytes);
  tcase_add_test(tc, test_load_device_and_huge_files_refused_at_once);
  tcase_add_test(tc, test_messages_show_control_bytes);
  tcase_add_test(tc, test_from_env);
  suite_add_tcase(s, tc);

  tc = tcase_create("validate");
  tcase_add_test(tc, test_validate);
  suite_add_tcase(s, tc);

  tc = tcase_create("format");
  tcase_add_test(tc, test_format_defaults);
  tcase_add_test(tc, test_format_round_trip);
  tcase_add_test(tc, test_format_safety_keys);
  tcase_add_test(tc, test_format_too_small);
  tcase_add_test(tc, test_format_one_short);
  tcase_add_test(tc, test_format_sized_query_returns_the_size);
  tcase_add_test(tc, test_format_sized_bad_arguments);
  tcase_add_test(tc, test_format_invalid_cfg_is_safe);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(config_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
