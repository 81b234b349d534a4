/* SPDX-License-Identifier: Apache-2.0 */
#include "virtio.h"

#include "console.h"
#include "pagealloc.h"
#include "syscall.h"

/* virtio-mmio registers (virtio 1.2 section 4.2.2). */
#define VIRTIO_MMIO_MAGIC 0x000
#define VIRTIO_MMIO_VERSION 0x004
#define VIRTIO_MMIO_DEVICE_ID 0x008
#define VIRTIO_MMIO_DEVICE_FEATURES 0x010
#define VIRTIO_MMIO_DEVICE_FEATURES_SEL 0x014
#define VIRTIO_MMIO_DRIVER_FEATURES 0x020
#define VIRTIO_MMIO_DRIVER_FEATURES_SEL 0x024
#define VIRTIO_MMIO_QUEUE_SEL 0x030
#define VIRTIO_MMIO_QUEUE_NUM_MAX 0x034
#define VIRTIO_MMIO_QUEUE_NUM 0x038
#define VIRTIO_MMIO_QUEUE_READY 0x044
#define VIRTIO_MMIO_QUEUE_NOTIFY 0x050
#define VIRTIO_MMIO_INTERRUPT_STATUS 0x060
#define VIRTIO_MMIO_INTERRUPT_ACK 0x064
#define VIRTIO_MMIO_STATUS 0x070
#define VIRTIO_MMIO_QUEUE_DESC_LOW 0x080
#define VIRTIO_MMIO_QUEUE_DESC_HIGH 0x084
#define VIRTIO_MMIO_QUEUE_DRIVER_LOW 0x090
#define VIRTIO_MMIO_QUEUE_DRIVER_HIGH 0x094
#define VIRTIO_MMIO_QUEUE_DEVICE_LOW 0x0a0
#define VIRTIO_MMIO_QUEUE_DEVICE_HIGH 0x0a4
#define VIRTIO_MMIO_CONFIG_GENERATION 0x0fc
#define VIRTIO_MMIO_CONFIG 0x100

#define VIRTIO_MMIO_MAGIC_VALUE 0x74726976u /* "virt" */

/* Split virtqueues are at most 32768 entries (section 2.7). */
#define VIRTQ_MAX_SIZE 32768

extern volatile uint64_t tg_irq_counts[16]; /* head.S, per 8259A line */

/*
 * Barriers. x86 keeps stores in order and loads in order (TSO), so the
 * write barrier between filling descriptors and publishing avail->idx, and
 * the read barrier between reading used->idx and the used entries, only
 * need to stop the compiler (section 2.7.13 / 2.7.14 / 2.7.8). The one
 * store->load ordering virtio needs, avail->idx before reading
 * used->flags for notification suppression (section 2.7.13.4), is a full
 * fence.
 */
#define virtio_wmb() __asm__ volatile("" ::: "memory")
#define virtio_rmb() __asm__ volatile("" ::: "memory")
#define virtio_mb() __asm__ volatile("mfence" ::: "memory")

static uint32_t mmio_rd(const volatile uint8_t *regs, uint32_t off)
{
	return *(const volatile uint32_t *)(regs + off);
}

static void mmio_wr(volatile uint8_t *regs, uint32_t off, uint32_t v)
{
	*(volatile uint32_t *)(regs + off) = v;
}

static volatile uint8_t *slot_regs(const struct virtio_slot *s)
{
	return (volatile uint8_t *)(uintptr_t)s->base;
}

/* ---- command line ---------------------------------------------------- */

/* "<size>[KMG]@<base>:<irq>[:<platform id>]" as Linux's virtio_mmio
 * module parameter (drivers/virtio/virtio_mmio.c documents the syntax). */
