/* SPDX-License-Identifier: Apache-2.0 */
#include "workloads.h"

#include "acpi.h"
#include "console.h"
#include "fmt.h"
#include "layout.h"
#include "memload.h"
#include "pagealloc.h"
#include "smp.h"
#include "syscall.h"
#include "virtio_workloads.h"

extern volatile uint64_t tg_ticks; /* incremented by the IRQ0 handler (head.S) */

struct workload {
	const char *name;
	bool needs_arg;
	/* Fills *out with the result line (or leaves it empty) and returns
	 * the exit code. arg is the number after ':' when needs_arg. */
	int (*run)(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);
	/* Instead of run, for arguments that are not one number
	 * ("MODE,MiB", "PORT,BYTES"): gets the text after ':'. */
	int (*run_str)(const struct tg_boot_info *bi, const char *arg, size_t len,
		       struct tg_line *out);
};

static void result_start(struct tg_line *out, const char *name)
{
	line_reset(out);
	line_str(out, "result workload=");
	line_str(out, name);
}

static int run_boot(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	(void)bi;
	(void)arg;
	result_start(out, "boot");
	return TG_EXIT_OK;
}

static int run_spin(const struct tg_boot_info *bi, uint64_t n, struct tg_line *out)
{
	uint64_t t0 = tg_ticks, c0 = rdtsc(), i = 0;

	(void)bi;
	while (i < n) {
		/* The empty asm "changes" i, so the loop cannot be folded away. */
		__asm__ volatile("" : "+r"(i));
		i++;
	}
	uint64_t cycles = rdtsc() - c0;
	result_start(out, "spin");
	line_kv(out, "iterations", i);
	line_kv(out, "cycles", cycles);
	line_kv(out, "ticks", tg_ticks - t0);
	return TG_EXIT_OK;
}

/* cpl0-probe:N: N rounds of a two-instruction loop at CPL3, then at CPL0
 * (user call TG_SYS_SPIN), in TSC cycles each. Where the hypervisor
 * emulates CPL0 (PVM) the second is thousands of times the first. Each
 * figure is the least of kProbeRepeats measurements: a vCPU thread the
 * host preempts in the middle of one (a loaded host, or L1 of the nested
 * bed sharing a CPU) inflates that measurement only, while emulation
 * inflates every one. */
#define kProbeRepeats 7

static int run_cpl0_probe(const struct tg_boot_info *bi, uint64_t n, struct tg_line *out)
{
	uint32_t rounds = n > 0xffffffffu ? 0xffffffffu : (uint32_t)n;
	uint64_t best_cpl3 = ~0ull, best_entry = ~0ull, best_cpl0 = ~0ull;

	(void)bi;
	for (int rep = 0; rep < kProbeRepeats; rep++) {
		uint32_t i = rounds;
		uint64_t c0 = rdtsc();
		if (i) {
			__asm__ volatile("1: decl %0\n\tjnz 1b" : "+r"(i));
		}
		uint64_t c1 = rdtsc();
		sys_cpl0_spin(0); /* the entry and exit alone, to subtract */
		uint64_t c2 = rdtsc();
		sys_cpl0_spin(rounds);
		uint64_t c3 = rdtsc();
		if (c1 - c0 < best_cpl3)
			best_cpl3 = c1 - c0;
		if (c2 - c1 < best_entry)
			best_entry = c2 - c1;
		if (c3 - c2 < best_cpl0)
			best_cpl0 = c3 - c2;
	}
	result_start(out, "cpl0-probe");
	line_kv(out, "iterations", rounds);
	line_kv(out, "cpl3_cycles", best_cpl3);
	line_kv(out, "ucall_cycles", best_entry);
	line_kv(out, "cpl0_cycles", best_cpl0 > best_entry ? best_cpl0 - best_entry : 0);
	line_kv(out, "repeats", kProbeRepeats);
	return TG_EXIT_OK;
}

