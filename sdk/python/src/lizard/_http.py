"""The synchronous client's HTTP transport: a small keep-alive HTTP/1.1 client over the standard
library's ``http.client`` (issue #24: httpx costs ≈ 0.8 ms a call more, a third of a warm
``run_code``; see docs/PERFORMANCE.md).

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
import select
import socket
import threading
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

import httpx

__all__ = ["Client", "Request", "Response"]

#: Idle connections a client keeps (more are closed when their response ends).
MAX_IDLE = 8
_CHUNK = 65536


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


def _settimeout(conn: http.client.HTTPConnection, t: Optional[float]) -> None:
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


class Response:
    """A response whose body is read on demand (``send(stream=True)``) or already read."""

    def __init__(self, client: "Client", conn: http.client.HTTPConnection, raw: http.client.HTTPResponse) -> None:
        self._client = client
        self._conn: Optional[http.client.HTTPConnection] = conn
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
            if self._raw.length:  # http.client does not see a Content-Length body cut short
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
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
        self._raw.close()
        self._client._release(conn, self._done and not self._raw.will_close)


class Client:
    """Keep-alive HTTP/1.1 to one server (``base_url``), with default ``headers`` and ``timeout``."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: Any) -> None:
        url = urlsplit(base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._headers = {"Accept": "*/*", **headers}
        self._timeout = timeout
        self._ssl = httpx.create_ssl_context() if self._https else None
        self._idle: List[http.client.HTTPConnection] = []
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
                raw = conn.getresponse()
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

    def _checkout(self, fresh: bool) -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection (``True``) or a new one, not connected yet (``False``)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("Cannot send a request, as the client has been closed.")
            while self._idle and not fresh:
                conn = self._idle.pop()
                if not _readable(conn.sock):
                    return conn, True
                conn.close()
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, context=self._ssl), False
        return http.client.HTTPConnection(self._host, self._port), False

    def _release(self, conn: http.client.HTTPConnection, reusable: bool) -> None:
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
