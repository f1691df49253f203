// The seed snippets as test programs: loads the verbatim copies in test/snippets/, wraps the ones
// that are fragments (they use a `sandbox` made by an earlier snippet) in a small, clearly marked
// harness, installs the SDK from its path into a temp folder with `npm install <path>` as a user
// would, and runs a program there as a child `node` process. The snippet text itself is never
// edited; the harness only adds what the seed's page had earlier (a `sandbox`, a `context`) and, for
// Cloudflare's Worker-shaped snippets, a function scope (they `return` a Response) and the `env`.

import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SDK_DIR, startServer } from './server.js';

const HERE = dirname(fileURLToPath(import.meta.url));
export const SNIPPETS_DIR = join(HERE, '../snippets');
export const SEEDS_COPY_DIR = join(HERE, '../seeds');
/** The shared seeds next to the repository (../shared/seeds), when present. */
export const SHARED_SEEDS_DIR = join(SDK_DIR, '../../../shared/seeds');

/** Read one verbatim snippet. */
export function snippet(name) {
  return readFile(join(SNIPPETS_DIR, `${name}.snippet`), 'utf8');
}

/** The lines of the Cloudflare guide that obtain `sandbox` (replaced by `CodeSandbox.create`). */
export const CLOUDFLARE_HEADER = {
  a: 'import { getSandbox } from "@cloudflare/sandbox";\n\nconst sandbox = getSandbox(env.Sandbox, "my-sandbox");\n\n',
  b: "import { getSandbox } from '@cloudflare/sandbox';\n\nconst sandbox = getSandbox(env.Sandbox, 'my-sandbox');\n\n",
};

export const LIZARD_SNIPPETS = [
  'lizard-run-code',
  'lizard-choose-language',
  'lizard-streaming',
  'lizard-contexts',
  'lizard-checkpoint',
];
export const CLOUDFLARE_SECTIONS = [
  'cf-1-create-context',
  'cf-2-simple-execution',
  'cf-3-state',
  'cf-4-rich-output',
  'cf-5-streaming',
  'cf-6-ai-generated',
  'cf-7-list-contexts',
  'cf-8-delete-contexts',
];

/**
 * The Lizard seed's fragments (choose a language, streaming, contexts) in one program, each in its
 * own block, after the page's first snippet's `create`. Markers `@@@ name` separate their outputs.
 */
export async function lizardFragmentsProgram() {
  const parts = [
    "import { CodeSandbox } from '@lizard-build/sdk';",
    '',
    '// harness: the sandbox of the page\'s first snippet',
    "const sandbox = await CodeSandbox.create({ project: 'my-project' });",
    'try {',
  ];
  for (const name of ['lizard-choose-language', 'lizard-streaming', 'lizard-contexts']) {
    parts.push(`console.log('@@@ ${name}');`, '{', await snippet(name));
    if (name === 'lizard-contexts') {
      parts.push(
        '// harness: what the snippet left behind',
        "console.log('@@@ check ' + JSON.stringify({ ids: (await sandbox.listContexts()).map((c) => c.id), a: a.id, b: b.id }));",
      );
    }
    parts.push('}');
  }
  parts.push('} finally {', '  await sandbox.kill();', '}', '');
  return parts.join('\n');
}

/**
 * The Cloudflare guide (variant `a`: tabs and double quotes, `b`: spaces and single quotes) as one
 * program: `getSandbox(env.Sandbox, …)` becomes `CodeSandbox.create(…)`, each section runs in its
 * own async function (a Worker handler's body: some `return` a Response), and `context` is the
 * context the guide's earlier sections made.
 */
