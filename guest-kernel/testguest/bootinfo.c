/* SPDX-License-Identifier: Apache-2.0 */
#include "bootinfo.h"

#include "console.h"
#include "fmt.h"
#include "layout.h"

/* Linux boot protocol, struct boot_params (Documentation/arch/x86/zero-page.rst). */
#define ZP_EXT_CMD_LINE_PTR 0x0c8 /* u32: bits 63:32 of the command line address */
#define ZP_E820_ENTRIES 0x1e8     /* u8 */
#define ZP_CMD_LINE_PTR 0x228     /* u32 (setup header field) */
#define ZP_E820_TABLE 0x2d0       /* struct boot_e820_entry[128], 20 bytes each */
#define ZP_E820_ENTRY_SIZE 20

/* xen/include/public/arch-x86/hvm/start_info.h */
#define HVM_START_MAGIC 0x336ec578u
#define HVM_MAGIC 0
#define HVM_VERSION 4
#define HVM_CMDLINE_PADDR 24
#define HVM_MEMMAP_PADDR 40  /* version >= 1 */
#define HVM_MEMMAP_ENTRIES 48 /* version >= 1 */
#define HVM_MEMMAP_ENTRY_SIZE 24 /* addr u64, size u64, type u32, reserved u32 */

/* Only the low 4 GiB is mapped (tables.S). */
#define MAPPED_LIMIT 0x100000000ull

static uint64_t ld64(uint64_t pa)
{
	uint64_t v;
	__builtin_memcpy(&v, (const void *)(uintptr_t)pa, sizeof(v));
	return v;
}

static uint32_t ld32(uint64_t pa)
{
	uint32_t v;
	__builtin_memcpy(&v, (const void *)(uintptr_t)pa, sizeof(v));
	return v;
}

static uint8_t ld8(uint64_t pa)
{
	return *(const volatile uint8_t *)(uintptr_t)pa;
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

static const char *cmdline_at(uint64_t pa)
{
	if (pa == 0 || pa >= MAPPED_LIMIT)
		return "";
	return (const char *)(uintptr_t)pa;
}

static bool parse_linux64(uint64_t zp, struct tg_boot_info *bi)
{
	uint32_t n = ld8(zp + ZP_E820_ENTRIES);

	bi->cmdline = cmdline_at(((uint64_t)ld32(zp + ZP_EXT_CMD_LINE_PTR) << 32) |
				 ld32(zp + ZP_CMD_LINE_PTR));
	if (n > TG_MAX_E820)
		n = TG_MAX_E820;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t e = zp + ZP_E820_TABLE + (uint64_t)i * ZP_E820_ENTRY_SIZE;
		bi->e820[i].addr = ld64(e);
		bi->e820[i].size = ld64(e + 8);
		bi->e820[i].type = ld32(e + 16);
	}
	bi->e820_count = n;
	return true;
}

static bool parse_pvh(uint64_t si, struct tg_boot_info *bi)
{
	uint32_t magic = ld32(si + HVM_MAGIC);

	if (magic != HVM_START_MAGIC) {
		report_error("pvh-magic", magic);
		return false;
	}
	bi->cmdline = cmdline_at(ld64(si + HVM_CMDLINE_PADDR));
	bi->e820_count = 0;
	if (ld32(si + HVM_VERSION) >= 1) {
		uint64_t map = ld64(si + HVM_MEMMAP_PADDR);
		uint32_t n = ld32(si + HVM_MEMMAP_ENTRIES);

		if (map == 0 || map >= MAPPED_LIMIT)
			n = 0;
		if (n > TG_MAX_E820)
			n = TG_MAX_E820;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t e = map + (uint64_t)i * HVM_MEMMAP_ENTRY_SIZE;
			bi->e820[i].addr = ld64(e);
			bi->e820[i].size = ld64(e + 8);
			bi->e820[i].type = ld32(e + 16);
		}
		bi->e820_count = n;
	}
	return true;
}

static bool checksum_ok(uint64_t pa, uint32_t len)
{
	uint8_t sum = 0;

	for (uint32_t i = 0; i < len; i++)
		sum = (uint8_t)(sum + ld8(pa + i));
	return sum == 0;
}

