/* SPDX-License-Identifier: Apache-2.0 */
/*
 * virtio-vsock (virtio 1.2 section 5.10) and its workloads: vsock-echo
 * (the host connects to the guest) and vsock-send (the guest connects to
 * the host). One stream connection at a time.
 *
 * Queues (section 5.10.2): 0 rx, 1 tx, 2 event. Every packet starts with
 * the 44-byte struct virtio_vsock_hdr (section 5.10.6); receive buffers are
 * one descriptor holding the header and up to VSOCK_RX_PAYLOAD bytes.
 *
 * Credit (section 5.10.6.3): every header carries our buf_alloc (the
 * receive buffer space we promise) and fwd_cnt (bytes we have consumed);
 * we send at most peer_buf_alloc - (tx_cnt - peer_fwd_cnt) bytes ahead of
 * what the peer has consumed, ask with CREDIT_REQUEST when that is zero,
 * and send CREDIT_UPDATE when our consumption moved far enough that the
 * peer might be waiting for it.
 */
#include "console.h"
#include "pagealloc.h"
#include "virtio.h"
#include "virtio_workloads.h"

#define VIRTIO_VSOCK_CFG_GUEST_CID 0
#define VSOCK_HOST_CID 2
#define VIRTIO_VSOCK_TYPE_STREAM 1

/* Operations (section 5.10.6). */
#define VSOCK_OP_REQUEST 1
#define VSOCK_OP_RESPONSE 2
#define VSOCK_OP_RST 3
#define VSOCK_OP_SHUTDOWN 4
#define VSOCK_OP_RW 5
#define VSOCK_OP_CREDIT_UPDATE 6
#define VSOCK_OP_CREDIT_REQUEST 7
#define VSOCK_SHUTDOWN_RCV 1
#define VSOCK_SHUTDOWN_SEND 2
#define VSOCK_EVENT_TRANSPORT_RESET 0

#define VSOCK_RX_BUFS 32u
#define VSOCK_RX_PAYLOAD 4096u
#define VSOCK_TX_SLOTS 32u
#define VSOCK_TX_CHUNK 16384u
/* Our receive buffer: for vsock-echo, the ring the echo is sent from. */
#define VSOCK_BUF_ALLOC (256u << 10)
#define VSOCK_LOCAL_PORT 49152u
#define VSOCK_IDLE_TICKS 6000    /* 60 s without progress */
#define VSOCK_CONNECT_TICKS 200
#define VSOCK_CLOSE_TICKS 200

struct vsock_hdr {
	uint64_t src_cid;
	uint64_t dst_cid;
	uint32_t src_port;
	uint32_t dst_port;
	uint32_t len;
	uint16_t type;
	uint16_t op;
	uint32_t flags;
	uint32_t buf_alloc;
	uint32_t fwd_cnt;
} __attribute__((packed));
_Static_assert(sizeof(struct vsock_hdr) == 44, "virtio 1.2 section 5.10.6");

struct tx_slot {
	struct vsock_hdr hdr;
	uint32_t payload;        /* bytes of the echo ring this packet carries */
	struct tx_slot *next_free;
};

enum conn_state { CONN_NONE, CONN_LISTEN, CONN_CONNECTING, CONN_OPEN, CONN_CLOSED };

static struct {
	struct virtio_dev d;
	struct virtq rx, tx, ev;
	uint64_t cid;
	uint8_t *rx_mem;
	uint32_t *ev_mem;
	struct tx_slot *slots;
	struct tx_slot *tx_free;
	uint32_t tx_inflight;

	/* The connection. */
	enum conn_state state;
	uint32_t local_port, peer_port;
	uint32_t peer_buf_alloc, peer_fwd_cnt;
	uint32_t tx_cnt;           /* payload bytes we sent */
	uint32_t fwd_cnt;          /* payload bytes we consumed */
	uint32_t fwd_reported;     /* fwd_cnt in our last header */
	bool credit_requested;
	bool peer_shut_send;       /* peer sends no more */
	bool peer_shut_rcv;        /* peer receives no more */
	bool peer_rst;
	bool transport_reset;
	bool first_irq_done;
	bool irq_missing;          /* the first packet did not interrupt */

