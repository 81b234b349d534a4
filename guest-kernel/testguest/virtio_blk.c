/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-blk (virtio 1.2 section 5.2) and its workloads: blk-test,
 * blk-write-ro, blk-read (streaming with :MiB; without it, the whole disk
 * into guest RAM), blk-bench.
 *
 * A request is a three-descriptor chain (section 5.2.6): the 16-byte header
 * (type, reserved, sector; device-readable), the data (readable for OUT,
 * writable for IN) and one status byte (writable). Sectors are always 512
 * bytes, whatever blk_size says.
 */
#include "console.h"
#include "pagealloc.h"
#include "syscall.h"
#include "virtio.h"
#include "virtio_workloads.h"

/* Feature bits (section 5.2.3). */
#define VIRTIO_BLK_F_SIZE_MAX (1ull << 1)
#define VIRTIO_BLK_F_SEG_MAX (1ull << 2)
#define VIRTIO_BLK_F_RO (1ull << 5)
#define VIRTIO_BLK_F_BLK_SIZE (1ull << 6)
#define VIRTIO_BLK_F_FLUSH (1ull << 9)

/* Config layout (section 5.2.4). */
#define VIRTIO_BLK_CFG_CAPACITY 0
#define VIRTIO_BLK_CFG_SIZE_MAX 8

/* Request types and status values (section 5.2.6). */
#define VIRTIO_BLK_T_IN 0u
#define VIRTIO_BLK_T_OUT 1u
#define VIRTIO_BLK_T_FLUSH 4u
#define VIRTIO_BLK_T_GET_ID 8u
#define VIRTIO_BLK_S_OK 0u
#define VIRTIO_BLK_ID_BYTES 20

#define SECTOR 512u
#define SEQ_BYTES (64u << 10)
#define RAND_BYTES 4096u
#define MAX_DEPTH 64u
#define IO_TIMEOUT_TICKS 1000 /* 10 s without a completion */
#define PATTERN_TAG 0x6473656300000000ull /* "dsec" in the high half */

struct blk_req {
	struct {
		uint32_t type;
		uint32_t reserved;
		uint64_t sector;
	} hdr;
	uint8_t status;
	uint8_t *data;
	uint32_t len;
	struct blk_req *next_free;
};

struct blk {
	struct virtio_dev d;
	struct virtq q;
	uint64_t capacity;   /* 512-byte sectors */
	uint32_t max_bytes;  /* largest data segment we use */
	uint32_t depth;
	struct blk_req *reqs;
	struct blk_req *free;
	uint64_t requests;
};

/* Filled by blk_run's callers: choose sector/len and fill data before
 * submission, check data after completion. */
struct blk_job {
	uint32_t type;
	uint64_t count;      /* requests */
	void (*fill)(struct blk_job *job, struct blk_req *r, uint64_t i);
	bool (*done)(struct blk_job *job, struct blk_req *r);
	uint64_t arg;        /* per-job state */
	uint64_t rng;
	uint64_t bytes;
};

static struct blk blk;

/* Opens the first virtio-blk device with up to depth requests of up to
 * bytes each, and arms its interrupt for the first request. */
static bool blk_open(const struct tg_boot_info *bi, uint32_t depth, uint32_t bytes,
		     struct tg_line *out)
{
	struct blk *b = &blk;
	struct virtq *qs[1] = { &b->q };

