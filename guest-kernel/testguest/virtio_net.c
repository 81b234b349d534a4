/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-net (virtio 1.2 section 5.1) and its workloads: net-echo, net-send.
 *
 * Only VIRTIO_NET_F_MAC is negotiated: no offloads, no mergeable buffers,
 * no control queue, one queue pair (receiveq1 = 0, transmitq1 = 1). With
 * VIRTIO_F_VERSION_1 every packet is preceded by the 12-byte struct
 * virtio_net_hdr including num_buffers (section 5.1.6), all zero on
 * transmit (no checksum or GSO requested).
 */
#include "console.h"
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

#define VIRTIO_NET_F_MAC (1ull << 5)
#define VIRTIO_NET_CFG_MAC 0
#define NET_HDR_LEN 12
/* Section 5.1.6.3.1: without mergeable buffers or guest offloads, receive
 * buffers of at least 1526 bytes (header + 1514-byte frame). */
#define NET_BUF 2048u
#define NET_RX_BUFS 64u
#define NET_TX_BUFS 64u
#define ETH_HLEN 14
#define ETH_ZLEN 60 /* minimum frame without FCS */
#define ETHERTYPE_LOCAL_EXP 0x88b5 /* IEEE 802 local experimental 1 */
#define NET_IDLE_TICKS 6000 /* 60 s without a frame */
#define NET_TX_TICKS 500

struct net_buf {
	uint8_t *mem; /* NET_BUF bytes: header, then the frame */
	struct net_buf *next_free;
};

static struct {
	struct virtio_dev d;
	struct virtq rx, tx;
	uint8_t mac[6];
	struct net_buf rx_bufs[NET_RX_BUFS];
	struct net_buf tx_bufs[NET_TX_BUFS];
	struct net_buf *tx_free;
	uint32_t tx_inflight;
} net;

static void line_mac(struct tg_line *l, const uint8_t *mac)
{
	static const char kHex[] = "0123456789abcdef";

	for (int i = 0; i < 6; i++) {
		if (i > 0)
			line_char(l, ':');
		line_char(l, kHex[mac[i] >> 4]);
		line_char(l, kHex[mac[i] & 15]);
	}
}

static void rx_post(struct net_buf *b)
{
	struct virtq_buf in = { b->mem, NET_BUF };

	virtq_add(&net.rx, 0, 0, &in, 1, b);
}

static bool net_open(const struct tg_boot_info *bi, struct tg_line *out)
{
	if (!pagealloc_init(bi) ||
	    !virtio_open(bi, -1, VIRTIO_ID_NET, VIRTIO_NET_F_MAC, &net.d, out) ||
	    !virtq_setup(&net.d, &net.rx, 0, 256, out) || !virtq_setup(&net.d, &net.tx, 1, 256, out))
		return false;
	if (net.d.features & VIRTIO_NET_F_MAC) {
		virtio_config_read(&net.d, VIRTIO_NET_CFG_MAC, net.mac, 6);
	} else {
		/* Section 5.1.5: without F_MAC the driver picks one; this is
		 * locally administered and unicast. */
		static const uint8_t kMac[6] = { 0x02, 0x64, 0x73, 0x65, 0x63, 0x01 };
		memcpy(net.mac, kMac, 6);
	}
	uint8_t *mem = page_alloc((uint64_t)NET_BUF * (NET_RX_BUFS + NET_TX_BUFS));
	if (mem == 0) {
		virtio_error(out, "virtio-out-of-memory", &net.d);
		return false;
	}
	for (uint32_t i = 0; i < NET_TX_BUFS; i++) {
		net.tx_bufs[i].mem = mem + (uint64_t)NET_BUF * (NET_RX_BUFS + i);
		net.tx_bufs[i].next_free = net.tx_free;
		net.tx_free = &net.tx_bufs[i];
	}
	/* Section 5.1.5: fill the receive queue during initialisation
	 * (before DRIVER_OK), so that no early frame finds it empty. */
	uint32_t rx_n = net.rx.size < NET_RX_BUFS ? net.rx.size : NET_RX_BUFS;
	for (uint32_t i = 0; i < rx_n; i++) {
		net.rx_bufs[i].mem = mem + (uint64_t)NET_BUF * i;
		rx_post(&net.rx_bufs[i]);
	}
	if (!virtio_driver_ok(&net.d, out))
		return false;
	virtq_kick(&net.rx);
	struct virtq *qs[2] = { &net.rx, &net.tx };
	virtio_irq_arm(&net.d, qs, 2);
	return true;
}

static void tx_reap(void)
{
	struct net_buf *b;

	while ((b = virtq_get(&net.tx, 0)) != 0) {
		b->next_free = net.tx_free;
		net.tx_free = b;
		net.tx_inflight--;
	}
}

/* A free transmit buffer, waiting for one if all are in flight. */
static struct net_buf *tx_get(struct tg_line *out)
{
	uint64_t t0 = tg_ticks;