	/* Received payload: consumed by the workload through on_data. */
	void (*on_data)(const uint8_t *p, uint32_t n);
	uint64_t rx_bytes;
	uint64_t rx_fnv;
	uint64_t bad_packets;
} vs;

static void rx_post(uint8_t *buf)
{
	struct virtq_buf in = { buf, sizeof(struct vsock_hdr) + VSOCK_RX_PAYLOAD };

	virtq_add(&vs.rx, 0, 0, &in, 1, buf);
}

static void ev_post(uint32_t *buf)
{
	struct virtq_buf in = { buf, sizeof(*buf) };

	virtq_add(&vs.ev, 0, 0, &in, 1, buf);
}

static bool vsock_open(const struct tg_boot_info *bi, struct tg_line *out)
{
	if (!pagealloc_init(bi) || !virtio_open(bi, -1, VIRTIO_ID_VSOCK, 0, &vs.d, out) ||
	    !virtq_setup(&vs.d, &vs.rx, 0, 128, out) || !virtq_setup(&vs.d, &vs.tx, 1, 128, out) ||
	    !virtq_setup(&vs.d, &vs.ev, 2, 8, out))
		return false;
	vs.cid = virtio_config_read64(&vs.d, VIRTIO_VSOCK_CFG_GUEST_CID);
	vs.rx_mem = page_alloc((uint64_t)VSOCK_RX_BUFS * (sizeof(struct vsock_hdr) + VSOCK_RX_PAYLOAD));
	vs.ev_mem = page_alloc(sizeof(uint32_t) * vs.ev.size);
	vs.slots = page_alloc(sizeof(struct tx_slot) * VSOCK_TX_SLOTS);
	if (vs.rx_mem == 0 || vs.ev_mem == 0 || vs.slots == 0) {
		virtio_error(out, "virtio-out-of-memory", &vs.d);
		return false;
	}
	uint32_t rx_n = vs.rx.size < VSOCK_RX_BUFS ? vs.rx.size : VSOCK_RX_BUFS;
	for (uint32_t i = 0; i < rx_n; i++)
		rx_post(vs.rx_mem + (uint64_t)i * (sizeof(struct vsock_hdr) + VSOCK_RX_PAYLOAD));
	/* Section 5.10.6.6: the event queue must always have buffers. */
	for (uint32_t i = 0; i < vs.ev.size; i++)
		ev_post(&vs.ev_mem[i]);
	uint32_t tx_n = vs.tx.size / 2 < VSOCK_TX_SLOTS ? vs.tx.size / 2 : VSOCK_TX_SLOTS;
	for (uint32_t i = 0; i < tx_n; i++) {
		vs.slots[i].next_free = vs.tx_free;
		vs.tx_free = &vs.slots[i];
	}
	if (!virtio_driver_ok(&vs.d, out))
		return false;
	virtq_kick(&vs.rx);
	virtq_kick(&vs.ev);
	struct virtq *qs[3] = { &vs.rx, &vs.tx, &vs.ev };
	virtio_irq_arm(&vs.d, qs, 3);
	vs.rx_fnv = TG_FNV1A64_INIT;
	return true;
}

/* ---- transmit ------------------------------------------------------------ */

static void echo_ring_tail_free(uint32_t n);

static void tx_reap(void)
{
	struct tx_slot *s;
	uint32_t freed = 0;

	while ((s = virtq_get(&vs.tx, 0)) != 0) {
		freed += s->payload;
		s->next_free = vs.tx_free;
		vs.tx_free = s;
		vs.tx_inflight--;
	}
	/* Echoed bytes have now left the ring: only now are they "consumed"
	 * and may be credited to the peer (which may send a CREDIT_UPDATE,
	 * hence after the slots are free again). */
	if (freed > 0)
		echo_ring_tail_free(freed);
}

/* Sends one packet to the peer of the connection (or, for RST replies to
 * strays, to the given addresses). payload may be NULL. False if no slot
 * frees up within a while (the device is stuck). */
