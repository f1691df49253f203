// E2B compatibility: the real, pinned E2B SDKs (JavaScript: package.json; Python:
// requirements.txt; older ones in versions/) run unmodified scenario scripts
// (scenario.mjs, scenario.py) against a real `lizard serve`, in E2B's two self-hosting modes:
//  - self-hosted: E2B_API_KEY (a Lizard project key), E2B_API_URL and E2B_SANDBOX_URL (both the
//    server) — the SDKs use the control plane and route sandbox traffic by header;
//  - debug: E2B_DEBUG=true against `lizard serve --e2b-debug` — no control plane, one default
//    sandbox behind the debug listeners (E2B's fixed localhost:49999/49983 when they are free,
//    else E2B_SANDBOX_URL pointing at a debug listener on a free port).
// Both SDKs must print the same steps in the same order. Nothing is mocked. The template
// scenarios (template_scenario.py, template_scenario.mjs) build templates with E2B's `Template`.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { REPO, startServer as serve } from '../support/serve.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const PYTHON = process.env.LIZARD_E2B_PYTHON || join(REPO, 'target/e2b-venv/bin/python');
const STEPS = ['create', 'state', 'streaming', 'error', 'contexts', 'languages', 'env', 'matplotlib',
  'dataframe', 'timeout', 'commands', 'root', 'files'];

let server;

async function portFree(port) {
  return new Promise((res) => {
    const s = net.createServer();
    s.once('error', () => res(false));
    s.listen(port, '127.0.0.1', () => s.close(() => res(true)));
  });
}

async function startServer() {
  const fixed = (await portFree(49999)) && (await portFree(49983));
  const extra = ['--e2b-debug'];
  if (!fixed) extra.push('--e2b-debug-ci-listen', '127.0.0.1:0', '--e2b-debug-envd-listen', '127.0.0.1:0');
  const s = await serve(extra);
  // A project and its key: the key E2B's SDKs get as E2B_API_KEY.
  const projectKey = await s.project('e2b-compat');
  return { ...s, projectKey, fixed, debug: s.ready.e2b_debug };
}

before(async () => { server = await startServer(); });

after(async () => { await server?.stop(); });

