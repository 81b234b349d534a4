/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPL3 entry points, reached by IRETQ from boot.S (tg_user_main) and from the
 * exception path in head.S (tg_fault_report). Everything here runs natively
 * on PVM hosts, unlike CPL0 code.
 */
#include <stdint.h>

#include "bootinfo.h"
#include "console.h"
#include "fmt.h"
#include "layout.h"
#include "workloads.h"

volatile uint64_t tg_ticks;

__attribute__((noreturn)) void tg_user_main(uint64_t protocol, uint64_t info);
__attribute__((noreturn)) void tg_fault_report(uint64_t vector, uint64_t error, uint64_t rip,
					       uint64_t cpl);

/* Finds the value of the `testguest.run=` word; "boot" if absent. */
static const char *find_run(const char *cmdline, size_t *len)
{
	static const char kKey[] = "testguest.run=";
	const size_t key_len = sizeof(kKey) - 1;
	const char *p = cmdline;

	while (*p != '\0') {
		while (*p == ' ')
			p++;
		const char *word = p;
		while (*p != '\0' && *p != ' ')
			p++;
		if ((size_t)(p - word) >= key_len && tg_memeq(word, kKey, key_len)) {
			*len = (size_t)(p - word) - key_len;
			return word + key_len;
		}
	}
	*len = 4;
	return "boot";
}

void tg_user_main(uint64_t protocol, uint64_t info)
{
	static struct tg_boot_info bi;
	static struct tg_line l;
	size_t run_len;
	int code;

	console_event(DSEC_TESTDEV_EVENT_FIRST_USER);
	if (!bootinfo_parse((uint32_t)protocol, info, &bi))
		console_shutdown(TG_EXIT_ERROR);
	bootinfo_report(&bi);

	const char *run = find_run(bi.cmdline, &run_len);
	code = workload_run(&bi, run, run_len);

	line_reset(&l);
	line_str(&l, "ticks");
	line_kv(&l, "count", tg_ticks);
	console_send(&l);
	console_event(DSEC_TESTDEV_EVENT_WORKLOAD_DONE);
	console_shutdown((uint32_t)code);
}

void tg_fault_report(uint64_t vector, uint64_t error, uint64_t rip, uint64_t cpl)
{
	static struct tg_line l;

	line_reset(&l);
	line_str(&l, "fault");
	line_kv(&l, "vector", vector);
	line_str(&l, " error=");
	line_hex(&l, error);
	line_str(&l, " rip=");
	line_hex(&l, rip);
	line_kv(&l, "cpl", cpl);
	console_send(&l);
	console_shutdown(TG_EXIT_FAULT);
}
