/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Register interface of the monitor's test-report device, shared by the
 * monitor (devices/testdev) and the freestanding test guest
 * (guest-kernel/testguest). Plain C so that the guest can include it.
 *
 * The device is one 4 KiB MMIO page. All registers are little-endian and are
 * accessed with naturally aligned 4- or 8-byte loads and stores; other
 * accesses are ignored (reads return 0). A guest can tell whether it runs
 * under dsec-vmm by reading MAGIC: anything else means "no test device"
 * (under QEMU, for example) and the guest falls back to the UART.
 */
#ifndef DSEC_DEVICES_TESTDEV_TESTDEV_REGS_H_
#define DSEC_DEVICES_TESTDEV_TESTDEV_REGS_H_

#define DSEC_TESTDEV_BASE 0xD8000000ull /* guest-physical, inside the 32-bit MMIO hole */
#define DSEC_TESTDEV_SIZE 0x1000ull

#define DSEC_TESTDEV_MAGIC_VALUE 0x44545344u /* "DSTD" little-endian */
#define DSEC_TESTDEV_VERSION_VALUE 1u

/* Register offsets. */
#define DSEC_TESTDEV_REG_MAGIC 0x00    /* R  u32: DSEC_TESTDEV_MAGIC_VALUE */
#define DSEC_TESTDEV_REG_VERSION 0x04  /* R  u32: DSEC_TESTDEV_VERSION_VALUE */
#define DSEC_TESTDEV_REG_MSG_ADDR 0x08 /* W  u64: guest-physical address of a message */
#define DSEC_TESTDEV_REG_MSG_LEN 0x10  /* W  u32: length; the write sends the message */
#define DSEC_TESTDEV_REG_EVENT 0x18    /* W  u32: a boot milestone (DSEC_TESTDEV_EVENT_*) */
#define DSEC_TESTDEV_REG_SHUTDOWN 0x20 /* W  u32: stop the VM; the value is the guest's exit code */

/* A message is one line of UTF-8 text without the newline, at most this long.
 * By convention it is "key=value key=value ..." with the first word naming
 * what is reported, e.g. "cmdline text=...", "e820 addr=0x0 size=0x9fc00 type=1". */
#define DSEC_TESTDEV_MAX_MSG 4096u

/* Milestones, timestamped by the monitor when written. */
#define DSEC_TESTDEV_EVENT_FIRST_INSN 1u /* first guest instruction (CPL0 entry) */
#define DSEC_TESTDEV_EVENT_FIRST_USER 2u /* first CPL3 instruction */
#define DSEC_TESTDEV_EVENT_WORKLOAD_DONE 3u

#endif /* DSEC_DEVICES_TESTDEV_TESTDEV_REGS_H_ */
