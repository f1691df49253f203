// Snapshots, clones and fork through the SDK against a real `lizard serve`: a snapshot of a
// sandbox with a Python variable, two clones from it that each have the variable and are
// independent of each other and of the source, `fork()`, `Snapshots.list/get/delete`, and another
// project's key getting the SDK's `NotFoundError` for every snapshot call.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createProject, startServer } from './helpers/server.js';
import { CodeSandbox, ConflictError, InvalidArgumentError, NotFoundError, Snapshots } from '../dist/index.js';

let server;

before(async () => {
  // The per-language capture, whose reports name each saved variable (CRIU, the server's default
  // where it is installed, is tested end to end in crates/lizard/tests/snapshots_exact.rs).
  server = await startServer(['--criu', 'none']);
});

after(async () => {
  await server?.stop();
});

const projectKey = (name) => createProject(server, name);

async function py(sb, code) {
  const ex = await sb.runCode(code);
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  return ex.stdout;
}

test('snapshot → two independent clones; list, get, delete; another project gets NotFound', async () => {
  const key = await projectKey('ts-snaps');
  const other = await projectKey('ts-snaps-other');
  const src = await CodeSandbox.create({ apiKey: key });
  const made = [src];
  try {
    await py(src, 'answer = 41 + 1\nimport os\nopen("/home/user/on-disk.txt", "w").write("disk")');
    const snap = await src.createSnapshot({ metadata: { purpose: 'ts-test' } });
    assert.match(snap.snapshotId, /^snap_/);
    assert.equal(snap.sandboxId, src.sandboxId);
    assert.equal(snap.project, 'ts-snaps');
    assert.equal(snap.method, 'per-language');
    assert.ok(snap.createdAt instanceof Date);
    assert.ok(snap.sizeBytes > 0);
    assert.equal(typeof snap.frozenMs, 'number');
    assert.deepEqual(snap.metadata, { purpose: 'ts-test' });
    const saved = snap.contexts.find((c) => c.language === 'python');
    assert.ok(saved.restored.some((i) => i.name === 'answer'), JSON.stringify(snap.contexts));

    // Two clones: one from the id, one from the SnapshotInfo.
    const a = await CodeSandbox.create({ apiKey: key, snapshot: snap.snapshotId, metadata: { clone: 'a' } });
    made.push(a);
    const b = await CodeSandbox.create({ apiKey: key, snapshot: snap });
    made.push(b);
    assert.notEqual(a.sandboxId, b.sandboxId);
    assert.ok(a.restoreReport.contexts.some((c) => c.restored.some((i) => i.name === 'answer')));
    assert.deepEqual((await a.getInfo()).metadata, { clone: 'a' });
    assert.equal(await py(a, 'print(answer)'), '42\n');
    assert.equal(await py(b, 'print(answer, open("/home/user/on-disk.txt").read())'), '42 disk\n');
    // Independent: a change in one is in neither the other nor the source.
    await py(a, 'answer = "changed in a"\nopen("/home/user/on-disk.txt", "w").write("a")');
    assert.equal(await py(b, 'print(answer, open("/home/user/on-disk.txt").read())'), '42 disk\n');
    assert.equal(await py(src, 'print(answer, open("/home/user/on-disk.txt").read())'), '42 disk\n');

    // Only timeoutMs / metadata / project go with a snapshot (checked before any request).
    await assert.rejects(CodeSandbox.create({ apiKey: key, snapshot: snap, template: 'x' }), InvalidArgumentError);
    await assert.rejects(CodeSandbox.create({ apiKey: key, snapshot: 42 }), InvalidArgumentError);

    // list / get.
    const listed = await Snapshots.list({ apiKey: key });
    assert.deepEqual(listed.map((s) => s.snapshotId), [snap.snapshotId]);
    assert.deepEqual((await Snapshots.list({ apiKey: key, sandboxId: a.sandboxId })), []);
    assert.equal((await Snapshots.get(snap.snapshotId, { apiKey: key })).sandboxId, src.sandboxId);

    // Another project's key: the same NotFoundError as an unknown id, for every call.
    assert.deepEqual(await Snapshots.list({ apiKey: other }), []);
    await assert.rejects(Snapshots.get(snap.snapshotId, { apiKey: other }), NotFoundError);
    await assert.rejects(CodeSandbox.create({ apiKey: other, snapshot: snap.snapshotId }), NotFoundError);
    assert.equal(await Snapshots.delete(snap.snapshotId, { apiKey: other }), false);
    await assert.rejects(Snapshots.get('snap_doesnotexist00000000', { apiKey: key }), NotFoundError);

    // delete: gone for get and for new clones; the clones made from it keep running.
    assert.equal(await Snapshots.delete(snap, { apiKey: key }), true);
    assert.equal(await Snapshots.delete(snap, { apiKey: key }), false);
    await assert.rejects(Snapshots.get(snap.snapshotId, { apiKey: key }), NotFoundError);
    await assert.rejects(CodeSandbox.create({ apiKey: key, snapshot: snap }), NotFoundError);
    assert.deepEqual(await Snapshots.list({ apiKey: key }), []);
    assert.equal(await py(b, 'print(answer)'), '42\n');
  } finally {
    for (const sb of made) await sb.kill().catch(() => {});
  }
});

test('fork: a running copy with the state; a hibernated source is a ConflictError', async () => {
  const src = await CodeSandbox.create();
  const made = [src];
  try {
    await py(src, 'items = [1, 2, 3]');
    const f = await src.fork({ metadata: { forked: 'yes' }, timeoutMs: 120_000 });
    made.push(f);
    assert.ok(f instanceof CodeSandbox);
    assert.notEqual(f.sandboxId, src.sandboxId);
    assert.equal(f.restoreReport.method, 'per-language');
    assert.ok(f.restoreReport.contexts.some((c) => c.restored.some((i) => i.name === 'items')));
    const info = await f.getInfo();
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { forked: 'yes' });
    await py(f, 'items.append(4)');
    assert.equal(await py(f, 'print(items)'), '[1, 2, 3, 4]\n');
    assert.equal(await py(src, 'print(items)'), '[1, 2, 3]\n');
    // A fork is not a kept snapshot.
    assert.deepEqual(await Snapshots.list({ sandboxId: src.sandboxId }), []);

    await src.hibernate();
    await assert.rejects(src.fork(), ConflictError);
    await assert.rejects(src.createSnapshot(), ConflictError);
    await assert.rejects(src.fork({ timeoutMs: -1 }), InvalidArgumentError);
  } finally {
    for (const sb of made) await sb.kill().catch(() => {});
  }
});
