"""End-to-end and unit tests of the Python SDK (a package so test modules can share ``conftest``
helpers). The fixtures are in ``conftest.py``; nothing here runs on import."""
