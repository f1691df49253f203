// The shipped build, no server needed: dist/ (committed, because `npm install <path>` neither
// installs devDependencies nor reliably runs build scripts) is byte for byte what `npm run build`
// (`tsc -p tsconfig.json`) makes of src/*.ts today, file for file; and the strict type check of
// the sources (`tsc --noEmit`) is clean.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SDK_DIR } from './helpers/server.js';

const run = promisify(execFile);
const TSC = join(SDK_DIR, 'node_modules/typescript/bin/tsc');

/** `tsc -p tsconfig.json <args>` in the SDK: `{ ok, output }`. */
async function tsc(args) {
  try {
    const { stdout, stderr } = await run(process.execPath, [TSC, '-p', 'tsconfig.json', ...args], {
      cwd: SDK_DIR,
      maxBuffer: 16 << 20,
    });
    return { ok: true, output: stdout + stderr };
  } catch (err) {
    if (typeof err.code !== 'number') throw err;
    return { ok: false, output: String(err.stdout) + String(err.stderr) };
  }
}

/** Every file below `dir`, as paths relative to it, sorted. */
async function files(dir) {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name).slice(dir.length + 1))
    .sort();
}

test('tsconfig.json is strict and builds ESM with declarations into dist/', async () => {
  const config = JSON.parse(await readFile(join(SDK_DIR, 'tsconfig.json'), 'utf8'));
  const o = config.compilerOptions;
  assert.equal(o.strict, true);
  assert.equal(o.declaration, true);
  assert.equal(o.outDir, 'dist');
  assert.equal(o.module, 'nodenext');
  const pkg = JSON.parse(await readFile(join(SDK_DIR, 'package.json'), 'utf8'));
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.scripts.build, 'tsc -p tsconfig.json');
  assert.deepEqual(pkg.exports['.'], { types: './dist/index.d.ts', default: './dist/index.js' });
  assert.ok(pkg.files.includes('dist'), 'package.json "files" does not ship dist/');
});

test('the strict type check of src/*.ts is clean (tsc --noEmit)', async () => {
  const { ok, output } = await tsc(['--noEmit']);
  assert.ok(ok, `tsc --noEmit -p tsconfig.json failed:\n${output}`);
  assert.equal(output.trim(), '');
});

test('dist/ is what `npm run build` makes of src/ (else run `npm run build` and commit dist/)', async (t) => {
  const out = await mkdtemp(join(tmpdir(), 'lizard-build-'));
  t.after(() => rm(out, { recursive: true, force: true }));
  const { ok, output } = await tsc(['--outDir', out]);
  assert.ok(ok, `tsc -p tsconfig.json failed:\n${output}`);
  const fresh = await files(out);
  const dist = join(SDK_DIR, 'dist');
  const committed = await files(dist);
  assert.ok(fresh.includes('index.js') && fresh.includes('index.d.ts') && fresh.includes('wire.d.ts'), fresh.join(' '));
  assert.deepEqual(committed, fresh, 'dist/ does not have the files the build makes: run `npm run build` in sdk/typescript');
  const stale = [];
  for (const f of fresh) {
    const [a, b] = await Promise.all([readFile(join(out, f)), readFile(join(dist, f))]);
    if (!a.equals(b)) stale.push(f);
  }
  assert.deepEqual(stale, [], 'dist/ differs from the build of src/: run `npm run build` in sdk/typescript');
});
