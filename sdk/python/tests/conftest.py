"""Test harness: one real ``lizard serve`` for the whole session, and fixtures around it.

The server runs from ``LIZARD_BIN`` (default ``<repo>/target/debug/lizard``, built by ``cargo build
-p lizard``) on a free port (``--listen 127.0.0.1:0``; its first stdout line is JSON with ``addr``),
with a temporary data dir and the templates of ``LIZARD_TEMPLATES_FROM`` (default
``<repo>/target/lizard-data``, where ``lizard template build`` put ``code-interpreter-v1``). The
session exports ``LIZARD_API_URL`` and ``LIZARD_API_KEY`` (the admin key from ``<data dir>/admin-key``),
so tests use the SDK exactly as a user would, configured by the environment.

At the end it kills every sandbox the server knows (sandboxes outlive the server by design), deletes
its volumes and stops the server. Nothing here is mocked, except in the tests that prove no request is sent.
Sandboxes need root (namespaces, cgroups, mounts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import httpx
import pytest

from lizard import CodeSandbox

REPO = Path(__file__).resolve().parents[3]
#: Project of the sandboxes the tests create (the seeds' own snippets use 'my-project').
PROJECT = "sdk-tests"


@dataclass
class Server:
    url: str
    admin_key: str
    data_dir: Path
    process: "subprocess.Popen[bytes]"

    def api(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> httpx.Response:
        """A raw request with the admin key, bypassing the SDK."""
        return httpx.request(
            method,
            self.url + path,
            json=body,
            headers={"Authorization": f"Bearer {self.admin_key}"},
            timeout=60,
        )

    def project_key(self, name: str, **fields: Any) -> str:
        """Create the project ``name`` (``fields``: more of its settings, e.g. ``allow_egress=True``)
        and return its API key."""
        r = self.api("POST", "/v1/projects", {"name": name, **fields})
        assert r.is_success, r.text
        return r.json()["api_key"]


def host_ipv4() -> str:
    """A non-loopback IPv4 address of this host (the source address of a route outside)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.200", 9))
        return s.getsockname()[0]


def greeter() -> Tuple[str, int, socket.socket]:
    """A TCP server on this host's address that answers every connection with ``hi`` and closes it:
    its address, port and listening socket (close that to stop it)."""
    ip = host_ipv4()
    listener = socket.create_server((ip, 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            try:
                c.sendall(b"hi\n")
            except OSError:
                pass
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return ip, port, listener


def _lizard_bin() -> Path:
    p = Path(os.environ.get("LIZARD_BIN") or REPO / "target" / "debug" / "lizard")
    if not p.is_file():
        pytest.exit(f"no lizard binary at {p}: run `cargo build -p lizard` (or set LIZARD_BIN)", returncode=2)
    return p


def _templates_from() -> Path:
    p = Path(os.environ.get("LIZARD_TEMPLATES_FROM") or REPO / "target" / "lizard-data")
    if not (p / "templates").is_dir():
        pytest.exit(
            f"no templates in {p}: run `target/debug/lizard template build code-interpreter-v1 "
            f"--data-dir {REPO / 'target' / 'lizard-data'}` (or set LIZARD_TEMPLATES_FROM)",
            returncode=2,
        )
    return p


def _read_first_line(proc: "subprocess.Popen[bytes]", timeout: float) -> bytes:
    assert proc.stdout is not None
    out: Dict[str, bytes] = {}

    def read() -> None:
        out["line"] = proc.stdout.readline()  # type: ignore[union-attr]

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        proc.kill()
        pytest.exit(f"lizard serve printed nothing within {timeout} s", returncode=2)
    return out.get("line", b"")


def _drain(stream: Any) -> None:
    # Keep reading the server's stdout so it can never block on a full pipe.
    for _ in iter(lambda: stream.read(65536), b""):
        pass


def _mounts_under(path: Path) -> list:
    prefix = str(path.resolve())
    try:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
    except OSError:
        return []
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


@pytest.fixture(scope="session")
def lizard_server() -> Iterator[Server]:
    binary = _lizard_bin()
    templates = _templates_from()
    data_dir = Path(tempfile.mkdtemp(prefix="lizard-py-sdk-"))
    env = dict(os.environ)
    env.setdefault("LIZARD_LOG", "warn")
    # A pool of 2 (the default, sized from the host's memory, launches ≈ 20 sandboxes at start).
    env.setdefault("LIZARD_POOL_SIZE", "2")
    proc = subprocess.Popen(
        # The per-language capture, whose hibernation and snapshot reports name each saved and
        # lost variable, is what these tests read: asked for (CRIU, the server's default where
        # it is installed, is tested in crates/lizard/tests/hibernate_exact.rs, snapshots_exact.rs).
        [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
         "--templates-from", str(templates), "--criu", "none",
         # 2 GiB build disks (default 8): each is promised disk space up front.
         "--template-build-disk-mb", "2048"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=None,  # the server's log goes to the test output
        env=env,
    )
    line = _read_first_line(proc, timeout=120)
    try:
        ready = json.loads(line)
        addr = ready["addr"]
    except (ValueError, KeyError, TypeError):
        proc.kill()
        pytest.exit(f"lizard serve did not start: first stdout line {line!r}", returncode=2)
    threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
    admin_key = (data_dir / "admin-key").read_text().strip()
    server = Server(url=f"http://{addr}", admin_key=admin_key, data_dir=data_dir, process=proc)

    saved = {k: os.environ.get(k) for k in ("LIZARD_API_URL", "LIZARD_API_KEY")}
    os.environ["LIZARD_API_URL"] = server.url
    os.environ["LIZARD_API_KEY"] = admin_key
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        leftovers = []
        try:
            for sb in server.api("GET", "/v1/sandboxes").json():
                r = server.api("DELETE", f"/v1/sandboxes/{sb['sandbox_id']}")
                if r.status_code not in (204, 404):
                    leftovers.append((sb["sandbox_id"], r.status_code, r.text))
            # Volumes are host mounts: delete them (their sandboxes are gone by now).
            for v in server.api("GET", "/v1/volumes").json():
                r = server.api("DELETE", f"/v1/volumes/{v['volume_id']}?force=true")
                if r.status_code not in (204, 404):
                    leftovers.append((v["volume_id"], r.status_code, r.text))
        except httpx.HTTPError as e:
            leftovers.append(("?", 0, str(e)))
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        mounts = _mounts_under(data_dir)
        if leftovers or mounts:
            # Never rm -rf through a live sandbox's mounts.
            print(f"lizard SDK tests: left {data_dir} in place: sandboxes {leftovers}, mounts {mounts}",
                  file=sys.stderr)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def server(lizard_server: Server) -> Server:
    return lizard_server


@pytest.fixture
def sandbox(lizard_server: Server) -> Iterator[CodeSandbox]:
    """A fresh sandbox, killed after the test."""
    with CodeSandbox.create(project=PROJECT) as sb:
        yield sb


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
