"""The SDK's value types: what ``run_code``, ``exec``, ``commands``, ``files``, the context and the
sandbox calls return.

These mirror the wire types of ``crates/lizard-proto`` (``ExecutionResult``, ``ExecutionError``,
``Execution``, ``Context``, ``SandboxInfo``) in Python's idiom: ``stdout``/``stderr`` are joined
strings, a result's MIME bundle is exposed by format name (``png``, ``html``, …) with ``data`` as its
primary textual value. Parsing is tolerant: unknown fields are ignored, so a newer server still works.

This module does no I/O and does not fold the event stream (that is ``lizard._core.ExecutionFold``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Union

__all__ = [
    "Result",
    "ExecutionError",
    "ExecutionUsage",
    "Execution",
    "Context",
    "SandboxLimits",
    "SandboxInfo",
    "SandboxVolume",
    "SandboxNetwork",
    "SecretInfo",
    "NetworkLog",
    "MirrorTraffic",
    "EgressTraffic",
    "RefusedRequest",
    "VolumeInfo",
    "SnapshotInfo",
    "TemplateInfo",
    "TemplateVersion",
    "TemplateBuildStep",
    "TemplateBuildLog",
    "CommandResult",
    "ProcessInfo",
    "EntryInfo",
    "FilesystemEvent",
    "MIME_TYPES",
]

#: Format name → MIME type, in the order ``Result.formats()`` lists them.
MIME_TYPES: Dict[str, str] = {
    "text": "text/plain",
    "html": "text/html",
    "markdown": "text/markdown",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "pdf": "application/pdf",
    "latex": "text/latex",
    "json": "application/json",
    "javascript": "application/javascript",
}
#: The data behind a result, next to its display formats (not listed by ``formats()``): a pandas
#: DataFrame's columns and a matplotlib figure's chart (type, title, axes, elements).
TABLE_MIME = "application/vnd.lizard.table+json"
CHART_MIME = "application/vnd.lizard.chart+json"
_FORMAT_OF: Dict[str, str] = {mime: name for name, mime in MIME_TYPES.items()}
_FORMAT_OF.update({TABLE_MIME: "table", CHART_MIME: "chart"})
# Formats that can stand in for text/plain as a result's primary textual value, best first.
_TEXTUAL = ("text", "markdown", "latex", "html", "svg", "json", "javascript")


class Result:
    """One rich value of a cell: the value of its last expression (``is_main_result``) or a
    ``display()`` output, as a MIME bundle.

    ``data`` is the primary textual value: ``text/plain`` (so ``1 + 1`` in JavaScript gives
    ``"2"``), or else the first textual format present (markdown, LaTeX, HTML, SVG, JSON dumped to a
    string, JavaScript); ``None`` for a bundle with only binary formats. ``png``, ``jpeg`` and ``pdf``
    are base64 strings as sent by the kernel (``base64.b64decode(r.png)`` gives the file); ``json``
    is any JSON value; the other formats are strings. MIME types without a name here are in
    ``extra``; the whole bundle is ``raw``.
    """

    __slots__ = ("is_main_result", "raw", "metadata")

    def __init__(
        self,
        raw: Mapping[str, Any],
        *,
        is_main_result: bool = False,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.raw: Dict[str, Any] = dict(raw)
        self.is_main_result = is_main_result
        self.metadata: Optional[Dict[str, Any]] = dict(metadata) if metadata is not None else None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "Result":
        data = obj.get("data")
        meta = obj.get("metadata")
        return cls(
            data if isinstance(data, Mapping) else {},
            is_main_result=bool(obj.get("is_main_result", False)),
            metadata=meta if isinstance(meta, Mapping) else None,
        )

    def _get(self, name: str) -> Any:
        return self.raw.get(MIME_TYPES[name])

    def _str(self, name: str) -> Optional[str]:
        value = self.raw.get(MIME_TYPES[name])
        return value if isinstance(value, str) else None

    @property
    def text(self) -> Optional[str]:
        return self._str("text")

    @property
    def html(self) -> Optional[str]:
        return self._str("html")

    @property
    def markdown(self) -> Optional[str]:
        return self._str("markdown")

    @property
    def svg(self) -> Optional[str]:
        return self._str("svg")

    @property
    def png(self) -> Optional[str]:
        """Base64-encoded PNG."""
        return self._str("png")

    @property
    def jpeg(self) -> Optional[str]:
        """Base64-encoded JPEG."""
        return self._str("jpeg")

    @property
    def pdf(self) -> Optional[str]:
        """Base64-encoded PDF."""
        return self._str("pdf")

    @property
    def latex(self) -> Optional[str]:
        return self._str("latex")

    @property
    def json(self) -> Any:
        """The ``application/json`` value (any JSON value), or ``None``."""
        return self._get("json")

    @property
    def javascript(self) -> Optional[str]:
        return self._str("javascript")

    @property
    def table(self) -> Optional[Dict[str, Any]]:
        """A DataFrame's data as ``{column: [values...]}`` (timestamps as ISO strings), or ``None``."""
        return self.raw.get(TABLE_MIME)

    @property
    def chart(self) -> Optional[Dict[str, Any]]:
        """The chart a matplotlib figure draws (``type``: line, scatter, bar, pie, box_and_whisker,
        superchart; ``title``, axis labels and ticks, ``elements``), or ``None``."""
        return self.raw.get(CHART_MIME)

    @property
    def extra(self) -> Dict[str, Any]:
        """MIME types of the bundle that have no name here."""
        return {k: v for k, v in self.raw.items() if k not in _FORMAT_OF}

    @property
    def data(self) -> Optional[str]:
        """The primary textual value (see the class docs)."""
        for name in _TEXTUAL:
            value = self._get(name)
            if value is None:
                continue
            if isinstance(value, str):
                return value
            return json.dumps(value)
        return None

    def formats(self) -> List[str]:
        """Names of the formats present, e.g. ``['text', 'png']``; MIME types without a name are
        listed as themselves, after the named ones."""
        named = [name for name, mime in MIME_TYPES.items() if mime in self.raw]
        return named + [k for k in self.raw if k not in _FORMAT_OF]

    def __getitem__(self, mime_or_format: str) -> Any:
        """``result['image/png']`` or ``result['png']``."""
        key = MIME_TYPES.get(mime_or_format, mime_or_format)
        return self.raw[key]

    def __contains__(self, mime_or_format: object) -> bool:
        if not isinstance(mime_or_format, str):
            return False
        return MIME_TYPES.get(mime_or_format, mime_or_format) in self.raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (self.raw, self.is_main_result, self.metadata) == (
            other.raw,
            other.is_main_result,
            other.metadata,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        # Never dump a base64 image into a log line.
        text = self.data
        if text is not None and len(text) > 80:
            text = text[:77] + "..."
        return f"Result(formats={self.formats()!r}, is_main_result={self.is_main_result!r}, data={text!r})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        """Lets Jupyter/IPython display a result as the sandbox produced it."""
        return dict(self.raw)


@dataclass(frozen=True)
class ExecutionError:
    """The cell failed: ``name`` is the exception class (``NameError``, ``ReferenceError``;
    ``ExitCode`` for a Bash cell whose status was not 0, with the status in ``value``;
    ``KeyboardInterrupt`` after an interrupt, ``Timeout`` after ``timeout_ms``; ``KernelDied`` when the kernel process
    ended), ``value`` its message (also ``message``), ``traceback`` plain text without colours.

    A value, not an exception: ``run_code`` returns it in ``Execution.error`` and does not raise it.
    """

    name: str
    value: str
    traceback: str = ""

    @property
    def message(self) -> str:
        return self.value

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "ExecutionError":
        return cls(
            name=str(obj.get("name", "")),
            value=str(obj.get("value", "")),
            traceback=str(obj.get("traceback", "") or ""),
        )

    def __str__(self) -> str:
        return f"{self.name}: {self.value}" if self.value else self.name


@dataclass(frozen=True)
class ExecutionUsage:
    """Resources one run used, measured on the kernel process and its children."""

    cpu_ms: int = 0
    peak_rss_bytes: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "ExecutionUsage":
        return cls(cpu_ms=int(obj.get("cpu_ms", 0)), peak_rss_bytes=int(obj.get("peak_rss_bytes", 0)))


@dataclass
class Execution:
    """A finished run of ``run_code``.

    ``stdout``/``stderr`` are everything the cell wrote, joined; ``results`` its rich values in
    order; ``error`` is set when the cell failed; ``execution_count`` is the kernel's counter for
    this cell. ``status`` is how the run ended: ``ok``, ``error``, ``interrupted``, ``timeout`` or
    ``kernel_died``.

    The Cloudflare-shaped views are here too: ``output`` (all text output in arrival order),
    ``success``, ``formats()`` and ``outputs`` (the results merged into one bundle).
    """

    stdout: str = ""
    stderr: str = ""
    results: List[Result] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    execution_count: int = 0
    context_id: Optional[str] = None
    status: Optional[str] = None
    duration_ms: int = 0
    usage: Optional[ExecutionUsage] = None
    output: str = ""

    @property
    def main_result(self) -> Optional[Result]:
        """The value of the cell's last expression, if it had one."""
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self) -> Optional[str]:
        """``text/plain`` of the main result."""
        main = self.main_result
        return main.text if main is not None else None

    @property
    def success(self) -> bool:
        return self.error is None and self.status in (None, "ok")

    def formats(self) -> List[str]:
        """Format names present in any result, first occurrence first (e.g. ``['text', 'png']``)."""
        seen: List[str] = []
        for r in self.results:
            for f in r.formats():
                if f not in seen:
                    seen.append(f)
        return seen

    @property
    def outputs(self) -> Result:
        """All results merged into one bundle (the main result wins a MIME type present in several,
        then the earliest), so ``execution.outputs.png`` is the chart whichever result carried it."""
        merged: Dict[str, Any] = {}
        ordered = sorted(self.results, key=lambda r: not r.is_main_result)
        for r in ordered:
            for k, v in r.raw.items():
                merged.setdefault(k, v)
        return Result(merged, is_main_result=self.main_result is not None)


