/* SPDX-License-Identifier: Apache-2.0 */
#include "pagealloc.h"

#include "fmt.h"

extern char tg_image_end[]; /* testguest.ld: end of .bss */

#define MMIO_HOLE 0xc0000000ull /* tables.S maps [3 GiB, 4 GiB) uncached */

static uint64_t next_free;
static uint64_t limit;
static uint64_t *free_list; /* singly linked through each page's first word */
static uint64_t free_list_pages;

bool pagealloc_init(const struct tg_boot_info *bi)
{
	uint64_t start = ((uint64_t)(uintptr_t)tg_image_end + TG_PAGE_SIZE - 1) & ~(TG_PAGE_SIZE - 1);

	if (limit != 0)
		return true;
	for (uint32_t i = 0; i < bi->e820_count; i++) {
		const struct tg_mem_region *r = &bi->e820[i];
		if (r->type != TG_E820_RAM || start < r->addr || start >= r->addr + r->size)
			continue;
		next_free = start;
		limit = r->addr + r->size;
		if (limit > MMIO_HOLE)
			limit = MMIO_HOLE;
		limit &= ~(TG_PAGE_SIZE - 1);
		return limit > next_free;
	}
	return false;
}

void *page_alloc(uint64_t bytes)
{
	uint64_t size = (bytes + TG_PAGE_SIZE - 1) & ~(TG_PAGE_SIZE - 1);

	if (size == 0 || limit - next_free < size)
		return 0;
	void *p = (void *)(uintptr_t)next_free;
	next_free += size;
	/* RAM handed to the guest is zero only on a fresh boot; rings must
	 * start zeroed (virtio 1.2 section 2.7: idx and flags begin at 0). */
	memset(p, 0, size);
	return p;
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

uint64_t pagealloc_free_bytes(void)
{
	return limit - next_free;
}

void page_free(void *p, uint64_t bytes)
{
	uint8_t *page = p;

	for (uint64_t off = 0; off + TG_PAGE_SIZE <= bytes; off += TG_PAGE_SIZE) {
		uint64_t *link = (uint64_t *)(void *)(page + off);
		*link = (uint64_t)(uintptr_t)free_list;
		free_list = link;
		free_list_pages++;
	}
}

void *page_alloc_page(void)
{
	if (free_list != 0) {
		uint64_t *p = free_list;
		free_list = (uint64_t *)(uintptr_t)*p;
		free_list_pages--;
		return p;
	}
	return page_alloc_uninit(TG_PAGE_SIZE);
}

uint64_t pagealloc_free_list_pages(void)
{
	return free_list_pages;
}
