"""The I/O-free core shared by the sync and the async client.

It resolves the configuration (arguments, then ``LIZARD_API_URL`` / ``LIZARD_API_KEY``), builds
every request (method, path, JSON body) and validates arguments before anything is sent, folds the
NDJSON execution stream (``ExecutionFold``) and command stream (``CommandFold``), builds the
``/commands``, ``/pty`` and ``/files`` requests, and maps transport failures to SDK exceptions.

It never sends a request, never calls a user callback and never sleeps: ``sandbox.py`` and
``async_sandbox.py`` do the I/O around it, so both clients behave identically by construction.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import httpx

from ._version import __version__
from .errors import (
    AuthenticationError,
    CommandExitError,
    InvalidArgumentError,
    LizardError,
    SandboxError,
    TimeoutError,
)
from .models import (
    ContextLimits,
    CommandResult,
    Context,
    EntryInfo,
    Execution,
    ExecutionError,
    ExecutionUsage,
    FilesystemEvent,
    Result,
)

DEFAULT_API_URL = "http://127.0.0.1:8787"
DEFAULT_TEMPLATE = "code-interpreter-v1"
#: Seconds a control request (create, list, pause, …) may take before ``TimeoutError``.
DEFAULT_REQUEST_TIMEOUT = 60.0
NDJSON = "application/x-ndjson"

#: A context given to ``run_code`` & co.: the ``Context`` object or its id.
ContextLike = Union[Context, str]
#: A sandbox's egress: ``"none"``, ``"all"``, a list of allowed destinations, or
#: ``{"allow": [...], "deny": [...]}`` (both optional).
EgressLike = Union[str, Sequence[str], Mapping[str, Sequence[str]]]
#: Header injection rules: ``[{"host": "api.example.com", "headers": {"Authorization":
#: "Bearer ${secret:NAME}"}}]``.
InjectLike = Sequence[Mapping[str, Any]]
#: Per-context limits: a :class:`ContextLimits` or a mapping with ``memory_mb`` / ``cpu_millicores``.
ContextLimitsLike = Union[ContextLimits, Mapping[str, int]]


@dataclass(frozen=True)
class ClientConfig:
    """Where the API is and how to authenticate."""

    api_url: str
    api_key: str
    request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT

    def headers(self) -> Dict[str, str]:
        return {
            "Authorization": f"Bearer {self.api_key}",
            "User-Agent": f"lizard-python/{__version__}",
        }

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.request_timeout)

    def execute_timeout(self, timeout_ms: Optional[int]) -> httpx.Timeout:
        """A run may be silent for as long as the cell runs: no read timeout unless the cell has a
        ``timeout_ms`` (then that plus ``request_timeout`` of slack for the interrupt)."""
        if timeout_ms is None or self.request_timeout is None:
            read: Optional[float] = None
        else:
            read = timeout_ms / 1000.0 + self.request_timeout
        return httpx.Timeout(self.request_timeout, read=read)


def resolve_config(
    api_url: Optional[str], api_key: Optional[str], request_timeout: Optional[float]
) -> ClientConfig:
    """Arguments first, then ``LIZARD_API_URL`` / ``LIZARD_API_KEY``; the URL defaults to the
    address ``scripts/serve.sh`` uses. No key at all is an ``AuthenticationError`` here, before any
    request."""
    url = api_url or os.environ.get("LIZARD_API_URL") or DEFAULT_API_URL
    key = api_key or os.environ.get("LIZARD_API_KEY")
    if not key:
        raise AuthenticationError(
            "no API key: pass api_key=... or set LIZARD_API_KEY (the admin key is in <data-dir>/admin-key)",
            code="unauthenticated",
        )
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return ClientConfig(api_url=url, api_key=key.strip(), request_timeout=request_timeout)


class Req(NamedTuple):
    """One request to make: method, path under the API URL, optional JSON body and query."""

    method: str
    path: str
    json: Optional[Dict[str, Any]] = None
    params: Optional[Dict[str, str]] = None


def _seg(s: str) -> str:
    return quote(s, safe="")


def sandbox_path(sandbox_id: str, rest: str = "") -> str:
    return f"/v1/sandboxes/{_seg(sandbox_id)}{rest}"


def context_id(ctx: ContextLike) -> str:
    if isinstance(ctx, Context):
        return ctx.id
    if isinstance(ctx, str) and ctx:
        return ctx
    raise InvalidArgumentError(
        f"context must be a Context or a context id, not {ctx!r}", code="invalid_argument"
    )


def _str_map(name: str, m: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise InvalidArgumentError(f"{name} must be a mapping of str to str", code="invalid_argument")
    return {str(k): str(v) for k, v in m.items()}


def _ms(name: str, v: Optional[int]) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise InvalidArgumentError(
            f"{name} must be a positive number of milliseconds, not {v!r}", code="invalid_argument"
        )
    return int(v)


def _run_fields(
    body: Dict[str, Any], envs: Optional[Mapping[str, str]], timeout_ms: Optional[int], cwd: Optional[str] = None
) -> Dict[str, Any]:
    """``body`` with what a run (a cell, a command, a terminal) takes: ``cwd``, ``env`` and
    ``timeout_ms``, each only when given."""
    if cwd is not None:
        body["cwd"] = str(cwd)
    env = _str_map("envs", envs)
    if env:
        body["env"] = env
    t = _ms("timeout_ms", timeout_ms)
    if t is not None:
        body["timeout_ms"] = t
    return body


def _cmd(cmd: str) -> str:
    if not isinstance(cmd, str) or not cmd:
        raise InvalidArgumentError(f"cmd must be a non-empty str, not {cmd!r}", code="invalid_argument")
    return cmd


def create_request(
    *,
    project: Optional[str],
    template: Optional[str],
    timeout_ms: Optional[int],
    metadata: Optional[Mapping[str, str]],
    envs: Optional[Mapping[str, str]],
    limits: Optional[Mapping[str, int]],
    volumes: Optional[Any] = None,
    egress: Any = None,
    inject: Any = None,
    public_ports: bool = False,
    auto_resume: bool = False,
) -> Req:
    body: Dict[str, Any] = {}
    if project is not None:
        body["project"] = project
    if template is not None:
        body["template"] = template
    body.update(_labels_body(metadata, timeout_ms))
    env = _str_map("envs", envs)
    if env:
        body["env"] = env
    if limits:
        body["limits"] = {str(k): int(v) for k, v in limits.items()}
    mounts = volume_mounts(volumes)
    if mounts:
        body["volumes"] = mounts
    if inject is not None and egress is None:
        raise InvalidArgumentError(
            "inject needs egress to its hosts: give egress as well (e.g. egress=[host])",
            code="invalid_argument",
        )
    if egress is not None:
        body["network"] = {"egress": egress_body(egress)}
        if inject is not None:
            body["network"]["inject"] = inject_body(inject)
    for name, flag in (("public_ports", public_ports), ("auto_resume", auto_resume)):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False", code="invalid_argument")
        if flag:
            body.setdefault("network", {})[name] = True
    return Req("POST", "/v1/sandboxes", json=body)


def inject_body(inject: Any) -> List[Dict[str, Any]]:
    """``[{"host": ..., "headers": {name: template}}]`` → the wire form of ``network.inject`` (the
    same; ``${secret:NAME}`` is substituted by the server, ``$$`` is a literal ``$``)."""

    def rule(r: Any) -> bool:
        return (
            isinstance(r, Mapping)
            and set(r) <= {"host", "headers"}
            and isinstance(r.get("host"), str)
            and isinstance(r.get("headers"), Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in r["headers"].items())
        )

    if isinstance(inject, (list, tuple)) and all(rule(r) for r in inject):
        return [{"host": r["host"], "headers": dict(r["headers"])} for r in inject]
    raise InvalidArgumentError(
        "inject must be a list of {'host': 'api.example.com', 'headers': "
        f"{{'Authorization': 'Bearer ${{secret:NAME}}'}}}}, not {inject!r}",
        code="invalid_argument",
    )


def egress_body(egress: Any) -> Any:
    """``"none"``, ``"all"``, a list of destinations (allowed) or a mapping ``{"allow": [...],
    "deny": [...]}`` (both optional) → the wire form of ``network.egress``. Entries: ``example.com``,
    ``*.example.com``, ``api.example.com:443``, ``1.2.3.4``, ``1.2.3.4:8080``, ``10.0.0.0/8``,
    ``*``; the server checks each (a bad one is an ``InvalidArgumentError`` naming it)."""

    def strings(v: Any) -> bool:
        return isinstance(v, (list, tuple)) and all(isinstance(d, str) for d in v)

    if isinstance(egress, str) and egress in ("none", "all"):
        return egress
    if strings(egress):
        return {"allow": list(egress)}
    if isinstance(egress, Mapping):
        unknown = set(egress) - {"allow", "deny"}
        allow, deny = egress.get("allow"), egress.get("deny")
        if not unknown and (allow is None or strings(allow)) and (deny is None or strings(deny)):
            out: Dict[str, Any] = {}
            if allow is not None:
                out["allow"] = list(allow)
            if deny is not None:
                out["deny"] = list(deny)
            return out
    raise InvalidArgumentError(
        "egress must be 'none', 'all', a list of destinations or "
        f"{{'allow': [...], 'deny': [...]}}, not {egress!r}",
        code="invalid_argument",
    )


def check_set_network(
    egress: Any, inject: Any, public_ports: Optional[bool] = None, auto_resume: Optional[bool] = None
) -> None:
    """``set_network``'s arguments: at least one, each of its form (before any request)."""
    if egress is None and inject is None and public_ports is None and auto_resume is None:
        raise InvalidArgumentError(
            "set_network needs egress, inject, public_ports or auto_resume", code="invalid_argument"
        )
    for name, flag in (("public_ports", public_ports), ("auto_resume", auto_resume)):
        if flag is not None and not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False", code="invalid_argument")
    if egress is not None:
        egress_body(egress)
    if inject is not None:
        inject_body(inject)


