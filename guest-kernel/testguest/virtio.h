/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-mmio (version 2 only) driver core and split virtqueues, for the
 * device drivers that run at CPL3 (virtio_rng.c, virtio_balloon.c, virtio_blk.c,
 * virtio_net.c, virtio_vsock.c). Section numbers refer to the virtio 1.2
 * specification.
 *
 * Devices are found the way Linux finds them without a device tree: one
 * `virtio_mmio.device=<size>@<base>:<irq>` word per device on the kernel
 * command line; "slot" i is the i-th such word.
 *
 * Everything here runs at CPL3: registers are MMIO in pages with U=1, the
 * rings are ordinary RAM. Only the IRQ mask (a user call) and the interrupt
 * count (head.S) involve CPL0.
 */
#ifndef DSEC_TESTGUEST_VIRTIO_H_
#define DSEC_TESTGUEST_VIRTIO_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootinfo.h"
#include "fmt.h"

#define VIRTIO_MAX_SLOTS 16

/* Device IDs (section 5). */
#define VIRTIO_ID_NET 1
#define VIRTIO_ID_BLOCK 2
#define VIRTIO_ID_RNG 4
#define VIRTIO_ID_BALLOON 5
#define VIRTIO_ID_VSOCK 19
#define VIRTIO_ID_PMEM 27

/* Reserved feature bits (section 6). */
#define VIRTIO_F_VERSION_1 (1ull << 32)

/* Device status bits (section 2.1). */
#define VIRTIO_STATUS_ACKNOWLEDGE 1u
#define VIRTIO_STATUS_DRIVER 2u
#define VIRTIO_STATUS_DRIVER_OK 4u
#define VIRTIO_STATUS_FEATURES_OK 8u
#define VIRTIO_STATUS_DEVICE_NEEDS_RESET 64u
#define VIRTIO_STATUS_FAILED 128u

/* Split virtqueue layout (section 2.7). */
#define VIRTQ_DESC_F_NEXT 1
#define VIRTQ_DESC_F_WRITE 2
#define VIRTQ_AVAIL_F_NO_INTERRUPT 1
#define VIRTQ_USED_F_NO_NOTIFY 1

struct virtq_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

struct virtq_avail {
	uint16_t flags;
	uint16_t idx;
	uint16_t ring[];
};

struct virtq_used_elem {
	uint32_t id;
	uint32_t len;
};

struct virtq_used {
	uint16_t flags;
	uint16_t idx;
	struct virtq_used_elem ring[];
};

struct virtio_slot {
	uint64_t base;
	uint64_t size;
	uint32_t irq;
};

struct virtio_dev;

struct virtq {
	struct virtio_dev *dev;
	uint16_t index;
	uint16_t size;
	volatile struct virtq_desc *desc;
	volatile struct virtq_avail *avail;
	volatile struct virtq_used *used;
	uint16_t free_head;  /* free descriptors are linked through .next */
	uint16_t num_free;
	uint16_t avail_idx;  /* our copy of avail->idx */
	uint16_t last_used;  /* next used->ring entry to consume */
	void **cookie;       /* per head descriptor, returned by virtq_get */
};

struct virtio_dev {
	uint32_t slot_index;
	struct virtio_slot slot;
	volatile uint8_t *regs;
	uint32_t device_id;
	uint64_t features;   /* negotiated */
	uint64_t irq_base;   /* tg_irq_counts[irq] at virtio_open */
	uint64_t irq_waited; /* virtio_irq_count at the last arm/wait */
};

/* One buffer of a descriptor chain. */
struct virtq_buf {
	const void *addr;
	uint32_t len;
};

/* The `virtio_mmio.device=` words of the command line, in order. */
size_t virtio_slots(const struct tg_boot_info *bi, const struct virtio_slot **slots);

/* Raw identification registers of a slot (no state change). */
uint32_t virtio_read_magic(const struct virtio_slot *s);
uint32_t virtio_read_version(const struct virtio_slot *s);
uint32_t virtio_read_device_id(const struct virtio_slot *s);

/*
 * Section 3.1.1 up to FEATURES_OK on slot slot_index (or, if slot_index is
 * negative, on the first slot whose DeviceID is want_id; want_id 0 accepts
 * any device). Accepts VIRTIO_F_VERSION_1 and the bits in driver_features
 * that the device offers. On failure fills err with an `error ...` line and
 * returns false (the device is then left with FAILED set).
 */
bool virtio_open(const struct tg_boot_info *bi, int slot_index, uint32_t want_id,
		 uint64_t driver_features, struct virtio_dev *d, struct tg_line *err);
/* Section 4.2.3.2: sets up queue index with the largest power-of-two size
 * <= min(QueueNumMax, max_size). */
bool virtq_setup(struct virtio_dev *d, struct virtq *q, uint16_t index, uint16_t max_size,
		 struct tg_line *err);
