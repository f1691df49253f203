"""Unit tests of the I/O-free parts: frame folding, result formats, error mapping, exec's exit
codes and configuration. No server needed."""

from __future__ import annotations

import json

import pytest

import lizard
from lizard import (
    AuthenticationError,
    ConflictError,
    InvalidArgumentError,
    LizardError,
    NotFoundError,
    Result,
    SandboxError,
)
from lizard._core import ExecutionFold, execute_request, resolve_config
from lizard.errors import error_from_response
from lizard.models import ExecutionError

FRAMES = [
    {"seq": 0, "type": "start", "execution_count": 3, "context_id": "c1"},
    {"seq": 1, "type": "stdout", "text": "hel"},
    {"seq": 2, "type": "stderr", "text": "warn\n"},
    {"seq": 3, "type": "stdout", "text": "lo\n"},
    {"seq": 4, "type": "a_future_frame_type", "whatever": 1},
    {"seq": 5, "type": "result", "is_main_result": False, "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}},
    {"seq": 6, "type": "result", "is_main_result": True, "data": {"text/plain": "2", "text/html": "<b>2</b>"}},
    {"seq": 7, "type": "error", "name": "ValueError", "value": "bad", "traceback": "tb"},
    {"seq": 8, "type": "end", "status": "error", "duration_ms": 12, "usage": {"cpu_ms": 3, "peak_rss_bytes": 9}},
]


def fold(frames: list) -> tuple:
    f = ExecutionFold()
    events = [e for e in (f.feed_line(json.dumps(fr) + "\n") for fr in frames) if e is not None]
    return f, events


def test_fold_builds_the_execution_and_the_callback_events() -> None:
    f, events = fold(FRAMES)
    assert [k for k, _ in events] == ["stdout", "stderr", "stdout", "result", "result", "error"]
    ex = f.finish()
    assert (ex.stdout, ex.stderr, ex.output) == ("hello\n", "warn\n", "helwarn\nlo\n")
    assert ex.execution_count == 3 and ex.context_id == "c1"
    assert (ex.status, ex.duration_ms) == ("error", 12)
    assert ex.usage is not None and ex.usage.cpu_ms == 3
    assert ex.error == ExecutionError("ValueError", "bad", "tb")
    assert ex.error.message == "bad" and str(ex.error) == "ValueError: bad"
    assert ex.text == "2" and ex.main_result is ex.results[1]
    assert ex.formats() == ["text", "png", "html"]
    assert (ex.outputs.text, ex.outputs.png, ex.outputs.html) == ("2", "iVBOR", "<b>2</b>")
    assert not ex.success


def test_blank_lines_are_skipped_and_a_missing_end_is_an_error() -> None:
    f = ExecutionFold()
    assert f.feed_line("") is None and f.feed_line(b"\n") is None
    f.feed_line(json.dumps(FRAMES[0]))
    with pytest.raises(SandboxError):
        f.finish()
    with pytest.raises(SandboxError):
        ExecutionFold().feed_line("{not json")


def test_result_formats_and_data() -> None:
    r = Result({"text/plain": "x", "image/png": "AAA", "application/vnd.custom": 1}, is_main_result=True)
    assert r.formats() == ["text", "png", "application/vnd.custom"]
    assert r.data == "x" and r.extra == {"application/vnd.custom": 1}
    assert Result({"text/markdown": "# t"}).data == "# t"
    assert Result({"application/json": {"a": 1}}).data == '{"a": 1}'
    assert Result({"image/png": "AAA"}).data is None
    assert Result({"text/html": "<i>"})._repr_mimebundle_() == {"text/html": "<i>"}
    big = Result({"text/plain": "y" * 500, "image/png": "Z" * 10000})
    assert len(repr(big)) < 200


@pytest.mark.parametrize(
    "status,body,cls,code",
    [
        (404, b'{"code":"not_found","message":"sandbox not found"}', NotFoundError, "not_found"),
        (401, b'{"code":"unauthenticated","message":"no"}', AuthenticationError, "unauthenticated"),
        (400, b'{"code":"invalid_request","message":"no"}', InvalidArgumentError, "invalid_request"),
        (413, b'{"code":"payload_too_large","message":"no"}', InvalidArgumentError, "payload_too_large"),
        (409, b'{"code":"conflict","message":"paused"}', ConflictError, "conflict"),
        (429, b'{"code":"rate_limited","message":"slow"}', lizard.RateLimitError, "rate_limited"),
        (503, b'{"code":"unavailable","message":"x"}', SandboxError, "unavailable"),
        (500, b'{"code":"internal","message":"x"}', SandboxError, "internal"),
        (502, b"<html>bad gateway</html>", SandboxError, "http_502"),
        (404, b"", NotFoundError, "http_404"),
        (504, b"<html>gateway timeout</html>", lizard.TimeoutError, "http_504"),
        (408, b"", lizard.TimeoutError, "http_408"),
        (418, b'{"code":"a_new_code","message":"m"}', LizardError, "a_new_code"),
    ],
)
def test_error_mapping(status: int, body: bytes, cls: "type[LizardError]", code: str) -> None:
    e = error_from_response(status, body)
    assert type(e) is cls
    assert e.code == code and e.status == status and e.message


def test_execute_request_validation() -> None:
    with pytest.raises(InvalidArgumentError):
        execute_request("s", "1", language="python", context="c", envs=None, timeout_ms=None)
    with pytest.raises(InvalidArgumentError):
        execute_request("s", "1", language=None, context=None, envs=None, timeout_ms=0)
    req = execute_request("s/x", "1", language="js", context=None, envs={"A": 1}, timeout_ms=5)
    assert req.path == "/v1/sandboxes/s%2Fx/execute"
    assert req.json == {"code": "1", "language": "js", "env": {"A": "1"}, "timeout_ms": 5}


def test_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIZARD_API_URL", "127.0.0.1:9/")
    monkeypatch.setenv("LIZARD_API_KEY", " k ")
    cfg = resolve_config(None, None, 5)
    assert (cfg.api_url, cfg.api_key) == ("http://127.0.0.1:9", "k")
    assert resolve_config("https://h", "other", None).api_url == "https://h"
    monkeypatch.delenv("LIZARD_API_KEY")
    with pytest.raises(AuthenticationError):
        resolve_config(None, None, 5)