def set_network_request(
    sandbox_id: str,
    egress: Any,
    inject: Any = None,
    public_ports: Optional[bool] = None,
    auto_resume: Optional[bool] = None,
) -> Req:
    """``PATCH /v1/sandboxes/{id}/network``: replace the sandbox's egress and/or injection rules
    and/or whether its ports are public and requests resume it, live; the server keeps the part
    not given."""
    check_set_network(egress, inject, public_ports, auto_resume)
    body: Dict[str, Any] = {}
    if public_ports is not None:
        body["public_ports"] = public_ports
    if auto_resume is not None:
        body["auto_resume"] = auto_resume
    if egress is not None:
        body["egress"] = egress_body(egress)
    if inject is not None:
        body["inject"] = inject_body(inject)
    return Req("PATCH", sandbox_path(sandbox_id, "/network"), json=body)


def network_log_request(sandbox_id: str) -> Req:
    return Req("GET", sandbox_path(sandbox_id, "/network/log"))


# ---- volumes -------------------------------------------------------------------------------------


def volume_mounts(volumes: Optional[Any]) -> List[Dict[str, Any]]:
    """``create``'s ``volumes``: names, or mappings ``{name, mount_path?, read_only?}``."""
    if volumes is None:
        return []
    if isinstance(volumes, (str, bytes)) or not isinstance(volumes, (list, tuple)):
        raise InvalidArgumentError(
            "volumes must be a list of names or of {'name', 'mount_path', 'read_only'}",
            code="invalid_argument",
        )
    out: List[Dict[str, Any]] = []
    for v in volumes:
        if isinstance(v, str) and v:
            out.append({"name": v})
            continue
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str) or not v.get("name"):
            raise InvalidArgumentError(
                f"each volume must be a name or a mapping with a 'name', not {v!r}", code="invalid_argument"
            )
        unknown = set(v) - {"name", "mount_path", "read_only"}
        if unknown:
            raise InvalidArgumentError(f"unknown volume keys {sorted(unknown)}", code="invalid_argument")
        m: Dict[str, Any] = {"name": v["name"]}
        if v.get("mount_path") is not None:
            m["mount_path"] = str(v["mount_path"])
        if v.get("read_only") is not None:
            m["read_only"] = bool(v["read_only"])
        out.append(m)
    return out


