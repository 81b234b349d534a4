/* SPDX-License-Identifier: Apache-2.0 */
#include "memload.h"

#include "balloon.h"
#include "console.h"
#include "layout.h"
#include "pagealloc.h"
#include "syscall.h"
#include "virtio.h"

#define TICKS_PER_SECOND 100 /* the PIT runs at 100 Hz (head.S/boot.S) */
#define PAGES_PER_MIB 256ull

static void result_start(struct tg_line *out, const char *name)
{
	line_reset(out);
	line_str(out, "result workload=");
	line_str(out, name);
}

/* One 64-bit store per 64-byte line: the whole page is dirtied, at 64
 * stores per page. */
static void write_page(void *page, uint64_t v)
{
	volatile uint64_t *p = page;

	for (uint64_t i = 0; i < TG_PAGE_SIZE / 8; i += 8)
		p[i] = v + i;
}

static void *page_of(uint32_t pfn)
{
	return (void *)(uintptr_t)((uint64_t)pfn * TG_PAGE_SIZE);
}

/* Starts the page allocator and the balloon service; false with out set. */
static bool memload_start(const struct tg_boot_info *bi, struct tg_line *out)
{
	if (!pagealloc_init(bi) || !pagealloc_prepare_pages()) {
		line_reset(out);
		line_str(out, "error no-ram-after-image");
		return false;
	}
	return balloon_start(bi, out);
}

/* Halts until the next tick, servicing the balloon first. */
static void idle_tick(void)
{
	balloon_poll();
	sys_halt();
}

int workload_touch(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out)
{
	uint64_t pages = 0, want = mib * PAGES_PER_MIB;

	if (mib == 0 || mib > 4096) {
		line_reset(out);
		line_str(out, "error touch-does-not-fit");
		line_kv(out, "mib", mib);
		return TG_EXIT_ERROR;
	}
	if (!memload_start(bi, out))
		return TG_EXIT_ERROR;
	uint64_t c0 = rdtsc();
	while (pages < want) {
		void *p = page_alloc_page();
		if (p == 0) {
			line_reset(out);
			line_str(out, "error touch-does-not-fit");
			line_kv(out, "mib", mib);
			line_kv(out, "pages", pages);
			line_kv(out, "balloon_pages", balloon_held_pages());
			return TG_EXIT_ERROR;
		}
		*(volatile uint8_t *)p = (uint8_t)pages;
		pages++;
		balloon_poll();
	}
	uint64_t cycles = rdtsc() - c0;
	if (balloon_failed())
		return TG_EXIT_ERROR; /* the error line is out already */
	result_start(out, "touch");
	line_kv(out, "mib", mib);
	line_kv(out, "pages", pages);
	line_kv(out, "cycles", cycles);
	line_kv(out, "balloon_pages", balloon_held_pages());
	line_kv(out, "oom_deflated", balloon_oom_deflated_pages());
	return TG_EXIT_OK;
}

int workload_idle(const struct tg_boot_info *bi, uint64_t seconds, struct tg_line *out)
{
	static struct tg_line note;

	if (seconds > 100000000ull) {
		line_reset(out);
		line_str(out, "error idle-too-long");
		line_kv(out, "seconds", seconds);
		return TG_EXIT_ERROR;
	}
	if (!memload_start(bi, out))
		return TG_EXIT_ERROR;
	line_reset(&note);
	line_str(&note, "idle start");
	line_kv(&note, "balloon", balloon_active() ? 1 : 0);
	line_kv(&note, "balloon_pages", balloon_held_pages());
	console_send(&note);
	uint64_t t0 = tg_ticks, c0 = rdtsc();
	while (seconds == 0 || tg_ticks - t0 < seconds * TICKS_PER_SECOND) {
		idle_tick();
		if (balloon_failed())
			return TG_EXIT_ERROR;
	}
	uint64_t cycles = rdtsc() - c0;
	balloon_flush();
	if (balloon_failed())
		return TG_EXIT_ERROR;
	result_start(out, "idle");
	line_kv(out, "seconds", seconds);
	line_kv(out, "ticks", tg_ticks - t0);
	line_kv(out, "cycles", cycles);
	line_kv(out, "balloon_pages", balloon_held_pages());
	line_kv(out, "reported_pages", balloon_reported_pages());
	return TG_EXIT_OK;
}

