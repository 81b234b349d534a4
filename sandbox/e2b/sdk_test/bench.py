#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The libdsec half of bench.sh: the same cycle as bench.mjs (create a
container sandbox on base:bookworm, run `/bin/bash -l -c "echo hi"` as E2B's
commands.run does, delete it) through dsec-vmm's own Python SDK on the
daemon's unix socket; prints {"n", "p50_ms", "p99_ms", "mean_ms"}.

usage: bench.py SOCKET ITERATIONS REPO_ROOT"""
import json
import math
import sys
import time

sys.path.insert(0, sys.argv[3] + "/sdk/python")
import libdsec  # noqa: E402


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, max(math.ceil(p / 100 * len(s)), 1) - 1)]


client = libdsec.Client(socket_path=sys.argv[1], timeout=60)
n = int(sys.argv[2])
ms = []
for i in range(n + 2):  # the first two warm up, not counted
    t0 = time.perf_counter()
    sb = client.create(tier="container", layers=["base:bookworm"], ttl_s=60)
    r = sb.exec(["/bin/bash", "-l", "-c", "echo hi"])
    if r.stdout not in ("hi\n", b"hi\n"):
        raise SystemExit(f"unexpected output {r.stdout!r}")
    sb.delete()
    if i >= 2:
        ms.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"n": n, "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "mean_ms": sum(ms) / n}))
