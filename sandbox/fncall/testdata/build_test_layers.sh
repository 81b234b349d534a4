#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the fncall tests' EROFS layers from the host, no network needed:
#   OUT/runtime.erofs  busybox-static applets, /bin/bash, /usr/bin/python3.11
#                      (+ python3) with /usr/lib/python3.11 (minus tests and
#                      other big unused parts), every shared library they and
#                      the stdlib's extension modules need, and the loader.
#   OUT/crash.erofs    a Python module that kills the zygote importing it in
#                      even-numbered workers (setup-crash tests).
# Usage: build_test_layers.sh OUT. Reuses OUT when complete (OUT/.complete);
# an flock on OUT/.lock serialises concurrent test processes.
set -euo pipefail
out=$1
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
[ -f "$out/.complete" ] && exit 0
for tool in mkfs.erofs ldd; do
  command -v "$tool" >/dev/null || { echo "missing $tool (erofs-utils / libc-bin)" >&2; exit 2; }
done
py=/usr/bin/python3.11
[ -x "$py" ] || { echo "missing $py (apt-get install python3.11)" >&2; exit 2; }
[ -x /bin/bash ] || { echo "missing /bin/bash" >&2; exit 2; }
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "need a static busybox (apt-get install busybox-static)" >&2; exit 2
fi
work=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
t=$work/runtime
mkdir -p "$t/bin" "$t/usr/bin" "$t/usr/lib" "$t/etc" "$t/root" "$t/tmp"
cp "$busybox" "$t/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$t/bin/$applet"
done
rm -f "$t/bin/bash"
cp /bin/bash "$t/bin/bash"
cp "$py" "$t/usr/bin/python3.11"
ln -s python3.11 "$t/usr/bin/python3"
tar -C /usr/lib -cf - \
  --exclude=python3.11/test --exclude=python3.11/idlelib --exclude=python3.11/tkinter \
  --exclude=python3.11/turtledemo --exclude=python3.11/ensurepip --exclude=python3.11/lib2to3 \
  --exclude=python3.11/pydoc_data --exclude='python3.11/config-*' --exclude=python3.11/site-packages \
  --exclude=python3.11/dist-packages python3.11 | tar -C "$t/usr/lib" -xf -
# Shared libraries: of the binaries and of every extension module that loads.
{
  ldd /bin/bash "$py" || true
  for so in /usr/lib/python3.11/lib-dynload/*.so; do ldd "$so" 2>/dev/null || true; done
} | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $2 ~ /^\(/ {print $1}' | sort -u |
while read -r lib; do
  dest=$t$lib
  mkdir -p "$(dirname "$dest")"
  cp -L "$lib" "$dest"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n' >"$t/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$t/etc/group"
c=$work/crash
mkdir -p "$c/usr/lib/python3.11"
cat >"$c/usr/lib/python3.11/dsec_crash_on_even.py" <<'PY'
# Test module: a zygote importing it dies during setup in even workers.
import os
if int(os.environ.get("DSEC_FNCALL_WORKER_SEQ", "1")) % 2 == 0:
    os._exit(3)
PY
mkfs.erofs --quiet "$work/runtime.erofs" "$t"
mkfs.erofs --quiet "$work/crash.erofs" "$c"
mv "$work/runtime.erofs" "$work/crash.erofs" "$out/"
touch "$out/.complete"
