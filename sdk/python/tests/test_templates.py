"""User templates through the SDK against a real server: a Dockerfile build streamed with its steps
and logs (a directory context packed by the SDK, ``COPY``, ``ENV``, a ``RUN pip install`` of a local
wheel as ``USER user``), a sandbox from it, a template from a sandbox, list/get/delete, typed build
errors naming the line (before the build and from the stream, with the log), project isolation;
sync and async."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from lizard import (
    AsyncTemplates,
    AuthenticationError,
    CodeSandbox,
    InvalidArgumentError,
    NotFoundError,
    TemplateBuildError,
    TemplateBuildLog,
    TemplateBuildStep,
    Templates,
    TimeoutError,
)
from lizard._core import context_archive

from .conftest import PROJECT


def _tiny_wheel(path: Path) -> None:
    """A pure-Python wheel ``tinypkg-1.0-py3-none-any.whl`` (pip installs it without an index)."""
    files = {
        "tinypkg/__init__.py": "VALUE = 'tiny-42'\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for n, t in files.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{n},sha256={h},{len(t.encode())}")
    record.append("tinypkg-1.0.dist-info/RECORD,,")
    files["tinypkg-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, t in files.items():
            z.writestr(n, t)


DOCKERFILE = """\
FROM code-interpreter-v1
ENV GREETING="hello from the py template"
USER user
WORKDIR /home/user/app
COPY data.txt ./
COPY wheels/ /home/user/wheels/
RUN pip install --no-index --no-deps /home/user/wheels/tinypkg-1.0-py3-none-any.whl && \\
    echo "built as $(id -un)"
