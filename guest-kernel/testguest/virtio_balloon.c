/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-balloon (virtio 1.2 section 5.5). Queues 0 inflateq and 1 deflateq
 * carry arrays of le32 page frame numbers (4 KiB pages); then, compacted
 * over the negotiated features, statsq (VIRTIO_BALLOON_F_STATS_VQ) and
 * reporting_vq (VIRTIO_BALLOON_F_REPORTING). Config: le32 num_pages (the
 * host's target), le32 actual (written by the driver). MUST_TELL_HOST is
 * never negotiated: deflated pages are reused at once.
 *
 * Balloon pages come from the page allocator (pagealloc.c: free pages
 * first, then released ones, then untouched bump pages) and go back to its
 * released set when deflated (the host punched them out). Completions are
 * polled by spinning on the used ring (every interrupt costs emulated CPL0
 * work on PVM), with VIRTQ_AVAIL_F_NO_INTERRUPT set so that the host does
 * not inject interrupts nobody takes. The balloon service unmasks its IRQ
 * line for configuration change interrupts only (the CPL0 stub just counts
 * them) and reads num_pages when the count moved, or once a second; the
 * workloads below poll num_pages directly.
 *
 * Two users: the balloon service (balloon.h) behind the memory workloads,
 * with every feature the device offers; and the workloads balloon,
 * balloon-cycle and balloon-pfn, which negotiate none and drive the
 * inflate/deflate queues directly.
 */
#include "balloon.h"
#include "console.h"
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

/* Feature bits (section 5.5.3). */
#define VIRTIO_BALLOON_F_STATS_VQ (1ull << 1)
#define VIRTIO_BALLOON_F_DEFLATE_ON_OOM (1ull << 2)
#define VIRTIO_BALLOON_F_REPORTING (1ull << 5)

#define BALLOON_CFG_NUM_PAGES 0
#define BALLOON_CFG_ACTUAL 4
#define BALLOON_PFNS_PER_REQ 256u   /* what Linux sends per buffer */
#define BALLOON_TIMEOUT_TICKS 1000  /* 10 s without progress */
/* Inflate/deflate requests per poll: 16 x 256 pages = 16 MiB per tick. */
#define BALLOON_STEPS_PER_POLL 16
/* num_pages is re-read at least this often without an interrupt. */
#define BALLOON_TARGET_RECHECK_TICKS 100
/* Free page reporting: start at 4 MiB of unreported free pages; at most 32
 * ranges per buffer (Linux's PAGE_REPORTING_CAPACITY) and 8 MiB per tick,
 * i.e. 800 MiB/s, under the device's default budget of 1 GiB/s of released
 * pages (devices/balloon: reports over budget are dropped, not queued). */
#define REPORT_THRESHOLD_PAGES 1024u
/* ... once the threshold has been met for a second (Linux waits 2 s,
 * PAGE_REPORTING_DELAY): pages freed and soon taken again are not reported,
 * and the host sees a freed set before it is released. */
#define REPORT_DELAY_TICKS 100u
#define REPORT_MAX_RANGES 32u
#define REPORT_PAGES_PER_POLL 2048u

/* struct virtio_balloon_stat (section 5.5.6.3): le16 tag, le64 val. */
struct balloon_stat {
	uint16_t tag;
	uint64_t val;
} __attribute__((packed));

#define STAT_SWAP_IN 0
#define STAT_SWAP_OUT 1
#define STAT_MEMFREE 4
#define STAT_MEMTOT 5
#define STAT_AVAIL 6
#define STAT_CACHES 7
#define BALLOON_NUM_STATS 6

struct balloon {
	struct virtio_dev d;
	struct virtq inflateq;
	struct virtq deflateq;
	struct virtq statsq;
	struct virtq reportq;
	bool stats_vq;        /* negotiated features */
	bool reporting;
	bool deflate_on_oom;
	uint32_t *req;        /* one request's PFNs */
	uint32_t *held;       /* PFNs in the balloon, in inflation order */
	uint64_t held_cap;
	uint32_t actual;
	uint64_t inflated;    /* pages accepted into the balloon */
	uint64_t deflated;
	uint64_t oom_deflated;
	uint64_t reported;
	uint64_t mem_total;   /* bytes of e820 RAM */
	struct balloon_stat *stats;
	struct tg_page_run *runs;
	/* After a deflation on OOM the driver does not inflate again until the
	 * host changes num_pages away from hold_target (what Linux does: its
	 * OOM notifier deflates, only a config change re-inflates). */
	bool hold;
	uint32_t hold_target;
	/* num_pages as last read. The service reads it again when the device
	 * raised an interrupt (configuration change: used-buffer interrupts
	 * are off) and once a second in case one was missed; every MMIO read
	 * is an exit (~75 us here), too much for every tick. */
	uint32_t target;
	uint64_t irq_seen;
	uint64_t target_tick;
	/* The report chain in flight (at most one): runs[0..report_n). */
	bool report_busy;
	size_t report_n;
	uint64_t report_tick;
	bool report_armed;       /* the threshold is met since armed_tick */
	uint64_t report_armed_tick;
};

static void balloon_quiet(struct virtq *q)
{
	/* Section 2.7.7: no used-buffer interrupts; the driver polls. */
	q->avail->flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
}

static void stats_fill(struct balloon *b)
{
	uint64_t free = pagealloc_available_pages() * TG_PAGE_SIZE;
	static const uint16_t kTags[BALLOON_NUM_STATS] = {
		STAT_SWAP_IN, STAT_SWAP_OUT, STAT_MEMFREE, STAT_MEMTOT, STAT_AVAIL, STAT_CACHES,
	};
	/* No swap and no page cache; no faults are counted, so MAJFLT and
	 * MINFLT are left out. AVAIL is what the allocator can hand out
	 * without deflating the balloon. */
	const uint64_t vals[BALLOON_NUM_STATS] = { 0, 0, free, b->mem_total, free, 0 };

	for (int i = 0; i < BALLOON_NUM_STATS; i++) {
		b->stats[i].tag = kTags[i];
		b->stats[i].val = vals[i];
	}
}

/* Makes the (single) stats buffer available to the device with fresh
 * values (section 5.5.6.3). */
static bool stats_send(struct balloon *b, struct tg_line *out)
{
	struct virtq_buf buf = { b->stats, BALLOON_NUM_STATS * (uint32_t)sizeof(struct balloon_stat) };

	stats_fill(b);
	if (!virtq_add(&b->statsq, &buf, 1, 0, 0, b->stats)) {
		virtio_error(out, "virtio-no-descriptors", &b->d);
		line_kv(out, "queue", b->statsq.index);
		return false;
	}
	virtq_kick(&b->statsq);
	return true;
}

static bool balloon_open(const struct tg_boot_info *bi, struct balloon *b, uint64_t features,
			 struct tg_line *out)
{
	memset(b, 0, sizeof(*b));
	if (!pagealloc_init(bi) || !pagealloc_prepare_pages()) {
		line_reset(out);
		line_str(out, "error balloon-no-ram");
		return false;
	}
	if (!virtio_open(bi, -1, VIRTIO_ID_BALLOON, features, &b->d, out) ||
	    !virtq_setup(&b->d, &b->inflateq, 0, 16, out) ||
	    !virtq_setup(&b->d, &b->deflateq, 1, 16, out))
		return false;
	b->stats_vq = (b->d.features & VIRTIO_BALLOON_F_STATS_VQ) != 0;
	b->reporting = (b->d.features & VIRTIO_BALLOON_F_REPORTING) != 0;
	b->deflate_on_oom = (b->d.features & VIRTIO_BALLOON_F_DEFLATE_ON_OOM) != 0;
	/* Queue numbers are compacted over the negotiated features. */
	uint16_t next = 2;
	if (b->stats_vq && !virtq_setup(&b->d, &b->statsq, next++, 2, out))
		return false;
	if (b->reporting && !virtq_setup(&b->d, &b->reportq, next++, REPORT_MAX_RANGES, out))
		return false;
	b->req = page_alloc(BALLOON_PFNS_PER_REQ * sizeof(uint32_t));
	if (b->stats_vq)
		b->stats = page_alloc(BALLOON_NUM_STATS * sizeof(struct balloon_stat));
	if (b->reporting)
		b->runs = page_alloc(REPORT_MAX_RANGES * sizeof(struct tg_page_run));
	/* Every page the allocator could still hand out, bounded by le32. */
	b->held_cap = pagealloc_available_pages();
	if (b->held_cap > 0xffffffffull)
		b->held_cap = 0xffffffffull;
	b->held = page_alloc(b->held_cap * sizeof(uint32_t));
	if (b->req == 0 || b->held == 0 || (b->stats_vq && b->stats == 0) ||
	    (b->reporting && b->runs == 0)) {
		virtio_error(out, "virtio-out-of-memory", &b->d);
		return false;
	}
	for (uint32_t i = 0; i < bi->e820_count; i++)
		if (bi->e820[i].type == TG_E820_RAM)
			b->mem_total += bi->e820[i].size;
	if (!virtio_driver_ok(&b->d, out))
		return false;
	balloon_quiet(&b->inflateq);
	balloon_quiet(&b->deflateq);
	if (b->stats_vq)
		balloon_quiet(&b->statsq);
	if (b->reporting)
		balloon_quiet(&b->reportq);
	/* The first statistics go out at once (section 5.5.6.3). */
	return !b->stats_vq || stats_send(b, out);
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

static void *pfn_page(uint32_t pfn)
{
	return (void *)(uintptr_t)((uint64_t)pfn * TG_PAGE_SIZE);
}

/* Deflates the n most recently inflated pages into the released set. */
static bool balloon_deflate(struct balloon *b, uint32_t n, struct tg_line *out)
{
	for (uint32_t i = 0; i < n; i++)
		b->req[i] = b->held[b->actual - 1 - i];
	if (!balloon_send(b, &b->deflateq, n, out))
		return false;
	/* No MUST_TELL_HOST: the pages are ours again once sent. */
	for (uint32_t i = 0; i < n; i++)
		page_free_released(pfn_page(b->req[i]), TG_PAGE_SIZE);
	b->actual -= n;
	b->deflated += n;
	virtio_config_write32(&b->d, BALLOON_CFG_ACTUAL, b->actual);
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
			void *page = page_alloc_page_noreclaim();
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
		virtio_config_write32(&b->d, BALLOON_CFG_ACTUAL, b->actual);
	} else if (target < b->actual) {
		n = b->actual - target;
		if (n > BALLOON_PFNS_PER_REQ)
			n = BALLOON_PFNS_PER_REQ;
		return balloon_deflate(b, n, out);
	}
	return true;
}

/* Touches mib MiB (so that the host backs them) and gives them back to the
 * allocator, whose free set the balloon takes first. */
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

/* ---- the balloon service (balloon.h) ----------------------------------- */

static struct balloon svc;
static bool svc_started, svc_active, svc_failed;
static uint64_t svc_tick;
static struct tg_line svc_err;

static bool balloon_present(const struct tg_boot_info *bi)
{
	const struct virtio_slot *slots;
	size_t n = virtio_slots(bi, &slots);

	for (size_t i = 0; i < n; i++)
		if (virtio_read_magic(&slots[i]) == 0x74726976u &&
		    virtio_read_device_id(&slots[i]) == VIRTIO_ID_BALLOON)
			return true;
	return false;
}

static uint32_t read_target(struct balloon *b)
{
	b->target = virtio_config_read32(&b->d, BALLOON_CFG_NUM_PAGES);
	b->target_tick = tg_ticks;
	return b->target;
}

/* Up to max_steps requests towards b->target (re-read after each). Stops
 * early when the allocator is dry (retried next tick: freed memory can be
 * taken later) or when held after an OOM deflation. */
static bool service_follow(struct balloon *b, unsigned max_steps, struct tg_line *out)
{
	if (b->hold && b->target != b->hold_target)
		b->hold = false;
	for (unsigned step = 0; step < max_steps && b->target != b->actual; step++) {
		bool oom = false;
		if (b->target > b->actual && (b->hold || pagealloc_available_pages() == 0))
			break;
		if (!balloon_step(b, b->target, &oom, out))
			return false;
		if (oom)
			break;
		read_target(b);
	}
	return true;
}

/* Completes the report chain in flight, if the device has used it (or,
 * with wait, once it has): its pages join the released set. */
static bool report_complete(struct balloon *b, bool wait, struct tg_line *out)
{
	uint32_t len;

	if (!b->report_busy)
		return true;
	if (virtq_get(&b->reportq, &len) == 0 &&
	    (!wait || virtq_wait(&b->reportq, &len, BALLOON_TIMEOUT_TICKS) == 0)) {
		if (!wait && tg_ticks - b->report_tick <= BALLOON_TIMEOUT_TICKS)
			return true; /* still in flight */
		virtio_error(out, "balloon-timeout", &b->d);
		line_kv(out, "queue", b->reportq.index);
		return false;
	}
	b->reported += pagealloc_release_runs(b->runs, b->report_n);
	b->report_busy = false;
	return true;
}

/* Free page reporting (section 5.5.6.6): each buffer of a chain is one run
 * of free pages (device-writable, as Linux sends them; the device reads
 * nothing). The runs leave the free set when sent, so nothing allocates
 * them while the host releases them, and join the released set once the
 * device has used the chain: the guest does not wait for that (a poll
 * picks it up), so reporting costs the running workload ~one kick. */
static bool service_report(struct balloon *b, struct tg_line *out)
{
	static struct virtq_buf bufs[REPORT_MAX_RANGES];
	size_t max_runs = b->reportq.size < REPORT_MAX_RANGES ? b->reportq.size : REPORT_MAX_RANGES;

	if (!report_complete(b, false, out))
		return false;
	if (pagealloc_free_list_pages() < REPORT_THRESHOLD_PAGES) {
		b->report_armed = false;
		return true;
	}
	if (!b->report_armed) {
		b->report_armed = true;
		b->report_armed_tick = tg_ticks;
	}
	if (b->report_busy || tg_ticks - b->report_armed_tick < REPORT_DELAY_TICKS)
		return true;
	size_t n = pagealloc_take_free_runs(b->runs, max_runs, REPORT_PAGES_PER_POLL);
	if (n == 0)
		return true;
	for (size_t i = 0; i < n; i++) {
		bufs[i].addr = (const void *)(uintptr_t)b->runs[i].addr;
		bufs[i].len = (uint32_t)(b->runs[i].pages * TG_PAGE_SIZE);
	}
	b->report_busy = true;
	b->report_n = n;
	b->report_tick = tg_ticks;
	if (!virtq_add(&b->reportq, 0, 0, bufs, (unsigned)n, b->runs)) {
		virtio_error(out, "virtio-no-descriptors", &b->d);
		line_kv(out, "queue", b->reportq.index);
		return false;
	}
	virtq_kick(&b->reportq);
	return true;
}

static bool service_run(struct balloon *b, struct tg_line *out)
{
	uint32_t len;

	/* The device returned the stats buffer: it wants fresh values. */
	if (b->stats_vq && virtq_get(&b->statsq, &len) != 0 && !stats_send(b, out))
		return false;
	uint64_t irqs = virtio_irq_count(&b->d);
	if (irqs != b->irq_seen) {
		/* Acknowledge first, then read: a change after the read raises
		 * a new interrupt. */
		b->irq_seen = irqs;
		virtio_irq_ack(&b->d);
		read_target(b);
	} else if (tg_ticks - b->target_tick >= BALLOON_TARGET_RECHECK_TICKS) {
		read_target(b);
	}
	if (b->target != b->actual && !service_follow(b, BALLOON_STEPS_PER_POLL, out))
		return false;
	return !b->reporting || service_report(b, out);
}

static void service_fail(void)
{
	/* Pages of a report in flight are free either way: give them back. */
	if (svc.report_busy) {
		pagealloc_release_runs(svc.runs, svc.report_n);
		svc.report_busy = false;
	}
	console_send(&svc_err);
	svc_active = false;
	svc_failed = true;
	pagealloc_set_oom_handler(0);
}

/* Deflate-on-OOM (section 5.5.6.1 with VIRTIO_BALLOON_F_DEFLATE_ON_OOM): the
 * allocator ran dry, give it balloon pages back. */
static uint64_t service_oom(uint64_t pages)
{
	struct balloon *b = &svc;

	if (!svc_active || b->actual == 0)
		return 0;
	uint32_t n = b->actual < BALLOON_PFNS_PER_REQ ? b->actual : BALLOON_PFNS_PER_REQ;
	if (pages < n)
		n = (uint32_t)pages;
	if (!balloon_deflate(b, n, &svc_err)) {
		service_fail();
		return 0;
	}
	b->oom_deflated += n;
	b->hold = true;
	b->hold_target = read_target(b);
	return n;
}

bool balloon_start(const struct tg_boot_info *bi, struct tg_line *out)
{
	if (svc_started)
		return !svc_failed;
	svc_started = true;
	if (!pagealloc_init(bi)) {
		line_reset(out);
		line_str(out, "error balloon-no-ram");
		svc_failed = true;
		return false;
	}
	if (!balloon_present(bi))
		return true;
	if (!balloon_open(bi, &svc,
			  VIRTIO_BALLOON_F_STATS_VQ | VIRTIO_BALLOON_F_DEFLATE_ON_OOM |
				  VIRTIO_BALLOON_F_REPORTING,
			  out)) {
		svc_failed = true;
		return false;
	}
	svc_active = true;
	if (svc.deflate_on_oom)
		pagealloc_set_oom_handler(service_oom);
	/* Configuration change interrupts wake the poll (and an idle hlt). */
	virtio_irq_unmask(&svc.d);
	svc.irq_seen = virtio_irq_count(&svc.d);
	/* The initial target, before the workload starts. */
	uint64_t t_progress = tg_ticks;
	for (;;) {
		uint32_t before = svc.actual;
		read_target(&svc);
		if (!service_follow(&svc, BALLOON_STEPS_PER_POLL, out)) {
			svc_active = false;
			svc_failed = true;
			pagealloc_set_oom_handler(0);
			return false;
		}
		uint32_t target = read_target(&svc);
		if (svc.actual == target ||
		    (svc.actual == before && pagealloc_available_pages() == 0))
			break;
		if (svc.actual != before) {
			t_progress = tg_ticks;
		} else if (tg_ticks - t_progress > BALLOON_TIMEOUT_TICKS) {
			line_reset(out);
			line_str(out, "error balloon-stuck");
			line_kv(out, "target_pages", target);
			line_kv(out, "actual_pages", svc.actual);
			svc_active = false;
			svc_failed = true;
			pagealloc_set_oom_handler(0);
			return false;
		}
	}
	svc_tick = tg_ticks;
	return true;
}

void balloon_poll(void)
{
	if (!svc_active || tg_ticks == svc_tick)
		return;
	svc_tick = tg_ticks;
	if (!service_run(&svc, &svc_err))
		service_fail();
}

void balloon_flush(void)
{
	if (svc_active && !report_complete(&svc, true, &svc_err))
		service_fail();
}

bool balloon_active(void)
{
	return svc_active;
}

bool balloon_failed(void)
{
	return svc_failed;
}

uint64_t balloon_held_pages(void)
{
	return svc.actual;
}

uint64_t balloon_reported_pages(void)
{
	return svc.reported;
}

uint64_t balloon_oom_deflated_pages(void)
{
	return svc.oom_deflated;
}

/* ---- workloads that drive the queues directly ---------------------------- */

int workload_balloon(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out)
{
	static struct balloon b;
	uint32_t target = 0;

	if (!pagealloc_init(bi)) {
		line_str(out, "error balloon-no-ram");
		return 1;
	}
	if (!balloon_burst(mib, out) || !balloon_open(bi, &b, 0, out) ||
	    !balloon_reach(&b, &target, out))
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
	if (!balloon_burst(mib, out) || !balloon_open(bi, &b, 0, out) ||
	    !balloon_reach(&b, &target, out))
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
	/* The deflated pages are the guest's again: take and write each
	 * (held[] still lists them in inflation order). */
	uint64_t retouched = 0;
	for (uint32_t i = 0; i < peak; i++) {
		volatile uint8_t *p = pfn_page(b.held[i]);
		if (!page_claim((void *)(uintptr_t)p))
			continue;
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

	if (!balloon_open(bi, &b, 0, out))
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
