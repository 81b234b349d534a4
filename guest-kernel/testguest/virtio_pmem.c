/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-pmem (virtio 1.2 section 5.19) and its workloads: pmem-read and
 * pmem-write.
 *
 * The device's memory is a guest-physical window (config: le64 start, le64
 * size) that the CPL3 code reads and writes directly (DAX): the identity
 * page tables map the low 4 GiB with U=1, and [3 GiB, 4 GiB) is the MMIO
 * hole, so a window is usable here when it ends at or below 3 GiB; the
 * monitor places it there whenever RAM leaves room (pmem-dax/README.md).
 * The request queue carries FLUSH requests (struct virtio_pmem_req { le32
 * type; } out, struct virtio_pmem_resp { le32 ret; } in).
 */
#include "pagealloc.h"
#include "syscall.h"
#include "virtio.h"
#include "virtio_workloads.h"

#define PMEM_CFG_START 0
#define PMEM_CFG_SIZE 8
#define PMEM_REQ_FLUSH 0u
#define PMEM_MAPPED_LIMIT 0xc0000000ull /* tables.S: WB identity map below */
#define PMEM_TIMEOUT_TICKS 1000         /* 10 s */
#define PMEM_WRITE_BYTES 4096u
#define PMEM_WRITE_TAG 0x706d656d00000000ull /* "pmem" in the high half */
#define PMEM_BAD_TYPE 0x55u

struct pmem {
	struct virtio_dev d;
	struct virtq q;
	uint64_t start;
	uint64_t size;
	uint32_t *req;   /* device-readable type */
	uint32_t *resp;  /* device-writable ret */
	uint64_t requests;
};

static struct pmem pmem;

static bool pmem_open(const struct tg_boot_info *bi, struct pmem *p, struct tg_line *out)
{
	if (!pagealloc_init(bi)) {
		line_reset(out);
		line_str(out, "error no-ram-after-image");
		return false;
	}
	if (!virtio_open(bi, -1, VIRTIO_ID_PMEM, 0, &p->d, out) ||
	    !virtq_setup(&p->d, &p->q, 0, 16, out))
		return false;
	p->start = virtio_config_read64(&p->d, PMEM_CFG_START);
	p->size = virtio_config_read64(&p->d, PMEM_CFG_SIZE);
	p->req = page_alloc(TG_PAGE_SIZE);
	if (p->req == 0) {
		virtio_error(out, "virtio-out-of-memory", &p->d);
		return false;
	}
	p->resp = p->req + 16;
	if (!virtio_driver_ok(&p->d, out))
		return false;
	if (p->size == 0 || p->start + p->size > PMEM_MAPPED_LIMIT || p->start + p->size < p->start) {
		virtio_error(out, "pmem-not-mapped", &p->d);
		line_str(out, " start=");
		line_hex(out, p->start);
		line_kv(out, "size", p->size);
		return false;
	}
	return true;
}

/* One request; *ret = the device's status. The first request of a boot
 * waits for the interrupt too (proves the IRQ path), later ones poll. */
static bool pmem_request(struct pmem *p, uint32_t type, uint32_t *ret, struct tg_line *out)
{
	struct virtq *qs[1] = { &p->q };
	struct virtq_buf o = { p->req, 4 };
	struct virtq_buf i = { p->resp, 4 };
	uint32_t len = 0;
	bool first = p->requests++ == 0;

	*p->req = type;
	*p->resp = 0xffffffffu;
	if (first)
		virtio_irq_arm(&p->d, qs, 1);
	virtq_add(&p->q, &o, 1, &i, 1, p->req);
	virtq_kick(&p->q);
	if (virtq_wait(&p->q, &len, PMEM_TIMEOUT_TICKS) == 0) {
		virtio_error(out, "pmem-timeout", &p->d);
		line_kv(out, "type", type);
		return false;
	}
	if (first) {
		if (!virtio_irq_wait(&p->d, 100)) {
			virtio_error(out, "virtio-irq-timeout", &p->d);
			line_kv(out, "irq", p->d.slot.irq);
			return false;
		}
		virtio_irq_quiesce(&p->d, qs, 1);
	}
	*ret = len >= 4 ? *p->resp : 0xffffffffu;
	return true;
}

int workload_pmem_read(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	struct pmem *p = &pmem;

	(void)arg;
	if (!pmem_open(bi, p, out))
		return 1;
	uint64_t t0 = tg_ticks, c0 = rdtsc();
	/* Every byte, straight from the host page cache: no copy. */
	uint64_t sum = tg_wsum64(0, 0, (const uint64_t *)(uintptr_t)p->start, p->size / 8);
	uint64_t cycles = rdtsc() - c0;
	line_reset(out);
	line_str(out, "result workload=pmem-read start=");
	line_hex(out, p->start);
	line_kv(out, "bytes", p->size);
	line_str(out, " checksum=");
	line_hex(out, sum);
	line_kv(out, "cycles", cycles);
	line_kv(out, "ticks", tg_ticks - t0);
	virtio_reset(&p->d);
	return 0;
}

int workload_pmem_write(const struct tg_boot_info *bi, uint64_t offset, struct tg_line *out)
{
	struct pmem *p = &pmem;
	uint32_t flush = 0, bad = 0;

	if (!pmem_open(bi, p, out))
		return 1;
	if (offset % PMEM_WRITE_BYTES != 0 || offset > p->size - PMEM_WRITE_BYTES) {
		virtio_error(out, "bad-workload-argument", &p->d);
		line_kv(out, "offset", offset);
		line_kv(out, "size", p->size);
		return 1;
	}
	volatile uint64_t *w = (volatile uint64_t *)(uintptr_t)(p->start + offset);
	uint64_t words = PMEM_WRITE_BYTES / 8, matched = 0;
	/* On a read-only layer each store exits to the monitor and is dropped. */
	for (uint64_t i = 0; i < words; i++)
		w[i] = PMEM_WRITE_TAG | (offset + 8 * i);
	for (uint64_t i = 0; i < words; i++)
		matched += w[i] == (PMEM_WRITE_TAG | (offset + 8 * i));
	if (!pmem_request(p, PMEM_REQ_FLUSH, &flush, out) ||
	    !pmem_request(p, PMEM_BAD_TYPE, &bad, out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=pmem-write");
	line_kv(out, "offset", offset);
	line_kv(out, "words", words);
	line_kv(out, "matched", matched);
	line_kv(out, "flush", flush);
	line_kv(out, "bad_type", bad);
	line_kv(out, "irqs", virtio_irq_count(&p->d));
	virtio_reset(&p->d);
	return 0;
}
