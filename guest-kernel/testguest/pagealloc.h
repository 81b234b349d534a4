/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Guest memory for the virtio drivers: virtqueues and I/O buffers. A bump
 * allocator over the RAM that follows the image, plus a free list of single
 * 4 KiB pages for the balloon (page_free / page_alloc_page): freed pages are
 * reused first, linked through their first word.
 */
#ifndef DSEC_TESTGUEST_PAGEALLOC_H_
#define DSEC_TESTGUEST_PAGEALLOC_H_

#include <stdbool.h>
#include <stdint.h>

#include "bootinfo.h"

#define TG_PAGE_SIZE 4096ull

/* Finds the e820 RAM entry that holds the end of the image and allocates
 * from there up to the end of that entry (at most 3 GiB: above lies MMIO).
 * Idempotent. Returns false if the map has no such entry. */
bool pagealloc_init(const struct tg_boot_info *bi);
/* Zeroed, page-aligned memory of at least bytes bytes, or NULL when RAM is
 * exhausted. The identity map makes the pointer the guest-physical address
 * that devices are given. */
void *page_alloc(uint64_t bytes);
/* Like page_alloc but not zeroed: for buffers a device fills completely
 * (blk-read's image copy), so that the copy is the first touch. */
void *page_alloc_uninit(uint64_t bytes);
/* Returns [p, p + bytes) (page-aligned, whole pages) to the free list. */
void page_free(void *p, uint64_t bytes);
/* One 4 KiB page, not zeroed: the most recently freed page if any (its
 * first word holds the list link), else a bump page that is never touched
 * here (a balloon page the guest never wrote costs the host nothing).
 * NULL when RAM is exhausted. */
void *page_alloc_page(void);
/* Bytes still available to the bump allocator (the free list excluded). */
uint64_t pagealloc_free_bytes(void);
/* Pages on the free list. */
uint64_t pagealloc_free_list_pages(void);

#endif /* DSEC_TESTGUEST_PAGEALLOC_H_ */
