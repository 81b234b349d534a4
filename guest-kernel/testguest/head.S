/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPL0 run-time code: interrupt/exception stubs, the timer and PIC handlers,
 * the user-call (CPL3 -> CPL0 service) handler, and the TSS.
 *
 * The stubs live in .head, which the linker script places at exactly
 * TG_KBASE: stub v is at TG_KBASE + v*TG_STUB_SIZE (enforced with .org, which
 * fails to assemble if a stub outgrows its slot), so tables.S can build the
 * IDT as static data from constants.
 *
 * Everything here runs emulated on this host (about 1 us per instruction), so
 * the handlers are a handful of instructions each and the real work (fault
 * reports, formatting) is handed to CPL3.
 */
#include "layout.h"
#include "devices/testdev/testdev_regs.h"

	.section .head, "awx", @progbits
	.code64

/*
 * Exceptions 0-31 push (error code or 0, vector) and share tg_exc_common.
 * Intel SDM vol. 3 table 6-1: vectors 8, 10-14, 17, 21, 29 and 30 push an
 * error code themselves.
 */
	.set vec, 0
	.rept TG_NUM_STUBS
	.org vec * TG_STUB_SIZE
	.if vec == TG_VEC_UD
	jmp tg_ud
	.elseif vec < 32
	.if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
	.else
	pushq $0
	.endif
	pushq $vec
	jmp tg_exc_common
	.elseif vec == TG_VEC_TIMER
	incq tg_ticks(%rip)
	jmp tg_irq_eoi_master
	.else
	/* Count every other PIC vector: the virtio drivers (virtio.c) wait for
	 * their device's IRQ by watching tg_irq_counts[irq] from CPL3. */
	incq tg_irq_counts + 8 * (vec - TG_VEC_TIMER)(%rip)
	jmp tg_irq_eoi_both
	.endif
	.set vec, vec + 1
	.endr

/*
 * 64-bit TSS (Intel SDM vol. 3 figure 8-11). Only RSP0 matters: the stack the
 * CPU switches to when an interrupt arrives at CPL3. The I/O map base points
 * past the limit, so there is no I/O permission bitmap and CPL3 port I/O
 * faults (IOPL is 0).
 */
	.org TG_TSS_OFF
tg_tss:
	.long 0				/* reserved */
	.quad tg_kstack_top		/* RSP0 */
	.quad 0, 0			/* RSP1, RSP2 */
	.quad 0				/* reserved */
	.quad 0, 0, 0, 0, 0, 0, 0	/* IST1-7: unused, all gates use IST 0 */
	.quad 0				/* reserved */
	.word 0				/* reserved */
	.word TG_TSS_LIMIT + 1		/* I/O map base: beyond the limit */
	.if . - tg_tss != TG_TSS_LIMIT + 1
	.error "TSS layout"
	.endif

/*
 * One TSS per AP, indexed by APIC id, each with RSP0 at the top of that AP's
 * kernel stack. A TSS descriptor is marked busy by LTR and LTR faults on a
 * busy one (SDM vol. 3 section 8.2.2), so CPUs cannot share a descriptor,
 * and they must not share RSP0 either.
 */
	.set cpu, 0
	.rept TG_MAX_CPUS
	.org TG_AP_TSS_OFF + cpu * TG_AP_TSS_STRIDE
	.long 0
	.quad tg_ap_kstacks + (cpu + 1) * (1 << TG_AP_KSTACK_SHIFT)
	.quad 0, 0, 0
	.quad 0, 0, 0, 0, 0, 0, 0
	.quad 0
	.word 0
	.word TG_TSS_LIMIT + 1
	.set cpu, cpu + 1
	.endr

/* 8259A non-specific EOI (OCW2 = 0x20). IRQ0 is unmasked at boot, other
 * lines only while a virtio workload unmasks its device's IRQ (user call
 * TG_SYS_PIC_MASK). The PIC is in edge mode, so EOI before the device has
 * been acknowledged does not re-trigger; an EOI to the slave for a master
 * IRQ, or with no bit in service, is harmless. */
tg_irq_eoi_master:
	pushq %rax
	movb $0x20, %al
	outb %al, $0x20
	popq %rax
	iretq
tg_irq_eoi_both:
	pushq %rax
	movb $0x20, %al
	outb %al, $0xa0
	outb %al, $0x20
	popq %rax
	iretq

/*
 * Exception: instead of formatting at CPL0 (slow here), rewrite the frame to
 * IRETQ into tg_fault_report(vector, error, rip, cpl) at CPL3 on a spare
 * stack, with IF clear so timer ticks do not interleave. A second exception
 * (fault while reporting a fault) shuts down from CPL0 without a report.
 * Frame on entry: vector, error, RIP, CS, RFLAGS, RSP, SS (SDM 6.14.2).
 */
tg_exc_common:
	cmpb $0, tg_in_fault(%rip)
	jne tg_double_fault
	movb $1, tg_in_fault(%rip)
	popq %rdi
	popq %rsi
	movq (%rsp), %rdx
	movq 8(%rsp), %rcx
	andl $3, %ecx
	movq $tg_fault_report, (%rsp)
	movq $TG_SEL_UCODE, 8(%rsp)
	movq $0x2, 16(%rsp)
	movq $tg_fault_stack_top - 8, 24(%rsp)
	movq $TG_SEL_UDATA, 32(%rsp)
	iretq
tg_double_fault:
	movl $TG_EXIT_DOUBLE_FAULT, %edi
	jmp tg_sys_shutdown

