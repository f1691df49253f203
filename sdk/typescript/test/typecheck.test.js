// Static checks of the seed snippets, no server needed: every snippet in test/snippets/ is a
// verbatim substring of the seed documents (the copies in test/seeds/ and, when present, the shared
// originals in ../shared/seeds/), and every snippet program type-checks with `tsc --noEmit` against
// the SDK's hand-written declarations as installed by `npm install <path>`. It does not run code.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SDK_DIR } from './helpers/server.js';
import {
  CLOUDFLARE_HEADER,
  CLOUDFLARE_SECTIONS,
  LIZARD_SNIPPETS,
  SEEDS_COPY_DIR,
  SHARED_SEEDS_DIR,
  cloudflareProgram,
  installSdk,
  lizardFragmentsProgram,
  snippet,
} from './helpers/snippets.js';

const SEED_FILES = ['code-interpreter.md', 'code-interpreter.ru.md', 'code-interpreter-guide.ru.txt'];

async function seedTexts() {
  const dirs = [SEEDS_COPY_DIR];
  if (existsSync(SHARED_SEEDS_DIR)) dirs.push(SHARED_SEEDS_DIR);
  const out = [];
  for (const dir of dirs) {
    const t = {};
    for (const f of SEED_FILES) t[f] = await readFile(join(dir, f), 'utf8');
    out.push({ dir, t });
  }
  return out;
}

test('the snippets are verbatim copies of the seeds', async () => {
  for (const { dir, t } of await seedTexts()) {
    for (const name of LIZARD_SNIPPETS) {
      const s = await snippet(name);
      for (const f of ['code-interpreter.md', 'code-interpreter.ru.md']) {
        assert.ok(t[f].includes('```ts\n' + s + '```'), `${name} is not verbatim in ${dir}/${f}`);
      }
    }
    const guide = t['code-interpreter-guide.ru.txt'];
    for (const name of CLOUDFLARE_SECTIONS) {
      for (const v of ['a', 'b']) {
        const s = await snippet(`${name}.${v}`);
        const whole = name === 'cf-1-create-context' ? CLOUDFLARE_HEADER[v] + s : s;
        assert.ok(guide.includes(whole), `${name}.${v} is not verbatim in ${dir}/code-interpreter-guide.ru.txt`);
      }
    }
  }
});

test('the seed copies in test/seeds match the shared seeds', { skip: !existsSync(SHARED_SEEDS_DIR) }, async () => {
  for (const f of SEED_FILES) {
    assert.equal(
      await readFile(join(SEEDS_COPY_DIR, f), 'utf8'),
      await readFile(join(SHARED_SEEDS_DIR, f), 'utf8'),
      `test/seeds/${f} differs from ${SHARED_SEEDS_DIR}/${f}: update the copy and the snippets`,
    );
  }
});

