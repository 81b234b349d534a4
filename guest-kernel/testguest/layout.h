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

#define TG_VEC_UD 6                /* #UD: also the user-call trap, see head.S */
#define TG_VEC_TIMER 32            /* PIC master IRQ0 after remapping */

/* GDT selectors. 0x10 is also the kernel CS of the Linux 64-bit entry. */
#define TG_SEL_KCODE 0x10
#define TG_SEL_KDATA 0x18
#define TG_SEL_UDATA 0x23          /* 0x20 | RPL 3 */
#define TG_SEL_UCODE 0x2b          /* 0x28 | RPL 3 */
#define TG_SEL_TSS 0x30

/* Value of RDI when CPL3 main starts: which entry the monitor used. */
#define TG_BOOT_LINUX64 1
#define TG_BOOT_PVH 2

/* User-call services (head.S tg_ucall), number in EAX; ABI in syscall.h. */
#define TG_SYS_WRITE 0             /* RSI = buffer, RDX = length -> UART */
#define TG_SYS_SHUTDOWN 1          /* EDI = exit code */
#define TG_SYS_TRIPLE_FAULT 2
#define TG_SYS_RESET 3

/* Exit codes (the test device's SHUTDOWN value / isa-debug-exit value). */
#define TG_EXIT_OK 0
#define TG_EXIT_ERROR 1            /* bad command line, workload error */
#define TG_EXIT_FAULT 2            /* CPU exception, reported */
#define TG_EXIT_DOUBLE_FAULT 3     /* exception while reporting one */

#define TG_LAPIC_BASE 0xfee00000  /* xAPIC MMIO (SDM vol. 3 10.4.1) */

/* Legacy I/O ports. */
#define TG_PORT_UART 0x3f8
#define TG_PORT_DEBUG_EXIT 0xf4
#define TG_PORT_I8042_CMD 0x64
#define TG_I8042_RESET 0xfe

#endif /* DSEC_TESTGUEST_LAYOUT_H_ */
