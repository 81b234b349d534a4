/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-balloon (virtio 1.2 section 5.5): queue 0 inflateq and queue 1
 * deflateq carry arrays of le32 page frame numbers (4 KiB pages); config
 * le32 num_pages (the host's target) and le32 actual (written by the
 * driver). No optional feature is negotiated (no statistics, no free page
 * reporting, no MUST_TELL_HOST: deflated pages are reused at once).
 *
 * Balloon pages come from the page allocator (pagealloc.c: the free list
 * first, then untouched bump pages) and go back to its free list when
 * deflated. The driver polls num_pages once per timer tick instead of
 * taking the configuration change interrupt (every interrupt costs
 * emulated CPL0 work on PVM); completions are polled the same way.
 */
#include "console.h"
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

#define BALLOON_CFG_NUM_PAGES 0
#define BALLOON_CFG_ACTUAL 4
#define BALLOON_PFNS_PER_REQ 256u   /* what Linux sends per buffer */
#define BALLOON_TIMEOUT_TICKS 1000  /* 10 s without progress */

struct balloon {
	struct virtio_dev d;
	struct virtq inflateq;
	struct virtq deflateq;
	uint32_t *req;      /* one request's PFNs */
	uint32_t *held;     /* PFNs in the balloon, in inflation order */
	uint64_t held_cap;
	uint32_t actual;
	uint64_t inflated;  /* pages accepted into the balloon */
	uint64_t deflated;
};

static bool balloon_open(const struct tg_boot_info *bi, struct balloon *b, struct tg_line *out)
{
	if (!pagealloc_init(bi) || !virtio_open(bi, -1, VIRTIO_ID_BALLOON, 0, &b->d, out) ||
	    !virtq_setup(&b->d, &b->inflateq, 0, 16, out) ||
	    !virtq_setup(&b->d, &b->deflateq, 1, 16, out) || !virtio_driver_ok(&b->d, out))
		return false;
	b->req = page_alloc(BALLOON_PFNS_PER_REQ * sizeof(uint32_t));
	/* Every page the allocator could still hand out, bounded by le32. */
	b->held_cap = pagealloc_free_bytes() / TG_PAGE_SIZE + pagealloc_free_list_pages();
	b->held = page_alloc(b->held_cap * sizeof(uint32_t));
	if (b->req == 0 || b->held == 0) {
		virtio_error(out, "virtio-out-of-memory", &b->d);
		return false;
	}
	return true;
}

/* Sends req[0..n) on q and waits until the device has used it. */
static bool balloon_send(struct balloon *b, struct virtq *q, uint32_t n, struct tg_line *out)
{
	struct virtq_buf buf = { b->req, n * (uint32_t)sizeof(uint32_t) };
	uint32_t len = 0;

	if (!virtq_add(q, &buf, 1, 0, 0, b->req)) {
		virtio_error(out, "virtio-no-descriptors", &b->d);
		return false;
	}
	virtq_kick(q);
	if (virtq_wait(q, &len, BALLOON_TIMEOUT_TICKS) == 0) {
		virtio_error(out, "balloon-timeout", &b->d);
		line_kv(out, "queue", q->index);
		return false;
	}
	return true;
}

/* One request towards target: inflate or deflate up to 256 pages. Sets
 * *oom when the allocator has no page left for inflation. */
static bool balloon_step(struct balloon *b, uint32_t target, bool *oom, struct tg_line *out)
{
	uint32_t n = 0;

	if (target > b->actual) {
		uint32_t want = target - b->actual;
		if (want > BALLOON_PFNS_PER_REQ)
			want = BALLOON_PFNS_PER_REQ;
		while (n < want && b->actual + n < b->held_cap) {
			void *page = page_alloc_page();
			if (page == 0)
				break;
			b->req[n++] = (uint32_t)((uint64_t)(uintptr_t)page / TG_PAGE_SIZE);
		}
		if (n == 0) {
			*oom = true;
			return true;
		}
		if (!balloon_send(b, &b->inflateq, n, out))
			return false;
		for (uint32_t i = 0; i < n; i++)
			b->held[b->actual + i] = b->req[i];
		b->actual += n;
		b->inflated += n;
	} else if (target < b->actual) {
		n = b->actual - target;
		if (n > BALLOON_PFNS_PER_REQ)
			n = BALLOON_PFNS_PER_REQ;
		for (uint32_t i = 0; i < n; i++)
			b->req[i] = b->held[b->actual - 1 - i];
		if (!balloon_send(b, &b->deflateq, n, out))
			return false;
		/* No MUST_TELL_HOST: the pages are ours again once sent. */
		for (uint32_t i = 0; i < n; i++)
			page_free((void *)(uintptr_t)((uint64_t)b->req[i] * TG_PAGE_SIZE), TG_PAGE_SIZE);
		b->actual -= n;
		b->deflated += n;
	}
	virtio_config_write32(&b->d, BALLOON_CFG_ACTUAL, b->actual);
	return true;
}

