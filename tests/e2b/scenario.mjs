// An ordinary E2B user script (JavaScript SDK @e2b/code-interpreter, pinned in package.json). It
// knows nothing about Lizard: which server it talks to is decided only by E2B's environment
// variables (E2B_API_KEY + E2B_API_URL + E2B_SANDBOX_URL, or E2B_DEBUG=true). It checks every
// answer with assert and prints one line per step; e2b.test.mjs runs it against a real
// `lizard serve` in both modes and compares the printed lines.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// E2B_SDK_DIR: an older SDK's directory in versions/ (its node_modules holds the SDK); the one
// pinned in package.json otherwise.
const sdkDir = process.env.E2B_SDK_DIR;
const sdkUrl = sdkDir
  ? pathToFileURL(createRequire(join(sdkDir, 'package.json')).resolve('@e2b/code-interpreter')).href
  : '@e2b/code-interpreter';
const { InvalidArgumentError, NotFoundError, Sandbox } = await import(sdkUrl);
// The `e2b` package under it: older ones answer some calls with nothing where newer ones say
// true/false (kill).
const e2bVersion = createRequire(sdkDir ? join(sdkDir, 'package.json') : import.meta.url)('e2b/package.json').version;
const [major, minor] = e2bVersion.split('.').map(Number);
const older = major === 2 && minor < 40;
/** A kill's answer: true, or nothing from SDKs that did not say. */
const killed = (v) => (older ? assert.ok(v === true || v === undefined, `kill answered ${v}`) : assert.equal(v, true));

const debug = (process.env.E2B_DEBUG || '').toLowerCase() === 'true';
const step = (name) => console.log(`ok ${name}`);

// Older SDKs (versions/) check the key's shape before any request: with LIZARD_LZ_KEY (the key as
// Lizard prints it, `lz_<hex>`; E2B_API_KEY is then its `e2b_<hex>` form) this SDK must refuse it
// without sending anything.
const lz = process.env.LIZARD_LZ_KEY;
if (lz) {
  await assert.rejects(Sandbox.create({ apiKey: lz, timeoutMs: 60_000 }), /Invalid API key format/);
  step('format');
}

const sbx = await Sandbox.create({ timeoutMs: 120_000 });
assert.ok(sbx.sandboxId);
step('create');

// Stateful Python in the default context.
await sbx.runCode('x = 41');
let ex = await sbx.runCode('x + 1');
assert.equal(ex.text, '42');
assert.ok(ex.executionCount >= 2, `executionCount ${ex.executionCount}`);
ex = await sbx.runCode("'quoted'");
assert.equal(ex.text, 'quoted');
step('state');

// Streaming callbacks.
const out = [];
const errs = [];
const results = [];
ex = await sbx.runCode(
  'import sys\nfor i in range(3): print(i)\nprint("warn", file=sys.stderr)\ndisplay(7)\n"done"',
  {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => errs.push(m.line),
    onResult: (r) => results.push(r),
  },
);
assert.equal(out.join(''), '0\n1\n2\n');
assert.equal(errs.join(''), 'warn\n');
assert.deepEqual(results.map((r) => [r.text, r.isMainResult]), [['7', false], ['done', true]]);
assert.deepEqual(ex.logs.stdout, out);
step('streaming');

// Errors are returned, not thrown.
let errorSeen;
ex = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (e) => (errorSeen = e) });
assert.equal(ex.error.name, 'ZeroDivisionError');
assert.equal(ex.error.value, 'division by zero');
assert.match(ex.error.traceback, /ZeroDivisionError/);
assert.equal(errorSeen.name, 'ZeroDivisionError');
step('error');

// Contexts.
const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' });
assert.equal(ctx.language, 'python');
assert.equal(ctx.cwd, '/tmp');
await sbx.runCode('y = 5', { context: ctx });
assert.equal((await sbx.runCode('y * 2', { context: ctx })).text, '10');
assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp');
assert.equal((await sbx.runCode('y')).error.name, 'NameError');
const langs = (await sbx.listCodeContexts()).map((c) => c.language);
assert.ok(langs.includes('python') && langs.includes('javascript'), langs.join());
await sbx.restartCodeContext(ctx);
assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError');
await sbx.removeCodeContext(ctx);
assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
step('contexts');

// JavaScript and Bash.
await sbx.runCode('const a = 20', { language: 'js' });
assert.equal((await sbx.runCode('a * 2 + 2', { language: 'javascript' })).text, '42');
// TypeScript runs in the JavaScript kernel (types stripped), sharing its state.
assert.equal((await sbx.runCode('const b: number = a + 1; b * 2', { language: 'ts' })).text, '42');
ex = await sbx.runCode('echo "from bash $((6 * 7))"', { language: 'bash' });
assert.equal(ex.logs.stdout.join(''), 'from bash 42\n');
step('languages');

