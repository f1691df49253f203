// Lizard's MCP server through the official MCP client SDK (npm @modelcontextprotocol/sdk, pinned in
// package.json), unmodified, against a real `lizard serve`: Streamable HTTP at /mcp and stdio
// (`lizard mcp`). Nothing is mocked: real sandboxes, real kernels.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BIN, REPO, startServer } from '../support/serve.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
let server;

before(async () => { server = await startServer(); });
after(async () => { await server?.stop(); });

const http = async (key) => {
  const client = new Client({ name: 'lizard-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  // Ending a session is the client's DELETE (the SDK's terminateSession), then close.
  client.end = async () => {
    await transport.terminateSession();
    await client.close();
  };
  return client;
};

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

/** The flows every transport must pass, on a connected client. */
async function flows(client) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  for (const t of ['create_context', 'create_sandbox', 'kill_sandbox', 'list_files', 'list_sandboxes', 'pause_sandbox',
    'read_file', 'resume_sandbox', 'run_code', 'run_command', 'write_file']) {
    assert.ok(names.includes(t), `${t} in ${names}`);
  }
  for (const t of tools) assert.ok(t.description.length > 20 && t.inputSchema.type === 'object', t.name);
  // State across calls, in the session's own sandbox.
  let r = await client.callTool({ name: 'run_code', arguments: { code: 'x = 41' } });
  assert.ok(!r.isError, text(r));
  r = await client.callTool({ name: 'run_code', arguments: { code: 'print("out"); x + 1' } });
  assert.match(text(r), /\[stdout\]\nout/);
  assert.match(text(r), /42/);
  // A chart comes back as an image.
  r = await client.callTool({
    name: 'run_code',
    arguments: { code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()' },
  });
  assert.ok(r.content.some((c) => c.type === 'image' && c.mimeType === 'image/png' && c.data.length > 100), JSON.stringify(r).slice(0, 300));
  // JavaScript and Bash.
  r = await client.callTool({ name: 'run_code', arguments: { code: 'const y = 6 * 7; y', language: 'javascript' } });
  assert.match(text(r), /42/);
  r = await client.callTool({ name: 'run_code', arguments: { code: 'echo "$((40 + 2))"', language: 'bash' } });
  assert.match(text(r), /42/);
  // A sandbox's huge output reaches the model cut, with a notice.
  r = await client.callTool({ name: 'run_code', arguments: { code: 'print("x" * 300_000)' } });
  assert.ok(text(r).length < 110_000, `${text(r).length} characters`);
  assert.match(text(r), /cut: \d+ more characters not shown/);
  // An error is a tool error with the traceback.
  r = await client.callTool({ name: 'run_code', arguments: { code: '1/0' } });
  assert.equal(r.isError, true);
  assert.match(text(r), /ZeroDivisionError/);
  // Streamed output arrives as progress notifications.
  const progress = [];
  r = await client.callTool(
    { name: 'run_code', arguments: { code: 'import time\nfor i in range(3):\n    print(f"tick {i}", flush=True)\n    time.sleep(0.2)' } },
    undefined,
    { onprogress: (p) => progress.push(p.message) },
  );
  assert.ok(progress.join('').includes('tick 2'), JSON.stringify(progress));
  // Cancelling interrupts the cell; the context keeps its state and runs again.
  const ac = new AbortController();
  const long = client.callTool({ name: 'run_code', arguments: { code: 'import time\ntime.sleep(60)' } }, undefined, { signal: ac.signal });
  setTimeout(() => ac.abort(), 1500);
  await assert.rejects(long);
  r = await client.callTool({ name: 'run_code', arguments: { code: 'x + 1' } });
  assert.match(text(r), /42/);
  // Files and commands.
  r = await client.callTool({ name: 'write_file', arguments: { path: '/home/user/mcp.txt', content: 'via MCP' } });
  assert.ok(!r.isError, text(r));
  r = await client.callTool({ name: 'read_file', arguments: { path: '/home/user/mcp.txt' } });
  assert.equal(text(r), 'via MCP');
  r = await client.callTool({ name: 'list_files', arguments: { path: '/home/user' } });
  assert.match(text(r), /mcp\.txt/);
  // The session sandbox's files are resources too.
  const { resources } = await client.listResources();
  const res = resources.find((x) => x.uri.endsWith('/files/home/user/mcp.txt'));
  assert.ok(res, JSON.stringify(resources));
  assert.match(res.uri, /^lizard:\/\/sandboxes\/[a-z0-9]+\/files\/home\/user\/mcp\.txt$/);
  const read = await client.readResource({ uri: res.uri });
  assert.equal(read.contents[0].text, 'via MCP');
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.equal(resourceTemplates[0].uriTemplate, 'lizard://sandboxes/{sandbox_id}/files/{path}');
  r = await client.callTool({ name: 'run_command', arguments: { command: 'cat /home/user/mcp.txt; exit 3' } });
  assert.equal(r.isError, true);
  assert.match(text(r), /exit code: 3/);
  assert.match(text(r), /via MCP/);
  // Pause and resume the session's sandbox: its kernels keep their state.
  const mine = JSON.parse(text(await client.callTool({ name: 'list_sandboxes', arguments: {} })))
    .filter((s) => s.metadata['lizard.mcp'] === 'session');
  assert.equal(mine.length, 1, JSON.stringify(mine));
  r = await client.callTool({ name: 'pause_sandbox', arguments: { sandbox_id: mine[0].sandbox_id } });
  assert.equal(JSON.parse(text(r)).state, 'paused');
  r = await client.callTool({ name: 'resume_sandbox', arguments: { sandbox_id: mine[0].sandbox_id } });
  assert.equal(JSON.parse(text(r)).state, 'running');
  r = await client.callTool({ name: 'run_code', arguments: { code: 'x + 1' } });
  assert.match(text(r), /42/);
}

test('Streamable HTTP at /mcp: tools, state, charts, languages, progress, cancel, files; keys scope it', { timeout: 300_000 }, async () => {
  // No key, or a wrong one: refused before any session.
  const anon = await fetch(`${server.url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(anon.status, 401);
  const key = await server.project('mcp-a');
  const client = await http(key);
  try {
    await flows(client);
    // A project key sees only its project: another project's sandbox is not found.
    const other = await http(await server.project('mcp-b'));
    const made = await other.callTool({ name: 'create_sandbox', arguments: {} });
    const otherId = JSON.parse(text(made)).sandbox_id;
    const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} });
    assert.ok(!text(listed).includes(otherId));
    const kill = await client.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: otherId } });
    assert.equal(kill.isError, true);
    assert.match(text(kill), /not_found/);
    await other.callTool({ name: 'kill_sandbox', arguments: { sandbox_id: otherId } });
    await other.end();
  } finally {
    await client.end();
  }
  // The session's own sandbox goes with the session.
  await sessionSandboxGone(key);
});

/** Wait (bounded) until the project of `key` has no running sandbox made by an MCP session. */
async function sessionSandboxGone(key) {
  for (let i = 0; i < 100; i++) {
    const r = await fetch(`${server.url}/v1/sandboxes?metadata=lizard.mcp=session`, { headers: { authorization: `Bearer ${key}` } });
    const live = (await r.json()).filter((s) => s.state !== 'killed');
    if (live.length === 0) return;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.fail('the MCP session sandbox was not killed when the session ended');
}

test('Streamable HTTP: X-Lizard-Keep-Sandbox keeps the session sandbox after the session', { timeout: 300_000 }, async () => {
  const key = await server.project('mcp-keep');
  const client = new Client({ name: 'lizard-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}`, 'X-Lizard-Keep-Sandbox': 'true' } },
  });
  await client.connect(transport);
  const r = await client.callTool({ name: 'run_code', arguments: { code: 'kept = 1' } });
  assert.ok(!r.isError, text(r));
  await transport.terminateSession();
  await client.close();
  // The session is gone; its sandbox is still running (give a kill, were it wrongly sent, time).
  await new Promise((ok) => setTimeout(ok, 500));
  const list = await (await fetch(`${server.url}/v1/sandboxes?metadata=lizard.mcp=session`, { headers: { authorization: `Bearer ${key}` } })).json();
  assert.deepEqual(list.map((s) => s.state), ['running']);
});