@dataclass(frozen=True)
class Context:
    """A context: one kernel process with its own state inside a sandbox.

    ``is_default`` marks the context a run with only ``language`` uses. ``kernel_restarts`` counts
    how often the kernel was replaced (each replacement lost the state), ``last_restart_reason`` why.
    """

    id: str
    language: str
    cwd: str = ""
    is_default: bool = False
    state: str = "idle"
    execution_count: int = 0
    kernel_restarts: int = 0
    last_restart_reason: Optional[str] = None
    #: The limits the context was created with, if any.
    limits: Optional["ContextLimits"] = None
    #: Memory charged to the context's own cgroup now, in bytes (absent outside a sandbox).
    memory_bytes: Optional[int] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "Context":
        return cls(
            id=str(obj["id"]),
            language=str(obj.get("language", "")),
            cwd=str(obj.get("cwd", "")),
            is_default=bool(obj.get("is_default", False)),
            state=str(obj.get("state", "idle")),
            execution_count=int(obj.get("execution_count", 0)),
            kernel_restarts=int(obj.get("kernel_restarts", 0)),
            last_restart_reason=obj.get("last_restart_reason"),
            limits=ContextLimits.from_wire(obj["limits"]) if obj.get("limits") else None,
            memory_bytes=int(obj["memory_bytes"]) if obj.get("memory_bytes") is not None else None,
        )

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True)
class ContextLimits:
    """Limits of one context's own cgroup (its kernel and the kernel's children), at most the
    sandbox's. A context over its memory limit loses its kernel alone: the run ends with a
    ``KernelDied`` error, the context gets a fresh kernel, other contexts keep their state.
    ``None`` = only the sandbox's limit applies."""

    memory_mb: Optional[int] = None
    cpu_millicores: Optional[int] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "ContextLimits":
        m, c = obj.get("memory_mb"), obj.get("cpu_millicores")
        return cls(
            memory_mb=int(m) if m is not None else None,
            cpu_millicores=int(c) if c is not None else None,
        )

    def to_wire(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        if self.memory_mb is not None:
            out["memory_mb"] = self.memory_mb
        if self.cpu_millicores is not None:
            out["cpu_millicores"] = self.cpu_millicores
        return out


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox."""

    memory_mb: int = 0
    cpu_millicores: int = 0
    pids: int = 0
    tmp_mb: int = 0
    disk_mb: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "SandboxLimits":
        return cls(
            memory_mb=int(obj.get("memory_mb", 0)),
            cpu_millicores=int(obj.get("cpu_millicores", 0)),
            pids=int(obj.get("pids", 0)),
            tmp_mb=int(obj.get("tmp_mb", 0)),
            disk_mb=int(obj.get("disk_mb", 0)),
        )


@dataclass(frozen=True)
class StateItem:
    """One item of a context's state saved or restored across hibernation. ``kind`` is
    ``variable``, ``function``, ``class``, ``module``, ``alias`` or ``cwd`` (``name`` is then the
    path)."""

    name: str
    kind: str


@dataclass(frozen=True)
class LostItem:
    """One item that did not survive hibernation, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class ForkedContext(Context):
    """A context made by ``fork_context``: a copy of its source's live kernel (copy-on-write).

    ``forked_from`` is the source's id; ``lost`` what the fork could not carry (threads other
    than the kernel's, background jobs, pending tasks), with why. Its ``execution_count``
    continues from the source's."""

    forked_from: str = ""
    lost: List[LostItem] = field(default_factory=list)
    #: ``"live"`` (fork(2) of the kernel) or ``"checkpoint"`` (its processes checkpointed and
    #: restored: threads, child processes and servers come along).
    method: str = "live"
    #: Why a live fork that loses something was made instead of a checkpoint.
    checkpoint_error: Optional[str] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "ForkedContext":
        base = Context.from_wire(obj)
        return cls(
            **{f: getattr(base, f) for f in Context.__dataclass_fields__},
            forked_from=str(obj.get("forked_from", "")),
            lost=[
                LostItem(name=str(i.get("name", "")), reason=str(i.get("reason", "")))
                for i in obj.get("lost") or []
                if isinstance(i, Mapping)
            ],
            method=str(obj.get("method") or "live"),
            checkpoint_error=(
                str(obj["checkpoint_error"]) if obj.get("checkpoint_error") is not None else None
            ),
        )


@dataclass(frozen=True)
class ContextReport:
    """What happened to one context's state: ``restored`` (saved, in a hibernate answer) and
    ``lost``."""

    id: str
    language: str
    restored: List[StateItem] = field(default_factory=list)
    lost: List[LostItem] = field(default_factory=list)


@dataclass(frozen=True)
class HibernationReport:
    """How kernel state crossed a hibernation (``method`` is ``criu``: every process checkpointed
    and restored exactly, or ``per-language``: each kernel saved and reloaded its own state;
    ``method_reason`` says why), per context."""

    method: str
    method_reason: str
    contexts: List[ContextReport] = field(default_factory=list)

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "HibernationReport":
        return cls(
            method=str(obj.get("method", "")),
            method_reason=str(obj.get("method_reason", "")),
            contexts=_context_reports(obj.get("contexts")),
        )


def _context_reports(rows: Any) -> List[ContextReport]:
    return [
        ContextReport(
            id=str(c.get("id", "")),
            language=str(c.get("language", "")),
            restored=[
                StateItem(name=str(i.get("name", "")), kind=str(i.get("kind", "")))
                for i in c.get("restored") or []
            ],
            lost=[
                LostItem(name=str(i.get("name", "")), reason=str(i.get("reason", "")))
                for i in c.get("lost") or []
            ],
        )
        for c in rows or []
    ]


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the API reports it. ``state`` is ``running``, ``paused``, ``hibernated`` or
    ``killed``; times are
    milliseconds since the Unix epoch; ``timeout_at_ms`` is when the server kills it unless the
    timeout is extended (``set_timeout``)."""

    sandbox_id: str
    project: str
    template: str
    state: str
    created_at_ms: int
    timeout_at_ms: int
    metadata: Dict[str, str] = field(default_factory=dict)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    #: Volumes mounted in the sandbox.
    volumes: List["SandboxVolume"] = field(default_factory=list)
    #: Its network: the egress it was created with, or the rules last set with ``set_network``.
    network: "SandboxNetwork" = field(default_factory=lambda: SandboxNetwork())
    #: In the answer of ``hibernate()``: what each context saved and what it could not.
    hibernation: Optional[HibernationReport] = None
    #: In the answer of a resume from hibernation, and of a create from a snapshot or a fork: what
    #: each context got back and what was lost.
    restore: Optional[HibernationReport] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "SandboxInfo":
        meta = obj.get("metadata") or {}
        limits = obj.get("limits") or {}
        volumes = obj.get("volumes") or []
        return cls(
            sandbox_id=str(obj["sandbox_id"]),
            project=str(obj.get("project", "")),
            template=str(obj.get("template", "")),
            state=str(obj.get("state", "")),
            created_at_ms=int(obj.get("created_at_ms", 0)),
            timeout_at_ms=int(obj.get("timeout_at_ms", 0)),
            metadata={str(k): str(v) for k, v in dict(meta).items()},
            limits=SandboxLimits.from_wire(limits),
            volumes=[SandboxVolume.from_wire(v) for v in volumes],
            network=SandboxNetwork.from_wire(obj.get("network") or {}),
            hibernation=HibernationReport.from_wire(obj["hibernation"]) if obj.get("hibernation") else None,
            restore=HibernationReport.from_wire(obj["restore"]) if obj.get("restore") else None,
        )


@dataclass(frozen=True)
class SandboxNetwork:
    """A sandbox's network. ``egress`` is ``"none"`` (loopback only), ``"all"`` (any public address
    and name) or rules ``{"allow": [...], "deny": [...]}`` (each key only when given; a list given
    at create comes back as ``{"allow": list}``, and ``"none"`` set on a sandbox with egress as
    ``{"allow": []}``)."""

    egress: Union[str, Dict[str, List[str]]] = "none"
    #: Header injection rules ``[{"host": ..., "headers": {name: template}}]`` as given: the
    #: templates (``Bearer ${secret:NAME}``), never the secrets' values.
    inject: List[Dict[str, Any]] = field(default_factory=list)
    #: Whether its ports open by host name without its access token.
    public_ports: bool = False
    #: Whether a request resumes it when it is paused or hibernated.
    auto_resume: bool = False

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "SandboxNetwork":
        e = obj.get("egress", "none")
        inject = [
            {"host": str(r.get("host", "")), "headers": {str(k): str(v) for k, v in (r.get("headers") or {}).items()}}
            for r in obj.get("inject") or []
        ]
        egress: Union[str, Dict[str, List[str]]]
        if isinstance(e, Mapping):
            egress = {str(k): [str(x) for x in v] for k, v in e.items() if v is not None}
        else:
            egress = str(e) if e is not None else "none"
        return cls(
            egress=egress,
            inject=inject,
            public_ports=bool(obj.get("public_ports", False)),
            auto_resume=bool(obj.get("auto_resume", False)),
        )


@dataclass(frozen=True)
class SecretInfo:
    """A project's secret as the API reports it: its name and times, never its value.
    ``created`` is set by ``Secrets.set`` only: whether the secret is new (else replaced)."""

    project: str
    name: str
    created_at_ms: int
    updated_at_ms: int
    created: Optional[bool] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any], created: Optional[bool] = None) -> "SecretInfo":
        return cls(
            project=str(obj.get("project", "")),
            name=str(obj.get("name", "")),
            created_at_ms=int(obj.get("created_at_ms", 0)),
            updated_at_ms=int(obj.get("updated_at_ms", 0)),
            created=created,
        )


@dataclass(frozen=True)
class MirrorTraffic:
    """A sandbox's traffic through the package registries' mirror."""

    #: Every request, refused ones included.
    requests: int = 0
    #: Downloads served from the host's cache.
    cache_hits: int = 0
    #: Downloads fetched from a registry.
    cache_misses: int = 0
    #: Requests refused.
    refused: int = 0
    #: Body bytes fetched from registries for it.
    upstream_bytes: int = 0
    #: Body bytes sent to it.
    served_bytes: int = 0
    #: Connections closed at once (over its budget).
    rejected_connections: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "MirrorTraffic":
        return cls(**{k: int(obj.get(k, 0) or 0) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class EgressTraffic:
    """A sandbox's traffic through its egress relay (all zero without egress)."""

    #: Connections relayed (upstream reached).
    connections: int = 0
    #: Bytes from the sandbox to upstreams.
    bytes_out: int = 0
    #: Bytes from upstreams to the sandbox.
    bytes_in: int = 0
    #: Connections and DNS queries refused.
    refused: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "EgressTraffic":
        return cls(**{k: int(obj.get(k, 0) or 0) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RefusedRequest:
    """One refused request: by the mirror (``method`` is the HTTP method) or by egress (``method``
    ``"connect"`` for a TCP connection, ``"dns"`` for a DNS query, with the ``reason``)."""

    at_ms: int
    method: str
    #: ``host:port`` or the request target, as the sandbox sent it (at most 256 bytes).
    destination: str
    reason: Optional[str] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "RefusedRequest":
        r = obj.get("reason")
        return cls(
            at_ms=int(obj.get("at_ms", 0)),
            method=str(obj.get("method", "")),
            destination=str(obj.get("destination", "")),
            reason=str(r) if r is not None else None,
        )


@dataclass(frozen=True)
class NetworkLog:
    """What a sandbox did through the package registries' mirror and its egress since its
    processes last started (a create, resume, clone or server restart begins anew), and what was
    refused: the mirror's newest 64, then egress's newest 256, each oldest first."""

    sandbox_id: str
    mirror: MirrorTraffic = field(default_factory=MirrorTraffic)
    egress: EgressTraffic = field(default_factory=EgressTraffic)
    refused: List[RefusedRequest] = field(default_factory=list)

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "NetworkLog":
        return cls(
            sandbox_id=str(obj.get("sandbox_id", "")),
            mirror=MirrorTraffic.from_wire(obj.get("mirror") or {}),
            egress=EgressTraffic.from_wire(obj.get("egress") or {}),
            refused=[RefusedRequest.from_wire(r) for r in obj.get("refused") or []],
        )


@dataclass(frozen=True)
class SandboxVolume:
    """A volume mounted in a sandbox: where, and whether read-only."""

    volume_id: str
    name: str
    mount_path: str
    read_only: bool = False

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "SandboxVolume":
        return cls(
            volume_id=str(obj.get("volume_id", "")),
            name=str(obj.get("name", "")),
            mount_path=str(obj.get("mount_path", "")),
            read_only=bool(obj.get("read_only", False)),
        )


@dataclass(frozen=True)
class VolumeInfo:
    """A persistent volume as the API reports it. ``used_bytes`` is what its file system has in
    use; ``mounted_by`` the running or paused sandboxes that mount it."""

    volume_id: str
    project: str
    name: str
    size_limit_bytes: int
    used_bytes: int
    created_at_ms: int
    mounted_by: List[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "VolumeInfo":
        return cls(
            volume_id=str(obj["volume_id"]),
            project=str(obj.get("project", "")),
            name=str(obj.get("name", "")),
            size_limit_bytes=int(obj.get("size_limit_bytes", 0)),
            used_bytes=int(obj.get("used_bytes", 0)),
            created_at_ms=int(obj.get("created_at_ms", 0)),
            mounted_by=[str(x) for x in obj.get("mounted_by") or []],
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot of a sandbox as the API reports it: what ``CodeSandbox.create(snapshot=...)``
    starts clones from. ``method`` says how the kernels' memory state was captured
    (``criu``: every process checkpointed; ``per-language``: each kernel saved its own state) and
    ``contexts`` what each context saved
    (``restored``) and could not (``lost``); ``size_bytes`` is the host disk it holds; ``limits``
    are the source's, which every clone gets. ``sandbox_id`` is the source (it may be gone)."""

    snapshot_id: str
    sandbox_id: str
    project: str
    template: str
    created_at_ms: int
    size_bytes: int
    method: str
    method_reason: str
    contexts: List[ContextReport] = field(default_factory=list)
    metadata: Dict[str, str] = field(default_factory=dict)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    #: How long the source was frozen for it (memory dump and disk copy), in ms; ``None`` for
    #: snapshots of older servers.
    frozen_ms: Optional[int] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "SnapshotInfo":
        meta = obj.get("metadata") or {}
        return cls(
            snapshot_id=str(obj["snapshot_id"]),
            sandbox_id=str(obj.get("sandbox_id", "")),
            project=str(obj.get("project", "")),
            template=str(obj.get("template", "")),
            created_at_ms=int(obj.get("created_at_ms", 0)),
            size_bytes=int(obj.get("size_bytes", 0)),
            method=str(obj.get("method", "")),
            method_reason=str(obj.get("method_reason", "")),
            contexts=_context_reports(obj.get("contexts")),
            metadata={str(k): str(v) for k, v in dict(meta).items()},
            limits=SandboxLimits.from_wire(obj.get("limits") or {}),
            frozen_ms=None if obj.get("frozen_ms") is None else int(obj["frozen_ms"]),
        )


@dataclass(frozen=True)
class TemplateVersion:
    """One build of a template: its content ``key``, ``state`` (``building``, ``ready``,
    ``failed``), when it was made (milliseconds since the Unix epoch) and its layer's size."""

    key: str
    state: str
    created_at_ms: int = 0
    size_bytes: int = 0

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "TemplateVersion":
        return cls(
            key=str(obj.get("key", "")),
            state=str(obj.get("state", "")),
            created_at_ms=int(obj.get("created_at", 0)),
            size_bytes=int(obj.get("size_bytes", 0)),
        )


@dataclass(frozen=True)
class TemplateInfo:
    """A template as ``GET /v1/templates/{name}`` reports it. ``project`` is ``None`` for the
    built-ins (``builtin``); ``base`` is the template it is a layer over; ``state`` is ``building``,
    ``ready`` or ``failed`` (then ``error`` is the server's ``{"code", "message"}``); ``key`` the
    ready build's content key; ``size_bytes`` its own layer's size. ``build_log`` is the end of the
    last build's log (not filled in lists). ``packages`` is what the ready build installed,
    ``{"debian": {name: version}, "python": {...}, "node": {...}}`` (``get`` only; ``None`` in
    lists and for builds that did not record it). Times are milliseconds since the Unix epoch."""

    name: str
    project: Optional[str]
    builtin: bool
    public: bool
    state: str
    base: Optional[str] = None
    key: Optional[str] = None
    size_bytes: int = 0
    created_at_ms: int = 0
    updated_at_ms: int = 0
    error: Optional[Dict[str, str]] = None
    versions: List[TemplateVersion] = field(default_factory=list)
    build_log: str = ""
    packages: Optional[Dict[str, Dict[str, str]]] = None

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "TemplateInfo":
        err = obj.get("error")
        pk = obj.get("packages")
        return cls(
            name=str(obj.get("name", "")),
            project=obj.get("project"),
            builtin=bool(obj.get("builtin", False)),
            public=bool(obj.get("public", False)),
            state=str(obj.get("state", "")),
            base=obj.get("base"),
            key=obj.get("key"),
            size_bytes=int(obj.get("size_bytes", 0)),
            created_at_ms=int(obj.get("created_at", 0)),
            updated_at_ms=int(obj.get("updated_at", 0)),
            error=(
                {"code": str(err.get("code", "")), "message": str(err.get("message", ""))}
                if isinstance(err, Mapping) else None
            ),
            versions=[TemplateVersion.from_wire(v) for v in obj.get("versions") or [] if isinstance(v, Mapping)],
            build_log=str(obj.get("build_log", "")),
            packages=(
                {
                    section: {str(k): str(v) for k, v in sec.items()} if isinstance(sec, Mapping) else {}
                    for section, sec in ((s, pk.get(s)) for s in ("debian", "python", "node"))
                }
                if isinstance(pk, Mapping) else None
            ),
        )


class TemplateBuildStep(NamedTuple):
    """A build step starts (``Templates.build``'s ``on_step``): ``index`` from 1 to ``total``;
    ``name`` is the instruction (``RUN pip install x``) or one of the build's own steps
    (``start build sandbox``, ``import layer``)."""

    index: int
    total: int
    name: str


class TemplateBuildLog(NamedTuple):
    """Output of a build step (``Templates.build``'s ``on_log``): ``stream`` is ``stdout`` or
    ``stderr``; ``text`` a chunk, not a line."""

    stream: str
    text: str


class CommandResult(NamedTuple):
    """What ``exec`` and ``commands.run`` return; unpacks as
    ``stdout, stderr, exit_code = sandbox.exec(...)``. A process killed by a signal has
    ``exit_code`` 128 + the signal's number, as a shell would say."""

    stdout: str
    stderr: str
    exit_code: int


@dataclass(frozen=True)
class ProcessInfo:
    """A process started with ``commands.run`` (or a terminal), as ``commands.list`` reports it.

    ``end`` is absent while it runs (then ``{"exit_code": …}`` or ``{"signal": …}``, kept for 60 s
    after it finished)."""

    pid: int
    cmd: Optional[str] = None
    argv: List[str] = field(default_factory=list)
    cwd: str = ""
    envs: Dict[str, str] = field(default_factory=dict)
    tag: Optional[str] = None
    stdin: bool = False
    started_at_ms: int = 0
    end: Optional[Dict[str, Any]] = None

    @property
    def running(self) -> bool:
        return self.end is None

    @property
    def exit_code(self) -> Optional[int]:
        return None if self.end is None else self.end.get("exit_code")

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "ProcessInfo":
        end = obj.get("end")
        return cls(
            pid=int(obj["pid"]),
            cmd=obj.get("cmd"),
            argv=[str(a) for a in obj.get("argv") or []],
            cwd=str(obj.get("cwd", "")),
            envs={str(k): str(v) for k, v in dict(obj.get("env") or {}).items()},
            tag=obj.get("tag"),
            stdin=bool(obj.get("stdin", False)),
            started_at_ms=int(obj.get("started_at_ms", 0)),
            end=dict(end) if isinstance(end, Mapping) else None,
        )


@dataclass(frozen=True)
class EntryInfo:
    """A filesystem entry of the sandbox: ``type`` is ``file``, ``dir``, ``symlink`` or ``other``;
    ``mode`` the permission bits (e.g. ``0o644``), ``permissions`` their ``ls -l`` form,
    ``modified_ms`` milliseconds since the Unix epoch."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    permissions: str = ""
    owner: str = ""
    group: str = ""
    modified_ms: int = 0
    symlink_target: Optional[str] = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "EntryInfo":
        return cls(
            name=str(obj.get("name", "")),
            path=str(obj.get("path", "")),
            type=str(obj.get("type", "")),
            size=int(obj.get("size", 0)),
            mode=int(obj.get("mode", 0)),
            permissions=str(obj.get("permissions", "")),
            owner=str(obj.get("owner", "")),
            group=str(obj.get("group", "")),
            modified_ms=int(obj.get("modified_ms", 0)),
            symlink_target=obj.get("symlink_target"),
        )


@dataclass(frozen=True)
class FilesystemEvent:
    """One change seen by ``files.watch_dir``: ``type`` is ``create``, ``write``, ``remove``,
    ``rename`` (away from ``path``; the new name arrives as a ``create``) or ``chmod``; ``name`` is
    ``path`` relative to the watched directory."""

    type: str
    path: str
    name: str = ""
    is_dir: bool = False

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> "FilesystemEvent":
        return cls(
            type=str(obj.get("type", "")),
            path=str(obj.get("path", "")),
            name=str(obj.get("name", "")),
            is_dir=bool(obj.get("is_dir", False)),
        )
