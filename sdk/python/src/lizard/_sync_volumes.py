# generated from _async_volumes.py by scripts/gen_sync.py; do not edit.
# Edit src/lizard/_async_volumes.py (or _sync_support.py) and run `python scripts/gen_sync.py`.
"""The volume calls (``/v1/volumes``) of both clients, exported by ``lizard.volumes``: ``AsyncVolumes``
in ``_async_volumes.py``, the source, and ``Volumes`` in ``_sync_volumes.py``, which
``scripts/gen_sync.py`` generates from it. ``_request`` and ``_deleted`` (one request on a client of
its own) serve the snapshot and template calls too.
"""

from __future__ import annotations

from typing import Any, List, Optional

from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT
from .sandbox import _new_client, _send
from .errors import NotFoundError
from .models import VolumeInfo

__all__ = ["Volumes"]


def _request(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> Any:
    """Send ``req`` on a client of its own: the parsed JSON body (``None`` for an empty one)."""
    cfg = _core.resolve_config(api_url, api_key, request_timeout)
    with _new_client(cfg) as client:
        return _send(client, cfg, req)


def _deleted(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> bool:
    """Send ``req`` (a delete): ``True`` when it deleted, ``False`` on ``NotFoundError``."""
    try:
        _request(req, api_url, api_key, request_timeout)
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
        return VolumeInfo.from_wire(_request(req, api_url, api_key, request_timeout))

    @staticmethod
    def list(
        project: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[VolumeInfo]:
        """The project's volumes (the key's own; every project's for an admin key unless given)."""
        rows = _request(_core.volume_list_request(project), api_url, api_key, request_timeout) or []
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
        return VolumeInfo.from_wire(_request(req, api_url, api_key, request_timeout))

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
        return _deleted(req, api_url, api_key, request_timeout)
