/* SPDX-License-Identifier: Apache-2.0 */
/*
 * acpi-poweroff: powers the VM off the way an ACPI operating system does,
 * from the tables alone (ACPI 6.4): find the RSDP in 0xE0000-0xFFFFF
 * (section 5.2.5.1) with valid checksums, follow the XSDT to the FADT
 * ("FACP"), take PM1a_CNT_BLK from it and SLP_TYPa from the DSDT's \_S5_
 * package, then write SLP_TYP and SLP_TYP | SLP_EN to PM1a_CNT (section
 * 4.8.3.2.1), as Linux's acpi_hw_legacy_sleep does. All at CPL3: the tables
 * are plain memory, the port writes go through user call 8.
 */
#include "acpi.h"

#include "fmt.h"
#include "layout.h"
#include "syscall.h"

static uint8_t sum8(const uint8_t *p, size_t n)
{
	uint8_t s = 0;

	for (size_t i = 0; i < n; i++)
		s = (uint8_t)(s + p[i]);
	return s;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

/* A table at gpa with `sig` whose checksum over its length is 0; or 0.
 * Only tables below 1 MiB are accepted (where the monitor puts them). */
static const uint8_t *table_at(uint64_t gpa, const char *sig)
{
	if (gpa < 0x80000 || gpa >= 0x100000 - 36)
		return 0;
	const uint8_t *t = (const uint8_t *)(uintptr_t)gpa;
	uint32_t len = rd32(t + 4);

	if (!tg_memeq(t, sig, 4) || len < 36 || gpa + len > 0x100000 || sum8(t, len) != 0)
		return 0;
	return t;
}

static const uint8_t *find_rsdp(void)
{
	for (uint64_t a = 0xE0000; a < 0x100000; a += 16) {
		const uint8_t *p = (const uint8_t *)(uintptr_t)a;

		if (tg_memeq(p, "RSD PTR ", 8) && sum8(p, 20) == 0 && p[15] >= 2 &&
		    sum8(p, 36) == 0)
			return p;
	}
	return 0;
}

static int fail(struct tg_line *out, const char *what)
{
	line_reset(out);
	line_str(out, "error ");
	line_str(out, what);
	return TG_EXIT_ERROR;
}

int workload_acpi_poweroff(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	(void)bi;
	(void)arg;
	const uint8_t *rsdp = find_rsdp();
	if (rsdp == 0)
		return fail(out, "acpi-no-rsdp");
	const uint8_t *xsdt = table_at(rd64(rsdp + 24), "XSDT");
	if (xsdt == 0)
		return fail(out, "acpi-bad-xsdt");
	const uint8_t *fadt = 0;
	for (uint32_t off = 36; off + 8 <= rd32(xsdt + 4) && fadt == 0; off += 8)
		fadt = table_at(rd64(xsdt + off), "FACP");
	if (fadt == 0 || rd32(fadt + 4) < 148)
		return fail(out, "acpi-no-fadt");
	const uint32_t pm1a_cnt = rd32(fadt + 64);
	const uint64_t dsdt_gpa = rd64(fadt + 140) != 0 ? rd64(fadt + 140) : rd32(fadt + 40);
	const uint8_t *dsdt = table_at(dsdt_gpa, "DSDT");
	if (pm1a_cnt == 0 || pm1a_cnt > 0xffff || dsdt == 0)
		return fail(out, "acpi-no-pm1a-or-dsdt");
	/* NameOp "_S5_" PackageOp PkgLength NumElements, then SLP_TYPa as a
	 * BytePrefix constant, ZeroOp or OneOp (ACPI 6.4 section 20.2.3). */
	int slp_typ = -1;
	const uint32_t len = rd32(dsdt + 4);
	for (uint32_t i = 36; i + 8 <= len && slp_typ < 0; i++) {
		const uint8_t *p = dsdt + i;
		if (p[0] != 0x08 || !tg_memeq(p + 1, "_S5_", 4) || p[5] != 0x12)
			continue;
		const uint8_t *e = p + 8; /* after PkgLength (one byte) and NumElements */
		if (e[0] == 0x0A && i + 10 <= len)
			slp_typ = e[1];
		else if (e[0] == 0x00 || e[0] == 0x01)
			slp_typ = e[0];
	}
	if (slp_typ < 0 || slp_typ > 7)
		return fail(out, "acpi-no-s5");

	line_reset(out);
	line_str(out, "acpi rsdp=");
	line_hex(out, (uint64_t)(uintptr_t)rsdp);
	line_str(out, " pm1a_cnt=");
	line_hex(out, pm1a_cnt);
	line_kv(out, "slp_typ", (uint64_t)slp_typ);
	console_send(out);

	const uint16_t value = (uint16_t)((slp_typ << 10) | (1u << 13));
	sys_outb((uint16_t)pm1a_cnt, (uint8_t)(slp_typ << 10));   /* SLP_TYP first */
	sys_outb((uint16_t)(pm1a_cnt + 1), (uint8_t)((slp_typ << 10) >> 8));
	sys_outb((uint16_t)pm1a_cnt, (uint8_t)value);              /* then with SLP_EN */
	sys_outb((uint16_t)(pm1a_cnt + 1), (uint8_t)(value >> 8));
	/* The platform powers off on the write; still here means it did not. */
	return fail(out, "acpi-poweroff-ignored");
}