function envFor(mode) {
  const env = { ...process.env };
  for (const k of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_DEBUG', 'E2B_DOMAIN']) delete env[k];
  if (mode === 'self-hosted') {
    Object.assign(env, { E2B_API_KEY: server.projectKey, E2B_API_URL: server.url, E2B_SANDBOX_URL: server.url });
  } else {
    env.E2B_DEBUG = 'true';
    if (!server.fixed) env.E2B_SANDBOX_URL = `http://${server.debug.envd}`;
  }
  return env;
}

function run(cmd, args, env) {
  return new Promise((ok) => {
    const p = spawn(cmd, args, { cwd: HERE, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('exit', (code) => ok({ code, stdout, stderr }));
  });
}

async function scenario(lang, mode) {
  const [cmd, args] = lang === 'js' ? [process.execPath, ['scenario.mjs']] : [PYTHON, ['scenario.py']];
  const r = await run(cmd, args, envFor(mode));
  const detail = `${lang} ${mode} exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- server log\n${server.log()}`;
  assert.equal(r.code, 0, detail);
  const want = [...STEPS, ...(mode === 'self-hosted' ? ['snapshots', 'lifecycle'] : []), 'metadata'].map((s) => `ok ${s}`);
  assert.deepEqual(r.stdout.trim().split('\n'), [...want, 'done'], detail);
}

for (const mode of ['self-hosted', 'debug']) {
  test(`@e2b/code-interpreter (JavaScript) unmodified, ${mode} mode`, { timeout: 300_000 }, () => scenario('js', mode));
  test(`e2b-code-interpreter (Python) unmodified, ${mode} mode`, { timeout: 300_000 }, () => scenario('py', mode));
}

// Older SDKs, as people have pinned them over 2026 (tests/e2b/versions/: the oldest that checks the
// key's shape before any request and honours E2B_SANDBOX_URL for code, and a mid-2026 one), run the
// whole scenario with the project key in E2B's shape, `e2b_<hex>`, after checking that they
// refuse its `lz_<hex>` spelling. What an SDK does not have yet it says it skips (js-2.28.0 has
// no fork and no file metadata), and the expected lines say which.
const VERSIONS = {
  'python-2.39.1': [],
  'python-2.45.1': [],
  'js-2.28.0': ['fork', 'metadata'],
  'js-2.45.0': [],
};
for (const [name, lacks] of Object.entries(VERSIONS)) {
  test(`E2B SDK ${name} (checks the key's shape) unmodified, self-hosted mode`, { timeout: 300_000 }, async () => {
    const env = envFor('self-hosted');
    env.E2B_API_KEY = `e2b_${server.projectKey.replace(/^lz_/, '')}`;
    env.LIZARD_LZ_KEY = server.projectKey;
    let cmd;
    let args;
    if (name.startsWith('js-')) {
      [cmd, args] = [process.execPath, ['scenario.mjs']];
      env.E2B_SDK_DIR = join(HERE, 'versions', name);
    } else {
      [cmd, args] = [join(REPO, `target/e2b-venv-${name}/bin/python`), ['scenario.py']];
    }
    const r = await run(cmd, args, env);
    const detail = `${name} exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- server log\n${server.log()}`;
    assert.equal(r.code, 0, detail);
    const want = ['ok format', ...STEPS.map((s) => `ok ${s}`)];
    if (lacks.includes('fork')) want.push('skip fork (not in this SDK)');
    want.push('ok snapshots', 'ok lifecycle');
    want.push(lacks.includes('metadata') ? 'skip metadata (not in this SDK)' : 'ok metadata');
    assert.deepEqual(r.stdout.trim().split('\n'), [...want, 'done'], detail);
  });
}

// E2B's template build API: the SDKs' `Template` builder and `Template.build` / `Template.exists`,
// unmodified, build a Lizard template (a layer over code-interpreter-v1) that their sandboxes use.
for (const lang of ['py', 'js']) {
  test(`E2B Template.build (${lang === 'js' ? 'JavaScript' : 'Python'}) unmodified`, { timeout: 600_000 }, async () => {
    const [cmd, args] = lang === 'js'
      ? [process.execPath, ['template_scenario.mjs', 'e2b-template-js']]
      : [PYTHON, ['template_scenario.py', 'e2b-template-py']];
    const r = await run(cmd, args, envFor('self-hosted'));
    const detail = `${lang} exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- server log\n${server.log()}`;
    assert.equal(r.code, 0, detail);
    const want = ['build', 'exists', 'sandbox', 'rebuild', 'unsupported'].map((s) => `ok ${s}`);
    assert.deepEqual(r.stdout.trim().split('\n'), [...want, 'done'], detail);
  });
}

// A one-file ustar archive, as E2B's SDKs upload for a COPY.
function tarOf(name, text) {
  const data = Buffer.from(text);
  const h = Buffer.alloc(512);
  const put = (off, len, str) => h.write(str.padEnd(len, '\0').slice(0, len), off, 'ascii');
  put(0, 100, name);
  put(100, 8, '0000644\0');
  put(108, 8, '0000000\0');
  put(116, 8, '0000000\0');
  put(124, 12, `${data.length.toString(8).padStart(11, '0')}\0`);
  put(136, 12, '00000000000\0');
  put(148, 8, '        ');
  put(156, 1, '0');
  put(257, 8, 'ustar\u000000');
  let sum = 0;
  for (const b of h) sum += b;
  put(148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad, Buffer.alloc(1024)]);
}

test('E2B template uploads: a link works once and only for its project; files must match their hash', async () => {
  const key = (k) => ({ 'x-api-key': k, 'content-type': 'application/json' });
  const other = await (await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'e2b-tpl-other' }),
  })).json();
  assert.equal((await fetch(`${server.url}/v3/templates`, { method: 'POST', body: '{"name":"x"}' })).status, 401);
  const req = await fetch(`${server.url}/v3/templates`, { method: 'POST', headers: key(server.projectKey), body: JSON.stringify({ name: 'e2b-upload-probe' }) });
  assert.equal(req.status, 202);
  const { templateID, buildID } = await req.json();
  const hash = 'ab'.repeat(32);
  const link = async (k, t = templateID) => fetch(`${server.url}/templates/${t}/files/${hash}`, { headers: key(k) });
  const first = await link(server.projectKey);
  assert.equal(first.status, 201);
  const { present, url } = await first.json();
  assert.equal(present, false);
  assert.ok(url.startsWith(`${server.url}/e2b/uploads/`), url);
  // Another project cannot ask for links to this build, see its status or start it.
  assert.equal((await link(other.api_key)).status, 404);
  assert.equal((await fetch(`${server.url}/templates/${templateID}/builds/${buildID}/status`, { headers: key(other.api_key) })).status, 404);
  assert.equal((await fetch(`${server.url}/v2/templates/${templateID}/builds/${buildID}`, {
    method: 'POST', headers: key(other.api_key), body: JSON.stringify({ fromTemplate: 'code-interpreter-v1', steps: [] }),
  })).status, 404);
  // A guessed link is nothing; the real one works once.
  assert.equal((await fetch(`${server.url}/e2b/uploads/${'0'.repeat(64)}`, { method: 'PUT', body: 'x' })).status, 404);
  const archive = tarOf('a.txt', 'not what the hash says\n');
  assert.equal((await fetch(url, { method: 'PUT', body: archive })).status, 200);
  assert.equal((await fetch(url, { method: 'PUT', body: archive })).status, 404, 'a used link');
  assert.equal((await (await link(server.projectKey)).json()).present, true);
  // The other project's own build does not see this project's files as present.
  const o = await (await fetch(`${server.url}/v3/templates`, { method: 'POST', headers: key(other.api_key), body: JSON.stringify({ name: 'e2b-upload-probe' }) })).json();
  assert.equal((await (await link(other.api_key, o.templateID)).json()).present, false);
  // Files that do not match their hash do not build.
  const start = await fetch(`${server.url}/v2/templates/${templateID}/builds/${buildID}`, {
    method: 'POST', headers: key(server.projectKey),
    body: JSON.stringify({ fromTemplate: 'code-interpreter-v1', steps: [{ type: 'COPY', args: ['a.txt', '/tmp/a.txt', '', ''], filesHash: hash }] }),
  });
  assert.equal(start.status, 400);
  assert.match((await start.json()).message, /do not match their hash/);
  // The alias of a template that was never built does not exist.
  assert.equal((await fetch(`${server.url}/templates/aliases/e2b-upload-probe`, { headers: key(server.projectKey) })).status, 404);
});

