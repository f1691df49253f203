// Sandbox lifecycle through the SDK against a real `lizard serve`: pause + `CodeSandbox.connect`
// keeps kernel state, `onTimeout: 'pause'` (a passed timeout pauses the sandbox), the seed's
// checkpoint flow with its pip install (which fails visibly: the sandboxes have no network by
// default), kill / connect after kill, and an egress allow-list. The flows run concurrently.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { greeter, startServer } from './helpers/server.js';
import { CodeSandbox, ConflictError, InvalidArgumentError, NotFoundError } from '../dist/index.js';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

describe('lifecycle', { concurrency: true }, () => {
  test('egress: an allow-list reaches its server only; the default is loopback only', async () => {
    const srv = await greeter();
    const { ip, port } = srv;
    // A request, then the answer: the host's egress relay accepts every redirected connection and
    // decides once it has read the first bytes, so a bare connect() would succeed either way.
    const probe = (p) =>
      `import socket\ntry:\n    s = socket.create_connection(('${ip}', ${p}), timeout=3)\n` +
      `    s.sendall(b'GET / HTTP/1.0\\r\\nHost: ${ip}\\r\\n\\r\\n')\n` +
      `    print('ok' if s.recv(2) == b'hi' else 'no')\nexcept OSError: print('no')`;
    const open = await CodeSandbox.create({ project: 'my-project', egress: [`${ip}:${port}`], limits: { diskMb: 2048 } });
    const closed = await CodeSandbox.create({ project: 'my-project' });
    try {
      assert.equal((await open.getInfo()).limits.diskMb, 2048);
      assert.equal((await open.runCode(probe(port))).stdout, 'ok\n');
      assert.equal((await open.runCode(probe(port === 65535 ? 1 : port + 1))).stdout, 'no\n');
      assert.equal((await closed.runCode(probe(port))).stdout, 'no\n');
      await assert.rejects(CodeSandbox.create({ project: 'my-project', egress: 7 }), InvalidArgumentError);
    } finally {
      await open.kill();
      await closed.kill();
      srv.close();
    }
  });

  test('pause + connect keeps x (Python and JavaScript state)', async () => {
    const sandbox = await CodeSandbox.create({ project: 'my-project' });
    try {
      await sandbox.runCode('x = 42');
      await sandbox.runCode('const y = "kept"', { language: 'javascript' });
      const id = sandbox.sandboxId;
      const paused = await sandbox.pause();
      assert.equal(paused.state, 'paused');
      assert.equal((await sandbox.getInfo()).state, 'paused');
      await assert.rejects(sandbox.runCode('x'), ConflictError);

      const resumed = await CodeSandbox.connect(id);
      assert.equal(resumed.sandboxId, id);
      assert.equal((await resumed.getInfo()).state, 'running');
      assert.equal((await resumed.runCode('print(x)')).stdout, '42\n');
      assert.equal((await resumed.runCode('y', { language: 'javascript' })).results[0].data, "'kept'");

      // connect to a running sandbox just attaches; resume is idempotent.
      const again = await CodeSandbox.connect(id);
      await again.resume();
      assert.equal((await again.runCode('x + 1')).results[0].data, '43');
    } finally {
      await sandbox.kill();
    }
  });

  test("onTimeout: 'pause' pauses the sandbox when its timeout passes (it is not killed)", async () => {
    await assert.rejects(CodeSandbox.create({ project: 'my-project', onTimeout: 'sleep' }), InvalidArgumentError);
    const sandbox = await CodeSandbox.create({ project: 'my-project', onTimeout: 'pause', timeoutMs: 2000 });
    try {
      assert.equal((await sandbox.getInfo()).onTimeout, 'pause');
      // Wait (bounded) for the server to act on the passed timeout.
      let info = await sandbox.getInfo();
      for (let i = 0; i < 240 && info.state === 'running'; i++) {
        await new Promise((r) => setTimeout(r, 250));
        info = await sandbox.getInfo();
      }
      assert.equal(info.state, 'paused');
      assert.equal(info.onTimeout, 'pause');
      assert.ok(info.timeoutAt.getTime() <= Date.now(), `${info.timeoutAt.toISOString()}`);
      await assert.rejects(sandbox.runCode('1'), ConflictError);
    } finally {
      await sandbox.kill();
    }
  });

  test('checkpoint flow: pip fails visibly without network, pause, connect, kill', async () => {
    const sandbox = await CodeSandbox.create({ project: 'my-project' });
    let killed = false;
    try {
      const stderr = [];
      const pip = await sandbox.runCode('import subprocess; subprocess.run(["pip", "install", "scikit-learn"])', {
        onStderr: (s) => stderr.push(s),
      });
      // The run itself succeeds whatever pip does; pip's own output reaches the cell's streams.
      assert.equal(pip.error, undefined);
      const preinstalled = /Requirement already satisfied: scikit-learn/.test(pip.output);
      if (!preinstalled) {
        // No network in sandboxes: the failure is visible, live, on stderr.
        assert.ok(stderr.length > 0);
        assert.match(pip.stderr, /No matching distribution found for scikit-learn|name resolution|Network is unreachable/);
        assert.match(pip.text, /returncode=1/);
      }

      const id = sandbox.sandboxId;
      await sandbox.pause();
      const resumed = await CodeSandbox.connect(id);
      const out = await resumed.runCode('import sklearn; print(sklearn.__version__)');
      if (preinstalled) {
        assert.match(out.stdout, /^\d+\.\d+/);
      } else {
        assert.equal(out.stdout, '');
        assert.equal(out.error?.name, 'ModuleNotFoundError');
      }

      assert.equal(await resumed.kill(), true);
      killed = true;
      assert.equal(await resumed.kill(), false, 'a second kill finds nothing');
      await assert.rejects(CodeSandbox.connect(id), NotFoundError);
      assert.equal(await resumed.isRunning(), false);
    } finally {
      if (!killed) await sandbox.kill();
    }
  });
});
