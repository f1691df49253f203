"""The SDK's models against the wire types (issue #20): ``crates/lizard-server/openapi.json``.

That document is generated from the Rust wire types and committed, so it is the contract. For every
wire model of ``lizard.models`` (the table ``WIRE_MODELS``: model → schema) the checker

* builds a sample of the schema (every property present, nested objects too) whose objects record
  which keys are read, and parses it with the model's parser (``from_wire``, or the helper that
  parses it inside another model), so the keys compared are the ones the code really reads;
* asserts those keys equal the schema's ``properties`` (and the keys a writer such as
  ``ContextLimits.to_wire`` sends), except the differences listed, each with its reason;
* asserts every dataclass field of the model stands for a schema property (same name, or an alias
  in the table) or is listed as SDK-only, and that a property the schema requires is neither
  ``Optional`` nor defaulted in the model, unless listed with its reason.

Every class of ``lizard.models`` must be in ``WIRE_MODELS`` or in ``NOT_WIRE_TYPES`` (with why).
Beyond the models: ``ExecutionFold`` is checked against the ``EventFrame`` variants it folds, and the
request bodies ``lizard._core`` builds against their request schemas (``REQUEST_BODIES``).
The checker is a function of the document: the last tests mutate copies of it (written to a temp
dir and read back) and assert each mutation is reported, naming model, schema and field.

No server needed.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

from lizard import _core, models

OPENAPI = Path(__file__).resolve().parents[3] / "crates" / "lizard-server" / "openapi.json"

Reader = Callable[[Any], Any]


@dataclass(frozen=True)
class WireModel:
    model: type
    schema: str
    #: Parses one sample object of ``schema`` into ``model`` (``None``: the SDK never parses this
    #: schema; its field names are compared instead, through ``aliases``).
    reader: Optional[Reader]
    #: Builds the JSON object the SDK sends for this schema, if it sends one.
    writer: Optional[Callable[[], Mapping]] = None
    #: Schema property → model field, where the names differ.
    aliases: Dict[str, str] = field(default_factory=dict)
    #: Schema properties the model deliberately does not read → why.
    not_read: Dict[str, str] = field(default_factory=dict)
    #: Model fields with no schema property → why.
    sdk_only: Dict[str, str] = field(default_factory=dict)
    #: Schema-required properties whose model field has a default anyway → why.
    defaulted_required: Dict[str, str] = field(default_factory=dict)


def _first(rows: List[Any]) -> Any:
    assert len(rows) == 1, rows
    return rows[0]


# Reasons used by several entries.
_TOLERANT = (
    "tolerant parsing: a zero/empty default so older servers (and hand-built values in tests) work; "
    "positional order of the public constructor kept"
)
_MS = "the SDK names times in ms with an _ms suffix"

WIRE_MODELS: List[WireModel] = [
    WireModel(
        models.Result, "ExecutionResult", models.Result.from_wire,
        # Result is a plain class (MIME bundle with properties per format), not a dataclass: only
        # the keys it reads are compared.
        aliases={"data": "raw"},
    ),
    WireModel(
        models.ExecutionError, "ExecutionError", models.ExecutionError.from_wire,
        defaulted_required={"traceback": _TOLERANT},
    ),
    WireModel(
        models.ExecutionUsage, "ExecutionUsage", models.ExecutionUsage.from_wire,
        defaulted_required={"cpu_ms": _TOLERANT, "peak_rss_bytes": _TOLERANT},
    ),
    WireModel(
        # The SDK never parses the wire `Execution` (what a non-streaming POST /execute returns):
        # it folds the event stream (checked against `EventFrame` below). Its fields mirror the
        # schema's by name; `stdout`/`stderr` are the chunks joined into one string.
        models.Execution, "Execution", None,
        sdk_only={"output": "stdout and stderr joined in arrival order (Cloudflare's `output`)"},
        defaulted_required={
            f: "built by ExecutionFold from the event stream; an empty Execution() is valid"
            for f in ("execution_count", "stdout", "stderr", "results", "duration_ms")
        },
    ),
    WireModel(
        models.Context, "Context", models.Context.from_wire,
        defaulted_required={
            f: _TOLERANT for f in ("cwd", "is_default", "state", "execution_count", "kernel_restarts")
        },
    ),
    WireModel(
        models.ContextLimits, "ContextLimits", models.ContextLimits.from_wire,
        writer=lambda: models.ContextLimits(memory_mb=256, cpu_millicores=500).to_wire(),
    ),
    WireModel(
        models.ForkedContext, "ContextFork", models.ForkedContext.from_wire,
        defaulted_required={
            **{f: _TOLERANT for f in ("cwd", "is_default", "state", "execution_count", "kernel_restarts")},
            "forked_from": "a dataclass subclass of Context: its fields follow Context's defaulted ones",
        },
    ),
    WireModel(
        models.StateItem, "StateItem",
        lambda o: _first(_first(models._context_reports([{"id": "c", "language": "python", "restored": [o]}])).restored),
    ),
    WireModel(
        models.LostItem, "LostItem",
        lambda o: _first(_first(models._context_reports([{"id": "c", "language": "python", "lost": [o]}])).lost),
    ),
    WireModel(
        models.ContextReport, "ContextReport", lambda o: _first(models._context_reports([o])),
        defaulted_required={"restored": _TOLERANT, "lost": _TOLERANT},
    ),
    WireModel(
        models.HibernationReport, "HibernationReport", models.HibernationReport.from_wire,
        defaulted_required={"contexts": _TOLERANT},
    ),
    WireModel(
        models.SandboxLimits, "SandboxLimits", models.SandboxLimits.from_wire,
        defaulted_required={f: _TOLERANT for f in ("memory_mb", "cpu_millicores", "pids", "tmp_mb")},
    ),
    WireModel(
        models.SandboxInfo, "SandboxInfo", models.SandboxInfo.from_wire,
        not_read={"on_timeout": "the SDK takes on_timeout at create but does not expose it on SandboxInfo (yet)"},
        defaulted_required={"metadata": _TOLERANT, "limits": _TOLERANT},
    ),
    WireModel(models.SandboxNetwork, "NetworkRequest", models.SandboxNetwork.from_wire),
    WireModel(models.SandboxVolume, "SandboxVolume", models.SandboxVolume.from_wire,
              defaulted_required={"read_only": _TOLERANT}),
    WireModel(
        models.SecretInfo, "SecretInfo", models.SecretInfo.from_wire,
        sdk_only={"created": "from the HTTP status of Secrets.set (201), not from the body"},
    ),
    WireModel(
        models.MirrorTraffic, "MirrorTraffic", models.MirrorTraffic.from_wire,
        defaulted_required={
            f: "all-zero MirrorTraffic() is NetworkLog's default" for f in (
                "requests", "cache_hits", "cache_misses", "refused", "upstream_bytes", "served_bytes",
                "rejected_connections",
            )
        },
    ),
    WireModel(
        models.EgressTraffic, "EgressTraffic", models.EgressTraffic.from_wire,
        defaulted_required={
            f: "all-zero EgressTraffic() is NetworkLog's default" for f in ("connections", "bytes_out", "bytes_in", "refused")
        },
    ),
    WireModel(models.RefusedRequest, "RefusedRequest", models.RefusedRequest.from_wire),
    WireModel(
        models.NetworkLog, "NetworkLog", models.NetworkLog.from_wire,
        defaulted_required={"mirror": _TOLERANT, "refused": _TOLERANT},
    ),
    WireModel(models.VolumeInfo, "VolumeInfo", models.VolumeInfo.from_wire),
    WireModel(
        models.SnapshotInfo, "SnapshotInfo", models.SnapshotInfo.from_wire,
        defaulted_required={"contexts": _TOLERANT, "limits": _TOLERANT},
    ),
    WireModel(
        models.TemplateVersion, "TemplateVersion", models.TemplateVersion.from_wire,
        aliases={"created_at": "created_at_ms"},
        defaulted_required={"created_at": _TOLERANT, "size_bytes": _TOLERANT},
    ),
    WireModel(
        models.TemplateInfo, "TemplateInfo", models.TemplateInfo.from_wire,
        aliases={"created_at": "created_at_ms", "updated_at": "updated_at_ms"},
        defaulted_required={"size_bytes": _TOLERANT, "created_at": _TOLERANT, "updated_at": _TOLERANT},
    ),
    WireModel(
        models.ProcessInfo, "ProcessInfo", models.ProcessInfo.from_wire,
        aliases={"env": "envs"},  # the E2B name (`envs=` in commands.run)
        not_read={"pty": "terminals are handled by sandbox.pty; commands.list reports no size"},
        defaulted_required={f: _TOLERANT for f in ("argv", "cwd", "stdin", "started_at_ms")},
    ),
    WireModel(
        models.EntryInfo, "EntryInfo", models.EntryInfo.from_wire,
        defaulted_required={
            f: _TOLERANT for f in ("size", "mode", "permissions", "owner", "group", "modified_ms")
        },
    ),
    WireModel(
        models.FilesystemEvent, "FsEvent", models.FilesystemEvent.from_wire,
        defaulted_required={"name": _TOLERANT, "is_dir": _TOLERANT},
    ),
]

#: Classes of lizard.models that are not a wire type, with why.
NOT_WIRE_TYPES: Dict[str, str] = {
    "CommandResult": "the SDK's (stdout, stderr, exit_code) tuple that exec/commands.run return; "
                     "not the wire CommandResult (which has pid, duration_ms, base64 variants, ...)",
    "TemplateBuildStep": "a callback payload made from a `step` frame of the build stream",
    "TemplateBuildLog": "a callback payload made from a `log` frame of the build stream",
}

#: Properties of an `EventFrame` variant that ExecutionFold deliberately does not read.
EVENT_FRAME_NOT_READ: Dict[str, str] = {
    "seq": "the frame's position, for resuming a stream; the fold takes frames in order",
}


# ---- the checker ------------------------------------------------------------------------------


class _Recorder(Mapping):
    """A JSON object that records every key looked up (``obj[k]``, ``obj.get(k)``, ``k in obj``)."""

    def __init__(self, data: Dict[str, Any], reads: Set[str]) -> None:
        self._data = data
        self._reads = reads

    def __getitem__(self, key: str) -> Any:
        self._reads.add(key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._reads.add(key)
        return key in self._data

    def __iter__(self):  # type: ignore[override]
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class _Sampler:
    """Makes a value of a schema with every property present; objects of named schemas are
    ``_Recorder``s writing into ``reads[name]``."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.schemas = doc["components"]["schemas"]
        self.reads: Dict[str, Set[str]] = {}

    def _ref(self, ref: str) -> str:
        prefix = "#/components/schemas/"
        assert ref.startswith(prefix), ref
        return ref[len(prefix):]

    def properties(self, schema: Mapping[str, Any]) -> Dict[str, Any]:
        """The properties of an object schema, following a ``$ref`` it extends."""
        props: Dict[str, Any] = {}
        if "$ref" in schema:
            props.update(self.properties(self.schemas[self._ref(schema["$ref"])]))
        props.update(schema.get("properties") or {})
        return props

    def value(self, schema: Mapping[str, Any], name: Optional[str] = None, depth: int = 0) -> Any:
        assert depth < 20, f"schema too deep at {name}"
        if schema is True or schema == {}:  # any JSON value
            return {"any": "value"}
        if "$ref" in schema and "properties" not in schema:
            ref = self._ref(schema["$ref"])
            return self.value(self.schemas[ref], ref, depth + 1)
        for key in ("anyOf", "oneOf"):
            if key in schema and "properties" not in schema:
                options = [o for o in schema[key] if o.get("type") != "null"]
                return self.value(options[0], name if len(options) == 1 else None, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        t = schema.get("type")
        if isinstance(t, list):
            t = next(x for x in t if x != "null")
        if "properties" in schema or "$ref" in schema:
            data = {k: self.value(v, None, depth + 1) for k, v in self.properties(schema).items()}
            if name is None:
                return data
            return _Recorder(data, self.reads.setdefault(name, set()))
        if t == "object":
            extra = schema.get("additionalProperties")
            return {"k": self.value(extra, None, depth + 1)} if isinstance(extra, Mapping) else {}
        if t == "array":
            return [self.value(schema.get("items", {"type": "string"}), None, depth + 1)]
        if t == "string":
            return "s"
        if t == "integer":
            return 7
        if t == "number":
            return 1.5
        if t == "boolean":
            return True
        raise AssertionError(f"no sample for schema {schema!r} ({name})")


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)


