"""``sandbox.pty``: programs on a pseudo-terminal (``POST /pty``) on a real server."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lizard import AsyncCodeSandbox, CodeSandbox, InvalidArgumentError, PtyHandle

from .conftest import PROJECT


class Screen:
    """Collects a terminal's output bytes from the reader thread."""

    def __init__(self) -> None:
        self.data = b""
        self._cond = threading.Condition()

    def __call__(self, chunk: bytes) -> None:
        assert isinstance(chunk, bytes)
        with self._cond:
            self.data += chunk
            self._cond.notify_all()

    def wait_for(self, needle: bytes, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while needle not in self.data:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{needle!r} not in terminal output {self.data[-500:]!r}")
                self._cond.wait(left)


def test_interactive_bash(sandbox: CodeSandbox) -> None:
    screen = Screen()
    term = sandbox.pty.create(cols=80, rows=24, on_data=screen)
    assert isinstance(term, PtyHandle) and term.pid > 0
    term.send_input("echo $((6*7))\r")
    screen.wait_for(b"42")

    term.resize(100, 40)
    term.send_input(b"stty size\r")
    screen.wait_for(b"40 100")

    term.send_input("exit 3\r")
    assert term.wait(timeout=30) == 3


def test_cmd_cwd_envs_and_kill(sandbox: CodeSandbox) -> None:
    screen = Screen()
    term = sandbox.pty.create(
        cols=50, rows=10, on_data=screen, cmd='echo "$X:$(pwd):$TERM:$(stty size)"; exec sleep 60',
        cwd="/tmp", envs={"X": "hi"},
    )
    screen.wait_for(b"hi:/tmp:xterm-256color:10 50")
    assert term.kill() is True
    assert term.wait(timeout=30) == 128 + 9
    with pytest.raises(InvalidArgumentError):
        sandbox.pty.create(cols=0)
    with pytest.raises(InvalidArgumentError):
        term.send_input(123)  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.usefixtures("lizard_server")
async def test_async_pty() -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT) as sb:
        data = bytearray()
        got = asyncio.Event()

        async def on_data(chunk: bytes) -> None:
            data.extend(chunk)
            got.set()

        async def wait_for(needle: bytes) -> None:
            async def loop() -> None:
                while needle not in data:
                    got.clear()
                    await got.wait()

            await asyncio.wait_for(loop(), 20)

        term = await sb.pty.create(cols=80, rows=24, on_data=on_data)
        assert term.pid > 0
        await term.send_input("echo $((6*7))\r")
        await wait_for(b"42")
        await term.resize(100, 40)
        await term.send_input("stty size\r")
        await wait_for(b"40 100")
        await term.send_input("exit 3\r")
        assert await asyncio.wait_for(term.wait(), 30) == 3