static bool parse_device(const char *p, size_t n, struct virtio_slot *s)
{
	size_t at = 0, colon, end;
	uint64_t shift = 0;

	while (at < n && p[at] != '@')
		at++;
	if (at == 0 || at == n)
		return false;
	size_t size_len = at;
	switch (p[size_len - 1]) {
	case 'K': case 'k': shift = 10; size_len--; break;
	case 'M': case 'm': shift = 20; size_len--; break;
	case 'G': case 'g': shift = 30; size_len--; break;
	default: break;
	}
	if (!tg_parse_u64(p, size_len, &s->size))
		return false;
	s->size <<= shift;
	colon = at + 1;
	while (colon < n && p[colon] != ':')
		colon++;
	if (colon == n || !tg_parse_u64(p + at + 1, colon - at - 1, &s->base))
		return false;
	end = colon + 1;
	while (end < n && p[end] != ':')
		end++;
	uint64_t irq;
	if (!tg_parse_u64(p + colon + 1, end - colon - 1, &irq) || irq > 0xffffffffu)
		return false;
	s->irq = (uint32_t)irq;
	/* Registers are MMIO in the uncached [3 GiB, 4 GiB) of the identity
	 * map (tables.S); nothing else is mapped that way. */
	return s->size >= 0x100 && s->base >= 0xc0000000ull && s->base + s->size <= 0x100000000ull;
}

size_t virtio_slots(const struct tg_boot_info *bi, const struct virtio_slot **slots)
{
	static const char kKey[] = "virtio_mmio.device=";
	static struct virtio_slot parsed[VIRTIO_MAX_SLOTS];
	static size_t count;
	static bool done;
	const size_t key_len = sizeof(kKey) - 1;

	if (!done) {
		const char *p = bi->cmdline;
		done = true;
		while (*p != '\0') {
			while (*p == ' ')
				p++;
			const char *word = p;
			while (*p != '\0' && *p != ' ')
				p++;
			size_t n = (size_t)(p - word);
			if (n <= key_len || !tg_memeq(word, kKey, key_len))
				continue;
			if (count == VIRTIO_MAX_SLOTS) {
				console_send_str("error virtio-too-many-devices");
				break;
			}
			if (!parse_device(word + key_len, n - key_len, &parsed[count])) {
				static struct tg_line l;
				line_reset(&l);
				line_str(&l, "error virtio-bad-cmdline word=");
				line_strn(&l, word, n);
				console_send(&l);
				continue;
			}
			count++;
		}
	}
	*slots = parsed;
	return count;
}

uint32_t virtio_read_magic(const struct virtio_slot *s)
{
	return mmio_rd(slot_regs(s), VIRTIO_MMIO_MAGIC);
}

uint32_t virtio_read_version(const struct virtio_slot *s)
{
	return mmio_rd(slot_regs(s), VIRTIO_MMIO_VERSION);
}

uint32_t virtio_read_device_id(const struct virtio_slot *s)
{
	return mmio_rd(slot_regs(s), VIRTIO_MMIO_DEVICE_ID);
}

/* ---- device initialisation (section 3.1.1) ---------------------------- */

void virtio_error(struct tg_line *err, const char *what, const struct virtio_dev *d)
{
	line_reset(err);
	line_str(err, "error ");
	line_str(err, what);
	line_kv(err, "slot", d->slot_index);
}

uint32_t virtio_status(const struct virtio_dev *d)
{
	return mmio_rd(d->regs, VIRTIO_MMIO_STATUS);
}

bool virtio_needs_reset(const struct virtio_dev *d)
{
	return (virtio_status(d) & VIRTIO_STATUS_DEVICE_NEEDS_RESET) != 0;
}

void virtio_reset(struct virtio_dev *d)
{
	/* Section 4.2.3.1: after writing 0 the driver waits until Status
	 * reads back 0 before touching anything else. */
	mmio_wr(d->regs, VIRTIO_MMIO_STATUS, 0);
	while (mmio_rd(d->regs, VIRTIO_MMIO_STATUS) != 0)
		__asm__ volatile("pause");
}

static void add_status(struct virtio_dev *d, uint32_t bit)
{
	mmio_wr(d->regs, VIRTIO_MMIO_STATUS, virtio_status(d) | bit);
}

static bool fail(struct virtio_dev *d, struct tg_line *err, const char *what)
{
	virtio_error(err, what, d);
	/* Section 3.1.1 step 8: give up by setting FAILED. */
	if (d->regs != 0)
		add_status(d, VIRTIO_STATUS_FAILED);
	return false;
}

