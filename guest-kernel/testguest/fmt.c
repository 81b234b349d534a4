/* SPDX-License-Identifier: Apache-2.0 */
#include "fmt.h"

void line_reset(struct tg_line *l)
{
	l->len = 0;
}

void line_char(struct tg_line *l, char c)
{
	if (l->len < DSEC_TESTDEV_MAX_MSG)
		l->buf[l->len++] = c;
}

void line_strn(struct tg_line *l, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		line_char(l, s[i]);
}

void line_str(struct tg_line *l, const char *s)
{
	line_strn(l, s, tg_strlen(s));
}

void line_u64(struct tg_line *l, uint64_t v)
{
	char tmp[20];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		line_char(l, tmp[--n]);
}

void line_hex(struct tg_line *l, uint64_t v)
{
	int shift = 60;

	line_str(l, "0x");
	while (shift > 0 && ((v >> shift) & 0xf) == 0)
		shift -= 4;
	for (; shift >= 0; shift -= 4)
		line_char(l, "0123456789abcdef"[(v >> shift) & 0xf]);
}

void line_kv(struct tg_line *l, const char *key, uint64_t v)
{
	line_char(l, ' ');
	line_str(l, key);
	line_char(l, '=');
	line_u64(l, v);
}

size_t tg_strlen(const char *s)
{
	size_t n = 0;

	while (s[n] != '\0')
		n++;
	return n;
}

bool tg_memeq(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return false;
	return true;
}

bool tg_parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	unsigned base = 10;
	size_t i = 0;

	if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		i = 2;
	}
	if (i == n)
		return false;
	for (; i < n; i++) {
		unsigned d;
		char c = s[i];

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return false;
		if (v > (UINT64_MAX - d) / base)
			return false; /* overflow */
		v = v * base + d;
	}
	*out = v;
	return true;
}

/* String instructions run natively at CPL3 and cannot be turned back into
 * calls to memset/memcpy by the optimiser. */
void *memset(void *d, int c, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
	return ret;
}

void *memcpy(void *d, const void *s, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
	return ret;
}
