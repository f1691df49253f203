// The SDK's transports (src/http1.ts: its own HTTP/1.1 over `net`, Node's default; src/http.ts:
// `node:http`, asked for with LIZARD_SDK_TRANSPORT=node:http and taking the default's https and
// streamed uploads, and `fetch`, the fallback elsewhere or given as the `fetch` option) behave
// alike: against a local server that streams, stalls, breaks connections and echoes uploads
// (incremental delivery, aborts and early stops that close the connection, a last frame that
// ends the read before the response ends, deadlines, typed errors, uploads and downloads of every
// body kind, keep-alive), then against a real `lizard serve` through the public API (streamed
// cells, abort, deadline, large files, a killed command's stream, no sockets left behind).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import diagnostics_channel from 'node:diagnostics_channel';
import http from 'node:http';
import net from 'node:net';
import { promisify } from 'node:util';
import { startServer, SDK_DIR } from './helpers/server.js';
import { HttpClient, ndjsonFrames } from '../dist/http.js';
import { CodeSandbox, ConnectionError, NotFoundError, TimeoutError } from '../dist/index.js';

// [name, connection options, LIZARD_SDK_TRANSPORT while the client is made]
const TRANSPORTS = [
  ['http/1.1 over net (default)', {}, ''],
  ['node:http', {}, 'node:http'],
  ['fetch', { fetch: (...a) => globalThis.fetch(...a) }, ''],
];

/** `make()` with LIZARD_SDK_TRANSPORT set to `env` (the transport is chosen when a client is made). */
async function withTransport(env, make) {
  const had = process.env.LIZARD_SDK_TRANSPORT;
  process.env.LIZARD_SDK_TRANSPORT = env;
  try {
    return await make();
  } finally {
    if (had === undefined) delete process.env.LIZARD_SDK_TRANSPORT;
    else process.env.LIZARD_SDK_TRANSPORT = had;
  }
}
const BIG = 16 * 1024 * 1024;

let srv;
let url;
/** Server-side sockets opened so far, and those closed. */
const conns = { opened: 0, closed: 0 };
/** Per path: resolves when the server's side of that request's connection closed. */
const closed = new Map();
let downloadBytes;
/** Per path: ends the held response of `/last` (the test says when). */
const holds = new Map();

function onClose(req) {
  let done;
  closed.set(req.url, new Promise((r) => (done = r)));
  req.socket.once('close', () => done());
}