test('sandbox traffic needs the sandbox token; the control plane needs a key', async () => {
  const ci = (headers, path = '/contexts') => fetch(`${server.url}${path}`, { headers });
  const anon = await fetch(`${server.url}/v2/sandboxes`);
  assert.equal(anon.status, 401);
  assert.equal((await anon.json()).code, 401);
  const res = await fetch(`${server.url}/v2/sandboxes`, {
    method: 'POST',
    headers: { 'x-api-key': server.projectKey, 'content-type': 'application/json' },
    body: JSON.stringify({ templateID: 'code-interpreter-v1', timeout: 60 }),
  });
  assert.equal(res.status, 201);
  const sb = await res.json();
  assert.equal(sb.envdVersion, '0.6.4');
  const route = { 'e2b-sandbox-id': sb.sandboxID, 'e2b-sandbox-port': '49999' };
  assert.equal((await ci(route)).status, 401, 'no token');
  assert.equal((await ci({ ...route, 'x-access-token': 'wrong' })).status, 401, 'wrong token');
  assert.equal((await ci({ ...route, 'x-api-key': server.projectKey })).status, 401, 'an API key is not a sandbox token');
  assert.equal((await ci({ ...route, 'e2b-traffic-access-token': sb.trafficAccessToken })).status, 200);
  // Another project's key sees nothing of it.
  const other = await (await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'e2b-other' }),
  })).json();
  const peek = await fetch(`${server.url}/sandboxes/${sb.sandboxID}`, { headers: { 'x-api-key': other.api_key } });
  assert.equal(peek.status, 404);
  const kill = await fetch(`${server.url}/sandboxes/${sb.sandboxID}`, { method: 'DELETE', headers: { 'x-api-key': server.projectKey } });
  assert.equal(kill.status, 204);
  assert.equal((await ci({ ...route, 'x-access-token': sb.envdAccessToken })).status, 502, 'a killed sandbox is gone');
});

