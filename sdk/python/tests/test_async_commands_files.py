"""``commands`` and ``files`` of ``AsyncCodeSandbox``."""

from __future__ import annotations

import asyncio

import pytest

from lizard import AsyncCodeSandbox, AsyncCommandHandle, CommandExitError, CommandResult

from .conftest import PROJECT

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lizard_server")]


async def test_async_commands() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        chunks: list = []

        async def on_stdout(text: str) -> None:
            chunks.append(text)

        r = await sb.commands.run("echo a; echo b >&2", on_stdout=on_stdout)
        assert r == CommandResult("a\n", "b\n", 0) and chunks == ["a\n"]
        with pytest.raises(CommandExitError) as info:
            await sb.commands.run("exit 9")
        assert info.value.exit_code == 9
        assert await sb.exec("echo x; exit 2") == ("x\n", "", 2)

        h = await sb.commands.run("cat", background=True, stdin=True)
        assert isinstance(h, AsyncCommandHandle)
        await h.send_stdin("piped\n")
        await h.close_stdin()
        assert (await h.wait()).stdout == "piped\n"

        h = await sb.commands.run("sleep 60", background=True)
        assert h.pid in {p.pid for p in await sb.commands.list()}
        again = await sb.commands.connect(h.pid)
        assert await again.kill() is True
        with pytest.raises(CommandExitError):
            await again.wait()


async def test_async_files_and_watch() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        await sb.files.write("x/t.txt", "text")
        await sb.files.write("x/b.bin", b"\x00\xff")
        assert await sb.files.read("x/t.txt") == "text"
        assert await sb.files.read("x/b.bin", format="bytes") == b"\x00\xff"
        assert b"".join([c async for c in await sb.files.read("x/b.bin", format="stream")]) == b"\x00\xff"
        assert [e.name for e in await sb.files.list("x")] == ["b.bin", "t.txt"]
        assert await sb.files.exists("x/t.txt")
        assert await sb.files.make_dir("x") is False
        await sb.files.rename("x/t.txt", "x/u.txt")
        assert (await sb.files.get_info("x/u.txt")).size == 4
        await sb.files.remove("x/u.txt")
        assert not await sb.files.exists("x/u.txt")

        got = asyncio.Event()
        events: list = []

        async def on_event(ev: object) -> None:
            events.append(ev)
            got.set()

        handle = await sb.files.watch_dir("x", on_event)
        await sb.files.write("x/new.txt", "n")
        await asyncio.wait_for(got.wait(), 10)
        await handle.stop()
        assert any(e.type == "create" and e.name == "new.txt" for e in events)
