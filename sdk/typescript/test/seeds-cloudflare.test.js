// The Cloudflare-style guide (code-interpreter-guide.ru.txt) run as written against the SDK: both
// code variants of the page (tabs/double quotes and spaces/single quotes) as child `node`
// processes in a folder where the SDK was `npm install`ed from its path, against a real
// `lizard serve`. Only `getSandbox(env.Sandbox, …)` is replaced (by `CodeSandbox.create`), and
// api.anthropic.com is stubbed (no network here; helpers/anthropic-stub.mjs).

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cloudflareProgram, programRuns, runNode, sections } from './helpers/snippets.js';

const STUB = fileURLToPath(new URL('./helpers/anthropic-stub.mjs', import.meta.url));

const runs = programRuns(async (dir) => {
  for (const v of ['a', 'b']) await writeFile(join(dir, `guide-${v}.mjs`), await cloudflareProgram(v));
  return Object.fromEntries(
    ['a', 'b'].map((v) => [v, runNode(dir, `guide-${v}.mjs`, { args: ['--import', STUB] })]),
  );
}, 'the guide programs');

const FIB = '0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n55\n89\n';

for (const v of ['a', 'b']) {
  describe(`Cloudflare guide, variant ${v}, as written`, { concurrency: true }, () => {
    const out = async () => {
      const r = await runs[v];
      assert.equal(r.code, 0, `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
      assert.equal(r.stderr, '', 'nothing on stderr (no onError, no warnings)');
      return sections(r.stdout);
    };

    test('create contexts: id and language', async () => {
      const s = await out();
      assert.match(s['cf-1-create-context'], /^Context ID: [0-9a-f]+\nLanguage: python\n$/);
    });

    test('simple execution: output and success', async () => {
      const s = await out();
      assert.equal(
        s['cf-2-simple-execution'],
        'Output: Hello from Code Interpreter!\n2 + 2 = 4\n\nSuccess: true\n',
      );
    });

    test('state within a context: "Mean: 3.0"', async () => {
      const s = await out();
      assert.equal(s['cf-3-state'], 'Mean: 3.0\n\n');
    });

    test("rich output: formats ['text', 'png'] and a PNG response", async () => {
      const s = await out();
      assert.equal(s['cf-4-rich-output'], "Formats: [ 'text', 'png' ]\n");
      const returned = JSON.parse(s.returned);
      assert.equal(returned.type, 'image/png');
      assert.ok(returned.bytes > 1000, `a real image: ${returned.bytes} bytes`);
    });

    test('streaming: onOutput gets every line, in order', async () => {
      const s = await out();
      const lines = s['cf-5-streaming'].split('\n').filter((l) => l.startsWith('Output: ')).map((l) => l.slice(8));
      const want = [...Array.from({ length: 10 }, (_, i) => `Processing item ${i + 1}/10...`), 'Done!'];
      assert.deepEqual(lines, want);
    });

    test('AI-generated code: runs and reports its output', async () => {
      const s = await out();
      const text = s['cf-6-ai-generated'];
      assert.ok(text.startsWith('Generated code: a, b = 0, 1\n'), text);
      assert.ok(text.endsWith(`Output: ${FIB}\nSuccess: true\n`), text);
    });

    test('list contexts: count and one line per context', async () => {
      const s = await out();
      const [head, ...rest] = s['cf-7-list-contexts'].trimEnd().split('\n');
      const n = Number(/^(\d+) active contexts:$/.exec(head)?.[1]);
      assert.ok(n >= 5, head);
      assert.equal(rest.length, n);
      for (const l of rest) assert.match(l, /^ {2}[0-9a-f]+ \((python|javascript|bash)\)$/);
    });

    test('delete contexts: one, then all', async () => {
      const s = await out();
      assert.equal(s['cf-8-delete-contexts'], 'Context deleted\nAll contexts deleted\n');
      assert.equal(s.left, '0', 'no context left');
    });
  });
}