test("E2B snapshots and fork: another project's key sees none of them; bad counts and clone options are 400", async () => {
  const key = (k) => ({ 'x-api-key': k, 'content-type': 'application/json' });
  const call = (k, method, path, body) => fetch(`${server.url}${path}`, {
    method, headers: key(k), ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const other = await (await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'e2b-snap-other' }),
  })).json();
  const sb = await (await call(server.projectKey, 'POST', '/sandboxes', { templateID: 'code-interpreter-v1', timeout: 60 })).json();
  const made = [sb.sandboxID];
  try {
    const taken = await call(server.projectKey, 'POST', `/sandboxes/${sb.sandboxID}/snapshots`, {});
    assert.equal(taken.status, 201);
    const snap = await taken.json();
    assert.deepEqual(snap.names, [snap.snapshotID]);
    // The other project: no snapshot of this sandbox, no listing, no clone, no delete, no fork.
    assert.equal((await call(other.api_key, 'POST', `/sandboxes/${sb.sandboxID}/snapshots`, {})).status, 404);
    assert.deepEqual(await (await call(other.api_key, 'GET', '/snapshots')).json(), []);
    const clone = await call(other.api_key, 'POST', '/sandboxes', { templateID: snap.snapshotID });
    assert.equal(clone.status, 404);
    assert.equal((await clone.json()).code, 404);
    assert.equal((await call(other.api_key, 'DELETE', `/templates/${snap.snapshotID}`)).status, 404);
    assert.equal((await call(other.api_key, 'POST', `/sandboxes/${sb.sandboxID}/fork`, { count: 1 })).status, 404);
    // Bounds and refusals.
    for (const count of [0, 21]) {
      const r = await call(server.projectKey, 'POST', `/sandboxes/${sb.sandboxID}/fork`, { count });
      assert.equal(r.status, 400, `count ${count}`);
    }
    const withEnv = await call(server.projectKey, 'POST', '/sandboxes', { templateID: snap.snapshotID, envVars: { A: 'b' } });
    assert.equal(withEnv.status, 400);
    assert.equal((await call(server.projectKey, 'DELETE', '/templates/code-interpreter-v1')).status, 404);
    // The snapshot is still there for its own project.
    const mine = await (await call(server.projectKey, 'GET', `/snapshots?sandboxID=${sb.sandboxID}`)).json();
    assert.deepEqual(mine.map((s) => s.snapshotID), [snap.snapshotID]);
    assert.equal((await call(server.projectKey, 'DELETE', `/templates/${snap.snapshotID}`)).status, 204);
  } finally {
    for (const id of made) await call(server.projectKey, 'DELETE', `/sandboxes/${id}`);
  }
});

