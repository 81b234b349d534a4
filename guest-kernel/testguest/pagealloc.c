/* SPDX-License-Identifier: Apache-2.0 */
#include "pagealloc.h"

#include "fmt.h"

extern char tg_image_end[]; /* testguest.ld: end of .bss */

#define MMIO_HOLE 0xc0000000ull /* tables.S maps [3 GiB, 4 GiB) uncached */

static uint64_t base;      /* first page of the allocator's range */
static uint64_t next_free; /* bump pointer */
static uint64_t limit;

/* Page index i (address base + i * 4 KiB) is bit i % 64 of word i / 64. */
static uint64_t *free_bits;  /* free, maybe still backed by the host */
static uint64_t *rel_bits;   /* free, released by the host */
static uint64_t npages, nwords;
static uint64_t n_free, n_rel;
static uint64_t n_flight; /* taken out for reporting, not yet released */
static uint64_t hint_free, hint_rel; /* no set bit in words below */
static bool bitmaps_failed;
static uint64_t run_cursor;          /* pagealloc_free_runs resumes here */
static pagealloc_oom_fn oom_handler;
static bool in_oom;

bool pagealloc_init(const struct tg_boot_info *bi)
{
	uint64_t start = ((uint64_t)(uintptr_t)tg_image_end + TG_PAGE_SIZE - 1) & ~(TG_PAGE_SIZE - 1);

	if (limit != 0)
		return true;
	for (uint32_t i = 0; i < bi->e820_count; i++) {
		const struct tg_mem_region *r = &bi->e820[i];
		if (r->type != TG_E820_RAM || start < r->addr || start >= r->addr + r->size)
			continue;
		base = start;
		next_free = start;
		limit = r->addr + r->size;
		if (limit > MMIO_HOLE)
			limit = MMIO_HOLE;
		limit &= ~(TG_PAGE_SIZE - 1);
		return limit > next_free;
	}
	return false;
}

void *page_alloc_uninit(uint64_t bytes)
{
	uint64_t size = (bytes + TG_PAGE_SIZE - 1) & ~(TG_PAGE_SIZE - 1);

	if (size == 0 || limit - next_free < size)
		return 0;
	void *p = (void *)(uintptr_t)next_free;
	next_free += size;
	return p;
}

void *page_alloc(uint64_t bytes)
{
	void *p = page_alloc_uninit(bytes);

	/* RAM handed to the guest is zero only on a fresh boot; rings must
	 * start zeroed (virtio 1.2 section 2.7: idx and flags begin at 0). */
	if (p != 0)
		memset(p, 0, (bytes + TG_PAGE_SIZE - 1) & ~(TG_PAGE_SIZE - 1));
	return p;
}

uint64_t pagealloc_free_bytes(void)
{
	return limit - next_free;
}

uint64_t pagealloc_free_list_pages(void)
{
	return n_free;
}

uint64_t pagealloc_released_pages(void)
{
	return n_rel;
}

uint64_t pagealloc_available_pages(void)
{
	return n_free + n_rel + n_flight + (limit - next_free) / TG_PAGE_SIZE;
}

void pagealloc_set_oom_handler(pagealloc_oom_fn fn)
{
	oom_handler = fn;
}

/* The bitmaps cover [base, limit) and come from the bump allocator the
 * first time single pages are used (or pagealloc_prepare_pages is called),
 * so that workloads that never free (blk, pmem, net) do not pay for them. */
bool pagealloc_prepare_pages(void)
{
	if (free_bits != 0)
		return true;
	if (bitmaps_failed || limit == 0)
		return false;
	npages = (limit - base) / TG_PAGE_SIZE;
	nwords = (npages + 63) / 64;
	uint64_t *bits = page_alloc(2 * nwords * sizeof(uint64_t));
	if (bits == 0) {
		bitmaps_failed = true;
		return false;
	}
	free_bits = bits;
	rel_bits = bits + nwords;
	return true;
}

static bool page_index(const void *p, uint64_t *index)
{
	uint64_t a = (uint64_t)(uintptr_t)p;

	if ((a & (TG_PAGE_SIZE - 1)) != 0 || a < base || a >= base + npages * TG_PAGE_SIZE)
		return false;
	*index = (a - base) / TG_PAGE_SIZE;
	return true;
}

static bool bit_test(const uint64_t *bits, uint64_t i)
{
	return (bits[i / 64] >> (i % 64)) & 1;
}

static void put(uint64_t *bits, uint64_t *count, uint64_t *hint, uint64_t i)
{
	bits[i / 64] |= 1ull << (i % 64);
	(*count)++;
	if (i / 64 < *hint)
		*hint = i / 64;
}

/* Takes the lowest set bit at or above word *hint; the caller checked that
 * one is set. */
