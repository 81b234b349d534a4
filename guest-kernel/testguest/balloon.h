/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The balloon service (virtio_balloon.c): the virtio-balloon driver that
 * runs behind the memory workloads (touch, idle, phases). It negotiates
 * VIRTIO_BALLOON_F_STATS_VQ, F_DEFLATE_ON_OOM and F_REPORTING when offered
 * and, from balloon_poll (at most once per timer tick):
 *   - follows num_pages (inflate from the page allocator / deflate into it);
 *   - returns fresh statistics whenever the device gives the stats buffer
 *     back;
 *   - reports free pages once at least 4 MiB of them are unreported (one
 *     chain in flight at a time, completed by a later poll).
 * When the page allocator runs dry it deflates (deflate-on-OOM) and then
 * leaves the target alone until the host changes it.
 */
#ifndef DSEC_TESTGUEST_BALLOON_H_
#define DSEC_TESTGUEST_BALLOON_H_

#include <stdbool.h>
#include <stdint.h>

#include "bootinfo.h"
#include "fmt.h"

/* Starts the service on the first virtio-balloon device, if there is one,
 * and follows its initial target (up to what the allocator can give, at
 * most 10 s) before returning. True with the service inactive when there is
 * no balloon device; false with an `error ...` line in out on a device
 * failure. Idempotent. */
bool balloon_start(const struct tg_boot_info *bi, struct tg_line *out);
/* Services the device if a timer tick passed since the last call: cheap
 * otherwise, so workloads call it between pages. A device failure prints
 * an `error balloon-...` line and stops the service (balloon_failed). */
void balloon_poll(void);
/* Waits for the free page report in flight, if any, so that
 * balloon_reported_pages counts it (before a result line). */
void balloon_flush(void);
bool balloon_active(void);
bool balloon_failed(void);
/* Pages in the balloon (the driver's `actual`). */
uint64_t balloon_held_pages(void);
/* Pages sent on the reporting queue and completed by the device. */
uint64_t balloon_reported_pages(void);
/* Pages deflated because the allocator ran out. */
uint64_t balloon_oom_deflated_pages(void);

#endif /* DSEC_TESTGUEST_BALLOON_H_ */
