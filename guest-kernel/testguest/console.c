/* SPDX-License-Identifier: Apache-2.0 */
#include "console.h"

#include "syscall.h"

static volatile uint32_t *reg32(uint64_t off)
{
	return (volatile uint32_t *)(uintptr_t)(DSEC_TESTDEV_BASE + off);
}

bool console_has_testdev(void)
{
	/* -1: not probed yet. One MMIO read (one exit) the first time. Under
	 * QEMU the address is unassigned and reads as 0. */
	static int present = -1;

	if (present < 0)
		present = *reg32(DSEC_TESTDEV_REG_MAGIC) == DSEC_TESTDEV_MAGIC_VALUE;
	return present != 0;
}

/*
 * Sending is two register writes (MSG_ADDR, then MSG_LEN) to one device
 * shared by all CPUs, or one UART line, so with APs running (smp workload)
 * senders take this spinlock. XCHG with a memory operand is locked
 * implicitly (SDM vol. 3 section 9.1.2.1) and runs natively at CPL3.
 */
static volatile uint32_t send_lock;

static void send_lock_acquire(void)
{
	while (__atomic_exchange_n(&send_lock, 1, __ATOMIC_ACQUIRE) != 0)
		while (send_lock != 0)
			__asm__ volatile("pause");
}

static void send_lock_release(void)
{
	__atomic_store_n(&send_lock, 0, __ATOMIC_RELEASE);
}

void console_send(struct tg_line *l)
{
	send_lock_acquire();
	if (console_has_testdev()) {
		/* The page tables are an identity map, so the buffer's virtual
		 * address is its guest-physical address. Writing MSG_LEN sends. */
		*(volatile uint64_t *)(uintptr_t)(DSEC_TESTDEV_BASE + DSEC_TESTDEV_REG_MSG_ADDR) =
			(uint64_t)(uintptr_t)l->buf;
		*reg32(DSEC_TESTDEV_REG_MSG_LEN) = l->len;
	} else {
		/* buf has one spare byte beyond DSEC_TESTDEV_MAX_MSG for this. */
		l->buf[l->len] = '\n';
		sys_write(l->buf, l->len + 1);
	}
	send_lock_release();
}

void console_send_str(const char *s)
{
	static struct tg_line l;

	line_reset(&l);
	line_str(&l, s);
	console_send(&l);
}

void console_event(uint32_t event)
{
	if (console_has_testdev())
		*reg32(DSEC_TESTDEV_REG_EVENT) = event;
}

void console_shutdown(uint32_t code)
{
	if (console_has_testdev())
		*reg32(DSEC_TESTDEV_REG_SHUTDOWN) = code;
	/* Still running: not dsec-vmm, or it ignored the write. */
	sys_shutdown(code);
}