	if (!pagealloc_init(bi)) {
		line_reset(out);
		line_str(out, "error no-ram-after-image");
		return false;
	}
	if (!virtio_open(bi, -1, VIRTIO_ID_BLOCK,
			 VIRTIO_BLK_F_SIZE_MAX | VIRTIO_BLK_F_SEG_MAX | VIRTIO_BLK_F_RO |
				 VIRTIO_BLK_F_BLK_SIZE | VIRTIO_BLK_F_FLUSH,
			 &b->d, out) ||
	    !virtq_setup(&b->d, &b->q, 0, 256, out))
		return false;
	b->capacity = virtio_config_read64(&b->d, VIRTIO_BLK_CFG_CAPACITY);
	b->max_bytes = bytes;
	if (b->d.features & VIRTIO_BLK_F_SIZE_MAX) {
		/* Section 5.2.4: size_max bounds any single segment. */
		uint32_t size_max = virtio_config_read32(&b->d, VIRTIO_BLK_CFG_SIZE_MAX);
		size_max &= ~(SECTOR - 1);
		if (size_max >= SECTOR && size_max < b->max_bytes)
			b->max_bytes = size_max;
	}
	b->depth = b->q.size / 3;
	if (b->depth > depth)
		b->depth = depth;
	b->reqs = page_alloc(sizeof(struct blk_req) * b->depth);
	if (b->reqs == 0) {
		virtio_error(out, "virtio-out-of-memory", &b->d);
		return false;
	}
	for (uint32_t i = 0; i < b->depth; i++) {
		b->reqs[i].data = page_alloc(b->max_bytes);
		if (b->reqs[i].data == 0) {
			virtio_error(out, "virtio-out-of-memory", &b->d);
			return false;
		}
		b->reqs[i].next_free = b->free;
		b->free = &b->reqs[i];
	}
	if (!virtio_driver_ok(&b->d, out))
		return false;
	virtio_irq_arm(&b->d, qs, 1);
	return true;
}

static void blk_submit(struct blk *b, struct blk_req *r, uint32_t type, uint64_t sector)
{
	struct virtq_buf hdr = { &r->hdr, sizeof(r->hdr) };
	struct virtq_buf data = { r->data, r->len };
	struct virtq_buf status = { &r->status, 1 };
	struct virtq_buf out[2] = { hdr, data };
	struct virtq_buf in[2] = { data, status };

	r->hdr.type = type;
	r->hdr.reserved = 0;
	r->hdr.sector = sector;
	r->status = 0xff; /* not a valid status: catches a device that skips it */
	if (r->len == 0)
		virtq_add(&b->q, out, 1, in + 1, 1, r);
	else if (type == VIRTIO_BLK_T_OUT)
		virtq_add(&b->q, out, 2, in + 1, 1, r);
	else
		virtq_add(&b->q, out, 1, in, 2, r);
	b->requests++;
}

/* One request, waited for. With first_irq, also waits for the device's
 * interrupt (proves the IRQ path) and then switches to polling. */
static bool blk_sync(struct blk *b, uint32_t type, uint64_t sector, uint32_t len, bool first_irq,
		     uint8_t *status, struct tg_line *out)
{
	struct blk_req *r = b->free;
	struct virtq *qs[1] = { &b->q };

	r->len = len;
	blk_submit(b, r, type, sector);
	virtq_kick(&b->q);
	if (virtq_wait(&b->q, 0, IO_TIMEOUT_TICKS) != r) {
		virtio_error(out, "blk-timeout", &b->d);
		line_kv(out, "type", type);
		return false;
	}
	if (first_irq) {
		if (!virtio_irq_wait(&b->d, 100)) {
			virtio_error(out, "virtio-irq-timeout", &b->d);
			line_kv(out, "irq", b->d.slot.irq);
			return false;
		}
		virtio_irq_quiesce(&b->d, qs, 1);
	}
	*status = r->status;
	return true;
}

/* Runs job->count requests with up to b->depth in flight. */
static bool blk_run(struct blk *b, struct blk_job *job, struct tg_line *out)
{
	uint64_t submitted = 0, completed = 0, t_last = tg_ticks;

	while (completed < job->count) {
		bool added = false;
		while (submitted < job->count && b->free != 0) {
			struct blk_req *r = b->free;
			b->free = r->next_free;
			job->fill(job, r, submitted);
			blk_submit(b, r, job->type, r->hdr.sector);
			submitted++;
			added = true;
		}
		if (added)
			virtq_kick(&b->q);
		struct blk_req *r;
		while ((r = virtq_get(&b->q, 0)) != 0) {
			if (r->status != VIRTIO_BLK_S_OK) {
				virtio_error(out, "blk-io-error", &b->d);
				line_kv(out, "type", job->type);
				line_kv(out, "sector", r->hdr.sector);
				line_kv(out, "status", r->status);
				return false;
			}
			if (job->done != 0 && !job->done(job, r))
				return false;
			job->bytes += r->len;
			r->next_free = b->free;
			b->free = r;
			completed++;
			t_last = tg_ticks;
		}
		if (tg_ticks - t_last > IO_TIMEOUT_TICKS) {
			virtio_error(out, "blk-timeout", &b->d);
			line_kv(out, "completed", completed);
			return false;
		}
	}
	return true;
}

