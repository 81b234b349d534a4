/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Guest memory: a bump allocator over the RAM that follows the image (virtio
 * rings and I/O buffers, page_alloc), plus single 4 KiB pages that can be
 * freed and reused (page_alloc_page / page_free: the workloads' memory and
 * the balloon's pages).
 *
 * Free pages are kept in two bitmaps over the allocator's range (allocated
 * on first use, 2 bits per page), so that nothing is ever written into a
 * free page:
 *   - free: free pages whose host backing the guest may still hold;
 *   - released: free pages the host has released (reported to the balloon
 *     device as free, or deflated from the balloon). They read as zero when
 *     touched and cost the host nothing until then.
 * page_alloc_page takes a free page first (already backed: no new host
 * memory), then a released one (which simply stops being released), then an
 * untouched bump page, and when all are exhausted asks the OOM handler (the
 * balloon driver's deflate-on-OOM) for pages.
 */
#ifndef DSEC_TESTGUEST_PAGEALLOC_H_
#define DSEC_TESTGUEST_PAGEALLOC_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootinfo.h"

#define TG_PAGE_SIZE 4096ull

/* Finds the e820 RAM entry that holds the end of the image and allocates
 * from there up to the end of that entry (at most 3 GiB: above lies MMIO).
 * Idempotent. Returns false if the map has no such entry. */
bool pagealloc_init(const struct tg_boot_info *bi);
/* Allocates the free-page bitmaps now rather than at the first use of
 * single pages (so that later figures, e.g. balloon statistics, do not move
 * by their size). False if RAM is too small for them. */
bool pagealloc_prepare_pages(void);
/* Zeroed, page-aligned memory of at least bytes bytes from the bump
 * allocator, or NULL when it is exhausted. The identity map makes the
 * pointer the guest-physical address that devices are given. */
void *page_alloc(uint64_t bytes);
/* Like page_alloc but not zeroed: for buffers a device fills completely
 * (blk-read's image copy), so that the copy is the first touch. */
void *page_alloc_uninit(uint64_t bytes);
/* Returns the whole pages of [p, p + bytes) (page-aligned) to the free set.
 * Pages outside the allocator's range, or already free, are ignored. */
void page_free(void *p, uint64_t bytes);
/* Like page_free, into the released set: for pages the host has given up
 * (deflated balloon pages). */
void page_free_released(void *p, uint64_t bytes);
/* One 4 KiB page, not zeroed (order in the file comment), or NULL when RAM
 * is exhausted and the OOM handler found nothing. */
void *page_alloc_page(void);
/* The same without asking the OOM handler (the balloon's own inflation). */
void *page_alloc_page_noreclaim(void);
/* Takes the free or released page p out of the allocator; false if p is not
 * free (balloon-cycle writes exactly the pages it deflated). */
bool page_claim(void *p);

/* Called when page_alloc_page finds nothing: gives up to `pages` pages back
 * to the allocator (page_free_released) and returns how many. Not re-entered. */
typedef uint64_t (*pagealloc_oom_fn)(uint64_t pages);
void pagealloc_set_oom_handler(pagealloc_oom_fn fn);

/* Bytes still available to the bump allocator (the free sets excluded). */
uint64_t pagealloc_free_bytes(void);
/* Pages in the free set and in the released set. */
uint64_t pagealloc_free_list_pages(void);
uint64_t pagealloc_released_pages(void);
/* Pages page_alloc_page could still hand out without reclaim: both sets,
 * pages in flight to the host (pagealloc_take_free_runs) and the untouched
 * bump space. */
uint64_t pagealloc_available_pages(void);

/* Free page reporting. A run of free pages. */
struct tg_page_run {
	uint64_t addr;
	uint64_t pages;
};
/* Fills up to max_runs runs of pages of the free set, at most max_pages in
 * total, scanning on from where the last call stopped (wrapping), and takes
 * them out of the free set ("in flight": not allocatable, still counted as
 * available) while the host releases them; returns the number of runs. */
size_t pagealloc_take_free_runs(struct tg_page_run *runs, size_t max_runs, uint64_t max_pages);
/* Puts in-flight runs into the released set (the device completed them, or
 * failed: free pages' contents never matter); returns the pages moved. */
uint64_t pagealloc_release_runs(const struct tg_page_run *runs, size_t n);

#endif /* DSEC_TESTGUEST_PAGEALLOC_H_ */
