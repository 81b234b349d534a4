/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Freestanding string helpers: a bounded line builder for "key=value"
 * report lines, and the few libc routines the compiler may call.
 */
#ifndef DSEC_TESTGUEST_FMT_H_
#define DSEC_TESTGUEST_FMT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/testdev/testdev_regs.h"

/* One report line. The spare byte lets the UART path append '\n'. Appends
 * past DSEC_TESTDEV_MAX_MSG are dropped (the line is truncated). */
struct tg_line {
	uint32_t len;
	char buf[DSEC_TESTDEV_MAX_MSG + 1];
};

void line_reset(struct tg_line *l);
void line_char(struct tg_line *l, char c);
void line_strn(struct tg_line *l, const char *s, size_t n);
void line_str(struct tg_line *l, const char *s);
void line_u64(struct tg_line *l, uint64_t v);
void line_hex(struct tg_line *l, uint64_t v); /* "0x" + lower-case hex */
/* Appends " key=<decimal>". */
void line_kv(struct tg_line *l, const char *key, uint64_t v);

size_t tg_strlen(const char *s);
bool tg_memeq(const void *a, const void *b, size_t n);
/* Parses a decimal or 0x-prefixed hex number spanning exactly s[0..n). */
bool tg_parse_u64(const char *s, size_t n, uint64_t *out);

void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);

#endif /* DSEC_TESTGUEST_FMT_H_ */
