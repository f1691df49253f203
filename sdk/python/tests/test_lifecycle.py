"""The sandbox's life through the SDK: create options, info, list, timeouts, pause/resume/connect,
kill, and context managers that kill on exit. Output and results are tested elsewhere."""

from __future__ import annotations

import time

import pytest

from lizard import CodeSandbox, InvalidArgumentError, NotFoundError, SandboxInfo

from .conftest import PROJECT, Server, greeter


def test_create_options_and_info(lizard_server: Server) -> None:
    with CodeSandbox.create(
        project=PROJECT,
        timeout_ms=120_000,
        metadata={"owner": "py-sdk", "case": "options"},
        envs={"FROM_CREATE": "yes"},
        limits={"memory_mb": 512},
    ) as sb:
        info = sb.get_info()
        assert isinstance(info, SandboxInfo)
        assert info.sandbox_id == sb.sandbox_id
        assert (info.project, info.template, info.state) == (PROJECT, "code-interpreter-v1", "running")
        assert info.metadata == {"owner": "py-sdk", "case": "options"}
        assert info.limits.memory_mb == 512
        assert 100_000 < info.timeout_at_ms - info.created_at_ms <= 121_000
        assert sb.run_code("import os; print(os.environ['FROM_CREATE'])").stdout == "yes\n"
        assert sb.run_code('echo "$FROM_CREATE"', language="bash").stdout == "yes\n"
        # envs of one run are visible to that run only.
        assert sb.run_code("import os; print(os.environ['ONE'])", envs={"ONE": "1"}).stdout == "1\n"
        assert sb.run_code("import os; print(os.environ.get('ONE'))").stdout == "None\n"

        listed = CodeSandbox.list(metadata={"case": "options"})
        assert [s.sandbox_id for s in listed] == [sb.sandbox_id]
        assert sb.sandbox_id in {s.sandbox_id for s in CodeSandbox.list(project=PROJECT, state="running")}

        before = time.time() * 1000
        sb.set_timeout(600_000)
        assert sb.get_info().timeout_at_ms >= before + 599_000


def test_egress_allow_list(lizard_server: Server) -> None:
    """``egress=[ip:port]`` reaches that server only; without it, nothing outside."""
    ip, port, listener = greeter()
    # A request, then the answer: the host's egress relay accepts every redirected connection and
    # decides on its first bytes, so a bare connect() would succeed either way.
    probe = (
        f"import socket\ntry:\n    s = socket.create_connection(('{ip}', {port}), timeout=3)\n"
        f"    s.sendall(b'GET / HTTP/1.0\\r\\nHost: {ip}\\r\\n\\r\\n')\n"
        "    print('ok' if s.recv(2) == b'hi' else 'no')\nexcept OSError: print('no')"
    )
    with CodeSandbox.create(project=PROJECT, egress=[f"{ip}:{port}"], limits={"disk_mb": 1024}) as sb:
        assert sb.get_info().limits.disk_mb == 1024
        assert sb.run_code(probe).stdout == "ok\n"
        assert sb.run_code(probe.replace(str(port), str(port + 1) if port < 65535 else "1")).stdout == "no\n"
    with CodeSandbox.create(project=PROJECT) as sb:
        assert sb.run_code(probe).stdout == "no\n"
    with pytest.raises(InvalidArgumentError):
        CodeSandbox.create(project=PROJECT, egress=42)  # type: ignore[arg-type]
    listener.close()


def test_context_manager_kills_on_exit(lizard_server: Server) -> None:
    with CodeSandbox.create(project=PROJECT) as sb:
        sb.run_code("x = 1")
        sid = sb.sandbox_id
    with pytest.raises(NotFoundError):
        CodeSandbox.connect(sid)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with CodeSandbox.create(project=PROJECT) as sb:
            sid = sb.sandbox_id
            raise Boom()
    with pytest.raises(NotFoundError):
        CodeSandbox.connect(sid)

    # Killed inside the block: exiting is still fine.
    with CodeSandbox.create(project=PROJECT) as sb:
        assert sb.kill() is True
        assert sb.kill() is False