def _volume(name_or_id: str) -> str:
    if not isinstance(name_or_id, str) or not name_or_id:
        raise InvalidArgumentError("a volume name or id is required", code="invalid_argument")
    return f"/v1/volumes/{_seg(name_or_id)}"


def volume_create_request(name: str, size_limit_bytes: Optional[int], project: Optional[str]) -> Req:
    body: Dict[str, Any] = {"name": name}
    if size_limit_bytes is not None:
        body["size_limit_bytes"] = int(size_limit_bytes)
    if project is not None:
        body["project"] = project
    return Req("POST", "/v1/volumes", json=body)


def volume_list_request(project: Optional[str]) -> Req:
    return Req("GET", "/v1/volumes", params={"project": project} if project is not None else None)


def volume_get_request(name_or_id: str, project: Optional[str]) -> Req:
    return Req("GET", _volume(name_or_id), params={"project": project} if project is not None else None)


def volume_delete_request(name_or_id: str, project: Optional[str], force: bool) -> Req:
    params = {"force": "true" if force else "false"}
    if project is not None:
        params["project"] = project
    return Req("DELETE", _volume(name_or_id), params=params)


# ---- secrets -------------------------------------------------------------------------------------


def _secrets(project: str, name: Optional[str] = None) -> str:
    for what, v in (("project", project), ("the secret name", name)):
        if v is not None and (not isinstance(v, str) or not v):
            raise InvalidArgumentError(f"{what} must be a non-empty string", code="invalid_argument")
    base = f"/v1/projects/{_seg(project)}/secrets"
    return base if name is None else f"{base}/{_seg(name)}"


def secret_set_request(project: str, name: str, value: str) -> Req:
    if not isinstance(name, str) or not isinstance(value, str):
        raise InvalidArgumentError("a secret's name and value must be strings", code="invalid_argument")
    return Req("POST", _secrets(project), json={"name": name, "value": value})


def secret_list_request(project: str) -> Req:
    return Req("GET", _secrets(project))


def secret_delete_request(project: str, name: str) -> Req:
    return Req("DELETE", _secrets(project, name))


# ---- snapshots -----------------------------------------------------------------------------------


def snapshot_id(snapshot: Any) -> str:
    """A snapshot given as its id (``snap_…``) or a ``SnapshotInfo`` → its id."""
    sid = getattr(snapshot, "snapshot_id", snapshot)
    if not isinstance(sid, str) or not sid:
        raise InvalidArgumentError(
            f"a snapshot must be a snapshot id (snap_…) or a SnapshotInfo, not {snapshot!r}",
            code="invalid_argument",
        )
    return sid


def _snapshot(snapshot: Any) -> str:
    return f"/v1/snapshots/{_seg(snapshot_id(snapshot))}"


