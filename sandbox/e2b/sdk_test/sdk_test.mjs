// SPDX-License-Identifier: Apache-2.0
// The real E2B JS SDK (npm `e2b`, unmodified) against dsec-vmmd's E2B API on
// loopback. run.sh starts the daemon and sets E2B_API_URL and
// E2B_SANDBOX_URL to it (one URL: the SDK then names the sandbox in the
// E2b-Sandbox-Id header) and E2B_API_KEY. Each case prints one line,
// "ok <name>" or "FAIL <name>: <why>"; the exit status is the failures'.
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, SandboxError, NotFoundError, AuthenticationError } from 'e2b'

const template = process.env.E2B_TEST_TEMPLATE || 'base'
let failures = 0
const made = []

async function check(name, fn) {
  try {
    await fn()
    console.log(`ok ${name}`)
  } catch (e) {
    failures++
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`)
  }
}

async function create(opts = {}) {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000, ...opts })
  made.push(sbx)
  return sbx
}

let sbx
await check('Sandbox.create', async () => {
  sbx = await create({ metadata: { suite: 'e2b_sdk_test' }, envs: { FROM_CREATE: 'yes' } })
  assert.match(sbx.sandboxId, /^sb-[0-9a-f]{16}$/)
  assert.equal(await sbx.isRunning(), true)
})
if (!sbx) {
  console.log('FAIL: no sandbox, stopping')
  process.exit(1)
}

await check('commands.run streams stdout and stderr', async () => {
  const out = [], err = []
  const r = await sbx.commands.run('echo hello; echo oops 1>&2; printf "%s" "$FROM_CREATE"', {
    onStdout: (d) => out.push(d), onStderr: (d) => err.push(d),
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\nyes')
  assert.equal(r.stderr, 'oops\n')
  assert.equal(out.join(''), 'hello\nyes')
  assert.equal(err.join(''), 'oops\n')
})

await check('commands.run streams output while the command runs', async () => {
  const times = []
  const t0 = Date.now()
  await sbx.commands.run('echo first; sleep 1; echo second', {
    onStdout: (d) => times.push([d, Date.now() - t0]),
  })
  assert.ok(times.length >= 2, `want two pieces, got ${JSON.stringify(times)}`)
  assert.ok(times[1][1] - times[0][1] >= 500, `the first piece came late: ${JSON.stringify(times)}`)
})

await check('commands.run exit codes: CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `got ${e}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'bad\n')
    return true
  })
})

await check('commands.run cwd and envs', async () => {
  const r = await sbx.commands.run('pwd; echo $X', { cwd: '/tmp', envs: { X: 'from-run' } })
  assert.equal(r.stdout, '/tmp\nfrom-run\n')
})

await check('commands.run timeoutMs kills the command', async () => {
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), (e) => {
    assert.match(String(e), /timeout|deadline/i)
    return true
  })
})

await check('background command: handle.wait', async () => {
  const h = await sbx.commands.run('sleep 1; echo done-bg', { background: true })
  assert.ok(h.pid > 0)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
  const r = await h.wait()
  assert.equal(r.stdout, 'done-bg\n')
})

await check('files work while a background command runs', async () => {
  const h = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const started = Date.now()
  await sbx.files.write('/work/beside.txt', 'beside\n')
  assert.equal(await sbx.files.read('/work/beside.txt'), 'beside\n')
  assert.ok((await sbx.files.list('/work')).some((e) => e.name === 'beside.txt'))
  assert.ok(Date.now() - started < 30_000, `files took ${Date.now() - started} ms`)
  assert.equal(await h.kill(), true)
  await h.wait().catch(() => {})
})

await check('commands.kill ends a running command', async () => {
  const h = await sbx.commands.run('echo up; sleep 600', { background: true, timeoutMs: 0 })
  const started = Date.now()
  assert.equal(await h.kill(), true)
  await h.wait().then(() => { throw new Error('the command ended normally') }, () => {})
  assert.ok(Date.now() - started < 30_000, `kill took ${Date.now() - started} ms`)
  const r = await sbx.commands.run('echo alive')
  assert.equal(r.stdout, 'alive\n')
})

