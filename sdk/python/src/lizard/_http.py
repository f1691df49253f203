"""The synchronous client's HTTP transport: a small keep-alive HTTP/1.1 client over a socket of the
standard library (issue #24: httpx costs ≈ 0.8 ms a call more, a third of a warm ``run_code``, and
``http.client`` ≈ 0.1 ms more, its headers parsed by the ``email`` package; see
docs/PERFORMANCE.md). A request is written in one go; an answer's head and body (framed by
``Content-Length``, ``chunked`` or the connection's end) are parsed in place (``_Conn``,
``_Raw``), with ``http.client``'s exceptions for what it would have refused.

``Client`` has the part of ``httpx.Client``'s surface that the generated sync client uses —
``request``, ``stream``, ``build_request``, ``send(stream=True)``, ``close``, ``is_closed`` — and
raises httpx's exceptions (``httpx.ConnectError``, ``httpx.ReadTimeout``, ...), so the code
generated from the async client maps failures exactly as it does for httpx. ``Response`` has
``status_code``, ``content``, ``json``, ``read``, ``iter_lines``, ``iter_bytes`` and ``close``.

Connections are pooled (idle ones in a list under a lock), so one client may be used from several
threads: a request takes an idle connection or opens one, and its response gives it back once read
to the end. A response closed before its end closes its connection: the server sees the disconnect,
which is how leaving a ``run_code`` early interrupts the cell. An idle connection the server has
closed (``lizard serve --header-read-timeout``) is dropped before it is used; a request that still
finds its reused connection closed without an answer is sent once more, on a new connection, when
its body can be sent twice.

Timeouts are httpx's: ``connect`` for opening a connection, ``write`` while sending, ``read`` for
each wait on the answer (``None``: none). Like ``httpx.Client`` by default: no redirects followed
and TLS verified with ``httpx.create_ssl_context()`` (certifi, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR``); unlike it: no proxies (``_sync_support.new_client`` uses httpx when one is
configured) and no compression asked for.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import re
import select
import socket
import ssl as ssllib
import threading
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

import httpx

__all__ = ["Client", "Request", "Response"]

#: Idle connections a client keeps (more are closed when their response ends).
MAX_IDLE = 8
_CHUNK = 65536
#: The longest answer head (status line and headers) accepted, and the longest chunk-size line.
_MAX_HEAD = 65536
_MAX_LINE = 4096
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})(?: [^\r\n]*)?")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\0\r\n]")


class Request(NamedTuple):
    """A request built by ``Client.build_request``: the target is the path and query."""

    method: str
    target: str
    headers: Dict[str, str]
    body: Any  # bytes, an iterable of bytes (sent chunked) or None
    timeout: Any  # an httpx.Timeout, a number of seconds or None


def _timeouts(t: Any) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(connect, write, read) seconds of an ``httpx.Timeout`` or a number (``None``: no limit)."""
    if isinstance(t, httpx.Timeout):
        return t.connect, t.write, t.read
    return t, t, t


def _error(e: BaseException, phase: str) -> Optional[httpx.HTTPError]:
    """The httpx exception for ``e``, raised while ``phase`` (``connect``, ``write``, ``read``);
    ``None`` when ``e`` is not a transport failure (a bad body, an interrupt: raised as it is)."""
    msg = str(e) or type(e).__name__
    if isinstance(e, socket.timeout):
        cls = {"connect": httpx.ConnectTimeout, "write": httpx.WriteTimeout}.get(phase, httpx.ReadTimeout)
        return cls(msg)
    if isinstance(e, http.client.RemoteDisconnected):
        return httpx.RemoteProtocolError("Server disconnected without sending a response.")
    if isinstance(e, http.client.HTTPException):
        return httpx.RemoteProtocolError(msg)
    if isinstance(e, OSError):
        cls = {"connect": httpx.ConnectError, "write": httpx.WriteError}.get(phase, httpx.ReadError)
        return cls(msg)
    return None


def _settimeout(conn: "_Conn", t: Optional[float]) -> None:
    """``conn``'s socket timeout set to ``t``, unless it is already (a system call saved)."""
    sock = conn.sock
    if sock.gettimeout() != t:
        sock.settimeout(t)


