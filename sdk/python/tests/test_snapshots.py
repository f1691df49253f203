"""Snapshots, clones and fork through the SDK against a real server (sync and async): a snapshot
of a sandbox with a Python variable, two clones that each have it and are independent of each
other and of the source, ``fork()``, ``Snapshots.list/get/delete``, and another project's key
getting ``NotFoundError`` for every snapshot call."""

from __future__ import annotations

import uuid

import pytest

from lizard import (
    AsyncCodeSandbox,
    AsyncSnapshots,
    CodeSandbox,
    ConflictError,
    ForkedContext,
    InvalidArgumentError,
    NotFoundError,
    SnapshotInfo,
    Snapshots,
)


def _out(sb: CodeSandbox, code: str) -> str:
    ex = sb.run_code(code)
    assert ex.error is None, ex.error
    return ex.stdout


def _restored(report) -> set:
    return {i.name for c in report.contexts for i in c.restored}


def test_snapshot_two_independent_clones_list_get_delete(lizard_server) -> None:
    name = f"py-snaps-{uuid.uuid4().hex[:8]}"
    key = lizard_server.project_key(name)
    other = lizard_server.project_key(f"{name}-other")
    with CodeSandbox.create(api_key=key) as src:
        _out(src, "answer = 41 + 1\nopen('/home/user/on-disk.txt', 'w').write('disk')")
        snap = src.create_snapshot(metadata={"purpose": "py-test"})
        assert isinstance(snap, SnapshotInfo)
        assert snap.snapshot_id.startswith("snap_")
        assert (snap.sandbox_id, snap.project, snap.method) == (src.sandbox_id, name, "per-language")
        assert snap.size_bytes > 0 and snap.created_at_ms > 0
        assert isinstance(snap.frozen_ms, int) and snap.frozen_ms >= 0
        assert snap.metadata == {"purpose": "py-test"}
        assert "answer" in _restored(snap), snap.contexts
        assert snap.limits.memory_mb > 0

        with CodeSandbox.create(snapshot=snap.snapshot_id, metadata={"clone": "a"}, api_key=key) as a, \
                CodeSandbox.create(snapshot=snap, api_key=key) as b:
            assert a.sandbox_id != b.sandbox_id
            assert a.restore_report is not None and "answer" in _restored(a.restore_report)
            assert a.get_info().metadata == {"clone": "a"}
            assert _out(a, "print(answer)") == "42\n"
            assert _out(b, "print(answer, open('/home/user/on-disk.txt').read())") == "42 disk\n"
            _out(a, "answer = 'changed in a'\nopen('/home/user/on-disk.txt', 'w').write('a')")
            assert _out(b, "print(answer, open('/home/user/on-disk.txt').read())") == "42 disk\n"
            assert _out(src, "print(answer, open('/home/user/on-disk.txt').read())") == "42 disk\n"

            # Only timeout_ms / metadata / project go with a snapshot (checked before any request).
            for bad in ({"template": "x"}, {"envs": {"A": "b"}}, {"limits": {"memory_mb": 512}}):
                with pytest.raises(InvalidArgumentError):
                    CodeSandbox.create(snapshot=snap, api_key=key, **bad)
            with pytest.raises(InvalidArgumentError):
                CodeSandbox.create(snapshot=42, api_key=key)  # type: ignore[arg-type]

            assert [s.snapshot_id for s in Snapshots.list(api_key=key)] == [snap.snapshot_id]
            assert Snapshots.list(sandbox_id=a.sandbox_id, api_key=key) == []
            assert Snapshots.get(snap.snapshot_id, api_key=key).sandbox_id == src.sandbox_id

            # Another project's key: the same NotFoundError as an unknown id.
            assert Snapshots.list(api_key=other) == []
            with pytest.raises(NotFoundError):
                Snapshots.get(snap, api_key=other)
            with pytest.raises(NotFoundError):
                CodeSandbox.create(snapshot=snap.snapshot_id, api_key=other)
            with pytest.raises(NotFoundError):
                src_other = CodeSandbox(src.sandbox_id, api_key=other)
                src_other.create_snapshot()
            assert Snapshots.delete(snap, api_key=other) is False
            with pytest.raises(NotFoundError):
                Snapshots.get("snap_doesnotexist00000000", api_key=key)

            # Deleted: gone for get and new clones; the clones made from it keep running.
            assert Snapshots.delete(snap, api_key=key) is True
            assert Snapshots.delete(snap.snapshot_id, api_key=key) is False
            with pytest.raises(NotFoundError):
                Snapshots.get(snap, api_key=key)
            with pytest.raises(NotFoundError):
                CodeSandbox.create(snapshot=snap, api_key=key)
            assert _out(b, "print(answer)") == "42\n"