await check('commands.kill of an unknown pid is false', async () => {
  assert.equal(await sbx.commands.kill(424242), false)
})

await check('files.write/read/list/exists/getInfo', async () => {
  const info = await sbx.files.write('/work/dir/hello.txt', 'hi there\n')
  assert.equal(info.path, '/work/dir/hello.txt')
  assert.equal(await sbx.files.read('/work/dir/hello.txt'), 'hi there\n')
  const bytes = await sbx.files.read('/work/dir/hello.txt', { format: 'bytes' })
  assert.equal(bytes.length, 9)
  const list = await sbx.files.list('/work/dir')
  assert.deepEqual(list.map((e) => [e.name, e.type, e.size]), [['hello.txt', 'file', 9]])
  assert.equal(await sbx.files.exists('/work/dir/hello.txt'), true)
  assert.equal(await sbx.files.exists('/work/dir/nope'), false)
  const st = await sbx.files.getInfo('/work/dir')
  assert.equal(st.type, 'dir')
  const r = await sbx.commands.run('cat /work/dir/hello.txt')
  assert.equal(r.stdout, 'hi there\n')
})

await check('files.write many, makeDir, rename, remove', async () => {
  await sbx.files.write([{ path: '/m/a.txt', data: 'A' }, { path: '/m/b.txt', data: new Blob(['BB']) }])
  assert.equal(await sbx.files.read('/m/b.txt'), 'BB')
  assert.equal(await sbx.files.makeDir('/m/sub'), true)
  assert.equal(await sbx.files.makeDir('/m/sub'), false)
  const moved = await sbx.files.rename('/m/a.txt', '/m/sub/a2.txt')
  assert.equal(moved.path, '/m/sub/a2.txt')
  const deep = await sbx.files.list('/m', { depth: 2 })
  assert.deepEqual(deep.map((e) => e.path).sort(), ['/m/b.txt', '/m/sub', '/m/sub/a2.txt'])
  await sbx.files.remove('/m/sub')
  assert.equal(await sbx.files.exists('/m/sub'), false)
})

await check('files.write as application/octet-stream; gzip refused', async () => {
  const info = await sbx.files.write('/oct/raw.bin', new Uint8Array([0, 1, 2, 255]), { useOctetStream: true })
  assert.equal(info.path, '/oct/raw.bin')
  assert.deepEqual([...await sbx.files.read('/oct/raw.bin', { format: 'bytes' })], [0, 1, 2, 255])
  await assert.rejects(sbx.files.write('/oct/z', 'x', { gzip: true }), /not supported|501/)
})

await check('files.watchDir streams a directory\'s changes', async () => {
  await sbx.files.makeDir('/watched')
  const seen = []
  let exited = null
  const handle = await sbx.files.watchDir('/watched', (e) => { seen.push(`${e.type} ${e.name}`) },
    { recursive: true, onExit: (err) => { exited = err ?? 'ended' } })
  const waitFor = async (what) => {
    for (let i = 0; i < 400 && !seen.includes(what); i++) await new Promise((r) => setTimeout(r, 25))
    assert.ok(seen.includes(what), `${what} not in ${JSON.stringify(seen)}`)
  }
  await sbx.files.write('/watched/a.txt', 'A')
  await waitFor('create a.txt')
  await sbx.commands.run('mkdir /watched/sub')
  await waitFor('create sub')
  await sbx.commands.run('echo x > /watched/sub/b && chmod 600 /watched/sub/b && rm /watched/a.txt')
  await waitFor('remove a.txt')
  for (const e of ['write sub/b', 'chmod sub/b']) assert.ok(seen.includes(e), `${e} not in ${JSON.stringify(seen)}`)
  await handle.stop()
  // A missing directory is NotFoundError.
  await assert.rejects(sbx.files.watchDir('/no/such/dir', () => {}),
    (e) => e instanceof NotFoundError || /not found/i.test(String(e)))
  assert.equal(exited === null || exited === 'ended' || exited instanceof Error, true)
})

await check('files.read of a missing file is NotFoundError', async () => {
  await assert.rejects(sbx.files.read('/no/such/file'), (e) => e instanceof NotFoundError || /not found|404/i.test(String(e)))
})

