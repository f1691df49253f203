"""The sync client's HTTP transport (``lizard._http``, HTTP/1.1 over a socket; issue #24): keep-alive
connections reused across calls and threads, an idle connection the server closed, timeouts,
streams delivered as they arrive, cut streams, interrupts, TLS, large bodies, and which transport
``new_client`` picks (httpx with a proxy or ``LIZARD_SDK_TRANSPORT=httpx``).

The tests on a ``FakeServer`` (a few lines of HTTP/1.1 over a socket, no Lizard) pin the wire
cases a real server cannot be made to produce on demand; the others use the real server.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs

import httpx
import pytest

import lizard
from lizard import CodeSandbox, SandboxError, _core, _http, _sync_support

from .conftest import PROJECT, Server

# ---- a fake server ------------------------------------------------------------------------------

#: A handler gets (connection number, method, target, body) and the socket, writes its answer, and
#: returns whether to keep the connection open for another request.
Handler = Callable[[int, str, str, bytes, socket.socket], bool]


def ok(body: bytes = b"{}", ctype: str = "application/json") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (ctype.encode(), len(body), body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


NDJSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"


def frame(**f: Any) -> bytes:
    return chunk(json.dumps(f).encode() + b"\n")


class FakeServer:
    """HTTP/1.1 on 127.0.0.1, a thread per connection; requests with a Content-Length or a
    chunked body. ``connections`` counts the connections accepted, ``requests`` lists
    ``(connection, method, target, body)``, ``closed`` the connections the client closed."""

    def __init__(self, handler: Handler, tls: Optional[ssl.SSLContext] = None) -> None:
        self.handler = handler
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: List[Tuple[int, str, str, bytes]] = []
        self.closed: List[int] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                n = self.connections
            threading.Thread(target=self._serve, args=(sock, n), daemon=True).start()

    def _serve(self, sock: socket.socket, n: int) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            f = sock.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    with self.lock:
                        self.closed.append(n)
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers: Dict[str, str] = {}
                while True:
                    h = f.readline().decode().strip()
                    if not h:
                        break
                    k, v = h.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
                if headers.get("transfer-encoding") == "chunked":
                    body = b""
                    while True:
                        size = int(f.readline().strip(), 16)
                        body += f.read(size)
                        f.readline()
                        if size == 0:
                            break
                else:
                    body = f.read(int(headers.get("content-length", "0")))
                with self.lock:
                    self.requests.append((n, method, target, body))
                if not self.handler(n, method, target, body, sock):
                    sock.close()
                    return
        except (OSError, ValueError):
            return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeServer]]:
    servers: List[FakeServer] = []

    def make(handler: Handler, tls: Optional[ssl.SSLContext] = None) -> FakeServer:
        servers.append(FakeServer(handler, tls))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def client(url: str, timeout: Any = 5.0) -> _http.Client:
    return _http.Client(url, {"Authorization": "Bearer k"}, httpx.Timeout(timeout))


def answer(body: bytes = b"{}") -> Handler:
    def handle(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(ok(body))
        return True

    return handle


def in_threads(work: Callable[[int], None], n: int) -> List[BaseException]:
    """Run ``work(0)`` … ``work(n - 1)`` each in a thread of its own; the exceptions they raised."""
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# ---- connections --------------------------------------------------------------------------------


def test_one_keep_alive_connection_for_successive_requests(fake: Callable[..., FakeServer]) -> None:
    srv = fake(answer(b'{"a":1}'))
    with client(srv.url) as c:
        for _ in range(5):
            r = c.request("POST", "/x", json={"code": "1+1"}, params={"path": "/a b+c"})
            assert r.status_code == 200 and r.json() == {"a": 1}
    assert srv.connections == 1
    n, method, target, body = srv.requests[0]
    path, query = target.split("?")
    assert (method, path, parse_qs(query), json.loads(body)) == ("POST", "/x", {"path": ["/a b+c"]}, {"code": "1+1"})


def test_threads_share_a_small_pool(fake: Callable[..., FakeServer]) -> None:
    def slow(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        time.sleep(0.005)
        sock.sendall(ok(req))
        return True

    srv = fake(slow)
    c = client(srv.url)

    def work(i: int) -> None:
        for j in range(20):
            assert c.request("POST", "/echo", json={"i": i, "j": j}).json() == {"i": i, "j": j}

    assert not in_threads(work, 6)
    assert len(srv.requests) == 120
    assert srv.connections <= 6  # one per thread at most, each reused
    assert len(c._idle) <= _http.MAX_IDLE
    c.close()
    assert c.is_closed
    with pytest.raises(RuntimeError):
        c.request("GET", "/x")


def test_an_idle_connection_the_server_closed_is_not_used(fake: Callable[..., FakeServer]) -> None:
    # The server answers, then closes the connection (as lizard serve does after
    # --header-read-timeout of idleness): the next request goes on a new connection.
    def once(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(ok())
        return False

    srv = fake(once)
    c = client(srv.url)
    c.request("GET", "/a")
    deadline = time.monotonic() + 5
    while 1 not in srv.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the FIN reached the client
    assert c.request("GET", "/b").status_code == 200
    assert srv.connections == 2
    assert [r[0] for r in srv.requests] == [1, 2]


def test_a_connection_closed_as_it_is_taken_is_retried_once(
    fake: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race the readability check cannot see: the server closes the connection just as the
    # client sends on it. The request (its body can be sent again) goes once more, on a new one.
    def once(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(ok(b'{"n":%d}' % n))
        return False

    srv = fake(once)
    c = client(srv.url)
    assert c.request("GET", "/a").json() == {"n": 1}
    time.sleep(0.1)
    monkeypatch.setattr(_http, "_readable", lambda sock: False)
    assert c.request("POST", "/b", json={}).json() == {"n": 2}
    assert srv.connections == 2
    # A streamed body cannot be sent twice: the failure is raised (as an httpx error).
    time.sleep(0.1)
    with pytest.raises(httpx.HTTPError):
        c.request("PUT", "/c", content=iter([b"x" * 10]))
    assert srv.connections == 2


def test_a_stream_left_early_closes_its_connection(fake: Callable[..., FakeServer]) -> None:
    disconnected = threading.Event()

    def stream(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        if target == "/plain":
            sock.sendall(ok())
            return True
        sock.sendall(NDJSON_HEAD + frame(type="start"))
        sock.settimeout(10)
        if sock.recv(1) == b"":  # the client went away mid-stream
            disconnected.set()
        return False

    srv = fake(stream)
    c = client(srv.url)
    with c.stream("POST", "/run") as r:
        lines = r.iter_lines()
        assert json.loads(next(lines)) == {"type": "start"}
    # The server sees the disconnect (that is what interrupts a cell) ...
    assert disconnected.wait(10)
    # ... and the next request opens a new connection.
    assert c.request("GET", "/plain").status_code == 200
    assert srv.connections == 2


# ---- streams ------------------------------------------------------------------------------------


def test_frames_reach_the_callbacks_as_they_arrive(fake: Callable[..., FakeServer]) -> None:
    # The server sends the second frame only once the client has handed the first to on_stdout:
    # a client that buffered the stream would never see it (and fail on the server's wait).
    seen = threading.Event()

    def run(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(NDJSON_HEAD + frame(type="start", execution_count=1) + frame(type="stdout", text="a\n"))
        if not seen.wait(10):
            sock.sendall(b"0\r\n\r\n")
            return False
        sock.sendall(frame(type="stdout", text="b\n") + frame(type="end", status="ok", duration_ms=1) + b"0\r\n\r\n")
        return True

    srv = fake(run)
    got: List[str] = []

    def on_stdout(s: str) -> None:
        got.append(s)
        seen.set()

    ex = CodeSandbox("sb", api_url=srv.url, api_key="k").run_code("x", on_stdout=on_stdout)
    assert got == ["a\n", "b\n"] and ex.stdout == "a\nb\n" and ex.status == "ok"


def test_a_silent_stream_has_no_deadline_unless_the_cell_has_one(fake: Callable[..., FakeServer]) -> None:
    # run_code waits as long as the cell runs (no read timeout) unless given timeout_ms; then
    # timeout_ms plus request_timeout.
    def slow(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(NDJSON_HEAD + frame(type="start"))
        time.sleep(1.0)
        try:
            sock.sendall(frame(type="end", status="ok") + b"0\r\n\r\n")
        except OSError:
            return False
        return True

    srv = fake(slow)
    sb = CodeSandbox("sb", api_url=srv.url, api_key="k", request_timeout=0.3)
    assert sb.run_code("x").status == "ok"
    with pytest.raises(lizard.TimeoutError) as e:
        sb.run_code("x", timeout_ms=100)
    assert e.value.code == "timeout"
    # A control request has request_timeout.
    with pytest.raises(lizard.TimeoutError):
        sb.get_info()


def test_a_cut_stream_is_an_unavailable_error(fake: Callable[..., FakeServer]) -> None:
    def cut(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        if target.endswith("/execute"):
            sock.sendall(NDJSON_HEAD + frame(type="start") + b"40\r\n{\"type\":")  # then gone
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"a\":")  # 5 of 10 bytes
        sock.shutdown(socket.SHUT_RDWR)
        return False

    srv = fake(cut)
    sb = CodeSandbox("sb", api_url=srv.url, api_key="k")
    with pytest.raises(SandboxError) as e:
        sb.run_code("x")
    assert e.value.code == "unavailable"
    with pytest.raises(SandboxError):
        sb.get_info()
    c = client(srv.url)
    with c.stream("GET", "/x") as r:
        with pytest.raises(httpx.RemoteProtocolError):
            list(r.iter_bytes())


def test_error_statuses_are_typed_errors(fake: Callable[..., FakeServer]) -> None:
    def err(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        body = json.dumps({"error": {"code": "not_found", "message": "sandbox not found"}}).encode()
        sock.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (len(body), body))
        return True

    srv = fake(err)
    sb = CodeSandbox("sb", api_url=srv.url, api_key="k")
    for call in (lambda: sb.run_code("x"), sb.get_info, lambda: sb.files.read("a")):
        with pytest.raises(lizard.NotFoundError):
            call()
    assert srv.connections == 1  # error answers leave the connection usable


def test_connect_failures(fake: Callable[..., FakeServer]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        client(f"http://127.0.0.1:{port}").request("GET", "/")
    with pytest.raises(SandboxError) as e:
        CodeSandbox("sb", api_url=f"http://127.0.0.1:{port}", api_key="k").run_code("1")
    assert e.value.code == "unavailable"


# ---- the wire, byte by byte ---------------------------------------------------------------------


def bytewise(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` one byte per segment (``TCP_NODELAY``, a pause between each few)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(data)):
        sock.sendall(data[i:i + 1])
        if i % 16 == 0:
            time.sleep(0.001)


def test_every_framing_split_at_every_byte_arrives_whole_on_one_connection(
    fake: Callable[..., FakeServer]
) -> None:
    answers = [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nhello world", b"hello world"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n"
         b"0\r\nx-trailer: 1\r\n\r\n", b"hello world"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n", b"0123456789"),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"ok"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", b""),
    ]

    def scripted(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        bytewise(sock, answers[int(target[1:])][0])
        return True

    srv = fake(scripted)
    c = client(srv.url)
    for i, (_, want) in enumerate(answers):
        assert c.request("GET", f"/{i}").content == want, i
        with c.stream("GET", f"/{i}") as r:
            assert b"".join(r.iter_bytes()) == want, i
    assert srv.connections == 1


def test_the_request_is_one_head_then_its_body(fake: Callable[..., FakeServer]) -> None:
    heads: List[bytes] = []

    def raw(sock: socket.socket) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(4096)
        head, _, body = buf.partition(b"\r\n\r\n")
        heads.append(head)
        length = int(dict(h.split(b": ", 1) for h in head.split(b"\r\n")[1:]).get(b"Content-Length", b"0"))
        while len(body) < length:
            body += sock.recv(4096)
        heads.append(body)
        sock.sendall(ok(b'{"x":1}', "application/json; charset=utf-8") )

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    t = threading.Thread(target=lambda: raw(listener.accept()[0]), daemon=True)
    t.start()
    r = client(f"http://127.0.0.1:{port}").request("POST", "/v1/x", params={"q": "a b"}, json={"é": 1})
    t.join(5)
    listener.close()
    assert r.json() == {"x": 1}
    lines = heads[0].split(b"\r\n")
    assert lines[0] == b"POST /v1/x?q=a%20b HTTP/1.1"
    assert f"Host: 127.0.0.1:{port}".encode() in lines
    assert b"Authorization: Bearer k" in lines
    assert b"Content-Type: application/json" in lines
    assert heads[1] == '{"é":1}'.encode()


def test_what_ends_keep_alive(fake: Callable[..., FakeServer]) -> None:
    # `connection: close`, bytes beyond an answer, and a body framed by the connection's end each
    # leave the connection unusable: the next request opens another.
    answers = {
        "/close": b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\na",
        "/extra": b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nbEXTRA",
        "/eof": b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
    }

    def scripted(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(answers.get(target, ok()))
        return target not in ("/eof",)

    srv = fake(scripted)
    c = client(srv.url)
    assert c.request("GET", "/close").content == b"a"
    assert c.request("GET", "/extra").content == b"b"
    assert c.request("GET", "/eof").content == b"until the end"
    assert c.request("GET", "/ok").json() == {}
    assert srv.connections == 4


def test_malformed_answers_are_protocol_errors(fake: Callable[..., FakeServer]) -> None:
    bad = {
        "/ssh": b"SSH-2.0-OpenSSH\r\n\r\n",
        "/colon": b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        "/length": b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        "/gzip": b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        "/huge": b"HTTP/1.1 200 OK\r\nx: " + b"a" * (70 * 1024),
        "/size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        "/crlf": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY\r\n",
    }

    def scripted(n: int, method: str, target: str, req: bytes, sock: socket.socket) -> bool:
        sock.sendall(bad.get(target, ok()))
        return target not in bad

    srv = fake(scripted)
    c = client(srv.url)
    for target in bad:
        with pytest.raises(httpx.RemoteProtocolError):
            c.request("GET", target)
    assert c.request("GET", "/fine").json() == {}


def test_a_header_that_would_split_the_request_is_refused_unsent(fake: Callable[..., FakeServer]) -> None:
    srv = fake(answer())
    c = _http.Client(srv.url, {"Authorization": "Bearer k\r\nX-Injected: 1"}, httpx.Timeout(5.0))
    with pytest.raises(ValueError):
        c.request("GET", "/x")
    assert srv.requests == []


# ---- TLS ----------------------------------------------------------------------------------------


@pytest.fixture
def self_signed(tmp_path: Path) -> Tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_https_is_verified(
    fake: Callable[..., FakeServer], self_signed: Tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = fake(answer(b'{"ok":true}'), tls=ctx)
    # Not trusted (certifi's roots, as httpx): the connection fails.
    with pytest.raises(httpx.ConnectError):
        client(srv.url).request("GET", "/")
    # Trusted through SSL_CERT_FILE, as httpx does.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    c = client(srv.url)
    assert c.request("GET", "/").json() == {"ok": True}
    assert c.request("GET", "/").json() == {"ok": True}
    assert srv.connections == 2  # the refused one, then one kept alive


# ---- which transport ----------------------------------------------------------------------------


def test_the_transport_is_the_sdks_own_unless_httpx_is_asked_for_or_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "LIZARD_SDK_TRANSPORT"):
        monkeypatch.delenv(var, raising=False)
    cfg = _core.resolve_config("http://127.0.0.1:9", "k", 5)
    tls = _core.resolve_config("https://lizard.example", "k", 5)
    assert isinstance(_sync_support.new_client(cfg), _http.Client)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert isinstance(_sync_support.new_client(cfg), _http.Client)  # for https only
    assert isinstance(_sync_support.new_client(tls), httpx.Client)
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("ALL_PROXY", "http://proxy.example:3128")
    assert isinstance(_sync_support.new_client(cfg), httpx.Client)
    monkeypatch.delenv("ALL_PROXY")
    monkeypatch.setenv("LIZARD_SDK_TRANSPORT", "httpx")
    assert isinstance(_sync_support.new_client(cfg), httpx.Client)
    assert isinstance(CodeSandbox("sb", api_url="http://127.0.0.1:9", api_key="k")._http, httpx.Client)


# ---- against the real server --------------------------------------------------------------------


def _count_connects(monkeypatch: pytest.MonkeyPatch) -> List[int]:
    count = [0]
    connect = _http._Conn.connect

    def counted(self: _http._Conn) -> None:
        count[0] += 1
        connect(self)

    monkeypatch.setattr(_http._Conn, "connect", counted)
    return count


def test_run_code_reuses_one_connection(sandbox: CodeSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    if not isinstance(sandbox._http, _http.Client):
        pytest.skip("LIZARD_SDK_TRANSPORT=httpx")
    count = _count_connects(monkeypatch)
    sb = CodeSandbox.connect(sandbox.sandbox_id)
    for i in range(10):
        assert sb.run_code(f"{i}+1").text == str(i + 1)
        assert sb.files.write("a.txt", "x").size == 1
        assert sb.files.read("a.txt") == "x"
    assert count[0] == 1
    # commands.run stops reading at its `end` event, before the stream's last bytes: its
    # connection is closed (as with httpx) and the next call opens another.
    sb.commands.run("true")
    assert sb.run_code("1").text == "1"
    assert count[0] == 2


def test_one_sandbox_object_from_several_threads(sandbox: CodeSandbox) -> None:
    ctxs = [sandbox.create_context() for _ in range(4)]

    def work(i: int) -> None:
        for j in range(10):
            ex = sandbox.run_code(f"print({i * 100 + j})", context=ctxs[i])
            assert ex.stdout == f"{i * 100 + j}\n", ex

    errors = in_threads(work, 4)
    assert not errors, errors


def test_an_interrupt_mid_stream_stops_the_cell(sandbox: CodeSandbox) -> None:
    def interrupt(_: str) -> None:
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sandbox.run_code("import time\nprint('go', flush=True)\ntime.sleep(30)\nlate = 1", on_stdout=interrupt)
    assert time.monotonic() - start < 10
    # The closed connection interrupted the cell; the sandbox object works on.
    assert sandbox.run_code("print('late' in globals())", timeout_ms=20_000).stdout == "False\n"


def test_a_sandbox_killed_mid_stream(lizard_server: Server) -> None:
    sb = CodeSandbox.create(project=PROJECT)

    def kill(_: str) -> None:
        r = lizard_server.api("DELETE", f"/v1/sandboxes/{sb.sandbox_id}")
        assert r.status_code == 204, r.text

    start = time.monotonic()
    with pytest.raises(SandboxError) as e:
        sb.run_code("import time\nprint('go', flush=True)\ntime.sleep(30)", on_stdout=kill)
    assert time.monotonic() - start < 20
    assert e.value.code == "unavailable"
    with pytest.raises(lizard.NotFoundError):
        sb.run_code("1")
    assert sb.kill() is False


def test_a_connection_idle_past_the_servers_timeout(
    sandbox: CodeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lizard serve closes a kept-alive connection idle for --header-read-timeout (10 s): the next
    # call does not fail. `racing` does not look before reusing, as if the server closed the
    # connection just as it was taken: the request is sent again on a new connection.
    plain = CodeSandbox.connect(sandbox.sandbox_id)
    racing = CodeSandbox.connect(sandbox.sandbox_id)
    assert plain.run_code("1").text == racing.run_code("1").text == "1"
    time.sleep(11)
    assert plain.run_code("2").text == "2"
    if isinstance(racing._http, _http.Client):
        monkeypatch.setattr(_http, "_readable", lambda sock: False)
    assert racing.run_code("3").text == "3"
    assert racing.files.write("f.txt", b"x").size == 1


def test_large_upload_and_download(sandbox: CodeSandbox) -> None:
    size = 48 << 20
    block = bytes(range(256)) * 4096  # 1 MiB
    data = block * (size // len(block))
    assert sandbox.files.write("big.bin", data).size == size
    assert sandbox.files.read("big.bin", format="bytes") == data
    # Streamed both ways: an iterator of chunks up, chunks down.
    assert sandbox.files.write("big2.bin", (block for _ in range(size // len(block)))).size == size
    got = 0
    for part in sandbox.files.read("big2.bin", format="stream"):
        assert part == data[got:got + len(part)]
        got += len(part)
    assert got == size
    assert sandbox.run_code("import os; print(os.path.getsize('big2.bin'))").stdout == f"{size}\n"
