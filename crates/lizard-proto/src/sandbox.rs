//! The server's control-plane types: sandboxes, projects and usage.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// The project that owns the sandbox; a project key's own project when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// `code-interpreter-v1` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Idle lifetime; the sandbox is killed when it passes (300000 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Free-form labels, filterable in `GET /v1/sandboxes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Environment variables of every process in the sandbox.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Resource limits; server defaults for what is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsRequest>,
    /// What happens when the timeout passes: `kill` (default) or `pause`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<TimeoutAction>,
    /// Volumes of the project to mount (fixed for the sandbox's life).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::VolumeMountRequest>,
    /// Network access; loopback only when absent. Egress needs a project with `allow_egress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkRequest>,
    /// Start from this snapshot of the project (a clone): its template, limits, environment,
    /// network, volumes, files and kernels' state; only `timeout_ms`, `metadata` and `on_timeout`
    /// may be given with it. The answer's `restore` says what each context got back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

/// The network of a sandbox: `{"egress": "none" | "all" | {"allow": ["host", "ip", "ip:port",
/// "cidr", ...]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRequest {
    #[serde(default)]
    pub egress: Egress,
}

/// Outbound (internet) access of a sandbox. Inside, a sandbox always has its own loopback; it
/// never reaches the host's loopback or the link-local metadata range (169.254.0.0/16).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Egress {
    /// Loopback only (the default).
    #[default]
    None,
    /// Any IPv4 destination (except the host's loopback and 169.254.0.0/16), DNS through the
    /// sandbox's resolver.
    All,
    /// Only these destinations: `1.2.3.4`, `1.2.3.4:443`, `10.1.2.0/24`, `example.com` or
    /// `example.com:443` (host names are resolved once, when the sandbox is created). At most 64.
    Allow(Vec<String>),
}

impl Egress {
    pub fn is_none(&self) -> bool {
        matches!(self, Egress::None)
    }
}

/// What the server does with a sandbox whose timeout passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    /// Kill it (its writable layer is deleted).
    #[default]
    Kill,
    /// Pause it: its processes are frozen with their state, until resumed or killed.
    Pause,
}

/// Optional overrides of [`SandboxLimits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millicores: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
}

/// Resource limits of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLimits {
    /// Memory of all processes (including `/tmp`, a tmpfs), in MiB.
    pub memory_mb: u64,
    /// CPU time per wall second, in thousandths of a core (1000 = one core).
    pub cpu_millicores: u64,
    /// Processes and threads.
    pub pids: u64,
    /// Size of the `/tmp` tmpfs, in MiB.
    pub tmp_mb: u64,
    /// Size of the writable layer (everything written outside `/tmp` and `/dev/shm`), in MiB.
    /// Sparse: only what is written uses host disk.
    #[serde(default = "default_disk_mb")]
    pub disk_mb: u64,
}

/// 1 GiB: sparse, but every sandbox's disk is a promise the host's free space must back
/// (`lizard serve --disk-overcommit`), so the default is what a code interpreter's scratch
/// needs, not the most it could.
fn default_disk_mb() -> u64 {
    1024
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_mb: 1024,
            cpu_millicores: 1000,
            pids: 512,
            tmp_mb: 256,
            disk_mb: default_disk_mb(),
        }
    }
}

/// A sandbox's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Running,
    Paused,
    /// Saved to disk: no processes, no memory; resume relaunches it and restores its contexts.
    Hibernated,
    Killed,
}

/// A sandbox as the API reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub sandbox_id: String,
    pub project: String,
    pub template: String,
    pub state: SandboxState,
    pub created_at_ms: u64,
    /// When the server kills the sandbox unless its timeout is extended.
    pub timeout_at_ms: u64,
    pub metadata: BTreeMap<String, String>,
    pub limits: SandboxLimits,
    pub on_timeout: TimeoutAction,
    /// Mounted volumes.
    #[serde(default)]
    pub volumes: Vec<crate::SandboxVolume>,
    /// In the answer of `POST /hibernate`: what each context saved and what it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<crate::HibernationReport>,
    /// In the answer of a resume from hibernation: what each context got back and what was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<crate::HibernationReport>,
    /// The network the sandbox was created with.
    #[serde(default)]
    pub network: NetworkRequest,
}