/* ---- blk-test --------------------------------------------------------- */

static struct tg_line *test_out;

/* job->arg: total sectors; requests cover consecutive runs from sector 0. */
static void test_fill(struct blk_job *job, struct blk_req *r, uint64_t i)
{
	uint64_t per = blk.max_bytes / SECTOR, first = i * per, n = job->arg - first;

	if (n > per)
		n = per;
	r->hdr.sector = first;
	r->len = (uint32_t)(n * SECTOR);
	if (job->type == VIRTIO_BLK_T_OUT) {
		uint64_t *w = (uint64_t *)r->data;
		for (uint64_t s = 0; s < n; s++)
			for (uint32_t k = 0; k < SECTOR / 8; k++)
				*w++ = PATTERN_TAG | (first + s);
	} else {
		memset(r->data, 0, r->len);
	}
}

static bool test_verify(struct blk_job *job, struct blk_req *r)
{
	const uint64_t *w = (const uint64_t *)r->data;

	(void)job;
	for (uint32_t s = 0; s < r->len / SECTOR; s++)
		for (uint32_t k = 0; k < SECTOR / 8; k++)
			if (*w++ != (PATTERN_TAG | (r->hdr.sector + s))) {
				line_reset(test_out);
				line_str(test_out, "error blk-verify");
				line_kv(test_out, "sector", r->hdr.sector + s);
				line_str(test_out, " got=");
				line_hex(test_out, w[-1]);
				return false;
			}
	return true;
}