bool virtio_open(const struct tg_boot_info *bi, int slot_index, uint32_t want_id,
		 uint64_t driver_features, struct virtio_dev *d, struct tg_line *err)
{
	const struct virtio_slot *slots;
	size_t n = virtio_slots(bi, &slots);

	memset(d, 0, sizeof(*d));
	if (slot_index < 0) {
		for (size_t i = 0; i < n && slot_index < 0; i++)
			if (virtio_read_magic(&slots[i]) == VIRTIO_MMIO_MAGIC_VALUE &&
			    virtio_read_device_id(&slots[i]) == want_id)
				slot_index = (int)i;
		if (slot_index < 0) {
			line_reset(err);
			line_str(err, "error virtio-no-device");
			line_kv(err, "device_id", want_id);
			line_kv(err, "slots", n);
			return false;
		}
	}
	d->slot_index = (uint32_t)slot_index;
	if ((size_t)slot_index >= n) {
		line_reset(err);
		line_str(err, "error virtio-no-slot");
		line_kv(err, "slot", (uint64_t)slot_index);
		line_kv(err, "slots", n);
		return false;
	}
	d->slot = slots[slot_index];
	uint32_t magic = virtio_read_magic(&d->slot);
	if (magic != VIRTIO_MMIO_MAGIC_VALUE) {
		virtio_error(err, "virtio-bad-magic", d);
		line_str(err, " magic=");
		line_hex(err, magic);
		return false;
	}
	d->regs = slot_regs(&d->slot);
	uint32_t version = mmio_rd(d->regs, VIRTIO_MMIO_VERSION);
	if (version != 2) {
		/* Version 1 is the legacy interface (section 4.2.4), which this
		 * driver does not implement (QEMU: -global
		 * virtio-mmio.force-legacy=false). */
		virtio_error(err, version == 1 ? "virtio-legacy-unsupported" : "virtio-bad-version", d);
		line_kv(err, "version", version);
		d->regs = 0;
		return false;
	}
	d->device_id = mmio_rd(d->regs, VIRTIO_MMIO_DEVICE_ID);
	if (d->device_id == 0 || (want_id != 0 && d->device_id != want_id)) {
		/* DeviceID 0 is a placeholder transport without a device
		 * (section 4.2.3.1.1: the driver must not use it). */
		virtio_error(err, "virtio-wrong-device", d);
		line_kv(err, "device_id", d->device_id);
		line_kv(err, "want", want_id);
		d->regs = 0;
		return false;
	}
	d->irq_base = d->slot.irq < 16 ? tg_irq_counts[d->slot.irq] : 0;

	virtio_reset(d);
	add_status(d, VIRTIO_STATUS_ACKNOWLEDGE);
	add_status(d, VIRTIO_STATUS_DRIVER);

	/* Features are read and written 32 bits at a time through the
	 * selector registers (section 4.2.2). */
	uint64_t offered = 0;
	for (uint32_t sel = 0; sel < 2; sel++) {
		mmio_wr(d->regs, VIRTIO_MMIO_DEVICE_FEATURES_SEL, sel);
		offered |= (uint64_t)mmio_rd(d->regs, VIRTIO_MMIO_DEVICE_FEATURES) << (32 * sel);
	}
	if ((offered & VIRTIO_F_VERSION_1) == 0)
		return fail(d, err, "virtio-no-version-1");
	d->features = offered & (driver_features | VIRTIO_F_VERSION_1);
	for (uint32_t sel = 0; sel < 2; sel++) {
		mmio_wr(d->regs, VIRTIO_MMIO_DRIVER_FEATURES_SEL, sel);
		mmio_wr(d->regs, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)(d->features >> (32 * sel)));
	}
	add_status(d, VIRTIO_STATUS_FEATURES_OK);
	/* Section 3.1.1 step 6: the device clears FEATURES_OK if it cannot
	 * work with the subset. */
	if ((virtio_status(d) & VIRTIO_STATUS_FEATURES_OK) == 0)
		return fail(d, err, "virtio-features-rejected");
	return true;
}