test('stdio (`lizard mcp`): the same flows; the session sandbox is killed when the client leaves', { timeout: 300_000 }, async () => {
  const key = await server.project('mcp-stdio');
  const client = new Client({ name: 'lizard-test', version: '1.0.0' });
  await client.connect(new StdioClientTransport({
    command: BIN,
    args: ['mcp'],
    env: { ...process.env, LIZARD_API_URL: server.url, LIZARD_API_KEY: key },
  }));
  await flows(client);
  const listed = await client.callTool({ name: 'list_sandboxes', arguments: {} });
  const ids = JSON.parse(text(listed)).map((s) => s.sandbox_id);
  assert.equal(ids.length, 1);
  await client.close();
  await sessionSandboxGone(key);
});

test('the official Python client (PyPI mcp): both transports, the same flows', { timeout: 300_000 }, async () => {
  const python = process.env.LIZARD_MCP_PYTHON || join(REPO, 'target/mcp-venv/bin/python');
  const key = await server.project('mcp-py');
  const otherKey = await server.project('mcp-py-other');
  const r = await new Promise((ok) => {
    const p = spawn(python, [join(HERE, 'client.py')], {
      env: { ...process.env, LIZARD_API_URL: server.url, LIZARD_API_KEY: key, LIZARD_OTHER_KEY: otherKey, LIZARD_BIN: BIN },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr = (stderr + d).slice(-32 * 1024); });
    p.on('exit', (code) => ok({ code, stdout, stderr }));
  });
  const detail = `client.py exited ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}\n--- server log\n${server.log()}`;
  assert.equal(r.code, 0, detail);
  assert.deepEqual(r.stdout.trim().split('\n'), ['ok http', 'ok scoped', 'ok stdio', 'done'], detail);
});
