#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Stage 1 of L1's init: /init of the nested bed's initramfs (bed_image.py),
# run by busybox as PID 1. It loads the modules in modules.load (dependencies
# first; an "optional" one may fail: kvm_amd without SVM), mounts the host's
# root (9p tag hostroot, read-only; it does not change during a run, so
# cache=loose) and the run's results share (tag results), builds a tmpfs root
# with /run, /dev, /proc, /sys and the host's /usr (plus bin, sbin, lib*) in
# it, starts loading the extra modules, and switches to it with stage 2
# (l1_init.py, the host's python3) as PID 1. Paths below must match bed_plan.py (BED_DIR, HOST_MOUNT,
# RESULTS_MOUNT, STAGE1_ENTRIES).
# On failure it says why on the console and powers off: the host finds no
# status and prints the console's tail.
/bin/busybox --install -s /bin
export PATH=/bin

say() { echo "nested-bed stage1: $*"; }
fail() {
  say "FAIL: $*"
  poweroff -f
  exit 1
}
uptime_s() { read -r up _ < /proc/uptime; echo "$up"; }

mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sysfs /sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs /dev || fail "mount devtmpfs"
say "init at $(uptime_s) s"

while read -r path need; do
  [ -n "$path" ] || continue
  if ! insmod "/$path"; then
    [ "$need" = required ] && fail "insmod $path"
    say "optional module $path did not load"
  fi
done < /modules.load
say "modules loaded at $(uptime_s) s"

opts=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$opts,cache=loose,ro" hostroot /host || fail "mount 9p hostroot"
mount -t 9p -o "$opts" results /results || fail "mount 9p results"

bed=/newroot/run/nested-bed
mount -t tmpfs -o mode=0755 tmpfs /newroot || fail "mount tmpfs /newroot"
mkdir /newroot/run || fail "mkdir /newroot/run"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /newroot/run || fail "mount tmpfs /newroot/run"
mkdir -p "$bed/host" "$bed/results" /newroot/dev /newroot/proc /newroot/sys || fail "mkdir"
mount --move /host "$bed/host" || fail "move hostroot"
mount --move /results "$bed/results" || fail "move results"
for d in usr bin sbin lib lib32 lib64 libx32; do
  h=$bed/host/$d
  if [ -L "$h" ]; then
    ln -s "$(readlink "$h")" "/newroot/$d" || fail "symlink /$d"
  elif [ -d "$h" ]; then
    mkdir "/newroot/$d" && mount --bind "$h" "/newroot/$d" &&
      mount -o remount,bind,ro "/newroot/$d" || fail "bind /$d"
  fi
done
cp /l1_init.py "$bed/l1_init.py" || fail "copy l1_init.py"
[ -x /newroot/usr/bin/python3 ] || fail "the host has no /usr/bin/python3"
mount --move /dev /newroot/dev || fail "move /dev"
mount --move /sys /newroot/sys || fail "move /sys"
say "switching root at $(uptime_s) s"
mount --move /proc /newroot/proc || fail "move /proc"
# The extra modules (results/extra-modules: the unpacked package's path on
# the host, then the names) load in the background while python3 starts:
# the host's modprobe, chrooted into the new root, which stays its root
# after switch_root. Stage 2 waits for it (the pid) before the command.
if [ -r "$bed/results/extra-modules" ]; then
  { read -r tree; read -r mods; } < "$bed/results/extra-modules"
  # shellcheck disable=SC2086 # one word per module
  chroot /newroot /sbin/modprobe -a -d "/run/nested-bed/host$tree" $mods &
  echo $! > "$bed/extra-modules.pid"
fi
exec switch_root /newroot /usr/bin/python3 -I -S /run/nested-bed/l1_init.py
