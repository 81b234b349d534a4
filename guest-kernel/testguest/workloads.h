/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workloads selected by `testguest.run=<name>[:<arg>]` on the command line.
 * Each runs at CPL3 and reports one "result workload=<name> ..." line (or an
 * "error ..." line); some end the VM themselves (fault, triple-fault, reset).
 */
#ifndef DSEC_TESTGUEST_WORKLOADS_H_
#define DSEC_TESTGUEST_WORKLOADS_H_

#include <stddef.h>

#include "bootinfo.h"

/* Runs the workload named by spec[0..len) and returns the exit code. */
int workload_run(const struct tg_boot_info *bi, const char *spec, size_t len);

#endif /* DSEC_TESTGUEST_WORKLOADS_H_ */
