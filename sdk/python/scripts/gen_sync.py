#!/usr/bin/env python3
"""Generate the synchronous client from the asyncio one (issue #20: the async client is the source).

    python scripts/gen_sync.py              # rewrite the generated modules (MODULES below)
    python scripts/gen_sync.py --check      # exit 1 if a committed file is not what this makes
    python scripts/gen_sync.py --out-dir D  # write the generated file(s) into D instead

Each async module of ``MODULES`` is turned into its sync module by ``unasync`` (pinned in
``requirements-test.txt``): ``src/lizard/async_sandbox.py`` into ``src/lizard/sandbox.py``, and
``_async_<name>.py`` into ``_sync_<name>.py`` for templates, volumes, snapshots and secrets (the
public ``<name>.py`` re-exports both classes). ``async``/``await`` are dropped and the names below
are renamed (``AsyncCodeSandbox`` → ``CodeSandbox``, ``httpx.AsyncClient`` → ``httpx.Client``,
``aiter_lines`` → ``iter_lines``, ``_async_support`` → ``_sync_support``, each source module's name
→ its generated one, ...). Behaviour the two clients do not share lives in the hand-written
``_async_support.py`` / ``_sync_support.py``, never in edits of a generated file. The only other
rewrites are the few docstrings below that describe a client class itself; each is found by its
opening line (exactly once in its module) and pinned by a digest of its async text, so a changed
source fails loudly instead of drifting.
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
MODULES: Dict[str, str] = {
    "async_sandbox.py": "sandbox.py",
    "_async_templates.py": "_sync_templates.py",
    "_async_volumes.py": "_sync_volumes.py",
    "_async_snapshots.py": "_sync_snapshots.py",
    "_async_secrets.py": "_sync_secrets.py",
}

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
    "AsyncTemplates": "Templates",
    "AsyncVolumes": "Volumes",
    "AsyncSnapshots": "Snapshots",
    "AsyncSecrets": "Secrets",
    # httpx.
    "AsyncClient": "Client",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "aiter_bytes": "iter_bytes",
    # What the two clients do differently.
    "_async_support": "_sync_support",
    # A source module imports another by the name of its generated twin (``.async_sandbox`` →
    # ``.sandbox``, ``._async_volumes`` → ``._sync_volumes``).
    **{Path(source).stem: Path(target).stem for source, target in MODULES.items()},
}

HEADER = (
    "# generated from {source} by scripts/gen_sync.py; do not edit.\n"
    "# Edit src/lizard/{source} (or _sync_support.py) and run `python scripts/gen_sync.py`.\n"
)

#: Docstrings about a client itself, per source module: (the opening line of the docstring in the
#: async source, the sha256 of that whole docstring, its text in the sync module). The digest pins
#: the async text: a changed docstring stops the generator until its sync text here is reviewed (and
#: the digest updated), so the two cannot drift apart unnoticed.
DOC_REWRITES: Dict[str, List[Tuple[str, str, str]]] = {"async_sandbox.py": [
    (
        '"""``AsyncCodeSandbox``: the asyncio client for one Lizard sandbox, on ``httpx.AsyncClient``.',
        "8fb18e3be8d80408",
        '''"""``CodeSandbox``: the synchronous client for one Lizard sandbox, over its own HTTP/1.1.

A ``CodeSandbox`` is a handle on a sandbox of the server (``create`` makes one, ``connect`` attaches
to an existing one and resumes it when paused). ``run_code`` streams the run as NDJSON and calls the
callbacks from the calling thread as each frame arrives; the other methods are one request each.
Used as a context manager, the sandbox is killed on exit. Requests go over the SDK's own
HTTP/1.1 on a socket (``lizard._http``, keep-alive connections pooled per sandbox object), or over
``httpx.Client`` when a proxy is configured or ``LIZARD_SDK_TRANSPORT=httpx`` (``_sync_support``).

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
], "_async_templates.py": [
    (
        '    """User templates (asyncio); the same methods as ``Templates``, awaitable. ``on_step`` and',
        "8a63f55319f8eb99",
        '''    """User templates (synchronous). All methods are static: ``Templates.list()``."""''',
    ),
], "_async_volumes.py": [
    (
        '    """Persistent volumes (asyncio); the same methods as ``Volumes``, awaitable.',
        "fa0963d1f7a7584c",
        '''    """Persistent volumes (synchronous). All methods are static: ``Volumes.create("data")``."""''',
    ),
], "_async_snapshots.py": [
    (
        '    """Snapshots (asyncio); the same methods as ``Snapshots``, awaitable.',
        "a3cc42f297b9b616",
        '''    """Snapshots (synchronous). All methods are static: ``Snapshots.list()``."""''',
    ),
], "_async_secrets.py": [
    (
        '    """A project\'s secrets (asyncio); the same methods as ``Secrets``, awaitable.',
        "1b4e16d0d1cef83b",
        '''    """A project's secrets (synchronous). All methods are static: ``Secrets.set("p", "n", v)``.
    An admin key reaches every project's, a project key its own (another project is a
    ``NotFoundError``)."""''',
    ),
]}

#: Names that must not survive into the sync module (besides any name with "async" in it).
_ASYNC_NAMES = {"await", "aclose", "aread", "aiter_lines", "aiter_bytes"}


def check_output(text: str, name: str) -> None:
    """Refuse generated code that still has async names (a replacement missing above)."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.NAME:
            continue
        if tok.string in _ASYNC_NAMES or "async" in tok.string.lower() or tok.string.startswith("Sync"):
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
    for opening, digest, new in DOC_REWRITES.get(name, []):
        text = _rewrite_docstring(text, name, opening, digest, new)
    check_output(text, name)
    return HEADER.format(source=name) + text


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
