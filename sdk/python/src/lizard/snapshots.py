"""``Snapshots`` and ``AsyncSnapshots``: saved copies of running sandboxes (``/v1/snapshots``).

A snapshot is taken with ``sandbox.create_snapshot()``; new sandboxes start from it with
``CodeSandbox.create(snapshot=...)`` (clones: each its own copy of the disk and of the kernels'
state). Configuration comes from the arguments, else ``LIZARD_API_URL`` / ``LIZARD_API_KEY``, as
for ``CodeSandbox``. This module only sends requests (built by ``lizard._core``); the capture is
the server's job.
"""

from __future__ import annotations

from typing import List, Optional, Union

from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT
from .models import SnapshotInfo
from .volumes import _async_deleted, _async_send, _sync_deleted, _sync_send

__all__ = ["Snapshots", "AsyncSnapshots"]

SnapshotLike = Union[str, SnapshotInfo]


class Snapshots:
    """Snapshots (synchronous). All methods are static: ``Snapshots.list()``."""

    @staticmethod
    def list(
        sandbox_id: Optional[str] = None,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[SnapshotInfo]:
        """The snapshots this key can see (the key's project's; every project's for an admin key
        unless ``project``), optionally only those of one sandbox."""
        req = _core.snapshot_list_request(sandbox_id, project)
        return [SnapshotInfo.from_wire(r) for r in _sync_send(req, api_url, api_key, request_timeout) or []]

    @staticmethod
    def get(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> SnapshotInfo:
        """One snapshot by id (or ``SnapshotInfo``); ``NotFoundError`` if this key cannot see it."""
        req = _core.snapshot_get_request(snapshot)
        return SnapshotInfo.from_wire(_sync_send(req, api_url, api_key, request_timeout))

    @staticmethod
    def delete(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        """Delete a snapshot (its files; clones made from it keep running): ``True`` if deleted,
        ``False`` if it did not exist (or this key cannot see it)."""
        return _sync_deleted(_core.snapshot_delete_request(snapshot), api_url, api_key, request_timeout)


class AsyncSnapshots:
    """Snapshots (asyncio); the same methods as ``Snapshots``, awaitable."""

    @staticmethod
    async def list(
        sandbox_id: Optional[str] = None,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[SnapshotInfo]:
        req = _core.snapshot_list_request(sandbox_id, project)
        return [SnapshotInfo.from_wire(r) for r in await _async_send(req, api_url, api_key, request_timeout) or []]

    @staticmethod
    async def get(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> SnapshotInfo:
        req = _core.snapshot_get_request(snapshot)
        return SnapshotInfo.from_wire(await _async_send(req, api_url, api_key, request_timeout))

    @staticmethod
    async def delete(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        return await _async_deleted(_core.snapshot_delete_request(snapshot), api_url, api_key, request_timeout)
