"""``exec``: one shell command → ``(stdout, stderr, exit_code)`` through ``POST /commands`` (a
fresh ``bash -c`` each time; the exit code comes from the stream's ``end`` event).
"""

from __future__ import annotations

import pytest

import lizard
from lizard import CodeSandbox, CommandResult


def test_output_and_exit_codes(sandbox: CodeSandbox) -> None:
    r = sandbox.exec("echo hello; echo oops >&2")
    assert isinstance(r, CommandResult)
    assert r == ("hello\n", "oops\n", 0)
    stdout, stderr, exit_code = sandbox.exec("false")
    assert (stdout, stderr, exit_code) == ("", "", 1)
    assert sandbox.exec("(exit 7)").exit_code == 7
    assert sandbox.exec("ls /no/such/dir").exit_code == 2
    assert sandbox.exec("no-such-command-xyz").exit_code == 127


def test_exit_ends_the_shell_and_the_next_command_gets_a_new_one(sandbox: CodeSandbox) -> None:
    assert sandbox.exec("echo bye; exit 3") == ("bye\n", "", 3)
    assert sandbox.exec("kill -9 $$").exit_code == 128 + 9
    assert sandbox.exec("echo again").stdout == "again\n"


def test_each_command_is_a_fresh_shell_outside_the_kernels(sandbox: CodeSandbox) -> None:
    sandbox.exec("cd /tmp && export GREETING=hi")
    assert sandbox.exec('pwd; echo "${GREETING:-unset}"').stdout == "/home/user\nunset\n"
    assert sandbox.run_code('pwd; echo "${GREETING:-unset}"', language="bash").stdout == "/home/user\nunset\n"
    # exec no longer makes a Bash context of its own.
    assert [c for c in sandbox.list_contexts() if c.language == "bash" and not c.is_default] == []


def test_envs_timeout_and_streaming(sandbox: CodeSandbox) -> None:
    assert sandbox.exec('echo "$ONLY_NOW"', envs={"ONLY_NOW": "x y"}).stdout == "x y\n"
    assert sandbox.exec('echo "${ONLY_NOW:-gone}"').stdout == "gone\n"
    chunks: list = []
    sandbox.exec("echo 1; echo 2", on_stdout=chunks.append)
    assert "".join(chunks) == "1\n2\n"
    with pytest.raises(lizard.TimeoutError):
        sandbox.exec("sleep 10", timeout_ms=300)
    assert sandbox.exec("echo after").stdout == "after\n"
