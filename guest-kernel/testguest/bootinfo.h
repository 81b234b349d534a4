/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the monitor told the guest: command line, memory map, CPU count,
 * read from the Linux zero page or the PVH hvm_start_info (and the MP table).
 */
#ifndef DSEC_TESTGUEST_BOOTINFO_H_
#define DSEC_TESTGUEST_BOOTINFO_H_

#include <stdbool.h>
#include <stdint.h>

#define TG_MAX_E820 128 /* boot_params.e820_table has 128 slots */
#define TG_E820_RAM 1
#define TG_MP_MAX_CPUS 256 /* MP table APIC ids are 8 bits wide */

struct tg_mem_region {
	uint64_t addr;
	uint64_t size;
	uint32_t type;
};

struct tg_boot_info {
	uint32_t protocol; /* TG_BOOT_LINUX64 or TG_BOOT_PVH */
	const char *cmdline; /* never NULL; "" when absent */
	uint32_t e820_count;
	struct tg_mem_region e820[TG_MAX_E820];
	uint32_t cpus; /* enabled processors in the MP table, else 1 */
	/* Their local APIC ids, in table order (the first TG_MP_MAX_CPUS), and
	 * whether the table names one of them the bootstrap processor. Without
	 * an MP table: none. */
	uint32_t mp_cpu_count;
	uint8_t mp_apic_ids[TG_MP_MAX_CPUS];
	bool mp_has_bsp;
	uint8_t mp_bsp_apic_id;
};

/* Fills bi from the boot info at physical address ptr. Returns false, with
 * an "error ..." line already reported, if the structure is unusable. */
bool bootinfo_parse(uint32_t protocol, uint64_t ptr, struct tg_boot_info *bi);
/* Emits the boot, cmdline, e820 and cpus lines. */
void bootinfo_report(const struct tg_boot_info *bi);
/* True if [addr, addr + size) lies inside one RAM entry of the map. */
bool bootinfo_ram_covers(const struct tg_boot_info *bi, uint64_t addr, uint64_t size);

#endif /* DSEC_TESTGUEST_BOOTINFO_H_ */
