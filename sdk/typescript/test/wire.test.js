// The SDK's types against the server's wire types, no server needed: src/wire.ts is what
// `npm run gen:wire` makes of crates/lizard-server/openapi.json today (byte for byte); the
// compile-time checks in test/wire-check.ts and the typed converters in src/convert.ts pass under
// `tsc --strict`, and they fail — naming the fields — when a wire schema changes (a copy of the
// document with a field renamed, one removed, one added and one retyped; the real document is
// never touched); and every wire schema is checked or listed as not used by the SDK.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SDK_DIR } from './helpers/server.js';

const run = promisify(execFile);
const OPENAPI = join(SDK_DIR, '../../crates/lizard-server/openapi.json');
const GEN = join(SDK_DIR, 'scripts/gen-wire.mjs');
const TSC = join(SDK_DIR, 'node_modules/typescript/bin/tsc');

async function tempDir(t) {
  const dir = await mkdtemp(join(tmpdir(), 'lizard-wire-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function generate(input, output) {
  await run(process.execPath, [GEN, '--input', input, '--output', output], { cwd: SDK_DIR });
}

/** `tsc --noEmit --strict` over `<root>/test/wire-check.ts` and `<root>/src/convert.ts`
 * (test/tsconfig.wire.json): `{ ok, output }`. */
async function checkWire(root) {
  const args = [TSC, '-p', join(root, 'test/tsconfig.wire.json')];
  try {
    const { stdout, stderr } = await run(process.execPath, args, { cwd: root, maxBuffer: 16 << 20 });
    return { ok: true, output: stdout + stderr };
  } catch (err) {
    if (typeof err.code !== 'number') throw err;
    return { ok: false, output: String(err.stdout) + String(err.stderr) };
  }
}

test('src/wire.ts is generated from the current openapi.json (else run `npm run gen:wire`)', async (t) => {
  const out = join(await tempDir(t), 'wire.ts');
  await generate(OPENAPI, out);
  const fresh = await readFile(out, 'utf8');
  const committed = await readFile(join(SDK_DIR, 'src/wire.ts'), 'utf8');
  assert.match(fresh, /^\/\/ GENERATED FILE/);
  assert.ok(
    fresh === committed,
    'src/wire.ts differs from what crates/lizard-server/openapi.json generates: run `npm run gen:wire` in sdk/typescript, then make the checks (npm test) pass',
  );
});

test("the SDK's types and converters match the wire types (tsc --strict over test/wire-check.ts, src/convert.ts)", async () => {
  const { ok, output } = await checkWire(SDK_DIR);
  assert.ok(ok, `the SDK's types in src/ disagree with src/wire.ts:\n${output}`);
});

test('a wire schema changed in openapi.json (renamed, removed, added field) fails the checks', async (t) => {
  const root = await tempDir(t);
  await mkdir(join(root, 'src'));
  await mkdir(join(root, 'test'));
  const doc = JSON.parse(await readFile(OPENAPI, 'utf8'));
  const s = doc.components.schemas;
  const rename = (schema, from, to) => {
    s[schema].properties[to] = s[schema].properties[from];
    delete s[schema].properties[from];
    s[schema].required = s[schema].required.map((f) => (f === from ? to : f));
  };
  assert.ok(s.SandboxInfo.properties.sandbox_id && s.VolumeInfo.properties.used_bytes && s.EntryInfo.properties);
  rename('SandboxInfo', 'sandbox_id', 'sandbox_key');
  delete s.VolumeInfo.properties.used_bytes;
  s.VolumeInfo.required = s.VolumeInfo.required.filter((f) => f !== 'used_bytes');
  s.EntryInfo.properties.inode = { type: 'integer', format: 'uint64', minimum: 0 };
  s.EntryInfo.required.push('inode');
  s.SecretInfo.properties.name = { type: 'integer' };
  const mutated = join(root, 'openapi.json');
  await writeFile(mutated, JSON.stringify(doc));
  await generate(mutated, join(root, 'src/wire.ts'));
  const sources = (await readdir(join(SDK_DIR, 'src'))).filter((f) => f.endsWith('.ts') && f !== 'wire.ts');
  assert.ok(sources.includes('convert.ts') && sources.includes('index.ts'), sources.join(' '));
  for (const f of sources) await copyFile(join(SDK_DIR, 'src', f), join(root, 'src', f));
  for (const f of ['wire-check.ts', 'tsconfig.wire.json']) await copyFile(join(SDK_DIR, 'test', f), join(root, 'test', f));
  // (the compiler's own types, @types/node, from the SDK's install)
  await symlink(join(SDK_DIR, 'node_modules'), join(root, 'node_modules'), 'dir');

  const { ok, output } = await checkWire(root);
  assert.equal(ok, false, `the checks passed against a changed schema:\n${output}`);
  for (const expected of [
    // (one check with two problems: tsc prints the first)
    "SandboxInfo: the wire's sandbox_key is not in the SDK (expected as sandboxKey)",
    'VolumeInfo.usedBytes: in the SDK but not on the wire',
    "EntryInfo: the wire's inode is not in the SDK (expected as inode)",
    "SecretInfo.name: the wire's values do not fit the SDK's type",
    // …and where src/convert.ts reads them
    "src/convert.ts(",
    "Property 'sandbox_id' does not exist",
    "Property 'used_bytes' does not exist",
    "Type 'number' is not assignable to type 'string'",
  ]) {
    assert.ok(output.includes(expected), `tsc did not report ${JSON.stringify(expected)}:\n${output}`);
  }

  // The same copy, unchanged, passes: the failures above are the mutations', not the copy's.
  await generate(OPENAPI, join(root, 'src/wire.ts'));
  const clean = await checkWire(root);
  assert.ok(clean.ok, clean.output);
});

test('every wire schema is checked in test/wire-check.ts (directly or through $ref) or listed in NotInSdk', async () => {
  const doc = JSON.parse(await readFile(OPENAPI, 'utf8'));
  const schemas = doc.components.schemas;
  const check = await readFile(join(SDK_DIR, 'test/wire-check.ts'), 'utf8');
  const direct = new Set([...check.matchAll(/W\['(\w+)'\]/g)].map((m) => m[1]));
  const block = check.match(/export type NotInSdk =([^;]*);/);
  assert.ok(block, 'test/wire-check.ts has no `export type NotInSdk = …;`');
  const notInSdk = new Set([...block[1].matchAll(/'(\w+)'/g)].map((m) => m[1]));
  assert.ok(direct.size > 30, `only ${direct.size} schemas named in test/wire-check.ts`);

  const covered = new Set();
  const visit = (name) => {
    if (covered.has(name)) return;
    covered.add(name);
    const walk = (v) => {
      if (Array.isArray(v)) v.forEach(walk);
      else if (v && typeof v === 'object') {
        for (const [k, x] of Object.entries(v)) {
          if (k === '$ref' && typeof x === 'string') visit(x.replace('#/components/schemas/', ''));
          else walk(x);
        }
      }
    };
    walk(schemas[name]);
  };
  for (const name of direct) {
    assert.ok(name in schemas, `test/wire-check.ts names W['${name}'], which openapi.json does not have`);
    visit(name);
  }
  const unchecked = Object.keys(schemas).filter((n) => !covered.has(n) && !notInSdk.has(n));
  assert.deepEqual(unchecked, [], 'wire schemas neither checked in test/wire-check.ts nor listed in its NotInSdk');
  const both = [...notInSdk].filter((n) => direct.has(n));
  assert.deepEqual(both, [], 'schemas both checked and listed in NotInSdk');
});