def _has_default(f: "dataclasses.Field[Any]") -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING  # type: ignore[misc]


def check_model(doc: Mapping[str, Any], wm: WireModel) -> List[str]:
    """Differences between one model and its schema in ``doc``, as messages (empty: they agree)."""
    name, sname = wm.model.__name__, wm.schema
    where = f"{name} (schema {sname})"
    schemas = doc["components"]["schemas"]
    if sname not in schemas:
        return [f"{where}: no schema {sname!r} in the document"]
    schema = schemas[sname]
    sampler = _Sampler(doc)
    props = set(sampler.properties(schema))
    required = set(schema.get("required") or [])
    problems: List[str] = []

    for p, why in {**wm.not_read, **wm.defaulted_required}.items():
        if p not in props:
            problems.append(f"{where}: stale exception: property {p!r} is not in the schema ({why})")

    # Keys the parser reads.
    if wm.reader is not None:
        sample = sampler.value({"$ref": f"#/components/schemas/{sname}"})
        try:
            parsed = wm.reader(sample)
        except Exception as e:  # a key the model needs is gone from the schema
            problems.append(f"{where}: parsing a sample of the schema raised {e!r}")
        else:
            if not isinstance(parsed, wm.model):
                problems.append(f"{where}: the reader returned {type(parsed).__name__}, not {name}")
        read = sampler.reads.get(sname, set())
        for p in sorted(read - props):
            problems.append(f"{where}: the model reads key {p!r}, which is not a property of the schema")
        for p in sorted(props - read - set(wm.not_read)):
            problems.append(f"{where}: schema property {p!r} is not read by the model")
        for p in sorted(set(wm.not_read) & read):
            problems.append(f"{where}: property {p!r} is listed as not read, but the model reads it")

    # Keys a writer sends.
    if wm.writer is not None:
        for p in sorted(set(wm.writer()) - props):
            problems.append(f"{where}: the model writes key {p!r}, which is not a property of the schema")

    # Fields.
    if dataclasses.is_dataclass(wm.model):
        fields = {f.name: f for f in dataclasses.fields(wm.model)}
        hints = typing.get_type_hints(wm.model, vars(models))
        field_of = {p: wm.aliases.get(p, p) for p in props}
        known = set(field_of.values())
        for f in sorted(set(fields) - known - set(wm.sdk_only)):
            problems.append(f"{where}: field {f!r} has no schema property (and is not listed as SDK-only)")
        for f in sorted(set(wm.sdk_only) & known):
            problems.append(f"{where}: field {f!r} is listed as SDK-only but the schema has it")
        if wm.reader is None:
            for p in sorted(props - set(wm.not_read)):
                if field_of[p] not in fields:
                    problems.append(f"{where}: schema property {p!r} has no field {field_of[p]!r} in the model")
        for p in sorted(required):
            f = fields.get(field_of.get(p, p))
            if f is None:
                if p not in wm.not_read:
                    problems.append(f"{where}: required property {p!r} has no field in the model")
                continue
            if _is_optional(hints[f.name]):
                problems.append(f"{where}: required property {p!r} is Optional in the model (field {f.name!r})")
            if _has_default(f) and p not in wm.defaulted_required:
                problems.append(f"{where}: required property {p!r} has a default in the model (field {f.name!r})")
        for p in sorted(set(wm.defaulted_required) - required):
            if p in props:
                problems.append(f"{where}: stale exception: property {p!r} is listed as defaulted-required but is optional")
    return problems


