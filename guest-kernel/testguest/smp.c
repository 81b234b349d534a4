/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SMP bring-up, BSP and AP sides, all at CPL3 (natively fast on PVM hosts).
 *
 * The BSP follows the universal start-up algorithm of the MP spec (appendix
 * B.4) and Intel SDM vol. 3 section 8.4.4.1: an INIT IPI to each AP, a 10 ms
 * wait, a STARTUP IPI whose vector is the trampoline's page number, a wait of
 * at least 200 us, and a second STARTUP IPI to any AP that has not shown up
 * yet (a STARTUP IPI is ignored by a CPU that is no longer waiting for one,
 * so the second cannot restart an AP that is already running). IPIs are sent
 * by writing the xAPIC ICR (SDM 10.6.1) directly from CPL3: the LAPIC page is
 * mapped with U=1 like every other page (tables.S), and KVM's in-kernel
 * LAPIC handles a CPL3 access like any other (measured on the PVM host: no
 * user-call service is needed for IPIs).
 *
 * Waits are counted in BSP timer ticks (100 Hz), since the TSC rate is not
 * known: "at least 10 ms" is two tick edges, "at least 200 us" one.
 */
#include "smp.h"

#include <stdbool.h>

#include "console.h"
#include "layout.h"
#include "syscall.h"

extern volatile uint64_t tg_ticks;              /* main.c, IRQ0 on the BSP */
extern const char tg_trampoline[], tg_trampoline_end[]; /* smp.S */

__attribute__((noreturn)) void tg_ap_main(uint64_t apic_id);

/* ICR low word (SDM 10.6.1, figure 10-12): delivery mode 101 = INIT,
 * 110 = Start-Up, level "assert" (bit 14), edge-triggered, physical
 * destination, no shorthand; bit 12 is the delivery status (send pending). */
#define ICR_INIT 0x00004500u
#define ICR_STARTUP 0x00004600u
#define ICR_SEND_PENDING (1u << 12)

#define INIT_WAIT_TICKS 2     /* >= 10 ms after INIT */
#define SIPI_WAIT_TICKS 1     /* >= 200 us after each STARTUP */
#define ONLINE_WAIT_TICKS 200 /* 2 s for all APs to report */

/* Written by each AP once it runs at CPL3; read by the BSP. */
static volatile uint32_t ap_started[TG_MAX_CPUS];
/* APs that have reported "cpu id=K online" (incremented after the report,
 * so when the BSP sees the count, the lines are out). */
static volatile uint32_t ap_online;

static volatile uint32_t *lapic_reg(uint32_t off)
{
	return (volatile uint32_t *)(uintptr_t)(TG_LAPIC_BASE + off);
}

static uint32_t lapic_id(void)
{
	return *lapic_reg(TG_LAPIC_ID) >> 24;
}

static void wait_ticks(uint64_t n)
{
	uint64_t t0 = tg_ticks;

	while (tg_ticks - t0 < n)
		__asm__ volatile("pause");
}

/* Returns false if the LAPIC still shows the IPI pending after a bounded
 * poll (it never should with an emulated LAPIC). */
static bool send_ipi(uint32_t apic_id, uint32_t icr_lo)
{
	/* The trampoline copy and the flags must be globally visible before the
	 * AP can run; x86 keeps stores in order (SDM 8.2.2), the fence also
	 * orders them against the uncached ICR write. */
	__asm__ volatile("mfence" ::: "memory");
	*lapic_reg(TG_LAPIC_ICR_HI) = apic_id << 24;
	*lapic_reg(TG_LAPIC_ICR_LO) = icr_lo;
	for (uint32_t i = 0; i < 1000000; i++) {
		if ((*lapic_reg(TG_LAPIC_ICR_LO) & ICR_SEND_PENDING) == 0)
			return true;
		__asm__ volatile("pause");
	}
	return false;
}

static void report_online(uint32_t apic_id, struct tg_line *l)
{
	line_reset(l);
	line_str(l, "cpu");
	line_kv(l, "id", apic_id);
	line_str(l, " online");
	console_send(l);
}

static void report_error(const char *what, uint64_t value)
{
	static struct tg_line l;

	line_reset(&l);
	line_str(&l, "error ");
	line_str(&l, what);
	line_str(&l, " value=");
	line_hex(&l, value);
	console_send(&l);
}

int workload_smp(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	static struct tg_line l;
	static uint8_t targets[TG_MP_MAX_CPUS];
	const uint32_t self = lapic_id();
	const uint32_t tramp_len = (uint32_t)(tg_trampoline_end - tg_trampoline);
	uint32_t n = 0;
	bool ok = true;

	(void)arg;
	report_online(self, &l);
	for (uint32_t i = 0; i < bi->mp_cpu_count; i++) {
		uint32_t id = bi->mp_apic_ids[i];

		if (id == self)
			continue;
		if (id >= TG_MAX_CPUS) {
			/* No TSS or stacks for it (layout.h); it counts as offline. */
			report_error("smp-apic-id-unsupported", id);
			continue;
		}
		targets[n++] = (uint8_t)id;
	}

	if (n > 0 && !bootinfo_ram_covers(bi, TG_TRAMPOLINE_BASE, 4096)) {
		report_error("smp-trampoline-not-ram", TG_TRAMPOLINE_BASE);
		n = 0;
		ok = false;
	}
	if (n > 0) {
		memcpy((void *)(uintptr_t)TG_TRAMPOLINE_BASE, tg_trampoline, tramp_len);
		for (uint32_t i = 0; i < n; i++)
			ok &= send_ipi(targets[i], ICR_INIT);
		wait_ticks(INIT_WAIT_TICKS);
		for (int round = 0; round < 2; round++) {
			for (uint32_t i = 0; i < n; i++)
				if (!ap_started[targets[i]])
					ok &= send_ipi(targets[i],
						       ICR_STARTUP | (TG_TRAMPOLINE_BASE >> 12));
			wait_ticks(SIPI_WAIT_TICKS);
		}
		if (!ok)
			report_error("smp-ipi-stuck", *lapic_reg(TG_LAPIC_ICR_LO));
	}

	uint64_t t0 = tg_ticks;
	while (ap_online < n && tg_ticks - t0 < ONLINE_WAIT_TICKS)
		__asm__ volatile("pause");
	uint32_t online = 1 + ap_online;

	line_reset(out);
	line_str(out, "result workload=smp");
	line_kv(out, "cpus", bi->cpus);
	line_kv(out, "online", online);
	return ok && online == bi->cpus ? TG_EXIT_OK : TG_EXIT_ERROR;
}

/*
 * An AP's first CPL3 code (smp.S tg_ap64 IRETQs here, IF clear, on this AP's
 * own 8 KiB stack, which holds the report line). It touches no PIC, PIT or
 * timer: those belong to the BSP.
 */
void tg_ap_main(uint64_t apic_id)
{
	struct tg_line l;

	ap_started[apic_id] = 1;
	report_online((uint32_t)apic_id, &l);
	__atomic_fetch_add(&ap_online, 1, __ATOMIC_RELEASE);
	sys_park();
}