/*
 * User calls: CPL3 enters CPL0 by executing the UD2 at tg_ucall_insn; the
 * #UD handler recognises that RIP, performs the service named by EAX (ABI in
 * syscall.h) and IRETQs past the UD2. Any other #UD is an ordinary fault.
 *
 * Why not `int $0x80` (gate DPL 3) or SYSCALL: on this host's PVM hypervisor
 * INT n from CPL3 raises #UD in the guest, and SYSCALL reaches IA32_LSTAR
 * still at CPL3 (both measured). Exceptions from CPL3 are delivered through
 * the IDT everywhere, so a trapping instruction at a known address is the
 * one gate that works on PVM, KVM and QEMU alike.
 */
	.text
	.globl tg_ucall
tg_ucall:
tg_ucall_insn:
	ud2
	ret

	.section .head, "awx", @progbits
tg_ud:
	cmpq $tg_ucall_insn, (%rsp)
	je 1f
	pushq $0
	pushq $TG_VEC_UD
	jmp tg_exc_common
1:	addq $2, (%rsp)			/* resume after the 2-byte UD2 */
	testl %eax, %eax
	jnz 2f
	/* TG_SYS_WRITE: one string instruction per line. */
	movq %rdx, %rcx
	movl $TG_PORT_UART, %edx
	rep outsb
	iretq
2:	cmpl $TG_SYS_SHUTDOWN, %eax
	je tg_sys_shutdown
	cmpl $TG_SYS_TRIPLE_FAULT, %eax
	je tg_triple_fault
	cmpl $TG_SYS_PARK, %eax
	je tg_park
	cmpl $TG_SYS_PIC_MASK, %eax
	jne 4f
	/* OCW1 to both 8259As: EDI bits 7:0 master, 15:8 slave. */
	movl %edi, %eax
	outb %al, $0x21
	movb %ah, %al
	outb %al, $0xa1
	iretq
4:
	cmpl $TG_SYS_HALT, %eax
	jne 5f
	/* Sleep until the next interrupt (the 100 Hz tick at the latest). The
	 * STI shadow covers HLT, so an interrupt pending since the UD2 wakes
	 * it at once instead of being lost. The interrupt nests on this stack
	 * (CPL0 -> CPL0) and returns here; IRETQ restores the caller's IF. */
	sti
	hlt
	iretq
5:
	cmpl $TG_SYS_INB, %eax
	jne 6f
	movl %edi, %edx
	inb %dx, %al
	movzbl %al, %eax
	iretq
6:
	cmpl $TG_SYS_OUTB, %eax
	jne 7f
	movl %edi, %edx
	movl %esi, %eax
	outb %al, %dx
	iretq
7:
	cmpl $TG_SYS_SPIN, %eax
	jne 8f
	/* EDI iterations of DEC+JNZ at CPL0: how fast this host runs guest
	 * kernel code (the full Linux boot test's probe). EDI 0 is no loop. */
	movl %edi, %ecx
	testl %ecx, %ecx
	jz 3f
9:	decl %ecx
	jnz 9b
	iretq
8:
	cmpl $TG_SYS_RESET, %eax
	jne 3f
	movb $TG_I8042_RESET, %al
	outb %al, $TG_PORT_I8042_CMD
3:	iretq				/* unknown service, or reset ignored */

/*
 * Where an AP ends up. With IF clear only NMI, SMI, INIT or RESET wake a
 * halted CPU (SDM vol. 3 section 8.4.4 / HLT), and the loop halts again
 * after an NMI. With the in-kernel irqchip HLT blocks the vCPU thread in
 * the host kernel, so a parked AP costs no host CPU, unlike a CPL3 spin.
 */
	.globl tg_park
tg_park:
	cli
	hlt
	jmp tg_park

/*
 * Shutdown without the test device: QEMU's isa-debug-exit (exit status
 * (code << 1) | 1), then i8042 pulse-reset (command 0xFE), then a triple
 * fault, whichever the platform has first.
 */
tg_sys_shutdown:
	movl %edi, %eax
	outb %al, $TG_PORT_DEBUG_EXIT
	movb $TG_I8042_RESET, %al
	outb %al, $TG_PORT_I8042_CMD
tg_triple_fault:
	/* With a zero-limit IDT, #UD cannot be delivered, nor the #GP/#DF that
	 * follow: the CPU shuts down (SDM 6.15, interrupt 8). */
	lidt tg_empty_idtr(%rip)
	ud2

	.section .rodata
	.balign 8
tg_empty_idtr:
	.word 0
	.quad 0

	.section .bss
	.balign 16
	.globl tg_kstack_top
tg_kstack:
	.skip 4096
tg_kstack_top:
tg_fault_stack:
	.skip 16384
tg_fault_stack_top:
tg_in_fault:
	.byte 0

	/* Interrupts per PIC line (index = IRQ; 0 is unused, see tg_ticks). */
	.balign 8
	.globl tg_irq_counts
tg_irq_counts:
	.skip 16 * 8

	/* Per-AP stacks, indexed by APIC id (layout.h). */
	.balign 16
	.globl tg_ap_kstacks, tg_ap_ustacks
tg_ap_kstacks:
	.skip TG_MAX_CPUS << TG_AP_KSTACK_SHIFT
tg_ap_ustacks:
	.skip TG_MAX_CPUS << TG_AP_USTACK_SHIFT

	/* No executable stack: silences ld for hand-written assembly. */
	.section .note.GNU-stack, "", @progbits