static int run_ticks(const struct tg_boot_info *bi, uint64_t n, struct tg_line *out)
{
	uint64_t t0 = tg_ticks, c0 = rdtsc();

	(void)bi;
	while (tg_ticks - t0 < n)
		__asm__ volatile("pause");
	uint64_t cycles = rdtsc() - c0;
	result_start(out, "ticks");
	line_kv(out, "ticks", tg_ticks - t0);
	line_kv(out, "cycles", cycles);
	return TG_EXIT_OK;
}

/* snap:TICKS: state a snapshot must carry. Fills 4 MiB of page-allocator
 * memory with an xorshift stream, prints "snap ready", then sleeps (hlt)
 * tick by tick; every 10 ticks it re-sums the buffer and prints
 * "snap tick=K sum=0x.. ok=0|1", the tick number counted in a register
 * and on the stack. A guest restored from a snapshot goes on from the
 * tick it was at (no second "snap ready"), with the same sum. */
#define kSnapBytes (4ull << 20)

static uint64_t snap_sum(const uint64_t *buf, uint64_t words)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint64_t i = 0; i < words; i++)
		h = (h ^ buf[i]) * 0x100000001b3ull;
	return h;
}

static int run_snap(const struct tg_boot_info *bi, uint64_t n, struct tg_line *out)
{
	struct tg_line note;
	uint64_t words = kSnapBytes / 8, x = 0x9e3779b97f4a7c15ull;

	if (!pagealloc_init(bi)) {
		line_reset(out);
		line_str(out, "error snap-no-memory");
		return TG_EXIT_ERROR;
	}
	uint64_t *buf = page_alloc(kSnapBytes);
	if (!buf) {
		line_reset(out);
		line_str(out, "error snap-no-memory");
		return TG_EXIT_ERROR;
	}
	for (uint64_t i = 0; i < words; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = x;
	}
	uint64_t want = snap_sum(buf, words), bad = 0, lines = 0;
	line_reset(&note);
	line_str(&note, "snap ready");
	line_kv(&note, "ticks", n);
	line_str(&note, " sum=");
	line_hex(&note, want);
	console_send(&note);
	for (uint64_t k = 1; k <= n; k++) {
		uint64_t t = tg_ticks;
		while (tg_ticks == t)
			sys_halt();
		if (k % 10 != 0 && k != n)
			continue;
		uint64_t got = snap_sum(buf, words);
		if (got != want)
			bad++;
		line_reset(&note);
		line_str(&note, "snap tick=");
		line_u64(&note, k);
		line_str(&note, " sum=");
		line_hex(&note, got);
		line_kv(&note, "ok", got == want ? 1 : 0);
		console_send(&note);
		lines++;
	}
	result_start(out, "snap");
	line_kv(out, "ticks", n);
	line_kv(out, "lines", lines);
	line_kv(out, "mismatches", bad);
	line_str(out, " sum=");
	line_hex(out, want);
	return bad == 0 ? TG_EXIT_OK : TG_EXIT_ERROR;
}

/* Console text for flood: 64-byte numbered lines, so a capped log shows how
 * far it got. */
static char flood_buf[4096];

static int run_flood(const struct tg_boot_info *bi, uint64_t bytes, struct tg_line *out)
{
	uint64_t left = bytes, c0 = rdtsc();

	(void)bi;
	for (size_t i = 0; i < sizeof(flood_buf); i++)
		flood_buf[i] = (i % 64 == 63) ? '\n' : (char)('a' + (i / 64) % 26);
	while (left > 0) {
		size_t chunk = left < sizeof(flood_buf) ? (size_t)left : sizeof(flood_buf);
		sys_write(flood_buf, chunk);
		left -= chunk;
	}
	uint64_t cycles = rdtsc() - c0;
	/* Without the test device the result line follows on the same UART:
	 * start it on a fresh line. */
	if (bytes % 64 != 0 && !console_has_testdev())
		sys_write("\n", 1);
	result_start(out, "flood");
	line_kv(out, "bytes", bytes);
	line_kv(out, "cycles", cycles);
	return TG_EXIT_OK;
}

static int run_triple_fault(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	(void)bi;
	(void)arg;
	(void)out;
	sys_triple_fault();
}

static int run_reset(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	(void)bi;
	(void)arg;
	sys_reset();
	/* Reaching here means the platform ignored the i8042 reset. */
	line_reset(out);
	line_str(out, "error reset-ignored");
	return TG_EXIT_ERROR;
}

