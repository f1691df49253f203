// The SDK's own HTTP/1.1 (src/http1.ts) against a raw TCP server that answers byte for byte as
// each test scripts it: every framing (content-length, chunked with extensions and trailers, the
// connection's end, none), answers split at every byte, interim answers, keep-alive and what
// ends it (`connection: close`, bytes beyond an answer, a server closing an idle connection),
// malformed answers as typed errors, and headers that would split a request refused before
// anything is sent. (transports.test.js runs the behaviour all transports share.)

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { HttpClient, ndjsonFrames } from '../dist/http.js';
import { ConnectionError } from '../dist/index.js';

let srv;
let url;
/** What the next connection's requests get: a function (request head, socket, n) per request. */
let script;
/** Requests seen, as [connection number, request line]. */
const seen = [];
let conns = 0;

before(async () => {
  srv = net.createServer((sock) => {
    const id = ++conns;
    let buf = '';
    let n = 0;
    sock.on('error', () => {});
    sock.on('data', (d) => {
      buf += d.toString('latin1');
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.slice(0, end);
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        const body = buf.slice(end + 4, end + 4 + length);
        buf = buf.slice(end + 4 + length);
        seen.push([id, head.split('\r\n')[0]]);
        script(head, sock, n++, body);
      }
    });
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${srv.address().port}`;
});

after(() => srv.close());

const client = () => new HttpClient({ apiUrl: url, apiKey: 'k', requestTimeoutMs: 10_000 });

/** Write `text` one byte per write, each after the last was flushed. */
async function bytewise(sock, text) {
  for (const b of Buffer.from(text, 'latin1')) {
    await new Promise((resolve) => sock.write(Buffer.from([b]), resolve));
  }
}

test('every framing, split at every byte, arrives whole; keep-alive holds across them', async () => {
  const answers = [
    ['HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world', 'hello world'],
    [
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n',
      'hello world',
    ],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n', '0123456789'],
    ['HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok', 'ok'],
    ['HTTP/1.1 204 No Content\r\n\r\n', ''],
    ['HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n', ''],
  ];
  const first = conns + 1;
  for (const [answer, want] of answers) {
    script = (_head, sock) => bytewise(sock, answer);
    const { res } = await client().send('GET', '/x');
    assert.equal(await res.text(), want, answer);
  }
  // One connection for all of them.
  assert.equal(conns, first);
});

test('headers: any case, repeated ones joined; the status as sent', async () => {
  script = (_head, sock) =>
    sock.write('HTTP/1.1 201 Created\r\nX-One: a\r\nx-one: b\r\nContent-Type: text/plain\r\ncontent-length: 0\r\n\r\n');
  const { res } = await client().send('POST', '/x', { body: { a: 1 } });
  assert.equal(res.status, 201);
  assert.equal(res.header('x-one'), 'a, b');
  assert.equal(res.header('CONTENT-TYPE'), 'text/plain');
  assert.equal(res.header('missing'), null);
});

test('the request: one head with host, the headers, content-length, then the body', async () => {
  let got;
  script = (head, sock, _n, body) => {
    got = { head, body };
    sock.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
  };
  await client().send('POST', '/v1/x?q=1', { body: { é: 1 } });
  const lines = got.head.split('\r\n');
  assert.equal(lines[0], 'POST /v1/x?q=1 HTTP/1.1');
  assert.ok(lines.includes(`host: ${new URL(url).host}`), got.head);
  assert.ok(lines.includes('authorization: Bearer k'), got.head);
  assert.ok(lines.includes('content-type: application/json'), got.head);
  assert.ok(lines.includes(`content-length: ${Buffer.byteLength('{"é":1}')}`), got.head);
  assert.equal(Buffer.from(got.body, 'latin1').toString('utf8'), '{"é":1}');
  await client().send('DELETE', '/x');
  assert.ok(!/content-length/i.test(got.head), 'a DELETE without a body has no content-length');
});

test('a body framed by the connection ends with it; that connection is not kept', async () => {
  script = (_head, sock) => sock.end('HTTP/1.1 200 OK\r\n\r\nuntil the end');
  assert.equal(await (await client().send('GET', '/x')).res.text(), 'until the end');
  const before = conns;
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
  assert.equal(await (await client().send('GET', '/x')).res.text(), 'ok');
  assert.equal(conns, before + 1);
});

test('connection: close, or bytes beyond an answer, end keep-alive', async () => {
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\na');
  await (await client().send('GET', '/x')).res.text();
  const before = conns;
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nbEXTRA');
  assert.equal(await (await client().send('GET', '/x')).res.text(), 'b');
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nc');
  assert.equal(await (await client().send('GET', '/x')).res.text(), 'c');
  assert.equal(conns, before + 2);
});

test('an idle connection the server closed is not used again', async () => {
  script = (_head, sock) => {
    sock.write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na');
    setTimeout(() => sock.end(), 20);
  };
  const c = client();
  await (await c.send('GET', '/x')).res.text();
  await new Promise((r) => setTimeout(r, 200));
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb');
  assert.equal(await (await c.send('GET', '/x')).res.text(), 'b');
});

test('malformed answers and broken bodies are ConnectionErrors; the next request is unharmed', async () => {
  const bad = [
    'SSH-2.0-OpenSSH\r\n\r\n',
    'HTTP/1.1 200 OK\r\nno colon here\r\n\r\n',
    'HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n',
    'HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n',
    `HTTP/1.1 200 OK\r\nx: ${'a'.repeat(70 * 1024)}`,
  ];
  for (const answer of bad) {
    script = (_head, sock) => sock.write(answer);
    await assert.rejects(client().json('GET', '/x'), (e) => {
      assert.ok(e instanceof ConnectionError, `${answer.slice(0, 40)}: ${e}`);
      return true;
    });
  }
  const broken = [
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY',
    'HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc',
  ];
  for (const answer of broken) {
    script = (_head, sock) => sock.end(answer);
    await assert.rejects(client().json('GET', '/x'), (e) => {
      assert.ok(e instanceof ConnectionError, `${answer.slice(0, 40)}: ${e}`);
      return true;
    });
  }
  script = (_head, sock) => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}');
  assert.deepEqual(await client().json('GET', '/x'), {});
});

test('a header that would split the request is refused before anything is sent', async () => {
  const evil = new HttpClient({ apiUrl: url, apiKey: 'k\r\nx-injected: 1', requestTimeoutMs: 5_000 });
  const before = seen.length;
  await assert.rejects(evil.json('GET', '/x'), (e) => {
    assert.ok(e instanceof ConnectionError, String(e));
    assert.match(e.message, /invalid header "authorization"/);
    return true;
  });
  assert.equal(seen.length, before);
});

test('a streamed body larger than the high-water mark arrives whole and in order', async () => {
  const lines = Array.from({ length: 40_000 }, (_, i) => JSON.stringify({ n: i, pad: 'x'.repeat(64) }) + '\n');
  script = (_head, sock) => {
    sock.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: application/x-ndjson\r\n\r\n');
    for (let i = 0; i < lines.length; i += 1000) {
      const part = lines.slice(i, i + 1000).join('');
      sock.write(`${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`);
    }
    sock.write('0\r\n\r\n');
  };
  const { res } = await client().send('GET', '/x', { timeoutMs: null });
  let next = 0;
  for await (const f of ndjsonFrames(res)) {
    assert.equal(f.n, next++);
    // (a slow reader: the socket is paused meanwhile)
    if (next % 5000 === 0) await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(next, lines.length);
});

test('a UTF-8 character split across chunks, and a byte order mark at the start, decode as fetch does', async () => {
  const frame = Buffer.from('\ufeff{"t":"é€😀"}\n{"t":"ü"}\n', 'utf8');
  script = async (_head, sock) => {
    sock.write(`HTTP/1.1 200 OK\r\ncontent-length: ${frame.length}\r\n\r\n`);
    for (const b of frame) await new Promise((resolve) => sock.write(Buffer.from([b]), resolve));
  };
  const read = async () => {
    const { res } = await client().send('GET', '/x', { timeoutMs: null });
    const got = [];
    for await (const f of ndjsonFrames(res)) got.push(f.t);
    return got;
  };
  assert.deepEqual(await read(), ['é€😀', 'ü']);
  // The same body in one chunk (the path without a decoder of its own).
  script = (_head, sock) => sock.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${frame.length}\r\n\r\n`), frame]));
  assert.deepEqual(await read(), ['é€😀', 'ü']);
});
