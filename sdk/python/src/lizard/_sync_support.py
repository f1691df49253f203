"""What the synchronous client does its own way, under the names the asyncio client gets from
``_async_support`` (see there): ``sandbox.py`` is generated from ``async_sandbox.py`` by
``scripts/gen_sync.py`` and imports this module as ``_support``.

Background readers are daemon threads; the HTTP client is reopened under a lock because one
``CodeSandbox`` may be used from several threads; callbacks are plain functions. Requests go over
the SDK's own HTTP/1.1 over a socket (``lizard._http``, keep-alive connections pooled per
client), not httpx, which costs more per call than the rest of a warm ``run_code`` on the client
(issue #24). httpx is used instead when a proxy is configured (``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, which httpx honours and ``lizard._http`` does not) or when
``LIZARD_SDK_TRANSPORT=httpx``.
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.request
from typing import Any, Callable, ContextManager, Optional, Sequence, Union
from urllib.parse import urlsplit

import httpx

from . import _http
from ._core import ClientConfig

__all__ = [
    "READER_ERRORS", "Client", "Request", "Response", "Worker", "client_lock", "maybe_await", "new_client",
    "open_after_init", "open_in_init",
]

#: The HTTP client the sandbox talks through, and its requests and responses (see ``new_client``).
Client = Union[_http.Client, httpx.Client]
Request = Union[_http.Request, httpx.Request]
Response = Union[_http.Response, httpx.Response]

#: What a background reader reports through its handle's ``error``: anything that ends the
#: thread (a callback's exception included).
READER_ERRORS = BaseException


def use_httpx(api_url: str) -> bool:
    """Whether requests to ``api_url`` go through httpx: ``LIZARD_SDK_TRANSPORT=httpx``, or a
    proxy configured for its scheme (what httpx reads: ``urllib.request.getproxies()``, ``no_proxy``
    left to httpx)."""
    if os.environ.get("LIZARD_SDK_TRANSPORT", "").strip().lower() == "httpx":
        return True
    proxies = urllib.request.getproxies()
    return bool(proxies.get(urlsplit(api_url).scheme) or proxies.get("all"))


def new_client(cfg: ClientConfig) -> Client:
    """A client for the API at ``cfg.api_url`` with its headers and timeout: ``lizard._http``'s,
    or httpx's (``use_httpx``)."""
    if use_httpx(cfg.api_url):
        return httpx.Client(base_url=cfg.api_url, headers=cfg.headers(), timeout=cfg.timeout())
    return _http.Client(cfg.api_url, cfg.headers(), cfg.timeout())


def client_lock() -> ContextManager[Any]:
    """Guards (re)opening the HTTP client, which several threads may do at once."""
    return threading.Lock()


def maybe_await(ret: Any) -> None:
    """A callback's return value: ignored (a sync callback is a plain function)."""


def open_in_init(handle: Any) -> None:
    """Called by a handle's ``__init__``: opens the handle's stream there (``handle._open()``), so
    constructing the handle is what starts it, as it always was."""
    handle._open()


def open_after_init(handle: Any) -> None:
    """Nothing: ``open_in_init`` opened the stream already."""


def _socket(resp: Response) -> Optional[socket.socket]:
    if isinstance(resp, _http.Response):
        return resp.socket
    stream = resp.extensions.get("network_stream")
    return stream.get_extra_info("socket") if stream is not None else None


class Worker:
    """Runs ``fn(*args)`` (a function reading a stream) in a daemon thread."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], name: str) -> None:
        self._thread = threading.Thread(target=fn, args=tuple(args), name=name, daemon=True)
        self._thread.start()

    def is_current(self) -> bool:
        """Whether the caller runs in the worker (a callback of the stream)."""
        return threading.current_thread() is self._thread

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the worker to end; ``False`` when ``timeout`` seconds passed first (it keeps
        running)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, resp: Response) -> None:
        """Stop reading: shut the socket of ``resp`` down (a blocked read returns at once) and wait
        for the worker to end, unless called from the worker itself."""
        try:
            sock = _socket(resp)
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        if not self.is_current():
            self._thread.join(timeout=10)
