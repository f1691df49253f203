"""The error table both SDKs share (issue #20): ``src/lizard/_error_table.py`` is what
``scripts/gen_errors.py`` makes of ``sdk/errors.json`` today, the table covers exactly the wire's
error codes (``crates/lizard-server/openapi.json``), and a response with each code, or with a
known status and no Lizard body, becomes the class the table names. No server needed; the files
are read from the source tree."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import lizard
from lizard import errors

SDK = Path(__file__).resolve().parents[1]
SCRIPT = SDK / "scripts" / "gen_errors.py"
OPENAPI = SDK.parents[1] / "crates" / "lizard-server" / "openapi.json"
TABLE = json.loads((SDK.parent / "errors.json").read_text())


def test_the_committed_table_is_generated_from_errors_json() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = importlib.util.spec_from_file_location("gen_errors", SCRIPT)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (SDK / "src" / "lizard" / "_error_table.py").read_text() == gen.generate()


def test_every_wire_error_code_has_a_class_and_no_other_code_is_listed() -> None:
    doc = json.loads(OPENAPI.read_text())
    codes = {v["const"] for v in doc["components"]["schemas"]["ErrorCode"]["oneOf"]}
    assert set(TABLE["by_code"]) == codes


def test_responses_become_the_tables_classes() -> None:
    for code, name in TABLE["by_code"].items():
        body = json.dumps({"code": code, "message": "m"}).encode()
        e = errors.error_from_response(599, body)
        assert type(e).__name__ == name, code
        assert (e.code, e.status, e.message) == (code, 599, "m")
    for status, name in TABLE["by_status"].items():
        e = errors.error_from_response(int(status), b"<html>proxy</html>")
        assert type(e).__name__ == name, status
        assert e.code == f"http_{status}"
    # Not in the table: by class of status.
    assert type(errors.error_from_response(502, b"")) is lizard.SandboxError
    assert type(errors.error_from_response(418, b"")) is lizard.LizardError
