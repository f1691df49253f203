# generated from async_sandbox.py by scripts/gen_sync.py; do not edit.
# Edit src/lizard/async_sandbox.py (or _sync_support.py) and run `python scripts/gen_sync.py`.
"""``CodeSandbox``: the synchronous client for one Lizard sandbox, over its own HTTP/1.1.

A ``CodeSandbox`` is a handle on a sandbox of the server (``create`` makes one, ``connect`` attaches
to an existing one and resumes it when paused). ``run_code`` streams the run as NDJSON and calls the
callbacks from the calling thread as each frame arrives; the other methods are one request each.
Used as a context manager, the sandbox is killed on exit. Requests go over the SDK's own
HTTP/1.1 on a socket (``lizard._http``, keep-alive connections pooled per sandbox object), or over
``httpx.Client`` when a proxy is configured or ``LIZARD_SDK_TRANSPORT=httpx`` (``_sync_support``).

Generated from ``async_sandbox.py`` (``AsyncCodeSandbox``) by ``scripts/gen_sync.py``; what the sync
client does its own way is in ``_sync_support``. This module does not build requests or parse the
stream itself (``lizard._core`` does), retries nothing, and keeps no state but the sandbox id and the
HTTP connection pool. ``sandbox.commands`` (``Commands``) runs processes through ``/commands``;
``sandbox.files`` (``Files``) reads and writes the sandbox's filesystem through ``/files``;
``sandbox.pty`` (``Pty``) runs programs on a pseudo-terminal through ``/pty``. ``files.watch_dir``
and ``pty.create`` are the only things that start a thread.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Iterator, Callable, Dict, List, Mapping, Optional, Sequence, Type, Union

import httpx

from . import _sync_support as _support
from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT, DEFAULT_TEMPLATE, NDJSON, ClientConfig, ContextLike, ContextLimitsLike, EgressLike, InjectLike, Req
from .errors import (
    ConflictError,
    InvalidArgumentError,
    LizardError,
    NotFoundError,
    SandboxError,
    error_from_response,
)
from .errors import TimeoutError as _TimeoutError
from .models import (
    ForkedContext,
    CommandResult,
    Context,
    EntryInfo,
    Execution,
    ExecutionError,
    FilesystemEvent,
    HibernationReport,
    NetworkLog,
    ProcessInfo,
    Result,
    SandboxInfo,
    SnapshotInfo,
)

__all__ = [
    "CodeSandbox", "Commands", "CommandHandle", "Files", "Pty", "PtyHandle",
    "WatchHandle",
]


OutputHandler = Callable[[str], Any]
"""A callback for output text (with the asyncio client, also a coroutine function)."""
ResultHandler = Callable[[Result], Any]
ErrorHandler = Callable[[ExecutionError], Any]


def _new_client(cfg: ClientConfig) -> _support.Client:
    return _support.new_client(cfg)


def _send(client: _support.Client, cfg: ClientConfig, req: Req) -> Any:
    """Send a control request; the parsed JSON body, ``None`` for an empty one; typed errors."""
    try:
        resp = client.request(req.method, req.path, json=req.json, params=req.params)
    except httpx.HTTPError as e:
        raise _core.transport_error(e, cfg) from e
    if resp.status_code >= 400:
        raise error_from_response(resp.status_code, resp.content)
    if not resp.content:
        return None
    return resp.json()


def _stream_fold(
    client: _support.Client,
    req: Req,
    timeout: httpx.Timeout,
    fold: Any,
    handlers: Mapping[str, Optional[Callable[[Any], Any]]],
    *,
    until_end: bool = True,
    check: Optional[Callable[[], None]] = None,
) -> None:
    """Send ``req`` for an NDJSON stream and feed each line to ``fold`` (a ``lizard._core`` fold),
    handing each event it returns to ``handlers[kind]`` (if set) before the next line is read; what
    a handler returns goes to ``_support.maybe_await``. Stops when the stream ends, or once
    ``fold.ended`` when ``until_end``; ``check`` runs after each line and may raise. An error status
    raises its typed error; httpx's errors are the caller's to map."""
    with client.stream(
        req.method, req.path, json=req.json, headers={"Accept": NDJSON}, timeout=timeout,
    ) as resp:
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, resp.read())
        for line in resp.iter_lines():
            event = fold.feed_line(line)
            if event is not None:
                handler = handlers[event[0]]
                if handler is not None:
                    _support.maybe_await(handler(event[1]))
            if until_end and fold.ended:
                break
            if check is not None:
                check()


def _close_quietly(resp: _support.Response) -> None:
    """Close the response of a background reader that is ending: an error closing it is not
    reported (the reader's ``error`` already says why it ended, if it ended early)."""
    try:
        resp.close()
    except Exception:
        pass


class CodeSandbox:
    """A sandbox with stateful Python, JavaScript and Bash kernels (synchronous client).

    Make one with ``CodeSandbox.create(project=...)`` or attach with ``CodeSandbox.connect(id)``;
    the constructor only binds a handle to an id and sends nothing. Configuration comes from the
    arguments, else ``LIZARD_API_URL`` / ``LIZARD_API_KEY``. ``request_timeout`` (seconds) bounds
    each control request; ``run_code`` has no read timeout unless given ``timeout_ms``.

    One object may be used from several threads; runs in the same context are serialized by the
    server.
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self._init(sandbox_id, _core.resolve_config(api_url, api_key, request_timeout), None)

    def _init(self, sandbox_id: str, cfg: ClientConfig, client: Optional[_support.Client]) -> None:
        self._id = sandbox_id
        self._cfg = cfg
        self._client = client
        self._client_lock = _support.client_lock()
        #: After a resume from hibernation (``resume()`` or ``connect``), and in a sandbox made
        #: from a snapshot or by ``fork()``: what each context got back and what was lost.
        self.restore_report: Optional[HibernationReport] = None
        self.commands = Commands(self)
        self.files = Files(self)
        self.pty = Pty(self)

    @classmethod
    def _bind(cls, sandbox_id: str, cfg: ClientConfig, client: Optional[_support.Client]) -> "CodeSandbox":
        sb = cls.__new__(cls)
        sb._init(sandbox_id, cfg, client)
        return sb

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        project: Optional[str] = None,
        template: str = DEFAULT_TEMPLATE,
        timeout_ms: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        envs: Optional[Mapping[str, str]] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        limits: Optional[Mapping[str, int]] = None,
        volumes: Optional[List[Any]] = None,
        egress: Optional[EgressLike] = None,
        inject: Optional[InjectLike] = None,
        public_ports: bool = False,
        auto_resume: bool = False,
        snapshot: Optional[Union[str, SnapshotInfo]] = None,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> "CodeSandbox":
        """Create a sandbox in ``project`` (an admin key creates the project on first use; a
        project key may leave it out) from ``template``. ``timeout_ms`` is its lifetime (server
        default 300000: the server kills it then unless extended with ``set_timeout``);
        ``metadata`` labels it; ``envs`` is the environment of every process in it; ``limits``
        overrides ``memory_mb``, ``cpu_millicores``, ``pids``, ``tmp_mb``, ``disk_mb``; ``volumes``
        mounts volumes of the project: names (at ``/home/user/<name>``) or mappings
        ``{"name": ..., "mount_path": ..., "read_only": ...}``; ``egress`` is ``"all"``, a list of
        destinations the sandbox may reach (``"pypi.org"``, ``"*.github.com"``, ``"1.2.3.4:443"``,
        ``"10.0.0.0/8"``) or rules ``{"allow": [...], "deny": [...]}`` (deny beats allow; only
        ``deny``: everything public but that), enforced on the host by name and address at each
        connection and DNS query, and changeable later with ``set_network`` (loopback only by
        default; the project needs ``allow_egress``). ``pip install`` and
        ``npm install`` need no egress: every sandbox reaches the server's caching mirror of the
        package registries (``lizard serve --package-registry``) and is pointed at it. ``inject``
        adds headers with the project's secrets (``Secrets``) to the sandbox's requests to some
        hosts, on the host, so the values never enter the sandbox: ``[{"host": "api.example.com",
        "headers": {"Authorization": "Bearer ${secret:NAME}"}}]`` (each host allowed by
        ``egress``; an unknown secret is an ``InvalidArgumentError`` naming it). ``public_ports``
        lets anyone who can reach the server open the sandbox's own ports by host name,
        ``http://<port>-<sandbox id>.<sandbox domain>/`` (``lizard serve --sandbox-domain``;
        ``localhost:<port>`` by default), without its access token. ``auto_resume``: a request
        that reaches the sandbox while it is paused or hibernated resumes it (E2B's
        ``autoResume``) instead of failing with a ``ConflictError``.

        ``snapshot`` (a ``snap_…`` id or the ``SnapshotInfo`` of ``create_snapshot()``) makes a
        clone: the snapshot's disk and kernels' state (``restore_report`` says what each context
        got back), template, envs, limits, volumes and network — those cannot be given with it (an
        ``InvalidArgumentError``); ``timeout_ms``, ``metadata`` and ``project`` can. Another
        project's snapshot is a ``NotFoundError``."""
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        if snapshot is not None:
            req = _core.clone_request(
                snapshot, project=project, timeout_ms=timeout_ms, metadata=metadata,
                refused={"template": template not in (None, DEFAULT_TEMPLATE), "envs": envs, "limits": limits,
                         "volumes": volumes, "egress": egress is not None, "inject": inject is not None,
                         "public_ports": public_ports, "auto_resume": auto_resume},
            )
        else:
            req = _core.create_request(
                project=project, template=template, timeout_ms=timeout_ms,
                metadata=metadata, envs=envs, limits=limits, volumes=volumes, egress=egress,
                inject=inject, public_ports=public_ports, auto_resume=auto_resume,
            )
        client = _new_client(cfg)
        try:
            info = SandboxInfo.from_wire(_send(client, cfg, req))
        except BaseException:
            client.close()
            raise
        sb = cls._bind(info.sandbox_id, cfg, client)
        sb.restore_report = info.restore
        return sb

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> "CodeSandbox":
        """Attach to an existing sandbox; a paused one is resumed (its kernels keep their state), a
        hibernated one relaunched with its contexts restored (``restore_report`` says what came
        back and what was lost). ``NotFoundError`` when it does not exist (or belongs to another
        project)."""
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        sb = cls._bind(sandbox_id, cfg, None)
        try:
            info = sb.get_info()
            if info.state in ("paused", "hibernated"):
                sb.resume()
            elif info.state == "killed":
                raise NotFoundError(f"sandbox {sandbox_id} was killed", code="not_found", status=404)
        except BaseException:
            sb.close()
            raise
        return sb

    @classmethod
    def list(
        cls,
        project: Optional[str] = None,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> List[SandboxInfo]:
        """The sandboxes this key can see, newest first; filter by project, state (``running`` or
        ``paused``) and metadata (every pair must match)."""
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        with _new_client(cfg) as client:
            rows = _send(client, cfg, _core.list_request(project, state, metadata)) or []
        return [SandboxInfo.from_wire(r) for r in rows]

    # ---- plumbing -----------------------------------------------------------------------------

    @property
    def sandbox_id(self) -> str:
        return self._id

    @property
    def api_url(self) -> str:
        return self._cfg.api_url

    @property
    def _http(self) -> _support.Client:
        # (Re)opened lazily: kill() and close() close the pool, and a later call still works.
        with self._client_lock:
            if self._client is None or self._client.is_closed:
                self._client = _new_client(self._cfg)
            return self._client

    def _call(self, req: Req) -> Any:
        return _send(self._http, self._cfg, req)

    def close(self) -> None:
        """Close the HTTP connections (the sandbox keeps running; ``kill`` ends it)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> "CodeSandbox":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.kill()
        except LizardError:
            # Do not hide the exception that is already leaving the block.
            if exc_type is None:
                raise
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sandbox_id={self._id!r}, api_url={self._cfg.api_url!r})"

    # ---- running code -------------------------------------------------------------------------

    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: Optional[ContextLike] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[OutputHandler] = None,
        on_stderr: Optional[OutputHandler] = None,
        on_result: Optional[ResultHandler] = None,
        on_error: Optional[ErrorHandler] = None,
    ) -> Execution:
        """Run a cell and return its ``Execution``.

        ``language`` (``python``, ``javascript``/``js``, ``bash``/``sh``) runs in that language's
        default context; ``context`` (a ``Context`` or its id) in that context; neither: Python.
        Giving both raises ``InvalidArgumentError`` before any request. ``envs`` is visible to this
        run only. ``timeout_ms`` interrupts the cell (the kernel keeps its state; the execution has
        ``status == "timeout"``).

        The run is streamed: ``on_stdout``/``on_stderr`` get each chunk of text as the kernel writes
        it (chunks are not lines), ``on_result`` each ``Result``, ``on_error`` the
        ``ExecutionError``; with the asyncio client a callback may be a coroutine function, awaited
        before the next frame is handled. A callback that raises stops the call (as does
        cancelling it); the closed connection interrupts the cell on the server.
        """
        req = _core.execute_request(
            self._id, code, language=language, context=context, envs=envs, timeout_ms=timeout_ms
        )
        handlers: Dict[str, Optional[Callable[[Any], Any]]] = {
            "stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error,
        }
        fold = _core.ExecutionFold()
        try:
            _stream_fold(
                self._http, req, self._cfg.execute_timeout(timeout_ms), fold, handlers, until_end=False
            )
        except httpx.HTTPError as e:
            raise _core.transport_error(e, self._cfg) from e
        return fold.finish()

    def exec(
        self,
        command: str,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[OutputHandler] = None,
        on_stderr: Optional[OutputHandler] = None,
    ) -> CommandResult:
        """Run one shell command (``bash -c``, in ``/home/user``) and return
        ``(stdout, stderr, exit_code)``; a non-zero exit is returned, not raised (see
        ``commands.run`` for that). Each call is a fresh shell: ``cd`` and ``export`` do not carry
        over. Raises ``TimeoutError`` when ``timeout_ms`` passes (the process group is stopped).
        """
        req = _core.start_command_request(
            self._id, command, cwd=None, envs=envs, timeout_ms=timeout_ms,
            background=False, stdin=False,
        )
        return self._stream_command(req.method, req.path, req.json, timeout_ms, on_stdout, on_stderr)

    def _stream_command(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        timeout_ms: Optional[int],
        on_stdout: Optional[OutputHandler],
        on_stderr: Optional[OutputHandler],
    ) -> CommandResult:
        """Stream a command's NDJSON events (``POST /commands`` or ``GET …/stream``) to the
        callbacks and fold them into its result."""
        handlers: Dict[str, Optional[Callable[[Any], Any]]] = {"stdout": on_stdout, "stderr": on_stderr}
        fold = _core.CommandFold()
        try:
            _stream_fold(
                self._http, Req(method, path, json=body), self._cfg.execute_timeout(timeout_ms), fold, handlers
            )
        except httpx.HTTPError as e:
            raise _core.transport_error(e, self._cfg) from e
        return fold.finish()

    # ---- contexts -----------------------------------------------------------------------------

    def create_context(
        self,
        language: Optional[str] = None,
        cwd: Optional[str] = None,
        limits: Optional[ContextLimitsLike] = None,
    ) -> Context:
        """A new context (its own kernel and state) for ``language`` (Python by default), working
        in ``cwd`` (``/home/user`` by default). ``limits`` (``{"memory_mb": ...,
        "cpu_millicores": ...}`` or a :class:`ContextLimits`, at most the sandbox's) bound the
        context's own cgroup: a context over its memory limit loses only its own kernel."""
        return Context.from_wire(
            self._call(_core.create_context_request(self._id, language, cwd, limits))
        )

    def list_contexts(self) -> List[Context]:
        rows = self._call(Req("GET", _core.sandbox_path(self._id, "/contexts"))) or []
        return [Context.from_wire(r) for r in rows]

    def restart_context(self, context: ContextLike) -> Context:
        """Replace the context's kernel with a fresh one: every variable and import is gone."""
        return Context.from_wire(self._call(_core.context_request(self._id, "POST", context, "/restart")))

    def fork_context(
        self,
        context: ContextLike,
        limits: Optional[ContextLimitsLike] = None,
        exact: Optional[bool] = None,
    ) -> ForkedContext:
        """A new context holding a copy of ``context``'s live kernel — its variables, functions
        and imports, copy-on-write, nothing serialised — that then goes its own way. When that
        copy would lose threads, child processes or servers, the server checkpoints the kernel's
        processes instead (``method == "checkpoint"``): everything comes along. ``exact=True``
        demands that (:class:`ConflictError` when the server cannot), ``exact=False`` forbids it
        (what the live fork loses is in ``lost``). ``limits`` bound the fork's own cgroup
        (default: the source's). A source running a cell raises :class:`ConflictError`."""
        return ForkedContext.from_wire(
            self._call(_core.fork_context_request(self._id, context, limits, exact))
        )

    def delete_context(self, context: ContextLike) -> None:
        """Stop the context's kernel and forget it."""
        self._call(_core.context_request(self._id, "DELETE", context))

    # Cloudflare-shaped names for the same calls.
    def create_code_context(
        self,
        language: Optional[str] = None,
        cwd: Optional[str] = None,
        limits: Optional[ContextLimitsLike] = None,
    ) -> Context:
        return self.create_context(language=language, cwd=cwd, limits=limits)

    def list_code_contexts(self) -> List[Context]:
        return self.list_contexts()

    def delete_code_context(self, context: ContextLike) -> None:
        self.delete_context(context)

    # ---- lifecycle ----------------------------------------------------------------------------

    def get_host(self, port: int) -> str:
        """URL of a service listening on ``port`` inside the sandbox (HTTP and WebSocket), proxied
        by the server. Requests to it need the API key as a bearer token
        (``Authorization: Bearer …``); nothing listens on the host's network for it."""
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidArgumentError(f"port must be an integer in 1..65535, got {port!r}")
        return f"{self._cfg.api_url.rstrip('/')}{_core.sandbox_path(self._id)}/ports/{port}"

    def get_info(self) -> SandboxInfo:
        return SandboxInfo.from_wire(self._call(Req("GET", _core.sandbox_path(self._id))))

    def set_timeout(self, timeout_ms: int) -> None:
        """Kill the sandbox ``timeout_ms`` from now unless extended again."""
        self._call(Req(
            "POST", _core.sandbox_path(self._id, "/timeout"),
            json={"timeout_ms": _core._ms("timeout_ms", timeout_ms)},
        ))

    def set_network(
        self,
        egress: Optional[EgressLike] = None,
        *,
        inject: Optional[InjectLike] = None,
        public_ports: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
    ) -> SandboxInfo:
        """Replace the sandbox's egress rules and/or header injection rules, live (``PATCH
        /v1/sandboxes/{id}/network``): its next connection and DNS query are decided by them, its
        next request to an ``inject`` host gets the secrets' current values. Both take the forms
        of ``create``; the one not given is kept (by the server); ``inject=[]``
        removes every rule; ``"none"`` is kept as ``{"allow": []}``. A sandbox created without
        egress is a ``ConflictError`` (create it with ``egress={"allow": []}`` to open it later);
        rules that open anything need an admin key or a project with ``allow_egress`` (else an
        ``AuthenticationError`` with code ``permission_denied``); a bad entry is an
        ``InvalidArgumentError`` naming it (as are an inject host the egress does not allow and an
        unknown secret). ``public_ports`` opens or closes its ports by host name without its
        access token, ``auto_resume`` whether a request resumes it (see ``create``). Returns the sandbox's info (``info.network``)."""
        return SandboxInfo.from_wire(
            self._call(_core.set_network_request(
                self._id, egress, inject, public_ports, auto_resume
            ))
        )

    def network_log(self) -> NetworkLog:
        """What the sandbox did through the package registries' mirror and its egress since its
        processes last started, and what was refused (``GET /v1/sandboxes/{id}/network/log``)."""
        return NetworkLog.from_wire(self._call(_core.network_log_request(self._id)))

    def pause(self) -> None:
        """Freeze every process of the sandbox; memory, files and kernel state are kept and its
        timeout stops counting. ``run_code`` raises ``ConflictError`` until ``resume``/``connect``."""
        self._call(Req("POST", _core.sandbox_path(self._id, "/pause")))

    def resume(self) -> Optional[HibernationReport]:
        """Thaw a paused sandbox (a no-op when it runs), or relaunch a hibernated one and restore
        its contexts: then returns (and keeps in ``restore_report``) what each context got back
        and what was lost, with the reason."""
        info = SandboxInfo.from_wire(self._call(Req("POST", _core.sandbox_path(self._id, "/resume"))))
        if info.restore is not None:
            self.restore_report = info.restore
        return info.restore

    def hibernate(self) -> Optional[HibernationReport]:
        """Save every context's state to disk and stop the sandbox's processes: it holds no memory
        and survives a server restart; ``resume``/``connect`` brings it back. Returns what each
        context saved and what it could not (generators, sockets, threads...); ``None`` when it
        was already hibernated."""
        info = SandboxInfo.from_wire(self._call(Req("POST", _core.sandbox_path(self._id, "/hibernate"))))
        return info.hibernation

    def create_snapshot(self, metadata: Optional[Mapping[str, str]] = None) -> SnapshotInfo:
        """Save a snapshot of the sandbox — its kernels' state (``method`` says how; ``contexts``
        lists per context what was saved and what cannot be) and a copy of its disk — that new
        sandboxes start from with ``create(snapshot=...)``. The sandbox keeps running (a paused
        one stays paused); a hibernated one is a ``ConflictError``. The snapshot lives until
        ``Snapshots.delete``."""
        return SnapshotInfo.from_wire(self._call(_core.snapshot_create_request(self._id, metadata)))

    def fork(
        self, timeout_ms: Optional[int] = None, metadata: Optional[Mapping[str, str]] = None
    ) -> "CodeSandbox":
        """A new running sandbox with this one's kernels' state and files (a snapshot that is not
        kept), with the same connection settings; this one keeps running. ``timeout_ms`` is the
        fork's lifetime (the source's timeout when absent); the fork's ``restore_report`` says
        what each context got back."""
        info = SandboxInfo.from_wire(self._call(_core.fork_request(self._id, timeout_ms, metadata)))
        sb = type(self)._bind(info.sandbox_id, self._cfg, None)
        sb.restore_report = info.restore
        return sb

    def kill(self) -> bool:
        """Kill the sandbox and close the connections. ``True`` if it was killed now, ``False`` if
        it was already gone."""
        try:
            self._call(Req("DELETE", _core.sandbox_path(self._id)))
            killed = True
        except NotFoundError:
            killed = False
        self.close()
        return killed


# ---- commands ---------------------------------------------------------------------------------


class CommandHandle:
    """A process started with ``commands.run(..., background=True)`` or attached with
    ``commands.connect(pid)``. ``wait`` streams its output (from what the server still buffers)
    until it ends."""

    def __init__(
        self,
        sandbox: "CodeSandbox",
        pid: int,
        on_stdout: Optional[OutputHandler] = None,
        on_stderr: Optional[OutputHandler] = None,
    ) -> None:
        self._sb = sandbox
        self.pid = pid
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={self.pid})"

    def wait(
        self, on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None
    ) -> CommandResult:
        """Wait for the process to end and return its ``CommandResult``; ``CommandExitError`` when
        it exited non-zero (a killed process: 128 + the signal's number)."""
        result = self._sb._stream_command(
            "GET", _core.command_path(self._sb._id, self.pid, "/stream"), None, None,
            on_stdout or self._on_stdout, on_stderr or self._on_stderr,
        )
        return _core.check_exit(result)

    def kill(self) -> bool:
        """SIGKILL the process's group; ``False`` when it is already gone."""
        return self._sb.commands.kill(self.pid)

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Write to its stdin (started with ``stdin=True``)."""
        self._sb.commands.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        """Close its stdin (the process sees end of file)."""
        self._sb.commands.close_stdin(self.pid)


class Commands:
    """``sandbox.commands``: processes run with ``bash -c`` in the sandbox, outside the kernels."""

    def __init__(self, sandbox: "CodeSandbox") -> None:
        self._sb = sandbox

    def run(
        self,
        cmd: str,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[OutputHandler] = None,
        on_stderr: Optional[OutputHandler] = None,
        background: bool = False,
        stdin: bool = False,
    ) -> Any:
        """Run ``cmd`` and return its ``CommandResult`` (``CommandExitError`` on a non-zero exit,
        ``TimeoutError`` past ``timeout_ms``), or with ``background=True`` a ``CommandHandle`` at
        once. ``stdin=True`` keeps a pipe open for ``send_stdin``."""
        req = _core.start_command_request(
            self._sb._id, cmd, cwd=cwd, envs=envs, timeout_ms=timeout_ms,
            background=background, stdin=stdin,
        )
        if background:
            info = ProcessInfo.from_wire(self._sb._call(req))
            return CommandHandle(self._sb, info.pid, on_stdout, on_stderr)
        result = self._sb._stream_command(
            req.method, req.path, req.json, timeout_ms, on_stdout, on_stderr
        )
        return _core.check_exit(result)

    def list(self) -> List[ProcessInfo]:
        """The sandbox's running processes (and those that finished in the last 60 s)."""
        rows = self._sb._call(Req("GET", _core.sandbox_path(self._sb._id, "/commands"))) or []
        return [ProcessInfo.from_wire(r) for r in rows]

    def get(self, pid: int) -> ProcessInfo:
        return ProcessInfo.from_wire(self._sb._call(Req("GET", _core.command_path(self._sb._id, pid))))

    def connect(
        self,
        pid: int,
        on_stdout: Optional[OutputHandler] = None,
        on_stderr: Optional[OutputHandler] = None,
    ) -> CommandHandle:
        """A handle on a running process (``NotFoundError`` when there is none); its ``wait``
        replays the buffered output, then streams the rest."""
        self.get(pid)
        return CommandHandle(self._sb, pid, on_stdout, on_stderr)

    def kill(self, pid: int) -> bool:
        """SIGKILL the process's group; ``True`` if signalled, ``False`` if it is gone."""
        try:
            self._sb._call(_core.signal_request(self._sb._id, pid))
            return True
        except NotFoundError:
            return False

    def send_stdin(self, pid: int, data: Union[str, bytes]) -> None:
        self._sb._call(_core.stdin_request(self._sb._id, pid, data))

    def close_stdin(self, pid: int) -> None:
        self._sb._call(Req("POST", _core.command_path(self._sb._id, pid, "/stdin/close")))


# ---- terminals --------------------------------------------------------------------------------

DataHandler = Callable[[bytes], Any]
"""A callback for terminal output bytes (with the asyncio client, also a coroutine function)."""


class PtyHandle:
    """A process on a pseudo-terminal, made by ``sandbox.pty.create``. A daemon thread reads the
    terminal's output and calls ``on_data(bytes)`` with each chunk as the program wrote it
    (escape sequences included: rendering is the caller's job) until the process ends.
    ``error`` is the exception that ended the reading early (a raising ``on_data``, a lost
    connection), if any; ``wait`` raises it."""

    def __init__(self, sandbox: "CodeSandbox", resp: _support.Response, lines: Iterator[str],
                 fold: _core.PtyFold, on_data: Optional[DataHandler]) -> None:
        self._sb = sandbox
        self._resp = resp
        self._fold = fold
        self._on_data = on_data
        assert fold.pid is not None
        self.pid: int = fold.pid
        self.error: Optional[BaseException] = None
        self._worker = _support.Worker(self._run, (lines,), f"lizard-pty-{self.pid}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={self.pid})"

    def _run(self, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                data = self._fold.feed_line(line)
                if data is not None and self._on_data is not None:
                    _support.maybe_await(self._on_data(data))
                if self._fold.ended:
                    break
        except httpx.HTTPError as e:
            self.error = _core.transport_error(e, self._sb._cfg)
        except _support.READER_ERRORS as e:  # noqa: BLE001 - reported through .error and wait()
            self.error = e
        finally:
            _close_quietly(self._resp)

    def send_input(self, data: Union[str, bytes]) -> None:
        """Type into the terminal: ``str`` (sent as UTF-8) or ``bytes``; ``"\\r"`` is Enter,
        ``"\\x03"`` Ctrl-C."""
        self._sb._call(_core.pty_input_request(self._sb._id, self.pid, data))

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size; the program gets SIGWINCH."""
        self._sb._call(_core.pty_resize_request(self._sb._id, self.pid, cols, rows))

    def kill(self) -> bool:
        """SIGKILL the terminal's process group; ``False`` when it is already gone."""
        return self._sb.commands.kill(self.pid)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the process to end and return its exit code (128 + N when signal N killed
        it); a non-zero exit is returned, not raised. ``TimeoutError`` when ``timeout`` seconds
        pass first (the process keeps running)."""
        if self._worker.is_current():
            raise InvalidArgumentError("wait() cannot be called from on_data", code="invalid_argument")
        if not self._worker.join(timeout):
            raise _TimeoutError(f"the terminal's process did not end within {timeout} s", code="timeout")
        if self.error is not None:
            raise self.error
        return self._fold.exit_code()

    def disconnect(self) -> None:
        """Stop reading the output (the process keeps running; ``kill`` ends it)."""
        self._worker.stop(self._resp)


class Pty:
    """``sandbox.pty``: programs on a pseudo-terminal (an interactive ``bash`` by default), for
    shells, REPLs, editors and other full-screen programs."""

    def __init__(self, sandbox: "CodeSandbox") -> None:
        self._sb = sandbox

    def create(
        self,
        cols: int = 80,
        rows: int = 24,
        on_data: Optional[DataHandler] = None,
        cmd: Optional[str] = None,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
    ) -> PtyHandle:
        """Start ``cmd`` (``bash -c``; without it an interactive ``bash -i``) on a new terminal of
        ``cols`` x ``rows`` and return its ``PtyHandle`` once the process exists. ``TERM`` is
        ``xterm-256color`` unless ``envs`` sets it. ``on_data(bytes)`` is called with the
        terminal's output from a background thread (with the asyncio client: from an asyncio
        task, so this needs asyncio)."""
        req = _core.start_pty_request(
            self._sb._id, cols=cols, rows=rows, cmd=cmd, cwd=cwd, envs=envs, timeout_ms=timeout_ms
        )
        http = self._sb._http
        request = http.build_request(
            req.method, req.path, json=req.json, headers={"Accept": NDJSON},
            timeout=self._sb._cfg.execute_timeout(timeout_ms),
        )
        resp = self._sb.files._open(request)
        fold = _core.PtyFold()
        lines = resp.iter_lines()
        try:
            # The first event is `start` with the pid; output that follows goes to the reader.
            for line in lines:
                fold.feed_line(line)
                if fold.pid is not None:
                    break
            if fold.pid is None:
                raise SandboxError("the terminal stream ended before its `start` event", code="protocol")
        except httpx.HTTPError as e:
            resp.close()
            raise _core.transport_error(e, self._sb._cfg) from e
        except BaseException:
            resp.close()
            raise
        return PtyHandle(self._sb, resp, lines, fold, on_data)

    def send_input(self, pid: int, data: Union[str, bytes]) -> None:
        self._sb._call(_core.pty_input_request(self._sb._id, pid, data))

    def resize(self, pid: int, cols: int, rows: int) -> None:
        self._sb._call(_core.pty_resize_request(self._sb._id, pid, cols, rows))

    def kill(self, pid: int) -> bool:
        return self._sb.commands.kill(pid)


# ---- files ------------------------------------------------------------------------------------


class WatchHandle:
    """A running ``files.watch_dir``: a background reader (a daemon thread; with the asyncio
    client an asyncio task) calls ``on_event`` for each change until ``stop()``. ``error`` is the
    exception that ended the watch early, if any."""

    def __init__(self, sandbox: "CodeSandbox", path: str, on_event: Callable[[FilesystemEvent], Any], recursive: bool) -> None:
        self._sb = sandbox
        self._path = path
        self._recursive = recursive
        self._on_event = on_event
        self._stopped = False
        self.error: Optional[BaseException] = None
        # The sync client opens the watch here; the asyncio one in `watch_dir` (`_open`).
        _support.open_in_init(self)

    def _open(self) -> None:
        sandbox = self._sb
        http = sandbox._http
        request = http.build_request(
            "GET", _core.files_path(sandbox._id, "/watch"),
            params=_core.watch_params(self._path, self._recursive), headers={"Accept": NDJSON},
            timeout=sandbox._cfg.execute_timeout(None),
        )
        resp = sandbox.files._open(request)
        self._resp = resp
        lines = resp.iter_lines()
        try:
            # The first event says the watch is in place: changes after this call are seen.
            for line in lines:
                ev = _core.watch_event(line)
                if ev is not None:
                    break
        except BaseException:
            resp.close()
            raise
        self._worker = _support.Worker(self._run, (lines,), "lizard-watch")

    def _run(self, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                if self._stopped:
                    break
                ev = _core.watch_event(line)
                if ev is not None and ev.type != "start":
                    _support.maybe_await(self._on_event(ev))
        except _support.READER_ERRORS as e:  # noqa: BLE001 - reported through .error
            if not self._stopped:
                self.error = e
        finally:
            _close_quietly(self._resp)

    def stop(self) -> None:
        """End the watch and wait for its reader (unless called from ``on_event``)."""
        if self._stopped:
            return
        self._stopped = True
        self._worker.stop(self._resp)


class Files:
    """``sandbox.files``: the sandbox's filesystem. Relative paths resolve against
    ``/home/user``."""

    def __init__(self, sandbox: "CodeSandbox") -> None:
        self._sb = sandbox

    def _get(self, rest: str, params: Dict[str, str]) -> Any:
        return self._sb._call(Req("GET", _core.files_path(self._sb._id, rest), params=params))

    def _open(self, request: _support.Request) -> _support.Response:
        """Send ``request`` with a streamed response; typed errors (the response closed)."""
        try:
            resp = self._sb._http.send(request, stream=True)
        except httpx.HTTPError as e:
            raise _core.transport_error(e, self._sb._cfg) from e
        if resp.status_code >= 400:
            body = resp.read()
            resp.close()
            raise error_from_response(resp.status_code, body)
        return resp

    def read(self, path: str, format: str = "text") -> Any:
        """The file's content: ``str`` (``format='text'``, invalid UTF-8 replaced), ``bytes``
        (``'bytes'``) or an iterator of ``bytes`` chunks (``'stream'``, not loaded into memory;
        exhaust or ``close()`` it; with the asyncio client an async iterator, ``aclose()``)."""
        fmt = _core.read_format(format)
        http = self._sb._http
        resp = self._open(http.build_request(
            "GET", _core.files_path(self._sb._id), params=_core.path_params(path)
        ))
        if fmt == "stream":
            return self._chunks(resp)
        try:
            data = resp.read()
        except httpx.HTTPError as e:
            raise _core.transport_error(e, self._sb._cfg) from e
        finally:
            resp.close()
        return data.decode("utf-8", "replace") if fmt == "text" else data

    def _chunks(self, resp: _support.Response) -> Iterator[bytes]:
        try:
            for chunk in resp.iter_bytes():
                yield chunk
        except httpx.HTTPError as e:
            raise _core.transport_error(e, self._sb._cfg) from e
        finally:
            resp.close()

    def write(self, path: Any, data: Any = None) -> Any:
        """Write ``data`` (``str`` as UTF-8, ``bytes``, a binary file object or an iterator of
        ``bytes``, streamed) to ``path``, creating missing parents; returns its ``EntryInfo``.
        ``write([(path, data), ...])`` writes several and returns a list."""
        many, items = _core.write_items(path, data)
        out = []
        for p, body in items:
            try:
                resp = self._sb._http.request(
                    "PUT", _core.files_path(self._sb._id), params=_core.path_params(p), content=body
                )
            except httpx.HTTPError as e:
                raise _core.transport_error(e, self._sb._cfg) from e
            if resp.status_code >= 400:
                raise error_from_response(resp.status_code, resp.content)
            out.append(EntryInfo.from_wire(resp.json()))
        return out if many else out[0]

    def list(self, path: str, depth: int = 1) -> List[EntryInfo]:
        """Entries below ``path``, ``depth`` levels deep, sorted by path."""
        return _core.entries(self._get("/list", _core.list_params(path, depth)))

    def get_info(self, path: str) -> EntryInfo:
        """The entry at ``path`` (symlinks not followed); ``NotFoundError`` when missing."""
        return EntryInfo.from_wire(self._get("/stat", _core.path_params(path)))

    def exists(self, path: str) -> bool:
        try:
            self.get_info(path)
            return True
        except NotFoundError:
            return False

    def make_dir(self, path: str) -> bool:
        """Create a directory and its parents; ``False`` if ``path`` already existed."""
        try:
            self._sb._call(Req("POST", _core.files_path(self._sb._id, "/mkdir"), json={"path": _core._path(path)}))
            return True
        except ConflictError:
            return False

    def remove(self, path: str) -> None:
        """Remove a file, a symlink or a directory with its contents."""
        self._sb._call(Req("DELETE", _core.files_path(self._sb._id), params=_core.path_params(path)))

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Move ``old_path`` to ``new_path`` (replacing a file there); returns the moved entry."""
        return EntryInfo.from_wire(self._sb._call(Req(
            "POST", _core.files_path(self._sb._id, "/rename"),
            json={"from": _core._path(old_path), "to": _core._path(new_path)},
        )))

    def watch_dir(
        self, path: str, on_event: Callable[[FilesystemEvent], Any], recursive: bool = False
    ) -> WatchHandle:
        """Call ``on_event(FilesystemEvent)`` for each change under ``path`` until the handle's
        ``stop()``, from a background thread (with the asyncio client: from an asyncio task, so
        this needs asyncio). Returns once the watch is in place."""
        handle = WatchHandle(self._sb, path, on_event, recursive)
        _support.open_after_init(handle)
        return handle
