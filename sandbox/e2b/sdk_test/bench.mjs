// SPDX-License-Identifier: Apache-2.0
// The E2B half of bench.sh: N sequential cycles of Sandbox.create +
// commands.run("echo hi") + kill through the real E2B JS SDK; prints one
// JSON line {"n", "p50_ms", "p99_ms", "mean_ms"} (nearest-rank percentiles,
// as bench/percentile.h).
import { Sandbox } from 'e2b'

const n = Number(process.env.BENCH_ITERATIONS || 50)
const template = process.env.E2B_TEST_TEMPLATE || 'base'
const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.max(Math.ceil(p / 100 * s.length), 1) - 1)] }
const ms = []
for (let i = 0; i < n + 2; i++) {  // the first two warm the connections up, not counted
  const t0 = performance.now()
  const sbx = await Sandbox.create(template, { timeoutMs: 60_000 })
  const r = await sbx.commands.run('echo hi')
  if (r.stdout !== 'hi\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
  await sbx.kill()
  if (i >= 2) ms.push(performance.now() - t0)
}
console.log(JSON.stringify({ n, p50_ms: pct(ms, 50), p99_ms: pct(ms, 99), mean_ms: ms.reduce((a, b) => a + b, 0) / n }))
