"""``Volumes`` and ``AsyncVolumes``: a project's persistent named volumes (``/v1/volumes``).

A volume's data outlives every sandbox; mount it at create with
``CodeSandbox.create(volumes=["data"])`` or ``volumes=[{"name": "data", "mount_path": "/data",
"read_only": True}]``. Configuration comes from the arguments, else ``LIZARD_API_URL`` /
``LIZARD_API_KEY``, as for ``CodeSandbox``. This module only sends requests (built by
``lizard._core``); mounting is the server's job.
"""

from __future__ import annotations

from typing import List, Optional

import httpx

from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT
from .errors import NotFoundError
from .models import VolumeInfo

__all__ = ["Volumes", "AsyncVolumes"]


def _sync_send(req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]):
    from .sandbox import _new_client, _send

    cfg = _core.resolve_config(api_url, api_key, request_timeout)
    with _new_client(cfg) as client:
        return _send(client, cfg, req)


async def _async_send(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
):
    from .async_sandbox import _new_client, _send

    cfg = _core.resolve_config(api_url, api_key, request_timeout)
    client: httpx.AsyncClient = _new_client(cfg)
    async with client:
        return await _send(client, cfg, req)


def _sync_deleted(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> bool:
    """Send ``req`` (a delete): ``True`` when it deleted, ``False`` on ``NotFoundError``."""
    try:
        _sync_send(req, api_url, api_key, request_timeout)
    except NotFoundError:
        return False
    return True


async def _async_deleted(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> bool:
    """``_sync_deleted``, awaitable."""
    try:
        await _async_send(req, api_url, api_key, request_timeout)
    except NotFoundError:
        return False
    return True


class Volumes:
    """Persistent volumes (synchronous). All methods are static: ``Volumes.create("data")``."""

    @staticmethod
    def create(
        name: str,
        size_limit_bytes: Optional[int] = None,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> VolumeInfo:
        """Create a volume named ``name`` (``[a-z0-9][a-z0-9._-]{0,62}``, unique in the project) of
        ``size_limit_bytes`` (16 MiB to 1 TiB; server default 10 GiB). ``ConflictError`` if the name
        is taken."""
        req = _core.volume_create_request(name, size_limit_bytes, project)
        return VolumeInfo.from_wire(_sync_send(req, api_url, api_key, request_timeout))

    @staticmethod
    def list(
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[VolumeInfo]:
        """The project's volumes (the key's own; every project's for an admin key unless given)."""
        rows = _sync_send(_core.volume_list_request(project), api_url, api_key, request_timeout) or []
        return [VolumeInfo.from_wire(r) for r in rows]

    @staticmethod
    def get(
        name_or_id: str,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> VolumeInfo:
        """One volume by name or id (``vol_…``); ``NotFoundError`` otherwise."""
        req = _core.volume_get_request(name_or_id, project)
        return VolumeInfo.from_wire(_sync_send(req, api_url, api_key, request_timeout))

    @staticmethod
    def delete(
        name_or_id: str,
        force: bool = False,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        """Delete a volume and its data: ``True`` if deleted, ``False`` if it did not exist. While a
        sandbox mounts it, ``VolumeInUseError`` unless ``force``, which kills those sandboxes."""
        req = _core.volume_delete_request(name_or_id, project, force)
        return _sync_deleted(req, api_url, api_key, request_timeout)


class AsyncVolumes:
    """Persistent volumes (asyncio); the same methods as ``Volumes``, awaitable."""

    @staticmethod
    async def create(
        name: str,
        size_limit_bytes: Optional[int] = None,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> VolumeInfo:
        req = _core.volume_create_request(name, size_limit_bytes, project)
        return VolumeInfo.from_wire(await _async_send(req, api_url, api_key, request_timeout))

    @staticmethod
    async def list(
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[VolumeInfo]:
        rows = await _async_send(_core.volume_list_request(project), api_url, api_key, request_timeout) or []
        return [VolumeInfo.from_wire(r) for r in rows]

    @staticmethod
    async def get(
        name_or_id: str,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> VolumeInfo:
        req = _core.volume_get_request(name_or_id, project)
        return VolumeInfo.from_wire(await _async_send(req, api_url, api_key, request_timeout))

    @staticmethod
    async def delete(
        name_or_id: str,
        force: bool = False,
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        req = _core.volume_delete_request(name_or_id, project, force)
        return await _async_deleted(req, api_url, api_key, request_timeout)
