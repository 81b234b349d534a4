/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Descriptor tables and page tables as static data, so that CPL0 (emulated,
 * about 1 us per instruction on this host) only loads them: no fill loops.
 */
#include "layout.h"

	.section .data
	.balign 16

/*
 * GDT (Intel SDM vol. 3 section 3.4.5; in 64-bit mode code segments use the
 * L bit and ignore base/limit, data segments ignore almost everything).
 */
	.globl tg_gdt_ptr, tg_gdt
tg_gdt:
	.quad 0				/* 0x00 null */
	.quad 0				/* 0x08 unused */
	.quad 0x00af9a000000ffff	/* 0x10 kernel code: P, DPL0, L */
	.quad 0x00cf92000000ffff	/* 0x18 kernel data: P, DPL0, RW */
	.quad 0x00cff2000000ffff	/* 0x20 user data: P, DPL3, RW */
	.quad 0x00affa000000ffff	/* 0x28 user code: P, DPL3, L */
	/* 0x30 64-bit available TSS (type 9), 16 bytes (SDM figure 8-4). */
	.macro TSS_DESC
	.word TG_TSS_LIMIT
	.word tss_addr & 0xffff
	.byte (tss_addr >> 16) & 0xff
	.byte 0x89
	.byte 0
	.byte (tss_addr >> 24) & 0xff
	.long tss_addr >> 32
	.long 0
	.endm
	.set tss_addr, TG_KBASE + TG_TSS_OFF
	TSS_DESC
	/* 0x40 + 16*id: the APs' TSSes (head.S), one per APIC id. */
	.if . - tg_gdt != TG_SEL_AP_TSS
	.error "GDT layout"
	.endif
	.set cpu, 0
	.rept TG_MAX_CPUS
	.set tss_addr, TG_KBASE + TG_AP_TSS_OFF + cpu * TG_AP_TSS_STRIDE
	TSS_DESC
	.set cpu, cpu + 1
	.endr
tg_gdt_end:
	.if tg_gdt_end - tg_gdt != TG_GDT_SIZE
	.error "GDT size (layout.h TG_GDT_SIZE)"
	.endif

/* LGDT operand. In 32-bit mode (PVH entry) LGDT reads limit + the low 32
 * bits of the base, so the same operand serves both modes. */
	.balign 8
	.word 0, 0, 0
tg_gdt_ptr:
	.word tg_gdt_end - tg_gdt - 1
	.quad tg_gdt

/*
 * IDT of 64-bit interrupt gates (SDM figure 6-8): type 0xE, so IF is cleared
 * on entry. All have DPL 0: hardware interrupts and exceptions ignore the
 * gate DPL, and CPL3 enters CPL0 through #UD (head.S), not INT n. Vectors past 47
 * are beyond the limit (a stray one raises #GP, reported as a fault).
 */
	.macro GATE handler, dpl
	.word (\handler) & 0xffff
	.word TG_SEL_KCODE
	.byte 0
	.byte 0x8e | ((\dpl) << 5)
	.word ((\handler) >> 16) & 0xffff
	.long (\handler) >> 32
	.long 0
	.endm

	.balign 16
	.globl tg_idt_ptr
tg_idt:
	.set vec, 0
	.rept TG_NUM_STUBS
	.set handler, TG_KBASE + vec * TG_STUB_SIZE
	GATE handler, 0
	.set vec, vec + 1
	.endr
tg_idt_end:

	.balign 8
	.word 0, 0, 0
tg_idt_ptr:
	.word tg_idt_end - tg_idt - 1
	.quad tg_idt

/*
 * Identity map of the low 4 GiB with 2 MiB pages (SDM 4.5): PML4[0] ->
 * PDPT[0..3] -> four page directories. U/S is set at every level because CPL3
 * does all the work, MMIO included. The 32-bit MMIO hole [3 GiB, 4 GiB) is
 * mapped uncached (PCD|PWT).
 */
	.set PTE_P, 0x1
	.set PTE_RW, 0x2
	.set PTE_US, 0x4
	.set PTE_PWT, 0x8
	.set PTE_PCD, 0x10
	.set PTE_PS, 0x80
	.set PTE_TABLE, PTE_P | PTE_RW | PTE_US

	.balign 4096
	.globl tg_pml4
tg_pml4:
	.quad tg_pdpt + PTE_TABLE
	.skip 4096 - 8
tg_pdpt:
	.quad tg_pd + PTE_TABLE
	.quad tg_pd + 0x1000 + PTE_TABLE
	.quad tg_pd + 0x2000 + PTE_TABLE
	.quad tg_pd + 0x3000 + PTE_TABLE
	.skip 4096 - 32
tg_pd:
	.set page, 0
	.rept 2048
	.if page < 0xc0000000
	.quad page | PTE_P | PTE_RW | PTE_US | PTE_PS
	.else
	.quad page | PTE_P | PTE_RW | PTE_US | PTE_PS | PTE_PCD | PTE_PWT
	.endif
	.set page, page + 0x200000
	.endr

	/* No executable stack: silences ld for hand-written assembly. */
	.section .note.GNU-stack, "", @progbits