static bool tx_packet(uint16_t op, uint32_t flags, uint64_t dst_cid, uint32_t src_port,
		      uint32_t dst_port, const uint8_t *payload, uint32_t len, uint32_t ring_bytes)
{
	uint64_t t0 = tg_ticks;

	while (vs.tx_free == 0) {
		tx_reap();
		if (tg_ticks - t0 > VSOCK_IDLE_TICKS)
			return false;
		__asm__ volatile("pause");
	}
	struct tx_slot *s = vs.tx_free;
	vs.tx_free = s->next_free;
	s->payload = ring_bytes;
	s->hdr = (struct vsock_hdr){ .src_cid = vs.cid, .dst_cid = dst_cid, .src_port = src_port,
				     .dst_port = dst_port, .len = len,
				     .type = VIRTIO_VSOCK_TYPE_STREAM, .op = op, .flags = flags,
				     .buf_alloc = VSOCK_BUF_ALLOC, .fwd_cnt = vs.fwd_cnt };
	vs.fwd_reported = vs.fwd_cnt;
	struct virtq_buf out[2] = { { &s->hdr, sizeof(s->hdr) }, { payload, len } };
	virtq_add(&vs.tx, out, len > 0 ? 2 : 1, 0, 0, s);
	vs.tx_inflight++;
	virtq_kick(&vs.tx);
	return true;
}

static bool tx_conn(uint16_t op, uint32_t flags, const uint8_t *payload, uint32_t len,
		    uint32_t ring_bytes)
{
	return tx_packet(op, flags, VSOCK_HOST_CID, vs.local_port, vs.peer_port, payload, len,
			 ring_bytes);
}

/* Bytes we may send now (section 5.10.6.3.1). */
static uint32_t peer_credit(void)
{
	return vs.peer_buf_alloc - (vs.tx_cnt - vs.peer_fwd_cnt);
}

/* ---- receive --------------------------------------------------------------- */

static void consume(uint32_t n)
{
	vs.fwd_cnt += n;
	/* A peer that filled our buffer waits for this; a quarter of the
	 * buffer is the batch that keeps updates rare. */
	if (vs.state == CONN_OPEN && vs.fwd_cnt - vs.fwd_reported >= VSOCK_BUF_ALLOC / 4)
		tx_conn(VSOCK_OP_CREDIT_UPDATE, 0, 0, 0, 0);
}

static void handle_packet(const struct vsock_hdr *h, const uint8_t *payload, uint32_t used_len)
{
	/* While listening only a REQUEST is for us (section 5.10.6.2). */
	bool ours = vs.state != CONN_NONE && vs.state != CONN_CLOSED &&
		    h->src_cid == VSOCK_HOST_CID && h->dst_port == vs.local_port &&
		    (vs.state == CONN_LISTEN ? h->op == VSOCK_OP_REQUEST
					     : h->src_port == vs.peer_port);

	if (used_len < sizeof(*h) || h->type != VIRTIO_VSOCK_TYPE_STREAM || h->dst_cid != vs.cid ||
	    h->len > used_len - sizeof(*h)) {
		vs.bad_packets++;
		return;
	}
	if (!ours) {
		/* Section 5.10.6.4: a packet for no socket is answered with
		 * RST, except an RST. */
		if (h->op != VSOCK_OP_RST)
			tx_packet(VSOCK_OP_RST, 0, h->src_cid, h->dst_port, h->src_port, 0, 0, 0);
		return;
	}
	if (vs.peer_buf_alloc != h->buf_alloc || vs.peer_fwd_cnt != h->fwd_cnt)
		vs.credit_requested = false; /* new credit: may ask again later */
	vs.peer_buf_alloc = h->buf_alloc;
	vs.peer_fwd_cnt = h->fwd_cnt;
	switch (h->op) {
	case VSOCK_OP_REQUEST:
		if (vs.state == CONN_LISTEN) {
			vs.peer_port = h->src_port;
			vs.state = CONN_OPEN;
			tx_conn(VSOCK_OP_RESPONSE, 0, 0, 0, 0);
		}
		break;
	case VSOCK_OP_RESPONSE:
		if (vs.state == CONN_CONNECTING)
			vs.state = CONN_OPEN;
		break;
	case VSOCK_OP_RW:
		if (vs.state == CONN_OPEN && h->len > 0) {
			vs.rx_bytes += h->len;
			vs.rx_fnv = tg_fnv1a64(vs.rx_fnv, payload, h->len);
			vs.on_data(payload, h->len);
		}
		break;
	case VSOCK_OP_CREDIT_REQUEST:
		tx_conn(VSOCK_OP_CREDIT_UPDATE, 0, 0, 0, 0);
		break;
	case VSOCK_OP_CREDIT_UPDATE:
		break; /* the header fields above are the update */
	case VSOCK_OP_SHUTDOWN:
		if (h->flags & VSOCK_SHUTDOWN_SEND)
			vs.peer_shut_send = true;
		if (h->flags & VSOCK_SHUTDOWN_RCV)
			vs.peer_shut_rcv = true;
		break;
	case VSOCK_OP_RST:
		vs.peer_rst = true;
		vs.state = CONN_CLOSED;
		break;
	default:
		vs.bad_packets++;
		break;
	}
}

