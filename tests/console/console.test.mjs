// The web console (console/, embedded in `lizard serve` and served at `/`) driven as a person would
// drive it: headless Chromium (Debian's `chromium`, LIZARD_CHROMIUM to use another) through
// playwright-core, against a real `lizard serve` with real sandboxes and kernels. Nothing is
// mocked. Waits are for what the page shows, never for a time.
//
// LIZARD_CONSOLE_SCREENSHOTS=<dir> also saves screenshots of the main pages there (docs/console/
// holds the committed ones).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';
import { startServer } from '../support/serve.mjs';

const CHROMIUM = process.env.LIZARD_CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.LIZARD_CONSOLE_SCREENSHOTS;
/** How long the page may take to show what a step waits for (a sandbox start, a kernel's first import). */
const WAIT = 120_000;

let server;
let browser;
/** Every request a console page made to the server: `[method, path]`. */
const calls = [];

before(async () => {
  server = await startServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** A fresh browser context (its own session storage) with a page; the page's errors fail the test. */
async function newPage(t) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (url.origin === server.url) calls.push([r.method(), url.pathname]);
  });
  // WebSockets are GETs of the API too (`ws:` of the same host).
  page.on('websocket', (ws) => {
    const url = new URL(ws.url());
    if (url.host === new URL(server.url).host) calls.push(['GET', url.pathname]);
  });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // Chromium's word that a result's HTML tried to run a script in its inert frame is no error of the page's.
    const expected = /Failed to load resource|Blocked script execution in 'about:srcdoc'/;
    if (m.type() === 'error' && !expected.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
  t.after(() => assert.deepEqual(problems, [], 'the page reported errors'));
  return page;
}

async function shot(page, name) {
  if (!SHOTS) return;
  await mkdir(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

async function signIn(page, key) {
  await page.goto(`${server.url}/`);
  await page.locator('input[name="api-key"]').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('.topbar').waitFor();
}

/** Call the API directly (setting up what the console is then checked against). */
async function api(key, method, path, body) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** Type `code` into the notebook's last cell and run it with Ctrl+Enter; the cell's locator. */
async function runCell(page, code) {
  const cell = page.locator('.cell').last();
  const editor = cell.locator('textarea.code');
  if ((await editor.inputValue()) !== '') {
    await page.getByRole('button', { name: '+ Cell' }).click();
    return runCell(page, code);
  }
  await editor.fill(code);
  await editor.press('Control+Enter');
  return cell;
}

/**
 * Answer the console's "are you sure" (a modal `<dialog>` in the page): check that it says
 * `message` (a string or a pattern), click `choice`, and wait until it is gone.
 */
async function answer(page, message, choice) {
  const dialog = page.getByRole('dialog');
  await dialog.waitFor();
  const text = (await dialog.locator('p').textContent()).trim();
  if (message instanceof RegExp) assert.match(text, message);
  else assert.equal(text, message);
  await dialog.getByRole('button', { name: choice, exact: true }).click();
  await dialog.waitFor({ state: 'detached' });
}

/** Wait until `cell` has finished (its status line shows); the status text. */
async function finished(cell) {
  const status = cell.locator('.cell-status');
  await status.waitFor();
  return (await status.textContent()).trim();
}

test('the console is served at / with its script and stylesheet, offline', async (t) => {
  const page = await newPage(t);
  const outside = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(server.url) && !r.url().startsWith('data:')) outside.push(r.url());
  });
  const res = await page.goto(`${server.url}/`);
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-security-policy'], /script-src 'self'/);
  await page.locator('input[name="api-key"]').waitFor();
  assert.equal(await page.title(), 'Lizard console');
  // A wrong key is refused with the API's own message.
  await page.locator('input[name="api-key"]').fill('lz_not_a_key');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const err = page.locator('.error-box');
  await err.waitFor();
  assert.match(await err.textContent(), /unauthenticated/);
  await shot(page, 'sign-in');
  assert.deepEqual(outside, [], 'the console fetched something from elsewhere');
});