// Per-run environment variables.
assert.equal((await sbx.runCode("import os; os.environ.get('FOO')", { envs: { FOO: 'bar' } })).text, 'bar');
assert.equal((await sbx.runCode("import os; str(os.environ.get('FOO'))")).text, 'None');
step('env');

// matplotlib: a PNG, and the chart behind it.
ex = await sbx.runCode(
  "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6], label='l')\nplt.title('growth')\nplt.show()",
);
const fig = ex.results.find((r) => r.png);
assert.ok(fig, 'a PNG result');
assert.ok(Buffer.from(fig.png, 'base64').subarray(1, 4).toString() === 'PNG');
assert.equal(fig.chart?.type, 'line');
assert.equal(fig.chart?.title, 'growth');
// Code written for older matplotlib (and E2B's kernel): boxplot(labels=...) still works.
ex = await sbx.runCode(
  "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.boxplot([[1, 2, 3], [4, 5, 6]], labels=['a', 'b'])\n" +
    "names = [t.get_text() for t in ax.get_xticklabels()]\nplt.figure()\nplt.boxplot([[1, 2]], labels=['c'])\n" +
    "plt.close('all')\nnames",
);
assert.equal(ex.error, undefined, JSON.stringify(ex.error));
assert.equal(ex.text, "['a', 'b']");
assert.deepEqual(ex.logs.stderr, []);
step('matplotlib');

// pandas: text, HTML and the data.
ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})");
assert.deepEqual(ex.results[0].data, { a: [1, 2], b: ['x', 'y'] });
assert.match(ex.results[0].html, /<table/);
step('dataframe');

// A client-side timeout interrupts the cell; the next run works.
await assert.rejects(
  sbx.runCode('import time\ntime.sleep(300)', { timeoutMs: 3000 }),
  (e) => e.name === 'TimeoutError',
);
const t0 = Date.now();
ex = await sbx.runCode('1 + 1', { timeoutMs: 30_000 });
assert.equal(ex.text, '2');
assert.ok(Date.now() - t0 < 20_000, `next run took ${Date.now() - t0} ms`);
step('timeout');

// Commands.
let r = await sbx.commands.run('echo hi && echo oops >&2');
assert.equal(r.exitCode, 0);
assert.equal(r.stdout, 'hi\n');
assert.equal(r.stderr, 'oops\n');
await assert.rejects(sbx.commands.run('echo failing; exit 3'), (e) => e.exitCode === 3 && e.stdout === 'failing\n');
const lines = [];
await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: (d) => lines.push(d) });
assert.equal(lines.join(''), '1\n2\n3\n');
r = await sbx.commands.run('echo $GREETING from $(pwd)', { envs: { GREETING: 'hello' }, cwd: '/tmp' });
assert.equal(r.stdout, 'hello from /tmp\n');
const bg = await sbx.commands.run('sleep 100', { background: true });
assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid));
killed(await bg.kill());
assert.equal(await sbx.commands.kill(999999), false);
step('commands');

// Root inside the sandbox: user "root" (cwd and HOME /root), password-less sudo, files as root.
r = await sbx.commands.run('id -u && pwd && echo $HOME', { user: 'root' });
assert.equal(r.stdout, '0\n/root\n/root\n');
assert.equal((await sbx.commands.run('sudo id -u')).stdout, '0\n');
await sbx.files.write('/etc/e2b-root.txt', 'as root', { user: 'root' });
assert.equal(await sbx.files.read('/etc/e2b-root.txt'), 'as root');
step('root');