bool virtq_setup(struct virtio_dev *d, struct virtq *q, uint16_t index, uint16_t max_size,
		 struct tg_line *err)
{
	memset(q, 0, sizeof(*q));
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_SEL, index);
	/* Section 4.2.3.2: the queue must not be in use yet. */
	if (mmio_rd(d->regs, VIRTIO_MMIO_QUEUE_READY) != 0)
		return fail(d, err, "virtio-queue-busy");
	uint32_t max = mmio_rd(d->regs, VIRTIO_MMIO_QUEUE_NUM_MAX);
	if (max == 0) {
		fail(d, err, "virtio-no-queue");
		line_kv(err, "queue", index);
		return false;
	}
	if (max > max_size)
		max = max_size;
	if (max > VIRTQ_MAX_SIZE)
		max = VIRTQ_MAX_SIZE;
	uint32_t size = 1;
	while (size * 2 <= max)
		size *= 2;

	/* Section 2.7: alignment 16 (descriptors), 2 (driver area), 4 (device
	 * area). Each area gets its own pages: simplest, and page alignment
	 * satisfies all three. */
	q->desc = page_alloc(16ull * size);
	q->avail = page_alloc(6 + 2ull * size);
	q->used = page_alloc(6 + 8ull * size);
	q->cookie = page_alloc(sizeof(void *) * size);
	if (q->desc == 0 || q->avail == 0 || q->used == 0 || q->cookie == 0)
		return fail(d, err, "virtio-out-of-memory");
	q->dev = d;
	q->index = index;
	q->size = (uint16_t)size;
	for (uint32_t i = 0; i < size; i++)
		q->desc[i].next = (uint16_t)(i + 1);
	q->free_head = 0;
	q->num_free = (uint16_t)size;

	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_NUM, size);
	uint64_t a = (uint64_t)(uintptr_t)q->desc;
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)a);
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DESC_HIGH, (uint32_t)(a >> 32));
	a = (uint64_t)(uintptr_t)q->avail;
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)a);
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DRIVER_HIGH, (uint32_t)(a >> 32));
	a = (uint64_t)(uintptr_t)q->used;
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)a);
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_DEVICE_HIGH, (uint32_t)(a >> 32));
	mmio_wr(d->regs, VIRTIO_MMIO_QUEUE_READY, 1);
	return true;
}

bool virtio_driver_ok(struct virtio_dev *d, struct tg_line *err)
{
	add_status(d, VIRTIO_STATUS_DRIVER_OK);
	uint32_t s = virtio_status(d);
	if (s & (VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED)) {
		virtio_error(err, "virtio-device-error", d);
		line_kv(err, "status", s);
		return false;
	}
	return true;
}

/* ---- configuration space ---------------------------------------------- */

void virtio_config_read(const struct virtio_dev *d, uint32_t off, void *buf, uint32_t len)
{
	uint8_t *out = buf;
	uint32_t gen;

	/* Section 2.5.1 / 4.2.2: read until ConfigGeneration is unchanged
	 * across the whole read, so a multi-register field is consistent.
	 * Byte accesses are always allowed for config space. */
	do {
		gen = mmio_rd(d->regs, VIRTIO_MMIO_CONFIG_GENERATION);
		for (uint32_t i = 0; i < len; i++)
			out[i] = d->regs[VIRTIO_MMIO_CONFIG + off + i];
	} while (mmio_rd(d->regs, VIRTIO_MMIO_CONFIG_GENERATION) != gen);
}

uint64_t virtio_config_read64(const struct virtio_dev *d, uint32_t off)
{
	uint32_t lo, hi, gen;

	do {
		gen = mmio_rd(d->regs, VIRTIO_MMIO_CONFIG_GENERATION);
		lo = mmio_rd(d->regs, VIRTIO_MMIO_CONFIG + off);
		hi = mmio_rd(d->regs, VIRTIO_MMIO_CONFIG + off + 4);
	} while (mmio_rd(d->regs, VIRTIO_MMIO_CONFIG_GENERATION) != gen);
	return ((uint64_t)hi << 32) | lo;
}

uint32_t virtio_config_read32(const struct virtio_dev *d, uint32_t off)
{
	return mmio_rd(d->regs, VIRTIO_MMIO_CONFIG + off);
}