await check('commands.run with stdin: sendStdin, closeStdin', async () => {
  let seen = ''
  const h = await sbx.commands.run('while read l; do echo "got $l"; done; echo eof',
    { background: true, stdin: true, onStdout: (d) => { seen += d } })
  await h.sendStdin('first\n')
  for (let i = 0; i < 400 && !seen.includes('got first'); i++) await new Promise((r) => setTimeout(r, 25))
  assert.equal(seen, 'got first\n')
  await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('second\n'))
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.stdout, 'got first\ngot second\neof\n')
  // A command started without stdin: true has its stdin closed.
  const closed = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  await assert.rejects(closed.sendStdin('x\n'), /stdin/)
  assert.equal(await closed.kill(), true)
  await closed.wait().catch(() => {})
})

await check('commands.connect reattaches to a running command', async () => {
  const h = await sbx.commands.run('for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.2; done; exit 4',
    { background: true, timeoutMs: 0 })
  await h.disconnect()
  let seen = ''
  const again = await sbx.commands.connect(h.pid, { onStdout: (d) => { seen += d } })
  assert.equal(again.pid, h.pid)
  const err = await again.wait().then(() => null, (e) => e)
  assert.ok(err instanceof CommandExitError, `wait gave ${err}`)
  assert.equal(err.exitCode, 4)
  assert.match(seen, /tick 10\n$/)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'an ended command is still listed')
  await assert.rejects(sbx.commands.connect(h.pid), (e) => e instanceof NotFoundError || /not found|no such process/i.test(String(e)))
})

await check('commands run side by side; a kill ends only its own', async () => {
  // A server-like command runs while others start, finish and are killed.
  const server = await sbx.commands.run('while [ ! -e /tmp/stop ]; do sleep 0.05; done; echo server-done',
    { background: true, timeoutMs: 0 })
  const victim = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const started = Date.now()
  const r = await sbx.commands.run('echo beside')
  assert.equal(r.stdout, 'beside\n')
  assert.ok(Date.now() - started < 30_000, `a command beside others took ${Date.now() - started} ms`)
  const listed = (await sbx.commands.list()).map((p) => p.pid)
  assert.ok(listed.includes(server.pid) && listed.includes(victim.pid), JSON.stringify(listed))
  assert.equal(await sbx.commands.kill(victim.pid), true)
  await victim.wait().then(() => { throw new Error('the killed command ended normally') }, () => {})
  assert.ok((await sbx.commands.list()).some((p) => p.pid === server.pid), 'the kill ended the other command too')
  await sbx.files.write('/tmp/stop', '')
  const done = await server.wait()
  assert.equal(done.stdout, 'server-done\n')
})

await check('getInfo, list, setTimeout', async () => {
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, template)
  assert.equal(info.metadata.suite, 'e2b_sdk_test')
  assert.equal(info.state, 'running')
  await sbx.setTimeout(600_000)
  const later = await Sandbox.getInfo(sbx.sandboxId)
  assert.ok(later.endAt.getTime() - Date.now() > 500_000, `endAt ${later.endAt.toISOString()}`)
  const page = await Sandbox.list({ query: { metadata: { suite: 'e2b_sdk_test' } } }).nextItems()
  assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId))
})

await check('Sandbox.connect to a running sandbox', async () => {
  const again = await Sandbox.connect(sbx.sandboxId)
  const r = await again.commands.run('echo connected')
  assert.equal(r.stdout, 'connected\n')
})

await check('pause and resume (connect)', async () => {
  await Sandbox.pause(sbx.sandboxId)
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await back.commands.run('echo resumed')).stdout, 'resumed\n')
})

await check('Sandbox.fork', async () => {
  await sbx.files.write('/forked/state.txt', 'parent-state')
  // The node keeps a fork's layer in its store; run.sh removes it by this.
  console.log(`forked-from ${sbx.sandboxId}`)
  const forks = await Sandbox.fork(sbx.sandboxId, { count: 2, timeoutMs: 60_000 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `fork failed: ${f}`)
    made.push(f)
    assert.notEqual(f.sandboxId, sbx.sandboxId)
    assert.equal(await f.files.read('/forked/state.txt'), 'parent-state')
    await f.files.write('/forked/state.txt', `child ${f.sandboxId}`)
  }
  assert.equal(await sbx.files.read('/forked/state.txt'), 'parent-state')
  assert.equal((await forks[0].commands.run('cat /forked/state.txt')).stdout, `child ${forks[0].sandboxId}`)
  for (const f of forks) await f.kill()
})

