// The shipped build, no server needed: dist/ (committed, because `lizard serve` embeds it and a
// cargo build must not need npm) is byte for byte what `npm run build` makes of src/ today, file
// for file; and the strict type check of the sources (`tsc --noEmit`) is clean.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const HERE = join(dirname(fileURLToPath(import.meta.url)), '..');

test('the strict type check of src/ is clean (tsc --noEmit)', async () => {
  const tsc = join(HERE, 'node_modules/typescript/bin/tsc');
  const r = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: HERE, maxBuffer: 16 << 20 }).catch((e) => e);
  assert.equal(r.code ?? 0, 0, `tsc -p tsconfig.json failed:\n${r.stdout}${r.stderr}`);
});

test('dist/ is what `npm run build` makes of src/ (else run `npm run build` in console/ and commit dist/)', async (t) => {
  const out = await mkdtemp(join(tmpdir(), 'lizard-console-'));
  t.after(() => rm(out, { recursive: true, force: true }));
  await run(process.execPath, [join(HERE, 'build.mjs'), out], { cwd: HERE });
  const fresh = (await readdir(out)).sort();
  const committed = (await readdir(join(HERE, 'dist'))).sort();
  assert.deepEqual(fresh, ['console.css', 'console.js', 'index.html']);
  assert.deepEqual(committed, fresh, 'dist/ does not have the files the build makes');
  const stale = [];
  for (const f of fresh) {
    const [a, b] = await Promise.all([readFile(join(out, f)), readFile(join(HERE, 'dist', f))]);
    if (!a.equals(b)) stale.push(f);
  }
  assert.deepEqual(stale, [], 'dist/ differs from the build of src/');
});