void virtio_config_write32(struct virtio_dev *d, uint32_t off, uint32_t v)
{
	mmio_wr(d->regs, VIRTIO_MMIO_CONFIG + off, v);
}

/* ---- interrupts --------------------------------------------------------- */

/* Lines unmasked by virtio workloads; IRQ0 (the tick) always is. Boot
 * state (boot.S): master 0xfe, slave 0xff. */
static uint16_t pic_unmasked = 1u << 0;

static void pic_update(void)
{
	uint16_t open = pic_unmasked;

	if (open & 0xff00)
		open |= 1u << 2; /* the slave cascades into master IRQ 2 */
	sys_pic_mask((uint16_t)~open);
}

uint64_t virtio_irq_count(const struct virtio_dev *d)
{
	return d->slot.irq < 16 ? tg_irq_counts[d->slot.irq] - d->irq_base : 0;
}

uint32_t virtio_irq_ack(struct virtio_dev *d)
{
	uint32_t isr = mmio_rd(d->regs, VIRTIO_MMIO_INTERRUPT_STATUS);

	if (isr != 0)
		mmio_wr(d->regs, VIRTIO_MMIO_INTERRUPT_ACK, isr);
	return isr;
}

void virtio_irq_arm(struct virtio_dev *d, struct virtq *const *queues, size_t n)
{
	for (size_t i = 0; i < n; i++)
		queues[i]->avail->flags = 0;
	virtio_mb();
	if (d->slot.irq < 16 && d->slot.irq != 0) {
		pic_unmasked |= (uint16_t)(1u << d->slot.irq);
		pic_update();
	}
	d->irq_waited = virtio_irq_count(d);
}

bool virtio_irq_wait(struct virtio_dev *d, uint32_t ticks)
{
	uint64_t t0 = tg_ticks;

	while (virtio_irq_count(d) == d->irq_waited) {
		if (tg_ticks - t0 >= ticks)
			return false;
		__asm__ volatile("pause");
	}
	d->irq_waited = virtio_irq_count(d);
	/* The 8259A is edge-triggered: acknowledging lets a level-style
	 * device line (QEMU) drop so the next interrupt is a new edge. */
	virtio_irq_ack(d);
	return true;
}

void virtio_irq_unmask(struct virtio_dev *d)
{
	if (d->slot.irq < 16 && d->slot.irq != 0) {
		pic_unmasked |= (uint16_t)(1u << d->slot.irq);
		pic_update();
	}
	d->irq_waited = virtio_irq_count(d);
}

void virtio_irq_quiesce(struct virtio_dev *d, struct virtq *const *queues, size_t n)
{
	for (size_t i = 0; i < n; i++)
		queues[i]->avail->flags = VIRTQ_AVAIL_F_NO_INTERRUPT;
	virtio_mb();
	if (d->slot.irq < 16 && d->slot.irq != 0) {
		pic_unmasked &= (uint16_t)~(1u << d->slot.irq);
		pic_update();
	}
	virtio_irq_ack(d);
}

/* ---- split virtqueue (section 2.7) ------------------------------------- */

bool virtq_add(struct virtq *q, const struct virtq_buf *out, unsigned n_out,
	       const struct virtq_buf *in, unsigned n_in, void *cookie)
{
	unsigned total = n_out + n_in;

	if (total == 0 || total > q->num_free)
		return false;
	uint16_t head = q->free_head, i = head, last = head;
	for (unsigned k = 0; k < total; k++) {
		const struct virtq_buf *b = k < n_out ? &out[k] : &in[k - n_out];
		volatile struct virtq_desc *desc = &q->desc[i];
		desc->addr = (uint64_t)(uintptr_t)b->addr;
		desc->len = b->len;
		desc->flags = (uint16_t)((k < n_out ? 0 : VIRTQ_DESC_F_WRITE) |
					 (k + 1 < total ? VIRTQ_DESC_F_NEXT : 0));
		last = i;
		i = desc->next;
	}
	(void)last;
	q->free_head = i;
	q->num_free = (uint16_t)(q->num_free - total);
	q->cookie[head] = cookie;
	/* Section 2.7.13: ring entry, then (after a write barrier) idx. */
	q->avail->ring[q->avail_idx & (q->size - 1)] = head;
	virtio_wmb();
	q->avail_idx++;
	q->avail->idx = q->avail_idx;
	return true;
}