	for (;;) {
		tx_reap();
		if (net.tx_free != 0) {
			struct net_buf *b = net.tx_free;
			net.tx_free = b->next_free;
			memset(b->mem, 0, NET_HDR_LEN);
			return b;
		}
		if (tg_ticks - t0 > NET_TX_TICKS) {
			virtio_error(out, "net-tx-timeout", &net.d);
			return 0;
		}
		__asm__ volatile("pause");
	}
}

static void tx_send(struct net_buf *b, uint32_t frame_len)
{
	struct virtq_buf buf = { b->mem, NET_HDR_LEN + frame_len };

	virtq_add(&net.tx, &buf, 1, 0, 0, b);
	net.tx_inflight++;
	virtq_kick(&net.tx);
}

/* Waits until every transmitted frame is used (sent). */
static bool tx_drain(struct tg_line *out)
{
	uint64_t t0 = tg_ticks;

	while (net.tx_inflight > 0) {
		tx_reap();
		if (tg_ticks - t0 > NET_TX_TICKS) {
			virtio_error(out, "net-tx-timeout", &net.d);
			return false;
		}
	}
	return true;
}

/* The first completion of the workload must have interrupted; after it,
 * the queues are polled. */
static bool first_irq(struct tg_line *out)
{
	struct virtq *qs[2] = { &net.rx, &net.tx };

	if (!virtio_irq_wait(&net.d, 100)) {
		virtio_error(out, "virtio-irq-timeout", &net.d);
		line_kv(out, "irq", net.d.slot.irq);
		return false;
	}
	virtio_irq_quiesce(&net.d, qs, 2);
	return true;
}

int workload_net_echo(const struct tg_boot_info *bi, uint64_t count, struct tg_line *out)
{
	static struct tg_line ready;
	uint64_t frames = 0, short_frames = 0, t_last;

	if (!net_open(bi, out))
		return 1;
	/* Tells the host when to start sending. */
	line_reset(&ready);
	line_str(&ready, "net ready mac=");
	line_mac(&ready, net.mac);
	console_send(&ready);
	t_last = tg_ticks;
	while (frames < count) {
		uint32_t len;
		struct net_buf *rb = virtq_get(&net.rx, &len);
		if (rb == 0) {
			tx_reap();
			if (tg_ticks - t_last > NET_IDLE_TICKS) {
				virtio_error(out, "net-timeout", &net.d);
				line_kv(out, "frames", frames);
				return 1;
			}
			__asm__ volatile("pause");
			continue;
		}
		if (frames == 0 && short_frames == 0 && !first_irq(out))
			return 1;
		t_last = tg_ticks;
		if (len < NET_HDR_LEN + ETH_HLEN || len > NET_BUF) {
			short_frames++;
		} else {
			struct net_buf *tb = tx_get(out);
			if (tb == 0)
				return 1;
			uint32_t flen = len - NET_HDR_LEN;
			uint8_t *f = tb->mem + NET_HDR_LEN;
			memcpy(f, rb->mem + NET_HDR_LEN, flen);
			/* Swap destination and source MAC: the frame goes back to
			 * whoever sent it. */
			memcpy(f, rb->mem + NET_HDR_LEN + 6, 6);
			memcpy(f + 6, rb->mem + NET_HDR_LEN, 6);
			tx_send(tb, flen);
			frames++;
		}
		rx_post(rb);
		virtq_kick(&net.rx);
	}
	if (!tx_drain(out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=net-echo mac=");
	line_mac(out, net.mac);
	line_kv(out, "frames", frames);
	line_kv(out, "short", short_frames);
	line_kv(out, "irqs", virtio_irq_count(&net.d));
	virtio_reset(&net.d);
	return 0;
}

int workload_net_send(const struct tg_boot_info *bi, uint64_t count, struct tg_line *out)
{
	static struct tg_line payload;

	if (!net_open(bi, out))
		return 1;
	for (uint64_t n = 0; n < count; n++) {
		struct net_buf *tb = tx_get(out);
		if (tb == 0)
			return 1;
		uint8_t *f = tb->mem + NET_HDR_LEN;
		memset(f, 0xff, 6); /* broadcast */
		memcpy(f + 6, net.mac, 6);
		f[12] = ETHERTYPE_LOCAL_EXP >> 8;
		f[13] = ETHERTYPE_LOCAL_EXP & 0xff;
		line_reset(&payload);
		line_str(&payload, "dsec-net ");
		line_u64(&payload, n);
		memset(f + ETH_HLEN, 0, ETH_ZLEN - ETH_HLEN);
		memcpy(f + ETH_HLEN, payload.buf, payload.len);
		uint32_t flen = ETH_HLEN + payload.len;
		tx_send(tb, flen < ETH_ZLEN ? ETH_ZLEN : flen);
		if (n == 0) {
			if (!tx_drain(out) || !first_irq(out))
				return 1;
		}
	}
	if (!tx_drain(out))
		return 1;
	line_reset(out);
	line_str(out, "result workload=net-send mac=");
	line_mac(out, net.mac);
	line_kv(out, "sent", count);
	line_kv(out, "irqs", virtio_irq_count(&net.d));
	virtio_reset(&net.d);
	return 0;
}
