/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory workloads (memload.c): they take their pages from the page
 * allocator one at a time and keep the balloon service (balloon.h) running
 * while they work, calling balloon_poll between pages and on every tick.
 * README.md, "Memory workloads and the balloon service".
 */
#ifndef DSEC_TESTGUEST_MEMLOAD_H_
#define DSEC_TESTGUEST_MEMLOAD_H_

#include <stddef.h>
#include <stdint.h>

#include "bootinfo.h"
#include "fmt.h"

/* touch:MiB — allocates and writes MiB, page by page. */
int workload_touch(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out);
/* idle:SECONDS — services the balloon, halting between ticks; 0 = until the
 * host stops the VM. */
int workload_idle(const struct tg_boot_info *bi, uint64_t seconds, struct tg_line *out);
/* phases:TOUCH_MIB,HOT_MIB,HOT_PASSES,IDLE_S */
int workload_phases(const struct tg_boot_info *bi, const char *arg, size_t len,
		    struct tg_line *out);

#endif /* DSEC_TESTGUEST_MEMLOAD_H_ */
