"""The SDK's fold of recorded execution streams matches the Rust fold (no server).

``tests/fixtures/executions/NAME.ndjson`` are raw NDJSON bodies of real runs; ``NAME.execution.json``
is the ``Execution`` that ``lizard_proto::execution::Execution::apply`` folds from them (recorded by
``crates/lizard/tests/wire_fixtures.rs``, which also checks that). Here ``ExecutionFold`` folds the
same lines; ``to_rust_shape`` turns what it gives (the ``Execution`` and the events it hands to the
callbacks) into the Rust JSON shape, and every top-level key of the Rust JSON must be produced, so a
field added on the Rust side fails this test until the SDK follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from lizard._core import ExecutionFold
from lizard.models import Execution, Result

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "executions"
NAMES = sorted(p.name[: -len(".ndjson")] for p in FIXTURES.glob("*.ndjson"))
#: The recorder makes at least this many fixtures (see wire_fixtures.rs).
MIN_FIXTURES = 14

#: Known differences between this SDK's fold and the Rust fold on real fixtures: fixture → reason.
#: Empty: the SDK agrees with the Rust fold on every fixture.
KNOWN_DIFFERENCES: Dict[str, str] = {}


def _result(r: Result) -> Dict[str, Any]:
    out: Dict[str, Any] = {"is_main_result": r.is_main_result, "data": r.raw}
    if r.metadata is not None:  # Rust: skip_serializing_if = "Option::is_none"
        out["metadata"] = r.metadata
    return out


def to_rust_shape(ex: Execution, chunks: Dict[str, List[str]]) -> Dict[str, Any]:
    """The SDK's view of a run in the shape of the Rust ``Execution`` JSON. ``chunks`` are the
    stdout/stderr texts ``ExecutionFold.feed_line`` handed out, in order (the SDK's ``Execution``
    joins them; the Rust one keeps the chunks)."""
    out: Dict[str, Any] = {
        "context_id": ex.context_id,
        "execution_count": ex.execution_count,
        "stdout": chunks["stdout"],
        "stderr": chunks["stderr"],
        "results": [_result(r) for r in ex.results],
        "error": (
            None
            if ex.error is None
            else {"name": ex.error.name, "value": ex.error.value, "traceback": ex.error.traceback}
        ),
        "status": ex.status,
        "duration_ms": ex.duration_ms,
    }
    if ex.usage is not None:  # Rust: skip_serializing_if = "Option::is_none"
        out["usage"] = {"cpu_ms": ex.usage.cpu_ms, "peak_rss_bytes": ex.usage.peak_rss_bytes}
    return out


def fold(name: str):
    fold = ExecutionFold()
    chunks: Dict[str, List[str]] = {"stdout": [], "stderr": []}
    order: List[str] = []
    events: List[Optional[Any]] = []
    # Bytes, as the SDK reads them off the wire.
    for line in (FIXTURES / f"{name}.ndjson").read_bytes().splitlines():
        ev = fold.feed_line(line)
        events.append(ev)
        if ev is not None and ev[0] in chunks:
            chunks[ev[0]].append(ev[1])
            order.append(ev[1])
    assert fold.ended, f"{name}: the SDK fold did not see the end frame"
    return fold.finish(), chunks, order, events


def test_the_fixtures_are_there() -> None:
    assert len(NAMES) >= MIN_FIXTURES, f"only {len(NAMES)} fixtures in {FIXTURES}"
    for n in NAMES:
        assert (FIXTURES / f"{n}.execution.json").is_file(), f"{n}.ndjson has no {n}.execution.json"


@pytest.mark.parametrize("name", NAMES)
def test_sdk_fold_matches_the_rust_fold(name: str) -> None:
    want = json.loads((FIXTURES / f"{name}.execution.json").read_text(encoding="utf-8"))
    ex, chunks, order, events = fold(name)
    got = to_rust_shape(ex, chunks)
    if name in KNOWN_DIFFERENCES:
        pytest.xfail(KNOWN_DIFFERENCES[name])
    # Every field of the Rust Execution is compared: a new one fails here until the SDK has it.
    assert set(got) == set(want), f"{name}: fields {sorted(set(want) ^ set(got))} differ"
    for key in want:
        assert got[key] == want[key], f"{name}: {key}: SDK {got[key]!r} vs Rust {want[key]!r}"
    # The SDK's joined views agree with the chunks.
    assert ex.stdout == "".join(want["stdout"]), name
    assert ex.stderr == "".join(want["stderr"]), name
    assert ex.output == "".join(order), name
    # The callbacks saw each result and the error as the Execution holds them.
    assert [e[1] for e in events if e is not None and e[0] == "result"] == ex.results, name
    errors = [e[1] for e in events if e is not None and e[0] == "error"]
    assert errors == ([ex.error] if ex.error is not None else []), name
    assert ex.success == (want["error"] is None and want["status"] == "ok"), name
    main = [r for r in want["results"] if r["is_main_result"]]
    assert ex.text == (main[0]["data"].get("text/plain") if main else None), name