export async function cloudflareProgram(variant) {
  const parts = [
    "import { CodeSandbox } from '@lizard-build/sdk';",
    '',
    '// harness: a Worker\'s `env` (only ANTHROPIC_API_KEY is read; api.anthropic.com is stubbed by --import)',
    "const env = { ANTHROPIC_API_KEY: process.env.ANTHROPIC_API_KEY ?? 'test-key' };",
    "// harness: in place of `getSandbox(env.Sandbox, 'my-sandbox')`",
    "const sandbox = await CodeSandbox.create({ project: 'my-project' });",
    'try {',
    '// harness: the `context` the guide\'s earlier sections created',
    "const context = await sandbox.createCodeContext({ language: 'python' });",
  ];
  for (const name of CLOUDFLARE_SECTIONS) {
    parts.push(
      `console.log('@@@ ${name}');`,
      'const returned_' + name.replace(/-/g, '_') + ' = await (async () => {',
      await snippet(`${name}.${variant}`),
      '})();',
    );
    if (name === 'cf-4-rich-output') {
      parts.push(
        '// harness: what the Worker handler returned',
        `{ const r = returned_cf_4_rich_output; console.log('@@@ returned ' + JSON.stringify(r ? { type: r.headers.get('content-type'), bytes: (await r.arrayBuffer()).byteLength } : null)); }`,
      );
    }
    if (name === 'cf-8-delete-contexts') {
      parts.push("console.log('@@@ left ' + JSON.stringify((await sandbox.listCodeContexts()).length));");
    }
  }
  parts.push('} finally {', '  await sandbox.kill();', '}', '');
  return parts.join('\n');
}

/**
 * Split a program's stdout at the harness's marker lines: `@@@ name` starts the output of a
 * section; `@@@ key value` records a harness value (without changing the current section).
 */
export function sections(stdout) {
  const out = { _: '' };
  let cur = '_';
  for (const line of stdout.split(/(?<=\n)/)) {
    const m = /^@@@ ([a-z0-9-]+)(?: (.*))?\n$/.exec(line);
    if (m && m[2] !== undefined) {
      out[m[1]] = m[2];
    } else if (m) {
      cur = m[1];
      out[cur] = '';
    } else {
      out[cur] += line;
    }
  }
  return out;
}

/**
 * A temp folder where `npm install <sdk path>` was run, like a user's project.
 * @returns {Promise<{ dir: string, cleanup: () => Promise<void> }>}
 */
export async function installSdk() {
  const dir = await mkdtemp(join(tmpdir(), 'lizard-ts-user-'));
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'user-project', private: true, type: 'module' }));
  await promisify(execFile)('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', SDK_DIR], {
    cwd: dir,
    env: { ...process.env, npm_config_update_notifier: 'false' },
  });
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * The `before`/`after` hooks of a test file whose programs run as a user's would. Before: a real
 * `lizard serve` and a folder where the SDK is installed (`installSdk`), then `start(dir)` writes
 * the programs there and starts them all (resolving to an object of name → `runNode` promise,
 * without awaiting anything once the first one is started). After: every run is waited for, the
 * folder removed and the server stopped; each program kills its own sandbox, so a sandbox the
 * server had to kill fails the file (`what` names the programs in that message).
 * @param {(dir: string) => Promise<Record<string, ReturnType<typeof runNode>>>} start
 * @param {string} what
 * @returns {Record<string, ReturnType<typeof runNode>>} the runs (filled in by `before`)
 */
export function programRuns(start, what) {
  const runs = {};
  let server;
  let user;
  before(async () => {
    server = await startServer();
    user = await installSdk();
    Object.assign(runs, await start(user.dir));
    // Attach handlers now so a failure is reported by its test, not as an unhandled rejection.
    for (const p of Object.values(runs)) p.catch(() => {});
  });
  after(async () => {
    await Promise.allSettled(Object.values(runs));
    await user?.cleanup();
    const { killed } = (await server?.stop()) ?? { killed: [] };
    assert.deepEqual(killed, [], `sandboxes left running by ${what}: ${killed}`);
  });
  return runs;
}

/**
 * Run `node <file>` in `dir` with the current LIZARD_* environment; collect output with timestamps.
 * @returns {Promise<{ code: number | null, stdout: string, stderr: string, ms: number }>}
 */
export function runNode(dir, file, { args = [], timeoutMs = 120_000 } = {}) {
  return new Promise((resolveRun, reject) => {
    const t0 = Date.now();
    // Output as a user's program writes it into a pipe: node's test runner sets FORCE_COLOR for
    // its children when it runs in a terminal, which would colour console.log's values.
    const env = { ...process.env, NO_COLOR: '1' };
    delete env.FORCE_COLOR;
    const child = spawn(process.execPath, [...args, file], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} did not finish in ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}
