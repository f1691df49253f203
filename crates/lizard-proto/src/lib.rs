//! Wire types shared by every hop of Lizard: the agent, the server, the Rust client and (through the
//! OpenAPI document) the TypeScript and Python SDKs.
//!
//! This crate is serde types and the few pure functions that belong to them (parsing a language name,
//! folding a stream of execution events into an [`Execution`]). It does no I/O and knows nothing about
//! HTTP frameworks, kernels, processes or projects.
//!
//! **Architecture Invariant:** the execution event ([`ExecutionEvent`]) is defined here once. NDJSON,
//! SSE and the E2B-compatible stream are serializations of this enum, never copies of it.

pub mod audit;
pub mod command;
pub mod e2b;
pub mod error;
pub mod execution;
pub mod files;
pub mod fork;
pub mod hibernate;
pub mod ids;
pub mod language;
pub mod sandbox;
pub mod snapshot;
pub mod template;
pub mod volume;

pub use audit::{AuditEvent, AuditQuery};
pub use command::{
    CommandEnd, CommandEvent, CommandResult, ProcessInfo, ProcessInputRequest, PtySize,
    PtyWsClientMessage, PtyWsQuery, PtyWsServerMessage, ResizePtyRequest, SignalRequest,
    StartCommandRequest, StartPtyRequest, StreamQuery, PTY_WS_PROTOCOL, WS_KEY_PROTOCOL_PREFIX,
};
pub use error::{ErrorBody, ErrorCode, ToErrorBody};
pub use execution::{
    EventFrame, ExecuteRequest, Execution, ExecutionError, ExecutionEvent, ExecutionLog,
    ExecutionRecord, ExecutionResult, ExecutionStatus, ExecutionUsage, MimeBundle, CHART_MIME,
    TABLE_MIME,
};
pub use files::{
    EntryInfo, FileType, FsEvent, FsEventType, ListQuery, MakeDirRequest, PathQuery, RenameRequest,
    WatchQuery,
};
pub use fork::{
    AdoptFork, CheckpointPlan, ContextFork, ForkChannel, ForkContextRequest, ForkMethod,
    PreparedFork,
};
pub use hibernate::{
    ContextReport, HibernateDirRequest, HibernationMethod, HibernationReport, LostItem, StateItem,
};
pub use ids::ContextId;
pub use language::{Language, UnknownLanguage};
pub use sandbox::{
    CreateProjectRequest, CreateSandboxRequest, Egress, EgressRules, EgressTraffic, ExecutionRow,
    ExecutionsQuery, InjectRequest, LimitsRequest, MetricSample, MetricsQuery, MirrorTraffic,
    NetworkLog, NetworkRequest, ProjectCreated, ProjectSettings, ProjectUsage, RefusedRequest,
    SandboxInfo, SandboxLimits, SandboxListQuery, SandboxState, SandboxUsage, SecretInfo,
    SetSecretRequest, SetTimeoutRequest, TimeoutAction, UpdateNetworkRequest, UpdateProjectRequest,
    UsageQuery, UsageTotals,
};
pub use snapshot::{
    CreateSnapshotRequest, ForkSandboxRequest, SnapshotInfo, SnapshotQuery, SnapshotUsage,
};
pub use template::{
    BuildTemplateRequest, LogStream, TemplateBuildEvent, TemplateInfo, TemplateList,
    TemplatePackages, TemplateQuery, TemplateState, TemplateVersion,
};
pub use volume::{
    check_mount_path, mount_paths_overlap, valid_volume_name, CreateVolumeRequest, SandboxVolume,
    VolumeInfo, VolumeMountRequest, VolumeQuery, VolumeUsage,
};

use serde::{Deserialize, Serialize};

/// Media type of a streamed execution as JSON Lines: one [`EventFrame`] per line.
pub const NDJSON: &str = "application/x-ndjson";
/// Media type of a streamed execution as Server-Sent Events: one [`EventFrame`] per `data:` line.
pub const SSE: &str = "text/event-stream";

/// `POST /contexts`: create a context (one kernel process).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContextRequest {
    /// Kernel language; Python when absent.
    #[serde(default)]
    pub language: Option<Language>,
    /// Working directory of the kernel; the agent's default (`/home/user` in a sandbox) when absent.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Limits of this context's own cgroup (its kernel and the kernel's children), at most the
    /// sandbox's own. Absent: only the sandbox's limits apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ContextLimits>,
}

