// User templates through the SDK against a real `lizard serve`: a Dockerfile build streamed with
// its steps and logs (a directory context packed by the SDK's tar writer, COPY, ENV, a RUN as
// `USER user`), a sandbox from it, a template from a sandbox, list/get/delete, typed build errors
// naming the line (before the build and from the stream, with the log), project isolation; and the
// tar writer checked by the host's GNU tar.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createProject, startServer } from './helpers/server.js';
import {
  AuthenticationError,
  CodeSandbox,
  InvalidArgumentError,
  NotFoundError,
  TemplateBuildError,
  Templates,
} from '../dist/index.js';
import { tarGzDirectory } from '../dist/tar.js';

const run = promisify(execFile);
const PROJECT = 'ts-templates';
let server;
let scratch;

before(async () => {
  server = await startServer();
  scratch = await mkdtemp(join(tmpdir(), 'lizard-ts-tpl-'));
});

after(async () => {
  await server?.stop();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

const projectKey = (name) => createProject(server, name);

const DOCKERFILE = `FROM code-interpreter-v1
ENV GREETING="hello from the ts template"
USER user
WORKDIR /home/user/app
COPY data.txt ./
COPY sub/ ./sub/
RUN echo "built as $(id -un)" && cat sub/nested.txt > made-by-run.txt
`;

test('build from a directory context, use it, list/get/delete, isolation', async () => {
  const ctx = join(scratch, 'ctx');
  await mkdir(join(ctx, 'sub'), { recursive: true });
  await writeFile(join(ctx, 'data.txt'), 'from the context\n');
  await writeFile(join(ctx, 'sub', 'nested.txt'), 'nested\n');

  // What is built: the same again below is a cache hit.
  const content = { name: 'ts-tpl', dockerfile: DOCKERFILE, context: ctx, project: PROJECT };
  const steps = [];
  let log = '';
  const tpl = await Templates.build({
    ...content,
    onStep: (s) => steps.push(s),
    onLog: async ({ text }) => {
      log += text;
    },
  });
  assert.equal(tpl.name, 'ts-tpl');
  assert.equal(tpl.state, 'ready');
  assert.equal(tpl.project, PROJECT);
  assert.equal(tpl.base, 'code-interpreter-v1');
  assert.equal(tpl.builtin, false);
  assert.ok(tpl.key && tpl.createdAt instanceof Date);
  assert.deepEqual(
    steps.map((s) => s.index),
    steps.map((_, i) => i + 1),
  );
  assert.equal(steps.at(-1).total, steps.length);
  assert.ok(steps.some((s) => s.name.startsWith('RUN echo')), JSON.stringify(steps));
  assert.match(log, /built as user/);

  const sb = await CodeSandbox.create({ project: PROJECT, template: 'ts-tpl' });
  let sb2;
  try {
    const ex = await sb.runCode(
      "import os\nprint(os.environ['GREETING'])\nprint(open('data.txt').read() + open('made-by-run.txt').read(), end='')\nprint(os.getcwd())",
    );
    assert.equal(ex.error, undefined, JSON.stringify(ex.error));
    assert.equal(ex.stdout, 'hello from the ts template\nfrom the context\nnested\n/home/user/app\n');

    // A template of this sandbox's files, and a sandbox from it.
    await sb.runCode("open('/home/user/snap.txt', 'w').write('snapshot')");
    const snap = await Templates.fromSandbox({ name: 'ts-snap', sandbox: sb, project: PROJECT });
    assert.equal(snap.state, 'ready');
    assert.equal(snap.base, 'ts-tpl');
    sb2 = await CodeSandbox.create({ project: PROJECT, template: 'ts-snap' });
    assert.equal((await sb2.runCode("print(open('/home/user/snap.txt').read())")).stdout, 'snapshot\n');
  } finally {
    await sb.kill().catch(() => {});
    await sb2?.kill().catch(() => {});
  }

  const got = await Templates.get('ts-tpl', { project: PROJECT });
  assert.equal(got.key, tpl.key);
  assert.match(got.buildLog, /built as user/);
  // What the build installed, listed in its build sandbox, in camelCase's plain maps.
  assert.equal(typeof got.packages.debian.bash, 'string');
  assert.equal(typeof got.packages.python.numpy, 'string');
  assert.deepEqual(
    got.versions.map((v) => v.state),
    ['ready'],
  );
  const listed = new Map((await Templates.list({ project: PROJECT })).map((t) => [t.name, t]));
  for (const n of ['ts-tpl', 'ts-snap', 'code-interpreter-v1']) assert.ok(listed.has(n), n);
  assert.equal(listed.get('code-interpreter-v1').builtin, true);
  assert.equal(listed.get('code-interpreter-v1').project, undefined);

  // The same content again is a cache hit: the same key, no steps.
  const again = [];
  const hit = await Templates.build({ ...content, onStep: (s) => again.push(s) });
  assert.equal(hit.key, tpl.key);
  assert.deepEqual(again, []);

  // Another project's key sees none of it.
  const other = await projectKey('ts-tpl-other');
  await assert.rejects(Templates.get('ts-tpl', { apiKey: other }), NotFoundError);
  await assert.rejects(Templates.delete('ts-tpl', { apiKey: other }), NotFoundError);
  assert.ok(!(await Templates.list({ apiKey: other })).some((t) => t.name === 'ts-tpl'));
  await assert.rejects(CodeSandbox.create({ template: 'ts-tpl', apiKey: other }), NotFoundError);

  const denied = await Templates.delete('code-interpreter-v1', { project: PROJECT }).catch((e) => e);
  assert.ok(denied instanceof AuthenticationError, String(denied));
  assert.equal(denied.code, 'permission_denied');
  await Templates.delete('ts-snap', { project: PROJECT });
  await Templates.delete('ts-tpl', { project: PROJECT });
  await assert.rejects(Templates.get('ts-tpl', { project: PROJECT }), NotFoundError);
  await assert.rejects(Templates.delete('ts-tpl', { project: PROJECT }), NotFoundError);
});

test('build errors are typed and name the line; a failed step carries the log', async () => {
  const bad = await Templates.build({
    name: 'ts-bad',
    dockerfile: 'FROM code-interpreter-v1\n\nEXPOSE 80\n',
    project: PROJECT,
  }).catch((e) => e);
  assert.ok(bad instanceof TemplateBuildError, String(bad));
  assert.equal(bad.code, 'invalid_dockerfile');
  assert.equal(bad.status, 400);
  assert.match(bad.message, /line 3/);
  assert.equal(bad.log, '');
  await assert.rejects(Templates.get('ts-bad', { project: PROJECT }), NotFoundError);

  let streamed = '';
  const failed = await Templates.build({
    name: 'ts-fails',
    dockerfile: 'FROM code-interpreter-v1\nUSER user\nRUN echo before-the-failure && exit 3\n',
    project: PROJECT,
    onLog: ({ text }) => {
      streamed += text;
    },
  }).catch((e) => e);
  assert.ok(failed instanceof TemplateBuildError, String(failed));
  assert.equal(failed.code, 'build_failed');
  assert.equal(failed.status, undefined);
  assert.match(failed.message, /line 3/);
  assert.match(failed.log, /before-the-failure/);
  assert.match(streamed, /before-the-failure/);
  const info = await Templates.get('ts-fails', { project: PROJECT });
  assert.equal(info.state, 'failed');
  assert.equal(info.error?.code, 'build_failed');
  await Templates.delete('ts-fails', { project: PROJECT });
});

test('an aborted build with cancelOnDisconnect is cancelled on the server', async () => {
  const ctrl = new AbortController();
  const reason = new Error('enough');
  const err = await Templates.build({
    name: 'ts-slow',
    dockerfile: 'FROM code-interpreter-v1\nUSER user\nRUN echo started; sleep 600\n',
    project: PROJECT,
    cancelOnDisconnect: true,
    signal: ctrl.signal,
    onLog: ({ text }) => {
      if (text.includes('started')) ctrl.abort(reason);
    },
  }).catch((e) => e);
  assert.equal(err, reason);
  const deadline = Date.now() + 60_000;
  let info;
  for (;;) {
    info = await Templates.get('ts-slow', { project: PROJECT });
    if (info.state !== 'building' || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(info.state, 'failed', JSON.stringify(info));
  assert.match(info.error?.message ?? '', /cancelled/);
  await Templates.delete('ts-slow', { project: PROJECT });
});

test('options are checked before any request', async () => {
  const opts = { apiUrl: 'http://127.0.0.1:9', apiKey: 'unused' };
  for (const bad of [
    { name: 'x' },
    { name: 'x', dockerfile: 'FROM code-interpreter-v1\n', fromSandbox: 'sb_x' },
    { name: 'x', dockerfile: 'FROM code-interpreter-v1\n', context: join(scratch, 'missing') },
    { name: 'x', dockerfile: 'FROM code-interpreter-v1\n', context: 3 },
    { name: 'x', fromSandbox: 'sb_x', context: new Uint8Array() },
    { name: 'x', dockerfile: 'FROM code-interpreter-v1\n', timeoutMs: -1 },
    { dockerfile: 'FROM code-interpreter-v1\n' },
  ]) {
    await assert.rejects(Templates.build({ ...opts, ...bad }), InvalidArgumentError, JSON.stringify(bad));
  }
  await assert.rejects(Templates.get('', opts), InvalidArgumentError);
});

test('the tar writer: GNU tar reads it back, long names, symlinks, modes, reproducible', async () => {
  const dir = join(scratch, 'tar-src');
  const long = `${'d'.repeat(60)}/${'e'.repeat(60)}`;
  await mkdir(join(dir, long), { recursive: true });
  const longFile = `${long}/${'f'.repeat(90)}.txt`;
  await writeFile(join(dir, longFile), 'deep\n');
  await writeFile(join(dir, 'run.sh'), '#!/bin/sh\necho hi\n');
  await chmod(join(dir, 'run.sh'), 0o755);
  await writeFile(join(dir, 'empty'), '');
  await symlink('run.sh', join(dir, 'link'));
  await symlink(`${'l'.repeat(120)}/target`, join(dir, 'dangling'));
  await run('mkfifo', [join(dir, 'fifo')]);

  const tgz = await tarGzDirectory(dir);
  assert.deepEqual(await tarGzDirectory(dir), tgz);
  const file = join(scratch, 'ctx.tgz');
  await writeFile(file, tgz);
  const { stdout } = await run('tar', ['-tzvf', file, '--numeric-owner']);
  assert.doesNotMatch(stdout, /fifo/);
  assert.match(stdout, /^-rwxr-xr-x 0\/0 .* run\.sh$/m);
  assert.match(stdout, /^lrwxrwxrwx 0\/0 .* link -> run\.sh$/m);
  assert.ok(stdout.includes(`dangling -> ${'l'.repeat(120)}/target`), stdout);
  const out = join(scratch, 'tar-out');
  await mkdir(out);
  await run('tar', ['-xzf', file, '-C', out]);
  assert.equal(await readFile(join(out, longFile), 'utf8'), 'deep\n');
  assert.equal(await readFile(join(out, 'link'), 'utf8'), '#!/bin/sh\necho hi\n');
  assert.equal(await readFile(join(out, 'empty'), 'utf8'), '');
});
