/* fuzz_config: libFuzzer target for the config parser (spool_config_parse / _format / _validate).
 *
 * For every input (NUL-terminated copy; an embedded NUL ends the text as it would for a C caller):
 *  - parse on top of the defaults;
 *  - on failure: the config must be byte-identical to before, and spool_last_error() must hold a
 *    new, non-empty message;
 *  - on success: format must fit exactly the size it needs (and fail with SPOOL_ERR_INVALID one
 *    byte short), its text must parse back on top of the defaults to the very same struct
 *    (memcmp: both start from a zeroed struct, so padding compares equal), parsing it on top of
 *    the config itself must change nothing, and validate must not crash.
 * The checks go through the struct as a whole and the formatter's own text, never a list of keys,
 * so keys added to src/config.c are covered as they come. Any violation prints the input and the
 * texts and aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build: cmake -DSPOOL_FUZZ=ON with CC=clang (tests/fuzz/CMakeLists.txt). Run:
 *   fuzz_config -dict=tests/fuzz/config.dict WORK_DIR tests/fuzz/corpus
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spool/spool.h>

#define FORMAT_MAX ((size_t)1 << 16) /* far above any config's text */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void show(const char *what, const char *text) {
  size_t i;
  fprintf(stderr, "%s (%zu bytes): \"", what, strlen(text));
  for (i = 0; text[i] != '\0'; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n')
      fputs("\\n", stderr);
    else if (c == '"' || c == '\\')
      fprintf(stderr, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      fprintf(stderr, "\\x%02x", c);
    else
      fputc(c, stderr);
  }
  fputs("\"\n", stderr);
}

static size_t first_difference(const spool_config *a, const spool_config *b) {
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  size_t i;
  for (i = 0; i < sizeof *a && x[i] == y[i]; i++) {
  }
  return i;
}

static void fail(const char *why, const char *input, const char *t1, const char *t2) {
  fprintf(stderr, "fuzz_config: %s\n", why);
  show("input", input);
  if (t1) show("format", t1);
  if (t2) show("format again", t2);
  fprintf(stderr, "spool_last_error: %s\n", spool_last_error());
  abort();
}

static void defaults(spool_config *cfg) {
  memset(cfg, 0, sizeof *cfg); /* padding and unused bytes compare equal */
  spool_config_init(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char text1[FORMAT_MAX], text2[FORMAT_MAX], mark[512], why[256];
  spool_config before, cfg, back, again;
  char *input = malloc(size + 1);
  if (input == NULL) return 0;
  memcpy(input, data, size);
  input[size] = '\0';

  /* A known message first, so that a failure that forgets to set its own shows. */
  if (spool_config_parse(NULL, "") != SPOOL_ERR_INVALID) fail("parse(NULL) not INVALID", input, 0, 0);
  snprintf(mark, sizeof mark, "%s", spool_last_error());

  defaults(&before);
  cfg = before;
  spool_status st = spool_config_parse(&cfg, input);
  if (st != SPOOL_OK) {
    if (st != SPOOL_ERR_CONFIG) fail("parse failed with a status other than CONFIG", input, 0, 0);
    if (memcmp(&cfg, &before, sizeof cfg) != 0) {
      snprintf(why, sizeof why, "failed parse changed the config (first byte %zu)",
               first_difference(&cfg, &before));
      fail(why, input, 0, 0);
    }
    const char *e = spool_last_error();
    if (e == NULL || e[0] == '\0' || strcmp(e, mark) == 0)
      fail("failed parse left no message of its own", input, 0, 0);
    free(input);
    return 0;
  }

  /* format: the size it needs exactly (ASan sees a write past it), and one byte less fails. */
  if (spool_config_format(&cfg, text1, sizeof text1) != SPOOL_OK)
    fail("format failed with 64 KiB", input, 0, 0);
  size_t need = strlen(text1) + 1;
  char *exact = malloc(need);
  if (exact == NULL) {
    free(input);
    return 0;
  }
  if (spool_config_format(&cfg, exact, need) != SPOOL_OK || strcmp(exact, text1) != 0)
    fail("format into exactly strlen+1 bytes failed or differs", input, text1, exact);
  if (spool_config_format(&cfg, exact, need - 1) != SPOOL_ERR_INVALID)
    fail("format one byte short did not return SPOOL_ERR_INVALID", input, text1, 0);
  free(exact);

  /* The text parses back, on the defaults, to the same struct. */
  defaults(&back);
  if (spool_config_parse(&back, text1) != SPOOL_OK)
    fail("format's text does not parse", input, text1, 0);
  if (memcmp(&back, &cfg, sizeof cfg) != 0) {
    if (spool_config_format(&back, text2, sizeof text2) != SPOOL_OK) text2[0] = '\0';
    snprintf(why, sizeof why, "parse(format(cfg)) != cfg (first differing byte %zu of %zu)",
             first_difference(&back, &cfg), sizeof cfg);
    fail(why, input, text1, text2);
  }
  if (spool_config_format(&back, text2, sizeof text2) != SPOOL_OK || strcmp(text1, text2) != 0)
    fail("format(parse(format(cfg))) != format(cfg)", input, text1, text2);

  /* Layered on the config itself, its own text changes nothing. */
  again = cfg;
  if (spool_config_parse(&again, text1) != SPOOL_OK || memcmp(&again, &cfg, sizeof cfg) != 0)
    fail("parse(cfg, format(cfg)) changed cfg", input, text1, 0);

  (void)spool_config_validate(&cfg); /* any status; must not crash or read out of bounds */
  free(input);
  return 0;
}
