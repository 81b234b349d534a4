/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How an application processor (AP) gets from the STARTUP IPI to CPL3.
 *
 * tg_trampoline is real-mode code, assembled here as data and copied by the
 * BSP (at CPL3, smp.c) to TG_TRAMPOLINE_BASE before it sends the IPIs, so it
 * must be position independent within its page: it addresses its own data
 * through CS, whose base the SIPI sets to the page address. A STARTUP IPI
 * with vector VV starts the AP in real mode at CS:IP = VV00:0000, i.e.
 * physical 0xVV000 (Intel SDM vol. 3 sections 8.4.4.1 and 10.6.1; MP spec
 * appendix B.4). After INIT the AP has paging and protection off, CR0.CD/NW
 * set, CR4 = 0 and EFER = 0 (SDM table 9-1).
 *
 * It goes straight from real mode to long mode: load the shared GDT, set
 * CR4.PAE, CR3 = the static identity tables, EFER.LME, then CR0.PE and
 * CR0.PG in one write (legal: the MOV to CR0 only rejects PG without PE),
 * which activates IA-32e mode (SDM 10.8.5); the far jump to the 64-bit code
 * selector then leaves compatibility mode. Every instruction here and in
 * tg_ap64 runs emulated on PVM hosts, so it is about 25 in all.
 */
#include "layout.h"

	.section .rodata, "a", @progbits
	.balign 16
	.globl tg_trampoline, tg_trampoline_end
	.code16
tg_trampoline:
	cli
	lgdtl %cs:(tg_tramp_gdtr - tg_trampoline)
	movl $0x20, %eax		/* CR4.PAE only, as on the BSP */
	movl %eax, %cr4
	movl $tg_pml4, %eax
	movl %eax, %cr3
	movl $0xc0000080, %ecx		/* IA32_EFER: LME | NXE, as on the BSP */
	movl $0x900, %eax
	xorl %edx, %edx
	wrmsr
	/* PG | WP | NE | ET | PE, and CD/NW cleared (caches on). */
	movl $0x80010031, %eax
	movl %eax, %cr0
	ljmpl $TG_SEL_KCODE, $tg_ap64
	.balign 8
tg_tramp_gdtr:
	/* LGDT with a 32-bit operand size takes a 16-bit limit and a 32-bit
	 * base (SDM vol. 2, LGDT). */
	.word TG_GDT_SIZE - 1
	.long tg_gdt
tg_trampoline_end:

/*
 * 64-bit, CPL0, still on no usable stack. The AP finds its slot from its
 * own local APIC id (SDM 10.4.6), loads the IDT and its TSS, and IRETQs to
 * tg_ap_main(apic_id) at CPL3 on its own user stack with IF clear: APs take
 * no interrupts (their LINT0 is masked after INIT, and only the BSP owns the
 * PIC and PIT). Data segment registers keep their real-mode values; the
 * IRETQ to CPL3 nulls them (SDM vol. 2, IRET), which 64-bit code ignores.
 */
	.text
	.code64
tg_ap64:
	movl $TG_LAPIC_BASE, %eax
	movl TG_LAPIC_ID(%rax), %ebx
	shrl $24, %ebx
	cmpl $TG_MAX_CPUS, %ebx
	jae tg_park			/* no slot for it: the BSP never starts one */
	lidt tg_idt_ptr(%rip)
	movl %ebx, %eax
	shll $4, %eax
	addl $TG_SEL_AP_TSS, %eax
	ltr %ax
	movl %ebx, %eax
	shll $TG_AP_KSTACK_SHIFT, %eax
	leaq tg_ap_kstacks + (1 << TG_AP_KSTACK_SHIFT)(%rax), %rsp
	movl %ebx, %eax
	shll $TG_AP_USTACK_SHIFT, %eax
	leaq tg_ap_ustacks + (1 << TG_AP_USTACK_SHIFT) - 8(%rax), %rcx
	movl %ebx, %edi
	/* IRETQ frame (SDM 6.14.3): SS, RSP, RFLAGS (reserved bit 1 only),
	 * CS, RIP. */
	pushq $TG_SEL_UDATA
	pushq %rcx
	pushq $0x2
	pushq $TG_SEL_UCODE
	pushq $tg_ap_main
	iretq

	/* No executable stack: silences ld for hand-written assembly. */
	.section .note.GNU-stack, "", @progbits
