"""Typed errors: each API error code arrives as its exception class with the server's ``code`` and
``message``; argument errors the SDK can see are raised before any request is sent.

Failures inside user code are not exceptions and are not tested here (see ``test_lifecycle``).
"""

from __future__ import annotations

import builtins
import socket
import threading
import uuid
from typing import Any, Iterator

import httpx
import pytest

import lizard
import lizard._http
from lizard import (
    AsyncCodeSandbox,
    AuthenticationError,
    CodeSandbox,
    ConflictError,
    InvalidArgumentError,
    LizardError,
    NotFoundError,
    SandboxError,
)

from .conftest import PROJECT, Server


@pytest.fixture
def no_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the SDK sends anything over HTTP."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the SDK sent a request")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    monkeypatch.setattr(httpx.AsyncClient, "send", refuse)
    monkeypatch.setattr(lizard._http.Client, "send", refuse)


def test_bad_key_is_an_authentication_error(lizard_server: Server, sandbox: CodeSandbox) -> None:
    with pytest.raises(AuthenticationError) as e:
        CodeSandbox.create(project=PROJECT, api_key="lz_not_a_key")
    assert e.value.code == "unauthenticated"
    assert e.value.status == 401
    assert "API key" in e.value.message
    with pytest.raises(AuthenticationError):
        CodeSandbox.connect(sandbox.sandbox_id, api_key="lz_not_a_key")
    with pytest.raises(AuthenticationError):
        CodeSandbox(sandbox.sandbox_id, api_key="lz_not_a_key").run_code("1")


def test_missing_key_fails_before_any_request(
    lizard_server: Server, monkeypatch: pytest.MonkeyPatch, no_requests: None
) -> None:
    monkeypatch.delenv("LIZARD_API_KEY")
    with pytest.raises(AuthenticationError) as e:
        CodeSandbox.create(project=PROJECT)
    assert "LIZARD_API_KEY" in e.value.message


def test_unknown_sandbox_is_not_found(lizard_server: Server) -> None:
    with pytest.raises(NotFoundError) as e:
        CodeSandbox.connect("no-such-sandbox")
    assert (e.value.code, e.value.status) == ("not_found", 404)
    assert e.value.message == "sandbox not found"
    with pytest.raises(NotFoundError):
        CodeSandbox("no-such-sandbox").run_code("1")
    with pytest.raises(NotFoundError):
        CodeSandbox.create(project=PROJECT, template="no-such-template")


def test_context_and_language_together_fail_before_any_request(
    lizard_server: Server, no_requests: None
) -> None:
    sb = CodeSandbox("any-id")
    with pytest.raises(InvalidArgumentError) as e:
        sb.run_code("1", language="python", context="some-context")
    assert e.value.code == "invalid_argument"
    assert "context" in e.value.message and "language" in e.value.message


@pytest.mark.anyio
async def test_context_and_language_together_fail_before_any_request_async(
    lizard_server: Server, no_requests: None
) -> None:
    sb = AsyncCodeSandbox("any-id")
    with pytest.raises(InvalidArgumentError):
        await sb.run_code("1", language="python", context="some-context")


def test_server_side_invalid_requests(sandbox: CodeSandbox) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        sandbox.run_code("1", language="cobol")
    assert (e.value.code, e.value.status) == ("invalid_request", 400)
    assert "unknown language" in e.value.message
    with pytest.raises(InvalidArgumentError):
        sandbox.run_code("1", envs={"NOT-A-NAME": "x"})
    with pytest.raises(InvalidArgumentError):
        CodeSandbox.create(project="no spaces allowed")
    with pytest.raises(NotFoundError) as nf:
        sandbox.run_code("1", context="no-such-context")
    assert "context" in nf.value.message


def test_paused_sandbox_is_a_conflict(sandbox: CodeSandbox) -> None:
    sandbox.pause()
    with pytest.raises(ConflictError) as e:
        sandbox.run_code("1")
    assert (e.value.code, e.value.status) == ("conflict", 409)
    assert "paused" in e.value.message
    sandbox.resume()
    assert sandbox.run_code("print(1)").stdout == "1\n"


def test_a_project_key_does_not_see_other_projects(lizard_server: Server, sandbox: CodeSandbox) -> None:
    name = f"other-{uuid.uuid4().hex[:8]}"
    created = lizard_server.api("POST", "/v1/projects", {"name": name})
    assert created.status_code == 201, created.text
    key = created.json()["api_key"]
    with pytest.raises(NotFoundError):
        CodeSandbox.connect(sandbox.sandbox_id, api_key=key)
    with pytest.raises(NotFoundError):
        CodeSandbox.create(project=PROJECT, api_key=key)
    # Its own project works without naming it.
    with CodeSandbox.create(api_key=key) as own:
        assert own.get_info().project == name
        assert [s.sandbox_id for s in CodeSandbox.list(api_key=key)] == [own.sandbox_id]


def test_unreachable_server_is_a_sandbox_error(lizard_server: Server) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on `port` now.
    with pytest.raises(SandboxError) as e:
        CodeSandbox.create(project=PROJECT, api_url=f"http://127.0.0.1:{port}")
    assert e.value.code == "unavailable"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []

    def accept() -> None:
        while True:
            try:
                conns.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    srv.close()
    for c in conns:
        c.close()


def test_request_timeout_is_a_timeout_error(lizard_server: Server, silent_server: str) -> None:
    with pytest.raises(lizard.TimeoutError) as e:
        CodeSandbox.connect("x", api_url=silent_server, request_timeout=0.3)
    assert e.value.code == "timeout"
    assert isinstance(e.value, builtins.TimeoutError)


def test_hierarchy() -> None:
    for cls in (AuthenticationError, NotFoundError, InvalidArgumentError, ConflictError,
                SandboxError, lizard.TimeoutError, lizard.RateLimitError):
        assert issubclass(cls, LizardError)
    err = NotFoundError("sandbox not found", code="not_found", status=404)
    assert str(err) == "not_found: sandbox not found"
    assert (err.code, err.message, err.status) == ("not_found", "sandbox not found", 404)
