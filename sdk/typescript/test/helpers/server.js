// Test harness: starts a real `lizard serve` (binary LIZARD_BIN or target/debug/lizard) on a free
// port with a temporary data dir and the shared template build (LIZARD_TEMPLATES_FROM or
// target/lizard-data), points LIZARD_API_URL / LIZARD_API_KEY at it, and at the end kills every
// sandbox on that server (sandboxes outlive the server by design), deletes its volumes and stops it.
// It mocks nothing. Also what several suites need around it: a project's key, and a TCP server on
// this host's address for the egress tests.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

/** /work/main (the repository root). */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
/** sdk/typescript. */
export const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const START_TIMEOUT_MS = 60_000;

/**
 * Start `lizard serve` (with `extraArgs`, e.g. `['--criu', 'none']`) and set LIZARD_API_URL /
 * LIZARD_API_KEY in this process's environment.
 * @param {string[]} [extraArgs]
 * @returns {Promise<{ url: string, apiKey: string, dataDir: string, log: () => string,
 *   stop: () => Promise<{ killed: string[] }> }>}
 */
export async function startServer(extraArgs = []) {
  const bin = process.env.LIZARD_BIN || join(REPO, 'target/debug/lizard');
  const templatesFrom = process.env.LIZARD_TEMPLATES_FROM || join(REPO, 'target/lizard-data');
  const dataDir = await mkdtemp(join(tmpdir(), 'lizard-ts-sdk-'));
  const child = spawn(
    bin,
    ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--templates-from', templatesFrom,
      // 2 GiB template build disks (default 8): each is promised disk space up front.
      '--template-build-disk-mb', '2048', ...extraArgs],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      // A pool of 2 (the default, sized from the host's memory, launches ≈ 20 sandboxes at start).
      env: { LIZARD_POOL_SIZE: '2', ...process.env, LIZARD_LOG: process.env.LIZARD_LOG || 'warn' },
    },
  );
  let log = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    log = (log + d).slice(-64 * 1024);
  });
  // If this test process dies without reaching stop(), do not leave the server behind.
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);

  const ready = await new Promise((resolveReady, reject) => {
    const timer = setTimeout(() => reject(new Error(`lizard serve did not start in time:\n${log}`)), START_TIMEOUT_MS);
    const rl = createInterface({ input: child.stdout });
    rl.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolveReady(JSON.parse(line));
      } catch {
        reject(new Error(`lizard serve printed ${JSON.stringify(line)} instead of its JSON ready line:\n${log}`));
      }
      // Keep draining stdout so the server never blocks on it.
      rl.on('line', () => {});
    });
    child.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`lizard serve exited (${code ?? sig}) before it was ready (bin ${bin}):\n${log}`));
    });
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start ${bin}: ${e.message} (build it: cargo build -p lizard)`));
    });
  });
  const url = `http://${ready.addr}`;
  const apiKey = (await readFile(join(dataDir, 'admin-key'), 'utf8')).trim();
  process.env.LIZARD_API_URL = url;
  process.env.LIZARD_API_KEY = apiKey;

  let stopped;
  const stop = () => {
    stopped ??= (async () => {
      const auth = { authorization: `Bearer ${apiKey}` };
      const killed = [];
      let allGone = true;
      try {
        const res = await fetch(`${url}/v1/sandboxes`, { headers: auth });
        const list = await res.json();
        for (const sb of list) {
          const r = await fetch(`${url}/v1/sandboxes/${sb.sandbox_id}`, { method: 'DELETE', headers: auth });
          if (r.status === 204 || r.status === 404) killed.push(sb.sandbox_id);
          else allGone = false;
        }
        // Volumes are host mounts: delete them (their sandboxes are gone by now).
        const vols = await (await fetch(`${url}/v1/volumes`, { headers: auth })).json();
        for (const v of vols) {
          const r = await fetch(`${url}/v1/volumes/${v.volume_id}?force=true`, { method: 'DELETE', headers: auth });
          if (r.status !== 204 && r.status !== 404) allGone = false;
        }
      } catch (e) {
        allGone = false;
        console.error(`could not clean up sandboxes: ${e.message}`);
      }
      child.kill('SIGTERM');
      const exited = await new Promise((r) => {
        if (child.exitCode !== null || child.signalCode !== null) return r(true);
        const t = setTimeout(() => r(false), 10_000);
        child.once('exit', () => {
          clearTimeout(t);
          r(true);
        });
      });
      if (!exited) child.kill('SIGKILL');
      process.removeListener('exit', onExit);
      // Only remove the data dir when no sandbox (with its mounts) can be left in it.
      if (allGone) await rm(dataDir, { recursive: true, force: true }).catch(() => {});
      else console.error(`left ${dataDir} in place: some sandboxes could not be killed`);
      return { killed };
    })();
    return stopped;
  };
  return { url, apiKey, dataDir, log: () => log, stop };
}

/**
 * Create the project `name` on `server` (from {@link startServer}) with its admin key and return the
 * project's API key. `fields` are more of the project's settings, e.g. `{ allow_egress: true }`.
 * @param {{ url: string, apiKey: string }} server
 * @param {string} name
 * @param {Record<string, unknown>} [fields]
 * @returns {Promise<string>}
 */
export async function createProject(server, name, fields = {}) {
  const res = await fetch(`${server.url}/v1/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, ...fields }),
  });
  assert.ok(res.ok, await res.clone().text());
  return (await res.json()).api_key;
}

/** A non-loopback IPv4 address of this host (the source address of a route outside). */
export async function hostIpv4() {
  const sock = dgram.createSocket('udp4');
  await new Promise((resolve, reject) => sock.connect(9, '192.0.2.200', (e) => (e ? reject(e) : resolve())));
  const { address } = sock.address();
  sock.close();
  return address;
}

/**
 * A TCP server on this host's address that greets every connection with `hi` and closes it.
 * @returns {Promise<{ ip: string, port: number, close: () => void }>}
 */
export async function greeter() {
  const ip = await hostIpv4();
  const srv = net.createServer((c) => {
    c.on('error', () => {});
    c.end('hi\n');
  });
  await new Promise((resolve) => srv.listen(0, ip, resolve));
  return { ip, port: srv.address().port, close: () => srv.close() };
}