await check('pause and fork do not wait for a running background command', async () => {
  const busy = await create()
  let out = ''
  const h = await busy.commands.run('i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.05; done',
    { background: true, timeoutMs: 0, onStdout: (d) => { out += d } })
  const count = async () => Number((await busy.commands.run('cat /count')).stdout)
  for (let i = 0; i < 200 && !(await busy.files.exists('/count')); i++) await new Promise((r) => setTimeout(r, 25))
  let started = Date.now()
  await Sandbox.pause(busy.sandboxId)
  assert.ok(Date.now() - started < 30_000, `pause took ${Date.now() - started} ms`)
  // Frozen: the counter stands still while paused.
  const frozen = Number(await busy.files.read('/count'))
  await new Promise((r) => setTimeout(r, 300))
  assert.equal(Number(await busy.files.read('/count')), frozen)
  const back = await Sandbox.connect(busy.sandboxId)
  const after = await count()
  for (let i = 0; i < 200 && (await count()) <= after; i++) await new Promise((r) => setTimeout(r, 25))
  assert.ok((await count()) > after, 'the command did not go on after the resume')
  console.log(`forked-from ${busy.sandboxId}`)
  started = Date.now()
  const forks = await Sandbox.fork(busy.sandboxId, { count: 1, timeoutMs: 60_000 })
  assert.ok(Date.now() - started < 30_000, `fork took ${Date.now() - started} ms`)
  assert.ok(forks[0] instanceof Sandbox, `fork failed: ${forks[0]}`)
  made.push(forks[0])
  assert.ok(Number(await forks[0].files.read('/count')) > 0)
  await forks[0].kill()
  // The command still runs in the source, and a kill ends it.
  assert.equal(await back.commands.kill(h.pid), true)
  await h.wait().then(() => { throw new Error('the command ended normally') }, () => {})
  assert.equal(out, '')
})

await check('errors for bad ids', async () => {
  await assert.rejects(Sandbox.getInfo('sb-0000000000000000'), /not found/i)
  assert.equal(await Sandbox.kill('sb-0000000000000000'), false)
  await assert.rejects(Sandbox.connect('sb-0000000000000000'), /not found/i)
  await assert.rejects(Sandbox.setTimeout('sb-0000000000000000', 1000), /not found/i)
})

await check('errors for a bad template and a bad key', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), /not found/)
  await assert.rejects(Sandbox.create(template, { apiKey: 'e2b_' + '0'.repeat(40) }), (e) => e instanceof AuthenticationError)
})

await check('a template added with dsec-vmm template add', async () => {
  const name = process.env.E2B_FILE_TEMPLATE
  assert.ok(name, 'run.sh adds one')
  const t = await Sandbox.create(name, { timeoutMs: 60_000 })
  made.push(t)
  assert.equal((await Sandbox.getInfo(t.sandboxId)).templateId, name)
  assert.equal((await t.commands.run('echo from-file-template')).stdout, 'from-file-template\n')
  await t.kill()
})

await check('kill ends a running background command at once', async () => {
  const busy = await create()
  const h = await busy.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  const started = Date.now()
  await busy.kill()
  assert.ok(Date.now() - started < 30_000, `kill took ${Date.now() - started} ms`)
  assert.equal(await busy.isRunning(), false)
  await h.wait().then(() => { throw new Error('the command ended normally') }, () => {})
})

await check('kill', async () => {
  const other = await create()
  await other.kill()
  assert.equal(await other.isRunning(), false)
  await assert.rejects(Sandbox.getInfo(other.sandboxId), /not found/i)
  await assert.rejects(other.commands.run('echo x'), (e) => e instanceof SandboxError || e instanceof Error)
})

for (const s of made) await s.kill().catch(() => {})
console.log(failures === 0 ? 'all ok' : `${failures} failed`)
process.exit(failures === 0 ? 0 : 1)
