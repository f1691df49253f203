// Persistent volumes through the SDK against a real `lizard serve`: create, mount with
// `CodeSandbox.create({ volumes })`, data outliving a killed sandbox, a read-only mount,
// `VolumeInUseError` and `force`, list/get/delete.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './helpers/server.js';
import { CodeSandbox, ConflictError, InvalidArgumentError, NotFoundError, Volumes, VolumeInUseError } from '../dist/index.js';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

test('a volume outlives its sandbox; read-only mounts; delete while mounted', async () => {
  const vol = await Volumes.create({ name: 'ts-data', sizeLimitBytes: 32 * 1024 * 1024 });
  assert.match(vol.volumeId, /^vol_/);
  assert.equal(vol.sizeLimitBytes, 32 * 1024 * 1024);
  assert.deepEqual(vol.mountedBy, []);
  await assert.rejects(Volumes.create({ name: 'ts-data' }), ConflictError);
  await assert.rejects(Volumes.create({ name: 'Bad Name' }), InvalidArgumentError);

  const a = await CodeSandbox.create({ volumes: ['ts-data'] });
  let b;
  try {
    const info = await a.getInfo();
    assert.deepEqual(info.volumes, [
      { volumeId: vol.volumeId, name: 'ts-data', mountPath: '/home/user/ts-data', readOnly: false },
    ]);
    await a.runCode("open('/home/user/ts-data/hello.txt', 'w').write('from a')");
    assert.deepEqual((await Volumes.get('ts-data')).mountedBy, [a.sandboxId]);
    await a.kill();

    b = await CodeSandbox.create({ volumes: [{ name: 'ts-data', mountPath: '/data', readOnly: true }] });
    assert.equal((await b.runCode("print(open('/data/hello.txt').read())")).stdout, 'from a\n');
    const denied = await b.runCode("try:\n    open('/data/x', 'w')\nexcept OSError as e:\n    print(e.errno)");
    assert.equal(denied.stdout, '30\n');

    const err = await Volumes.delete('ts-data').catch((e) => e);
    assert.ok(err instanceof VolumeInUseError, String(err));
    assert.ok(err instanceof ConflictError);
    assert.equal(err.code, 'volume_in_use');
    assert.equal(err.status, 409);

    assert.deepEqual(
      (await Volumes.list()).map((v) => v.name),
      ['ts-data'],
    );
    assert.equal(await Volumes.delete(vol.volumeId, { force: true }), true);
    assert.equal(await b.isRunning(), false);
    await assert.rejects(Volumes.get('ts-data'), NotFoundError);
    assert.equal(await Volumes.delete('ts-data'), false);
  } finally {
    await a.kill().catch(() => {});
    await b?.kill().catch(() => {});
  }
});

test('volume options are checked before any request', async () => {
  await assert.rejects(CodeSandbox.create({ volumes: 'x' }), InvalidArgumentError);
  await assert.rejects(CodeSandbox.create({ volumes: [{ mountPath: '/data' }] }), InvalidArgumentError);
  await assert.rejects(Volumes.get(''), InvalidArgumentError);
  // A mount path that would shadow a system directory is refused by the server.
  await Volumes.create({ name: 'ts-bad', sizeLimitBytes: 16 * 1024 * 1024 });
  await assert.rejects(CodeSandbox.create({ volumes: [{ name: 'ts-bad', mountPath: '/etc' }] }), InvalidArgumentError);
  assert.equal(await Volumes.delete('ts-bad'), true);
});
