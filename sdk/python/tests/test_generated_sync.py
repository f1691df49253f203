"""The sync client is generated from the async one (issue #20): ``src/lizard/sandbox.py`` must be
exactly what ``scripts/gen_sync.py`` makes of ``src/lizard/async_sandbox.py`` today, and so must
``_sync_<name>.py`` be of ``_async_<name>.py`` (templates, volumes, snapshots, secrets); the two
clients must offer the same methods with the same parameters. No server needed.

The files are read from the source tree (next to this directory), not from the installed package;
only ``test_public_modules_export_both_clients`` imports the installed one.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Tuple

import pytest

SDK = Path(__file__).resolve().parents[1]
PACKAGE = SDK / "src" / "lizard"
SCRIPT = SDK / "scripts" / "gen_sync.py"
HEADER_LINE = "# generated from {source} by scripts/gen_sync.py; do not edit."


def _gen_sync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # needs unasync (requirements-test.txt)
    return mod


def test_committed_sync_module_is_generated(tmp_path: Path) -> None:
    # Regenerate into a temp dir with the script itself, then compare bytes.
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out-dir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gen = _gen_sync()
    assert gen.MODULES, "nothing to generate"
    for source, target in gen.MODULES.items():
        fresh = (tmp_path / target).read_bytes()
        committed = (PACKAGE / target).read_bytes()
        assert fresh == committed, (
            f"src/lizard/{target} is not what scripts/gen_sync.py generates: edit the async source "
            "(or _sync_support.py) and run `python scripts/gen_sync.py`, do not edit the generated file"
        )
        assert committed.decode("utf-8").splitlines()[0] == HEADER_LINE.format(source=source)


def test_check_mode_sees_an_edited_sync_module(tmp_path: Path) -> None:
    # The byte comparison above can fail: a hand edit of the generated file is caught.
    gen = _gen_sync()
    source = (PACKAGE / "async_sandbox.py").read_text(encoding="utf-8")
    text = gen.generate(source)
    assert text == (PACKAGE / "sandbox.py").read_text(encoding="utf-8")
    edited = text.replace("def run_code(", "def run_code_edited(", 1)
    assert edited != text
    (tmp_path / "sandbox.py").write_text(edited, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--out-dir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 1 and "out of date" in proc.stderr, proc.stdout + proc.stderr


def test_generator_refuses_async_leftovers() -> None:
    # A name unasync would turn into Sync... (no replacement for it) stops the generation.
    gen = _gen_sync()
    source = (PACKAGE / "async_sandbox.py").read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="SyncNewThing.*left in the sync module"):
        gen.generate(source + "\n\nclass AsyncNewThing:\n    pass\n")


Signature = Tuple[str, bool, List[Tuple[str, str, str]]]  # (name, is_async, [(param, kind, default)])


def _surface(path: Path) -> Dict[str, Dict[str, Signature]]:
    """Public classes → public methods (and dunders that define behaviour) → parameters, by AST."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: Dict[str, Dict[str, Signature]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        methods: Dict[str, Signature] = {}
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if item.name.startswith("_") and not (item.name.startswith("__") and item.name.endswith("__")):
                continue
            a = item.args
            positional = a.posonlyargs + a.args
            defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
            params = [(p.arg, "pos", ast.unparse(d) if d is not None else "") for p, d in zip(positional, defaults)]
            params += [(p.arg, "kw", ast.unparse(d) if d is not None else "") for p, d in zip(a.kwonlyargs, a.kw_defaults)]
            name = {"__aenter__": "__enter__", "__aexit__": "__exit__"}.get(item.name, item.name)
            methods[name] = (name, isinstance(item, ast.AsyncFunctionDef), params)
        out[node.name] = methods
    return out


@pytest.mark.parametrize("source", ["async_sandbox.py", "_async_templates.py", "_async_volumes.py",
                                    "_async_snapshots.py", "_async_secrets.py"])
def test_sync_and_async_clients_have_the_same_methods(source: str) -> None:
    gen = _gen_sync()
    sync = _surface(PACKAGE / gen.MODULES[source])
    async_ = _surface(PACKAGE / source)
    assert async_, source
    assert {gen.REPLACEMENTS.get(c, c) for c in async_} == set(sync)
    for acls, amethods in async_.items():
        scls = gen.REPLACEMENTS[acls]
        smethods = sync[scls]
        assert set(amethods) == set(smethods), (acls, scls)
        for name, (_, _, params) in amethods.items():
            assert smethods[name][2] == params, f"{scls}.{name} and {acls}.{name} differ"
            assert not smethods[name][1], f"{scls}.{name} is a coroutine"


@pytest.mark.parametrize("name", ["templates", "volumes", "snapshots", "secrets"])
def test_public_modules_export_both_clients(name: str) -> None:
    # ``lizard.<name>`` (and ``lizard``) keep exporting the sync class, generated into
    # ``_sync_<name>``, and the async one, written in ``_async_<name>``.
    import lizard

    public = importlib.import_module(f"lizard.{name}")
    sync_name = name.capitalize()
    async_name = "Async" + sync_name
    assert sorted(public.__all__) == sorted([sync_name, async_name])
    sync_cls = getattr(public, sync_name)
    async_cls = getattr(public, async_name)
    assert sync_cls is getattr(importlib.import_module(f"lizard._sync_{name}"), sync_name)
    assert async_cls is getattr(importlib.import_module(f"lizard._async_{name}"), async_name)
    assert getattr(lizard, sync_name) is sync_cls and getattr(lizard, async_name) is async_cls
    for method in vars(async_cls):
        if method.startswith("_"):
            continue
        assert inspect.iscoroutinefunction(getattr(async_cls, method)), (async_name, method)
        assert not inspect.iscoroutinefunction(getattr(sync_cls, method)), (sync_name, method)
        assert getattr(sync_cls, method).__doc__ == getattr(async_cls, method).__doc__, (sync_name, method)