/* Sets DRIVER_OK; returns false (with err) if the device then reports
 * DEVICE_NEEDS_RESET or FAILED. */
bool virtio_driver_ok(struct virtio_dev *d, struct tg_line *err);
uint32_t virtio_status(const struct virtio_dev *d);
bool virtio_needs_reset(const struct virtio_dev *d);
/* Writes 0 to Status: the device drops its queues (section 2.4). */
void virtio_reset(struct virtio_dev *d);

/* Device configuration space (section 4.2.2 Config, with the
 * ConfigGeneration retry of section 2.5.1 for reads wider than 32 bits). */
void virtio_config_read(const struct virtio_dev *d, uint32_t off, void *buf, uint32_t len);
uint64_t virtio_config_read64(const struct virtio_dev *d, uint32_t off);
uint32_t virtio_config_read32(const struct virtio_dev *d, uint32_t off);
/* A driver-writable 32-bit config field (e.g. the balloon's `actual`). */
void virtio_config_write32(struct virtio_dev *d, uint32_t off, uint32_t v);

/*
 * Interrupts. The device's IRQ reaches head.S through the 8259A, which
 * counts it in tg_irq_counts. virtio_irq_arm unmasks the line and lets the
 * queues interrupt; virtio_irq_wait waits (bounded, in 10 ms ticks) until
 * the line fired since the last arm/wait and acknowledges InterruptStatus
 * (section 4.2.2 InterruptACK); virtio_irq_quiesce masks the line and asks
 * the device not to interrupt (VIRTQ_AVAIL_F_NO_INTERRUPT, section 2.7.7)
 * for the bulk of a workload, which then polls the used rings: every
 * interrupt costs emulated CPL0 instructions on PVM hosts.
 */
void virtio_irq_arm(struct virtio_dev *d, struct virtq *const *queues, size_t n);
bool virtio_irq_wait(struct virtio_dev *d, uint32_t ticks);
void virtio_irq_quiesce(struct virtio_dev *d, struct virtq *const *queues, size_t n);
/* Unmasks the device's line without touching the queues' flags: for a
 * driver that polls its queues but wants configuration change interrupts
 * (the balloon service). */
void virtio_irq_unmask(struct virtio_dev *d);
/* Interrupts seen on the device's line since virtio_open. */
uint64_t virtio_irq_count(const struct virtio_dev *d);
/* Reads InterruptStatus and writes it back to InterruptACK. */
uint32_t virtio_irq_ack(struct virtio_dev *d);

/*
 * Adds one chain: out[0..n_out) device-readable, then in[0..n_in)
 * device-writable (section 2.7.13), and publishes it in the available ring.
 * False if the ring lacks n_out + n_in free descriptors. cookie must not be
 * NULL.
 */
bool virtq_add(struct virtq *q, const struct virtq_buf *out, unsigned n_out,
	       const struct virtq_buf *in, unsigned n_in, void *cookie);
/* Notifies the device (QueueNotify) unless it asked not to be
 * (VIRTQ_USED_F_NO_NOTIFY, section 2.7.10). */
void virtq_kick(struct virtq *q);
/* Takes the next used chain: its cookie, *len = bytes the device wrote.
 * NULL if none. A used id that is not an outstanding head is a device bug:
 * reported and fatal. */
void *virtq_get(struct virtq *q, uint32_t *len);
/* Publishes a raw head index (no descriptor) and notifies: for
 * virtio-scribble, which wants the device to see a bogus entry. */
void virtq_publish_raw(struct virtq *q, uint16_t head);

/* Waits up to ticks timer ticks (10 ms) for a used chain on q. */
void *virtq_wait(struct virtq *q, uint32_t *len, uint32_t ticks);

/* Helpers shared by the drivers. */
uint64_t tg_tsc_khz(void);             /* TSC rate from PIT ticks, 0 if no ticks */
uint64_t tg_fnv1a64(uint64_t h, const uint8_t *p, size_t n);
#define TG_FNV1A64_INIT 0xcbf29ce484222325ull
/*
 * The layer checksum that pmem-read and blk-read report: over the image as
 * little-endian 64-bit words w[i], sum of w[i] * (2i + 1) mod 2^64. Trailing
 * zero words add nothing, so the 2 MiB zero tail of a pmem window and the
 * 512-byte rounding of a disk do not change it, while any moved or changed
 * word does. first is the index of p[0] in the image. Cheap at CPL3: one
 * multiply-add per 8 bytes.
 */
uint64_t tg_wsum64(uint64_t sum, uint64_t first, const uint64_t *p, uint64_t n);
/* Starts "error <what> slot=<i>" in err. */
void virtio_error(struct tg_line *err, const char *what, const struct virtio_dev *d);

extern volatile uint64_t tg_ticks;

#endif /* DSEC_TESTGUEST_VIRTIO_H_ */
