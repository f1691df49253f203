//! The audit log's wire type: one [`AuditEvent`] per lifecycle call or authentication failure, as
//! `GET /v1/audit` returns them. Only the shape lives here; what is recorded, where and when is the
//! server's business (`lizard-server`'s `audit` module).

use serde::{Deserialize, Serialize};

/// One audited call.
// `Default` is for a new event: the log gives it its `id` and `at_ms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditEvent {
    /// Increasing with time (a cursor for paging).
    pub id: u64,
    /// When the call finished, milliseconds since the epoch.
    pub at_ms: u64,
    /// Who: `admin`, `project` or `anonymous` (no valid credentials).
    pub actor: String,
    /// The acting key's project (`None` for admin keys and anonymous callers).
    pub project: Option<String>,
    /// The first characters of the acting key (`lz_1a2b3`), never the key; for E2B sandbox
    /// traffic `sandbox-token`.
    pub key_prefix: Option<String>,
    /// What: `sandbox.create`, `sandbox.kill`, `sandbox.pause`, `sandbox.resume`,
    /// `sandbox.hibernate`, `sandbox.set_timeout`, `project.create`, `volume.create`,
    /// `volume.delete`, `e2b.create`, `e2b.kill`, `e2b.connect`, `e2b.pause`, `e2b.set_timeout`,
    /// `auth.failed`.
    pub action: String,
    /// Which object (sandbox id, project name, volume id or name; the request path for
    /// `auth.failed`).
    pub object: Option<String>,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The client's address (`ip:port` of the TCP peer).
    pub client: String,
}

/// `GET /v1/audit?from=&to=&limit=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Milliseconds since the epoch (inclusive); default 0.
    #[serde(default)]
    pub from: Option<u64>,
    /// Milliseconds since the epoch (exclusive); default now.
    #[serde(default)]
    pub to: Option<u64>,
    /// At most this many events (default 1000, at most 10000), newest first.
    #[serde(default)]
    pub limit: Option<usize>,
}