static int run_fault(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	(void)bi;
	(void)arg;
	(void)out;
	/* A non-canonical address raises #GP(0) (SDM 3.3.7.1); the handler
	 * reports it and shuts down with TG_EXIT_FAULT. */
	(void)*(volatile uint64_t *)(uintptr_t)0x8000000000000000ull;
	line_reset(out);
	line_str(out, "error fault-not-raised");
	return TG_EXIT_ERROR;
}

static const struct workload kWorkloads[] = {
	{ "boot", false, run_boot, 0 },
	{ "spin", true, run_spin, 0 },
	{ "cpl0-probe", true, run_cpl0_probe, 0 },
	{ "touch", true, workload_touch, 0 },
	{ "idle", true, workload_idle, 0 },
	{ "phases", true, 0, workload_phases },
	{ "ticks", true, run_ticks, 0 },
	{ "snap", true, run_snap, 0 },
	{ "flood", true, run_flood, 0 },
	{ "triple-fault", false, run_triple_fault, 0 },
	{ "reset", false, run_reset, 0 },
	{ "acpi-poweroff", false, workload_acpi_poweroff, 0 },
	{ "fault", false, run_fault, 0 },
	{ "smp", false, workload_smp, 0 },
	{ "virtio-list", false, workload_virtio_list, 0 },
	{ "virtio-scribble", true, workload_virtio_scribble, 0 },
	{ "rng", true, workload_rng, 0 },
	{ "balloon", true, workload_balloon, 0 },
	{ "balloon-cycle", true, workload_balloon_cycle, 0 },
	{ "balloon-pfn", true, workload_balloon_pfn, 0 },
	{ "blk-test", true, workload_blk_test, 0 },
	{ "blk-write-ro", false, workload_blk_write_ro, 0 },
	{ "blk-read", true, workload_blk_read, 0 },
	{ "blk-read", false, workload_blk_read_image, 0 },
	{ "pmem-read", false, workload_pmem_read, 0 },
	{ "pmem-write", true, workload_pmem_write, 0 },
	{ "blk-bench", true, 0, workload_blk_bench },
	{ "net-echo", true, workload_net_echo, 0 },
	{ "net-send", true, workload_net_send, 0 },
	{ "vsock-echo", true, workload_vsock_echo, 0 },
	{ "vsock-send", true, 0, workload_vsock_send },
};

static void report_bad(const char *what, const char *spec, size_t len)
{
	static struct tg_line l;

	line_reset(&l);
	line_str(&l, what);
	line_str(&l, " name=");
	line_strn(&l, spec, len);
	console_send(&l);
}

int workload_run(const struct tg_boot_info *bi, const char *spec, size_t len)
{
	static struct tg_line out;
	size_t name_len = 0;
	bool name_known = false;

	while (name_len < len && spec[name_len] != ':')
		name_len++;
	for (size_t i = 0; i < sizeof(kWorkloads) / sizeof(kWorkloads[0]); i++) {
		const struct workload *w = &kWorkloads[i];
		uint64_t arg = 0;

		if (tg_strlen(w->name) != name_len || !tg_memeq(w->name, spec, name_len))
			continue;
		name_known = true;
		/* A name may have one entry with and one without an argument
		 * (blk-read:MiB and blk-read). */
		if (w->needs_arg != (name_len < len))
			continue;
		if ((w->needs_arg && w->run != 0 &&
		     !tg_parse_u64(spec + name_len + 1, len - name_len - 1, &arg))) {
			report_bad("error bad-workload-argument", spec, len);
			return TG_EXIT_ERROR;
		}
		line_reset(&out);
		int code = w->run != 0 ? w->run(bi, arg, &out)
				       : w->run_str(bi, spec + name_len + 1, len - name_len - 1, &out);
		if (out.len > 0)
			console_send(&out);
		return code;
	}
	if (name_known) {
		report_bad("error bad-workload-argument", spec, len);
		return TG_EXIT_ERROR;
	}
	report_bad("error unknown-workload", spec, len);
	return TG_EXIT_ERROR;
}
