"""Typed exceptions of the Lizard SDK, and the mapping from an API error response to them.

Every non-2xx response of the Lizard API has the body ``{"code": "...", "message": "..."}``; the
``code`` picks the exception class and both fields are kept on the exception. Failures that never
reached the API (no API key, an unreachable server, a client-side timeout) use the same classes with
an SDK-made ``code``.

This module does not raise anything by itself and does no I/O: it only defines the classes and turns
a status code plus body bytes into an exception object. A failure *inside the code you run* (an
exception, a non-zero Bash status) is not one of these: it is ``Execution.error``.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, Dict, Optional, Type

from . import _error_table

__all__ = [
    "LizardError",
    "AuthenticationError",
    "NotFoundError",
    "InvalidArgumentError",
    "ConflictError",
    "RateLimitError",
    "TimeoutError",
    "SandboxError",
    "TemplateBuildError",
    "TemplateInUseError",
    "CommandExitError",
    "error_from_response",
]


class LizardError(Exception):
    """Base class of every error the SDK raises.

    ``code`` is the API's machine-readable error code (``not_found``, ``unauthenticated``, …) or, for
    failures found before or outside the API, an SDK code (``timeout``, ``unavailable``,
    ``invalid_argument``). ``message`` is for humans. ``status`` is the HTTP status, when there was
    a response.
    """

    def __init__(self, message: str, *, code: str = "error", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, status={self.status!r})"


class AuthenticationError(LizardError):
    """Missing or unknown API key (``unauthenticated``, HTTP 401)."""


class NotFoundError(LizardError):
    """The sandbox, context, template, volume or project does not exist or is not visible to this key
    (``not_found``, HTTP 404)."""


class InvalidArgumentError(LizardError):
    """The request was rejected as malformed (``invalid_request``, ``payload_too_large``,
    ``unsupported_media_type``), or the SDK found it invalid before sending it (for example both
    ``context`` and ``language`` given to ``run_code``)."""


class ConflictError(LizardError):
    """The request conflicts with the object's state, e.g. running code in a paused sandbox
    (``conflict``, HTTP 409)."""


class VolumeInUseError(ConflictError):
    """The volume is mounted by a running or paused sandbox (``volume_in_use``, HTTP 409); delete
    it with ``force=True`` to kill those sandboxes first."""


class TemplateInUseError(ConflictError):
    """Another template is built on this one (``template_in_use``, HTTP 409): delete that one
    first."""


class TemplateBuildError(LizardError):
    """A template build failed: the Dockerfile is invalid (``invalid_dockerfile``, found before the
    build or late, e.g. a ``COPY`` source missing from the context; the message names the line) or
    a step failed (``build_failed``, naming its line). ``log`` is the build's output the client
    received (its last 1 MiB; empty when nothing was built)."""

    def __init__(
        self, message: str, *, code: str = "build_failed", status: Optional[int] = None, log: str = ""
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.log = log


class RateLimitError(LizardError):
    """Too many requests (``rate_limited``, HTTP 429)."""


class TimeoutError(LizardError, builtins.TimeoutError):
    """A request did not finish within the client's ``request_timeout``, or ``exec`` ran past its
    ``timeout_ms`` (also ``commands.run``). Also a built-in ``TimeoutError``, so ``except TimeoutError`` catches it either way.

    A ``run_code`` cell that passes its ``timeout_ms`` is not raised: the returned ``Execution`` has
    ``status == "timeout"`` and an ``error``, and the kernel keeps its state.
    """


class SandboxError(LizardError):
    """The sandbox or the server failed: a kernel or sandbox could not be started or reached
    (``unavailable``), an internal server error (``internal``), an unreachable server, or a stream
    that ended without its ``end`` frame."""


class CommandExitError(LizardError):
    """``commands.run`` (or a handle's ``wait``) saw the command exit with a non-zero status.
    ``result`` is its ``CommandResult``; ``exit_code``, ``stdout`` and ``stderr`` are shortcuts."""

    def __init__(self, result: Any) -> None:
        super().__init__(f"the command exited with code {result.exit_code}", code="command_exit")
        self.result = result

    @property
    def exit_code(self) -> int:
        return int(self.result.exit_code)

    @property
    def stdout(self) -> str:
        return str(self.result.stdout)

    @property
    def stderr(self) -> str:
        return str(self.result.stderr)


# The mapping both SDKs share (``sdk/errors.json``, generated into ``_error_table``), by class name.
_CLASSES: Dict[str, Type[LizardError]] = {
    c.__name__: c
    for c in (InvalidArgumentError, AuthenticationError, NotFoundError, ConflictError,
              VolumeInUseError, TemplateInUseError, TemplateBuildError, RateLimitError,
              TimeoutError, SandboxError)
}
_BY_CODE: Dict[str, Type[LizardError]] = {c: _CLASSES[n] for c, n in _error_table.BY_CODE.items()}
_BY_STATUS: Dict[int, Type[LizardError]] = {
    s: _CLASSES[n] for s, n in _error_table.BY_STATUS.items()
}


def error_from_response(status: int, body: bytes) -> LizardError:
    """The exception for a non-2xx response: by the body's ``code`` when it is an ``ErrorBody``, by
    the HTTP status otherwise (a proxy in front of Lizard may answer with HTML)."""
    code: Optional[str] = None
    message: Optional[str] = None
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict):
            if isinstance(parsed.get("code"), str):
                code = parsed["code"]
            if isinstance(parsed.get("message"), str):
                message = parsed["message"]
    except ValueError:
        pass
    if message is None:
        text = body.decode("utf-8", "replace").strip()
        message = text[:500] if text else f"HTTP {status}"
    cls: Type[LizardError]
    if code is not None and code in _BY_CODE:
        cls = _BY_CODE[code]
    else:
        cls = _BY_STATUS.get(status, SandboxError if status >= 500 else LizardError)
    return cls(message, code=code or f"http_{status}", status=status)
