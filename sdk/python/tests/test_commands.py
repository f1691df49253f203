"""``sandbox.commands``: processes run with ``POST /commands`` on a real server."""

from __future__ import annotations

import time

import pytest

import lizard
from lizard import CodeSandbox, CommandExitError, CommandHandle, CommandResult, NotFoundError


def test_run_returns_output_and_exit_code(sandbox: CodeSandbox) -> None:
    r = sandbox.commands.run("echo hello; echo oops >&2")
    assert isinstance(r, CommandResult)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hello\n", "oops\n")
    assert sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.commands.run('echo "$A-$B"', envs={"A": "x", "B": "y z"}).stdout == "x-y z\n"


def test_non_zero_exit_raises_command_exit_error(sandbox: CodeSandbox) -> None:
    with pytest.raises(CommandExitError) as info:
        sandbox.commands.run("echo out; echo err >&2; exit 3")
    e = info.value
    assert isinstance(e, lizard.LizardError)
    assert (e.exit_code, e.stdout, e.stderr) == (3, "out\n", "err\n")
    assert e.result == CommandResult("out\n", "err\n", 3)
    with pytest.raises(CommandExitError) as info:
        sandbox.commands.run("no-such-command-xyz")
    assert info.value.exit_code == 127
    assert "not found" in info.value.stderr


def test_streaming_callbacks_and_timeout(sandbox: CodeSandbox) -> None:
    out: list = []
    err: list = []
    sandbox.commands.run("for i in 1 2 3; do echo $i; echo e$i >&2; done", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "1\n2\n3\n"
    assert "".join(err) == "e1\ne2\ne3\n"
    with pytest.raises(lizard.TimeoutError):
        sandbox.commands.run("sleep 30", timeout_ms=300)


def test_background_wait_and_kill(sandbox: CodeSandbox) -> None:
    h = sandbox.commands.run("sleep 0.3; echo done", background=True)
    assert isinstance(h, CommandHandle) and h.pid > 0
    assert h.wait() == CommandResult("done\n", "", 0)

    h = sandbox.commands.run("sleep 60", background=True)
    assert h.pid in {p.pid for p in sandbox.commands.list() if p.running}
    assert h.kill() is True
    with pytest.raises(CommandExitError) as info:
        h.wait()
    assert info.value.exit_code == 128 + 9


def test_stdin(sandbox: CodeSandbox) -> None:
    h = sandbox.commands.run("cat", background=True, stdin=True)
    h.send_stdin("hello ")
    h.send_stdin(b"bytes\n")
    h.close_stdin()
    assert h.wait().stdout == "hello bytes\n"

    h = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    h.send_stdin("x\n")
    assert h.wait().stdout == "got:x\n"


def test_connect_and_list(sandbox: CodeSandbox) -> None:
    h = sandbox.commands.run("echo first; sleep 1; echo second", background=True)
    procs = {p.pid: p for p in sandbox.commands.list()}
    assert procs[h.pid].cmd == "echo first; sleep 1; echo second"
    chunks: list = []
    again = sandbox.commands.connect(h.pid, on_stdout=chunks.append)
    assert again.pid == h.pid
    r = again.wait()
    assert r.stdout == "first\nsecond\n"
    assert "".join(chunks) == "first\nsecond\n"
    with pytest.raises(NotFoundError):
        sandbox.commands.connect(999999)
    assert sandbox.commands.kill(999999) is False


def test_exec_is_not_raising(sandbox: CodeSandbox) -> None:
    assert sandbox.exec("exit 4") == ("", "", 4)
    t0 = time.monotonic()
    assert sandbox.commands.run("true").exit_code == 0
    assert time.monotonic() - t0 < 30
