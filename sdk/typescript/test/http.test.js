// The SDK's HTTP layer alone, against a local server that sends a streamed body's first line and
// then never finishes (what a cell stuck in a sandbox looks like to the client): a client deadline
// must end the body read, also when garbage collections run while it waits (Node 20 drops
// `AbortSignal.timeout`'s and undici's weak links then; see `deadlineSignal` in src/http.ts), through
// both transports.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import v8 from 'node:v8';
import vm from 'node:vm';
import { HttpClient } from '../dist/http.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

let srv;
let url;

before(async () => {
  srv = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.write('{"type":"start"}\n');
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${srv.address().port}`;
});

after(() => {
  srv.closeAllConnections();
  srv.close();
});

for (const [transport, extra] of [['node:http', {}], ['fetch', { fetch: globalThis.fetch }]])
for (const withCallerSignal of [false, true]) {
  test(`a deadline ends a stalled streamed body through garbage collections (${transport}, caller signal: ${withCallerSignal})`, async () => {
    const client = new HttpClient({ apiUrl: url, apiKey: 'k', requestTimeoutMs: 60_000, ...extra });
    const caller = new AbortController();
    // Long enough that the headers come first on a loaded machine (a 300 ms budget was once
    // spent before them, under two test suites at once), short enough for a quick test.
    const { res } = await client.send('POST', '/stall', {
      body: {},
      timeoutMs: 2_000,
      ...(withCallerSignal ? { signal: caller.signal } : {}),
    });
    const collect = setInterval(gc, 20);
    // A generous guard so that a lost deadline fails the test instead of hanging it.
    const guard = new Promise((_, reject) => setTimeout(() => reject(new Error('the deadline never fired')), 20_000).unref());
    try {
      const read = (async () => {
        for await (const _chunk of res.stream()) {
          /* the first line, then nothing */
        }
      })();
      const err = await Promise.race([read.then(() => new Error('the body ended')), guard]).catch((e) => e);
      assert.equal(err?.name, 'TimeoutError', String(err));
      assert.ok(!caller.signal.aborted);
    } finally {
      clearInterval(collect);
    }
  });
}