/* Touches mib MiB (so that the host backs them) and gives them back to the
 * allocator, whose free list the balloon takes first. */
static bool balloon_burst(uint64_t mib, struct tg_line *out)
{
	uint64_t bytes = mib << 20;

	if (bytes == 0)
		return true;
	void *burst = page_alloc(bytes);
	if (burst == 0) {
		line_str(out, "error balloon-touch-does-not-fit");
		line_kv(out, "mib", mib);
		return false;
	}
	page_free(burst, bytes);
	return true;
}

/* Follows num_pages until actual equals it (re-read after every request).
 * Returns the target reached; false (with out) if the allocator ran dry or
 * nothing moved for BALLOON_TIMEOUT_TICKS. */
static bool balloon_reach(struct balloon *b, uint32_t *reached, struct tg_line *out)
{
	uint64_t t_progress = tg_ticks;
	bool oom = false;
	uint32_t target = virtio_config_read32(&b->d, BALLOON_CFG_NUM_PAGES);

	while (b->actual != target && !oom) {
		uint32_t before = b->actual;
		if (!balloon_step(b, target, &oom, out))
			return false;
		if (b->actual != before)
			t_progress = tg_ticks;
		else if (tg_ticks - t_progress > BALLOON_TIMEOUT_TICKS)
			break;
		target = virtio_config_read32(&b->d, BALLOON_CFG_NUM_PAGES);
	}
	if (b->actual != target) {
		line_reset(out);
		line_str(out, oom ? "error balloon-out-of-memory" : "error balloon-stuck");
		line_kv(out, "target_pages", target);
		line_kv(out, "actual_pages", b->actual);
		return false;
	}
	*reached = target;
	return true;
}

int workload_balloon(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out)
{
	static struct balloon b;
	uint32_t target = 0;

	if (!pagealloc_init(bi)) {
		line_str(out, "error balloon-no-ram");
		return 1;
	}
	if (!balloon_burst(mib, out) || !balloon_open(bi, &b, out) || !balloon_reach(&b, &target, out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=balloon");
	line_kv(out, "touched_mib", mib);
	line_kv(out, "target_pages", target);
	line_kv(out, "actual_pages", b.actual);
	line_kv(out, "inflated", b.inflated);
	line_kv(out, "deflated", b.deflated);
	return 0;
}

int workload_balloon_cycle(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out)
{
	static struct balloon b;
	static struct tg_line note;
	uint32_t target = 0;

	if (!pagealloc_init(bi)) {
		line_str(out, "error balloon-no-ram");
		return 1;
	}
	if (!balloon_burst(mib, out) || !balloon_open(bi, &b, out) || !balloon_reach(&b, &target, out))
		return 1;
	uint32_t peak = b.actual;
	line_reset(&note);
	line_str(&note, "balloon reached");
	line_kv(&note, "actual_pages", b.actual);
	console_send(&note);
	/* Wait (polling once per tick) for the host to lower the target to 0. */
	uint64_t t0 = tg_ticks;
	while (virtio_config_read32(&b.d, BALLOON_CFG_NUM_PAGES) != 0) {
		if (tg_ticks - t0 > BALLOON_TIMEOUT_TICKS) {
			line_reset(out);
			line_str(out, "error balloon-target-unchanged");
			line_kv(out, "actual_pages", b.actual);
			return 1;
		}
		uint64_t t = tg_ticks;
		while (tg_ticks == t)
			__asm__ volatile("pause");
	}
	if (!balloon_reach(&b, &target, out))
		return 1;
	/* The deflated pages are the guest's again: take and write each. */
	uint64_t retouched = 0;
	for (uint32_t i = 0; i < peak; i++) {
		volatile uint8_t *p = page_alloc_page();
		if (p == 0)
			break;
		p[TG_PAGE_SIZE - 1] = 0x5a;
		retouched++;
	}
	line_reset(out);
	line_str(out, "result workload=balloon-cycle");
	line_kv(out, "peak_pages", peak);
	line_kv(out, "actual_pages", b.actual);
	line_kv(out, "inflated", b.inflated);
	line_kv(out, "deflated", b.deflated);
	line_kv(out, "retouched", retouched);
	return 0;
}

int workload_balloon_pfn(const struct tg_boot_info *bi, uint64_t pfn, struct tg_line *out)
{
	static struct balloon b;

	if (!balloon_open(bi, &b, out))
		return 1;
	/* A hostile inflate request: the same PFN twice in one buffer. */
	b.req[0] = (uint32_t)pfn;
	b.req[1] = (uint32_t)pfn;
	if (!balloon_send(&b, &b.inflateq, 2, out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=balloon-pfn");
	line_kv(out, "pfn", pfn);
	return 0;
}