test('admin: create a sandbox, run cells (values, charts, HTML, errors, streamed output, interrupt), kill it', async (t) => {
  const page = await newPage(t);
  await signIn(page, server.admin);
  await page.getByText('No sandboxes yet.').waitFor();

  // An API error is shown as the API said it.
  await page.locator('input[name="filter-metadata"]').fill('no-equals-sign');
  await page.locator('input[name="filter-metadata"]').press('Enter');
  await page.locator('.error-box', { hasText: 'metadata filter is k=v' }).waitFor();
  await page.locator('input[name="filter-metadata"]').fill('');
  await page.locator('input[name="filter-metadata"]').press('Enter');
  await page.getByText('No sandboxes yet.').waitFor();

  await page.locator('input[name="metadata"]').fill('purpose=console-test');
  await page.getByRole('button', { name: 'Create sandbox' }).click();
  await page.waitForURL(/#\/sandboxes\/[^/]+$/);
  const id = decodeURIComponent(page.url().split('/').pop());
  await page.locator('.sandbox-head .state', { hasText: 'running' }).waitFor();
  await page.locator('select[name="context"]').waitFor();
  // Made with the form's default lifetime (30 min); set to an hour from now.
  await page.locator('.facts dd', { hasText: /in (29|30) min \(then kill\)/ }).waitFor();
  await page.locator('select[name="extend"]').selectOption('1 h');
  await page.getByRole('button', { name: 'Set timeout' }).click();
  await page.locator('.facts dd', { hasText: /in (59 min|1 h 0 min) \(then kill\)/ }).waitFor();

  // 1+1 shows 2, as the cell's main result.
  let cell = await runCell(page, '1+1');
  assert.match(await finished(cell), /^ok · \d+ ms$/);
  assert.equal((await cell.locator('pre.result.main').textContent()).trim(), '2');

  // A matplotlib chart is an image.
  cell = await runCell(page, 'import matplotlib.pyplot as plt\nplt.plot([1, 4, 2, 3])\nplt.title("console")\nplt.show()');
  await finished(cell);
  const img = cell.locator('img[alt="image/png result"]');
  await img.waitFor();
  assert.ok(await img.evaluate((el) => el.complete && el.naturalWidth > 100), 'the PNG did not load');

  // Streamed output: the first line is on the page while the cell still runs (it waits for a file
  // that only this test writes, after it saw that line), then the rest arrives.
  cell = await runCell(
    page,
    'import os, time\nprint("first line", flush=True)\nwhile not os.path.exists("/tmp/console-go"):\n    time.sleep(0.05)\nprint("second line")',
  );
  await cell.locator('pre.stdout', { hasText: 'first line' }).waitFor();
  assert.ok(await cell.evaluate((el) => el.classList.contains('running')), 'the cell is not running any more');
  assert.equal(await cell.locator('.cell-status').count(), 0);
  assert.doesNotMatch(await cell.locator('pre.stdout').textContent(), /second line/);
  await shot(page, 'sandbox-streaming');
  await api(server.admin, 'PUT', `/v1/sandboxes/${id}/files?path=/tmp/console-go`, 'go');
  assert.match(await finished(cell), /^ok/);
  assert.equal(await cell.locator('pre.stdout').textContent(), 'first line\nsecond line\n');

  // HTML (a DataFrame) is shown in an inert frame: no scripts, an opaque origin.
  cell = await runCell(
    page,
    'import pandas as pd\nfrom IPython.display import HTML, display\n' +
      'display(HTML(\'<p id="x">static</p><script>document.getElementById("x").textContent = "ran"</script>\'))\n' +
      'pd.DataFrame({"name": ["a", "b"], "value": [1, 2]})',
  );
  await finished(cell);
  const frames = cell.locator('iframe.html');
  await frames.nth(1).waitFor();
  for (const i of [0, 1]) assert.equal(await frames.nth(i).getAttribute('sandbox'), '');
  assert.equal(await cell.frameLocator('iframe.html >> nth=0').locator('#x').textContent(), 'static');
  await cell.frameLocator('iframe.html >> nth=1').locator('table', { hasText: 'value' }).waitFor();

  // JSON is shown as JSON.
  cell = await runCell(page, 'from IPython.display import JSON\nJSON({"answer": 42, "items": [1, 2]})');
  await finished(cell);
  assert.deepEqual(JSON.parse(await cell.locator('pre.json').textContent()), { answer: 42, items: [1, 2] });

  // An error with its traceback.
  cell = await runCell(page, 'def f():\n    return 1 / 0\nf()');
  assert.match(await finished(cell), /^error/);
  assert.match(await cell.locator('.cell-error strong').textContent(), /ZeroDivisionError: division by zero/);
  assert.match(await cell.locator('.cell-error pre.traceback').textContent(), /in f\b/);
  await shot(page, 'sandbox-cells');

  // Interrupt.
  cell = await runCell(page, 'import time\nprint("sleeping", flush=True)\ntime.sleep(600)');
  await cell.locator('pre.stdout', { hasText: 'sleeping' }).waitFor();
  await cell.getByRole('button', { name: 'Interrupt' }).click();
  assert.match(await finished(cell), /^interrupted/);
  assert.match(await cell.locator('.cell-error strong').textContent(), /KeyboardInterrupt/);

  // A JavaScript context of its own.
  await page.locator('select[name="language"]').selectOption('javascript');
  await page.getByRole('button', { name: 'New context' }).click();
  await page.locator('select[name="context"] option:checked', { hasText: 'javascript' }).waitFor({ state: 'attached' });
  cell = await runCell(page, 'const o = { answer: 6 * 7 }; o.answer');
  await finished(cell);
  assert.equal((await cell.locator('pre.result.main').textContent()).trim(), '42');
  // Restart clears its state; Delete removes it (the default Python context is chosen again).
  await page.locator('.contexts-bar').getByRole('button', { name: 'Restart' }).click();
  await page.locator('select[name="context"] option:checked', { hasText: 'restarted 1×' }).waitFor({ state: 'attached' });
  cell = await runCell(page, 'typeof o');
  await finished(cell);
  assert.equal((await cell.locator('pre.result.main').textContent()).trim(), "'undefined'");
  await page.locator('.contexts-bar').getByRole('button', { name: 'Delete' }).click();
  await answer(page, /^Delete context .*Its kernel and its state are gone\.$/, 'Delete');
  await page.locator('select[name="context"] option:checked', { hasText: 'python' }).waitFor({ state: 'attached' });
  assert.equal(await page.locator('select[name="context"] option', { hasText: 'javascript' }).count(), 0);

  // The list shows it, with its metadata; the metadata filter finds it.
  await page.getByRole('link', { name: 'Sandboxes' }).click();
  const row = page.locator(`tr[data-sandbox="${id}"]`);
  await row.locator('.state', { hasText: 'running' }).waitFor();
  assert.match(await row.textContent(), /purpose=console-test/);
  await page.locator('input[name="filter-metadata"]').fill('purpose=console-test');
  await page.locator('input[name="filter-metadata"]').press('Enter');
  await row.waitFor();
  await shot(page, 'sandboxes');
  await page.locator('input[name="filter-metadata"]').fill('purpose=other');
  await page.locator('input[name="filter-metadata"]').press('Enter');
  await page.getByText('No sandbox matches these filters.').waitFor();
  await page.locator('input[name="filter-metadata"]').fill('');
  await page.locator('input[name="filter-metadata"]').press('Enter');

  // Pause and resume from the list.
  await row.getByRole('button', { name: 'Pause' }).click();
  await row.locator('.state', { hasText: 'paused' }).waitFor();
  await row.getByRole('button', { name: 'Resume' }).click();
  await row.locator('.state', { hasText: 'running' }).waitFor();

  // Kill it from its page.
  await row.getByRole('link', { name: id }).click();
  await page.locator('.sandbox-head .state', { hasText: 'running' }).waitFor();
  // Asked first: Cancel (and Escape) leave it running.
  await page.locator('.sandbox-head').getByRole('button', { name: 'Kill' }).click();
  await answer(page, `Kill sandbox ${id}? Its processes and files are gone for good.`, 'Cancel');
  await page.locator('.sandbox-head').getByRole('button', { name: 'Kill' }).click();
  await page.getByRole('dialog').waitFor();
  await page.keyboard.press('Escape');
  await page.getByRole('dialog').waitFor({ state: 'detached' });
  assert.equal((await api(server.admin, 'GET', `/v1/sandboxes/${id}`)).state, 'running');
  await page.locator('.sandbox-head').getByRole('button', { name: 'Kill' }).click();
  await answer(page, `Kill sandbox ${id}? Its processes and files are gone for good.`, 'Kill');
  await page.waitForURL(/#\/sandboxes$/);
  await page.getByText('No sandboxes yet.').waitFor();
  const left = await api(server.admin, 'GET', '/v1/sandboxes');
  assert.ok(!left.some((s) => s.sandbox_id === id), JSON.stringify(left));
});

test("a project key's session shows its own project only", async (t) => {
  const alpha = await server.project('console-alpha');
  const beta = await server.project('console-beta');
  const theirs = await api(beta, 'POST', '/v1/sandboxes', { metadata: { owner: 'beta' } });

  const page = await newPage(t);
  await signIn(page, alpha);
  assert.equal((await page.locator('.topbar .who').textContent()).trim(), 'project console-alpha');
  await page.getByText('No sandboxes yet.').waitFor();
  // No project picker: the key has one project.
  assert.equal(await page.locator('select[name="project"]').count(), 0);
  await page.getByRole('button', { name: 'Create sandbox' }).click();
  await page.waitForURL(/#\/sandboxes\/[^/]+$/);
  const mine = decodeURIComponent(page.url().split('/').pop());
  await page.locator('.facts dd', { hasText: 'console-alpha' }).waitFor();
  await page.getByRole('link', { name: 'Sandboxes' }).click();
  await page.locator(`tr[data-sandbox="${mine}"]`).waitFor();
  assert.equal(await page.locator('tr[data-sandbox]').count(), 1);
  assert.ok(!(await page.content()).includes(theirs.sandbox_id), "the other project's sandbox is on the page");
  // Its page by id is a 404, as the API says.
  await page.goto(`${server.url}/#/sandboxes/${theirs.sandbox_id}`);
  await page.getByText('This sandbox is not there.').waitFor();
  assert.match(await page.locator('.error-box').textContent(), /not_found/);

  // Its usage and audit log are its project's only.
  await page.locator('.topbar').getByRole('link', { name: 'Usage' }).click();
  await page.locator('figure.chart canvas').first().waitFor();
  assert.deepEqual(await page.locator('select[name="usage-project"] option').allTextContents(), ['console-alpha']);
  assert.ok(!(await page.content()).includes(theirs.sandbox_id), "the other project's usage is on the page");
  await page.locator('.topbar').getByRole('link', { name: 'Audit log' }).click();
  await page.locator('table.audit tr[data-action="sandbox.create"]', { hasText: mine }).waitFor();
  const projects = await page.locator('table.audit tbody tr td:nth-child(4)').allTextContents();
  assert.deepEqual([...new Set(projects)], ['console-alpha']);
  assert.ok(!(await page.content()).includes(theirs.sandbox_id), "the other project's events are on the page");

  // The admin's session sees both projects, and filters by project.
  const admin = await newPage(t);
  await signIn(admin, server.admin);
  await admin.locator(`tr[data-sandbox="${theirs.sandbox_id}"]`).waitFor();
  await admin.locator(`tr[data-sandbox="${mine}"]`).waitFor();
  await admin.locator('select[name="filter-project"]').selectOption('console-beta');
  await admin.locator(`tr[data-sandbox="${mine}"]`).waitFor({ state: 'detached' });
  await admin.locator(`tr[data-sandbox="${theirs.sandbox_id}"]`).waitFor();

  for (const [key, sb] of [[alpha, mine], [beta, theirs.sandbox_id]]) await api(key, 'DELETE', `/v1/sandboxes/${sb}`);
});

test("a sandbox's files (upload, view, download), terminal and metrics; the usage page and the audit log", async (t) => {
  const page = await newPage(t);
  await signIn(page, server.admin);
  await page.getByRole('button', { name: 'Create sandbox' }).click();
  await page.waitForURL(/#\/sandboxes\/[^/]+$/);
  const id = decodeURIComponent(page.url().split('/').pop());
  t.after(() => api(server.admin, 'DELETE', `/v1/sandboxes/${id}`).catch(() => {}));
  await page.locator('select[name="context"]').waitFor();
  const cell = await runCell(page, 'print("metered")');
  assert.match(await finished(cell), /^ok/);

  // Files: upload into /home/user, view it, download it.
  await page.locator('.tabs').getByRole('link', { name: 'Files' }).click();
  await page.locator('input[name="path"]').waitFor();
  const content = `hello from the console ${Date.now()}\n`;
  await page.locator('input[name="upload"]').setInputFiles({ name: 'hello.txt', mimeType: 'text/plain', buffer: Buffer.from(content) });
  const row = page.locator('tr[data-path="/home/user/hello.txt"]');
  await row.waitFor();
  const viaApi = await fetch(`${server.url}/v1/sandboxes/${id}/files?path=/home/user/hello.txt`, {
    headers: { authorization: `Bearer ${server.admin}` },
  });
  assert.equal(await viaApi.text(), content);
  await row.getByRole('button', { name: 'View' }).click();
  await page.locator('pre.file-text', { hasText: 'hello from the console' }).waitFor();
  assert.equal(await page.locator('pre.file-text').textContent(), content);
  await shot(page, 'sandbox-files');
  const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download' }).click()]);
  assert.equal(download.suggestedFilename(), 'hello.txt');
  assert.equal(await readFile(await download.path(), 'utf8'), content);

  // Terminal: an interactive shell on the PTY API's WebSocket; what is typed runs, its output
  // shows; closing the terminal ends the shell.
  await page.locator('.tabs').getByRole('link', { name: 'Terminal' }).click();
  const socket = page.waitForEvent('websocket');
  await page.getByRole('button', { name: 'Open terminal' }).click();
  assert.match((await socket).url(), /\/v1\/sandboxes\/[^/]+\/pty\/ws\?cols=\d+&rows=\d+$/);
  await page.locator('.xterm').waitFor();
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type('echo console-$((6 * 7))');
  await page.keyboard.press('Enter');
  await page.locator('.xterm-rows', { hasText: 'console-42' }).waitFor();
  await shot(page, 'sandbox-terminal');
  const shells = async () =>
    (await api(server.admin, 'GET', `/v1/sandboxes/${id}/commands`)).filter((p) => p.tag === 'websocket' && !p.end);
  assert.equal((await shells()).length, 1);
  await page.getByRole('button', { name: 'Close terminal' }).click();
  await page.getByRole('button', { name: 'Open terminal' }).waitFor();
  for (let i = 0; (await shells()).length > 0; i++) {
    assert.ok(i < 200, 'closing the terminal ends its shell');
    await new Promise((r) => setTimeout(r, 100));
  }

  // The sandbox's own metrics, charted; and its CPU and memory now in the list, once sampled.
  await page.locator('.tabs').getByRole('link', { name: 'Metrics' }).click();
  const memory = page.locator('figure.chart[data-measure="Memory (MiB)"]');
  await memory.locator('canvas').waitFor();
  assert.match(await memory.locator('figcaption').textContent(), /Memory \(MiB\): [\d.]+ now/);
  await shot(page, 'sandbox-metrics');
  await page.locator('.topbar').getByRole('link', { name: 'Sandboxes' }).click();
  await page.locator(`tr[data-sandbox="${id}"] td.now`, { hasText: /\d+% · \d+ MiB/ }).waitFor();

  // Usage: the default project's charts, this sandbox's row, the CSV.
  await page.locator('.topbar').getByRole('link', { name: 'Usage' }).click();
  await page.locator('select[name="usage-project"]').selectOption('default');
  for (const m of ['CPU-seconds', 'Memory GiB-hours', 'Executions', 'Volume GiB-hours']) {
    await page.locator(`figure.chart[data-measure="${m}"] canvas`).waitFor();
  }
  const usageRow = page.locator(`.usage-table tr[data-sandbox="${id}"]`);
  await usageRow.waitFor();
  await shot(page, 'usage');
  const [csv] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  const lines = (await readFile(await csv.path(), 'utf8')).trim().split('\n');
  assert.match(lines[0], /^sandbox_id,running_seconds,/);
  assert.ok(lines.some((l) => l.startsWith(`${id},`)), lines.join('\n'));

  // The audit log has the create, and its filters narrow it (a failed sign-in of this test's own
  // is there too, whatever ran before).
  assert.equal((await fetch(`${server.url}/v1/sandboxes`, { headers: { authorization: 'Bearer lz_not_a_key' } })).status, 401);
  await page.locator('.topbar').getByRole('link', { name: 'Audit log' }).click();
  await page.locator('select[name="audit-action"]').selectOption('sandbox.create');
  const created = page.locator('table.audit tr[data-action="sandbox.create"]', { hasText: id });
  await created.waitFor();
  assert.equal(await page.locator('table.audit tr[data-action="auth.failed"]').count(), 0);
  await shot(page, 'audit');
  await page.locator('select[name="audit-action"]').selectOption('auth.failed');
  await page.locator('table.audit tr[data-action="auth.failed"]').first().waitFor();
  assert.equal(await created.count(), 0);
});

test('templates: a build from a Dockerfile shows its steps and output as it goes, then the template is listed and deleted', async (t) => {
  const page = await newPage(t);
  await signIn(page, server.admin);
  await page.locator('.topbar').getByRole('link', { name: 'Templates' }).click();
  await page.locator('tr[data-template="code-interpreter-v1"]').waitFor();
  await page.locator('input[name="template-name"]').fill('console-tpl');
  await page.locator('textarea[name="dockerfile"]').fill('FROM code-interpreter-v1\nRUN echo built-by-the-console && echo done > /opt/console.txt\n');
  await page.getByRole('button', { name: 'Build template' }).click();
  await page.locator('.build-progress .step', { hasText: /Step \d+\/\d+/ }).waitFor();
  await page.locator('.notice', { hasText: 'Template console-tpl is ready' }).waitFor();
  assert.match(await page.locator('pre.build-log').textContent(), /built-by-the-console/);
  const row = page.locator('tr[data-template="console-tpl"]');
  await row.locator('.state', { hasText: 'ready' }).waitFor();
  await row.getByRole('button', { name: 'Delete' }).click();
  await answer(page, 'Delete template console-tpl?', 'Delete');
  await row.waitFor({ state: 'detached' });
});

test('templates: a build context of picked files and a folder (COPY), in a sandbox of the template; what the API refuses is shown as it said it', async (t) => {
  const page = await newPage(t);
  await signIn(page, server.admin);
  t.after(async () => {
    for (const name of ['console-ctx', 'console-ctx-missing']) {
      await api(server.admin, 'DELETE', `/v1/templates/${name}?project=default`).catch(() => {});
    }
  });
  await page.locator('.topbar').getByRole('link', { name: 'Templates' }).click();
  await page.locator('tr[data-template="code-interpreter-v1"]').waitFor();

  // A folder on disk (picked whole: its own name is not in the paths) and a file from memory.
  const dir = await mkdtemp(join(tmpdir(), 'lizard-console-ctx-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const stamp = `${Date.now()}`;
  const app = `print("app from the console ${stamp}")\n`;
  const settings = `answer = 42 # ${stamp}\n`;
  const notes = `notes from the console ${stamp}\n`;
  await mkdir(join(dir, 'proj/conf'), { recursive: true });
  await writeFile(join(dir, 'proj/app.py'), app);
  await writeFile(join(dir, 'proj/conf/settings.ini'), settings);
  await page.locator('input[name="context-folder"]').setInputFiles(join(dir, 'proj'));
  await page.locator('input[name="context-files"]').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from(notes) });
  const listed = page.locator('ul.context-files li');
  await listed.nth(2).waitFor();
  assert.deepEqual(await listed.evaluateAll((lis) => lis.map((li) => li.dataset.path)), ['app.py', 'conf/settings.ini', 'notes.txt']);
  const bytes = Buffer.byteLength(app) + Buffer.byteLength(settings) + Buffer.byteLength(notes);
  assert.equal((await page.locator('.context-total').textContent()).trim(), `3 files, ${bytes} B`);
  // Clear empties it; picked again, it is the same.
  await page.getByRole('button', { name: 'Clear' }).click();
  await listed.first().waitFor({ state: 'detached' });
  await page.locator('input[name="context-files"]').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from(notes) });
  await page.locator('input[name="context-folder"]').setInputFiles(join(dir, 'proj'));
  await listed.nth(2).waitFor();

  await page.locator('input[name="template-name"]').fill('console-ctx');
  await page
    .locator('textarea[name="dockerfile"]')
    .fill('FROM code-interpreter-v1\nCOPY app.py /opt/ctx/\nCOPY conf /opt/ctx/conf/\nCOPY notes.txt /opt/ctx/notes.txt\n');
  await page.getByRole('button', { name: 'Build template' }).click();
  await page.locator('.notice', { hasText: 'Template console-ctx is ready' }).waitFor();
  await page.locator('tr[data-template="console-ctx"] .state', { hasText: 'ready' }).waitFor();
  await shot(page, 'templates');

  // A sandbox of the template has the files, byte for byte.
  const sb = await api(server.admin, 'POST', '/v1/sandboxes', { template: 'console-ctx' });
  t.after(() => api(server.admin, 'DELETE', `/v1/sandboxes/${sb.sandbox_id}`).catch(() => {}));
  for (const [path, content] of [['/opt/ctx/app.py', app], ['/opt/ctx/conf/settings.ini', settings], ['/opt/ctx/notes.txt', notes]]) {
    const res = await fetch(`${server.url}/v1/sandboxes/${sb.sandbox_id}/files?path=${encodeURIComponent(path)}`, {
      headers: { authorization: `Bearer ${server.admin}` },
    });
    assert.equal(res.status, 200, path);
    assert.equal(await res.text(), content, path);
  }
  await api(server.admin, 'DELETE', `/v1/sandboxes/${sb.sandbox_id}`);

  // A COPY of a file that is not in the context: the build fails with the API's message.
  await page.locator('input[name="template-name"]').fill('console-ctx-missing');
  await page.locator('textarea[name="dockerfile"]').fill('FROM code-interpreter-v1\nCOPY missing.txt /opt/\n');
  await page.getByRole('button', { name: 'Build template' }).click();
  const refused = page.locator('.build-progress .error-box');
  await refused.waitFor();
  assert.equal(await refused.locator('.error-code').textContent(), 'invalid_dockerfile');
  assert.match(await refused.locator('.error-message').textContent(), /COPY missing\.txt/);
  assert.match(await page.locator('pre.build-log').textContent(), /no such file in the build context: missing\.txt/);

  // A context larger than the API takes is refused in the page: nothing is sent.
  await page.getByRole('button', { name: 'Clear' }).click();
  await writeFile(join(dir, 'big.bin'), randomBytes(65 << 20));
  await page.locator('input[name="context-files"]').setInputFiles(join(dir, 'big.bin'));
  await page.locator('.context-total', { hasText: '1 file, 65.0 MiB' }).waitFor();
  await page.locator('input[name="template-name"]').fill('console-ctx-big');
  const sent = [];
  page.on('request', (r) => r.method() === 'POST' && new URL(r.url()).pathname === '/v1/templates' && sent.push(r.url()));
  await page.getByRole('button', { name: 'Build template' }).click();
  await page.locator('.build-progress .error-box', { hasText: /the build context is [\d.]+ MiB as a tar\.gz: the API takes at most 64 MiB/ }).waitFor();
  assert.deepEqual(sent, []);
});

test('every call the console made is a route of the public API (its OpenAPI document), besides its own files', async () => {
  const doc = await (await fetch(`${server.url}/v1/openapi.json`)).json();
  const routes = Object.entries(doc.paths).map(([path, item]) => [
    new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`),
    new Set(Object.keys(item).map((m) => m.toUpperCase())),
  ]);
  const seen = new Set(calls.map(([m, p]) => `${m} ${p}`));
  assert.ok(seen.size > 20, [...seen].join('\n'));
  const own = (m, p) => m === 'GET' && (p === '/' || /^\/console\/[^/]+$/.test(p));
  const undocumented = [...seen].filter((c) => {
    const [m, p] = c.split(' ');
    return !own(m, p) && !routes.some(([re, methods]) => re.test(p) && methods.has(m));
  });
  assert.deepEqual(undocumented, []);
  // The native API only: none of E2B's routes.
  assert.deepEqual([...seen].filter((c) => !own(...c.split(' ')) && !c.split(' ')[1].startsWith('/v1/')), []);
});
