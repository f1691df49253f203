#!/usr/bin/env python3
"""Generate ``src/lizard/_error_table.py`` from ``sdk/errors.json``, the mapping from an API error to
an error class that both SDKs share (issue #20).

    python scripts/gen_errors.py            # rewrite the generated module
    python scripts/gen_errors.py --check    # exit 1 if the committed module is not what this makes

The module holds class *names*; ``lizard.errors`` resolves them (and fails at import on a name it
does not define).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]
SOURCE = SDK.parent / "errors.json"
TARGET = SDK / "src" / "lizard" / "_error_table.py"
HEADER = "# generated from sdk/errors.json by scripts/gen_errors.py; do not edit.\n"


def generate(source: Path = SOURCE) -> str:
    table = json.loads(source.read_text())
    lines = [
        HEADER,
        '"""Error code and HTTP status → the name of the SDK\'s error class (see ``errors.py``)."""',
        "",
        "BY_CODE = {",
    ]
    lines += [f'    "{code}": "{name}",' for code, name in sorted(table["by_code"].items())]
    lines += ["}", "", "BY_STATUS = {"]
    by_status = sorted((int(s), name) for s, name in table["by_status"].items())
    lines += [f'    {status}: "{name}",' for status, name in by_status]
    lines += ["}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET} is stale: run `python scripts/gen_errors.py`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