def test_pause_connect_keeps_state(lizard_server: Server) -> None:
    sb = CodeSandbox.create(project=PROJECT)
    sb.run_code("x = 42")
    sb.run_code("y=7", language="bash")
    sb.pause()
    sb.pause()  # idempotent
    assert sb.get_info().state == "paused"
    sb.close()

    again = CodeSandbox.connect(sb.sandbox_id)
    assert again.get_info().state == "running"
    assert again.run_code("print(x)").stdout == "42\n"
    assert again.run_code("echo $y", language="bash").stdout == "7\n"
    # connect() on a running sandbox changes nothing.
    third = CodeSandbox.connect(sb.sandbox_id)
    assert third.run_code("x += 1; print(x)").stdout == "43\n"
    assert third.kill() is True
    with pytest.raises(NotFoundError):
        again.get_info()


def test_hibernate_connect_restores_state_and_reports_losses(lizard_server: Server) -> None:
    sb = CodeSandbox.create(project=PROJECT)
    sb.run_code("import numpy as np\nx = np.arange(5)\ngen = (i for i in range(3))")
    sb.run_code("y=7", language="bash")
    saved = sb.hibernate()
    assert saved is not None and saved.method == "per-language"
    assert sb.get_info().state == "hibernated"
    py = next(c for c in saved.contexts if c.language == "python")
    assert {"np", "x"} <= {i.name for i in py.restored}
    assert [l.name for l in py.lost] == ["gen"]
    assert sb.hibernate() is None  # idempotent
    sb.close()

    again = CodeSandbox.connect(sb.sandbox_id)
    report = again.restore_report
    assert report is not None
    restored = next(c for c in report.contexts if c.id == py.id)
    assert "x" in {i.name for i in restored.restored}
    assert "generator" in next(l.reason for l in restored.lost if l.name == "gen")
    assert again.run_code("print(int(x.sum()))").stdout == "10\n"
    assert again.run_code("echo $y", language="bash").stdout == "7\n"
    assert again.resume() is None  # running: nothing to restore
    assert again.kill() is True


def test_timeout_ms_of_a_cell_keeps_the_kernel(sandbox: CodeSandbox) -> None:
    sandbox.run_code("kept = 'yes'")
    ex = sandbox.run_code("import time; time.sleep(10)", timeout_ms=300)
    assert ex.status == "timeout"
    assert ex.error is not None and ex.error.name == "Timeout"
    assert not ex.success
    assert sandbox.run_code("print(kept)").stdout == "yes\n"


def test_bash_errors_and_kernel_death(sandbox: CodeSandbox) -> None:
    ex = sandbox.run_code("echo out; false", language="bash")
    assert ex.stdout == "out\n"
    assert ex.error is not None and (ex.error.name, ex.error.value) == ("ExitCode", "1")
    assert ex.status == "error"
    ex = sandbox.run_code("import os; os._exit(1)")
    assert ex.status == "kernel_died" and ex.error is not None and ex.error.name == "KernelDied"
    assert sandbox.run_code("print('fresh')").stdout == "fresh\n"


def test_get_host_reaches_a_service_in_the_sandbox(sandbox: CodeSandbox) -> None:
    import os
    import time

    import httpx

    sandbox.run_code(
        "mkdir -p ~/site && echo hi-from-sandbox > ~/site/index.html && "
        "(cd ~/site && nohup python -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)",
        language="bash",
    )
    url = sandbox.get_host(8000)
    assert url.endswith(f"/v1/sandboxes/{sandbox.sandbox_id}/ports/8000")
    headers = {"authorization": f"Bearer {os.environ['LIZARD_API_KEY']}"}
    deadline = time.monotonic() + 20
    while True:
        r = httpx.get(url + "/index.html", headers=headers)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200 and "hi-from-sandbox" in r.text
    with pytest.raises(InvalidArgumentError):
        sandbox.get_host(0)