test("E2B's getHost, signed file URLs, pause({ keepMemory: false }) and autoResume unmodified", { timeout: 300_000 }, async () => {
  const { Sandbox } = await import('@e2b/code-interpreter');
  const http = await import('node:http');
  const opts = { apiKey: server.projectKey, apiUrl: server.url, sandboxUrl: server.url };
  const sbx = await Sandbox.create({ ...opts, network: { allowPublicTraffic: true } });
  try {
    // getHost(port) names the sandbox's port under the server's sandbox domain
    // (localhost:<port> by default): a request to that host name reaches the service inside.
    const host = sbx.getHost(8000);
    assert.equal(host, `8000-${sbx.sandboxId}.localhost:${new URL(server.url).port}`);
    await sbx.commands.run('echo served > /tmp/index.html && cd /tmp && python3 -m http.server 8000 --bind 127.0.0.1', { background: true });
    const viaHost = () => new Promise((ok, fail) => {
      const u = new URL(server.url);
      const req = http.request({ host: u.hostname, port: u.port, path: '/index.html', headers: { host } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => { body += d; });
        res.on('end', () => ok({ status: res.statusCode, body }));
      });
      req.on('error', fail);
      req.end();
    });
    let got;
    for (let i = 0; i < 100; i++) {
      got = await viaHost();
      if (got.status === 200) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.deepEqual(got, { status: 200, body: 'served\n' });
    // Signed URLs made by the SDK open with no header at all (here at E2B_SANDBOX_URL, the
    // server's own address: the signature names the sandbox).
    await sbx.files.write('/home/user/signed.txt', 'signed content');
    const down = await fetch(await sbx.downloadUrl('/home/user/signed.txt', { useSignatureExpiration: 600 }));
    assert.equal(down.status, 200);
    assert.equal(await down.text(), 'signed content');
    const form = new FormData();
    form.append('file', new Blob(['uploaded by URL']), 'up.txt');
    const up = await fetch(await sbx.uploadUrl('/home/user/up.txt'), { method: 'POST', body: form });
    assert.equal(up.status, 200, await up.clone().text());
    assert.equal(await sbx.files.read('/home/user/up.txt'), 'uploaded by URL');
    const tampered = (await sbx.downloadUrl('/home/user/signed.txt')).replace('signed.txt', 'up.txt');
    assert.equal((await fetch(tampered)).status, 401);
    // pause({ keepMemory: false }) hibernates: the memory goes to disk; connect brings it back.
    await sbx.runCode('kept = 6 * 7');
    assert.equal(await Sandbox.pause(sbx.sandboxId, { ...opts, keepMemory: false }), true);
    const info = await (await fetch(`${server.url}/v1/sandboxes/${sbx.sandboxId}`, { headers: { authorization: `Bearer ${server.admin}` } })).json();
    assert.equal(info.state, 'hibernated');
    const back = await Sandbox.connect(sbx.sandboxId, opts);
    assert.equal((await back.runCode('kept')).text, '42');
    // lifecycle.autoResume: code sent to the paused sandbox resumes it, state and all.
    const auto = await Sandbox.create({ ...opts, lifecycle: { onTimeout: 'pause', autoResume: true } });
    try {
      assert.equal((await auto.getInfo()).lifecycle.autoResume, true);
      await auto.runCode('resumed = "yes"');
      assert.equal(await Sandbox.pause(auto.sandboxId, opts), true);
      assert.equal((await auto.getInfo()).state, 'paused');
      assert.equal((await auto.runCode('resumed')).text, 'yes');
      assert.equal((await auto.getInfo()).state, 'running');
    } finally {
      await auto.kill().catch(() => {});
    }
  } finally {
    await sbx.kill().catch(() => {});
  }
});