def _readable(sock: Optional[socket.socket]) -> bool:
    """Whether an idle connection has something to read: the server closed it (or sent what was
    not asked for), so it cannot carry another request."""
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class _Conn:
    """One keep-alive HTTP/1.1 connection: ``sock`` once connected, and the bytes read past what
    was parsed (``buf``). The names are ``http.client.HTTPConnection``'s where it had them."""

    def __init__(self, host: str, port: int, host_header: str, context: Optional[ssllib.SSLContext]) -> None:
        self.host = host
        self.port = port
        self.host_header = host_header
        self.context = context
        self.timeout: Optional[float] = None
        self.sock: Optional[socket.socket] = None
        self.buf = b""

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self.buf = b""
        if sock is not None:
            sock.close()

    def request(self, method: str, target: str, body: Any, headers: Mapping[str, str]) -> None:
        """Write the request: its head and a body of bytes in one go, an iterable of bytes chunked.
        A header that would split the request is a ``ValueError`` before anything is sent (as
        with ``http.client``)."""
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: " + self.host_header]
        for k, v in headers.items():
            v = str(v)
            if not _TOKEN.fullmatch(k) or _BAD_VALUE.search(v):
                raise ValueError("Invalid header %r" % k)
            lines.append("%s: %s" % (k, v))
        whole = body is None or isinstance(body, (bytes, bytearray))
        if body is None:
            if method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
                lines.append("Content-Length: 0")
        elif whole:
            lines.append("Content-Length: %d" % len(body))
        else:
            lines.append("Transfer-Encoding: chunked")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        sock = self.sock
        assert sock is not None
        if body is None:
            sock.sendall(head)
        elif whole and len(body) <= _CHUNK:
            sock.sendall(head + bytes(body))  # one write for a small body
        elif whole:
            sock.sendall(head)
            sock.sendall(body)
        else:
            sock.sendall(head)
            for part in body:
                if part:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            sock.sendall(b"0\r\n\r\n")

    def fill(self) -> bool:
        """Read what the server sent next into ``buf``: ``False`` at the connection's end."""
        sock = self.sock
        if sock is None:
            return False
        data = sock.recv(_CHUNK)
        if not data:
            return False
        self.buf = self.buf + data if self.buf else data
        return True

    def getresponse(self, method: str) -> "_Raw":
        return _Raw(self, method)


