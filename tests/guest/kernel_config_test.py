#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the built guest kernel's .config has every option of the
fragment: each `CONFIG_X=value` line with that value, each
`# CONFIG_X is not set` line unset.

Usage: kernel_config_test.py FRAGMENT
Fails (never skips) when no kernel was built: tools/setup.sh builds one.
"""

import re
import sys

from guest_kernel_dir import find_kernel_dir

SET = re.compile(r"^(CONFIG_\w+)=(.*)$")
UNSET = re.compile(r"^# (CONFIG_\w+) is not set$")


def parse(path):
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = SET.match(line)
            if m:
                values[m.group(1)] = m.group(2)
                continue
            m = UNSET.match(line)
            if m:
                values[m.group(1)] = None
    return values


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: kernel_config_test.py FRAGMENT")
    try:
        kernel_dir = find_kernel_dir()
    except FileNotFoundError as e:
        print(f"FAIL: {e}")
        return 1
    wanted = parse(sys.argv[1])
    have = parse(kernel_dir / ".config")
    bad = []
    for name, value in wanted.items():
        got = have.get(name)
        if got != value:
            bad.append(f"{name}: wanted {value if value is not None else 'unset'}, "
                       f"got {got if got is not None else 'unset'}")
    if not wanted:
        print(f"FAIL: no options in {sys.argv[1]}")
        return 1
    print(f"kernel: {kernel_dir}")
    if bad:
        print("FAIL: the built kernel's .config differs from the fragment "
              f"(rebuild with tools/build-guest-kernel.sh):")
        for line in bad:
            print("  " + line)
        return 1
    print(f"PASS: all {len(wanted)} options of the fragment are in .config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
