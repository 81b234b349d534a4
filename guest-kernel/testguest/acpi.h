/* SPDX-License-Identifier: Apache-2.0 */
#ifndef DSEC_TESTGUEST_ACPI_H_
#define DSEC_TESTGUEST_ACPI_H_

#include <stdint.h>

#include "bootinfo.h"
#include "console.h"

/* acpi-poweroff: ACPI S5 from the monitor's tables (acpi.c). Returns only
 * if the platform ignored the request (exit code 1, an "error ..." line). */
int workload_acpi_poweroff(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);

#endif /* DSEC_TESTGUEST_ACPI_H_ */
