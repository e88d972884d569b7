/* Small text helpers shared by the config parser (config.c) and the size parser (units.c).
 *
 * ASCII only and locale-free on purpose: <ctype.h> follows the C locale the host program set,
 * and a config value must read the same whatever that is. */
#ifndef SPOOL_TEXT_H
#define SPOOL_TEXT_H

#include <stddef.h>

#include "internal.h" /* SPOOL__PRINTF */

/* Nonzero for the six C whitespace characters (space, \t, \r, \n, \v, \f). */
int spool__text_is_space(char c);

/* c in lowercase when it is an ASCII capital letter, else c unchanged. */
char spool__text_lower(char c);

/* Nonzero when s[0..n) equals the NUL-terminated word, ignoring ASCII case. s need not be
 * NUL-terminated (it is usually a slice of a longer line). */
int spool__text_same_nocase(const char *s, size_t n, const char *word);

/* Formats a failure reason into why (when why is not NULL and why_len > 0) and returns -1, so
 * a parser can `return spool__text_why(...)` in one line. */
int spool__text_why(char *why, size_t why_len, const char *fmt, ...) SPOOL__PRINTF(3, 4);

#endif /* SPOOL_TEXT_H */
