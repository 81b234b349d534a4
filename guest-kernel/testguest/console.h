/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reporting from CPL3: through the dsec-vmm test device when it answers
 * (devices/testdev/testdev_regs.h), else one UART line per message through
 * the user-call write service (QEMU and other monitors).
 */
#ifndef DSEC_TESTGUEST_CONSOLE_H_
#define DSEC_TESTGUEST_CONSOLE_H_

#include <stdbool.h>
#include <stdint.h>

#include "fmt.h"

bool console_has_testdev(void);
/* Sends one message line (without newline in l). Clobbers l->buf past len.
 * Safe to call from several CPUs at once (lines are not interleaved); the
 * other helpers use static buffers and are for the BSP only. */
void console_send(struct tg_line *l);
/* Convenience: sends a constant line. */
void console_send_str(const char *s);
/* A boot milestone (DSEC_TESTDEV_EVENT_*); nothing without the device. */
void console_event(uint32_t event);
/* Stops the VM with the exit code; see README.md "Shutdown". */
__attribute__((noreturn)) void console_shutdown(uint32_t code);

#endif /* DSEC_TESTGUEST_CONSOLE_H_ */