static uint64_t take_lowest(uint64_t *bits, uint64_t *count, uint64_t *hint)
{
	uint64_t w = *hint;

	while (w < nwords && bits[w] == 0)
		w++;
	*hint = w;
	uint64_t i = w * 64 + (uint64_t)__builtin_ctzll(bits[w]);
	bits[w] &= bits[w] - 1;
	(*count)--;
	return i;
}

static void free_into(void *p, uint64_t bytes, bool released)
{
	uint8_t *page = p;

	if (!pagealloc_prepare_pages())
		return; /* nowhere to keep them: the pages are lost to reuse */
	for (uint64_t off = 0; off + TG_PAGE_SIZE <= bytes; off += TG_PAGE_SIZE) {
		uint64_t i;
		if (!page_index(page + off, &i) || bit_test(free_bits, i) || bit_test(rel_bits, i))
			continue;
		if (released)
			put(rel_bits, &n_rel, &hint_rel, i);
		else
			put(free_bits, &n_free, &hint_free, i);
	}
}

void page_free(void *p, uint64_t bytes)
{
	free_into(p, bytes, false);
}

void page_free_released(void *p, uint64_t bytes)
{
	free_into(p, bytes, true);
}

void *page_alloc_page_noreclaim(void)
{
	if (pagealloc_prepare_pages()) {
		if (n_free != 0)
			return (void *)(uintptr_t)(base + take_lowest(free_bits, &n_free, &hint_free) *
							   TG_PAGE_SIZE);
		if (n_rel != 0)
			return (void *)(uintptr_t)(base + take_lowest(rel_bits, &n_rel, &hint_rel) *
							   TG_PAGE_SIZE);
	}
	return page_alloc_uninit(TG_PAGE_SIZE);
}

void *page_alloc_page(void)
{
	void *p = page_alloc_page_noreclaim();

	/* Deflate-on-OOM (virtio_balloon.c): the handler frees pages into
	 * the released set, so the retry finds them. */
	while (p == 0 && oom_handler != 0 && !in_oom) {
		in_oom = true;
		uint64_t got = oom_handler(256);
		in_oom = false;
		if (got == 0)
			break;
		p = page_alloc_page_noreclaim();
	}
	return p;
}

bool page_claim(void *p)
{
	uint64_t i;

	if (!pagealloc_prepare_pages() || !page_index(p, &i))
		return false;
	uint64_t bit = 1ull << (i % 64);
	if (free_bits[i / 64] & bit) {
		free_bits[i / 64] &= ~bit;
		n_free--;
		return true;
	}
	if (rel_bits[i / 64] & bit) {
		rel_bits[i / 64] &= ~bit;
		n_rel--;
		return true;
	}
	return false;
}

size_t pagealloc_take_free_runs(struct tg_page_run *runs, size_t max_runs, uint64_t max_pages)
{
	size_t n = 0;
	uint64_t pages = 0, scanned = 0;

	if (free_bits == 0 || n_free == 0 || npages == 0)
		return 0;
	uint64_t i = run_cursor < npages ? run_cursor : 0;
	while (scanned < npages && n < max_runs && pages < max_pages) {
		if (i >= npages)
			i = 0; /* wrap: a run never crosses the end */
		uint64_t word = free_bits[i / 64] >> (i % 64);
		if (word == 0) {
			uint64_t skip = 64 - i % 64;
			i += skip;
			scanned += skip;
			continue;
		}
		uint64_t skip = (uint64_t)__builtin_ctzll(word);
		i += skip;
		scanned += skip;
		uint64_t start = i;
		while (i < npages && pages < max_pages && bit_test(free_bits, i)) {
			/* A whole word of free pages at once. */
			if (i % 64 == 0 && i + 64 <= npages && pages + 64 <= max_pages &&
			    free_bits[i / 64] == ~0ull) {
				i += 64;
				pages += 64;
				scanned += 64;
				continue;
			}
			i++;
			pages++;
			scanned++;
		}
		runs[n].addr = base + start * TG_PAGE_SIZE;
		runs[n].pages = i - start;
		n++;
	}
	run_cursor = i;
	/* Take them out of the free set: nobody may allocate (and write) a
	 * page while the host is releasing it. */
	for (size_t r = 0; r < n; r++) {
		uint64_t first = (runs[r].addr - base) / TG_PAGE_SIZE;
		for (uint64_t k = first; k < first + runs[r].pages; k++)
			free_bits[k / 64] &= ~(1ull << (k % 64));
		n_free -= runs[r].pages;
		n_flight += runs[r].pages;
	}
	return n;
}

uint64_t pagealloc_release_runs(const struct tg_page_run *runs, size_t n)
{
	uint64_t moved = 0;

	for (size_t r = 0; r < n; r++) {
		uint64_t first = (runs[r].addr - base) / TG_PAGE_SIZE;
		for (uint64_t i = first; i < first + runs[r].pages; i++)
			put(rel_bits, &n_rel, &hint_rel, i);
		n_flight -= runs[r].pages;
		moved += runs[r].pages;
	}
	return moved;
}
