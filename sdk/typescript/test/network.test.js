// Egress rules through the SDK against a real `lizard serve` (nothing here reaches the internet):
// `egress` in its rule form at create and in `getInfo().network`, `setNetwork` changing the rules
// of a running sandbox live (a server on this host becomes reachable, then unreachable again),
// the server's refusals (409 for a sandbox created without egress, 400 naming a bad entry, 403 for
// a project key of a project without `allow_egress`), and `networkLog()` listing a refused
// connection with its reason.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createProject, greeter, startServer } from './helpers/server.js';
import { AuthenticationError, CodeSandbox, ConflictError, InvalidArgumentError } from '../dist/index.js';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

const projectKey = (name, allowEgress) => createProject(server, name, { allow_egress: allowEgress });

/**
 * Python that sends an HTTP request to ip:port and prints what came back: `ok` (the test server's
 * greeting), `403` (the egress relay's refusal, which says why), `no` (closed or failed), and how
 * long it took. Redirected connections are accepted by the host's relay, which decides once it
 * has read the first bytes (the Host header here), so a bare `connect()` would succeed either way.
 */
const probe = (ip, port) =>
  [
    'import socket, time',
    't = time.monotonic()',
    'try:',
    `    s = socket.create_connection(('${ip}', ${port}), timeout=5)`,
    `    s.sendall(b'GET / HTTP/1.0\\r\\nHost: ${ip}\\r\\n\\r\\n')`,
    "    data = b''",
    '    while True:',
    '        b = s.recv(4096)',
    '        if not b: break',
    '        data += b',
    "    r = 'ok' if data.startswith(b'hi') else '403' if b' 403 ' in data.split(b'\\n')[0] else 'no'",
    "except OSError: r = 'no'",
    'print(r, round(time.monotonic() - t, 2))',
  ].join('\n');

async function reach(sb, ip, port) {
  const ex = await sb.runCode(probe(ip, port));
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  const [r, secs] = ex.stdout.trim().split(' ');
  return { r, secs: Number(secs) };
}

describe('network', { concurrency: true }, () => {
  test('egress rules at create, in getInfo, and changed live with setNetwork', async () => {
    const key = await projectKey('ts-net', true);
    const srv = await greeter();
    const { ip, port } = srv;
    const sb = await CodeSandbox.create({ apiKey: key, egress: { allow: [] } });
    try {
      assert.deepEqual(sb._info.network, { egress: { allow: [] } });
      assert.equal((await reach(sb, ip, port)).r, '403');

      // Opened live: the next connection is allowed (an address rule opens a host address).
      let info = await sb.setNetwork({ egress: [`${ip}:${port}`] });
      assert.deepEqual(info.network, { egress: { allow: [`${ip}:${port}`] } });
      assert.deepEqual((await sb.getInfo()).network, { egress: { allow: [`${ip}:${port}`] } });
      assert.equal((await reach(sb, ip, port)).r, 'ok');

      // Deny beats allow.
      info = await sb.setNetwork({ egress: { allow: [`${ip}/32`], deny: [`${ip}:${port}`] } });
      assert.deepEqual(info.network, { egress: { allow: [`${ip}/32`], deny: [`${ip}:${port}`] } });
      assert.equal((await reach(sb, ip, port)).r, '403');

      // Only deny: everything public but what it names — a host address is not public.
      info = await sb.setNetwork({ egress: { deny: ['evil.example.com'] } });
      assert.deepEqual(info.network, { egress: { deny: ['evil.example.com'] } });
      assert.equal((await reach(sb, ip, port)).r, '403');

      // 'none' is kept as { allow: [] } (the sandbox keeps its egress, closed).
      info = await sb.setNetwork({ egress: 'none' });
      assert.deepEqual(info.network, { egress: { allow: [] } });
      info = await sb.setNetwork({ egress: 'all' });
      assert.deepEqual(info.network, { egress: 'all' });
      assert.equal((await reach(sb, ip, port)).r, '403', "'all' is the internet, not this host");

      // The client checks the shape before any request.
      await assert.rejects(sb.setNetwork({ egress: 'some' }), InvalidArgumentError);
      await assert.rejects(sb.setNetwork({ egress: { allow: 'x.com' } }), InvalidArgumentError);
      await assert.rejects(sb.setNetwork({ egress: { alow: [] } }), InvalidArgumentError);
      await assert.rejects(sb.setNetwork({}), InvalidArgumentError);
    } finally {
      await sb.kill();
      srv.close();
    }
  });

  test('the server refuses: 409 without egress, 400 naming a bad entry, 403 without allow_egress', async () => {
    const closed = await CodeSandbox.create({ project: 'ts-net-admin' });
    const open = await CodeSandbox.create({ project: 'ts-net-admin', egress: ['example.com'] });
    const made = [closed, open];
    try {
      assert.deepEqual(closed._info.network, { egress: 'none' });
      await assert.rejects(closed.setNetwork({ egress: { allow: ['example.com'] } }), (e) => {
        assert.ok(e instanceof ConflictError, `${e}`);
        assert.equal(e.status, 409);
        return true;
      });
      await assert.rejects(open.setNetwork({ egress: { allow: ['a b.com'] } }), (e) => {
        assert.ok(e instanceof InvalidArgumentError, `${e}`);
        assert.equal(e.status, 400);
        assert.match(e.message, /a b\.com/);
        return true;
      });
      await assert.rejects(open.setNetwork({ egress: { deny: ['10.0.0.0/99'] } }), (e) => {
        assert.equal(e.status, 400);
        assert.match(e.message, /10\.0\.0\.0\/99/);
        return true;
      });
      await assert.rejects(CodeSandbox.create({ project: 'ts-net-admin', egress: { allow: ['example.com:0'] } }), (e) => {
        assert.ok(e instanceof InvalidArgumentError, `${e}`);
        assert.match(e.message, /example\.com:0/);
        return true;
      });
      // The failed calls changed nothing.
      assert.deepEqual((await open.getInfo()).network, { egress: { allow: ['example.com'] } });

      // A project key of a project without allow_egress: no opening rules, closing is fine.
      const key = await projectKey('ts-net-closed', false);
      const sb = await CodeSandbox.create({ project: 'ts-net-closed', egress: { allow: [] } });
      made.push(sb);
      const mine = await CodeSandbox.connect(sb.sandboxId, { apiKey: key });
      for (const egress of ['all', ['example.com'], { deny: ['example.com'] }]) {
        await assert.rejects(mine.setNetwork({ egress }), (e) => {
          assert.ok(e instanceof AuthenticationError, `${e}`);
          assert.equal(e.status, 403);
          assert.equal(e.code, 'permission_denied');
          return true;
        });
      }
      assert.deepEqual((await mine.setNetwork({ egress: 'none' })).network, { egress: { allow: [] } });
    } finally {
      for (const s of made) await s.kill();
    }
  });

  test('a refused connection is refused at once and shows up in networkLog', async () => {
    const sb = await CodeSandbox.create({ project: 'ts-net-admin', egress: { allow: ['example.com'] } });
    try {
      const before = await sb.networkLog();
      assert.equal(before.sandboxId, sb.sandboxId);
      assert.deepEqual(before.egress, { connections: 0, bytesOut: 0, bytesIn: 0, refused: 0 });
      assert.equal(typeof before.mirror.requests, 'number');

      const { r, secs } = await reach(sb, '203.0.113.9', 80);
      assert.equal(r, '403');
      assert.ok(secs < 2, `refused after ${secs} s, not at once`);

      const log = await sb.networkLog();
      assert.ok(log.egress.refused >= 1, JSON.stringify(log));
      assert.equal(log.egress.connections, 0, JSON.stringify(log));
      const hit = log.refused.find((x) => x.destination.includes('203.0.113.9'));
      assert.ok(hit, JSON.stringify(log.refused));
      assert.equal(hit.method, 'connect');
      assert.ok(hit.at instanceof Date && !Number.isNaN(hit.at.getTime()));
      assert.ok(typeof hit.reason === 'string' && hit.reason.length > 0, JSON.stringify(hit));
    } finally {
      await sb.kill();
    }
  });
});

