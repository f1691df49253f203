"""``Templates`` and ``AsyncTemplates``: user templates (``/v1/templates``) — build from a
Dockerfile or from a sandbox, list, get, delete.

A template is a read-only layer over its base (``FROM code-interpreter-v1``, or another template);
start sandboxes from it with ``CodeSandbox.create(template="my-template")``. A build runs on the
server inside a build sandbox; ``build`` streams its events (NDJSON) and hands each step and log
chunk to ``on_step`` / ``on_log`` as they arrive. The Dockerfile subset and the build's limits are
in ``templates/README.md``. Configuration comes from the arguments, else ``LIZARD_API_URL`` /
``LIZARD_API_KEY``, as for ``CodeSandbox``. This module only sends requests (built, and the stream
folded, by ``lizard._core``).

``AsyncTemplates`` is written in ``_async_templates.py``; ``Templates`` (``_sync_templates.py``) is
generated from it by ``scripts/gen_sync.py``.
"""

from ._async_templates import AsyncTemplates, ContextLike, LogHandler, StepHandler
from ._sync_templates import Templates

__all__ = ["Templates", "AsyncTemplates"]
