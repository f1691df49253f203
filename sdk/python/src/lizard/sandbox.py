"""``CodeSandbox``: the synchronous client for one Lizard sandbox, on ``httpx.Client``.

A ``CodeSandbox`` is a handle on a sandbox of the server (``create`` makes one, ``connect`` attaches
to an existing one and resumes it when paused). ``run_code`` streams the run as NDJSON and calls the
callbacks from the calling thread as each frame arrives; the other methods are one request each.
Used as a context manager, the sandbox is killed on exit.

This module does not build requests or parse the stream itself (``lizard._core`` does, shared with
``AsyncCodeSandbox``), retries nothing, and keeps no state but the sandbox id, the HTTP connection
pool and the id of the Bash context that ``exec`` uses.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Type

import httpx

from . import _core
from ._core import DEFAULT_REQUEST_TIMEOUT, DEFAULT_TEMPLATE, NDJSON, ClientConfig, ContextLike, Req
from .errors import InvalidArgumentError, LizardError, NotFoundError, error_from_response
from .models import CommandResult, Context, Execution, ExecutionError, Result, SandboxInfo

__all__ = ["CodeSandbox"]

OutputHandler = Callable[[str], Any]
ResultHandler = Callable[[Result], Any]
ErrorHandler = Callable[[ExecutionError], Any]


def _new_client(cfg: ClientConfig) -> httpx.Client:
    return httpx.Client(base_url=cfg.api_url, headers=cfg.headers(), timeout=cfg.timeout())


def _send(client: httpx.Client, cfg: ClientConfig, req: Req) -> Any:
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

    def _init(self, sandbox_id: str, cfg: ClientConfig, client: Optional[httpx.Client]) -> None:
        self._id = sandbox_id
        self._cfg = cfg
        self._client = client
        self._client_lock = threading.Lock()
        self._exec_context: Optional[str] = None
        self._exec_lock = threading.Lock()

    @classmethod
    def _bind(cls, sandbox_id: str, cfg: ClientConfig, client: Optional[httpx.Client]) -> "CodeSandbox":
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
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> "CodeSandbox":
        """Create a sandbox in ``project`` (an admin key creates the project on first use; a
        project key may leave it out) from ``template``. ``timeout_ms`` is its lifetime (server
        default 300000: the server kills it then unless extended with ``set_timeout``);
        ``metadata`` labels it; ``envs`` is the environment of every process in it; ``limits``
        overrides ``memory_mb``, ``cpu_millicores``, ``pids``, ``tmp_mb``."""
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        req = _core.create_request(
            project=project, template=template, timeout_ms=timeout_ms,
            metadata=metadata, envs=envs, limits=limits,
        )
        client = _new_client(cfg)
        try:
            info = SandboxInfo.from_wire(_send(client, cfg, req))
        except BaseException:
            client.close()
            raise
        return cls._bind(info.sandbox_id, cfg, client)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> "CodeSandbox":
        """Attach to an existing sandbox; a paused one is resumed (its kernels keep their state).
        ``NotFoundError`` when it does not exist (or belongs to another project)."""
        cfg = _core.resolve_config(api_url, api_key, request_timeout)
        sb = cls._bind(sandbox_id, cfg, None)
        try:
            info = sb.get_info()
            if info.state == "paused":
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
    def _http(self) -> httpx.Client:
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
        ``ExecutionError``. A callback that raises stops the call; the closed connection interrupts
        the cell on the server.
        """
        req = _core.execute_request(
            self._id, code, language=language, context=context, envs=envs, timeout_ms=timeout_ms
        )
        handlers: Dict[str, Optional[Callable[[Any], Any]]] = {
            "stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error,
        }
        fold = _core.ExecutionFold()
        try:
            with self._http.stream(
                req.method, req.path, json=req.json,
                headers={"Accept": NDJSON}, timeout=self._cfg.execute_timeout(timeout_ms),
            ) as resp:
                if resp.status_code >= 400:
                    raise error_from_response(resp.status_code, resp.read())
                for line in resp.iter_lines():
                    event = fold.feed_line(line)
                    if event is not None:
                        handler = handlers[event[0]]
                        if handler is not None:
                            handler(event[1])
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
        """Run one shell command and return ``(stdout, stderr, exit_code)``.

        Commands run in a Bash context of their own (made on first use by this object), one after
        the other, so ``cd`` and ``export`` carry over to the next ``exec`` but never into
        ``run_code(..., language='bash')``. ``exit N`` ends that shell (``N`` is returned and the
        next command gets a fresh shell). Raises ``TimeoutError`` when ``timeout_ms`` passes.
        """
        with self._exec_lock:
            for attempt in (0, 1):
                if self._exec_context is None:
                    self._exec_context = self.create_context(language="bash").id
                try:
                    ex = self.run_code(
                        command, context=self._exec_context, envs=envs, timeout_ms=timeout_ms,
                        on_stdout=on_stdout, on_stderr=on_stderr,
                    )
                    break
                except NotFoundError:
                    # The context was deleted behind our back: make a new one, once.
                    self._exec_context = None
                    if attempt:
                        raise
        return _core.command_result(ex)

    # ---- contexts -----------------------------------------------------------------------------

    def create_context(self, language: Optional[str] = None, cwd: Optional[str] = None) -> Context:
        """A new context (its own kernel and state) for ``language`` (Python by default), working
        in ``cwd`` (``/home/user`` by default)."""
        return Context.from_wire(self._call(_core.create_context_request(self._id, language, cwd)))

    def list_contexts(self) -> List[Context]:
        rows = self._call(Req("GET", _core.sandbox_path(self._id, "/contexts"))) or []
        return [Context.from_wire(r) for r in rows]

    def restart_context(self, context: ContextLike) -> Context:
        """Replace the context's kernel with a fresh one: every variable and import is gone."""
        return Context.from_wire(self._call(_core.context_request(self._id, "POST", context, "/restart")))

    def delete_context(self, context: ContextLike) -> None:
        """Stop the context's kernel and forget it."""
        self._call(_core.context_request(self._id, "DELETE", context))
        if _core.context_id(context) == self._exec_context:
            self._exec_context = None

    # Cloudflare-shaped names for the same calls.
    def create_code_context(self, language: Optional[str] = None, cwd: Optional[str] = None) -> Context:
        return self.create_context(language=language, cwd=cwd)

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
        self._call(Req("POST", _core.sandbox_path(self._id, "/timeout"),
                       json={"timeout_ms": _core._ms("timeout_ms", timeout_ms)}))

    def pause(self) -> None:
        """Freeze every process of the sandbox; memory, files and kernel state are kept and its
        timeout stops counting. ``run_code`` raises ``ConflictError`` until ``resume``/``connect``."""
        self._call(Req("POST", _core.sandbox_path(self._id, "/pause")))

    def resume(self) -> None:
        """Thaw a paused sandbox (a no-op when it runs)."""
        self._call(Req("POST", _core.sandbox_path(self._id, "/resume")))

    def kill(self) -> bool:
        """Kill the sandbox and close the connections. ``True`` if it was killed now, ``False`` if
        it was already gone."""
        try:
            self._call(Req("DELETE", _core.sandbox_path(self._id)))
            killed = True
        except NotFoundError:
            killed = False
        self._exec_context = None
        self.close()
        return killed
