// The warm round trip (`runCode('1+1')` on a warm sandbox) through the SDK's two transports and
// the same request bare, against a running `lizard serve` (LIZARD_API_URL / LIZARD_API_KEY, an
// admin key or a key of project `bench`). Usage:
//   node scripts/bench-round-trip.mjs [samples=500] [sdk entry=../dist/index.js]
// Prints the median and p95 (ms) of each; the variants take turns in rounds of 50, so that a
// change of load on the machine weighs on all of them alike.

import http from 'node:http';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const samples = Number(process.argv[2] ?? 500);
const entry = process.argv[3] ? pathToFileURL(resolve(process.argv[3])).href : new URL('../dist/index.js', import.meta.url).href;
const { CodeSandbox } = await import(entry);

const sandbox = await CodeSandbox.create({ project: 'bench' });
try {
  // The same sandbox through a client that was given a `fetch`: the SDK's fetch transport.
  const viaFetch = await CodeSandbox.connect(sandbox.sandboxId, { fetch: (...a) => globalThis.fetch(...a) });
  const url = `${process.env.LIZARD_API_URL.replace(/\/+$/, '')}/v1/sandboxes/${sandbox.sandboxId}/execute`;
  const headers = {
    authorization: `Bearer ${process.env.LIZARD_API_KEY}`,
    accept: 'application/x-ndjson',
    'content-type': 'application/json',
  };
  const body = JSON.stringify({ code: '1+1' });
  const agent = new http.Agent({ keepAlive: true });
  const check = (text) => {
    if (!text.includes('"result"')) throw new Error(`no result in ${text}`);
  };
  const variants = {
    'SDK, node:http (default)': async () => {
      const r = await sandbox.runCode('1+1');
      if (r.text !== '2') throw new Error(`1+1 gave ${r.text}`);
    },
    'SDK, fetch': async () => {
      const r = await viaFetch.runCode('1+1');
      if (r.text !== '2') throw new Error(`1+1 gave ${r.text}`);
    },
    'bare fetch': async () => check(await (await fetch(url, { method: 'POST', headers, body })).text()),
    'bare node:http, keep-alive': () =>
      new Promise((ok, fail) => {
        const req = http.request(url, { method: 'POST', headers, agent }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d) => (text += d));
          res.on('end', () => ok(check(text)));
          res.on('error', fail);
        });
        req.on('error', fail);
        req.end(body);
      }),
  };
  const times = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
  for (const f of Object.values(variants)) for (let i = 0; i < 30; i++) await f();
  for (let done = 0; done < samples; done += 50) {
    for (const [name, f] of Object.entries(variants)) {
      for (let i = 0; i < Math.min(50, samples - done); i++) {
        const t = performance.now();
        await f();
        times[name].push(performance.now() - t);
      }
    }
  }
  agent.destroy();
  const q = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];
  const rows = Object.entries(times).map(([name, xs]) => {
    xs.sort((a, b) => a - b);
    return { name, n: xs.length, median: q(xs, 0.5), p95: q(xs, 0.95) };
  });
  for (const r of rows) console.log(`${r.name.padEnd(28)} median ${r.median.toFixed(2)} ms  p95 ${r.p95.toFixed(2)} ms  (n=${r.n})`);
  console.log(JSON.stringify(rows));
} finally {
  await sandbox.kill();
}
