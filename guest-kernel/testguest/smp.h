/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `smp` workload: the BSP starts every AP in the MP table with
 * INIT/STARTUP IPIs (smp.S holds the AP's real-mode trampoline and its CPL0
 * path to CPL3), each AP reports itself, and the BSP counts them.
 */
#ifndef DSEC_TESTGUEST_SMP_H_
#define DSEC_TESTGUEST_SMP_H_

#include <stdint.h>

#include "bootinfo.h"
#include "fmt.h"

/* Workload entry (workloads.c table): fills *out with the result line and
 * returns TG_EXIT_OK if every CPU in the MP table came online. */
int workload_smp(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);

#endif /* DSEC_TESTGUEST_SMP_H_ */
