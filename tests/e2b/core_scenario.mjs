// The core of scenario.mjs, for the older E2B JavaScript SDKs pinned in tests/e2b/versions/ (those
// that check the key's shape before any request). An ordinary E2B user script: the server is
// chosen only by E2B's environment variables. E2B_SDK_DIR names the version's directory (its
// node_modules holds the SDK); E2B_API_KEY is a Lizard key in E2B's shape (`e2b_<hex>`);
// LIZARD_LZ_KEY, when set, is the same key as Lizard prints it (`lz_<hex>`), which these SDKs must
// refuse before sending anything. One line per step; e2b.test.mjs compares them.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sdk = createRequire(join(process.env.E2B_SDK_DIR, 'package.json')).resolve('@e2b/code-interpreter');
const { Sandbox } = await import(pathToFileURL(sdk).href);
const step = (name) => console.log(`ok ${name}`);

const lz = process.env.LIZARD_LZ_KEY;
if (lz) {
  await assert.rejects(Sandbox.create({ apiKey: lz, timeoutMs: 60_000 }), /Invalid API key format/);
  step('format');
}

const sbx = await Sandbox.create({ timeoutMs: 120_000 });
assert.ok(sbx.sandboxId);
step('create');

await sbx.runCode('x = 41');
const ex = await sbx.runCode('x + 1');
assert.equal(ex.text, '42');
step('state');

const r = await sbx.commands.run('echo hi');
assert.deepEqual([r.stdout, r.exitCode], ['hi\n', 0]);
step('commands');

await sbx.files.write('/home/user/core.txt', 'core');
assert.equal(await sbx.files.read('/home/user/core.txt'), 'core');
step('files');

await sbx.kill();
console.log('done');