class _Raw:
    """An answer on a ``_Conn``: ``status``, ``headers`` (names in lower case, repeated ones joined
    by ``, ``), ``will_close``, and its body read by ``read1`` / ``read``."""

    def __init__(self, conn: _Conn, method: str) -> None:
        self._conn = conn
        while True:
            head = self._head()
            m = _STATUS.fullmatch(head[0])
            if m is None:
                raise http.client.BadStatusLine(head[0].decode("latin-1", "replace")[:80])
            status = int(m.group(1))
            # (an interim answer, 100 Continue and the like: the real one follows)
            if 100 <= status < 200 and status != 101:
                continue
            break
        self.status = status
        headers: Dict[str, str] = {}
        for line in head[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise http.client.HTTPException("bad header line: %r" % line[:80])
            key = name.decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = headers[key] + ", " + text if key in headers else text
        self.headers = headers
        self.will_close = "close" in [t.strip().lower() for t in headers.get("connection", "").split(",")]
        self._done = False
        self._left = 0  # content-length: bytes left; chunked: bytes left in the chunk
        te = headers.get("transfer-encoding")
        if method == "HEAD" or status in (204, 304):
            self._framing = "none"
            self._done = True
        elif te is not None:
            if te.strip().lower() != "chunked":
                raise http.client.HTTPException("unsupported transfer-encoding: %s" % te)
            self._framing = "chunked"
            self._chunk_state = "size"
        elif "content-length" in headers:
            length = headers["content-length"].strip()
            if not length.isdigit() or len(length) > 15:
                raise http.client.HTTPException("bad content-length: %s" % length)
            self._framing = "length"
            self._left = int(length)
            self._done = self._left == 0
        else:
            self._framing = "close"
            self.will_close = True
        if self._done:
            self._ended()

    def _head(self) -> List[bytes]:
        """The next head's lines (status line first), read up to its blank line."""
        conn = self._conn
        while True:
            end = conn.buf.find(b"\r\n\r\n")
            if end >= 0:
                head, conn.buf = conn.buf[:end], conn.buf[end + 4:]
                return head.split(b"\r\n")
            if len(conn.buf) > _MAX_HEAD:
                raise http.client.LineTooLong("the answer's head")
            if not conn.fill():
                if not conn.buf:
                    raise http.client.RemoteDisconnected("Remote end closed connection without response")
                raise http.client.IncompleteRead(conn.buf)

    def _ended(self) -> None:
        self._done = True
        # Bytes beyond the answer: not a connection to send another request on.
        if self._conn.buf:
            self.will_close = True

    def _line(self) -> bytes:
        conn = self._conn
        while True:
            nl = conn.buf.find(b"\n")
            if nl >= 0:
                line, conn.buf = conn.buf[:nl], conn.buf[nl + 1:]
                return line[:-1] if line.endswith(b"\r") else line
            if len(conn.buf) > _MAX_LINE:
                raise http.client.LineTooLong("a chunk-size line")
            if not conn.fill():
                raise http.client.IncompleteRead(b"")

    def read1(self, n: int = _CHUNK) -> bytes:
        """The next bytes of the body, at most ``n``, as soon as there are any; ``b""`` at its end.
        A body cut short is ``http.client.IncompleteRead``."""
        conn = self._conn
        while not self._done:
            if self._framing == "close":
                if not conn.buf and not conn.fill():
                    self._ended()
                    self.will_close = True
                    return b""
                out, conn.buf = conn.buf[:n], conn.buf[n:]
                return out
            if self._framing == "length" or self._chunk_state == "data":
                if not conn.buf and not conn.fill():
                    raise http.client.IncompleteRead(b"", self._left)
                take = min(n, self._left, len(conn.buf))
                out, conn.buf = conn.buf[:take], conn.buf[take:]
                self._left -= take
                if self._left == 0:
                    if self._framing == "length":
                        self._ended()
                    else:
                        self._chunk_state = "data-end"
                return out
            line = self._line()
            if self._chunk_state == "data-end":
                if line:
                    raise http.client.HTTPException("no CRLF after a chunk")
                self._chunk_state = "size"
            elif self._chunk_state == "size":
                size = line.split(b";", 1)[0].strip()
                try:
                    self._left = int(size, 16) if 0 < len(size) <= 12 else -1
                except ValueError:
                    self._left = -1
                if self._left < 0:
                    raise http.client.HTTPException("bad chunk size: %r" % line[:40])
                self._chunk_state = "data" if self._left else "trailer"
            elif not line:  # the blank line after the trailers
                self._ended()
        return b""

    def read(self) -> bytes:
        parts = []
        while True:
            part = self.read1(_CHUNK)
            if not part:
                return b"".join(parts)
            parts.append(part)


class Response:
    """A response whose body is read on demand (``send(stream=True)``) or already read."""

    def __init__(self, client: "Client", conn: _Conn, raw: _Raw) -> None:
        self._client = client
        self._conn: Optional[_Conn] = conn
        self._raw = raw
        self._done = False  # the body was read to its end
        self._content: Optional[bytes] = None
        self.status_code: int = raw.status

    @property
    def socket(self) -> Optional[socket.socket]:
        """The connection's socket while the response is open (``Worker.stop`` shuts it down)."""
        conn = self._conn
        return conn.sock if conn is not None else None

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise httpx.ResponseNotRead()
        return self._content

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    def read(self) -> bytes:
        """The whole body (the connection goes back to the pool)."""
        if self._content is None:
            try:
                self._content = self._raw.read()
                self._done = True
            except Exception as e:
                err = _error(e, "read")
                if err is None:
                    raise
                raise err from e
            finally:
                self.close()
        return self._content

    def _read1(self) -> bytes:
        """The next bytes of the body as they arrive; ``b""`` at its end (then closed)."""
        try:
            chunk = self._raw.read1(_CHUNK)
        except Exception as e:
            err = _error(e, "read")
            if err is None:
                raise
            raise err from e
        if not chunk:
            self._done = True
            self.close()
        return chunk

    def iter_bytes(self) -> Iterator[bytes]:
        while True:
            chunk = self._read1()
            if not chunk:
                return
            yield chunk

    def iter_lines(self) -> Iterator[str]:
        """The body's lines (without their ``\\n``) as each arrives, decoded as UTF-8."""
        pending = b""
        while True:
            chunk = self._read1()
            if not chunk:
                break
            if b"\n" not in chunk:
                pending += chunk
                continue
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Give the connection back when the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._client._release(conn, self._done and not self._raw.will_close)


class Client:
    """Keep-alive HTTP/1.1 to one server (``base_url``), with default ``headers`` and ``timeout``."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: Any) -> None:
        url = urlsplit(base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if self._https else 80)
        self._host_header = url.netloc.rpartition("@")[2]
        self._prefix = url.path.rstrip("/")
        self._headers = {"Accept": "*/*", **headers}
        self._timeout = timeout
        self._ssl = httpx.create_ssl_context() if self._https else None
        self._idle: List[_Conn] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def is_closed(self) -> bool:
        return self._closed

    def build_request(
        self,
        method: str,
        url: str,
        *,
        params: Optional[Mapping[str, str]] = None,
        json: Any = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Any = None,
    ) -> Request:
        """``url`` is a path under the base URL; ``json`` is sent as compact UTF-8 JSON (as httpx
        does), ``content`` as it is; ``timeout`` ``None``: the client's."""
        target = self._prefix + url
        if params:
            target += "?" + urlencode(params, quote_via=quote)
        h = dict(self._headers)
        if headers:
            h.update(headers)
        if json is not None:
            content = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
            h["Content-Type"] = "application/json"
        return Request(method, target, h, content, self._timeout if timeout is None else timeout)

    def request(self, method: str, url: str, **kwargs: Any) -> Response:
        """Send a request and read its whole answer."""
        return self.send(self.build_request(method, url, **kwargs))

    def stream(self, method: str, url: str, **kwargs: Any) -> Response:
        """Send a request; its answer's body is to be read from the response, a context manager
        that closes it (``with client.stream(...) as resp:``)."""
        return self.send(self.build_request(method, url, **kwargs), stream=True)

    def send(self, request: Request, *, stream: bool = False) -> Response:
        connect_t, write_t, read_t = _timeouts(request.timeout)
        replayable = request.body is None or isinstance(request.body, (bytes, bytearray))
        # A small body fits the socket's buffer: sending it does not wait, and the read timeout
        # serves for both (one system call fewer when it differs from the write timeout).
        if replayable and len(request.body or b"") <= _CHUNK:
            write_t = read_t
        for attempt in range(2):
            conn, reused = self._checkout(fresh=attempt > 0)
            phase = "connect"
            try:
                if conn.sock is None:
                    conn.timeout = connect_t
                    conn.connect()
                phase = "write"
                _settimeout(conn, write_t)
                conn.request(request.method, request.target, request.body, request.headers)
                phase = "read"
                _settimeout(conn, read_t)
                raw = conn.getresponse(request.method)
                break
            except BaseException as e:
                conn.close()
                # A reused connection the server closed as it was taken (its idle timeout): the
                # request never reached it, so send it again on a new connection, once.
                if reused and replayable and attempt == 0 and isinstance(e, ConnectionError):
                    continue
                err = _error(e, phase)
                if err is None:
                    raise
                raise err from e
        resp = Response(self, conn, raw)
        if not stream:
            resp.read()
        return resp

    def _checkout(self, fresh: bool) -> Tuple[_Conn, bool]:
        """An idle connection (``True``) or a new one, not connected yet (``False``)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            while self._idle and not fresh:
                conn = self._idle.pop()
                if not _readable(conn.sock):
                    return conn, True
                conn.close()
        return _Conn(self._host, self._port, self._host_header, self._ssl), False

    def _release(self, conn: _Conn, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; one in use closes when its response does."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