/* Parses "A,B,C,D" into v[0..4). */
static bool parse_four(const char *s, size_t len, uint64_t v[4])
{
	size_t start = 0;

	for (int k = 0; k < 4; k++) {
		size_t end = start;
		while (end < len && s[end] != ',')
			end++;
		if ((k < 3) != (end < len) || !tg_parse_u64(s + start, end - start, &v[k]))
			return false;
		start = end + 1;
	}
	return true;
}

/*
 * The TSC rate against the 8254's counter 2, whose OUT bit the monitor
 * computes from its clock (devices/pit: a pure function of time), as Linux's
 * pit_calibrate_tsc does: gate on, mode 0 with count 0xffff, then poll port
 * 0x61 bit 5 until OUT rises 65535 / 1.193182 MHz = 54.9 ms later. Each
 * port access is a user call plus an exit (~75 us here); the load and the
 * edge are each placed at the midpoint of the TSC window around the access
 * that saw them. Measured here: the two windows add up to ~150 us and good
 * samples agree within 0.03%; a sample whose windows exceed 1% of it (the
 * vCPU was descheduled around an access: seen up to 30 ms on a loaded host)
 * is taken again. Median of three good samples in at most 20 tries (else
 * the sample with the narrowest windows). PIT ticks (tg_tsc_khz)
 * are no substitute here: the monitor drops IRQ0 edges while a vCPU spins
 * at CPL3 (measured: 300 ticks of a CPL3 pause loop took 4.2 s), so tick
 * windows read the TSC up to 1.9x too fast. 0 if OUT never rises.
 */
static bool pit_sample(uint64_t *cycles, uint64_t *uncertainty)
{
	uint8_t b = sys_inb(0x61);
	sys_outb(0x61, (uint8_t)((b & ~0x02) | 0x01)); /* gate 2 on, speaker off */
	sys_outb(0x43, 0xb0); /* counter 2, LSB then MSB, mode 0, binary */
	sys_outb(0x42, 0xff);
	uint64_t a0 = rdtsc();
	sys_outb(0x42, 0xff); /* the MSB write loads the count */
	uint64_t a1 = rdtsc();
	uint64_t prev = a1, t0 = tg_ticks;
	for (;;) {
		uint64_t r0 = rdtsc();
		uint8_t v = sys_inb(0x61);
		uint64_t r1 = rdtsc();
		if (v & 0x20) {
			/* OUT rose after the last read that saw it low. */
			*cycles = (prev + (r1 - prev) / 2) - (a0 + (a1 - a0) / 2);
			*uncertainty = (a1 - a0) + (r1 - prev);
			return true;
		}
		prev = r0;
		if (tg_ticks - t0 > 50)
			return false;
	}
}

static uint64_t tsc_khz_from_pit(void)
{
	uint64_t khz[3], best_cycles = 0, best_unc = ~0ull;
	int good = 0;

	for (int tries = 0; tries < 20 && good < 3; tries++) {
		uint64_t cycles, unc;
		if (!pit_sample(&cycles, &unc))
			return 0;
		if (unc < best_unc) {
			best_unc = unc;
			best_cycles = cycles;
		}
		if (unc * 100 > cycles)
			continue;
		khz[good] = cycles * 1193182ull / (65535ull * 1000ull);
		for (int j = good; j > 0 && khz[j - 1] > khz[j]; j--) {
			uint64_t x = khz[j];
			khz[j] = khz[j - 1];
			khz[j - 1] = x;
		}
		good++;
	}
	if (good == 0)
		return best_cycles * 1193182ull / (65535ull * 1000ull);
	return khz[good / 2];
}

static uint64_t ms_of(uint64_t cycles, uint64_t khz)
{
	return cycles / khz;
}

static void phase_done(const char *name, uint64_t ms)
{
	static struct tg_line l;

	line_reset(&l);
	line_str(&l, "phase name=");
	line_str(&l, name);
	line_kv(&l, "ms", ms);
	console_send(&l);
}