def _labels_body(metadata: Optional[Mapping[str, str]], timeout_ms: Optional[int] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    t = _ms("timeout_ms", timeout_ms)
    if t is not None:
        body["timeout_ms"] = t
    meta = _str_map("metadata", metadata)
    if meta:
        body["metadata"] = meta
    return body


def clone_request(
    snapshot: Any,
    *,
    project: Optional[str],
    timeout_ms: Optional[int],
    metadata: Optional[Mapping[str, str]],
    refused: Mapping[str, Any],
) -> Req:
    """``POST /v1/sandboxes`` with ``snapshot_id``. ``refused``: the create options a clone takes
    from its snapshot (given ones are an ``InvalidArgumentError`` before any request)."""
    given = [k for k, v in refused.items() if v]
    if given:
        raise InvalidArgumentError(
            "a sandbox from a snapshot has the snapshot's template, envs, limits, volumes and "
            f"network: {', '.join(given)} cannot be given with snapshot",
            code="invalid_argument",
        )
    body = _labels_body(metadata, timeout_ms)
    body["snapshot_id"] = snapshot_id(snapshot)
    # An admin key clones into the snapshot's project (a clone stays in its snapshot's project).
    if project is None:
        project = getattr(snapshot, "project", None) or None
    if project is not None:
        body["project"] = project
    return Req("POST", "/v1/sandboxes", json=body)


def snapshot_create_request(sandbox_id: str, metadata: Optional[Mapping[str, str]]) -> Req:
    return Req("POST", sandbox_path(sandbox_id, "/snapshots"), json=_labels_body(metadata))


def fork_request(sandbox_id: str, timeout_ms: Optional[int], metadata: Optional[Mapping[str, str]]) -> Req:
    return Req("POST", sandbox_path(sandbox_id, "/fork"), json=_labels_body(metadata, timeout_ms))


def snapshot_list_request(sandbox_id: Optional[str], project: Optional[str]) -> Req:
    params = {k: v for k, v in (("sandbox_id", sandbox_id), ("project", project)) if v is not None}
    return Req("GET", "/v1/snapshots", params=params or None)


def snapshot_get_request(snapshot: Any) -> Req:
    return Req("GET", _snapshot(snapshot))


def snapshot_delete_request(snapshot: Any) -> Req:
    return Req("DELETE", _snapshot(snapshot))


# ---- templates -----------------------------------------------------------------------------------

#: At most this many bytes of build context (the server's limit, after base64 decoding).
MAX_CONTEXT_BYTES = 64 * 1024 * 1024
#: ``TemplateBuildError.log`` keeps the last this many characters of a build's log.
MAX_BUILD_LOG_CHARS = 1024 * 1024


def _template(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("a template name is required", code="invalid_argument")
    return f"/v1/templates/{_seg(name)}"


def _project_params(project: Optional[str]) -> Optional[Dict[str, str]]:
    return {"project": project} if project is not None else None


def context_archive(context: Any) -> bytes:
    """``build``'s ``context`` as the bytes of a tar archive: a directory (``str`` or path) is
    packed here as a tar.gz with ``tarfile`` (regular files, directories and symlinks as symlinks;
    owners root, times zeroed, names sorted, so the same files give the same bytes and the server's
    build cache hits); a file path is read as an archive already; ``bytes`` are sent as they are.
    Larger than the server's 64 MiB: ``InvalidArgumentError`` before any request."""
    import gzip
    import io
    import tarfile

    if isinstance(context, (bytes, bytearray, memoryview)):
        data = bytes(context)
    elif isinstance(context, (str, os.PathLike)):
        path = os.fspath(context)
        if os.path.isdir(path):
            buf = io.BytesIO()

            def norm(ti: "tarfile.TarInfo") -> Optional["tarfile.TarInfo"]:
                if not (ti.isfile() or ti.isdir() or ti.issym()):
                    return None  # devices, fifos, sockets: nothing a build can use
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                ti.mtime = 0
                return ti

            with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for root, dirs, files in os.walk(path):
                        dirs.sort()
                        for n in sorted(dirs + files):
                            full = os.path.join(root, n)
                            arc = os.path.relpath(full, path)
                            tar.add(full, arcname=arc, recursive=False, filter=norm)
                            if buf.tell() > MAX_CONTEXT_BYTES:
                                raise InvalidArgumentError(
                                    f"the build context {path!r} is larger than 64 MiB (compressed)",
                                    code="payload_too_large",
                                )
            data = buf.getvalue()
        elif os.path.isfile(path):
            if os.path.getsize(path) > MAX_CONTEXT_BYTES:
                data = b"\0" * (MAX_CONTEXT_BYTES + 1)
            else:
                with open(path, "rb") as f:
                    data = f.read()
        else:
            raise InvalidArgumentError(
                f"context {path!r} is neither a directory nor a tar archive", code="invalid_argument"
            )
    else:
        raise InvalidArgumentError(
            f"context must be a directory path or the bytes of a tar archive, not {type(context).__name__}",
            code="invalid_argument",
        )
    if len(data) > MAX_CONTEXT_BYTES:
        raise InvalidArgumentError(
            "the build context is larger than 64 MiB (compressed)", code="payload_too_large"
        )
    return data


def template_build_request(
    name: str,
    *,
    dockerfile: Optional[str],
    context: Any,
    build_args: Optional[Mapping[str, str]],
    project: Optional[str],
    public: bool,
    cancel_on_disconnect: bool,
    from_sandbox: Optional[str],
) -> Req:
    """``POST /v1/templates``: exactly one of ``dockerfile`` and ``from_sandbox``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("a template name is required", code="invalid_argument")
    if (dockerfile is None) == (from_sandbox is None):
        raise InvalidArgumentError(
            "a template build takes either dockerfile or from_sandbox", code="invalid_argument"
        )
    body: Dict[str, Any] = {"name": name}
    if project is not None:
        body["project"] = project
    if public:
        body["public"] = True
    if from_sandbox is not None:
        if context is not None or build_args:
            raise InvalidArgumentError(
                "from_sandbox takes no context or build_args", code="invalid_argument"
            )
        if not isinstance(from_sandbox, str) or not from_sandbox:
            raise InvalidArgumentError("from_sandbox must be a sandbox id", code="invalid_argument")
        body["from_sandbox"] = from_sandbox
        return Req("POST", "/v1/templates", json=body)
    if not isinstance(dockerfile, str):
        raise InvalidArgumentError(
            f"dockerfile must be the Dockerfile's text, not {type(dockerfile).__name__}",
            code="invalid_argument",
        )
    body["dockerfile"] = dockerfile
    if context is not None:
        body["context"] = base64.b64encode(context_archive(context)).decode("ascii")
    args = _str_map("build_args", build_args)
    if args:
        body["build_args"] = args
    if cancel_on_disconnect:
        body["cancel_on_disconnect"] = True
    return Req("POST", "/v1/templates", json=body)


def template_list_request(project: Optional[str]) -> Req:
    return Req("GET", "/v1/templates", params=_project_params(project))


def template_get_request(name: str, project: Optional[str]) -> Req:
    return Req("GET", _template(name), params=_project_params(project))


def template_delete_request(name: str, project: Optional[str]) -> Req:
    return Req("DELETE", _template(name), params=_project_params(project))


class TemplateBuildFold:
    """Folds the NDJSON ``TemplateBuildEvent``s of one build. ``feed_line`` returns
    ``("step", TemplateBuildStep)``, ``("log", TemplateBuildLog)`` or ``None`` (``done``,
    ``error``, blanks and event types this SDK does not know). ``finish`` returns the ready
    ``TemplateInfo``, or raises ``TemplateBuildError`` (the server's ``error`` event, with the
    log) or ``SandboxError`` when the stream ended without ``done`` or ``error``."""

    def __init__(self) -> None:
        self._log: List[str] = []
        self._log_len = 0
        self._done: Optional[Dict[str, Any]] = None
        self._error: Optional[Dict[str, Any]] = None

    @property
    def log(self) -> str:
        return "".join(self._log)

    def _keep(self, text: str) -> None:
        self._log.append(text)
        self._log_len += len(text)
        if self._log_len > 2 * MAX_BUILD_LOG_CHARS:
            joined = "".join(self._log)[-MAX_BUILD_LOG_CHARS:]
            self._log = [joined]
            self._log_len = len(joined)

    def feed_line(self, line: Union[str, bytes]) -> Optional[StreamEvent]:
        from .models import TemplateBuildLog, TemplateBuildStep

        frame = _parse_frame(line, "template build")
        if frame is None:
            return None
        kind = frame.get("type")
        if kind == "step":
            return ("step", TemplateBuildStep(
                int(frame.get("index", 0)), int(frame.get("total", 0)), str(frame.get("name", ""))
            ))
        if kind == "log":
            text = str(frame.get("text", ""))
            self._keep(text)
            return ("log", TemplateBuildLog(str(frame.get("stream", "stdout")), text))
        if kind == "done":
            t = frame.get("template")
            self._done = t if isinstance(t, dict) else {}
        elif kind == "error":
            e = frame.get("error")
            self._error = e if isinstance(e, dict) else {}
        return None

    @property
    def ended(self) -> bool:
        return self._done is not None or self._error is not None

    def finish(self) -> Any:
        from .errors import TemplateBuildError
        from .models import TemplateInfo

        log = self.log[-MAX_BUILD_LOG_CHARS:]
        if self._error is not None:
            raise TemplateBuildError(
                str(self._error.get("message", "the template build failed")),
                code=str(self._error.get("code", "build_failed")),
                log=log,
            )
        if self._done is None:
            raise SandboxError(
                "the template build stream ended before its `done` or `error` event (the server went away; "
                "the build may go on: see Templates.get)",
                code="unavailable",
            )
        return TemplateInfo.from_wire(self._done)


def list_request(
    project: Optional[str], state: Optional[str], metadata: Optional[Mapping[str, str]]
) -> Req:
    params: Dict[str, str] = {}
    if project is not None:
        params["project"] = project
    if state is not None:
        params["state"] = state
    if metadata:
        params["metadata"] = ",".join(f"{k}={v}" for k, v in metadata.items())
    return Req("GET", "/v1/sandboxes", params=params or None)


def execute_request(
    sandbox_id: str,
    code: str,
    *,
    language: Optional[str],
    context: Optional[ContextLike],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int],
) -> Req:
    """``POST /execute``; ``context`` and ``language`` together are an ``InvalidArgumentError`` here,
    before any request (a context already has a language)."""
    if context is not None and language is not None:
        raise InvalidArgumentError(
            "pass either context or language to run_code, not both: a context already has a language",
            code="invalid_argument",
        )
    if not isinstance(code, str):
        raise InvalidArgumentError(f"code must be a str, not {type(code).__name__}", code="invalid_argument")
    body: Dict[str, Any] = {"code": code}
    if context is not None:
        body["context"] = context_id(context)
    if language is not None:
        body["language"] = language
    return Req("POST", sandbox_path(sandbox_id, "/execute"), json=_run_fields(body, envs, timeout_ms))


def create_context_request(
    sandbox_id: str,
    language: Optional[str],
    cwd: Optional[str],
    limits: Optional[ContextLimitsLike] = None,
) -> Req:
    body: Dict[str, Any] = {}
    if language is not None:
        body["language"] = language
    if cwd is not None:
        body["cwd"] = cwd
    if limits is not None:
        # A mapping goes as given (the server rejects unknown keys with a typed error).
        body["limits"] = limits.to_wire() if isinstance(limits, ContextLimits) else dict(limits)
    return Req("POST", sandbox_path(sandbox_id, "/contexts"), json=body)


def fork_context_request(
    sandbox_id: str,
    ctx: ContextLike,
    limits: Optional[ContextLimitsLike] = None,
    exact: Optional[bool] = None,
) -> Req:
    body: Dict[str, Any] = {}
    if limits is not None:
        body["limits"] = limits.to_wire() if isinstance(limits, ContextLimits) else dict(limits)
    if exact is not None:
        body["exact"] = bool(exact)
    return Req("POST", sandbox_path(sandbox_id, f"/contexts/{_seg(context_id(ctx))}/fork"), json=body)


def context_request(sandbox_id: str, method: str, ctx: ContextLike, action: str = "") -> Req:
    return Req(method, sandbox_path(sandbox_id, f"/contexts/{_seg(context_id(ctx))}{action}"))


def transport_error(exc: httpx.HTTPError, cfg: ClientConfig) -> LizardError:
    """An ``httpx`` failure (no response at all) as an SDK exception."""
    if isinstance(exc, httpx.TimeoutException):
        return TimeoutError(
            f"no answer from Lizard at {cfg.api_url} within the request timeout ({exc})",
            code="timeout",
        )
    return SandboxError(f"cannot reach Lizard at {cfg.api_url}: {exc}", code="unavailable")


# Kinds of events a run hands to the caller's callbacks.
StreamEvent = Tuple[str, Any]


def _parse_frame(line: Union[str, bytes], stream: str) -> Optional[Dict[str, Any]]:
    """One NDJSON line of a stream as a JSON object: ``None`` for a blank line or a non-object
    (clients ignore what they do not know), ``SandboxError`` for malformed JSON."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.strip()
    if not line:
        return None
    try:
        frame = json.loads(line)
    except ValueError as e:
        raise SandboxError(f"malformed frame in the {stream} stream: {line[:200]!r}", code="protocol") from e
    return frame if isinstance(frame, dict) else None


class ExecutionFold:
    """Folds the NDJSON frames of one run into an ``Execution``.

    ``feed_line`` takes one line and returns the event to hand to a callback — ``("stdout", str)``,
    ``("stderr", str)``, ``("result", Result)``, ``("error", ExecutionError)`` — or ``None``
    (``start``, ``end``, blank lines, and frame types this SDK does not know, which the wire format
    says clients must ignore). ``finish`` returns the ``Execution``, or raises ``SandboxError`` when
    the stream ended without its ``end`` frame.
    """

    def __init__(self) -> None:
        self._stdout: List[str] = []
        self._stderr: List[str] = []
        self._output: List[str] = []
        self._results: List[Result] = []
        self._error: Optional[ExecutionError] = None
        self._count = 0
        self._context_id: Optional[str] = None
        self._status: Optional[str] = None
        self._duration_ms = 0
        self._usage: Optional[ExecutionUsage] = None
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def feed_line(self, line: Union[str, bytes]) -> Optional[StreamEvent]:
        frame = _parse_frame(line, "execution")
        if frame is None:
            return None
        return self.feed(frame)

    def feed(self, frame: Mapping[str, Any]) -> Optional[StreamEvent]:
        kind = frame.get("type")
        if kind == "stdout" or kind == "stderr":
            text = str(frame.get("text", ""))
            (self._stdout if kind == "stdout" else self._stderr).append(text)
            self._output.append(text)
            return (kind, text)
        if kind == "result":
            r = Result.from_wire(frame)
            self._results.append(r)
            return ("result", r)
        if kind == "error":
            e = ExecutionError.from_wire(frame)
            self._error = e
            return ("error", e)
        if kind == "start":
            self._count = int(frame.get("execution_count", 0))
            cid = frame.get("context_id")
            self._context_id = str(cid) if cid is not None else None
            return None
        if kind == "end":
            self._status = str(frame.get("status", ""))
            self._duration_ms = int(frame.get("duration_ms", 0))
            usage = frame.get("usage")
            self._usage = ExecutionUsage.from_wire(usage) if isinstance(usage, Mapping) else None
            self._ended = True
            return None
        return None

    def finish(self) -> Execution:
        if not self._ended:
            raise SandboxError(
                "the execution stream ended before its `end` frame (the server or the sandbox went away)",
                code="unavailable",
            )
        return Execution(
            stdout="".join(self._stdout),
            stderr="".join(self._stderr),
            results=self._results,
            error=self._error,
            execution_count=self._count,
            context_id=self._context_id,
            status=self._status,
            duration_ms=self._duration_ms,
            usage=self._usage,
            output="".join(self._output),
        )




# ---- commands -------------------------------------------------------------------------------


def start_command_request(
    sandbox_id: str,
    cmd: str,
    *,
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int],
    background: bool,
    stdin: bool,
) -> Req:
    """``POST /commands``: ``bash -c CMD`` in the sandbox."""
    body = _run_fields({"cmd": _cmd(cmd)}, envs, timeout_ms, cwd)
    if background:
        body["background"] = True
    if stdin:
        body["stdin"] = True
    return Req("POST", sandbox_path(sandbox_id, "/commands"), json=body)


def _pid(pid: int) -> str:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise InvalidArgumentError(f"pid must be a positive int, not {pid!r}", code="invalid_argument")
    return str(pid)


def command_path(sandbox_id: str, pid: int, action: str = "") -> str:
    return sandbox_path(sandbox_id, f"/commands/{_pid(pid)}{action}")


def _data_body(data: Union[str, bytes], what: str) -> Dict[str, str]:
    """The body that sends ``data`` to a process: ``{"data": text}`` for a str, ``{"data_b64": ...}``
    for bytes; ``InvalidArgumentError`` (naming it ``what``) for anything else."""
    if isinstance(data, str):
        return {"data": data}
    if isinstance(data, (bytes, bytearray, memoryview)):
        return {"data_b64": base64.b64encode(bytes(data)).decode("ascii")}
    raise InvalidArgumentError(f"{what} must be str or bytes, not {type(data).__name__}", code="invalid_argument")


def stdin_request(sandbox_id: str, pid: int, data: Union[str, bytes]) -> Req:
    return Req("POST", command_path(sandbox_id, pid, "/stdin"), json=_data_body(data, "stdin data"))


def signal_request(sandbox_id: str, pid: int, sig: str = "SIGKILL") -> Req:
    return Req("POST", command_path(sandbox_id, pid, "/signal"), json={"signal": sig})


def _signal_exit_code(name: str) -> int:
    name = name.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return 128 + int(signal.Signals[name])
    except KeyError:
        return 128


class _ProcessFold:
    """What ``CommandFold`` and ``PtyFold`` share: a process's NDJSON ``CommandEvent``s, of which
    ``start`` gives ``pid`` and ``end`` the exit code (``exit_code``); the output frames are the
    subclass's. ``_STREAM`` names the stream and ``_PROCESS`` the process in errors."""

    _STREAM: str
    _PROCESS: str

    def __init__(self) -> None:
        self.pid: Optional[int] = None
        self._end: Optional[Mapping[str, Any]] = None

    @property
    def ended(self) -> bool:
        return self._end is not None

    def _output_frame(self, line: Union[str, bytes]) -> Optional[Dict[str, Any]]:
        """The frame of ``line`` when it is output (``stdout``/``stderr``), else ``None`` (a
        ``start`` or ``end`` frame is taken in here)."""
        frame = _parse_frame(line, self._STREAM)
        if frame is None:
            return None
        kind = frame.get("type")
        if kind == "stdout" or kind == "stderr":
            return frame
        if kind == "start":
            self.pid = int(frame.get("pid", 0))
        elif kind == "end":
            self._end = frame
        return None

    def exit_code(self) -> int:
        """The exit code of ``end`` (128 + N for a process killed by signal N); ``TimeoutError``
        when the process passed its ``timeout_ms``, ``SandboxError`` for a stream without ``end``."""
        end = self._end
        if end is None:
            raise SandboxError(
                f"the {self._STREAM} stream ended before its `end` event (the server or the sandbox went away)",
                code="unavailable",
            )
        if end.get("timed_out"):
            raise TimeoutError(f"{self._PROCESS} did not finish within timeout_ms and was stopped", code="timeout")
        if end.get("exit_code") is not None:
            return int(end["exit_code"])
        if end.get("signal"):
            return _signal_exit_code(str(end["signal"]))
        return -1


class CommandFold(_ProcessFold):
    """Folds the NDJSON ``CommandEvent``s of one process. ``feed_line`` returns ``("stdout", str)``
    or ``("stderr", str)`` for the callbacks, else ``None``; ``finish`` returns the
    ``CommandResult`` (exit code 128 + N for a process killed by signal N), raises ``TimeoutError``
    when the process passed its ``timeout_ms``, and ``SandboxError`` for a stream without ``end``."""

    _STREAM = "command"
    _PROCESS = "the command"

    def __init__(self) -> None:
        super().__init__()
        self._stdout: List[str] = []
        self._stderr: List[str] = []

    def feed_line(self, line: Union[str, bytes]) -> Optional[StreamEvent]:
        frame = self._output_frame(line)
        if frame is None:
            return None
        kind = str(frame["type"])
        text = str(frame.get("text", ""))
        (self._stdout if kind == "stdout" else self._stderr).append(text)
        return (kind, text)

    def finish(self) -> CommandResult:
        code = self.exit_code()
        return CommandResult("".join(self._stdout), "".join(self._stderr), code)


def check_exit(result: CommandResult) -> CommandResult:
    """``commands.run``'s rule: a non-zero exit raises ``CommandExitError`` with the result."""
    if result.exit_code != 0:
        raise CommandExitError(result)
    return result


# ---- terminals ------------------------------------------------------------------------------


def _cells(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 4096:
        raise InvalidArgumentError(f"{name} must be an int in 1..4096, not {n!r}", code="invalid_argument")
    return n


def start_pty_request(
    sandbox_id: str,
    *,
    cols: int,
    rows: int,
    cmd: Optional[str],
    cwd: Optional[str],
    envs: Optional[Mapping[str, str]],
    timeout_ms: Optional[int] = None,
) -> Req:
    """``POST /pty``: ``cmd`` (``bash -c``) or, without one, an interactive ``bash -i`` on a new
    terminal of ``cols`` x ``rows`` cells."""
    body: Dict[str, Any] = {"cols": _cells("cols", cols), "rows": _cells("rows", rows)}
    if cmd is not None:
        body["cmd"] = _cmd(cmd)
    return Req("POST", sandbox_path(sandbox_id, "/pty"), json=_run_fields(body, envs, timeout_ms, cwd))


def pty_path(sandbox_id: str, pid: int, action: str) -> str:
    return sandbox_path(sandbox_id, f"/pty/{_pid(pid)}{action}")


def pty_input_request(sandbox_id: str, pid: int, data: Union[str, bytes]) -> Req:
    """``POST /pty/{pid}/input``: keystrokes (``\\r`` is Enter, ``\\x03`` Ctrl-C)."""
    return Req("POST", pty_path(sandbox_id, pid, "/input"), json=_data_body(data, "terminal input"))


def pty_resize_request(sandbox_id: str, pid: int, cols: int, rows: int) -> Req:
    return Req("POST", pty_path(sandbox_id, pid, "/resize"),
               json={"cols": _cells("cols", cols), "rows": _cells("rows", rows)})


class PtyFold(_ProcessFold):
    """Folds a terminal's NDJSON ``CommandEvent``s: ``feed_line`` returns the raw bytes of a
    ``stdout`` chunk (from ``data_b64``, else the UTF-8 of ``text``), else ``None``; ``pid`` comes
    from ``start``, ``exit_code`` from ``end`` (128 + N for a process killed by signal N)."""

    _STREAM = "terminal"
    _PROCESS = "the terminal's process"

    def feed_line(self, line: Union[str, bytes]) -> Optional[bytes]:
        frame = self._output_frame(line)
        if frame is None:
            return None
        b64 = frame.get("data_b64")
        if b64 is not None:
            data = base64.b64decode(str(b64))
        else:
            data = str(frame.get("text", "")).encode("utf-8")
        return data or None


# ---- files ----------------------------------------------------------------------------------


def _path(path: str) -> str:
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"path must be a non-empty str, not {path!r}", code="invalid_argument")
    return path


def files_path(sandbox_id: str, rest: str = "") -> str:
    return sandbox_path(sandbox_id, "/files" + rest)


def path_params(path: str) -> Dict[str, str]:
    return {"path": _path(path)}


def read_format(fmt: str) -> str:
    if fmt not in ("text", "bytes", "stream"):
        raise InvalidArgumentError(
            f"format must be 'text', 'bytes' or 'stream', not {fmt!r}", code="invalid_argument"
        )
    return fmt


def write_items(path_or_files: Any, data: Any) -> Tuple[bool, List[Tuple[str, Any]]]:
    """``files.write(path, data)`` or ``files.write([(path, data), ...])`` (also dicts with
    ``path``/``data``) as ``(is_many, [(path, data)])``. ``str`` data is sent as UTF-8."""
    if isinstance(path_or_files, str):
        if data is None:
            raise InvalidArgumentError("files.write(path, data) needs data", code="invalid_argument")
        return False, [(_path(path_or_files), write_body(data))]
    if data is not None:
        raise InvalidArgumentError(
            "pass files.write(path, data) or files.write([(path, data), ...])", code="invalid_argument"
        )
    items: List[Tuple[str, Any]] = []
    for item in path_or_files:
        if isinstance(item, Mapping):
            p, d = item.get("path"), item.get("data")
        else:
            p, d = item
        items.append((_path(p), write_body(d)))
    return True, items


def write_body(data: Any) -> Any:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if data is None:
        raise InvalidArgumentError("file data must not be None", code="invalid_argument")
    if hasattr(data, "read"):
        # A file object: stream it in chunks.
        def chunks() -> Any:
            while True:
                b = data.read(1 << 20)
                if not b:
                    return
                yield b.encode("utf-8") if isinstance(b, str) else b

        return chunks()
    return data  # an iterator of bytes (sync) or an async iterator (async)


def list_params(path: str, depth: int) -> Dict[str, str]:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise InvalidArgumentError(f"depth must be an int >= 1, not {depth!r}", code="invalid_argument")
    return {"path": _path(path), "depth": str(depth)}


def entries(rows: Any) -> List[EntryInfo]:
    return [EntryInfo.from_wire(r) for r in rows or []]


def watch_params(path: str, recursive: bool) -> Dict[str, str]:
    return {"path": _path(path), "recursive": "true" if recursive else "false"}


def watch_event(line: Union[str, bytes]) -> Optional[FilesystemEvent]:
    """One NDJSON line of ``/files/watch`` as an event, ``None`` for blanks."""
    frame = _parse_frame(line, "watch")
    if frame is None:
        return None
    return FilesystemEvent.from_wire(frame)
