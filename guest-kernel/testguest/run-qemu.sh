#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Boots the test guest under QEMU microvm through its PVH entry, for checking
# the guest without dsec-vmm. Output: the report lines on stdout (UART).
#
#   run-qemu.sh [ELF] [WORKLOAD] [ACCEL] [extra QEMU args...]
#   ELF      default: build-guest/guest-kernel/testguest/testguest.elf
#   WORKLOAD default: boot (becomes testguest.run=WORKLOAD)
#   ACCEL    kvm (default) or tcg
#   TG_QEMU_CPUS (environment) number of vCPUs, default 1 (e.g. 2 for smp)
#
# Exit status is QEMU's: isa-debug-exit turns guest code C into (C << 1) | 1,
# so 1 = success, 3 = workload error, 5 = fault; 0 = the VM reset or triple
# faulted (-no-reboot turns both into a plain exit).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
elf=${1:-$here/../../build-guest/guest-kernel/testguest/testguest.elf}
run=${2:-boot}
accel=${3:-kvm}
cpus=${TG_QEMU_CPUS:-1}
[ $# -gt 3 ] && shift 3 || set --
# microvm: no option ROMs or ACPI needed for PVH; legacy PIC and PIT for the
# 100 Hz tick; the isa-serial is added by hand so that it is the only UART.
exec qemu-system-x86_64 \
  -M microvm,x-option-roms=off,pit=on,pic=on,rtc=off,isa-serial=off,acpi=off \
  -accel "$accel" -cpu qemu64 -smp "$cpus" -m 64 \
  -nodefaults -no-user-config -nographic -no-reboot \
  -chardev stdio,id=c -device isa-serial,chardev=c \
  -device isa-debug-exit,iobase=0xf4,iosize=4 \
  -kernel "$elf" -append "testguest.run=$run" "$@"