int workload_phases(const struct tg_boot_info *bi, const char *arg, size_t len,
		    struct tg_line *out)
{
	static struct tg_line note;
	uint64_t v[4];

	if (!parse_four(arg, len, v) || v[0] == 0 || v[0] > 3072 || v[1] > v[0] ||
	    v[3] > 100000000ull) {
		line_reset(out);
		line_str(out, "error bad-workload-argument name=phases:");
		line_strn(out, arg, len);
		line_str(out, " want=TOUCH_MIB,HOT_MIB<=TOUCH_MIB,HOT_PASSES,IDLE_S");
		return TG_EXIT_ERROR;
	}
	const uint64_t touch_pages = v[0] * PAGES_PER_MIB, hot_pages = v[1] * PAGES_PER_MIB;
	const uint64_t passes = v[2], idle_s = v[3];

	if (!memload_start(bi, out))
		return TG_EXIT_ERROR;
	/* The page list (4 bytes per page) comes from the bump allocator. */
	uint32_t *pfns = page_alloc(touch_pages * sizeof(uint32_t));
	if (pfns == 0) {
		line_reset(out);
		line_str(out, "error phases-out-of-memory");
		line_kv(out, "touched_pages", 0);
		return TG_EXIT_ERROR;
	}
	/* Phase times are TSC cycles over the rate calibrated against the
	 * PIT before the first phase (tick windows as a fallback). */
	uint64_t khz = tsc_khz_from_pit();
	if (khz == 0)
		khz = tg_tsc_khz();
	if (khz == 0) {
		line_reset(out);
		line_str(out, "error phases-no-timer");
		return TG_EXIT_ERROR;
	}
	line_reset(&note);
	line_str(&note, "phases start");
	line_kv(&note, "tsc_khz", khz);
	line_kv(&note, "balloon", balloon_active() ? 1 : 0);
	console_send(&note);

	/* 1. touch: allocate and write every page. */
	uint64_t c0 = rdtsc();
	for (uint64_t i = 0; i < touch_pages; i++) {
		void *p = page_alloc_page();
		if (p == 0) {
			line_reset(out);
			line_str(out, "error phases-out-of-memory");
			line_kv(out, "touched_pages", i);
			return TG_EXIT_ERROR;
		}
		write_page(p, i);
		pfns[i] = (uint32_t)((uint64_t)(uintptr_t)p / TG_PAGE_SIZE);
		balloon_poll();
	}
	const uint64_t touch_ms = ms_of(rdtsc() - c0, khz);
	phase_done("touch", touch_ms);

	/* 2. free: everything but the first HOT_MIB. */
	c0 = rdtsc();
	for (uint64_t i = hot_pages; i < touch_pages; i++) {
		page_free(page_of(pfns[i]), TG_PAGE_SIZE);
		balloon_poll();
	}
	phase_done("free", ms_of(rdtsc() - c0, khz));

	/* 3. hot: the same writes over the hot set, HOT_PASSES times. */
	c0 = rdtsc();
	for (uint64_t pass = 0; pass < passes; pass++) {
		for (uint64_t i = 0; i < hot_pages; i++) {
			write_page(page_of(pfns[i]), pass + i);
			balloon_poll();
		}
	}
	const uint64_t hot_ms = ms_of(rdtsc() - c0, khz);
	phase_done("hot", hot_ms);

	/* 4. idle: halt between ticks, servicing the balloon. */
	c0 = rdtsc();
	uint64_t t0 = tg_ticks;
	while (tg_ticks - t0 < idle_s * TICKS_PER_SECOND)
		idle_tick();
	const uint64_t idle_ms = ms_of(rdtsc() - c0, khz);
	phase_done("idle", idle_ms);

	balloon_flush();
	if (balloon_failed())
		return TG_EXIT_ERROR; /* the error line is out already */
	result_start(out, "phases");
	line_kv(out, "touch_ms", touch_ms);
	line_kv(out, "hot_ms", hot_ms);
	line_kv(out, "idle_ms", idle_ms);
	line_kv(out, "balloon_pages", balloon_held_pages());
	line_kv(out, "reported_pages", balloon_reported_pages());
	return TG_EXIT_OK;
}
