//! User templates: built from a Dockerfile inside a build sandbox, listed, inspected and deleted
//! through `/v1/templates`.
//!
//! # Wire format
//!
//! `POST /v1/templates` takes a [`BuildTemplateRequest`]. With `Accept: application/x-ndjson`
//! (one JSON object per line) or `text/event-stream` (one `data:` line per event, the `type` as
//! the SSE `event:` name) it answers 200 with a stream of [`TemplateBuildEvent`]s that ends with
//! exactly one `done` or `error` (unless the client leaves first; the build goes on unless it asked
//! for `cancel_on_disconnect`). With any other `Accept` it answers 202 with the
//! [`TemplateInfo`] (`state: "building"`; a cache hit: 200 and `ready`) and the build goes on.
//! Input errors (a bad Dockerfile, an unknown base, a name taken) are a 4xx before any stream.
//!
//! `GET /v1/templates` → [`TemplateList`]; `GET /v1/templates/{name}` → [`TemplateInfo`];
//! `DELETE /v1/templates/{name}` → 204. Clients must ignore fields and event types they do not know.
//!
//! In a [`TemplateInfo`], `versions` are the template's *builds*; `packages` (only in
//! `GET /v1/templates/{name}`) is what its ready build installed: `{debian: {name: version},
//! python: {name: version}, node: {path: version}}`. A built-in's comes from its host-side build;
//! a user template's was listed inside its build sandbox after the last step (`dpkg-query`,
//! `pip list`, npm's lock) and only describes the template to its owner: an empty section means
//! the listing failed or the template has no such package manager.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// At most this many bytes of decoded build context.
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024 * 1024;

/// `POST /v1/templates`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildTemplateRequest {
    /// The template's name: 1-64 of `[A-Za-z0-9._-]`, not starting with `.`; unique in its project;
    /// the built-in templates' names are reserved.
    pub name: String,
    /// The Dockerfile (the subset in `templates/README.md`). Exactly one of `dockerfile` and
    /// `from_sandbox`.
    pub dockerfile: Option<String>,
    /// The build context: standard base64 of a tar or tar.gz archive (at most
    /// [`MAX_CONTEXT_BYTES`] decoded), the files `COPY` and `ADD` take.
    pub context: Option<String>,
    /// Values of the Dockerfile's `ARG`s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub build_args: BTreeMap<String, String>,
    /// The project (admin keys; a project key's own project otherwise).
    pub project: Option<String>,
    /// Every project may use it (admin keys only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
    /// Cancel the build when a streaming client goes away (default: it goes on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_on_disconnect: bool,
    /// A template from a running or paused sandbox of the project instead of a Dockerfile: its
    /// files (its writable layer, copied with its processes frozen; nothing of its memory) become
    /// a layer over its template. Answered 201 with the ready template (no stream).
    pub from_sandbox: Option<String>,
}

/// A template's build state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TemplateState {
    Building,
    Ready,
    Failed,
}

/// One build of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateVersion {
    /// The build's content key (hash of the base's key, the Dockerfile, the build args and the
    /// context).
    pub key: String,
    pub state: TemplateState,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub size_bytes: u64,
}

/// `GET /v1/templates/{name}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateInfo {
    pub name: String,
    /// The owning project; `None` for built-ins.
    pub project: Option<String>,
    /// A built-in template (`code-interpreter-v1`): it cannot be deleted.
    pub builtin: bool,
    /// Every project may use it.
    pub public: bool,
    pub state: TemplateState,
    /// The template it is a layer over (`None` for built-ins).
    pub base: Option<String>,
    /// The ready build's key (the building one's while there is none).
    pub key: Option<String>,
    /// Bytes of its own layer (a built-in: of its whole root file system).
    pub size_bytes: u64,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub updated_at: u64,
    /// Why the last build failed.
    pub error: Option<crate::ErrorBody>,
    /// Its builds, oldest first.
    #[serde(default)]
    pub versions: Vec<TemplateVersion>,
    /// The last build's log (its end, at most 64 KiB; not in lists).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub build_log: String,
    /// What the ready build installed (not in lists; absent for builds that did not record it).
    pub packages: Option<TemplatePackages>,
}

/// The exact package versions a template build installed, by package manager.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplatePackages {
    /// Debian packages (`dpkg-query`): name → version.
    #[serde(default)]
    pub debian: BTreeMap<String, String>,
    /// Python distributions of the template's venv (`pip list`): normalized name → version.
    #[serde(default)]
    pub python: BTreeMap<String, String>,
    /// npm packages (npm's lock): install path under `node_modules` → version.
    #[serde(default)]
    pub node: BTreeMap<String, String>,
}

/// `GET /v1/templates`: the project's own templates, the public ones and the built-ins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TemplateList {
    pub templates: Vec<TemplateInfo>,
}

/// Which stream a build log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// One event of a streamed build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TemplateBuildEvent {
    /// A step starts: `index` from 1 to `total`; `name` is the instruction (e.g. `RUN pip install x`)
    /// or one of the build's own steps (`start build sandbox`, `import layer`).
    Step {
        index: usize,
        total: usize,
        name: String,
    },
    /// Output of a step (a chunk, not a line).
    Log { stream: LogStream, text: String },
    /// The build finished: the template is ready.
    Done { template: Box<TemplateInfo> },
    /// The build failed (`code` `invalid_dockerfile` for a Dockerfile error found late, e.g. a
    /// COPY source missing from the context; `build_failed` for a failed step).
    Error { error: crate::ErrorBody },
}

/// `?project=` of `GET /v1/templates`, `GET|DELETE /v1/templates/{name}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateQuery {
    /// The project (admin keys; default: the key's own).
    pub project: Option<String>,
}