/** Exercises the declared surface; `@ts-expect-error` lines prove the types are not `any`. */
const API_USAGE = `
import {
  CodeSandbox, Execution, Result, ExecutionError, LizardError, NotFoundError, AuthenticationError,
  InvalidArgumentError, TimeoutError, SandboxError, ConflictError, RateLimitError, ConnectionError,
  DEFAULT_TEMPLATE, DEFAULT_API_URL, CommandExitError, type Context, type ForkedContext, type ExecResult, type CommandResult,
  type CommandHandle, type EntryInfo, type FilesystemEvent, type ProcessInfo, type PtyHandle, type PtyResult,
  type Egress, type NetworkLog, Secrets, type SecretInfo, type InjectRule,
} from '@lizard-build/sdk';
import * as sdk from '@lizard-build/sdk';

// Every runtime export is declared (test/sdk.test.js checks the runtime list is exactly this).
const declared: Record<string, unknown> = {
  AuthenticationError: sdk.AuthenticationError, CodeSandbox: sdk.CodeSandbox, ConflictError: sdk.ConflictError,
  ConnectionError: sdk.ConnectionError, DEFAULT_API_URL: sdk.DEFAULT_API_URL, DEFAULT_TEMPLATE: sdk.DEFAULT_TEMPLATE,
  Execution: sdk.Execution, ExecutionError: sdk.ExecutionError, InvalidArgumentError: sdk.InvalidArgumentError,
  LizardError: sdk.LizardError, NotFoundError: sdk.NotFoundError, RateLimitError: sdk.RateLimitError,
  Result: sdk.Result, SandboxError: sdk.SandboxError, TimeoutError: sdk.TimeoutError,
  CommandExitError: sdk.CommandExitError, Secrets: sdk.Secrets,
};
const names: string = DEFAULT_TEMPLATE + DEFAULT_API_URL;

const sandbox = await CodeSandbox.create({ project: 'p', template: 'code-interpreter-v1', timeoutMs: 1000, metadata: { a: 'b' }, envs: { A: 'b' } });
const id: string = sandbox.sandboxId;
const again: CodeSandbox = await CodeSandbox.connect(id);
const ex: Execution = await again.runCode('1', { language: 'js', envs: { X: '1' }, timeoutMs: 5, onStdout: (s) => s.length, onStderr: () => {}, onResult: (r: Result) => r.png, onError: (e: ExecutionError) => e.traceback });
const out: string = ex.stdout + ex.stderr + ex.output;
const n: number = ex.executionCount;
const ok: boolean = ex.success;
const first: Result | undefined = ex.results[0];
const data: string | undefined = first?.data;
const fmts: string[] = ex.formats;
const png: string | undefined = ex.outputs.png;
const err: string | undefined = ex.error?.name ?? ex.error?.message ?? ex.error?.traceback;
const ctx: Context = await sandbox.createContext({ language: 'python', cwd: '/tmp' });
const limited: Context = await sandbox.createContext({ limits: { memoryMb: 64, cpuMillicores: 250 } });
const mem: number | undefined = limited.memoryBytes ?? limited.limits?.memoryMb;
await sandbox.runCode('x', { context: ctx });
await sandbox.runCode('x', { context: ctx.id, stream: true, onOutput: (t, s) => console.log(t, s) });
const all: Context[] = await sandbox.listContexts();
await sandbox.restartContext(ctx);
const forked: ForkedContext = await sandbox.forkContext(ctx, { limits: { memoryMb: 64 } });
const forkedFrom: string = forked.forkedFrom;
const lostWhy: string | undefined = forked.lost[0]?.reason;
await sandbox.deleteContext(ctx.id);
const cf = await sandbox.createCodeContext({ language: 'javascript' });
const cfId: string = cf.id;
const cfLang: string = cf.language;
await sandbox.listCodeContexts();
await sandbox.deleteCodeContext(cf);
const r: ExecResult = await sandbox.exec('ls', { cwd: '/', env: { A: 'b' }, timeout: 1000 });
const code: number = r.exitCode;
const cr: CommandResult = await sandbox.commands.run('ls', { cwd: '/', envs: { A: 'b' }, timeoutMs: 5, onStdout: (t) => t.length, onStderr: () => {}, stdin: 'in' });
const bg: CommandHandle = await sandbox.commands.run('cat', { background: true, stdin: true });
await bg.sendStdin(new Uint8Array([1]));
await bg.kill();
try { await bg.wait(); } catch (e) { if (e instanceof CommandExitError) console.log(e.result.exitCode + e.exitCode); }
const procs: ProcessInfo[] = await sandbox.commands.list();
const re: CommandHandle = await sandbox.commands.connect(bg.pid, { onStdout: () => {} });
const killedPid: boolean = await sandbox.commands.kill(re.pid);
const term: PtyHandle = await sandbox.pty.create({ cols: 80, rows: 24, onData: (d: Uint8Array) => d.byteLength, cmd: 'bash', cwd: '/', envs: { A: 'b' } });
await term.sendInput('ls\\r');
await term.sendInput(new Uint8Array([3]));
await term.resize({ cols: 100, rows: 40 });
const ptyEnd: PtyResult = await term.wait();
const ptyCode: number = ptyEnd.exitCode;
const ptyKilled: boolean = (await term.kill()) && (await sandbox.pty.kill(term.pid));
await sandbox.pty.connect(term.pid, { onData: () => {} });
// @ts-expect-error onData gets bytes, not a string
await sandbox.pty.create({ cols: 80, rows: 24, onData: (d: string) => d });
// @ts-expect-error rows is required
await sandbox.pty.create({ cols: 80 });
const text: string = await sandbox.files.read('a');
const bytes: Uint8Array = await sandbox.files.read('a', { format: 'bytes' });
const stream: ReadableStream<Uint8Array> = await sandbox.files.read('a', { format: 'stream' });
const written: EntryInfo = await sandbox.files.write('a', bytes);
const many: EntryInfo[] = await sandbox.files.write([{ path: 'b', data: 'x' }]);
const entries: EntryInfo[] = await sandbox.files.list('.', { depth: 2 });
const flags: boolean[] = [await sandbox.files.exists('a'), await sandbox.files.makeDir('d')];
await sandbox.files.remove('d');
const moved: EntryInfo = await sandbox.files.rename('a', 'c');
const mtime: number = (await sandbox.files.getInfo('c')).modifiedMs;
const watch = await sandbox.files.watchDir('.', (ev: FilesystemEvent) => ev.isDir, { recursive: true });
await watch.stop();
// @ts-expect-error a foreground run resolves to a result, not a handle
const bad3: CommandHandle = await sandbox.commands.run('ls');
await sandbox.pause();
await sandbox.resume();
const hib = await sandbox.hibernate();
const lostNames: string[] = (hib.hibernation?.contexts ?? []).flatMap((c) => c.lost.map((l) => l.name));
const restoredKinds: string[] | undefined = sandbox.restoreReport?.contexts[0]?.restored.map((i) => i.kind);
await sandbox.setTimeout(60_000);
const rules: Egress = { allow: ['*.example.com', 'api.example.com:443'], deny: ['evil.example.com'] };
await CodeSandbox.create({ project: 'p', egress: rules });
await CodeSandbox.create({ project: 'p', egress: ['pypi.org'] });
await CodeSandbox.create({ project: 'p', egress: { deny: ['10.0.0.0/8'] } });
const netInfo = await sandbox.setNetwork({ egress: 'none' });
const netEgress: 'none' | 'all' | { allow?: string[]; deny?: string[] } = netInfo.network.egress;
const nlog: NetworkLog = await sandbox.networkLog();
const nlogN: number = nlog.egress.connections + nlog.egress.bytesOut + nlog.egress.bytesIn + nlog.egress.refused + nlog.mirror.cacheHits;
const why: string | undefined = nlog.refused[0]?.reason;
const when: Date | undefined = nlog.refused[0]?.at;
const setSecret = await Secrets.set('p', 'token', 'value', { apiKey: 'k' });
const secretNew: boolean = setSecret.created;
const secrets: SecretInfo[] = await Secrets.list('p');
const secretWhen: Date | undefined = secrets[0]?.updatedAt;
const secretGone: boolean = await Secrets.delete('p', 'token');
const rule: InjectRule = { host: 'api.example.com', headers: { Authorization: 'Bearer \${secret:token}' } };
await CodeSandbox.create({ project: 'p', egress: ['api.example.com'], inject: [rule] });
await sandbox.setNetwork({ inject: [] });
await sandbox.setNetwork({ egress: ['api.example.com'], inject: [rule] });
const injected: string | undefined = (await sandbox.getInfo()).network.inject?.[0]?.headers.Authorization;
// @ts-expect-error a secret's value is never returned
const leaked: string = secrets[0].value;
// @ts-expect-error headers map names to templates
await CodeSandbox.create({ project: 'p', egress: 'all', inject: [{ host: 'x.com', headers: ['Authorization'] }] });
// @ts-expect-error setNetwork needs egress or inject
await sandbox.setNetwork({});
// @ts-expect-error egress is 'none', 'all', a list or { allow, deny }
await CodeSandbox.create({ project: 'p', egress: 'some' });
// @ts-expect-error setNetwork takes { egress }
await sandbox.setNetwork('all');
const state: 'running' | 'paused' | 'hibernated' | 'killed' = (await sandbox.getInfo()).state;
const killed: boolean = await sandbox.kill();
const e: LizardError = new NotFoundError('x');
const codeStr: string = e.code;
for (const C of [AuthenticationError, InvalidArgumentError, TimeoutError, SandboxError, ConflictError, RateLimitError, ConnectionError]) new C('m');

// @ts-expect-error stdout is a string
const bad1: number = ex.stdout;
// @ts-expect-error code must be a string
await sandbox.runCode(42);
// @ts-expect-error no such option
await CodeSandbox.create({ project: 'p', nope: 1 });
// @ts-expect-error exec resolves to an ExecResult, not an Execution
const bad2: Execution = await sandbox.exec('ls');
void [declared, names, out, n, ok, data, fmts, png, err, all, cfId, cfLang, code, state, killed, codeStr, bad1, bad2, bad3];
void [lostNames, restoredKinds, netEgress, nlogN, why, when, secretNew, secretWhen, secretGone, injected, leaked];
void [ptyCode, ptyKilled, cr, procs, killedPid, text, stream, written, many, entries, flags, moved, mtime];
`;

