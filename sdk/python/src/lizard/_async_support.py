"""What the asyncio client does its own way, under the names the sync client gets from
``_sync_support``.

``async_sandbox.py`` is the source of both clients: ``scripts/gen_sync.py`` derives ``sandbox.py``
from it with ``unasync`` (``await`` and ``async`` dropped, ``Async*`` names renamed), which turns
``from . import _async_support as _support`` into ``from . import _sync_support as _support``.
What cannot be derived that way — a background reader is an asyncio task here and a daemon thread
there, the HTTP client needs a lock only when shared between threads, a callback may be a
coroutine only here — is behind the names of this module, which ``_sync_support`` defines the
same way for the sync client. That includes the HTTP client: httpx's ``AsyncClient`` here, the
SDK's own HTTP/1.1 over a socket (``lizard._http``) there.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, Callable, ContextManager, Optional, Sequence

import httpx

from ._core import ClientConfig

__all__ = [
    "READER_ERRORS", "Client", "Request", "Response", "Worker", "client_lock", "maybe_await", "new_client",
    "open_after_init", "open_in_init",
]

#: The HTTP client the sandbox talks through, and its requests and responses.
Client = httpx.AsyncClient
Request = httpx.Request
Response = httpx.Response

#: What a background reader reports through its handle's ``error`` (``stop()`` cancels the task:
#: ``CancelledError`` is not one of them).
READER_ERRORS = Exception


def new_client(cfg: ClientConfig) -> Client:
    """A client for the API at ``cfg.api_url`` with its headers and timeout."""
    return httpx.AsyncClient(base_url=cfg.api_url, headers=cfg.headers(), timeout=cfg.timeout())


def client_lock() -> ContextManager[Any]:
    """Guards (re)opening the HTTP client. One event loop runs the client's coroutines and the
    guarded code does not await: nothing to lock."""
    return contextlib.nullcontext()


async def maybe_await(ret: Any) -> None:
    """A callback's return value: awaited when it is awaitable (a coroutine function's)."""
    if inspect.isawaitable(ret):
        await ret


def open_in_init(handle: Any) -> None:
    """Called by a handle's ``__init__``: an ``__init__`` cannot await, so ``open_after_init``
    opens the handle's stream instead."""


async def open_after_init(handle: Any) -> None:
    """Open the stream of a handle just made (``handle._open()``)."""
    await handle._open()


class Worker:
    """Runs ``fn(*args)`` (a coroutine function reading a stream) in an asyncio task."""

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(fn(*args), name=name)

    def is_current(self) -> bool:
        """Whether the caller runs in the worker (a callback of the stream)."""
        try:
            return asyncio.current_task() is self._task
        except RuntimeError:
            return False

    async def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the worker to end; ``False`` when ``timeout`` seconds passed first (it keeps
        running). Cancelling the caller does not cancel the worker; a worker ended by ``stop()``
        has ended (``True``), its cancellation is not the caller's."""
        try:
            if timeout is None:
                await asyncio.shield(self._task)
            else:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.TimeoutError:
            return False
        except asyncio.CancelledError:
            if not self._task.cancelled():
                raise  # the caller is being cancelled
        return True

    async def stop(self, resp: Response) -> None:
        """Stop reading (the task is cancelled; its ``finally`` closes ``resp``) and wait for the
        worker to end, unless called from the worker itself."""
        if not self._task.done():
            self._task.cancel()
        if self.is_current():
            return
        try:
            await self._task
        except asyncio.CancelledError:
            pass
