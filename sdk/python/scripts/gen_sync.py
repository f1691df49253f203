#!/usr/bin/env python3
"""Generate the synchronous client from the asyncio one (issue #20: the async client is the source).

    python scripts/gen_sync.py              # rewrite src/lizard/sandbox.py
    python scripts/gen_sync.py --check      # exit 1 if the committed file is not what this makes
    python scripts/gen_sync.py --out-dir D  # write the generated file(s) into D instead

``src/lizard/async_sandbox.py`` is turned into ``src/lizard/sandbox.py`` by ``unasync`` (pinned in
``requirements-test.txt``): ``async``/``await`` are dropped and the names below are renamed
(``AsyncCodeSandbox`` → ``CodeSandbox``, ``httpx.AsyncClient`` → ``httpx.Client``, ``aiter_lines``
→ ``iter_lines``, ``_async_support`` → ``_sync_support``, ...). Behaviour the two clients do not
share lives in the hand-written ``_async_support.py`` / ``_sync_support.py``, never in edits of the
generated file. The only other rewrites are the few docstrings below that describe the client
itself; each is found by its opening line (exactly once) and pinned by a digest of its async text,
so a changed source fails loudly instead of drifting.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Dict, List, Tuple

import unasync

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "lizard"

#: Source module → generated module, in ``PACKAGE``.
MODULES: Dict[str, str] = {"async_sandbox.py": "sandbox.py"}

#: unasync's token replacements, on top of its defaults (``__aenter__`` → ``__enter__``,
#: ``AsyncIterator`` → ``Iterator``, ...). A name left out that starts with ``Async`` would become
#: ``Sync...`` (unasync's fallback); ``check_output`` refuses that.
REPLACEMENTS: Dict[str, str] = {
    # The public classes keep their historical sync names.
    "AsyncCodeSandbox": "CodeSandbox",
    "AsyncCommands": "Commands",
    "AsyncCommandHandle": "CommandHandle",
    "AsyncFiles": "Files",
    "AsyncPty": "Pty",
    "AsyncPtyHandle": "PtyHandle",
    "AsyncWatchHandle": "WatchHandle",
    # httpx.
    "AsyncClient": "Client",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "aiter_bytes": "iter_bytes",
    # What the two clients do differently.
    "_async_support": "_sync_support",
}

HEADER = (
    "# generated from async_sandbox.py by scripts/gen_sync.py; do not edit.\n"
    "# Edit src/lizard/async_sandbox.py (or _sync_support.py) and run `python scripts/gen_sync.py`.\n"
)

#: Docstrings about the client itself: (the opening line of the docstring in the async source, the
#: sha256 of that whole docstring, its text in the sync module). The digest pins the async text: a
#: changed docstring stops the generator until its sync text here is reviewed (and the digest
#: updated), so the two cannot drift apart unnoticed.
DOC_REWRITES: List[Tuple[str, str, str]] = [
    (
        '"""``AsyncCodeSandbox``: the asyncio client for one Lizard sandbox, on ``httpx.AsyncClient``.',
        "8fb18e3be8d80408",
        '''"""``CodeSandbox``: the synchronous client for one Lizard sandbox, on ``httpx.Client``.

A ``CodeSandbox`` is a handle on a sandbox of the server (``create`` makes one, ``connect`` attaches
to an existing one and resumes it when paused). ``run_code`` streams the run as NDJSON and calls the
callbacks from the calling thread as each frame arrives; the other methods are one request each.
Used as a context manager, the sandbox is killed on exit.

Generated from ``async_sandbox.py`` (``AsyncCodeSandbox``) by ``scripts/gen_sync.py``; what the sync
client does its own way is in ``_sync_support``. This module does not build requests or parse the
stream itself (``lizard._core`` does), retries nothing, and keeps no state but the sandbox id and the
HTTP connection pool. ``sandbox.commands`` (``Commands``) runs processes through ``/commands``;
``sandbox.files`` (``Files``) reads and writes the sandbox's filesystem through ``/files``;
``sandbox.pty`` (``Pty``) runs programs on a pseudo-terminal through ``/pty``. ``files.watch_dir``
and ``pty.create`` are the only things that start a thread.
"""''',
    ),
    (
        '    """A sandbox with stateful Python, JavaScript and Bash kernels (asyncio client).',
        "1b594d6cdcb6b5ea",
        '''    """A sandbox with stateful Python, JavaScript and Bash kernels (synchronous client).

    Make one with ``CodeSandbox.create(project=...)`` or attach with ``CodeSandbox.connect(id)``;
    the constructor only binds a handle to an id and sends nothing. Configuration comes from the
    arguments, else ``LIZARD_API_URL`` / ``LIZARD_API_KEY``. ``request_timeout`` (seconds) bounds
    each control request; ``run_code`` has no read timeout unless given ``timeout_ms``.

    One object may be used from several threads; runs in the same context are serialized by the
    server.
    """''',
    ),
    (
        '    """A process on a pseudo-terminal, made by ``sandbox.pty.create``. An asyncio task reads the',
        "bf7a8524afac1e8f",
        '''    """A process on a pseudo-terminal, made by ``sandbox.pty.create``. A daemon thread reads the
    terminal's output and calls ``on_data(bytes)`` with each chunk as the program wrote it
    (escape sequences included: rendering is the caller's job) until the process ends.
    ``error`` is the exception that ended the reading early (a raising ``on_data``, a lost
    connection), if any; ``wait`` raises it."""''',
    ),
]

