"""``exec``: one shell command → ``(stdout, stderr, exit_code)`` through a dedicated, persistent Bash
context.

The server has no commands API yet, so this also pins down how Bash statuses are read from
execution errors (``ExitCode``, ``KernelDied``).
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


def test_state_persists_between_commands_but_not_into_run_code(sandbox: CodeSandbox) -> None:
    sandbox.exec("cd /tmp && export GREETING=hi")
    assert sandbox.exec('pwd; echo "$GREETING"').stdout == "/tmp\nhi\n"
    # run_code's Bash default context is another shell.
    assert sandbox.run_code('pwd; echo "${GREETING:-unset}"', language="bash").stdout == "/home/user\nunset\n"
    exec_contexts = [c for c in sandbox.list_contexts() if c.language == "bash" and not c.is_default]
    assert len(exec_contexts) == 1


def test_envs_timeout_and_streaming(sandbox: CodeSandbox) -> None:
    assert sandbox.exec('echo "$ONLY_NOW"', envs={"ONLY_NOW": "x y"}).stdout == "x y\n"
    assert sandbox.exec('echo "${ONLY_NOW:-gone}"').stdout == "gone\n"
    chunks: list = []
    sandbox.exec("echo 1; echo 2", on_stdout=chunks.append)
    assert "".join(chunks) == "1\n2\n"
    with pytest.raises(lizard.TimeoutError):
        sandbox.exec("sleep 10", timeout_ms=300)
    assert sandbox.exec("echo after").stdout == "after\n"


def test_deleted_exec_context_is_recreated(sandbox: CodeSandbox) -> None:
    sandbox.exec("cd /tmp")
    other = CodeSandbox(sandbox.sandbox_id)  # deletes behind the first handle's back
    for ctx in other.list_contexts():
        other.delete_context(ctx.id)
    other.close()
    assert sandbox.exec("pwd") == ("/home/user\n", "", 0)
