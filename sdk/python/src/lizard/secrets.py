"""``Secrets`` and ``AsyncSecrets``: a project's secrets (``/v1/projects/{project}/secrets``).

Secrets are write-only: no call returns a value. A sandbox uses them through ``inject`` rules
(``CodeSandbox.create(egress=["api.example.com"], inject=[{"host": "api.example.com",
"headers": {"Authorization": "Bearer ${secret:NAME}"}}])``): the server's egress relay adds the
headers on the way out, so the values never enter the sandbox. Configuration comes from the
arguments, else ``LIZARD_API_URL`` / ``LIZARD_API_KEY``, as for ``CodeSandbox``. This module only
sends requests (built by ``lizard._core``); the substitution is the server's.

``AsyncSecrets`` is written in ``_async_secrets.py``; ``Secrets`` (``_sync_secrets.py``) is generated
from it by ``scripts/gen_sync.py``.
"""

from ._async_secrets import AsyncSecrets
from ._sync_secrets import Secrets

__all__ = ["Secrets", "AsyncSecrets"]