test('killing a sandbox mid-stream is "the sandbox was killed" in both SDKs', { timeout: 300_000 }, async () => {
  const py = `
import threading, time
from e2b_code_interpreter import Sandbox
sbx = Sandbox.create()
seen = []
def killer():
    while not seen:
        time.sleep(0.05)
    Sandbox.kill(sbx.sandbox_id)
threading.Thread(target=killer).start()
try:
    sbx.run_code("import time\\nfor i in range(600):\\n    print(i, flush=True)\\n    time.sleep(0.1)", on_stdout=seen.append)
    print("returned")
except Exception as e:
    print(type(e).__name__, e)
`;
  const r = await run(PYTHON, ['-c', py], envFor('self-hosted'));
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^TimeoutException The sandbox was killed while the request was in progress/, r.stdout + r.stderr);
  const { Sandbox } = await import('@e2b/code-interpreter');
  const opts = { apiKey: server.projectKey, apiUrl: server.url, sandboxUrl: server.url };
  const sbx = await Sandbox.create(opts);
  let killed;
  const running = sbx.runCode('import time\nfor i in range(600):\n    print(i, flush=True)\n    time.sleep(0.1)', {
    onStdout: () => { killed ??= Sandbox.kill(sbx.sandboxId, opts); },
  });
  await assert.rejects(running, /sandbox was killed|not running|terminated/i);
  await killed;
});

