#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Type-checks libdsec with mypy, for ctest (sdk_python_typecheck).

usage: typecheck.py        exit 0 clean, 1 on a type error, 77 without mypy

Three runs of Debian's mypy (python3-mypy, 1.0.1), with --strict (every
def typed, no implicit re-export, no Any leaking from untyped calls or
returns, unused ignores reported, ...) plus --warn-unreachable and
--disallow-any-unimported. Not the --disallow-any-{explicit,expr,decorated}
flags: the daemon's JSON objects are open-ended and are Any by nature.
  1. the package as Python 3.9 (pyproject's requires-python floor), so a
     3.10+ standard-library API or syntax is caught;
  2. the package and typecheck_usage.py as Python 3.11 (Debian 12's):
     the public API as a typed caller sees it, with assert_type on the
     overloads (files.read(format=) -> str or bytes, ...);
  3. misuse that must be refused, each on its own line (MISUSE below).
No config file is read (--config-file=) and no cache is written
(--cache-dir=/dev/null): nothing lands in the source tree.
"""

import importlib.util
import os
import re
import subprocess
import sys

SKIPPED = 77
HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
FLAGS = ["--strict", "--warn-unreachable", "--disallow-any-unimported",
         "--config-file=", "--cache-dir=/dev/null", "--no-error-summary", "--show-error-codes"]

# Each line must draw a mypy error (its line number is checked).
MISUSE = """\
import libdsec
sb = libdsec.Sandbox.create()
sb.files.read("/a", format="stream")
sb.commands.run("x", timeout="10")
sb.commands.run("x", on_stdout=lambda: None)
sb.files.write("/a", 12)
libdsec.Sandbox.create(layers="base:bookworm").kill() + ""
len(sb.commands.run("x").exit_code)
(await_me := libdsec.AsyncSandbox.connect("id")).sandbox_id
sb.set_network(allow=[443])
sb.network.counters
libdsec.Sandbox.create(network=["pypi.org"])
"""


def mypy(*args):
    cmd = [sys.executable, "-m", "mypy", *FLAGS, *args]
    r = subprocess.run(cmd, cwd=SDK, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, MYPYPATH=SDK))
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    if importlib.util.find_spec("mypy") is None:
        print("SKIPPED: mypy is not installed (apt-get install python3-mypy)")
        return SKIPPED
    failed = False
    for what, args in (
            ("libdsec as Python 3.9", ["--python-version", "3.9", "-p", "libdsec"]),
            ("libdsec and its typed use as Python 3.11",
             ["--python-version", "3.11", os.path.join(SDK, "libdsec"),
              os.path.join(HERE, "typecheck_usage.py")])):
        rc, out = mypy(*args)
        print("%s: %s" % (what, "clean" if rc == 0 else "FAILED"))
        if rc != 0:
            print(out)
            failed = True
    rc, out = mypy("--python-version", "3.11", "-c", MISUSE)
    flagged = {int(m) for m in re.findall(r"^<string>:(\d+): error:", out, re.M)}
    expected = set(range(3, MISUSE.count("\n") + 1))
    missed = sorted(expected - flagged)
    print("misuse refused on lines %s of %s" % (sorted(flagged & expected), sorted(expected)))
    if rc == 0 or missed or flagged - expected:
        print("FAILED: mypy let through lines %s, flagged unexpected %s:\n%s\n%s"
              % (missed, sorted(flagged - expected), out, MISUSE))
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