test('every snippet program type-checks against the declarations (tsc --noEmit)', async () => {
  const tsc = join(SDK_DIR, 'node_modules/typescript/bin/tsc');
  assert.ok(existsSync(tsc), `no TypeScript in ${SDK_DIR}/node_modules: run \`npm install\` there first`);
  const { dir, cleanup } = await installSdk();
  try {
    const node = join(dir, 'node');
    const worker = join(dir, 'worker');
    await mkdir(node);
    await mkdir(worker);
    // The Lizard seeds, as a Node user compiles them.
    await writeFile(join(node, 'run-code.ts'), await snippet('lizard-run-code'));
    await writeFile(join(node, 'fragments.ts'), await lizardFragmentsProgram());
    await writeFile(
      join(node, 'checkpoint.ts'),
      "import { CodeSandbox } from '@lizard-build/sdk';\n" + (await snippet('lizard-checkpoint')),
    );
    await writeFile(join(node, 'api.ts'), API_USAGE);
    // The Cloudflare guide: Worker code, compiled with the web platform's types (DOM lib).
    for (const v of ['a', 'b']) await writeFile(join(worker, `guide-${v}.ts`), await cloudflareProgram(v));

    const base = {
      strict: true,
      noEmit: true,
      module: 'nodenext',
      moduleResolution: 'nodenext',
      target: 'es2022',
      types: ['node'],
      typeRoots: [join(SDK_DIR, 'node_modules/@types')],
    };
    await writeFile(
      join(dir, 'tsconfig.node.json'),
      JSON.stringify({ compilerOptions: { ...base, lib: ['es2022'] }, include: ['node/*.ts'] }),
    );
    await writeFile(
      join(dir, 'tsconfig.worker.json'),
      JSON.stringify({ compilerOptions: { ...base, lib: ['es2022', 'dom'] }, include: ['worker/*.ts'] }),
    );
    for (const cfg of ['tsconfig.node.json', 'tsconfig.worker.json']) {
      try {
        await promisify(execFile)(process.execPath, [tsc, '-p', cfg], { cwd: dir });
      } catch (e) {
        assert.fail(`tsc -p ${cfg} failed:\n${e.stdout}${e.stderr}`);
      }
    }
  } finally {
    await cleanup();
  }
});