// Files: text and binary round trips, list, exists, makeDir, rename, remove.
await sbx.files.write('/home/user/e2b/hello.txt', 'hello, lizard');
assert.equal(await sbx.files.read('/home/user/e2b/hello.txt'), 'hello, lizard');
const bytes = new Uint8Array([0, 1, 2, 250, 255]);
await sbx.files.write('/home/user/e2b/blob.bin', bytes.buffer);
assert.deepEqual(new Uint8Array(await sbx.files.read('/home/user/e2b/blob.bin', { format: 'bytes' })), bytes);
const entries = await sbx.files.list('/home/user/e2b');
assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [['blob.bin', 'file'], ['hello.txt', 'file']]);
const hello = entries.find((e) => e.name === 'hello.txt');
assert.equal(hello.path, '/home/user/e2b/hello.txt');
assert.equal(hello.size, 13);
assert.equal(hello.owner, 'user');
assert.ok(hello.modifiedTime instanceof Date);
assert.equal(await sbx.files.exists('/home/user/e2b/hello.txt'), true);
assert.equal(await sbx.files.exists('/home/user/e2b/nope.txt'), false);
// A symlink's info is what it leads to, with its absolute target, as E2B's envd says.
await sbx.commands.run('ln -s hello.txt /home/user/e2b/link');
const link = await sbx.files.getInfo('/home/user/e2b/link');
assert.deepEqual([link.type, link.symlinkTarget], ['file', '/home/user/e2b/hello.txt']);
assert.equal(await sbx.files.makeDir('/home/user/e2b/sub'), true);
assert.equal(await sbx.files.makeDir('/home/user/e2b/sub'), false);
await sbx.files.rename('/home/user/e2b/hello.txt', '/home/user/e2b/sub/moved.txt');
assert.equal(await sbx.files.read('/home/user/e2b/sub/moved.txt'), 'hello, lizard');
assert.equal((await sbx.runCode("open('/home/user/e2b/sub/moved.txt').read()")).text, 'hello, lizard');
const seen = [];
const watch = await sbx.files.watchDir('/home/user/e2b/sub', (e) => seen.push(e.name));
await sbx.files.write('/home/user/e2b/sub/watched.txt', 'w');
for (let i = 0; i < 100 && !seen.includes('watched.txt'); i++) await new Promise((r) => setTimeout(r, 100));
assert.ok(seen.includes('watched.txt'), `watch events: ${seen}`);
await watch.stop();
await sbx.files.write('/home/user/e2b/gz.txt', 'sent compressed '.repeat(100), { gzip: true });
assert.equal(await sbx.files.read('/home/user/e2b/gz.txt'), 'sent compressed '.repeat(100));
await sbx.files.write('/home/user/e2b/plain.txt', 'not a directory');
await assert.rejects(sbx.files.watchDir('/home/user/e2b/plain.txt', () => {}), (e) => e instanceof InvalidArgumentError);
await sbx.files.remove('/home/user/e2b');
assert.equal(await sbx.files.exists('/home/user/e2b'), false);
await sbx.files.remove('/home/user/e2b'); // already gone: a no-op, as E2B's
await assert.rejects(sbx.files.read('/home/user/e2b/missing.txt'), (e) => e instanceof NotFoundError);
step('files');

assert.equal(await sbx.isRunning(), true);
if (!debug) {
  // Snapshots (E2B's createSnapshot / listSnapshots / deleteSnapshot, and Sandbox.create with the
  // snapshot id as the template) and fork({ count: 2 }): each new sandbox starts with the source's
  // kernel state (x = 41) and files, and is independent of the source and the others.
  await sbx.files.write('/home/user/snap.txt', 'before the snapshot');
  const snap = await sbx.createSnapshot({ name: 'e2b-js-snap' });
  assert.match(snap.snapshotId, /^snap_/);
  assert.deepEqual(snap.names, ['e2b-js-snap']);
  const clone = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 });
  assert.notEqual(clone.sandboxId, sbx.sandboxId);
  assert.equal((await clone.runCode('x')).text, '41');
  assert.equal(await clone.files.read('/home/user/snap.txt'), 'before the snapshot');
  await clone.runCode("x = 'changed in the clone'");
  await clone.files.write('/home/user/snap.txt', 'changed in the clone');
  assert.equal((await sbx.runCode('x')).text, '41');
  assert.equal(await sbx.files.read('/home/user/snap.txt'), 'before the snapshot');
  assert.deepEqual((await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId), [snap.snapshotId]);
  const named = await Sandbox.listSnapshots({ name: 'e2b-js-snap' }).nextItems();
  assert.deepEqual(named.map((s) => s.snapshotId), [snap.snapshotId]);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
  assert.deepEqual(await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems(), []);
  await assert.rejects(Sandbox.create(snap.snapshotId), (e) => /not found/.test(e.message));
  killed(await clone.kill());
  if (typeof sbx.fork === 'function') {
    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 });
    assert.equal(forks.length, 2);
    for (const f of forks) assert.ok(f instanceof Sandbox, String(f));
    const [f1, f2] = forks;
    assert.equal(new Set([f1.sandboxId, f2.sandboxId, sbx.sandboxId]).size, 3);
    assert.equal((await f1.runCode('x')).text, '41');
    assert.equal((await f2.runCode('x')).text, '41');
    await f1.runCode('x = 1');
    await f1.files.write('/home/user/snap.txt', 'f1');
    assert.equal((await f2.runCode('x')).text, '41');
    assert.equal((await sbx.runCode('x')).text, '41');
    assert.equal(await f2.files.read('/home/user/snap.txt'), 'before the snapshot');
    // The snapshot a multi-fork is made from is not kept.
    assert.deepEqual(await sbx.listSnapshots().nextItems(), []);
    killed(await f1.kill());
    killed(await f2.kill());
  } else {
    console.log('skip fork (not in this SDK)');
  }
  step('snapshots');

  // The control plane: info, timeout, list, pause + connect (kernel state kept), kill.
  const info = await sbx.getInfo();
  assert.equal(info.sandboxId, sbx.sandboxId);
  assert.equal(info.state, 'running');
  await sbx.setTimeout(90_000);
  const metrics = await sbx.getMetrics();
  assert.ok(metrics.length >= 1, 'getMetrics');
  for (const m of metrics) {
    assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp), 'metric timestamp');
    assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed && m.diskTotal > 0, JSON.stringify(m));
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100 && m.cpuCount >= 1, JSON.stringify(m));
  }
  const page = await Sandbox.list().nextItems();
  assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId));
  await sbx.pause();
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await again.runCode('x')).text, '41');
  killed(await again.kill());
  await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e instanceof NotFoundError);
  step('lifecycle');
}

