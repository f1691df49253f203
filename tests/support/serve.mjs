// A real `lizard serve` for the Node test suites outside the SDKs (tests/e2b, tests/mcp): on a
// free port with a temporary data dir, sharing the template built once by scripts/test.sh
// (LIZARD_TEMPLATES_FROM), its admin key read from the data dir, and a helper that makes a
// project and returns its key. Node's built-in modules only (each suite has its own
// node_modules).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = process.env.LIZARD_BIN || join(REPO, 'target/debug/lizard');

/**
 * Start `lizard serve` with `extraArgs` and wait for its ready line.
 * @returns {Promise<{ child, url: string, admin: string, ready: object, log: () => string,
 *   project: (name: string, fields?: object) => Promise<string>, stop: () => Promise<void> }>}
 */
export async function startServer(extraArgs = []) {
  const templatesFrom = process.env.LIZARD_TEMPLATES_FROM || join(REPO, 'target/lizard-data');
  const dataDir = await mkdtemp(join(tmpdir(), 'lizard-node-'));
  // 2 GiB template build disks (default 8): each is promised disk space up front.
  const args = ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--templates-from', templatesFrom,
    '--pool-size', '1', '--template-build-disk-mb', '2048', ...extraArgs];
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LIZARD_LOG: 'warn' } });
  let log = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => { log = (log + d).slice(-64 * 1024); });
  process.once('exit', () => child.kill('SIGKILL'));
  const ready = await new Promise((ok, fail) => {
    const rl = createInterface({ input: child.stdout });
    rl.once('line', (l) => { try { ok(JSON.parse(l)); } catch { fail(new Error(`not a ready line: ${l}\n${log}`)); } rl.on('line', () => {}); });
    child.once('exit', (c) => fail(new Error(`lizard serve exited (${c}):\n${log}`)));
  });
  const url = `http://${ready.addr}`;
  const admin = (await readFile(join(dataDir, 'admin-key'), 'utf8')).trim();
  const project = async (name, fields = {}) => {
    const res = await fetch(`${url}/v1/projects`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name, ...fields }),
    });
    assert.equal(res.status, 201, await res.clone().text());
    return (await res.json()).api_key;
  };
  // Sandboxes outlive their server (by design): kill every one (and delete the volumes) before
  // the server goes, so a suite leaves nothing running on the machine.
  const stop = async () => {
    const auth = { authorization: `Bearer ${admin}` };
    try {
      const list = await (await fetch(`${url}/v1/sandboxes`, { headers: auth })).json();
      for (const sb of list) await fetch(`${url}/v1/sandboxes/${sb.sandbox_id}`, { method: 'DELETE', headers: auth });
      const vols = await (await fetch(`${url}/v1/volumes`, { headers: auth })).json();
      for (const v of vols) await fetch(`${url}/v1/volumes/${v.volume_id}?force=true`, { method: 'DELETE', headers: auth });
    } catch (e) {
      console.error(`could not clean up the server's sandboxes: ${e.message}`);
    }
    child.kill('SIGTERM');
    await new Promise((ok) => {
      if (child.exitCode !== null || child.signalCode !== null) return ok();
      const t = setTimeout(ok, 10_000);
      child.once('exit', () => { clearTimeout(t); ok(); });
    });
    // Its data dir goes too, unless something is still mounted in it (a sandbox or volume that
    // could not be removed: then it is left as it is, and said so).
    const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n');
    const held = mounts.some((l) => (l.split(' ')[4] ?? '').startsWith(`${dataDir}/`));
    if (held) console.error(`left the server's data dir ${dataDir}: something is mounted in it`);
    else {
      await rm(dataDir, { recursive: true, force: true }).catch((e) => {
        console.error(`left the server's data dir ${dataDir}: ${e.message}`);
      });
    }
  };
  return { child, url, admin, ready, log: () => log, project, stop };
}
