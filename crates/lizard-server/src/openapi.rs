//! The OpenAPI document of Lizard's HTTP API (`GET /v1/openapi.json`, `lizard openapi`), generated:
//! every schema is derived from the wire types in `lizard-proto` (`schemars`, from their serde
//! attributes and doc comments), and every route is one entry of [`operations`] naming those
//! types. The committed `crates/lizard-server/openapi.json` is this output; a test fails when it
//! differs, and another when a route of the router has no entry here (or an entry no route).

use lizard_proto::*;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// The schema of a body, response or parameter: a wire type's, or written out (for the few shapes
/// that have no Rust type: strings, byte streams, lists of names).
pub enum Schema {
    Of(fn(&mut SchemaGenerator) -> schemars::Schema),
    Raw(&'static str),
}

fn of<T: JsonSchema>() -> Schema {
    Schema::Of(|g| g.subschema_for::<T>())
}

fn raw(json: &'static str) -> Schema {
    Schema::Raw(json)
}

/// Content types and their schemas (of a body or a response).
type Content = Vec<(&'static str, Schema)>;

/// A query type: its name and its schema.
pub type QueryType = (&'static str, fn(&mut SchemaGenerator) -> schemars::Schema);

/// One route and method of the API.
pub struct Operation {
    pub method: &'static str,
    pub path: &'static str,
    summary: &'static str,
    description: Option<&'static str>,
    /// Served without an API key (`security: []`).
    public: bool,
    /// Parameters other than the path's own `{name}`s (those are strings, added from the path).
    params: Vec<(&'static str, &'static str, bool, &'static str, Schema)>,
    /// The query parameters: the properties of this type (the one the handler's `ApiQuery<T>`
    /// takes, by name), each with its field's documentation.
    pub query: Option<QueryType>,
    body: Option<(bool, Content)>,
    /// `(status, description, content)`.
    responses: Vec<(&'static str, &'static str, Content)>,
}

fn op(method: &'static str, path: &'static str, summary: &'static str) -> Operation {
    Operation {
        method,
        path,
        summary,
        description: None,
        public: false,
        params: Vec::new(),
        query: None,
        body: None,
        responses: Vec::new(),
    }
}

fn get(path: &'static str, summary: &'static str) -> Operation {
    op("get", path, summary)
}
fn post(path: &'static str, summary: &'static str) -> Operation {
    op("post", path, summary)
}
fn put(path: &'static str, summary: &'static str) -> Operation {
    op("put", path, summary)
}
fn patch(path: &'static str, summary: &'static str) -> Operation {
    op("patch", path, summary)
}
fn delete(path: &'static str, summary: &'static str) -> Operation {
    op("delete", path, summary)
}

impl Operation {
    fn describe(mut self, text: &'static str) -> Self {
        self.description = Some(text);
        self
    }
    fn public(mut self) -> Self {
        self.public = true;
        self
    }
    fn param(
        mut self,
        location: &'static str,
        name: &'static str,
        required: bool,
        description: &'static str,
        schema: Schema,
    ) -> Self {
        self.params
            .push((location, name, required, description, schema));
        self
    }
    /// Query parameters from `T` (see [`Operation::query`]).
    fn query<T: JsonSchema>(mut self) -> Self {
        let name = std::any::type_name::<T>();
        self.query = Some((name.rsplit("::").next().unwrap_or(name), T::json_schema));
        self
    }
    fn body(mut self, required: bool, content: Content) -> Self {
        self.body = Some((required, content));
        self
    }
    fn response(
        mut self,
        status: &'static str,
        description: &'static str,
        content: Content,
    ) -> Self {
        self.responses.push((status, description, content));
        self
    }
}

/// Every route of the API (the server's own and those forwarded to the sandbox's agent), in the
/// document's order. Each answers errors as an `ErrorBody` (added to every operation as its
/// `default` response).
pub fn operations() -> Vec<Operation> {
    let mut ops = vec![
        get("/health", "Liveness")
            .public()
            .response("200", "OK", vec![]),
        get("/metrics", "Prometheus counters (admin key: all projects; project key: its own)")
            .response("200", "Prometheus text", vec![("text/plain", raw(r##"{"type":"string"}"##))]),
        get("/v1/openapi.json", "This document")
            .public()
            .response("200", "OpenAPI", vec![]),
        get("/v1/projects", "List projects")
            .response("200", "Names", vec![("application/json", of::<Vec<String>>())]),
        post("/v1/projects", "Create a project and its first API key (admin keys only)")
            .body(true, vec![("application/json", of::<CreateProjectRequest>())])
            .response("201", "Created", vec![("application/json", of::<ProjectCreated>())]),
        get("/v1/projects/{project}", "A project's settings (an admin key: any project; a project key: its own)")
            .response("200", "Settings", vec![("application/json", of::<ProjectSettings>())]),
        patch("/v1/projects/{project}", "Change a project's settings (admin keys only)")
            .body(true, vec![("application/json", of::<UpdateProjectRequest>())])
            .response("200", "The settings now", vec![("application/json", of::<ProjectSettings>())]),
        get("/v1/projects/{project}/usage", "Usage totals and per-sandbox rows")
            .query::<UsageQuery>()
            .response("200", "Usage", vec![("application/json", of::<ProjectUsage>())]),
        post("/v1/projects/{project}/secrets", "Set (create or replace) a secret of a project")
            .describe("Secrets are write-only: the answer, like every other, holds the name and times, never the value. Sandboxes use them through network.inject; the value never enters a sandbox. An admin key may set any project's, a project key its own (404 not_found for another project or one that does not exist). 400 invalid_request for a bad name or value; 409 conflict beyond 256 secrets in a project. Running sandboxes that use a replaced secret get the new value at their next PATCH /v1/sandboxes/{id}/network or start.")
            .body(true, vec![("application/json", of::<SetSecretRequest>())])
            .response("201", "Created", vec![("application/json", of::<SecretInfo>())])
            .response("200", "Replaced (its value; created_at_ms kept)", vec![("application/json", of::<SecretInfo>())]),
        get("/v1/projects/{project}/secrets", "A project's secrets: names and times, never values")
            .response("200", "Secrets", vec![("application/json", of::<Vec<SecretInfo>>())]),
        delete("/v1/projects/{project}/secrets/{name}", "Delete a secret")
            .describe("Running sandboxes that use it keep its value until their next start or rule change; there, rules still naming it fail (a PATCH is refused with 400; at a start — resume, server restart — the sandbox's egress cannot be set up): change those rules before deleting a secret they use. New sandboxes naming it are refused (400). 404 not_found if there is no such secret (or the project is not the key's).")
            .response("204", "Deleted", vec![]),
        get("/v1/sandboxes", "List sandboxes")
            .query::<SandboxListQuery>()
            .response("200", "Sandboxes", vec![("application/json", of::<Vec<SandboxInfo>>())]),
        post("/v1/sandboxes", "Create a sandbox")
            .body(true, vec![("application/json", of::<CreateSandboxRequest>())])
            .response("201", "Created", vec![("application/json", of::<SandboxInfo>())]),
        get("/v1/sandboxes/{id}", "Get a sandbox")
            .response("200", "Sandbox", vec![("application/json", of::<SandboxInfo>())]),
        delete("/v1/sandboxes/{id}", "Kill a sandbox")
            .response("204", "Killed", vec![]),
        patch("/v1/sandboxes/{id}/network", "Replace a sandbox's egress and header injection rules, live")
            .describe(r##"The sandbox's next connection and DNS query are decided by the new rules (connections already relayed continue). "none" is stored as {"allow": []}. 409 conflict if the sandbox was created without egress (create it with network.egress, even {"allow": []}, to change it later); 403 permission_denied if the rules open anything and the key is a project key of a project without allow_egress; 400 invalid_request naming a bad entry, an inject rule whose host egress does not allow, or a secret that does not exist. Each part given (egress, inject) replaces the sandbox's; an absent part stays as it is."##)
            .body(true, vec![("application/json", of::<UpdateNetworkRequest>())])
            .response("200", "Sandbox (its network field has the new rules)", vec![("application/json", of::<SandboxInfo>())]),
        get("/v1/sandboxes/{id}/network/log", "A sandbox's traffic through the package registries' mirror and its egress, and its refused requests")
            .response("200", "The log", vec![("application/json", of::<NetworkLog>())]),
        get("/v1/sandboxes/{id}/metrics", "A sandbox's resource use: the usage sampler's samples (CPU in percent of its limit, memory, disk), oldest first")
            .describe("Samples are taken every --sample-interval-s (default 5 s) and kept for the last hour. Without from and to, before the sampler has two samples, one sample taken now.")
            .query::<MetricsQuery>()
            .response("200", "Samples", vec![("application/json", of::<Vec<MetricSample>>())]),
        post("/v1/sandboxes/{id}/timeout", "Set the timeout from now")
            .body(true, vec![("application/json", of::<SetTimeoutRequest>())])
            .response("200", "Sandbox", vec![("application/json", of::<SandboxInfo>())]),
        get("/v1/sandboxes/{id}/contexts", "List contexts")
            .response("200", "Contexts", vec![("application/json", of::<Vec<Context>>())]),
        post("/v1/sandboxes/{id}/contexts", "Create a context")
            .body(false, vec![("application/json", of::<CreateContextRequest>())])
            .response("201", "Created", vec![("application/json", of::<Context>())]),
        get("/v1/sandboxes/{id}/contexts/{context_id}", "Get a context")
            .response("200", "Context", vec![("application/json", of::<Context>())]),
        delete("/v1/sandboxes/{id}/contexts/{context_id}", "Delete a context")
            .response("204", "Deleted", vec![]),
        post("/v1/sandboxes/{id}/contexts/{context_id}/restart", "Restart a context's kernel (state cleared)")
            .response("200", "Context", vec![("application/json", of::<Context>())]),
        post("/v1/sandboxes/{id}/contexts/{context_id}/interrupt", "Interrupt the running cell")
            .response("204", "Interrupted", vec![]),
        post("/v1/sandboxes/{id}/contexts/{context_id}/fork", "Fork an idle context: a new context whose kernel is a copy-on-write fork of the live kernel (Python, JavaScript, Bash); 409 conflict while a cell runs")
            .body(false, vec![("application/json", of::<ForkContextRequest>())])
            .response("201", "The new context", vec![("application/json", of::<ContextFork>())]),
        post("/v1/sandboxes/{id}/execute", "Run code. Accept: application/x-ndjson or text/event-stream streams EventFrames; otherwise the aggregated Execution")
            .body(true, vec![("application/json", of::<ExecuteRequest>())])
            .response("200", "Execution", vec![("application/json", of::<Execution>()), ("application/x-ndjson", of::<EventFrame>()), ("text/event-stream", of::<EventFrame>())]),
        post("/v1/sandboxes/{id}/pause", "Pause: freeze every process of the sandbox (state kept exactly); its timeout stops counting. Idempotent.")
            .response("200", "Paused", vec![("application/json", of::<SandboxInfo>())]),
        post("/v1/sandboxes/{id}/resume", "Resume a paused sandbox (its processes continue), or relaunch a hibernated one with its writable layer and restore its contexts (the answer's `restore` lists per context what was restored and what was lost, with the reason; the timeout starts again). Idempotent.")
            .response("200", "Running", vec![("application/json", of::<SandboxInfo>())]),
        post("/v1/sandboxes/{id}/hibernate", "Hibernate: every context saves its state to disk (per language: variables, functions, classes, imports, cwd...), then the sandbox's processes are stopped; it holds no memory, survives a server restart, and its writable layer is kept. From running or paused; idempotent (no `hibernation` in the answer when it was already hibernated). Code cannot run until it is resumed (409).")
            .response("200", "Hibernated; `hibernation` says what each context saved and what it could not", vec![("application/json", of::<SandboxInfo>())]),
        get("/v1/projects/{project}/executions", "Per-execution usage: wall ms, CPU ms and peak RSS of each run")
            .query::<ExecutionsQuery>()
            .response("200", "Runs", vec![("application/json", of::<Vec<ExecutionRow>>())]),
        get("/v1/audit", "The audit log: lifecycle calls (sandbox create/kill/pause/resume/hibernate/set-timeout, project create, volume create/delete, E2B create/kill/connect/pause/timeout) and authentication failures, newest first. An admin key sees every event, a project key its own project's.")
            .query::<AuditQuery>()
            .response("200", "Events, newest first", vec![("application/json", of::<Vec<AuditEvent>>())]),
        get("/v1/sandboxes/{id}/commands", "Running commands and terminals")
            .response("200", "Processes", vec![("application/json", of::<Vec<ProcessInfo>>())]),
        post("/v1/sandboxes/{id}/commands", "Run a command. Accept: application/x-ndjson or text/event-stream streams CommandEvents; otherwise the CommandResult when it ends; background: true answers 201 at once. A client disconnect does not stop the command.")
            .body(true, vec![("application/json", of::<StartCommandRequest>())])
            .response("200", "Events or result", vec![("application/json", of::<CommandResult>()), ("application/x-ndjson", of::<CommandEvent>()), ("text/event-stream", of::<CommandEvent>())])
            .response("201", "background: true — started; the process", vec![("application/json", of::<ProcessInfo>())]),
        get("/v1/sandboxes/{id}/commands/{pid}", "A process (finished ones, with end, for 60 s)")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .response("200", "Process", vec![("application/json", of::<ProcessInfo>())]),
        get("/v1/sandboxes/{id}/commands/{pid}/stream", "Reattach: buffered output (last 1 MiB per stream), then live output and end. Without a streaming Accept: wait and return the CommandResult.")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .query::<StreamQuery>()
            .response("200", "Events or result", vec![("application/json", of::<CommandResult>()), ("application/x-ndjson", of::<CommandEvent>()), ("text/event-stream", of::<CommandEvent>())]),
        post("/v1/sandboxes/{id}/commands/{pid}/stdin", "Write to stdin (commands started with stdin: true, or terminals); 409 otherwise or after exit")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .body(true, vec![("application/json", of::<ProcessInputRequest>())])
            .response("204", "Done", vec![]),
        post("/v1/sandboxes/{id}/commands/{pid}/stdin/close", "Close stdin (end of file)")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .response("204", "Done", vec![]),
        post("/v1/sandboxes/{id}/commands/{pid}/signal", "Signal the process group (404 once it has exited)")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .body(true, vec![("application/json", of::<SignalRequest>())])
            .response("204", "Done", vec![]),
        post("/v1/sandboxes/{id}/pty", "Start a process on a pseudo-terminal; streams like POST /commands (stdout events always carry data_b64)")
            .body(true, vec![("application/json", of::<StartPtyRequest>())])
            .response("200", "Events or result", vec![("application/json", of::<CommandResult>()), ("application/x-ndjson", of::<CommandEvent>()), ("text/event-stream", of::<CommandEvent>())])
            .response("201", "background: true — started; the process", vec![("application/json", of::<ProcessInfo>())]),
        post("/v1/sandboxes/{id}/pty/{pid}/input", "Send bytes to the terminal")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .body(true, vec![("application/json", of::<ProcessInputRequest>())])
            .response("204", "Done", vec![]),
        post("/v1/sandboxes/{id}/pty/{pid}/resize", "Resize the terminal (the program gets SIGWINCH)")
            .param("path", "pid", true, "", raw(r##"{"type":"integer"}"##))
            .body(true, vec![("application/json", of::<PtySize>())])
            .response("204", "Done", vec![]),
        get("/v1/sandboxes/{id}/pty/ws", "A terminal on a WebSocket (subprotocol lizard.pty.v1; a browser sends its key as a second subprotocol, lizard.key.<key>): binary messages are the terminal's bytes both ways, text messages JSON control (PtyWsServerMessage from the server: start, end, error; PtyWsClientMessage from the client: resize, input, signal). Closing the socket kills the process's group")
            .query::<PtyWsQuery>()
            .response("101", "Switching to the WebSocket protocol (its messages: PtyWsServerMessage, PtyWsClientMessage)", vec![]),
        get("/v1/sandboxes/{id}/files", "Read a file (streamed raw bytes)")
            .query::<PathQuery>()
            .response("200", "The bytes", vec![("application/octet-stream", raw(r##"{"type":"string","format":"binary"}"##))]),
        put("/v1/sandboxes/{id}/files", "Write a file from the raw request body (streamed, no size limit; parents created; atomic replace through a temporary file)")
            .query::<PathQuery>()
            .body(true, vec![("application/octet-stream", raw(r##"{"type":"string","format":"binary"}"##))])
            .response("200", "The written file", vec![("application/json", of::<EntryInfo>())]),
        delete("/v1/sandboxes/{id}/files", "Remove a file, symlink or directory (recursively)")
            .query::<PathQuery>()
            .response("204", "Done", vec![]),
        get("/v1/sandboxes/{id}/files/stat", "Stat a path (symlinks not followed); 404 when it does not exist")
            .query::<PathQuery>()
            .response("200", "Entry", vec![("application/json", of::<EntryInfo>())]),
        get("/v1/sandboxes/{id}/files/list", "List a directory, depth levels deep, sorted by path")
            .query::<ListQuery>()
            .response("200", "Entries", vec![("application/json", of::<Vec<EntryInfo>>())]),
        post("/v1/sandboxes/{id}/files/mkdir", "Create a directory and its parents; 409 conflict when it exists")
            .body(true, vec![("application/json", of::<MakeDirRequest>())])
            .response("201", "Created", vec![("application/json", of::<EntryInfo>())]),
        post("/v1/sandboxes/{id}/files/rename", "Move a path (parents of to are created)")
            .body(true, vec![("application/json", of::<RenameRequest>())])
            .response("200", "The moved entry", vec![("application/json", of::<EntryInfo>())]),
        get("/v1/sandboxes/{id}/files/watch", "Watch a path: NDJSON FsEvents until the client disconnects")
            .query::<WatchQuery>()
            .response("200", "Events", vec![("application/x-ndjson", of::<FsEvent>())]),
        get("/v1/volumes", "List volumes (an admin key without ?project= lists every project's)")
            .query::<VolumeQuery>()
            .response("200", "Volumes", vec![("application/json", of::<Vec<VolumeInfo>>())]),
        post("/v1/volumes", "Create a volume (a sparse ext4 image, mounted on the host)")
            .body(true, vec![("application/json", of::<CreateVolumeRequest>())])
            .response("201", "Created", vec![("application/json", of::<VolumeInfo>())]),
        get("/v1/volumes/{volume}", "Get a volume")
            .param("path", "volume", true, "Volume id (vol_...) or name.", raw(r##"{"type":"string"}"##))
            .query::<VolumeQuery>()
            .response("200", "Volume", vec![("application/json", of::<VolumeInfo>())]),
        delete("/v1/volumes/{volume}", "Delete a volume and its data. Refused with 409 volume_in_use while a running or paused sandbox mounts it, unless force=true, which kills those sandboxes first.")
            .param("path", "volume", true, "Volume id (vol_...) or name.", raw(r##"{"type":"string"}"##))
            .query::<VolumeQuery>()
            .response("204", "Deleted", vec![]),
        get("/v1/templates", "List templates: the project's own, public ones and the built-ins (an admin key without ?project= lists every project's)")
            .query::<TemplateQuery>()
            .response("200", "Templates", vec![("application/json", of::<TemplateList>())]),
        post("/v1/templates", "Build a user template from a Dockerfile inside a build sandbox of its base. With Accept application/x-ndjson or text/event-stream the build's events stream (200); otherwise 202 with the template (state building), or 200 on a cache hit.")
            .body(true, vec![("application/json", of::<BuildTemplateRequest>())])
            .response("200", "A cache hit, or the event stream", vec![("application/json", of::<TemplateInfo>()), ("application/x-ndjson", of::<TemplateBuildEvent>()), ("text/event-stream", of::<TemplateBuildEvent>())])
            .response("202", "The build runs", vec![("application/json", of::<TemplateInfo>())]),
        get("/v1/templates/{name}", "A template with its state, versions and build log")
            .query::<TemplateQuery>()
            .response("200", "The template", vec![("application/json", of::<TemplateInfo>())]),
        delete("/v1/templates/{name}", "Delete a user template (sandboxes running on it keep working). 403 for built-ins, 409 template_in_use while another template is built on it.")
            .query::<TemplateQuery>()
            .response("204", "Deleted", vec![]),
        post("/v1/sandboxes/{id}/snapshots", "Snapshot a running or paused sandbox: its kernels save their state (method `per-language` today; the answer's `method`/`method_reason` say which and why), then its disk image is copied while the sandbox is frozen briefly. The sandbox keeps running (or stays paused). 404 for a sandbox the key cannot see or that was killed; 409 for a hibernated one.")
            .body(false, vec![("application/json", of::<CreateSnapshotRequest>())])
            .response("201", "The snapshot; `contexts` says what each context saved and what it could not", vec![("application/json", of::<SnapshotInfo>())]),
        post("/v1/sandboxes/{id}/fork", "Fork: a new running sandbox with the source's kernels' state, files, template, limits, env, network and volumes (a snapshot that is not kept). Its own id, host ids, cgroup, network and writable layer.")
            .body(false, vec![("application/json", of::<ForkSandboxRequest>())])
            .response("201", "The new sandbox; `restore` says what each context got back and what was lost", vec![("application/json", of::<SandboxInfo>())]),
        get("/v1/snapshots", "Snapshots of the key's project (an admin key: every project's, or `project`'s), oldest first.")
            .query::<SnapshotQuery>()
            .response("200", "Snapshots", vec![("application/json", of::<Vec<SnapshotInfo>>())]),
        get("/v1/snapshots/{snapshot}", "One snapshot (404 for another project's).")
            .response("200", "The snapshot", vec![("application/json", of::<SnapshotInfo>())]),
        delete("/v1/snapshots/{snapshot}", "Delete a snapshot: its files go (clones made from it keep running); its usage stays. 404 for an unknown one or another project's.")
            .response("204", "Deleted", vec![]),
    ];
    // A sandbox's services: one proxy for every method, at `/ports/{port}`, `/ports/{port}/` and
    // below.
    for path in [
        "/v1/sandboxes/{id}/ports/{port}",
        "/v1/sandboxes/{id}/ports/{port}/",
        "/v1/sandboxes/{id}/ports/{port}/{rest}",
    ] {
        for method in ["get", "post", "put", "patch", "delete"] {
            ops.push(
                op(method, path, "Proxy to a service listening on `port` inside the sandbox (any \
                    method; HTTP and WebSocket upgrades). The bearer key stays at the server; other \
                    headers and bodies stream through.")
                .param("path", "port", true, "", raw(r#"{"type":"integer","minimum":1,"maximum":65535}"#))
                .response("default", "The service's response, or an ErrorBody (503 when nothing \
                    answers on the port)", vec![]),
            );
        }
    }
    ops
}

const DESCRIPTION: &str = "Self-hosted code-interpreter sandboxes. Authenticate with \
    `Authorization: Bearer <LIZARD_API_KEY>`. Every error is an ErrorBody. Requests are \
    rate-limited per API key (per client address without a valid key): over the limit the answer \
    is 429 `rate_limited` with a `Retry-After` header (seconds). Request heads over the server's \
    limit (64 KiB or 100 headers by default) get 431. Agent routes under /v1/sandboxes/{id}/ are \
    forwarded into the sandbox and stream.";

fn schema_value(g: &mut SchemaGenerator, s: &Schema) -> Value {
    match s {
        Schema::Of(f) => f(g).to_value(),
        Schema::Raw(text) => serde_json::from_str(text).expect("a written-out schema is JSON"),
    }
}

fn content(g: &mut SchemaGenerator, c: &[(&str, Schema)]) -> Value {
    let mut m = Map::new();
    for (ct, s) in c {
        m.insert(ct.to_string(), json!({ "schema": schema_value(g, s) }));
    }
    Value::Object(m)
}

/// The query parameters of a query type's (inline) schema: one per property, required as the
/// schema says, described by the field's documentation, its type without the `null` an `Option`
/// adds (an absent parameter is the `None`).
fn query_params(schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, prop)| {
            let mut prop = prop.clone();
            let description = prop.as_object_mut().and_then(|o| o.remove("description"));
            // `#[serde(default)]` on an `Option`: absent is `None`, not a `null` to send.
            if prop["default"].is_null() {
                if let Some(o) = prop.as_object_mut() {
                    o.remove("default");
                }
            }
            if let Some(types) = prop["type"].as_array() {
                let types: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                prop["type"] = match types.as_slice() {
                    [one] => one.clone(),
                    _ => Value::Array(types),
                };
            }
            let mut p = json!({
                "name": name,
                "in": "query",
                "required": required.contains(&name.as_str()),
                "schema": prop,
            });
            if let Some(d) = description {
                p["description"] = d;
            }
            p
        })
        .collect()
}

/// The whole document.
pub fn document() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    let mut g = settings.into_generator();
    let mut paths = Map::new();
    for o in operations() {
        let mut params = Vec::new();
        for name in o
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        {
            if !o.params.iter().any(|p| p.0 == "path" && p.1 == name) {
                params.push(json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}));
            }
        }
        if let Some((_, schema)) = o.query {
            params.extend(query_params(&schema(&mut g).to_value()));
        }
        for (location, name, required, description, schema) in &o.params {
            let mut p = json!({"name": name, "in": location, "required": required, "schema": schema_value(&mut g, schema)});
            if !description.is_empty() {
                p["description"] = json!(description);
            }
            params.push(p);
        }
        let mut v = json!({ "summary": o.summary });
        if let Some(d) = o.description {
            v["description"] = json!(d);
        }
        if o.public {
            v["security"] = json!([]);
        }
        if !params.is_empty() {
            v["parameters"] = Value::Array(params);
        }
        if let Some((required, c)) = &o.body {
            v["requestBody"] = json!({"required": required, "content": content(&mut g, c)});
        }
        let mut responses = Map::new();
        for (status, description, c) in &o.responses {
            let mut r = json!({ "description": description });
            if !c.is_empty() {
                r["content"] = content(&mut g, c);
            }
            responses.insert(status.to_string(), r);
        }
        if !responses.contains_key("default") {
            let error = schema_value(&mut g, &of::<ErrorBody>());
            responses.insert(
                "default".into(),
                json!({"description": "Error", "content": {"application/json": {"schema": error}}}),
            );
        }
        v["responses"] = Value::Object(responses);
        let entry = paths.entry(o.path.to_string()).or_insert_with(|| json!({}));
        entry[o.method] = v;
    }
    // Messages of WebSockets (no operation's body): named in components for generated clients.
    for message in [of::<PtyWsServerMessage>(), of::<PtyWsClientMessage>()] {
        schema_value(&mut g, &message);
    }
    let schemas: Map<String, Value> = g.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Lizard API", "version": env!("CARGO_PKG_VERSION"), "description": DESCRIPTION},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
    })
}

/// [`document`] as the committed file holds it: pretty JSON and a final newline.
pub fn document_text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("the document serializes");
    s.push('\n');
    s
}