/* Handles everything the device has returned. */
static void vsock_poll(void)
{
	uint32_t len;
	uint8_t *buf;
	uint32_t *ev;
	bool repost = false;

	while ((buf = virtq_get(&vs.rx, &len)) != 0) {
		if (!vs.first_irq_done) {
			/* The first packet must have interrupted; then poll. */
			struct virtq *qs[3] = { &vs.rx, &vs.tx, &vs.ev };
			vs.irq_missing = !virtio_irq_wait(&vs.d, 100);
			vs.first_irq_done = true;
			virtio_irq_quiesce(&vs.d, qs, 3);
		}
		struct vsock_hdr h;
		memcpy(&h, buf, sizeof(h));
		handle_packet(&h, buf + sizeof(h), len);
		rx_post(buf);
		repost = true;
	}
	if (repost)
		virtq_kick(&vs.rx);
	repost = false;
	while ((ev = virtq_get(&vs.ev, 0)) != 0) {
		/* Section 5.10.6.6: after TRANSPORT_RESET all connections are
		 * gone and the guest CID must be re-read. */
		if (*ev == VSOCK_EVENT_TRANSPORT_RESET) {
			vs.transport_reset = true;
			vs.state = CONN_CLOSED;
		}
		ev_post(ev);
		repost = true;
	}
	if (repost)
		virtq_kick(&vs.ev);
	tx_reap();
}

/* ---- closing -------------------------------------------------------------- */

/* Section 5.10.6.5: a clean close is SHUTDOWN with both flags answered by
 * RST. If the peer already shut down both ways, answer with RST; else send
 * SHUTDOWN and wait for the peer's RST, resetting ourselves if it does not
 * come. */
static void vsock_close(void)
{
	if (vs.state == CONN_OPEN && vs.peer_shut_send && vs.peer_shut_rcv) {
		tx_conn(VSOCK_OP_RST, 0, 0, 0, 0);
	} else if (vs.state == CONN_OPEN) {
		tx_conn(VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_RCV | VSOCK_SHUTDOWN_SEND, 0, 0, 0);
		uint64_t t0 = tg_ticks;
		while (!vs.peer_rst && vs.state == CONN_OPEN && tg_ticks - t0 < VSOCK_CLOSE_TICKS)
			vsock_poll();
		if (!vs.peer_rst && !vs.transport_reset)
			tx_conn(VSOCK_OP_RST, 0, 0, 0, 0);
	}
	vs.state = CONN_CLOSED;
	uint64_t t0 = tg_ticks;
	while (vs.tx_inflight > 0 && tg_ticks - t0 < VSOCK_CLOSE_TICKS)
		tx_reap();
}

static void report_common(struct tg_line *out)
{
	line_kv(out, "cid", vs.cid);
	line_kv(out, "irqs", virtio_irq_count(&vs.d));
	if (vs.bad_packets != 0)
		line_kv(out, "bad_packets", vs.bad_packets);
}

/* An `error` line if the first packet came without an interrupt. */
static bool irq_failed(struct tg_line *out)
{
	if (vs.irq_missing) {
		virtio_error(out, "virtio-irq-timeout", &vs.d);
		line_kv(out, "irq", vs.d.slot.irq);
	}
	return vs.irq_missing;
}

/* An `error` line if the connection was reset; true if it was. */
static bool conn_failed(struct tg_line *out, const char *what)
{
	if (vs.transport_reset || vs.peer_rst) {
		virtio_error(out, vs.transport_reset ? "vsock-transport-reset" : what, &vs.d);
		line_kv(out, "received", vs.rx_bytes);
		return true;
	}
	return false;
}

/* ---- vsock-echo ------------------------------------------------------------ */

