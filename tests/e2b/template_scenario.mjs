// An ordinary E2B user's template code (JavaScript SDK `e2b`, pinned in package.json), unmodified:
// the same steps as template_scenario.py. The server is chosen only by E2B's environment
// variables (E2B_API_KEY + E2B_API_URL + E2B_SANDBOX_URL).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BuildError, Sandbox, Template } from 'e2b';

const name = process.argv[2] || 'e2b-template-js';
const step = (n) => console.log(`ok ${n}`);

const ctx = mkdtempSync(join(tmpdir(), 'e2b-tpl-'));
writeFileSync(join(ctx, 'greeting.txt'), 'copied by an E2B template\n');

const template = Template({ fileContextPath: ctx })
  .fromTemplate('code-interpreter-v1')
  .setEnvs({ GREETING: 'hello from an E2B template', STAGE: 'built' })
  .copy('greeting.txt', '/home/user/greeting.txt')
  .runCmd('cat /home/user/greeting.txt > /home/user/made-by-run.txt && whoami >> /home/user/made-by-run.txt', { user: 'user' });

assert.equal(await Template.exists(name), false, 'not built yet');
const logs = [];
const info = await Template.build(template, name, { onBuildLogs: (e) => logs.push(e) });
assert.equal(info.templateId, name);
assert.ok(logs.some((e) => String(e.message).includes('RUN cat /home/user/greeting.txt')), logs.map((e) => e.message).join('\n'));
step('build');

assert.equal(await Template.exists(name), true);
assert.equal(await Template.exists(`${name}-missing`), false);
step('exists');

const sbx = await Sandbox.create(name, { timeoutMs: 120_000 });
const r = await sbx.commands.run('echo "$GREETING/$STAGE"; cat /home/user/greeting.txt /home/user/made-by-run.txt');
assert.equal(r.stdout, 'hello from an E2B template/built\ncopied by an E2B template\ncopied by an E2B template\nuser\n');
assert.equal(await sbx.files.read('/home/user/greeting.txt'), 'copied by an E2B template\n');
await sbx.kill();
step('sandbox');

await Template.build(template, name);
step('rebuild');

await assert.rejects(
  Template.build(Template().fromImage('ubuntu:24.04').runCmd('true'), `${name}-ubuntu`),
  (e) => e instanceof BuildError && /not supported/.test(e.message),
);
step('unsupported');
console.log('done');
