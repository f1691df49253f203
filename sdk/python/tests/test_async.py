"""``AsyncCodeSandbox``: the seed in asyncio, sync and async callbacks while the cell runs,
concurrent runs, contexts, ``exec``, errors, pause/connect and ``async with`` killing on exit.

It does not repeat every sync case: both clients share ``lizard._core``, which the sync tests cover.
"""

from __future__ import annotations

import time
from typing import List, Tuple

import anyio
import pytest

from lizard import AsyncCodeSandbox, NotFoundError, Result

from .conftest import PROJECT, Server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lizard_server")]


async def test_seed_run_code() -> None:
    sandbox = await AsyncCodeSandbox.create(project="my-project")
    await sandbox.run_code("x = 42")
    result = await sandbox.run_code("print(x * 2)")
    assert result.stdout == "84\n"
    js = await sandbox.run_code("1 + 1", language="javascript")
    assert js.results[0].data == "2"
    assert (await sandbox.run_code('echo "$(uname -s)"', language="bash")).stdout == "Linux\n"
    assert await sandbox.kill() is True


async def test_async_and_sync_callbacks_stream_while_the_cell_runs() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        await sb.run_code("1")
        chunks: List[Tuple[float, str]] = []
        results: List[Result] = []

        async def on_stdout(s: str) -> None:
            await anyio.sleep(0)
            chunks.append((time.monotonic(), s))

        ex = await sb.run_code(
            "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')\n7",
            on_stdout=on_stdout,
            on_result=results.append,  # a plain function
        )
        returned = time.monotonic()
        assert "".join(s for _, s in chunks) == ex.stdout == "first\nsecond\n"
        assert returned - chunks[0][0] >= 0.7
        assert [r.data for r in results] == ["7"]


async def test_concurrent_runs_in_two_contexts() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        a = await sb.create_context(language="python")
        b = await sb.create_context(language="python")
        await sb.run_code("1", context=a)
        await sb.run_code("1", context=b)
        out = {}

        async def run(name: str, ctx: object) -> None:
            out[name] = await sb.run_code(f"import time; time.sleep(1); print('{name}')", context=ctx)  # type: ignore[arg-type]

        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", a)
            tg.start_soon(run, "b", b)
        elapsed = time.monotonic() - start
        assert elapsed < 1.8, elapsed  # in parallel (≈1 s), not one after the other (≈2 s)
        assert (out["a"].stdout, out["b"].stdout) == ("a\n", "b\n")

        await sb.run_code("secret = 1", context=a)
        r = await sb.run_code("print(secret)", context=b)
        assert r.error is not None and r.error.name == "NameError"
        assert {a.id, b.id} <= {c.id for c in await sb.list_contexts()}
        await sb.restart_context(a)
        assert (await sb.run_code("print(secret)", context=a)).error is not None
        await sb.delete_context(b)
        assert b.id not in {c.id for c in await sb.list_contexts()}


async def test_exec_pause_connect_and_errors() -> None:
    sb = await AsyncCodeSandbox.create(project=PROJECT)
    assert await sb.exec("echo hi; exit 5") == ("hi\n", "", 5)
    await sb.run_code("x = 42")
    await sb.pause()
    await sb.close()
    resumed = await AsyncCodeSandbox.connect(sb.sandbox_id)
    assert (await resumed.run_code("print(x)")).stdout == "42\n"
    info = await resumed.get_info()
    assert info.state == "running"
    assert sb.sandbox_id in {s.sandbox_id for s in await AsyncCodeSandbox.list(project=PROJECT)}
    await resumed.kill()
    with pytest.raises(NotFoundError):
        await AsyncCodeSandbox.connect(sb.sandbox_id)


async def test_hibernate_and_resume() -> None:
    sb = await AsyncCodeSandbox.create(project=PROJECT)
    await sb.run_code("kept = 'disk'")
    saved = await sb.hibernate()
    assert saved is not None and (await sb.get_info()).state == "hibernated"
    report = await sb.resume()
    assert report is not None and sb.restore_report is report
    assert "kept" in {i.name for c in report.contexts for i in c.restored}
    assert (await sb.run_code("print(kept)")).stdout == "disk\n"
    await sb.kill()


async def test_async_with_kills_on_exit(lizard_server: Server) -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        sid = sb.sandbox_id
    r = lizard_server.api("GET", f"/v1/sandboxes/{sid}")
    assert r.status_code == 404

    with pytest.raises(RuntimeError):
        async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
            sid = sb.sandbox_id
            raise RuntimeError("boom")
    assert lizard_server.api("GET", f"/v1/sandboxes/{sid}").status_code == 404


async def test_cancelling_a_run_interrupts_the_cell() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        await sb.run_code("1")
        with anyio.move_on_after(0.5):
            await sb.run_code("import time; time.sleep(30); late = 1")
        ex = await sb.run_code("print('late' in globals())", timeout_ms=20_000)
        assert ex.stdout == "False\n"
