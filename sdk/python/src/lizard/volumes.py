"""``Volumes`` and ``AsyncVolumes``: a project's persistent named volumes (``/v1/volumes``).

A volume's data outlives every sandbox; mount it at create with
``CodeSandbox.create(volumes=["data"])`` or ``volumes=[{"name": "data", "mount_path": "/data",
"read_only": True}]``. Configuration comes from the arguments, else ``LIZARD_API_URL`` /
``LIZARD_API_KEY``, as for ``CodeSandbox``. This module only sends requests (built by
``lizard._core``); mounting is the server's job.

``AsyncVolumes`` is written in ``_async_volumes.py``; ``Volumes`` (``_sync_volumes.py``) is generated
from it by ``scripts/gen_sync.py``.
"""

from ._async_volumes import AsyncVolumes
from ._sync_volumes import Volumes

__all__ = ["Volumes", "AsyncVolumes"]