describe('public ports and auto-resume', () => {
  test('publicPorts opens a port by host name without a token; autoResume resumes on a request; both change live', async () => {
    const sb = await CodeSandbox.create({ project: 'my-project', publicPorts: true, autoResume: true });
    try {
      const { network } = await sb.getInfo();
      assert.deepEqual({ publicPorts: network.publicPorts, autoResume: network.autoResume }, { publicPorts: true, autoResume: true });
      await sb.runCode(
        "import http.server, threading\n" +
          "srv = http.server.ThreadingHTTPServer(('127.0.0.1', 8000), http.server.SimpleHTTPRequestHandler)\n" +
          "threading.Thread(target=srv.serve_forever, daemon=True).start()",
      );
      const host = `8000-${sb.sandboxId}.localhost:${new URL(server.url).port}`;
      const viaHost = async () => {
        const { request } = await import('node:http');
        const u = new URL(server.url);
        return new Promise((ok, fail) => {
          const r = request({ host: u.hostname, port: u.port, path: '/', headers: { host } }, (res) => {
            res.resume();
            res.on('end', () => ok(res.statusCode));
          });
          r.on('error', fail);
          r.end();
        });
      };
      assert.equal(await viaHost(), 200);
      // Paused, then a request: it resumes (its Python state kept).
      await sb.pause();
      assert.equal((await sb.runCode('srv.server_address[1]')).text, '8000');
      assert.equal((await sb.getInfo()).state, 'running');
      // Both off, live: the port wants a token again, and a paused sandbox stays paused.
      const info = await sb.setNetwork({ publicPorts: false, autoResume: false });
      assert.equal(info.network.publicPorts, undefined);
      assert.equal(info.network.autoResume, undefined);
      assert.equal(await viaHost(), 401);
      await sb.pause();
      await assert.rejects(sb.runCode('1'), ConflictError);
      await assert.rejects(CodeSandbox.create({ project: 'my-project', autoResume: 'yes' }), InvalidArgumentError);
    } finally {
      await sb.kill();
    }
  });
});
