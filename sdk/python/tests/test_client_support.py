"""The hand-written halves of the two clients (``_async_support`` / ``_sync_support``), which the
generated ``sandbox.py`` and its source ``async_sandbox.py`` call under the same names. No server
needed; nothing here waits on a clock to decide an outcome (workers block on events)."""

from __future__ import annotations

import asyncio
import threading
from typing import List

import httpx
import pytest

from lizard import _async_support, _sync_support


def test_both_halves_define_the_same_names() -> None:
    assert _async_support.__all__ == _sync_support.__all__
    for name in _sync_support.__all__:
        assert hasattr(_async_support, name) and hasattr(_sync_support, name), name


def test_sync_worker_runs_in_a_thread_and_joins() -> None:
    release, bound = threading.Event(), threading.Event()
    seen: List[bool] = []

    def run(tag: str) -> None:
        bound.wait()  # `worker` is assigned
        seen.append(worker.is_current())
        release.wait()
        seen.append(tag == "x")

    worker = _sync_support.Worker(run, ("x",), "test-worker")
    bound.set()
    assert not worker.is_current()
    assert worker.join(0.01) is False  # blocked on the event: not done
    release.set()
    assert worker.join() is True
    assert seen == [True, True]


def test_sync_helpers() -> None:
    lock = _sync_support.client_lock()
    with lock:
        assert lock.locked()
    assert _sync_support.maybe_await(object()) is None

    class Handle:
        opened = 0

        def _open(self) -> None:
            self.opened += 1

    h = Handle()
    _sync_support.open_in_init(h)
    _sync_support.open_after_init(h)
    assert h.opened == 1  # opened once, in __init__


def test_sync_worker_stop_from_inside_does_not_join_itself() -> None:
    done = threading.Event()
    resp = httpx.Response(200)  # no network stream: stop() only joins

    def run() -> None:
        worker_box[0].stop(resp)  # would deadlock if it joined its own thread
        done.set()

    worker_box: List[_sync_support.Worker] = []
    started = threading.Event()

    def start() -> None:
        started.wait()
        run()

    worker_box.append(_sync_support.Worker(start, (), "test-stop"))
    started.set()
    assert worker_box[0].join(30)
    assert done.is_set()


@pytest.mark.anyio
async def test_async_worker_runs_in_a_task_and_joins() -> None:
    release = asyncio.Event()
    seen: List[bool] = []

    async def run(tag: str) -> None:
        seen.append(worker.is_current())
        await release.wait()
        seen.append(tag == "x")

    worker = _async_support.Worker(run, ("x",), "test-worker")
    assert not worker.is_current()
    assert await worker.join(0.01) is False  # blocked on the event: not done (and not cancelled)
    release.set()
    assert await worker.join() is True
    assert seen == [True, True]


@pytest.mark.anyio
async def test_async_worker_stop_cancels_and_waits() -> None:
    cancelled = asyncio.Event()

    async def run() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = _async_support.Worker(run, (), "test-stop")
    await asyncio.sleep(0)  # let it start
    await worker.stop(httpx.Response(200))
    assert cancelled.is_set()
    assert await worker.join() is True


@pytest.mark.anyio
async def test_async_worker_stop_from_inside_returns() -> None:
    after: List[str] = []

    async def run() -> None:
        await worker_box[0].stop(httpx.Response(200))  # must not await its own task
        after.append("returned")
        await asyncio.sleep(0)  # the cancellation lands here
        after.append("not reached")

    worker_box: List[_async_support.Worker] = []
    worker_box.append(_async_support.Worker(run, (), "test-stop-inside"))
    with pytest.raises(asyncio.CancelledError):
        await worker_box[0]._task
    assert after == ["returned"]


@pytest.mark.anyio
async def test_async_helpers() -> None:
    calls: List[int] = []

    async def coro() -> None:
        calls.append(1)

    await _async_support.maybe_await(coro())
    await _async_support.maybe_await(None)
    assert calls == [1]
    with _async_support.client_lock():
        pass

    class Handle:
        opened = 0

        async def _open(self) -> None:
            self.opened += 1

    h = Handle()
    _async_support.open_in_init(h)
    assert h.opened == 0  # an __init__ cannot await
    await _async_support.open_after_init(h)
    assert h.opened == 1