/* Intel MultiProcessor Specification 1.4, section 4.1: the 16-byte floating
 * pointer "_MP_" lies on a 16-byte boundary in the last KiB of base memory or
 * the BIOS ROM area; its PHYSPTR (offset 4) points at the "PCMP" table. */
static uint64_t mp_find(uint64_t start, uint64_t end)
{
	for (uint64_t pa = start; pa + 16 <= end; pa += 16)
		if (ld32(pa) == 0x5f504d5fu /* "_MP_" */ && checksum_ok(pa, 16))
			return pa;
	return 0;
}

/* Records enabled processor entries (type 0, 20 bytes: APIC id at offset 1,
 * flags at 3 with bit 0 = EN and bit 1 = BP); other entry types are 8 bytes
 * (MP spec section 4.3.1). Returns the number of enabled processors, or 1
 * without a usable table. */
static uint32_t mp_scan_cpus(struct tg_boot_info *bi)
{
	uint64_t fp = mp_find(0x9fc00, 0xa0000);
	uint64_t table, p, end;
	uint32_t count = 0, entries;

	if (fp == 0)
		fp = mp_find(0xf0000, 0x100000);
	if (fp == 0)
		return 1;
	table = ld32(fp + 4);
	if (table == 0 || ld32(table) != 0x504d4350u /* "PCMP" */)
		return 1;
	entries = *(const volatile uint16_t *)(uintptr_t)(table + 0x22);
	p = table + 0x2c;
	end = table + *(const volatile uint16_t *)(uintptr_t)(table + 4);
	for (uint32_t i = 0; i < entries && p < end; i++) {
		if (ld8(p) == 0) {
			uint8_t flags = ld8(p + 3);

			if (flags & 1) {
				if (bi->mp_cpu_count < TG_MP_MAX_CPUS)
					bi->mp_apic_ids[bi->mp_cpu_count++] = ld8(p + 1);
				if (flags & 2) {
					bi->mp_has_bsp = true;
					bi->mp_bsp_apic_id = ld8(p + 1);
				}
				count++;
			}
			p += 20;
		} else {
			p += 8;
		}
	}
	return count ? count : 1;
}

bool bootinfo_parse(uint32_t protocol, uint64_t ptr, struct tg_boot_info *bi)
{
	bi->protocol = protocol;
	bi->cmdline = "";
	bi->e820_count = 0;
	bi->cpus = 1;
	bi->mp_cpu_count = 0;
	bi->mp_has_bsp = false;
	bi->mp_bsp_apic_id = 0;
	if (ptr == 0 || ptr >= MAPPED_LIMIT) {
		report_error("boot-info-address", ptr);
		return false;
	}
	if (!(protocol == TG_BOOT_PVH ? parse_pvh(ptr, bi) : parse_linux64(ptr, bi)))
		return false;
	bi->cpus = mp_scan_cpus(bi);
	return true;
}

void bootinfo_report(const struct tg_boot_info *bi)
{
	static struct tg_line l;

	console_send_str(bi->protocol == TG_BOOT_PVH ? "boot protocol=pvh"
						     : "boot protocol=linux64");
	line_reset(&l);
	line_str(&l, "cmdline text=");
	line_str(&l, bi->cmdline);
	console_send(&l);

	line_reset(&l);
	line_str(&l, "e820");
	line_kv(&l, "count", bi->e820_count);
	console_send(&l);
	for (uint32_t i = 0; i < bi->e820_count; i++) {
		line_reset(&l);
		line_str(&l, "e820");
		line_kv(&l, "index", i);
		line_str(&l, " addr=");
		line_hex(&l, bi->e820[i].addr);
		line_str(&l, " size=");
		line_hex(&l, bi->e820[i].size);
		line_kv(&l, "type", bi->e820[i].type);
		console_send(&l);
	}

	line_reset(&l);
	line_str(&l, "cpus");
	line_kv(&l, "count", bi->cpus);
	console_send(&l);
}

bool bootinfo_ram_covers(const struct tg_boot_info *bi, uint64_t addr, uint64_t size)
{
	for (uint32_t i = 0; i < bi->e820_count; i++) {
		const struct tg_mem_region *r = &bi->e820[i];

		if (r->type == TG_E820_RAM && addr >= r->addr && addr - r->addr <= r->size &&
		    size <= r->size - (addr - r->addr))
			return true;
	}
	return false;
}