int workload_blk_test(const struct tg_boot_info *bi, uint64_t sectors, struct tg_line *out)
{
	struct blk *b = &blk;
	uint8_t status;
	static char id[VIRTIO_BLK_ID_BYTES + 1];

	if (!blk_open(bi, MAX_DEPTH, SEQ_BYTES, out))
		return 1;
	if (sectors == 0 || sectors > b->capacity) {
		virtio_error(out, "blk-test-too-large", &b->d);
		line_kv(out, "sectors", sectors);
		line_kv(out, "capacity", b->capacity);
		return 1;
	}
	/* GET_ID (section 5.2.6): 20 bytes, NUL-padded if shorter. */
	if (!blk_sync(b, VIRTIO_BLK_T_GET_ID, 0, VIRTIO_BLK_ID_BYTES, true, &status, out))
		return 1;
	bool have_id = status == VIRTIO_BLK_S_OK;
	for (uint32_t i = 0; have_id && i < VIRTIO_BLK_ID_BYTES && b->free->data[i] != 0; i++) {
		char c = (char)b->free->data[i];
		/* Keep the report line one word per key. */
		id[i] = (c > ' ' && c < 127 && c != '=') ? c : '_';
	}

	test_out = out;
	uint64_t per = b->max_bytes / SECTOR;
	struct blk_job job = { .type = VIRTIO_BLK_T_OUT, .count = (sectors + per - 1) / per,
			       .fill = test_fill, .arg = sectors };
	if (!blk_run(b, &job, out))
		return 1;
	uint64_t written = job.bytes / SECTOR;
	const char *flush = "unsupported";
	if (b->d.features & VIRTIO_BLK_F_FLUSH) {
		if (!blk_sync(b, VIRTIO_BLK_T_FLUSH, 0, 0, false, &status, out))
			return 1;
		if (status != VIRTIO_BLK_S_OK) {
			virtio_error(out, "blk-flush-failed", &b->d);
			line_kv(out, "status", status);
			return 1;
		}
		flush = "ok";
	}
	job = (struct blk_job){ .type = VIRTIO_BLK_T_IN, .count = (sectors + per - 1) / per,
				.fill = test_fill, .done = test_verify, .arg = sectors };
	if (!blk_run(b, &job, out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=blk-test");
	line_kv(out, "capacity", b->capacity);
	line_kv(out, "written", written);
	line_kv(out, "verified", job.bytes / SECTOR);
	line_str(out, " flush=");
	line_str(out, flush);
	line_kv(out, "irqs", virtio_irq_count(&b->d));
	line_str(out, " id=");
	line_str(out, have_id ? id : "unsupported");
	virtio_reset(&b->d);
	return 0;
}

/* ---- blk-write-ro ------------------------------------------------------ */

int workload_blk_write_ro(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	struct blk *b = &blk;
	uint8_t status;

	(void)arg;
	if (!blk_open(bi, 1, SECTOR, out))
		return 1;
	/* Read sector 0 first and write the same bytes back, so that a disk
	 * that wrongly accepts the write is not changed by it. */
	if (!blk_sync(b, VIRTIO_BLK_T_IN, 0, SECTOR, true, &status, out))
		return 1;
	if (status != VIRTIO_BLK_S_OK) {
		virtio_error(out, "blk-read-failed", &b->d);
		line_kv(out, "status", status);
		return 1;
	}
	if (!blk_sync(b, VIRTIO_BLK_T_OUT, 0, SECTOR, false, &status, out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=blk-write-ro");
	line_kv(out, "status", status);
	line_kv(out, "ro", (b->d.features & VIRTIO_BLK_F_RO) ? 1 : 0);
	line_kv(out, "irqs", virtio_irq_count(&b->d));
	virtio_reset(&b->d);
	if (status == VIRTIO_BLK_S_OK) {
		console_send(out);
		line_reset(out);
		line_str(out, "error blk-write-accepted");
		return 1;
	}
	return 0;
}

/* ---- blk-read / blk-bench ------------------------------------------------- */

enum bench_mode { SEQREAD, SEQWRITE, RANDREAD, RANDWRITE };

/* job->arg: request size in bytes; sectors wrap at the disk's end. */
static void bench_fill(struct blk_job *job, struct blk_req *r, uint64_t i)
{
	uint64_t per = job->arg / SECTOR, blocks = blk.capacity / per;

	r->len = (uint32_t)job->arg;
	if (job->rng == 0) {
		r->hdr.sector = (i % blocks) * per;
	} else {
		/* xorshift64 (Marsaglia 2003): cheap, deterministic offsets. */
		job->rng ^= job->rng << 13;
		job->rng ^= job->rng >> 7;
		job->rng ^= job->rng << 17;
		r->hdr.sector = (job->rng % blocks) * per;
	}
}

/* name: the workload; blk-bench also reports mode= (blk-read is seqread). */
static int bench(const struct tg_boot_info *bi, const char *name, bool with_mode,
		 enum bench_mode mode, uint64_t mib, struct tg_line *out)
{
	struct blk *b = &blk;
	bool rand = mode == RANDREAD || mode == RANDWRITE;
	uint32_t size = rand ? RAND_BYTES : SEQ_BYTES;
	uint8_t status;
	static const char *const kModes[] = { "seqread", "seqwrite", "randread", "randwrite" };

	if (mib == 0 || mib > (1ull << 30)) {
		line_reset(out);
		line_str(out, "error bad-workload-argument name=");
		line_str(out, name);
		return 1;
	}
	if (!blk_open(bi, MAX_DEPTH, size, out))
		return 1;
	if (b->max_bytes < size || b->capacity < size / SECTOR) {
		virtio_error(out, "blk-bench-unsupported", &b->d);
		line_kv(out, "size_max", b->max_bytes);
		line_kv(out, "capacity", b->capacity);
		return 1;
	}
	/* One request with the interrupt, then polling only. */
	if (!blk_sync(b, VIRTIO_BLK_T_IN, 0, SECTOR, true, &status, out))
		return 1;
	uint64_t khz = tg_tsc_khz();
	uint64_t bytes = mib << 20;
	struct blk_job job = { .type = (mode == SEQWRITE || mode == RANDWRITE) ? VIRTIO_BLK_T_OUT
									      : VIRTIO_BLK_T_IN,
			       .count = (bytes + size - 1) / size, .fill = bench_fill, .arg = size,
			       .rng = rand ? 0x9e3779b97f4a7c15ull : 0 };
	uint64_t requests0 = b->requests;
	uint64_t t0 = tg_ticks;
	uint64_t c0 = rdtsc();
	if (!blk_run(b, &job, out))
		return 1;
	uint64_t cycles = rdtsc() - c0;
	uint64_t ticks = tg_ticks - t0;
	line_reset(out);
	line_str(out, "result workload=");
	line_str(out, name);
	if (with_mode) {
		line_str(out, " mode=");
		line_str(out, kModes[mode]);
	}
	line_kv(out, "bytes", job.bytes);
	line_kv(out, "requests", b->requests - requests0);
	line_kv(out, "request_bytes", size);
	line_kv(out, "depth", b->depth);
	line_kv(out, "cycles", cycles);
	line_kv(out, "tsc_khz", khz);
	line_kv(out, "ticks", ticks);
	line_kv(out, "irqs", virtio_irq_count(&b->d));
	virtio_reset(&b->d);
	return 0;
}

int workload_blk_read(const struct tg_boot_info *bi, uint64_t mib, struct tg_line *out)
{
	return bench(bi, "blk-read", false, SEQREAD, mib, out);
}

int workload_blk_bench(const struct tg_boot_info *bi, const char *arg, size_t len,
		       struct tg_line *out)
{
	static const struct { const char *name; enum bench_mode mode; } kModes[] = {
		{ "seqread", SEQREAD }, { "seqwrite", SEQWRITE },
		{ "randread", RANDREAD }, { "randwrite", RANDWRITE },
	};
	size_t comma = 0;
	uint64_t mib;

	while (comma < len && arg[comma] != ',')
		comma++;
	if (comma < len && tg_parse_u64(arg + comma + 1, len - comma - 1, &mib))
		for (size_t i = 0; i < sizeof(kModes) / sizeof(kModes[0]); i++)
			if (tg_strlen(kModes[i].name) == comma && tg_memeq(kModes[i].name, arg, comma))
				return bench(bi, "blk-bench", true, kModes[i].mode, mib, out);
	line_reset(out);
	line_str(out, "error bad-workload-argument name=blk-bench:");
	line_strn(out, arg, len);
	return 1;
}

/* ---- blk-read (whole image) ------------------------------------------------ */

/* job->arg: the guest buffer that receives the disk; request i reads the
 * i-th 64 KiB straight into it (what a guest page cache would hold). */
static void image_fill(struct blk_job *job, struct blk_req *r, uint64_t i)
{
	uint64_t off = i * SEQ_BYTES, total = blk.capacity * SECTOR;

	r->data = (uint8_t *)(uintptr_t)(job->arg + off);
	r->len = total - off < SEQ_BYTES ? (uint32_t)(total - off) : SEQ_BYTES;
	r->hdr.sector = off / SECTOR;
}

int workload_blk_read_image(const struct tg_boot_info *bi, uint64_t arg, struct tg_line *out)
{
	struct blk *b = &blk;
	uint8_t status;

	(void)arg;
	if (!blk_open(bi, MAX_DEPTH, SEQ_BYTES, out))
		return 1;
	uint64_t bytes = b->capacity * SECTOR;
	if (b->max_bytes < SEQ_BYTES || bytes == 0) {
		virtio_error(out, "blk-read-unsupported", &b->d);
		line_kv(out, "size_max", b->max_bytes);
		line_kv(out, "capacity", b->capacity);
		return 1;
	}
	uint8_t *image = page_alloc_uninit(bytes);
	if (image == 0) {
		virtio_error(out, "blk-image-does-not-fit", &b->d);
		line_kv(out, "bytes", bytes);
		line_kv(out, "free", pagealloc_free_bytes());
		return 1;
	}
	if (!blk_sync(b, VIRTIO_BLK_T_IN, 0, SECTOR, true, &status, out))
		return 1;
	struct blk_job job = { .type = VIRTIO_BLK_T_IN, .count = (bytes + SEQ_BYTES - 1) / SEQ_BYTES,
			       .fill = image_fill, .arg = (uint64_t)(uintptr_t)image };
	uint64_t requests0 = b->requests;
	uint64_t t0 = tg_ticks, c0 = rdtsc();
	if (!blk_run(b, &job, out))
		return 1;
	uint64_t sum = tg_wsum64(0, 0, (const uint64_t *)image, bytes / 8);
	uint64_t cycles = rdtsc() - c0;
	line_reset(out);
	line_str(out, "result workload=blk-read");
	line_kv(out, "bytes", job.bytes);
	line_str(out, " checksum=");
	line_hex(out, sum);
	line_kv(out, "requests", b->requests - requests0);
	line_kv(out, "cycles", cycles);
	line_kv(out, "ticks", tg_ticks - t0);
	line_kv(out, "irqs", virtio_irq_count(&b->d));
	virtio_reset(&b->d);
	return 0;
}
