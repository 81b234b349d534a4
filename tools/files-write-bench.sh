#!/bin/bash
# Files API write latency: p50/p99 of 200 writes of 100 B and of 1 MiB into
# one container sandbox (base:bookworm) of a private daemon.
#   tools/files-write-bench.sh [DSEC_VMMD]     (default: build/dsec-vmmd)
# Run as root on an idle machine; prints two lines. Leaves nothing behind.
set -euo pipefail
VMMD=${1:-build/dsec-vmmd}
D=$(mktemp -d /tmp/dsec-files-bench-XXXXXX)
"$VMMD" --socket "$D/api.sock" --trajectory-dir "$D/traj" --snapshot-dir "$D/snap" \
  --container-state-dir "$D/cont" --fncall-state-dir "$D/fn" --log-level warn > "$D/daemon.log" 2>&1 &
DP=$!
trap 'kill $DP 2>/dev/null; wait $DP 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 100); do [ -S "$D/api.sock" ] && break; sleep 0.1; done
python3 - "$D/api.sock" <<'PY'
import http.client, json, socket, sys, time
sock = sys.argv[1]
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sock)
c = Unix("local")
def req(method, path, body=None, ct="application/json"):
    c.request(method, path, body=body, headers={"Content-Type": ct})
    r = c.getresponse()
    return r.status, r.read()
st, b = req("POST", "/v1/sandboxes", json.dumps({"tier": "container", "layers": ["base:bookworm"]}))
assert st == 201, b
sid = json.loads(b)["id"]
try:
    for size in (100, 1 << 20):
        data, ms = b"x" * size, []
        for i in range(200):
            t = time.perf_counter()
            st, b = req("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/f{i % 10}", data, "application/octet-stream")
            ms.append((time.perf_counter() - t) * 1000)
            assert st == 204, b
        ms.sort()
        print(f"files write {size} B: p50 {ms[100]:.2f} ms  p99 {ms[197]:.2f} ms")
finally:
    req("DELETE", f"/v1/sandboxes/{sid}")
PY
