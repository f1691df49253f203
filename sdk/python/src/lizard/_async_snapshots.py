"""The snapshot calls (``/v1/snapshots``) of both clients, exported by ``lizard.snapshots``:
``AsyncSnapshots`` in ``_async_snapshots.py``, the source, and ``Snapshots`` in
``_sync_snapshots.py``, which ``scripts/gen_sync.py`` generates from it.
"""

from __future__ import annotations

from typing import List, Optional, Union

from . import _core
from ._async_volumes import _deleted, _request
from ._core import DEFAULT_REQUEST_TIMEOUT
from .models import SnapshotInfo

__all__ = ["AsyncSnapshots"]

SnapshotLike = Union[str, SnapshotInfo]


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
        """The snapshots this key can see (the key's project's; every project's for an admin key
        unless ``project``), optionally only those of one sandbox."""
        req = _core.snapshot_list_request(sandbox_id, project)
        return [SnapshotInfo.from_wire(r) for r in await _request(req, api_url, api_key, request_timeout) or []]

    @staticmethod
    async def get(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> SnapshotInfo:
        """One snapshot by id (or ``SnapshotInfo``); ``NotFoundError`` if this key cannot see it."""
        req = _core.snapshot_get_request(snapshot)
        return SnapshotInfo.from_wire(await _request(req, api_url, api_key, request_timeout))

    @staticmethod
    async def delete(
        snapshot: SnapshotLike,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        """Delete a snapshot (its files; clones made from it keep running): ``True`` if deleted,
        ``False`` if it did not exist (or this key cannot see it)."""
        return await _deleted(_core.snapshot_delete_request(snapshot), api_url, api_key, request_timeout)