def check_event_frames(doc: Mapping[str, Any]) -> List[str]:
    """The keys ``ExecutionFold`` reads from each ``EventFrame`` variant equal its properties."""
    problems: List[str] = []
    schema = doc["components"]["schemas"]["EventFrame"]
    sampler = _Sampler(doc)
    common = set(schema.get("properties") or {})
    kinds = set()
    for variant in schema["oneOf"]:
        props = sampler.properties(variant)
        kind = props["type"]["const"]
        kinds.add(kind)
        reads: Set[str] = set()
        data = {k: sampler.value(v) for k, v in props.items()}
        data.update({k: sampler.value(v) for k, v in (schema.get("properties") or {}).items()})
        fold = _core.ExecutionFold()
        fold.feed(_Recorder(data, reads))
        where = f"ExecutionFold (schema EventFrame, type {kind!r})"
        all_props = set(props) | common
        for p in sorted(reads - all_props):
            problems.append(f"{where}: the fold reads key {p!r}, which is not a property of the variant")
        for p in sorted(all_props - reads - set(EVENT_FRAME_NOT_READ)):
            problems.append(f"{where}: property {p!r} is not read by the fold")
    for kind in ("start", "stdout", "stderr", "result", "error", "end"):
        if kind not in kinds:
            problems.append(f"ExecutionFold (schema EventFrame): the fold handles type {kind!r}, which is not a variant")
    return problems