before(async () => {
  downloadBytes = new Uint8Array(BIG);
  for (let i = 0; i < BIG; i += 4096) downloadBytes[i] = i % 251;
  srv = http.createServer(async (req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (path === '/two-lines') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write('{"n":1}\n');
      setTimeout(() => res.end('{"n":2}\n'), 400);
    } else if (path === '/stall') {
      onClose(req);
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write('{"n":1}\n');
    } else if (path === '/last') {
      // A stream's last frame, then the response held open until the test ends it.
      onClose(req);
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write('{"n":1}\n{"type":"end"}\n');
      holds.set(req.url, () => new Promise((resolve) => res.end(resolve)));
    } else if (path === '/no-headers') {
      onClose(req);
    } else if (path === '/broken') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"partial":');
      setTimeout(() => req.socket.destroy(), 50);
    } else if (path === '/missing') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ code: 'not_found', message: 'no such thing' }));
    } else if (path === '/echo') {
      const hash = createHash('sha256');
      let size = 0;
      for await (const c of req) {
        hash.update(c);
        size += c.length;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        size,
        sha: hash.digest('hex'),
        length: req.headers['content-length'] ?? null,
        chunked: req.headers['transfer-encoding'] === 'chunked',
        type: req.headers['content-type'],
      }));
    } else if (path === '/download') {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(BIG) });
      res.end(downloadBytes);
    } else if (path === '/empty') {
      res.writeHead(204);
      res.end();
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    }
  });
  srv.on('connection', (s) => {
    conns.opened++;
    s.once('close', () => conns.closed++);
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${srv.address().port}`;
});

after(() => {
  srv.closeAllConnections();
  srv.close();
});

const sha = (bytes) => createHash('sha256').update(bytes).digest('hex');
const within = (p, ms, what) =>
  Promise.race([p, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms).unref())]);

for (const [name, extra, env] of TRANSPORTS) {
  describe(`transport ${name}, local server`, () => {
    const client = () => {
      const had = process.env.LIZARD_SDK_TRANSPORT;
      process.env.LIZARD_SDK_TRANSPORT = env;
      try {
        return new HttpClient({ apiUrl: url, apiKey: 'k', requestTimeoutMs: 10_000, ...extra });
      } finally {
        if (had === undefined) delete process.env.LIZARD_SDK_TRANSPORT;
        else process.env.LIZARD_SDK_TRANSPORT = had;
      }
    };

    test('a streamed body arrives frame by frame, before it ends', async () => {
      const { res } = await client().send('GET', '/two-lines', { timeoutMs: null });
      const t0 = performance.now();
      const at = [];
      for await (const f of ndjsonFrames(res)) at.push([f.n, performance.now() - t0]);
      assert.deepEqual(at.map(([n]) => n), [1, 2]);
      assert.ok(at[1][1] - at[0][1] >= 250, JSON.stringify(at));
    });

    test("a caller's abort mid-stream ends the read with its reason and closes the connection", async () => {
      const ctrl = new AbortController();
      const { res, signal } = await client().sendStream('GET', '/stall?abort', { signal: ctrl.signal, timeoutMs: null });
      const frames = ndjsonFrames(res, signal);
      assert.equal((await frames.next()).value.n, 1);
      setTimeout(() => ctrl.abort(), 20);
      await assert.rejects(frames.next(), (e) => e === ctrl.signal.reason);
      await within(closed.get('/stall?abort'), 5_000, 'the connection closed');
    });

    test('an abort of a stream read without the signal (commands) ends it too', async () => {
      const ctrl = new AbortController();
      const { res } = await client().send('GET', '/stall?plain', { signal: ctrl.signal, timeoutMs: null });
      const frames = ndjsonFrames(res);
      assert.equal((await frames.next()).value.n, 1);
      setTimeout(() => ctrl.abort(), 20);
      await assert.rejects(frames.next(), (e) => e === ctrl.signal.reason);
      await within(closed.get('/stall?plain'), 5_000, 'the connection closed');
    });

    test('a reader that stops early closes the connection', async () => {
      const { res } = await client().send('GET', '/stall?early', { timeoutMs: null });
      for await (const f of ndjsonFrames(res)) if (f.n === 1) break;
      await within(closed.get('/stall?early'), 5_000, 'the connection closed');
    });

    test('frames read up to a last one end there, before the response does; its connection is kept', async () => {
      const { res, signal } = await client().sendStream('GET', `/last?${encodeURIComponent(name)}`, { timeoutMs: null });
      const got = [];
      const read = (async () => {
        for await (const f of ndjsonFrames(res, signal, (f) => f.type === 'end')) got.push(f);
      })();
      // (the server ends the response only once told to)
      await within(read, 5_000, 'the frames ended');
      assert.deepEqual(got, [{ n: 1 }, { type: 'end' }]);
      await holds.get(`/last?${encodeURIComponent(name)}`)();
      // The rest of the body is read in the background: the connection is not closed.
      const open = await Promise.race([
        closed.get(`/last?${encodeURIComponent(name)}`).then(() => false),
        new Promise((r) => setTimeout(() => r(true), 300)),
      ]);
      assert.ok(open, 'the connection was closed');
    });

    test('a deadline before the headers: TimeoutError, the connection closed; an abort: its reason', async () => {
      await assert.rejects(client().json('GET', '/no-headers?t', undefined, { timeoutMs: 200 }), (e) => {
        assert.ok(e instanceof TimeoutError, String(e));
        assert.equal(e.message, `GET ${url}/no-headers?t took longer than 200 ms`);
        return true;
      });
      await within(closed.get('/no-headers?t'), 5_000, 'the connection closed');
      const ctrl = new AbortController();
      setTimeout(() => ctrl.abort(), 50);
      await assert.rejects(client().json('GET', '/no-headers?a', undefined, { signal: ctrl.signal }), (e) => e === ctrl.signal.reason);
      const done = new AbortController();
      done.abort();
      await assert.rejects(client().json('GET', '/', undefined, { signal: done.signal }), (e) => e === done.signal.reason);
    });

    test('typed errors: an error status, a connection broken mid-body, no server', async () => {
      await assert.rejects(client().json('GET', '/missing'), (e) => {
        assert.ok(e instanceof NotFoundError, String(e));
        assert.equal(e.message, 'no such thing');
        return true;
      });
      await assert.rejects(client().json('GET', '/broken'), (e) => {
        assert.ok(e instanceof ConnectionError, String(e));
        assert.match(e.message, /^cannot reach the Lizard server at .*\/broken: /);
        return true;
      });
      // (a port nothing listens on, and that `fetch` does not refuse to try)
      const probe = net.createServer();
      await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
      const port = probe.address().port;
      await new Promise((resolve) => probe.close(resolve));
      const gone = await withTransport(
        env,
        () => new HttpClient({ apiUrl: `http://127.0.0.1:${port}`, apiKey: 'k', requestTimeoutMs: 5_000, ...extra }),
      );
      await assert.rejects(gone.json('GET', '/'), (e) => {
        assert.ok(e instanceof ConnectionError, String(e));
        assert.equal(e.message, `cannot reach the Lizard server at http://127.0.0.1:${port}/: ECONNREFUSED`);
        return true;
      });
      assert.equal(await client().json('DELETE', '/empty'), undefined);
    });

    test('uploads: a string, bytes, an ArrayBuffer, a Blob and a stream arrive whole', async () => {
      const big = new Uint8Array(BIG).map((_, i) => i % 253);
      const cases = [
        ['string', 'héllo', Buffer.from('héllo'), false],
        ['bytes', big, big, false],
        ['ArrayBuffer', big.buffer, big, false],
        ['Blob', new Blob([big]), big, false],
        [
          'stream',
          new ReadableStream({
            start(c) {
              for (let i = 0; i < BIG; i += 1 << 20) c.enqueue(big.subarray(i, i + (1 << 20)));
              c.close();
            },
          }),
          big,
          true,
        ],
      ];
      for (const [what, body, bytes, chunked] of cases) {
        const { res } = await client().send('PUT', '/echo', { rawBody: body, timeoutMs: chunked ? null : 30_000 });
        const got = await res.json();
        assert.equal(got.size, bytes.length, what);
        assert.equal(got.sha, sha(bytes), what);
        assert.equal(got.chunked, chunked, what);
        assert.equal(got.length, chunked ? null : String(bytes.length), what);
        assert.equal(got.type, 'application/octet-stream', what);
      }
      const { res } = await client().send('POST', '/echo', { body: { a: 'é' } });
      assert.deepEqual(await res.json(), {
        size: 10,
        sha: sha('{"a":"é"}'),
        length: '10',
        chunked: false,
        type: 'application/json',
      });
    });

    test('downloads: bytes (a Uint8Array), a web stream, text', async () => {
      const bytes = await (await client().send('GET', '/download')).res.bytes();
      assert.equal(Object.getPrototypeOf(bytes), Uint8Array.prototype);
      assert.equal(sha(bytes), sha(downloadBytes));
      const stream = (await client().send('GET', '/download', { timeoutMs: null })).res.stream();
      assert.ok(stream instanceof ReadableStream);
      const hash = createHash('sha256');
      for await (const c of stream) hash.update(c);
      assert.equal(hash.digest('hex'), sha(downloadBytes));
      assert.equal(await (await client().send('GET', '/')).res.text(), '{"ok":true}');
    });

    test('requests in a row share one kept-alive connection', async () => {
      const c = client();
      await c.json('GET', '/');
      const before = conns.opened;
      for (let i = 0; i < 5; i++) await c.json('GET', '/');
      assert.equal(conns.opened, before);
    });
  });
}

