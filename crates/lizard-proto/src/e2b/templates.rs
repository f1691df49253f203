//! E2B's template build API (`e2b` ≥ 2.3 `Template.build`, `Template.exists`), as its SDKs call
//! it: request a build (`POST /v3/templates` → template and build id), ask for an upload link per
//! COPY source (`GET /templates/{templateID}/files/{hash}`, then a `PUT` of a tar(.gz) to that
//! link), start it with the steps (`POST /v2/templates/{templateID}/builds/{buildID}`), poll its
//! status with log entries from an offset (`GET /templates/{templateID}/builds/{buildID}/status`),
//! and look an alias up (`GET /templates/aliases/{alias}`). Field names are E2B's (camelCase,
//! `ID` upper-case); unknown fields are ignored, as E2B's API does.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v3/templates`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateBuildRequestV3 {
    /// The template's name (its alias), optionally `name:tag`.
    #[serde(default)]
    pub name: Option<String>,
    /// Older SDKs send `alias`.
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default, rename = "cpuCount")]
    pub cpu_count: Option<u32>,
    #[serde(default, rename = "memoryMB")]
    pub memory_mb: Option<u64>,
}

/// The answer to `POST /v3/templates` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRequestResponseV3 {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub public: bool,
    pub names: Vec<String>,
    pub tags: Vec<String>,
    pub aliases: Vec<String>,
}

/// `GET /templates/{templateID}/files/{hash}`: whether the files are there, else where to `PUT`
/// them.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateBuildFileUpload {
    pub present: bool,
    pub url: Option<String>,
    /// Headers the upload must carry (none here: the link is the credential).
    pub headers: Option<BTreeMap<String, String>>,
}

/// One build step as the SDKs send it: `RUN [cmd, user?]`, `COPY [src, dest, user, mode]`,
/// `ENV [k, v, k, v…]`, `WORKDIR [dir]`, `USER [user]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateStep {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, rename = "filesHash")]
    pub files_hash: Option<String>,
    #[serde(default)]
    pub force: Option<bool>,
}

/// `POST /v2/templates/{templateID}/builds/{buildID}`: exactly one of `fromImage` and
/// `fromTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateBuildStartV2 {
    #[serde(default, rename = "fromImage")]
    pub from_image: Option<String>,
    #[serde(default, rename = "fromTemplate")]
    pub from_template: Option<String>,
    #[serde(default, rename = "fromImageRegistry")]
    pub from_image_registry: Option<serde_json::Value>,
    #[serde(default)]
    pub force: Option<bool>,
    #[serde(default)]
    pub steps: Vec<TemplateStep>,
    #[serde(default, rename = "startCmd")]
    pub start_cmd: Option<String>,
    #[serde(default, rename = "readyCmd")]
    pub ready_cmd: Option<String>,
}

/// A build's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TemplateBuildStatus {
    Building,
    Waiting,
    Ready,
    Error,
}

/// One log entry of a build.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildLogEntry {
    /// RFC 3339.
    pub timestamp: String,
    pub message: String,
    /// `debug` | `info` | `warn` | `error`.
    pub level: String,
    pub step: Option<String>,
}

/// Why a build failed.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildStatusReason {
    pub message: String,
    pub step: Option<String>,
    #[serde(default, rename = "logEntries")]
    pub log_entries: Vec<BuildLogEntry>,
}

/// `GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N`: the entries from `N` on
/// (at most [`MAX_STATUS_ENTRIES`]).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateBuildInfo {
    pub logs: Vec<String>,
    #[serde(rename = "logEntries")]
    pub log_entries: Vec<BuildLogEntry>,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub status: TemplateBuildStatus,
    pub reason: Option<BuildStatusReason>,
}

/// At most this many log entries per status answer (the SDKs poll until one is empty).
pub const MAX_STATUS_ENTRIES: usize = 100;

/// `GET /templates/aliases/{alias}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateAliasResponse {
    #[serde(rename = "templateID")]
    pub template_id: String,
    pub public: bool,
}