_INJECT = [{"host": "pypi.org", "headers": {"Authorization": "Bearer ${secret:k}"}}]

#: Request bodies the SDK sends (built by ``lizard._core`` with every option given) → schema. The
#: keys sent, nested objects included, must be properties of the schema (a property the server
#: renamed or dropped fails), and the schema's required ones must be sent. Optional properties the
#: SDK does not send are not listed: a request may leave them out.
REQUEST_BODIES: List[Tuple[str, Callable[[], List[Mapping[str, Any]]]]] = [
    ("ExecuteRequest", lambda: [
        _core.execute_request("sb", "1 + 1", language=None, context="ctx", envs={"A": "1"}, timeout_ms=1000).json,
        _core.execute_request("sb", "1 + 1", language="python", context=None, envs=None, timeout_ms=None).json,
    ]),
    ("CreateSandboxRequest", lambda: [
        _core.create_request(
            project="p", template="t", timeout_ms=1000, metadata={"k": "v"}, envs={"A": "1"},
            limits={"memory_mb": 256}, volumes=[{"name": "v", "mount_path": "/mnt/v", "read_only": True}],
            egress={"allow": ["pypi.org"], "deny": ["evil.example"]}, inject=_INJECT,
        ).json,
        _core.create_request(
            project=None, template=None, timeout_ms=None, metadata=None, envs=None, limits=None, egress="all",
        ).json,
        _core.clone_request("snap_x", project="p", timeout_ms=1000, metadata={"k": "v"}, refused={}).json,
    ]),
    ("UpdateNetworkRequest", lambda: [_core.set_network_request("sb", {"allow": ["pypi.org"]}, _INJECT).json]),
    ("CreateContextRequest", lambda: [
        _core.create_context_request("sb", "python", "/tmp", models.ContextLimits(memory_mb=256, cpu_millicores=500)).json,
    ]),
    ("ForkContextRequest", lambda: [
        _core.fork_context_request("sb", "ctx", models.ContextLimits(memory_mb=256, cpu_millicores=500)).json,
    ]),
    ("StartCommandRequest", lambda: [
        _core.start_command_request("sb", "echo hi", cwd="/tmp", envs={"A": "1"}, timeout_ms=1000,
                                    background=True, stdin=True).json,
    ]),
    ("ProcessInputRequest", lambda: [
        _core.stdin_request("sb", 3, "text").json, _core.stdin_request("sb", 3, b"bytes").json,
        _core.pty_input_request("sb", 3, "text").json, _core.pty_input_request("sb", 3, b"bytes").json,
    ]),
    ("SignalRequest", lambda: [_core.signal_request("sb", 3).json]),
    ("StartPtyRequest", lambda: [
        _core.start_pty_request("sb", cols=80, rows=24, cmd="top", cwd="/tmp", envs={"A": "1"}, timeout_ms=1000).json,
    ]),
    ("PtySize", lambda: [_core.pty_resize_request("sb", 3, 100, 30).json]),
    ("CreateSnapshotRequest", lambda: [_core.snapshot_create_request("sb", {"k": "v"}).json]),
    ("ForkSandboxRequest", lambda: [_core.fork_request("sb", 1000, {"k": "v"}).json]),
    ("CreateVolumeRequest", lambda: [_core.volume_create_request("v", 1 << 20, "p").json]),
    ("SetSecretRequest", lambda: [_core.secret_set_request("p", "name", "value").json]),
    ("BuildTemplateRequest", lambda: [
        _core.template_build_request("t", dockerfile="FROM x", context=None, build_args={"A": "1"}, project="p",
                                     public=True, cancel_on_disconnect=True, from_sandbox=None).json,
        _core.template_build_request("t", dockerfile=None, context=None, build_args=None, project=None,
                                     public=False, cancel_on_disconnect=False, from_sandbox="sb").json,
    ]),
]