/* The echo ring: received bytes wait here until sent back. Its size is the
 * buf_alloc we advertise, so a peer that honours credit cannot overflow it. */
static uint8_t *echo_ring;
static uint32_t echo_head, echo_sent, echo_tail; /* free-running offsets */
static bool echo_overflow;

static void echo_ring_tail_free(uint32_t n)
{
	echo_tail += n;
	consume(n);
}

static void echo_on_data(const uint8_t *p, uint32_t n)
{
	if (echo_head - echo_tail + n > VSOCK_BUF_ALLOC) {
		echo_overflow = true;
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		echo_ring[(echo_head + i) & (VSOCK_BUF_ALLOC - 1)] = p[i];
	echo_head += n;
}

/* Sends as much of the ring as credit and slots allow. */
static bool echo_pump(void)
{
	while (echo_sent != echo_head && vs.tx_free != 0 && vs.state == CONN_OPEN) {
		uint32_t credit = peer_credit();
		if (credit == 0) {
			if (!vs.credit_requested) {
				vs.credit_requested = true;
				return tx_conn(VSOCK_OP_CREDIT_REQUEST, 0, 0, 0, 0);
			}
			return true;
		}
		uint32_t off = echo_sent & (VSOCK_BUF_ALLOC - 1);
		uint32_t n = echo_head - echo_sent;
		if (n > VSOCK_BUF_ALLOC - off)
			n = VSOCK_BUF_ALLOC - off; /* up to the ring's end */
		if (n > VSOCK_TX_CHUNK)
			n = VSOCK_TX_CHUNK;
		if (n > credit)
			n = credit;
		if (!tx_conn(VSOCK_OP_RW, 0, echo_ring + off, n, n))
			return false;
		echo_sent += n;
		vs.tx_cnt += n;
	}
	return true;
}

int workload_vsock_echo(const struct tg_boot_info *bi, uint64_t port, struct tg_line *out)
{
	static struct tg_line ready;

	if (port > 0xffffffffu) {
		line_reset(out);
		line_str(out, "error bad-workload-argument name=vsock-echo");
		return 1;
	}
	if (!vsock_open(bi, out))
		return 1;
	echo_ring = page_alloc(VSOCK_BUF_ALLOC);
	if (echo_ring == 0) {
		virtio_error(out, "virtio-out-of-memory", &vs.d);
		return 1;
	}
	vs.on_data = echo_on_data;
	vs.local_port = (uint32_t)port;
	vs.state = CONN_LISTEN;
	line_reset(&ready);
	line_str(&ready, "vsock listening");
	line_kv(&ready, "cid", vs.cid);
	line_kv(&ready, "port", port);
	console_send(&ready);

	uint64_t t_last = tg_ticks, progress = 0;
	for (;;) {
		vsock_poll();
		if (!echo_pump() || echo_overflow || vs.state == CONN_CLOSED)
			break;
		/* Done once the peer has stopped sending and all of it is back. */
		if (vs.peer_shut_send && echo_tail == echo_head)
			break;
		uint64_t now = vs.rx_bytes + echo_tail + (vs.state == CONN_OPEN);
		if (now != progress) {
			progress = now;
			t_last = tg_ticks;
			continue;
		}
		/* The host decides when to connect: wait long for that. */
		if (tg_ticks - t_last > (vs.state == CONN_LISTEN ? 6 : 1) * (uint64_t)VSOCK_IDLE_TICKS)
			break;
	}
	bool done = vs.peer_shut_send && echo_tail == echo_head && !echo_overflow;
	vsock_close();
	if (echo_overflow) {
		virtio_error(out, "vsock-credit-overrun", &vs.d);
		return 1;
	}
	if (irq_failed(out))
		return 1;
	if (!done) {
		if (conn_failed(out, "vsock-reset"))
			return 1;
		virtio_error(out, vs.peer_port == 0 ? "vsock-no-connection" : "vsock-timeout", &vs.d);
		line_kv(out, "received", vs.rx_bytes);
		return 1;
	}
	line_reset(out);
	line_str(out, "result workload=vsock-echo");
	line_kv(out, "port", port);
	line_kv(out, "peer_port", vs.peer_port);
	line_kv(out, "bytes", vs.rx_bytes);
	line_str(out, " fnv=");
	line_hex(out, vs.rx_fnv);
	report_common(out);
	virtio_reset(&vs.d);
	return 0;
}

/* ---- vsock-send -------------------------------------------------------------- */

/* byte i of the stream is (i * 7 + 3) & 0xff, which repeats every 256
 * bytes: packets point into one period-aligned copy. */
static uint8_t *pattern;

static void send_on_data(const uint8_t *p, uint32_t n)
{
	(void)p;
	consume(n); /* hashed in handle_packet, nothing kept */
}

int workload_vsock_send(const struct tg_boot_info *bi, const char *arg, size_t len,
			struct tg_line *out)
{
	size_t comma = 0;
	uint64_t port, bytes;

	while (comma < len && arg[comma] != ',')
		comma++;
	if (comma == len || !tg_parse_u64(arg, comma, &port) || port > 0xffffffffu ||
	    !tg_parse_u64(arg + comma + 1, len - comma - 1, &bytes)) {
		line_reset(out);
		line_str(out, "error bad-workload-argument name=vsock-send:");
		line_strn(out, arg, len);
		return 1;
	}
	if (!vsock_open(bi, out))
		return 1;
	pattern = page_alloc(256 + VSOCK_TX_CHUNK);
	if (pattern == 0) {
		virtio_error(out, "virtio-out-of-memory", &vs.d);
		return 1;
	}
	for (uint32_t i = 0; i < 256 + VSOCK_TX_CHUNK; i++)
		pattern[i] = (uint8_t)(i * 7 + 3);
	vs.on_data = send_on_data;
	vs.local_port = VSOCK_LOCAL_PORT;
	vs.peer_port = (uint32_t)port;
	vs.state = CONN_CONNECTING;
	tx_conn(VSOCK_OP_REQUEST, 0, 0, 0, 0);
	uint64_t t0 = tg_ticks;
	while (vs.state == CONN_CONNECTING && tg_ticks - t0 < VSOCK_CONNECT_TICKS)
		vsock_poll();
	if (vs.state != CONN_OPEN) {
		virtio_error(out, vs.state == CONN_CLOSED ? "vsock-connect-refused" : "vsock-connect-timeout",
			     &vs.d);
		line_kv(out, "port", port);
		return 1;
	}

	uint64_t sent = 0, t_last = tg_ticks, progress = 0;
	bool shut = false;
	while (vs.state == CONN_OPEN && (sent < bytes || vs.rx_bytes < bytes)) {
		vsock_poll();
		while (sent < bytes && vs.tx_free != 0 && vs.state == CONN_OPEN) {
			uint32_t credit = peer_credit();
			if (credit == 0) {
				if (!vs.credit_requested) {
					vs.credit_requested = true;
					tx_conn(VSOCK_OP_CREDIT_REQUEST, 0, 0, 0, 0);
				}
				break;
			}
			uint64_t n = bytes - sent;
			if (n > VSOCK_TX_CHUNK)
				n = VSOCK_TX_CHUNK;
			if (n > credit)
				n = credit;
			tx_conn(VSOCK_OP_RW, 0, pattern + (sent & 255), (uint32_t)n, 0);
			sent += n;
			vs.tx_cnt += (uint32_t)n;
		}
		if (sent == bytes && !shut) {
			/* Half-close: the host reads EOF after our bytes. */
			tx_conn(VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_SEND, 0, 0, 0);
			shut = true;
		}
		if (vs.peer_shut_send)
			break; /* the host will send no more */
		if (sent + vs.rx_bytes != progress) {
			progress = sent + vs.rx_bytes;
			t_last = tg_ticks;
		} else if (tg_ticks - t_last > VSOCK_IDLE_TICKS) {
			break;
		}
	}
	vsock_close();
	if (irq_failed(out) || (vs.rx_bytes < bytes && conn_failed(out, "vsock-reset")))
		return 1;
	line_reset(out);
	line_str(out, vs.rx_bytes == bytes && sent == bytes ? "result" : "error vsock-short");
	line_str(out, " workload=vsock-send");
	line_kv(out, "port", port);
	line_kv(out, "sent", sent);
	line_kv(out, "received", vs.rx_bytes);
	line_str(out, " received_fnv=");
	line_hex(out, vs.rx_fnv);
	report_common(out);
	virtio_reset(&vs.d);
	return vs.rx_bytes == bytes && sent == bytes ? 0 : 1;
}
