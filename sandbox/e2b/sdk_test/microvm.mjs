// SPDX-License-Identifier: Apache-2.0
// The real E2B JS SDK (npm `e2b`, unmodified) against dsec-vmmd's E2B API
// with a template on the microvm tier: a Linux guest under dsec-vmm's own
// monitor, the commands and files through its guest agent. Run by
// sdk/python/tests/test_integration_microvm.py in L1 of the nested bed
// (where guests boot), which sets E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY and E2B_TEST_TEMPLATE. Each case prints "ok <name>" or
// "FAIL <name>: <why>"; the exit status is the failures'.
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'

const template = process.env.E2B_TEST_TEMPLATE
let failures = 0

async function check(name, fn) {
  try {
    await fn()
    console.log(`ok ${name}`)
  } catch (e) {
    failures++
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`)
  }
}

// A guest boots in L1 under emulation of a nested guest's devices: slow.
const slow = { requestTimeoutMs: 600_000 }
let sbx
await check('Sandbox.create on the microvm tier', async () => {
  sbx = await Sandbox.create(template, { timeoutMs: 900_000, ...slow })
  assert.match(sbx.sandboxId, /^sb-[0-9a-f]{16}$/)
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.templateId, template)
})
if (!sbx) {
  console.log('FAIL: no sandbox, stopping')
  process.exit(1)
}

await check('commands.run streams output and reports exit codes', async () => {
  let out = ''
  const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; done; uname -s',
    { onStdout: (d) => { out += d }, ...slow })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'line1\nline2\nline3\nLinux\n')
  assert.equal(out, r.stdout)
  await assert.rejects(sbx.commands.run('echo bad >&2; exit 3', slow), (e) => {
    assert.ok(e instanceof CommandExitError, String(e))
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'bad\n')
    return true
  })
})

await check('a background command takes stdin and ends with closeStdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true, ...slow })
  await h.sendStdin('through the agent\n')
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'through the agent\n')
})

await check('commands.kill ends a running command', async () => {
  const h = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0, ...slow })
  const started = Date.now()
  assert.equal(await sbx.commands.kill(h.pid), true)
  await h.wait().then(() => { throw new Error('the command ended normally') }, () => {})
  assert.ok(Date.now() - started < 60_000, `kill took ${Date.now() - started} ms`)
})

await check('commands run side by side; kill ends a running background command', async () => {
  // The first waits for what the second does: in series it would time out.
  const first = await sbx.commands.run('while [ ! -e /tmp/second-ran ]; do sleep 0.05; done; echo first',
    { background: true, timeoutMs: 120_000, ...slow })
  const second = await sbx.commands.run('touch /tmp/second-ran; echo second', slow)
  assert.equal(second.stdout, 'second\n')
  assert.equal((await first.wait()).stdout, 'first\n')
  // Files go beside a running command.
  const busy = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0, ...slow })
  await sbx.files.write('/tmp/beside.txt', 'beside', slow)
  assert.equal(await sbx.files.read('/tmp/beside.txt', slow), 'beside')
  await sbx.commands.kill(busy.pid)
  await busy.wait().then(() => { throw new Error('the command ended normally') }, () => {})
})

await check('files.write, read, list', async () => {
  await sbx.files.write('/work/e2b/a.txt', 'written through E2B\n', slow)
  assert.equal(await sbx.files.read('/work/e2b/a.txt', slow), 'written through E2B\n')
  const names = (await sbx.files.list('/work/e2b', slow)).map((e) => e.name)
  assert.deepEqual(names, ['a.txt'])
  const r = await sbx.commands.run('cat /work/e2b/a.txt', slow)
  assert.equal(r.stdout, 'written through E2B\n')
})

await check('files.watchDir streams the guest directory\'s changes (inotify in the guest)', async () => {
  await sbx.files.makeDir('/work/watched', slow)
  const seen = []
  const handle = await sbx.files.watchDir('/work/watched', (e) => { seen.push(`${e.type} ${e.name}`) },
    { recursive: true, ...slow })
  const waitFor = async (what) => {
    for (let i = 0; i < 1200 && !seen.includes(what); i++) await new Promise((r) => setTimeout(r, 25))
    assert.ok(seen.includes(what), `${what} not in ${JSON.stringify(seen)}`)
  }
  await sbx.files.write('/work/watched/a.txt', 'A', slow)
  await waitFor('create a.txt')
  await sbx.commands.run('mkdir /work/watched/sub && sleep 0.2 && echo x > /work/watched/sub/b && rm /work/watched/a.txt', slow)
  await waitFor('remove a.txt')
  await waitFor('create sub/b')
  await handle.stop()
  // /proc is the guest kernel's: refused, as a missing directory is.
  await assert.rejects(sbx.files.watchDir('/proc', () => {}, slow), /kernel file system/)
  await assert.rejects(sbx.files.watchDir('/no/such/dir', () => {}, slow), (e) => /not found|no such/i.test(String(e)))
})

await check('kill, a background command running', async () => {
  await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0, ...slow })
  const started = Date.now()
  await sbx.kill(slow)
  assert.ok(Date.now() - started < 60_000, `kill took ${Date.now() - started} ms`)
  assert.equal(await sbx.isRunning(), false)
})

console.log(failures === 0 ? 'all ok' : `${failures} failed`)
process.exit(failures === 0 ? 0 : 1)
