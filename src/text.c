/* Small text helpers shared by the config parser and the size parser: one definition each, so
 * the two parsers cannot drift apart on what counts as a space or how case is folded. */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>

int spool__text_is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

char spool__text_lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

int spool__text_same_nocase(const char *s, size_t n, const char *word) {
  size_t i;
  for (i = 0; i < n; i++) {
    /* word[i] == '\0' first: never read past the end of a word shorter than s */
    if (word[i] == '\0' || spool__text_lower(s[i]) != spool__text_lower(word[i])) return 0;
  }
  return word[n] == '\0';
}

int spool__text_why(char *why, size_t why_len, const char *fmt, ...) {
  /* Callers that only want the verdict pass why NULL; skip the formatting altogether. */
  if (why != NULL && why_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}
