"""``Snapshots`` and ``AsyncSnapshots``: saved copies of running sandboxes (``/v1/snapshots``).

A snapshot is taken with ``sandbox.create_snapshot()``; new sandboxes start from it with
``CodeSandbox.create(snapshot=...)`` (clones: each its own copy of the disk and of the kernels'
state). Configuration comes from the arguments, else ``LIZARD_API_URL`` / ``LIZARD_API_KEY``, as
for ``CodeSandbox``. This module only sends requests (built by ``lizard._core``); the capture is
the server's job.

``AsyncSnapshots`` is written in ``_async_snapshots.py``; ``Snapshots`` (``_sync_snapshots.py``) is
generated from it by ``scripts/gen_sync.py``.
"""

from ._async_snapshots import AsyncSnapshots, SnapshotLike
from ._sync_snapshots import Snapshots

__all__ = ["Snapshots", "AsyncSnapshots"]