void virtq_publish_raw(struct virtq *q, uint16_t head)
{
	q->avail->ring[q->avail_idx & (q->size - 1)] = head;
	virtio_wmb();
	q->avail_idx++;
	q->avail->idx = q->avail_idx;
	virtio_mb();
	mmio_wr(q->dev->regs, VIRTIO_MMIO_QUEUE_NOTIFY, q->index);
}

void virtq_kick(struct virtq *q)
{
	/* Section 2.7.13.4: the idx store must be visible before the device's
	 * flags are read, or a device going idle could be missed. */
	virtio_mb();
	if ((q->used->flags & VIRTQ_USED_F_NO_NOTIFY) == 0)
		mmio_wr(q->dev->regs, VIRTIO_MMIO_QUEUE_NOTIFY, q->index);
}

void *virtq_get(struct virtq *q, uint32_t *len)
{
	if (q->last_used == q->used->idx)
		return 0;
	/* Section 2.7.14: read the entry only after seeing idx move. */
	virtio_rmb();
	volatile struct virtq_used_elem *e = &q->used->ring[q->last_used & (q->size - 1)];
	uint32_t id = e->id;
	uint32_t written = e->len;
	void *cookie = id < q->size ? q->cookie[id] : 0;
	if (cookie == 0) {
		static struct tg_line l;
		virtio_error(&l, "virtio-bad-used-id", q->dev);
		line_kv(&l, "queue", q->index);
		line_kv(&l, "id", id);
		console_send(&l);
		console_shutdown(1);
	}
	q->cookie[id] = 0;
	q->last_used++;
	/* Return the chain to the free list: walk it to its last descriptor
	 * and link that to the old free head. */
	uint16_t tail = (uint16_t)id, n = 1;
	while (q->desc[tail].flags & VIRTQ_DESC_F_NEXT) {
		tail = q->desc[tail].next;
		n++;
	}
	q->desc[tail].next = q->free_head;
	q->free_head = (uint16_t)id;
	q->num_free = (uint16_t)(q->num_free + n);
	if (len != 0)
		*len = written;
	return cookie;
}

void *virtq_wait(struct virtq *q, uint32_t *len, uint32_t ticks)
{
	uint64_t t0 = tg_ticks;

	for (;;) {
		void *c = virtq_get(q, len);
		if (c != 0 || tg_ticks - t0 >= ticks)
			return c;
		__asm__ volatile("pause");
	}
}

/* ---- helpers --------------------------------------------------------------- */

uint64_t tg_tsc_khz(void)
{
	/* Five windows of 10 PIT ticks (100 ms at 100 Hz), each starting on a
	 * tick edge so a partial tick does not count; the median drops windows
	 * where the vCPU was descheduled across an edge (busy hosts). Bounded
	 * in case the timer is dead. */
	uint64_t khz[5];
	uint64_t c_limit = rdtsc() + 50000000000ull;

	for (int k = 0; k < 5; k++) {
		uint64_t t = tg_ticks;
		while (tg_ticks == t)
			if (rdtsc() > c_limit)
				return 0;
		uint64_t t0 = tg_ticks, c0 = rdtsc();
		while (tg_ticks - t0 < 10)
			if (rdtsc() > c_limit)
				return 0;
		khz[k] = (rdtsc() - c0) / 100;
		for (int j = k; j > 0 && khz[j - 1] > khz[j]; j--) {
			uint64_t x = khz[j];
			khz[j] = khz[j - 1];
			khz[j - 1] = x;
		}
	}
	return khz[2];
}

uint64_t tg_wsum64(uint64_t sum, uint64_t first, const uint64_t *p, uint64_t n)
{
	uint64_t k = 2 * first + 1;

	for (uint64_t i = 0; i < n; i++, k += 2)
		sum += p[i] * k;
	return sum;
}

uint64_t tg_fnv1a64(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}