// ---- envd 0.6.x: file metadata (0.6.2), entries in watch events (0.6.3), allowNetworkMounts
// (0.6.4). The SDK refuses these client-side below the envd version the sandbox reports; SDKs
// older than these features do not send them. ----
if (older) {
  console.log('skip metadata (not in this SDK)');
} else {
  const msb = debug ? sbx : await Sandbox.create({ timeoutMs: 60_000 });
  const dir = '/home/user/meta';
  // Metadata keys come back lowercased (they travel as X-Metadata-<key> headers).
  const meta = { author: 'lizard', purpose: 'e2b compat' };
  const w = await msb.files.write(`${dir}/a.txt`, 'with metadata', { metadata: { Author: 'lizard', purpose: 'e2b compat' } });
  assert.deepEqual(w.metadata, meta);
  assert.deepEqual((await msb.files.getInfo(`${dir}/a.txt`)).metadata, meta);
  await msb.files.write(`${dir}/plain.txt`, 'no metadata');
  const listed = await msb.files.list(dir);
  assert.deepEqual(listed.map((e) => [e.name, e.metadata]), [['a.txt', meta], ['plain.txt', undefined]]);
  // A rename keeps it; a new write replaces it (with none: none).
  assert.deepEqual((await msb.files.rename(`${dir}/a.txt`, `${dir}/b.txt`)).metadata, meta);
  await msb.files.write(`${dir}/b.txt`, 'rewritten');
  assert.equal((await msb.files.getInfo(`${dir}/b.txt`)).metadata, undefined);
  // As root, on a file of root's.
  const rw = await msb.files.write('/root/meta.txt', 'root', { user: 'root', metadata: { by: 'root' } });
  assert.deepEqual(rw.metadata, { by: 'root' });
  const rinfo = await msb.files.getInfo('/root/meta.txt', { user: 'root' });
  assert.deepEqual([rinfo.owner, rinfo.metadata], ['root', { by: 'root' }]);
  // Past envd's limit (4 KiB in all): a 400, which the SDK raises as InvalidArgumentError; no file.
  await assert.rejects(
    msb.files.write(`${dir}/big.txt`, 'x', { metadata: { big: 'v'.repeat(5000) } }),
    (e) => e instanceof InvalidArgumentError && /total metadata size/.test(e.message),
  );
  assert.equal(await msb.files.exists(`${dir}/big.txt`), false);
  // A watch with includeEntry: creates and writes carry the entry (with its metadata), removes none.
  const events = [];
  const watch = await msb.files.watchDir(dir, (e) => events.push(e), { includeEntry: true, allowNetworkMounts: true });
  const until = async (ok) => { for (let i = 0; i < 100 && !ok(); i++) await new Promise((r) => setTimeout(r, 100)); };
  await msb.files.write(`${dir}/w.txt`, 'watched', { metadata: { tag: 'w' } });
  await until(() => events.some((e) => e.name === 'w.txt' && e.type === 'create'));
  await msb.files.remove(`${dir}/w.txt`);
  await until(() => events.some((e) => e.name === 'w.txt' && e.type === 'remove'));
  await watch.stop();
  const created = events.find((e) => e.name === 'w.txt' && e.type === 'create');
  assert.ok(created?.entry, `watch events: ${JSON.stringify(events)}`);
  assert.deepEqual(
    [created.entry.name, created.entry.path, created.entry.type, created.entry.size, created.entry.metadata],
    ['w.txt', `${dir}/w.txt`, 'file', 7, { tag: 'w' }],
  );
  const removed = events.find((e) => e.name === 'w.txt' && e.type === 'remove');
  assert.ok(removed, `watch events: ${JSON.stringify(events)}`);
  assert.equal(removed.entry, undefined);
  await msb.files.remove(dir);
  await msb.files.remove('/root/meta.txt', { user: 'root' });
  if (!debug) killed(await msb.kill());
  step('metadata');
}
console.log('done');
