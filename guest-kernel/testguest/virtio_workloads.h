/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workloads that drive virtio devices (README.md, "virtio workloads"). Each
 * fills out with its `result workload=...` or `error ...` line and returns
 * the exit code, like the workloads in workloads.c.
 */
#ifndef DSEC_TESTGUEST_VIRTIO_WORKLOADS_H_
#define DSEC_TESTGUEST_VIRTIO_WORKLOADS_H_

#include <stddef.h>
#include <stdint.h>

#include "bootinfo.h"
#include "fmt.h"

int workload_virtio_list(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);
int workload_virtio_scribble(const struct tg_boot_info *bi, uint64_t slot, struct tg_line *out);
int workload_rng(const struct tg_boot_info *bi, uint64_t bytes, struct tg_line *out);
/* Touches MiB, frees it, then inflates/deflates to the device's target. */
int workload_balloon(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out);
/* balloon, then prints `balloon reached`, waits for target 0, deflates and
 * writes the returned pages. */
int workload_balloon_cycle(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out);
/* Hostile: one inflate buffer holding PFN twice. */
int workload_balloon_pfn(const struct tg_boot_info *bi, uint64_t pfn, struct tg_line *out);
int workload_blk_test(const struct tg_boot_info *bi, uint64_t sectors, struct tg_line *out);
int workload_blk_write_ro(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);
int workload_blk_read(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out);
/* blk-read without an argument: the whole disk into guest RAM + checksum. */
int workload_blk_read_image(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);
int workload_pmem_read(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out);
int workload_pmem_write(const struct tg_boot_info *bi, uint64_t offset, struct tg_line *out);
/* arg: "MODE,MiB" */
int workload_blk_bench(const struct tg_boot_info *bi, const char *arg, size_t len,
		       struct tg_line *out);
int workload_net_echo(const struct tg_boot_info *bi, uint64_t count, struct tg_line *out);
int workload_net_send(const struct tg_boot_info *bi, uint64_t count, struct tg_line *out);
int workload_vsock_echo(const struct tg_boot_info *bi, uint64_t port, struct tg_line *out);
/* arg: "PORT,BYTES" */
int workload_vsock_send(const struct tg_boot_info *bi, const char *arg, size_t len,
			struct tg_line *out);

#endif /* DSEC_TESTGUEST_VIRTIO_WORKLOADS_H_ */