#: Names that must not survive into the sync module.
_ASYNC_NAMES = {"async", "await", "asyncio", "aclose", "aread", "aiter_lines", "aiter_bytes", "_async_support"}


def check_output(text: str, name: str) -> None:
    """Refuse generated code that still has async names (a replacement missing above)."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.NAME:
            continue
        if tok.string in _ASYNC_NAMES or tok.string.startswith(("Async", "Sync")):
            raise SystemExit(f"gen_sync: {name}:{tok.start[0]}: {tok.string!r} left in the sync module "
                             "(add a replacement to REPLACEMENTS)")


def _rewrite_docstring(text: str, name: str, opening: str, digest: str, new: str) -> str:
    """``text`` with the docstring that starts with ``opening`` (exactly one must) replaced by
    ``new``, once the docstring's sha256 is ``digest``."""
    n = text.count(opening)
    if n != 1:
        raise SystemExit(f"gen_sync: {name}: a docstring to rewrite occurs {n} times, not once:\n{opening}")
    start = text.index(opening)
    end = text.index('"""', start + len(opening)) + 3
    seen = hashlib.sha256(text[start:end].encode("utf-8")).hexdigest()[:16]
    if seen != digest:
        raise SystemExit(
            f"gen_sync: {name}: the docstring starting {opening.strip()[:60]!r} changed (sha256 {seen}, "
            f"not {digest}): bring its sync text in DOC_REWRITES up to date and set its digest to {seen}"
        )
    return text[:start] + new + text[end:]


def generate(source: str, name: str = "async_sandbox.py") -> str:
    """The sync module for the async module's text ``source``."""
    with tempfile.TemporaryDirectory() as tmp:
        src_dir, dst_dir = Path(tmp, "_async"), Path(tmp, "_sync")
        src_dir.mkdir()
        src = src_dir / name
        src.write_bytes(source.encode("utf-8"))
        rule = unasync.Rule(str(src_dir) + "/", str(dst_dir) + "/", additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(src)], [rule])
        text = (dst_dir / name).read_bytes().decode("utf-8")
    for opening, digest, new in DOC_REWRITES:
        text = _rewrite_docstring(text, name, opening, digest, new)
    check_output(text, name)
    return HEADER + text


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    ap.add_argument("--out-dir", type=Path, help="write the generated files here (default: the package)")
    args = ap.parse_args(argv)
    stale = []
    for source, target in MODULES.items():
        text = generate((PACKAGE / source).read_bytes().decode("utf-8"), source)
        dest = (args.out_dir or PACKAGE) / target
        if args.check:
            if not dest.is_file() or dest.read_bytes() != text.encode("utf-8"):
                stale.append(str(dest))
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(text.encode("utf-8"))
        print(f"gen_sync: wrote {dest}")
    if stale:
        print("gen_sync: out of date (run python scripts/gen_sync.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