/// `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetTimeoutRequest {
    /// New lifetime from now.
    pub timeout_ms: u64,
}

/// `POST /v1/projects` (admin keys only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectRequest {
    pub name: String,
    /// Whether the project's sandboxes may be created with internet egress (default false).
    #[serde(default)]
    pub allow_egress: bool,
}

/// A new project and its first key (shown once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectCreated {
    pub project: String,
    pub api_key: String,
}

/// Usage totals (a project's, or one sandbox's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub sandboxes: u64,
    pub running_seconds: f64,
    pub paused_seconds: f64,
    /// Time spent hibernated (on disk, no processes), metered apart from paused time.
    #[serde(default)]
    pub hibernated_seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub executions: u64,
    pub execution_wall_seconds: f64,
    pub execution_cpu_seconds: f64,
    /// Volume storage (host disk use of the project's volumes, sampled), GiB-hours; a project's
    /// total since its volumes were created, not limited to the report's time range.
    #[serde(default)]
    pub volume_gib_hours: f64,
    /// Snapshot storage (each snapshot's size × its lifetime), GiB-hours; like volumes, a
    /// project's total since its snapshots were taken.
    #[serde(default)]
    pub snapshot_gib_hours: f64,
}

/// One sandbox's usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxUsage {
    pub sandbox_id: String,
    pub running_seconds: f64,
    pub paused_seconds: f64,
    /// Time spent hibernated (on disk, no processes), metered apart from paused time.
    #[serde(default)]
    pub hibernated_seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub executions: u64,
    pub execution_wall_seconds: f64,
    pub execution_cpu_seconds: f64,
    pub max_execution_peak_rss_bytes: u64,
}

/// `GET /v1/projects/{project}/usage?from=&to=` (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectUsage {
    pub project: String,
    pub from_ms: u64,
    pub to_ms: u64,
    pub totals: UsageTotals,
    pub sandboxes: Vec<SandboxUsage>,
    /// Every volume the project has had (deleted ones included).
    #[serde(default)]
    pub volumes: Vec<crate::VolumeUsage>,
    /// Every snapshot the project has had (deleted ones included).
    #[serde(default)]
    pub snapshots: Vec<crate::SnapshotUsage>,
}

/// One finished run as the server stores it, for `GET /v1/projects/{project}/executions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRow {
    pub sandbox_id: String,
    /// Position in the sandbox's execution log.
    pub seq: u64,
    pub context_id: String,
    pub language: String,
    /// `ok`, `error`, `interrupted`, `timeout` or `kernel_died`.
    pub status: String,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// Peak resident memory of the kernel during the run.
    pub peak_rss_bytes: u64,
    pub finished_at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_shapes() {
        let n: NetworkRequest = serde_json::from_str(r#"{"egress":"all"}"#).unwrap();
        assert_eq!(n.egress, Egress::All);
        let n: NetworkRequest = serde_json::from_str(r#"{"egress":"none"}"#).unwrap();
        assert!(n.egress.is_none());
        let n: NetworkRequest =
            serde_json::from_str(r#"{"egress":{"allow":["example.com","10.0.0.0/8"]}}"#).unwrap();
        assert_eq!(
            n.egress,
            Egress::Allow(vec!["example.com".into(), "10.0.0.0/8".into()])
        );
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"egress":{"allow":["example.com","10.0.0.0/8"]}}"#
        );
        assert!(serde_json::from_str::<NetworkRequest>(r#"{"egress":"some"}"#).is_err());
        assert!(serde_json::from_str::<NetworkRequest>(r#"{"egres":"all"}"#).is_err());
        let n: NetworkRequest = serde_json::from_str("{}").unwrap();
        assert!(n.egress.is_none());
    }
}
