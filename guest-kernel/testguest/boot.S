/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two entry points and the one-time CPL0 setup they share.
 *
 *  - tg_linux64_start (ELF e_entry): Linux boot protocol 64-bit entry
 *    (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol"): long mode,
 *    the loader's identity page tables, RSI = struct boot_params, IF = 0.
 *  - tg_pvh_start (Xen ELF note PHYS32_ENTRY): PVH entry (xen
 *    docs/misc/pvh.pandoc): 32-bit protected mode, paging off, EBX = struct
 *    hvm_start_info. It enables PAE + long mode + paging with the guest's
 *    static tables and joins the 64-bit path.
 *
 * After the mode switch both run tg_common64 with RDI = boot protocol and
 * RSI = boot info address, which loads the guest's own GDT/TSS/IDT/CR3,
 * programs the PIC and PIT, and IRETQs to tg_user_main at CPL3. About 35
 * instructions in all: every one is emulated on this host.
 */
#include "layout.h"
#include "devices/testdev/testdev_regs.h"

/* Xen ELF note (xen/include/public/elfnote.h: XEN_ELFNOTE_PHYS32_ENTRY = 18),
 * read by QEMU and other PVH loaders from the PT_NOTE segment. */
	.section .note.Xen, "a", @note
	.balign 4
	.long 4				/* namesz: "Xen\0" */
	.long 4				/* descsz */
	.long 18			/* type */
	.asciz "Xen"
	.balign 4
	.long tg_pvh_start

	.text
	.code32
	.globl tg_pvh_start
tg_pvh_start:
	/* Paging is off: the test device is at its physical address. */
	cmpl $DSEC_TESTDEV_MAGIC_VALUE, DSEC_TESTDEV_BASE + DSEC_TESTDEV_REG_MAGIC
	jne 1f
	movl $DSEC_TESTDEV_EVENT_FIRST_INSN, DSEC_TESTDEV_BASE + DSEC_TESTDEV_REG_EVENT
1:	movl %ebx, %esi
	lgdt tg_gdt_ptr
	/* SDM vol. 3 section 10.8.5: PAE, CR3, EFER.LME, then CR0.PG. */
	movl %cr4, %eax
	orl $0x20, %eax			/* CR4.PAE */
	movl %eax, %cr4
	movl $tg_pml4, %eax
	movl %eax, %cr3
	movl $0xc0000080, %ecx		/* IA32_EFER */
	rdmsr
	orl $0x100, %eax		/* LME */
	wrmsr
	movl %cr0, %eax
	orl $0x80000001, %eax		/* PG | PE */
	movl %eax, %cr0
	ljmp $TG_SEL_KCODE, $tg_pvh64

	.code64
tg_pvh64:
	/* Upper halves of GPRs are undefined after the switch (SDM 3.4.1.1). */
	movl %esi, %esi
	movl $TG_BOOT_PVH, %edi
	jmp tg_common64

	.globl tg_linux64_start
tg_linux64_start:
	movl $DSEC_TESTDEV_BASE, %eax
	cmpl $DSEC_TESTDEV_MAGIC_VALUE, DSEC_TESTDEV_REG_MAGIC(%rax)
	jne 1f
	movl $DSEC_TESTDEV_EVENT_FIRST_INSN, DSEC_TESTDEV_REG_EVENT(%rax)
1:	movl $TG_BOOT_LINUX64, %edi

tg_common64:
	/* Neither protocol promises a usable stack. */
	leaq tg_kstack_top(%rip), %rsp
	movq %rsi, %rbx
	lgdt tg_gdt_ptr(%rip)
	lidt tg_idt_ptr(%rip)
	movl $TG_SEL_TSS, %eax
	ltr %ax
	movl $tg_pml4, %eax
	movq %rax, %cr3

	/*
	 * 8259A: ICW1 (edge, cascade, ICW4 needed) to both, then ICW2 (vector
	 * base 32 / 40), ICW3 (slave on IRQ2 / cascade id 2), ICW4 (8086 mode)
	 * and OCW1 (mask: only IRQ0) as one string write per chip.
	 */
	movb $0x11, %al
	outb %al, $0x20
	outb %al, $0xa0
	leaq tg_pic_pit_bytes(%rip), %rsi
	movl $4, %ecx
	movl $0x21, %edx
	rep outsb
	movl $4, %ecx
	movl $0xa1, %edx
	rep outsb
	/* 8254 channel 0, lobyte/hibyte, mode 2, divisor 1193182/100 = 11932. */
	movb $0x34, %al
	outb %al, $0x43
	movl $2, %ecx
	movl $0x40, %edx
	rep outsb
	/*
	 * The PIC reaches the CPU through the local APIC's LINT0, which must be
	 * unmasked in ExtINT mode (SDM vol. 3 section 10.5.1; firmware normally
	 * does this, and QEMU microvm leaves it masked). LVT writes only stick
	 * while the APIC is software-enabled (SDM 10.4.7.2), so set SVR first:
	 * enable bit 8, spurious vector 47 (low nibble 0xF, has an IDT stub).
	 */
	movl $TG_LAPIC_BASE, %eax
	movl $0x100 | 47, 0xf0(%rax)	/* spurious-interrupt vector register */
	movl $0x700, 0x350(%rax)	/* LVT LINT0: ExtINT, unmasked */

	/* IRETQ frame (SDM 6.14.3): SS, RSP, RFLAGS (IF | reserved bit 1),
	 * CS, RIP. RSP is 16-byte aligned minus 8, as after a CALL. */
	movq %rbx, %rsi
	pushq $TG_SEL_UDATA
	pushq $tg_user_stack_top - 8
	pushq $0x202
	pushq $TG_SEL_UCODE
	pushq $tg_user_main
	iretq

	.section .rodata
tg_pic_pit_bytes:
	.byte 0x20, 0x04, 0x01, 0xfe	/* master: ICW2, ICW3, ICW4, OCW1 */
	.byte 0x28, 0x02, 0x01, 0xff	/* slave:  ICW2, ICW3, ICW4, OCW1 */
	.byte 11932 & 0xff, 11932 >> 8	/* PIT divisor */

	.section .bss
	.balign 16
tg_user_stack:
	.skip 65536
	.globl tg_user_stack_top
tg_user_stack_top:

	/* No executable stack: silences ld for hand-written assembly. */
	.section .note.GNU-stack, "", @progbits