/// Per-context resource limits (`CreateContextRequest::limits`, `Context::limits`). A context over
/// its memory limit has its kernel killed (the run ends with `KernelDied`, the context gets a fresh
/// kernel under the same limits); a CPU limit caps the kernel's CPU time per 100 ms period.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ContextLimits {
    /// Memory of the kernel and its children, in MiB (at least [`ContextLimits::MIN_MEMORY_MB`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU in thousandths of a CPU (1000 = one CPU; at least [`ContextLimits::MIN_CPU_MILLICORES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millicores: Option<u64>,
}

impl ContextLimits {
    /// Below this a kernel cannot even start.
    pub const MIN_MEMORY_MB: u64 = 16;
    /// The smallest CFS quota (1 ms per 100 ms period).
    pub const MIN_CPU_MILLICORES: u64 = 10;

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_mb.is_none() && self.cpu_millicores.is_none()
    }

    /// Check the limits against the minimums and against `ceiling` (the sandbox's own limits;
    /// `None` fields are unlimited). The error says which value is wrong.
    pub fn check(&self, ceiling: &ContextLimits) -> Result<(), String> {
        if let Some(m) = self.memory_mb {
            if m < Self::MIN_MEMORY_MB {
                return Err(format!(
                    "limits.memory_mb must be at least {} (got {m})",
                    Self::MIN_MEMORY_MB
                ));
            }
            if let Some(max) = ceiling.memory_mb {
                if m > max {
                    return Err(format!(
                        "limits.memory_mb {m} exceeds the sandbox's memory limit of {max} MiB"
                    ));
                }
            }
        }
        if let Some(c) = self.cpu_millicores {
            if c < Self::MIN_CPU_MILLICORES {
                return Err(format!(
                    "limits.cpu_millicores must be at least {} (got {c})",
                    Self::MIN_CPU_MILLICORES
                ));
            }
            if let Some(max) = ceiling.cpu_millicores {
                if c > max {
                    return Err(format!(
                        "limits.cpu_millicores {c} exceeds the sandbox's CPU limit of {max} millicores"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Lifecycle state of a context's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextState {
    /// The kernel is up and waiting for code.
    Idle,
    /// A cell is running.
    Busy,
}

/// A context as the API reports it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Context {
    pub id: ContextId,
    pub language: Language,
    pub cwd: String,
    /// `true` for the context a run with only `language` uses.
    pub is_default: bool,
    pub state: ContextState,
    /// Number of cells run by the current kernel (resets when the kernel restarts).
    pub execution_count: u64,
    /// How many times the kernel was replaced by a fresh one (explicit restart, crash, or a cell that
    /// ignored an interrupt). Each replacement loses the context's state.
    pub kernel_restarts: u64,
    /// Why the kernel was last replaced, when it was.
    pub last_restart_reason: Option<String>,
    /// The context's limits, when it was created with some.
    pub limits: Option<ContextLimits>,
    /// Memory charged to the context's own cgroup (its kernel and the kernel's children) right
    /// now, in bytes; absent where contexts have no cgroup of their own (an agent outside a
    /// sandbox, cgroup v2 hosts).
    pub memory_bytes: Option<u64>,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub contexts: usize,
}

/// Whether `name` may be set as an environment variable through the API: a shell-safe identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`), so every kernel (Bash included) can take it verbatim.
pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_limits_are_checked() {
        let ceiling = ContextLimits {
            memory_mb: Some(1024),
            cpu_millicores: Some(1000),
        };
        let ok = ContextLimits {
            memory_mb: Some(256),
            cpu_millicores: Some(500),
        };
        ok.check(&ceiling).unwrap();
        ContextLimits::default().check(&ceiling).unwrap();
        ok.check(&ContextLimits::default()).unwrap();
        for bad in [
            ContextLimits {
                memory_mb: Some(2048),
                cpu_millicores: None,
            },
            ContextLimits {
                memory_mb: None,
                cpu_millicores: Some(1001),
            },
            ContextLimits {
                memory_mb: Some(1),
                cpu_millicores: None,
            },
            ContextLimits {
                memory_mb: None,
                cpu_millicores: Some(5),
            },
        ] {
            let e = bad.check(&ceiling).unwrap_err();
            assert!(e.contains("limits."), "{e}");
        }
        let r: CreateContextRequest =
            serde_json::from_str(r#"{"language":"python","limits":{"memory_mb":64}}"#).unwrap();
        assert_eq!(r.limits.unwrap().memory_mb, Some(64));
        assert!(
            serde_json::from_str::<CreateContextRequest>(r#"{"limits":{"memory":1}}"#).is_err()
        );
    }

    #[test]
    fn env_names() {
        assert!(valid_env_name("FOO_1"));
        assert!(valid_env_name("_x"));
        assert!(!valid_env_name("1A"));
        assert!(!valid_env_name("A-B"));
        assert!(!valid_env_name("A;rm"));
        assert!(!valid_env_name(""));
    }
}