test("LIZARD_SDK_TRANSPORT: the SDK's own HTTP/1.1 by default, node:http or fetch when asked", async () => {
  // Which of Node's clients a request (and, with `upload`, a streamed upload after it) went through.
  const program = `
    import dc from 'node:diagnostics_channel';
    const seen = new Set();
    dc.subscribe('net.client.socket', () => seen.add('net'));
    dc.subscribe('http.client.request.start', () => seen.add('node:http'));
    dc.subscribe('undici:request:create', () => seen.add('fetch'));
    const { HttpClient } = await import('./dist/http.js');
    const client = new HttpClient({ apiUrl: '${url}', apiKey: 'k', requestTimeoutMs: 5000 });
    await client.json('GET', '/');
    if (process.argv[1] === 'upload') {
      const stream = new ReadableStream({ start(c) { c.enqueue(new Uint8Array([1])); c.close(); } });
      await (await client.send('PUT', '/echo', { rawBody: stream, timeoutMs: null })).res.text();
    }
    console.log([...seen].sort().join());`;
  for (const [env, upload, want] of [
    [undefined, '', 'net'],
    [undefined, 'upload', 'net,node:http'],
    ['node:http', '', 'net,node:http'],
    ['fetch', 'upload', 'fetch,net'],
  ]) {
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', program, upload], {
      cwd: SDK_DIR,
      env: { ...process.env, LIZARD_SDK_TRANSPORT: env ?? '' },
    });
    assert.equal(stdout.trim(), want, `LIZARD_SDK_TRANSPORT=${env} ${upload}`);
  }
});

