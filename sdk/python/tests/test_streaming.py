"""Streaming: callbacks receive each chunk while the cell still runs (measured with timestamps),
in order, and a callback that raises stops the call and interrupts the cell on the server.

The only timing asserted is the ≈1 s gap between the first chunk and the return (≥ 0.7 s), so a
loaded machine does not make it flaky.
"""

from __future__ import annotations

import time
from typing import List, Tuple

import pytest

from lizard import CodeSandbox

SLOW_CELL = "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')"


def test_chunks_arrive_while_the_cell_runs(sandbox: CodeSandbox) -> None:
    sandbox.run_code("1")  # start the kernel first, so only the cell is timed
    chunks: List[Tuple[float, str]] = []
    start = time.monotonic()
    ex = sandbox.run_code(SLOW_CELL, on_stdout=lambda s: chunks.append((time.monotonic(), s)))
    returned = time.monotonic()

    assert ex.stdout == "first\nsecond\n"
    assert "".join(c for _, c in chunks) == ex.stdout
    first_at = chunks[0][0]
    assert chunks[0][1].startswith("first")
    # The first chunk came about a second before the call returned, not with the rest at the end.
    assert returned - first_at >= 0.7, (first_at - start, returned - start)


def test_stdout_and_stderr_interleave_in_order(sandbox: CodeSandbox) -> None:
    events: List[Tuple[str, str]] = []
    code = "import sys\nfor i in range(3):\n    print(f'o{i}', flush=True)\n    print(f'e{i}', file=sys.stderr, flush=True)"
    ex = sandbox.run_code(
        code,
        on_stdout=lambda s: events.append(("out", s)),
        on_stderr=lambda s: events.append(("err", s)),
    )
    assert ex.stdout == "o0\no1\no2\n" and ex.stderr == "e0\ne1\ne2\n"
    assert "".join(s for _, s in events) == ex.output == "o0\ne0\no1\ne1\no2\ne2\n"


def test_bash_and_javascript_stream_too(sandbox: CodeSandbox) -> None:
    got: List[str] = []
    ex = sandbox.run_code("for i in 1 2 3; do echo $i; done", language="bash", on_stdout=got.append)
    assert "".join(got) == ex.stdout == "1\n2\n3\n"
    got.clear()
    ex = sandbox.run_code("console.log('a'); console.error('b'); 40 + 2", language="js",
                          on_stdout=got.append)
    assert "".join(got) == ex.stdout == "a\n"
    assert ex.stderr == "b\n"
    assert ex.results[0].data == "42" and ex.results[0].is_main_result


class Stop(Exception):
    pass


def test_a_raising_callback_stops_the_call_and_interrupts_the_cell(sandbox: CodeSandbox) -> None:
    def stop(_: str) -> None:
        raise Stop()

    start = time.monotonic()
    with pytest.raises(Stop):
        sandbox.run_code("import time\nprint('go', flush=True)\ntime.sleep(30)\nlate = 1", on_stdout=stop)
    assert time.monotonic() - start < 10
    # The disconnect interrupted the cell: the context is free again and `late` was never set.
    ex = sandbox.run_code("print('late' in globals())", timeout_ms=20_000)
    assert ex.stdout == "False\n"
