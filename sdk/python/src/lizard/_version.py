"""The SDK's version (sent in the User-Agent). Nothing else lives here; keep it equal to
``version`` in ``pyproject.toml``."""

__version__ = "0.1.0"
