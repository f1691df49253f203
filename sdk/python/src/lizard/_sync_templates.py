# generated from _async_templates.py by scripts/gen_sync.py; do not edit.
# Edit src/lizard/_async_templates.py (or _sync_support.py) and run `python scripts/gen_sync.py`.
"""The template calls (``/v1/templates``) of both clients, exported by ``lizard.templates``:
``AsyncTemplates`` in ``_async_templates.py``, the source, and ``Templates`` in
``_sync_templates.py``, which ``scripts/gen_sync.py`` generates from it.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Mapping, Optional, Tuple, Union

import httpx

from . import _core
from ._sync_volumes import _request
from ._core import DEFAULT_REQUEST_TIMEOUT, ClientConfig, Req
from .sandbox import _new_client, _stream_fold
from .errors import TimeoutError
from .models import TemplateBuildLog, TemplateBuildStep, TemplateInfo

__all__ = ["Templates"]

#: A build context: a directory (packed as a tar.gz), a tar archive's path, or a tar's bytes.
ContextLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
StepHandler = Callable[[TemplateBuildStep], Any]
LogHandler = Callable[[TemplateBuildLog], Any]


def _sandbox_id(sandbox: Any) -> str:
    sid = getattr(sandbox, "sandbox_id", sandbox)
    return sid if isinstance(sid, str) else ""


def _build_timeout(cfg: ClientConfig, timeout_ms: Optional[int]) -> httpx.Timeout:
    # A step may be silent for minutes (a big pip install): no read timeout unless the caller
    # gave the build a deadline.
    read = None if timeout_ms is None else timeout_ms / 1000.0
    return httpx.Timeout(cfg.request_timeout, read=read)


def _deadline_error(timeout_ms: int) -> TimeoutError:
    return TimeoutError(
        f"the template build took longer than {timeout_ms} ms (it goes on on the server unless "
        "cancel_on_disconnect)",
        code="timeout",
    )


def _deadline_check(timeout_ms: Optional[int]) -> Optional[Callable[[], None]]:
    """What the build stream checks after each event: ``TimeoutError`` once ``timeout_ms`` (from
    now) has passed; nothing without one."""
    if timeout_ms is None:
        return None
    ms = timeout_ms
    deadline = time.monotonic() + ms / 1000.0

    def check() -> None:
        if time.monotonic() > deadline:
            raise _deadline_error(ms)

    return check


def _stream_error(e: httpx.HTTPError, cfg: ClientConfig, timeout_ms: Optional[int]) -> Exception:
    """The error to raise for an httpx error of the build stream: a read timeout is the build's
    deadline when it has one."""
    if isinstance(e, httpx.TimeoutException) and timeout_ms is not None:
        return _deadline_error(timeout_ms)
    return _core.transport_error(e, cfg)


def _build_request(name: str, dockerfile: Optional[str], context: Optional[ContextLike],
                   build_args: Optional[Mapping[str, str]], project: Optional[str], public: bool,
                   cancel_on_disconnect: bool, from_sandbox: Any) -> Tuple[Optional[str], Req]:
    """``build``'s request, and the id of ``from_sandbox`` (``None`` for a Dockerfile build)."""
    sid = _sandbox_id(from_sandbox) if from_sandbox is not None else None
    req = _core.template_build_request(
        name, dockerfile=dockerfile, context=context, build_args=build_args, project=project,
        public=public, cancel_on_disconnect=cancel_on_disconnect, from_sandbox=sid,
    )
    return sid, req


class Templates:
    """User templates (synchronous). All methods are static: ``Templates.list()``."""

    @staticmethod
    def build(
        name: str,
        dockerfile: Optional[str] = None,
        context: Optional[ContextLike] = None,
        build_args: Optional[Mapping[str, str]] = None,
        project: Optional[str] = None,
        public: bool = False,
        on_step: Optional[StepHandler] = None,
        on_log: Optional[LogHandler] = None,
        cancel_on_disconnect: bool = False,
        from_sandbox: Any = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout_ms: Optional[int] = None,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> TemplateInfo:
        """Build the template ``name`` from ``dockerfile`` (its text) and return it ready.

        ``context`` is what ``COPY``/``ADD`` take: a directory (packed here as a tar.gz), a tar
        archive's path, or a tar's bytes (at most 64 MiB). ``build_args`` are the ``ARG`` values;
        ``project`` and ``public`` are for admin keys. The build is streamed: ``on_step`` gets a
        ``TemplateBuildStep`` as each step starts, ``on_log`` a ``TemplateBuildLog`` per chunk of
        output. A failed build raises ``TemplateBuildError`` (``code`` ``invalid_dockerfile`` or
        ``build_failed``, the message naming the line, ``log`` the output); a build of the same
        content as a ready one returns at once.

        ``timeout_ms`` bounds the whole call (``TimeoutError``). Leaving early (a timeout, a
        callback that raises) closes the stream; the build goes on on the server unless
        ``cancel_on_disconnect``.

        ``from_sandbox`` (a ``CodeSandbox``, an ``AsyncCodeSandbox`` or its id), instead of
        ``dockerfile``: a template of that sandbox's files (see ``from_sandbox``).
        """
        timeout_ms = _core._ms("timeout_ms", timeout_ms)
        sid, req = _build_request(
            name, dockerfile, context, build_args, project, public, cancel_on_disconnect, from_sandbox
        )
        if sid is not None:
            return TemplateInfo.from_wire(_request(req, api_url, api_key, request_timeout))
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        fold = _core.TemplateBuildFold()
        check = _deadline_check(timeout_ms)
        try:
            with _new_client(cfg) as client:
                _stream_fold(
                    client, req, _build_timeout(cfg, timeout_ms), fold, {"step": on_step, "log": on_log}, check=check
                )
        except httpx.HTTPError as e:
            raise _stream_error(e, cfg, timeout_ms) from e
        return fold.finish()

    @staticmethod
    def from_sandbox(
        name: str,
        sandbox: Any,
        project: Optional[str] = None,
        public: bool = False,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> TemplateInfo:
        """A template of a running or paused sandbox's files (a ``CodeSandbox``, an
        ``AsyncCodeSandbox`` or its id, of the same project): its writable layer, copied with its
        processes frozen (nothing of its memory), becomes a layer over its template. Returns the
        ready template."""
        return Templates.build(
            name, from_sandbox=sandbox, project=project, public=public,
            api_url=api_url, api_key=api_key, request_timeout=request_timeout,
        )

    @staticmethod
    def list(
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[TemplateInfo]:
        """The templates the key sees: its project's, the public ones and the built-ins (an admin
        key: every project's, unless ``project``)."""
        body = _request(_core.template_list_request(project), api_url, api_key, request_timeout) or {}
        return [TemplateInfo.from_wire(t) for t in body.get("templates") or []]

    @staticmethod
    def get(
        name: str,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> TemplateInfo:
        """One template (with its last build's log); ``NotFoundError`` if the key cannot see it."""
        req = _core.template_get_request(name, project)
        return TemplateInfo.from_wire(_request(req, api_url, api_key, request_timeout))

    @staticmethod
    def delete(
        name: str,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        """Delete a template of the project (sandboxes running on it keep working).
        ``NotFoundError`` if there is none, ``TemplateInUseError`` while another template is built
        on it, ``AuthenticationError`` (``permission_denied``) for a built-in."""
        _request(_core.template_delete_request(name, project), api_url, api_key, request_timeout)
