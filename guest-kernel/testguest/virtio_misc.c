/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-list (what the command line announces and what each slot is) and
 * virtio-scribble (a malformed available ring, which a device must answer
 * with DEVICE_NEEDS_RESET, virtio 1.2 section 2.1.1, rather than crash).
 */
#include "console.h"
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

static void result_start(struct tg_line *out, const char *name)
{
	line_reset(out);
	line_str(out, "result workload=");
	line_str(out, name);
}

int workload_virtio_list(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	static struct tg_line l;
	const struct virtio_slot *slots;
	size_t n = virtio_slots(bi, &slots);

	(void)arg;
	for (size_t i = 0; i < n; i++) {
		line_reset(&l);
		line_str(&l, "virtio");
		line_kv(&l, "slot", i);
		line_str(&l, " addr=");
		line_hex(&l, slots[i].base);
		line_kv(&l, "irq", slots[i].irq);
		uint32_t magic = virtio_read_magic(&slots[i]);
		if (magic == 0x74726976u) {
			line_kv(&l, "device_id", virtio_read_device_id(&slots[i]));
			line_kv(&l, "version", virtio_read_version(&slots[i]));
		} else {
			line_str(&l, " magic=");
			line_hex(&l, magic);
		}
		console_send(&l);
	}
	result_start(out, "virtio-list");
	line_kv(out, "count", n);
	return 0;
}

/* The driver-to-device queue, which a device processes on notification:
 * receive queues (net 0, vsock 0) are only read when a packet arrives. */
static uint16_t request_queue(uint32_t device_id)
{
	return (device_id == VIRTIO_ID_NET || device_id == VIRTIO_ID_VSOCK) ? 1 : 0;
}

int workload_virtio_scribble(const struct tg_boot_info *bi, uint64_t slot, struct tg_line *out)
{
	static struct virtio_dev d;
	static struct virtq qs[2];

	if (!pagealloc_init(bi) || slot >= VIRTIO_MAX_SLOTS ||
	    !virtio_open(bi, (int)slot, 0, 0, &d, out))
		return 1;
	uint16_t target = request_queue(d.device_id);
	for (uint16_t i = 0; i <= target; i++)
		if (!virtq_setup(&d, &qs[i], i, 256, out))
			return 1;
	if (!virtio_driver_ok(&d, out))
		return 1;
	struct virtq *q = &qs[target];
	struct virtq *armed[2] = { &qs[0], &qs[1] };
	virtio_irq_arm(&d, armed, target + 1u);
	/* Section 2.7.6 / 2.7.13: ring entries name a head descriptor below
	 * the queue size; q->size is one past the last. */
	virtq_publish_raw(q, q->size);
	uint64_t t0 = tg_ticks;
	bool needs_reset = false;
	while (tg_ticks - t0 < 200 && !(needs_reset = virtio_needs_reset(&d)))
		__asm__ volatile("pause");
	uint32_t status = virtio_status(&d);
	result_start(out, "virtio-scribble");
	line_kv(out, "slot", slot);
	line_kv(out, "device_id", d.device_id);
	line_kv(out, "queue", target);
	line_kv(out, "head", q->size);
	line_str(out, " status=");
	line_hex(out, status);
	line_kv(out, "needs_reset", needs_reset ? 1 : 0);
	line_kv(out, "irqs", virtio_irq_count(&d));
	virtio_irq_quiesce(&d, armed, target + 1u);
	virtio_reset(&d);
	return needs_reset ? 0 : 1;
}
