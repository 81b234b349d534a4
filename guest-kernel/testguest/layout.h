/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Constants shared by the test guest's assembly (CPL0) and C (CPL3) code.
 * Plain C preprocessor definitions only, so that .S files can include it.
 */
#ifndef DSEC_TESTGUEST_LAYOUT_H_
#define DSEC_TESTGUEST_LAYOUT_H_

/*
 * The .head section is linked at exactly TG_KBASE (checked by the linker
 * script). The interrupt stubs and the TSS sit at fixed offsets inside it, so
 * their addresses are assembler constants and the IDT gates and the TSS
 * descriptor (whose address fields are split into 16/8/32-bit pieces, Intel
 * SDM vol. 3 sections 6.14.1 and 8.2.3) can be laid out as static data:
 * GNU as cannot split a relocatable symbol into such fields.
 */
#define TG_KBASE 0x100000
#define TG_STUB_SIZE 16            /* one stub per vector, at TG_KBASE + v*16 */
#define TG_NUM_STUBS 48            /* exceptions 0-31 and PIC vectors 32-47 */
#define TG_TSS_OFF (TG_NUM_STUBS * TG_STUB_SIZE)
#define TG_TSS_LIMIT 103           /* 64-bit TSS is 104 bytes (SDM 8.7) */

/*
 * SMP. APs are indexed by their local APIC id, which the MP table the
 * monitor writes numbers 0..N-1; ids at or above TG_MAX_CPUS (the monitor's
 * own vCPU limit) are not started. Each AP has its own TSS in .head at
 * TG_AP_TSS_OFF + id * TG_AP_TSS_STRIDE (128-byte slots, so a TSS never
 * crosses a page), its own GDT descriptor TG_SEL_AP_TSS + id * 16, and its
 * own kernel and user stacks (head.S).
 */
#define TG_MAX_CPUS 64
#define TG_AP_TSS_OFF 0x400
#define TG_AP_TSS_STRIDE 128
#define TG_AP_KSTACK_SHIFT 10      /* 1 KiB: a user-call or fault frame only */
#define TG_AP_USTACK_SHIFT 13      /* 8 KiB: the AP's CPL3 code and one report line */
/* The real-mode trampoline is copied to this 4 KiB-aligned page below 1 MiB;
 * the STARTUP IPI vector is its page number (Intel SDM vol. 3 section
 * 10.6.1, MP spec appendix B.4.2). */
#define TG_TRAMPOLINE_BASE 0x10000

#define TG_VEC_UD 6                /* #UD: also the user-call trap, see head.S */
#define TG_VEC_TIMER 32            /* PIC master IRQ0 after remapping */

/* GDT selectors. 0x10 is also the kernel CS of the Linux 64-bit entry. */
#define TG_SEL_KCODE 0x10
#define TG_SEL_KDATA 0x18
#define TG_SEL_UDATA 0x23          /* 0x20 | RPL 3 */
#define TG_SEL_UCODE 0x2b          /* 0x28 | RPL 3 */
#define TG_SEL_TSS 0x30            /* the BSP's TSS */
#define TG_SEL_AP_TSS 0x40         /* + 16 * APIC id: the APs' TSSes */
#define TG_GDT_SIZE (TG_SEL_AP_TSS + TG_MAX_CPUS * 16)

/* Value of RDI when CPL3 main starts: which entry the monitor used. */
#define TG_BOOT_LINUX64 1
#define TG_BOOT_PVH 2

/* User-call services (head.S tg_ucall), number in EAX; ABI in syscall.h. */
#define TG_SYS_WRITE 0             /* RSI = buffer, RDX = length -> UART */
#define TG_SYS_SHUTDOWN 1          /* EDI = exit code */
#define TG_SYS_TRIPLE_FAULT 2
#define TG_SYS_RESET 3
#define TG_SYS_PARK 4              /* cli; hlt forever: where an AP ends */
#define TG_SYS_PIC_MASK 5          /* EDI = 8259A masks: bits 7:0 master, 15:8 slave */
#define TG_SYS_HALT 6              /* sti; hlt: sleep until the next interrupt */
#define TG_SYS_INB 7               /* EDI = port -> EAX = byte read */
#define TG_SYS_OUTB 8              /* EDI = port, ESI = byte */
#define TG_SYS_SPIN 9              /* EDI = iterations of a 2-instruction loop at CPL0 */

/* Exit codes (the test device's SHUTDOWN value / isa-debug-exit value). */
#define TG_EXIT_OK 0
#define TG_EXIT_ERROR 1            /* bad command line, workload error */
#define TG_EXIT_FAULT 2            /* CPU exception, reported */
#define TG_EXIT_DOUBLE_FAULT 3     /* exception while reporting one */

#define TG_LAPIC_BASE 0xfee00000  /* xAPIC MMIO (SDM vol. 3 10.4.1) */
#define TG_LAPIC_ID 0x20          /* APIC id in bits 31:24 (SDM 10.4.6) */
#define TG_LAPIC_ICR_LO 0x300     /* writing it sends the IPI (SDM 10.6.1) */
#define TG_LAPIC_ICR_HI 0x310     /* destination APIC id in bits 31:24 */

/* Legacy I/O ports. */
#define TG_PORT_UART 0x3f8
#define TG_PORT_DEBUG_EXIT 0xf4
#define TG_PORT_I8042_CMD 0x64
#define TG_I8042_RESET 0xfe

#endif /* DSEC_TESTGUEST_LAYOUT_H_ */
