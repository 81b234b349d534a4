/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-rng (virtio 1.2 section 5.4): one request queue of device-writable
 * buffers that the device fills with entropy; the used length says how
 * many bytes it wrote (possibly fewer than asked).
 */
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

#define RNG_CHUNK 4096u
#define RNG_TIMEOUT_TICKS 1000 /* 10 s without progress */

int workload_rng(const struct tg_boot_info *bi, uint64_t bytes, struct tg_line *out)
{
	static struct virtio_dev d;
	static struct virtq q;
	static uint8_t seen[256];
	struct virtq *qs[1] = { &q };

	if (!pagealloc_init(bi) || !virtio_open(bi, -1, VIRTIO_ID_RNG, 0, &d, out) ||
	    !virtq_setup(&d, &q, 0, 16, out) || !virtio_driver_ok(&d, out))
		return 1;
	uint8_t *buf = page_alloc(RNG_CHUNK);
	if (buf == 0) {
		virtio_error(out, "virtio-out-of-memory", &d);
		return 1;
	}
	/* Every request interrupts; the first one must (proves the IRQ path). */
	virtio_irq_arm(&d, qs, 1);
	uint64_t got = 0, requests = 0, t_progress = tg_ticks;
	while (got < bytes) {
		uint32_t want = bytes - got < RNG_CHUNK ? (uint32_t)(bytes - got) : RNG_CHUNK, len = 0;
		struct virtq_buf in = { buf, want };
		virtq_add(&q, 0, 0, &in, 1, buf);
		virtq_kick(&q);
		if (virtq_wait(&q, &len, RNG_TIMEOUT_TICKS) == 0) {
			virtio_error(out, "rng-timeout", &d);
			line_kv(out, "bytes", got);
			return 1;
		}
		if (requests++ == 0 && !virtio_irq_wait(&d, 100)) {
			virtio_error(out, "virtio-irq-timeout", &d);
			line_kv(out, "irq", d.slot.irq);
			return 1;
		}
		/* Acknowledge so that the next completion raises a new edge. */
		virtio_irq_ack(&d);
		if (len > want)
			len = want;
		for (uint32_t i = 0; i < len; i++)
			seen[buf[i]] = 1;
		got += len;
		if (len > 0)
			t_progress = tg_ticks;
		else if (tg_ticks - t_progress > RNG_TIMEOUT_TICKS) {
			virtio_error(out, "rng-no-entropy", &d);
			line_kv(out, "bytes", got);
			return 1;
		}
	}
	uint32_t distinct = 0;
	for (uint32_t i = 0; i < 256; i++)
		distinct += seen[i];
	uint64_t irqs = virtio_irq_count(&d);
	virtio_irq_quiesce(&d, qs, 1);
	virtio_reset(&d);
	line_reset(out);
	line_str(out, "result workload=rng");
	line_kv(out, "bytes", got);
	line_kv(out, "requests", requests);
	line_kv(out, "distinct", distinct);
	line_kv(out, "irqs", irqs);
	return 0;
}
