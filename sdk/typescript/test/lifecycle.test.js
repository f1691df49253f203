// Sandbox lifecycle through the SDK against a real `lizard serve`: pause + `CodeSandbox.connect`
// keeps kernel state, the seed's checkpoint flow with its pip install (which fails visibly: the
// sandboxes have no network), and kill / connect after kill. The two flows run concurrently.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './helpers/server.js';
import { CodeSandbox, ConflictError, NotFoundError } from '../src/index.js';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

describe('lifecycle', { concurrency: true }, () => {
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