"""


def test_build_use_list_get_delete(lizard_server, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    (ctx / "wheels").mkdir(parents=True)
    (ctx / "data.txt").write_text("from the context\n")
    _tiny_wheel(ctx / "wheels" / "tinypkg-1.0-py3-none-any.whl")

    steps: list = []
    logs: list = []
    tpl = Templates.build(
        "py-tpl", DOCKERFILE, context=ctx, project=PROJECT,
        on_step=steps.append, on_log=logs.append,
    )
    assert tpl.name == "py-tpl" and tpl.state == "ready" and tpl.project == PROJECT
    assert tpl.base == "code-interpreter-v1" and not tpl.builtin and tpl.key
    assert all(isinstance(s, TemplateBuildStep) for s in steps)
    assert [s.index for s in steps] == list(range(1, len(steps) + 1)) and steps[-1].total == len(steps)
    assert any(s.name.startswith("RUN pip install") for s in steps), steps
    assert all(isinstance(l, TemplateBuildLog) for l in logs)
    assert "built as user" in "".join(l.text for l in logs)

    with CodeSandbox.create(project=PROJECT, template="py-tpl") as sb:
        ex = sb.run_code(
            "import os, tinypkg\n"
            "print(os.environ['GREETING'])\n"
            "print(open('data.txt').read(), end='')\n"
            "print(tinypkg.VALUE, os.getcwd())"
        )
        assert ex.error is None, ex.error
        assert ex.stdout == "hello from the py template\nfrom the context\ntiny-42 /home/user/app\n"

        # A template of this sandbox's files, and a sandbox from it.
        sb.run_code("open('/home/user/snap.txt', 'w').write('snapshot')")
        snap = Templates.from_sandbox("py-snap", sb, project=PROJECT)
        assert snap.state == "ready" and snap.base == "py-tpl"
    with CodeSandbox.create(project=PROJECT, template="py-snap") as sb2:
        assert sb2.run_code("print(open('/home/user/snap.txt').read())").stdout == "snapshot\n"

    got = Templates.get("py-tpl", project=PROJECT)
    assert got.key == tpl.key and "built as user" in got.build_log
    # What the build installed, listed inside its build sandbox.
    assert got.packages and "bash" in got.packages["debian"] and "numpy" in got.packages["python"]
    assert [v.state for v in got.versions] == ["ready"]
    listed = {t.name: t for t in Templates.list(project=PROJECT)}
    assert {"py-tpl", "py-snap", "code-interpreter-v1"} <= set(listed)
    assert listed["code-interpreter-v1"].builtin and listed["code-interpreter-v1"].project is None

    # The same content again is a cache hit: the same key, no steps.
    again_steps: list = []
    again = Templates.build("py-tpl", DOCKERFILE, context=ctx, project=PROJECT, on_step=again_steps.append)
    assert again.key == tpl.key and again_steps == []

    # Another project's key sees none of it.
    other = lizard_server.project_key("py-tpl-other")
    with pytest.raises(NotFoundError):
        Templates.get("py-tpl", api_key=other)
    with pytest.raises(NotFoundError):
        Templates.delete("py-tpl", api_key=other)
    assert "py-tpl" not in {t.name for t in Templates.list(api_key=other)}
    with pytest.raises(NotFoundError):
        CodeSandbox.create(template="py-tpl", api_key=other)

    with pytest.raises(AuthenticationError) as denied:
        Templates.delete("code-interpreter-v1", project=PROJECT)
    assert denied.value.code == "permission_denied"
    Templates.delete("py-snap", project=PROJECT)
    Templates.delete("py-tpl", project=PROJECT)
    with pytest.raises(NotFoundError):
        Templates.get("py-tpl", project=PROJECT)
    with pytest.raises(NotFoundError):
        Templates.delete("py-tpl", project=PROJECT)


def test_a_bad_dockerfile_is_a_typed_error_naming_the_line(lizard_server) -> None:
    with pytest.raises(TemplateBuildError) as err:
        Templates.build("py-bad", "FROM code-interpreter-v1\n\nEXPOSE 80\n", project=PROJECT)
    assert err.value.code == "invalid_dockerfile" and err.value.status == 400
    assert "line 3" in err.value.message and err.value.log == ""
    with pytest.raises(NotFoundError):
        Templates.get("py-bad", project=PROJECT)


def test_arguments_are_checked_before_any_request(tmp_path: Path, monkeypatch) -> None:
    # Nowhere to send anything: a request would fail with SandboxError, not InvalidArgumentError.
    monkeypatch.setenv("LIZARD_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LIZARD_API_KEY", "unused")
    for kwargs in [
        {},
        {"dockerfile": "FROM code-interpreter-v1\n", "from_sandbox": "sb_x"},
        {"dockerfile": "FROM code-interpreter-v1\n", "context": tmp_path / "missing"},
        {"dockerfile": "FROM code-interpreter-v1\n", "context": 3},
        {"from_sandbox": "sb_x", "context": b""},
        {"dockerfile": "FROM code-interpreter-v1\n", "timeout_ms": -1},
    ]:
        with pytest.raises(InvalidArgumentError):
            Templates.build("x", **kwargs)
    with pytest.raises(InvalidArgumentError):
        Templates.get("")


def test_a_directory_context_is_a_reproducible_tar(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("a")
    (tmp_path / "b.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "b.sh", 0o755)
    os.symlink("sub/a.txt", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    first = context_archive(tmp_path)
    os.utime(tmp_path / "sub" / "a.txt", (1, 1))
    assert context_archive(str(tmp_path)) == first  # times are not part of it
    with tarfile.open(fileobj=io.BytesIO(first)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert sorted(members) == ["b.sh", "link", "sub", "sub/a.txt"]  # no fifo
        assert members["link"].issym() and members["link"].linkname == "sub/a.txt"
        assert members["b.sh"].mode & 0o777 == 0o755 and members["b.sh"].uid == 0
        assert t.extractfile("sub/a.txt").read() == b"a"  # type: ignore[union-attr]
    assert context_archive(first) == first


def test_a_callback_that_raises_cancels_a_build_with_cancel_on_disconnect(lizard_server) -> None:
    class Enough(Exception):
        pass

    def on_log(chunk: TemplateBuildLog) -> None:
        if "started" in chunk.text:
            raise Enough()

    with pytest.raises(Enough):
        Templates.build(
            "py-slow", "FROM code-interpreter-v1\nUSER user\nRUN echo started; sleep 600\n",
            project=PROJECT, on_log=on_log, cancel_on_disconnect=True,
        )
    deadline = time.monotonic() + 60
    while True:
        info = Templates.get("py-slow", project=PROJECT)
        if info.state != "building" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert info.state == "failed" and info.error and "cancelled" in info.error["message"], info
    Templates.delete("py-slow", project=PROJECT)


def test_timeout_ms_bounds_the_whole_build(lizard_server) -> None:
    with pytest.raises(TimeoutError) as err:
        Templates.build(
            "py-slow2", "FROM code-interpreter-v1\nUSER user\nRUN sleep 600\n",
            project=PROJECT, timeout_ms=3000, cancel_on_disconnect=True,
        )
    assert err.value.code == "timeout"
    deadline = time.monotonic() + 60
    while True:
        try:
            info = Templates.get("py-slow2", project=PROJECT)
        except NotFoundError:
            return  # the client left before the build was registered
        if info.state != "building" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert info.state == "failed", info
    Templates.delete("py-slow2", project=PROJECT)


@pytest.mark.anyio
async def test_async_build_failure_carries_the_log(lizard_server) -> None:
    steps: list = []
    chunks: list = []

    async def on_log(chunk: TemplateBuildLog) -> None:
        chunks.append(chunk.text)

    with pytest.raises(TemplateBuildError) as err:
        await AsyncTemplates.build(
            "py-fails",
            "FROM code-interpreter-v1\nUSER user\nRUN echo before-the-failure && exit 3\n",
            project=PROJECT, on_step=steps.append, on_log=on_log,
        )
    assert err.value.code == "build_failed" and err.value.status is None
    assert "line 3" in err.value.message, err.value.message
    assert "before-the-failure" in err.value.log and "before-the-failure" in "".join(chunks)
    assert any(s.name.startswith("RUN echo") for s in steps)
    failed = await AsyncTemplates.get("py-fails", project=PROJECT)
    assert failed.state == "failed" and failed.error and failed.error["code"] == "build_failed"
    assert "py-fails" in {t.name for t in await AsyncTemplates.list(project=PROJECT)}
    await AsyncTemplates.delete("py-fails", project=PROJECT)
    with pytest.raises(NotFoundError):
        await AsyncTemplates.delete("py-fails", project=PROJECT)
