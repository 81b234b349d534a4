/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPL3 side of the user-call services (head.S, tg_ucall). Port I/O from CPL3
 * raises #GP (IOPL 0, no I/O bitmap), so the few things that need ports
 * trap into a tiny CPL0 handler: a CALL to tg_ucall, whose UD2 the #UD
 * handler recognises by its address. Arguments: EAX = service (TG_SYS_*),
 * RSI/RDX/RDI as below; the write service clobbers RCX.
 */
#ifndef DSEC_TESTGUEST_SYSCALL_H_
#define DSEC_TESTGUEST_SYSCALL_H_

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* Writes len bytes to the UART with one `rep outsb`. */
static inline void sys_write(const char *buf, size_t len)
{
	__asm__ volatile("call tg_ucall"
			 : "+S"(buf), "+d"(len)
			 : "a"(TG_SYS_WRITE)
			 : "rcx", "memory");
}

/* isa-debug-exit, then i8042 reset, then triple fault: never returns. */
static inline __attribute__((noreturn)) void sys_shutdown(uint32_t code)
{
	__asm__ volatile("call tg_ucall" : : "a"(TG_SYS_SHUTDOWN), "D"(code) : "memory");
	__builtin_unreachable();
}

static inline __attribute__((noreturn)) void sys_triple_fault(void)
{
	__asm__ volatile("call tg_ucall" : : "a"(TG_SYS_TRIPLE_FAULT) : "memory");
	__builtin_unreachable();
}

/* Asks the i8042 to pulse reset; returns if there is none. */
static inline void sys_reset(void)
{
	uint32_t nr = TG_SYS_RESET;

	__asm__ volatile("call tg_ucall" : "+a"(nr) : : "memory");
}

/* Halts this CPU for good with interrupts off (head.S tg_park): how an AP
 * ends. Never returns. */
static inline __attribute__((noreturn)) void sys_park(void)
{
	__asm__ volatile("call tg_ucall" : : "a"(TG_SYS_PARK) : "memory");
	__builtin_unreachable();
}

/* Loads both 8259A interrupt mask registers (OCW1): bit n of mask masks
 * IRQ n (bits 8-15: the slave; IRQ 2 is the cascade). */
static inline void sys_pic_mask(uint16_t mask)
{
	uint32_t nr = TG_SYS_PIC_MASK;

	__asm__ volatile("call tg_ucall" : "+a"(nr) : "D"((uint32_t)mask) : "memory");
}

/* Sleeps (sti; hlt at CPL0) until the next interrupt: at most one timer
 * tick (10 ms). The vCPU blocks in the host instead of spinning. */
static inline void sys_halt(void)
{
	uint32_t nr = TG_SYS_HALT;

	__asm__ volatile("call tg_ucall" : "+a"(nr) : : "memory");
}

/* One byte of port I/O (the PIT calibration in memload.c). */
static inline uint8_t sys_inb(uint16_t port)
{
	uint32_t v = TG_SYS_INB;

	__asm__ volatile("call tg_ucall" : "+a"(v) : "D"((uint32_t)port) : "rdx", "memory");
	return (uint8_t)v;
}

static inline void sys_outb(uint16_t port, uint8_t value)
{
	uint32_t nr = TG_SYS_OUTB;

	__asm__ volatile("call tg_ucall"
			 : "+a"(nr)
			 : "D"((uint32_t)port), "S"((uint32_t)value)
			 : "rdx", "memory");
}

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

/* Runs `iterations` rounds of a DEC+JNZ loop at CPL0 (ECX clobbered). */
static inline void sys_cpl0_spin(uint32_t iterations)
{
	uint32_t nr = TG_SYS_SPIN;

	__asm__ volatile("call tg_ucall" : "+a"(nr), "+D"(iterations) : : "rcx", "memory");
}

#endif /* DSEC_TESTGUEST_SYSCALL_H_ */