test("E2B's Volume and Secret, volumeMounts, network rules and the refusals, unmodified", { timeout: 300_000 }, async () => {
  const { Sandbox, Volume, VolumePathNotFoundError, Secret } = await import('e2b');
  // A project that may have egress (network rules need it: their hosts must be allowed).
  const made = await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'e2b-resources', allow_egress: true }),
  });
  assert.equal(made.status, 201, await made.clone().text());
  const opts = { apiKey: (await made.json()).api_key, apiUrl: server.url, sandboxUrl: server.url };
  const admin = { authorization: `Bearer ${server.admin}` };

  // Volumes: create, list, get, mount in one sandbox and read in another, destroy.
  const vol = await Volume.create('e2b-data', opts);
  assert.match(vol.volumeId, /^vol_/);
  assert.deepEqual((await Volume.list(opts)).map((v) => v.name), ['e2b-data']);
  assert.equal((await Volume.getInfo(vol.volumeId, opts)).name, 'e2b-data');
  const writer = await Sandbox.create({ ...opts, volumeMounts: { '/data/shared': vol } });
  await writer.commands.run('echo kept > /data/shared/note.txt');
  await writer.kill();
  const reader = await Sandbox.create({ ...opts, volumeMounts: { '/mnt/v': 'e2b-data' } });
  assert.equal((await reader.commands.run('cat /mnt/v/note.txt')).stdout, 'kept\n');
  await reader.kill();
  // The content API (its own URL, E2B_VOLUME_API_URL; the volume's token), run by a helper
  // sandbox that mounts the volume: the host never resolves a path among the volume's files.
  const at = { apiUrl: server.url };
  assert.equal((await vol.readFile('/note.txt', at)), 'kept\n');
  const dir = await vol.makeDir('/made/deep', { ...at, force: true });
  assert.deepEqual([dir.name, dir.type, dir.path, dir.uid], ['deep', 'directory', '/made/deep', 1000]);
  const w = await vol.writeFile('/made/deep/a.txt', 'from the content API', { ...at, mode: 0o640 });
  assert.deepEqual([w.path, w.size, w.mode, w.uid], ['/made/deep/a.txt', 20, 0o640, 1000]);
  await assert.rejects(vol.writeFile('/made/deep/a.txt', 'again', at), /already exists/);
  await vol.writeFile('/made/deep/a.txt', 'overwritten', { ...at, force: true });
  assert.equal(await vol.readFile('/made/deep/a.txt', at), 'overwritten');
  assert.deepEqual((await vol.list('/', at)).map((e) => e.name), ['made', 'note.txt']);
  assert.deepEqual((await vol.list('/made', { ...at, depth: 3 })).map((e) => e.path), ['/made/deep', '/made/deep/a.txt']);
  assert.equal((await vol.getInfo('/made/deep/a.txt', at)).size, 11);
  assert.equal((await vol.updateMetadata('/made/deep/a.txt', { mode: 0o600 }, at)).mode, 0o600);
  assert.equal(await vol.exists('/made/deep/a.txt', at), true);
  await vol.remove('/made', at);
  assert.equal(await vol.exists('/made', at), false);
  await assert.rejects(vol.readFile('/missing.txt', at), (e) => e instanceof VolumePathNotFoundError);
  await assert.rejects(vol.getInfo('/../etc/passwd', at), /\.\./);
  // Another volume's token opens nothing.
  const other = await Volume.create('e2b-other', opts);
  await assert.rejects(
    new Volume(vol.volumeId, vol.name, other.token, undefined, false).readFile('/note.txt', at),
    /volume token/,
  );
  assert.equal(await Volume.destroy(other.volumeId, opts), true);
  assert.equal(await Volume.destroy(vol.volumeId, opts), true);
  assert.equal(await Volume.destroy(vol.volumeId, opts), false);

  // Secrets: created, versioned, listed, never shown; a rule's placeholder is Lizard's inject.
  const s1 = await Secret.create('Probe-Key', 'v1-value', { ...opts, metadata: { team: 'a' } });
  assert.deepEqual([s1.secretId, s1.name, s1.version, s1.metadata], ['sec_probe-key', 'probe-key', 1, { team: 'a' }]);
  assert.equal((await Secret.update(s1.secretId, 'v2-value', opts)).version, 2);
  assert.equal((await Secret.getInfo('probe-key', opts)).version, 2);
  assert.deepEqual((await Secret.list(opts).nextItems()).map((s) => s.name), ['probe-key']);
  await assert.rejects(Secret.create('probe-key', 'x', opts), /already exists/);
  const ruled = await Sandbox.create({
    ...opts,
    network: {
      allowOut: ['api.example.com'],
      denyOut: ['0.0.0.0/0'],
      rules: { 'api.example.com': [{ transform: { headers: { Authorization: `Bearer ${Secret.fill('probe-key')}` } } }] },
    },
  });
  const info = await (await fetch(`${server.url}/v1/sandboxes/${ruled.sandboxId}`, { headers: admin })).json();
  assert.deepEqual(info.network.inject, [{ host: 'api.example.com', headers: { Authorization: 'Bearer ${secret:probe-key}' } }]);
  assert.ok(!JSON.stringify(info).includes('v2-value'));
  await ruled.kill();
  assert.equal(await Secret.destroy('sec_probe-key', opts), true);
  assert.equal(await Secret.exists('probe-key', opts), false);

  // What is not offered is refused, not ignored.
  for (const [what, extra] of [
    ['egressProxy', { network: { egressProxy: { address: '127.0.0.1:1080' } } }],
    ['httpsPorts', { network: { httpsPorts: [8443] } }],
    ['iam', { iam: { tokens: { t: Secret.workloadToken ? Secret.workloadToken({ audience: 'a' }) : { audience: 'a', tokenType: 'jwt' } } } }],
  ]) {
    await assert.rejects(Sandbox.create({ ...opts, ...extra }), new RegExp(`${what}|not offered`), what);
  }
});

test("E2B's 2026 surface through the Python SDK unmodified (Secret, Volume, rules, URLs, lifecycle)", { timeout: 300_000 }, async () => {
  const made = await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'e2b-py-resources', allow_egress: true }),
  });
  assert.equal(made.status, 201, await made.clone().text());
  const env = envFor('self-hosted');
  Object.assign(env, {
    E2B_API_KEY: (await made.json()).api_key,
    E2B_VOLUME_API_URL: server.url,
    LIZARD_URL: server.url,
    LIZARD_ADMIN_KEY: server.admin,
  });
  const r = await run(PYTHON, ['resources.py'], env);
  const detail = `resources.py exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- server log\n${server.log()}`;
  assert.equal(r.code, 0, detail);
  const want = ['secrets', 'volumes', 'rules', 'urls', 'lifecycle', 'refusals'].map((s) => `ok ${s}`);
  assert.deepEqual(r.stdout.trim().split('\n'), [...want, 'done'], detail);
});