def _check_body(sampler: _Sampler, schema: Any, body: Any, where: str, path: str) -> List[str]:
    if not isinstance(schema, Mapping):
        return []
    if "$ref" in schema and "properties" not in schema:
        return _check_body(sampler, sampler.schemas[sampler._ref(schema["$ref"])], body, where, path)
    for key in ("anyOf", "oneOf"):
        if key in schema and "properties" not in schema:
            if not isinstance(body, Mapping):
                return []  # a scalar alternative ("all"); no keys to compare
            objects = [o for o in schema[key] if o.get("type") == "object" or "$ref" in o or "properties" in o]
            return _check_body(sampler, objects[0], body, where, path) if objects else [
                f"{where}: {path or 'the body'} is an object, the schema allows none there"]
    problems: List[str] = []
    if isinstance(body, Mapping) and ("properties" in schema or "$ref" in schema):
        props = sampler.properties(schema)
        for k in sorted(set(body) - set(props)):
            problems.append(f"{where}: the SDK sends key {path + k!r}, which is not a property of the schema")
        for k in sorted(set(schema.get("required") or []) - set(body)):
            problems.append(f"{where}: required property {path + k!r} is not sent by the SDK")
        for k, v in body.items():
            if k in props:
                problems.extend(_check_body(sampler, props[k], v, where, f"{path}{k}."))
    elif isinstance(body, list) and schema.get("type") == "array":
        for item in body:
            problems.extend(_check_body(sampler, schema.get("items"), item, where, path + "[]."))
    return problems


