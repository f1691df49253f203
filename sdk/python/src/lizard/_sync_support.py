"""What the synchronous client does its own way, under the names the asyncio client gets from
``_async_support`` (see there): ``sandbox.py`` is generated from ``async_sandbox.py`` by
``scripts/gen_sync.py`` and imports this module as ``_support``.

Background readers are daemon threads; the HTTP client is reopened under a lock because one
``CodeSandbox`` may be used from several threads; callbacks are plain functions.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, ContextManager, Optional, Sequence

import httpx

__all__ = ["READER_ERRORS", "Worker", "client_lock", "maybe_await", "open_after_init", "open_in_init"]

#: What a background reader reports through its handle's ``error``: anything that ends the
#: thread (a callback's exception included).
READER_ERRORS = BaseException


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

    def stop(self, resp: httpx.Response) -> None:
        """Stop reading: shut the socket of ``resp`` down (a blocked read returns at once) and wait
        for the worker to end, unless called from the worker itself."""
        try:
            stream = resp.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        if not self.is_current():
            self._thread.join(timeout=10)