def test_fork_and_refusals(sandbox: CodeSandbox) -> None:
    _out(sandbox, "items = [1, 2, 3]")
    with sandbox.fork(timeout_ms=120_000, metadata={"forked": "yes"}) as f:
        assert isinstance(f, CodeSandbox) and f.sandbox_id != sandbox.sandbox_id
        assert f.restore_report is not None and f.restore_report.method == "per-language"
        assert "items" in _restored(f.restore_report)
        info = f.get_info()
        assert info.state == "running" and info.metadata == {"forked": "yes"}
        _out(f, "items.append(4)")
        assert _out(f, "print(items)") == "[1, 2, 3, 4]\n"
        assert _out(sandbox, "print(items)") == "[1, 2, 3]\n"
    # A fork keeps no snapshot.
    assert Snapshots.list(sandbox_id=sandbox.sandbox_id) == []
    with pytest.raises(InvalidArgumentError):
        sandbox.fork(timeout_ms=-1)
    sandbox.hibernate()
    with pytest.raises(ConflictError):
        sandbox.fork()
    with pytest.raises(ConflictError):
        sandbox.create_snapshot()


@pytest.mark.anyio
async def test_async_snapshot_clone_fork(lizard_server) -> None:
    src = await AsyncCodeSandbox.create()
    made = [src]
    try:
        await src.run_code("word = 'async'")
        snap = await src.create_snapshot()
        clone = await AsyncCodeSandbox.create(snapshot=snap)
        made.append(clone)
        assert clone.restore_report is not None
        assert (await clone.run_code("print(word)")).stdout == "async\n"
        f = await src.fork()
        made.append(f)
        assert (await f.run_code("print(word)")).stdout == "async\n"
        assert [s.snapshot_id for s in await AsyncSnapshots.list(sandbox_id=src.sandbox_id)] == [snap.snapshot_id]
        assert (await AsyncSnapshots.get(snap.snapshot_id)).snapshot_id == snap.snapshot_id
        assert await AsyncSnapshots.delete(snap) is True
        assert await AsyncSnapshots.delete(snap) is False
        with pytest.raises(NotFoundError):
            await AsyncSnapshots.get(snap)
    finally:
        for sb in made:
            await sb.kill()


def test_fork_context_copies_the_live_kernel(sandbox: CodeSandbox) -> None:
    src = sandbox.create_context(language="python")
    sandbox.run_code("import threading\nsecret = 1\ndef f(): return secret * 10", context=src)
    fork = sandbox.fork_context(src)
    assert isinstance(fork, ForkedContext)
    assert (fork.forked_from, fork.language) == (src.id, "python")
    assert fork.id != src.id
    assert fork.execution_count == 1, "the fork continues from its source's count"
    sandbox.run_code("secret = 2", context=fork)
    assert sandbox.run_code("print(f())", context=fork).stdout == "20\n"
    assert sandbox.run_code("print(f())", context=src).stdout == "10\n"
    with pytest.raises(NotFoundError):
        sandbox.fork_context("no-such-context")
    sandbox.delete_context(fork)
    sandbox.delete_context(src)


def test_fork_context_without_criu_is_live_and_says_why(sandbox: CodeSandbox) -> None:
    """This server has no CRIU (``--criu none``): a fork that loses a thread is live, says what
    it lost and why it is not exact; ``exact=True`` is a ConflictError. (The exact fork itself:
    crates/lizard/tests/context_fork.rs.)"""
    src = sandbox.create_context(language="python")
    sandbox.run_code(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(120,), name='counter', daemon=True).start()",
        context=src,
    )
    fork = sandbox.fork_context(src)
    assert fork.method == "live"
    assert any("counter" in i.name for i in fork.lost), fork.lost
    assert fork.checkpoint_error and "criu none" in fork.checkpoint_error
    with pytest.raises(ConflictError):
        sandbox.fork_context(src, exact=True)
    assert sandbox.fork_context(src, exact=False).checkpoint_error is None


@pytest.mark.anyio
async def test_fork_context_async(lizard_server) -> None:
    sb = await AsyncCodeSandbox.create(project="sdk-tests")
    try:
        ctx = await sb.create_context(language="bash")
        await sb.run_code("X=kept", context=ctx)
        fork = await sb.fork_context(ctx, limits={"memory_mb": 128})
        assert fork.forked_from == ctx.id
        assert (await sb.run_code("echo $X", context=fork)).stdout == "kept\n"
    finally:
        await sb.kill()