def check_requests(doc: Mapping[str, Any]) -> List[str]:
    problems: List[str] = []
    sampler = _Sampler(doc)
    for sname, build in REQUEST_BODIES:
        where = f"request body (schema {sname})"
        if sname not in sampler.schemas:
            problems.append(f"{where}: no schema {sname!r} in the document")
            continue
        for body in build():
            problems.extend(_check_body(sampler, sampler.schemas[sname], body, where, ""))
    return problems


def check_document(doc: Mapping[str, Any]) -> List[str]:
    problems: List[str] = []
    for wm in WIRE_MODELS:
        problems.extend(check_model(doc, wm))
    problems.extend(check_event_frames(doc))
    problems.extend(check_requests(doc))
    return problems


# ---- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doc() -> Dict[str, Any]:
    with OPENAPI.open(encoding="utf-8") as f:
        return json.load(f)


def test_every_class_of_models_is_classified() -> None:
    classes = {
        n for n, obj in vars(models).items()
        if inspect.isclass(obj) and obj.__module__ == models.__name__ and not n.startswith("_")
    }
    in_table = {wm.model.__name__ for wm in WIRE_MODELS}
    assert not (in_table & set(NOT_WIRE_TYPES)), in_table & set(NOT_WIRE_TYPES)
    unclassified = classes - in_table - set(NOT_WIRE_TYPES)
    assert not unclassified, f"classes of lizard.models neither in WIRE_MODELS nor in NOT_WIRE_TYPES: {sorted(unclassified)}"
    gone = (in_table | set(NOT_WIRE_TYPES)) - classes
    assert not gone, f"listed but not in lizard.models: {sorted(gone)}"
    # Every dataclass is among them (the point of the table).
    assert {n for n in classes if dataclasses.is_dataclass(vars(models)[n])} <= in_table


