# generated from _async_secrets.py by scripts/gen_sync.py; do not edit.
# Edit src/lizard/_async_secrets.py (or _sync_support.py) and run `python scripts/gen_sync.py`.
"""The secret calls (``/v1/projects/{project}/secrets``) of both clients, exported by
``lizard.secrets``: ``AsyncSecrets`` in ``_async_secrets.py``, the source, and ``Secrets`` in
``_sync_secrets.py``, which ``scripts/gen_sync.py`` generates from it.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import httpx

from . import _sync_support as _support
from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT
from .sandbox import _new_client
from .errors import NotFoundError, error_from_response
from .models import SecretInfo

__all__ = ["Secrets"]


def _answer(resp: _support.Response) -> Tuple[int, Any]:
    if resp.status_code >= 400:
        raise error_from_response(resp.status_code, resp.content)
    return resp.status_code, (resp.json() if resp.content else None)


def _request(
    req: _core.Req, api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> Tuple[int, Any]:
    """Send ``req`` on a client of its own: the status and the parsed JSON body (``None`` for an
    empty one)."""
    cfg = _core.resolve_config(api_url, api_key, request_timeout)
    with _new_client(cfg) as client:
        try:
            resp = client.request(req.method, req.path, json=req.json, params=req.params)
        except httpx.HTTPError as e:
            raise _core.transport_error(e, cfg) from e
        return _answer(resp)


class Secrets:
    """A project's secrets (synchronous). All methods are static: ``Secrets.set("p", "n", v)``.
    An admin key reaches every project's, a project key its own (another project is a
    ``NotFoundError``)."""

    @staticmethod
    def set(
        project: str,
        name: str,
        value: str,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> SecretInfo:
        """Create or replace the secret ``name`` (1-64 letters, digits, ``_`` or ``-``) of
        ``project`` with ``value`` (1-8192 bytes of visible ASCII or spaces; a bad one is an
        ``InvalidArgumentError`` that does not show it; at most 256 per project). Returns its info
        (no value) with ``created`` telling new from replaced. Running sandboxes that use it get
        the new value at their next ``set_network`` or start."""
        req = _core.secret_set_request(project, name, value)
        status, body = _request(req, api_url, api_key, request_timeout)
        return SecretInfo.from_wire(body, created=status == 201)

    @staticmethod
    def list(
        project: str,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[SecretInfo]:
        """The project's secrets: names and times, never values."""
        _, rows = _request(_core.secret_list_request(project), api_url, api_key, request_timeout)
        return [SecretInfo.from_wire(r) for r in rows or []]

    @staticmethod
    def delete(
        project: str,
        name: str,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> bool:
        """Delete a secret: ``True`` if deleted, ``False`` if the project has none of that name (a
        project the key cannot see is a ``NotFoundError``). Running sandboxes that use it keep its
        value until their next start or rule change."""
        try:
            _request(_core.secret_delete_request(project, name), api_url, api_key, request_timeout)
        except NotFoundError:
            # The server answers 404 for a project the key cannot see too: then the list raises.
            _request(_core.secret_list_request(project), api_url, api_key, request_timeout)
            return False
        return True