describe('every transport against lizard serve', () => {
  let server;
  let sandbox;
  before(async () => {
    server = await startServer(['--criu', 'none']);
    sandbox = await CodeSandbox.create({ project: 'transports' });
  });
  after(async () => {
    await sandbox?.kill();
    await server?.stop();
  });

  /** Open TCP sockets of this process. */
  const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;

  for (const [name, extra, env] of TRANSPORTS) {
    test(`${name}: streamed output, abort, deadline, files, a killed command; no socket left behind`, async () => {
      const sb = await withTransport(env, () => CodeSandbox.connect(sandbox.sandboxId, extra));
      // Output arrives while the cell runs.
      const t0 = Date.now();
      let firstAt;
      const ex = await sb.runCode('import time\nprint("a", flush=True)\ntime.sleep(1.5)\n2', {
        onStdout: () => (firstAt ??= Date.now() - t0),
      });
      assert.equal(ex.text, '2');
      assert.ok(Date.now() - t0 - firstAt >= 1000, `stdout at ${firstAt} ms`);

      const idle = sockets();
      for (let i = 0; i < 3; i++) {
        const ac = new AbortController();
        await assert.rejects(
          sb.runCode('import time\nprint("go", flush=True)\ntime.sleep(30)', { signal: ac.signal, onStdout: () => ac.abort() }),
          (e) => e.name === 'AbortError',
        );
        await assert.rejects(sb.runCode('import time\ntime.sleep(30)', { requestTimeoutMs: 300 }), (e) => e instanceof TimeoutError);
      }
      // The aborted streams' sockets are closed (a kept-alive one or two may stay).
      await new Promise((r) => setTimeout(r, 200));
      assert.ok(sockets() <= idle + 1, `${sockets()} sockets open, ${idle} before`);
      assert.equal((await sb.runCode('print("after")')).stdout, 'after\n');

      // Large files both ways, streamed and whole.
      const big = new Uint8Array(8 * 1024 * 1024).map((_, i) => (i * 7) % 256);
      await sb.files.write('big.bin', new Blob([big]).stream());
      assert.equal(sha(await sb.files.read('big.bin', { format: 'bytes' })), sha(big));
      const hash = createHash('sha256');
      for await (const c of await sb.files.read('big.bin', { format: 'stream' })) hash.update(c);
      assert.equal(hash.digest('hex'), sha(big));
      await sb.files.write('t.txt', 'héllo');
      assert.equal(await sb.files.read('t.txt'), 'héllo');

      // A background command killed while its stream is open.
      const h = await sb.commands.run('sleep 30', { background: true });
      setTimeout(() => sb.commands.kill(h.pid), 200);
      await assert.rejects(h.wait(), (e) => e.result?.signal === 'SIGKILL');
      await assert.rejects(withTransport(env, () => CodeSandbox.connect('no-such-sandbox', extra)), NotFoundError);
    });
  }
});