@pytest.mark.parametrize("wm", WIRE_MODELS, ids=lambda wm: f"{wm.model.__name__}-{wm.schema}")
def test_model_matches_schema(doc: Dict[str, Any], wm: WireModel) -> None:
    problems = check_model(doc, wm)
    assert not problems, "\n".join(problems)


def test_execution_fold_matches_event_frames(doc: Dict[str, Any]) -> None:
    problems = check_event_frames(doc)
    assert not problems, "\n".join(problems)


def test_request_bodies_match_schemas(doc: Dict[str, Any]) -> None:
    problems = check_requests(doc)
    assert not problems, "\n".join(problems)


def test_recorder_sees_reads() -> None:
    # The checker's own premise: a parser's lookups are recorded, including missing keys.
    reads: Set[str] = set()
    obj = _Recorder({"a": 1}, reads)
    assert obj.get("a") == 1 and obj.get("b") is None and ("c" in obj) is False
    with pytest.raises(KeyError):
        obj["d"]
    assert reads == {"a", "b", "c", "d"}


def _check_mutated(tmp_path: Path, doc: Dict[str, Any], mutate: Callable[[Dict[str, Any]], None]) -> List[str]:
    """The checker's answer for a mutated copy of the document, written to and read back from a
    temp dir (as the real document is read)."""
    mutated = copy.deepcopy(doc)
    mutate(mutated)
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(mutated), encoding="utf-8")
    with path.open(encoding="utf-8") as f:
        return check_document(json.load(f))


def _schema(doc: Dict[str, Any], name: str) -> Dict[str, Any]:
    return doc["components"]["schemas"][name]


def test_unmutated_document_is_clean(doc: Dict[str, Any]) -> None:
    assert check_document(copy.deepcopy(doc)) == []


def test_added_property_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        _schema(d, "SandboxVolume")["properties"]["quota_bytes"] = {"type": "integer"}

    problems = _check_mutated(tmp_path, doc, mutate)
    assert problems == ["SandboxVolume (schema SandboxVolume): schema property 'quota_bytes' is not read by the model"]


def test_added_required_property_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        s = _schema(d, "VolumeInfo")
        s["properties"]["region"] = {"type": "string"}
        s["required"].append("region")

    problems = _check_mutated(tmp_path, doc, mutate)
    assert "VolumeInfo (schema VolumeInfo): schema property 'region' is not read by the model" in problems
    assert "VolumeInfo (schema VolumeInfo): required property 'region' has no field in the model" in problems
    assert len(problems) == 2, problems


def test_removed_property_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        s = _schema(d, "EntryInfo")
        del s["properties"]["owner"]
        s["required"].remove("owner")

    problems = _check_mutated(tmp_path, doc, mutate)
    assert "EntryInfo (schema EntryInfo): the model reads key 'owner', which is not a property of the schema" in problems
    assert "EntryInfo (schema EntryInfo): field 'owner' has no schema property (and is not listed as SDK-only)" in problems
    assert "EntryInfo (schema EntryInfo): stale exception: property 'owner' is not in the schema (" + _TOLERANT + ")" in problems
    assert len(problems) == 3, problems


