/* Sizes in text: parsing config values ("1.5GiB") and writing sizes for people ("1.50 GiB").
 *
 * Everything is integer arithmetic: a decimal like 1.5GiB is exact (1610612736), and a value
 * that is not a whole number of bytes is an error instead of a silently rounded number. */
#include "internal.h"
#include "text.h"

#include <stdio.h>
#include <string.h>

/* ---- parsing -------------------------------------------------------------------------------- */

typedef struct spool__unit {
  const char *name; /* lowercase; matched case-insensitively */
  uint64_t bytes;
} spool__unit;

/* K/M/G/T are binary like GNU dd and most GPU tools: users who write 4G for a GPU mean GiB.
 * KB/MB/GB/TB are decimal, as the SI prefixes say. Case does not matter ("kb" is KB, never
 * kilobits): a config value is not the place for that distinction. */
static const spool__unit spool__units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},
    {"kib", 1ull << 10},
    {"kb", 1000ull},
    {"m", 1ull << 20},
    {"mib", 1ull << 20},
    {"mb", 1000ull * 1000},
    {"g", 1ull << 30},
    {"gib", 1ull << 30},
    {"gb", 1000ull * 1000 * 1000},
    {"t", 1ull << 40},
    {"tib", 1ull << 40},
    {"tb", 1000ull * 1000 * 1000 * 1000},
    {"p", 1ull << 50},
    {"pib", 1ull << 50},
    {"pb", 1000ull * 1000 * 1000 * 1000 * 1000},
    {"e", 1ull << 60},
    {"eib", 1ull << 60},
    {"eb", 1000ull * 1000 * 1000 * 1000 * 1000 * 1000},
};

static int spool__is_digit(char c) { return c >= '0' && c <= '9'; }

static const spool__unit *spool__find_unit(const char *s, size_t n) {
  size_t i;
  for (i = 0; i < sizeof spool__units / sizeof spool__units[0]; i++) {
    if (spool__text_same_nocase(s, n, spool__units[i].name)) return &spool__units[i];
  }
  return NULL;
}

/* The fraction digits f[0..k) times unit, exactly: Horner's rule from the last digit, dividing
 * by ten at each step. If the total is whole, every partial sum is whole too (a fractional part
 * would survive every later step), so a non-zero remainder anywhere means "not whole". The
 * partial sums stay below unit, so nothing overflows (10 * 2^40 at most). Returns -1 when not
 * whole. */
static int spool__fraction_bytes(const char *f, size_t k, uint64_t unit, uint64_t *out) {
  uint64_t x = 0;
  while (k > 0) {
    x += (uint64_t)(f[--k] - '0') * unit;
    if (x % 10 != 0) return -1;
    x /= 10;
  }
  *out = x;
  return 0;
}

static const char spool__too_large[] = "too large (most is 16 EiB - 1 bytes, or max)";

/* The integer digits s[0..n) as a number; -1 on overflow. */
static int spool__digits(const char *s, size_t n, uint64_t *out) {
  uint64_t v = 0;
  size_t i;
  for (i = 0; i < n; i++) {
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

int spool__parse_size(const char *text, size_t len, uint64_t *out, char *why, size_t why_len) {
  const char *s = text, *end;
  const char *int_digits, *frac_digits = NULL;
  size_t int_n, frac_n = 0;
  const spool__unit *unit;
  uint64_t whole, frac;

  if (text == NULL) return spool__text_why(why, why_len, "no text");
  end = text + len;
  while (s < end && spool__text_is_space(*s)) s++;
  while (end > s && spool__text_is_space(end[-1])) end--;
  if (s == end) return spool__text_why(why, why_len, "empty");
  if (spool__text_same_nocase(s, (size_t)(end - s), "max")) {
    *out = UINT64_MAX;
    return 0;
  }
  if (*s == '-') return spool__text_why(why, why_len, "negative");
  if (*s == '.') return spool__text_why(why, why_len, "no digit before '.'");
  if (!spool__is_digit(*s)) return spool__text_why(why, why_len, "not a number");

  int_digits = s;
  while (s < end && spool__is_digit(*s)) s++;
  int_n = (size_t)(s - int_digits);
  if (s < end && *s == '.') {
    frac_digits = ++s;
    while (s < end && spool__is_digit(*s)) s++;
    frac_n = (size_t)(s - frac_digits);
    if (frac_n == 0) return spool__text_why(why, why_len, "no digits after '.'");
  }
  while (s < end && spool__text_is_space(*s)) s++; /* "4 GiB" reads like "4GiB" */

  unit = spool__find_unit(s, (size_t)(end - s));
  if (unit == NULL) /* capped: one bad value must not flood the message */
    return spool__text_why(why, why_len, "unknown unit '%.*s'",
                           end - s > 40 ? 40 : (int)(end - s), s);
  if (spool__digits(int_digits, int_n, &whole) != 0 || whole > UINT64_MAX / unit->bytes)
    return spool__text_why(why, why_len, "%s", spool__too_large);
  whole *= unit->bytes;
  if (spool__fraction_bytes(frac_digits, frac_n, unit->bytes, &frac) != 0)
    return spool__text_why(why, why_len, "not a whole number of bytes");
  if (frac > UINT64_MAX - whole) return spool__text_why(why, why_len, "%s", spool__too_large);
  *out = whole + frac;
  return 0;
}

/* ---- formatting ----------------------------------------------------------------------------- */

const char *spool__format_size(uint64_t bytes, char out[SPOOL__SIZE_TEXT]) {
  static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  unsigned u = 0, shift, i;
  uint64_t whole, rem, mask, thousandths = 0, hundredths;

  if (bytes == UINT64_MAX) {
    snprintf(out, SPOOL__SIZE_TEXT, "max");
    return out;
  }
  if (bytes < 1024) {
    snprintf(out, SPOOL__SIZE_TEXT, "%llu B", (unsigned long long)bytes);
    return out;
  }
  while (u < 6 && (bytes >> (10 * (u + 1))) != 0) u++;
  shift = 10 * u;
  mask = (1ull << shift) - 1;
  whole = bytes >> shift;
  rem = bytes & mask;
  /* Three decimals by long division (rem * 10 < 2^64 since rem < 2^60), then round half up on
   * the third: exact, where rem * 100 / 2^shift could overflow for EiB. */
  for (i = 0; i < 3; i++) {
    rem *= 10;
    thousandths = thousandths * 10 + (rem >> shift);
    rem &= mask;
  }
  hundredths = (thousandths + 5) / 10;
  if (hundredths == 100) {
    whole++;
    hundredths = 0;
  }
  if (whole == 1024 && u < 6) { /* 1048575 B is "1.00 MiB", not "1024.00 KiB" */
    whole = 1;
    u++;
  }
  snprintf(out, SPOOL__SIZE_TEXT, "%llu.%02llu %s", (unsigned long long)whole,
           (unsigned long long)hundredths, names[u]);
  return out;
}