def test_renamed_property_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        s = _schema(d, "SandboxInfo")
        s["properties"]["id"] = s["properties"].pop("sandbox_id")
        s["required"] = ["id" if r == "sandbox_id" else r for r in s["required"]]

    problems = _check_mutated(tmp_path, doc, mutate)
    where = "SandboxInfo (schema SandboxInfo)"
    # obj["sandbox_id"] is a KeyError now.
    assert f"{where}: parsing a sample of the schema raised KeyError('sandbox_id')" in problems
    assert f"{where}: the model reads key 'sandbox_id', which is not a property of the schema" in problems
    assert f"{where}: schema property 'id' is not read by the model" in problems
    assert f"{where}: field 'sandbox_id' has no schema property (and is not listed as SDK-only)" in problems
    assert f"{where}: required property 'id' has no field in the model" in problems


def test_property_made_required_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        _schema(d, "RefusedRequest")["required"].append("reason")

    problems = _check_mutated(tmp_path, doc, mutate)
    where = "RefusedRequest (schema RefusedRequest)"
    assert problems == [
        f"{where}: required property 'reason' is Optional in the model (field 'reason')",
        f"{where}: required property 'reason' has a default in the model (field 'reason')",
    ]


def test_renamed_property_of_unparsed_model_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    # Execution is compared by field names (the SDK folds the stream instead of parsing it).
    def mutate(d: Dict[str, Any]) -> None:
        s = _schema(d, "Execution")
        s["properties"]["count"] = s["properties"].pop("execution_count")
        s["required"] = ["count" if r == "execution_count" else r for r in s["required"]]

    problems = _check_mutated(tmp_path, doc, mutate)
    where = "Execution (schema Execution)"
    assert f"{where}: field 'execution_count' has no schema property (and is not listed as SDK-only)" in problems
    assert f"{where}: schema property 'count' has no field 'count' in the model" in problems


def test_event_frame_change_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    def mutate(d: Dict[str, Any]) -> None:
        for v in _schema(d, "EventFrame")["oneOf"]:
            if v.get("properties", {}).get("type", {}).get("const") == "stdout":
                v["properties"]["chunk"] = v["properties"].pop("text")

    problems = _check_mutated(tmp_path, doc, mutate)
    where = "ExecutionFold (schema EventFrame, type 'stdout')"
    assert problems == [
        f"{where}: the fold reads key 'text', which is not a property of the variant",
        f"{where}: property 'chunk' is not read by the fold",
    ]


def test_nested_model_change_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    # LostItem is parsed inside ContextReport and ForkedContext, not by a from_wire of its own.
    def mutate(d: Dict[str, Any]) -> None:
        _schema(d, "LostItem")["properties"]["detail"] = {"type": "string"}

    problems = _check_mutated(tmp_path, doc, mutate)
    assert problems == ["LostItem (schema LostItem): schema property 'detail' is not read by the model"]


def test_request_property_change_is_reported(tmp_path: Path, doc: Dict[str, Any]) -> None:
    # A request property renamed by the server (nested: a volume mount's `mount_path`), and a new
    # required one.
    def mutate(d: Dict[str, Any]) -> None:
        s = _schema(d, "VolumeMountRequest")
        s["properties"]["path"] = s["properties"].pop("mount_path")
        c = _schema(d, "StartCommandRequest")
        c["properties"]["shell"] = {"type": "string"}
        c["required"] = ["shell"]

    problems = _check_mutated(tmp_path, doc, mutate)
    assert problems == [
        "request body (schema CreateSandboxRequest): the SDK sends key 'volumes.[].mount_path', "
        "which is not a property of the schema",
        "request body (schema StartCommandRequest): required property 'shell' is not sent by the SDK",
    ]
