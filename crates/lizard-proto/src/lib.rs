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
pub mod hibernate;
pub mod ids;
pub mod language;
pub mod sandbox;
pub mod volume;

pub use audit::{AuditEvent, AuditQuery};
pub use command::{
    CommandEnd, CommandEvent, CommandResult, ProcessInfo, ProcessInputRequest, PtySize,
    ResizePtyRequest, SignalRequest, StartCommandRequest, StartPtyRequest, StreamQuery,
};
pub use error::{ErrorBody, ErrorCode};
pub use execution::{
    EventFrame, ExecuteRequest, Execution, ExecutionError, ExecutionEvent, ExecutionLog,
    ExecutionRecord, ExecutionResult, ExecutionStatus, ExecutionUsage, MimeBundle, CHART_MIME,
    TABLE_MIME,
};
pub use files::{
    EntryInfo, FileType, FsEvent, FsEventType, ListQuery, MakeDirRequest, PathQuery, RenameRequest,
    WatchQuery,
};
pub use hibernate::{
    ContextReport, HibernateDirRequest, HibernationMethod, HibernationReport, LostItem, StateItem,
};
pub use ids::ContextId;
pub use language::{Language, UnknownLanguage};
pub use sandbox::{
    CreateProjectRequest, CreateSandboxRequest, Egress, ExecutionRow, LimitsRequest,
    NetworkRequest, ProjectCreated, ProjectUsage, SandboxInfo, SandboxLimits, SandboxState,
    SandboxUsage, SetTimeoutRequest, TimeoutAction, UsageTotals,
};
pub use volume::{
    check_mount_path, mount_paths_overlap, valid_volume_name, CreateVolumeRequest, SandboxVolume,
    VolumeInfo, VolumeMountRequest, VolumeUsage,
};

use serde::{Deserialize, Serialize};

/// Media type of a streamed execution as JSON Lines: one [`EventFrame`] per line.
pub const NDJSON: &str = "application/x-ndjson";
/// Media type of a streamed execution as Server-Sent Events: one [`EventFrame`] per `data:` line.
pub const SSE: &str = "text/event-stream";

/// `POST /contexts`: create a context (one kernel process).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateContextRequest {
    /// Kernel language; Python when absent.
    #[serde(default)]
    pub language: Option<Language>,
    /// Working directory of the kernel; the agent's default (`/home/user` in a sandbox) when absent.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// Lifecycle state of a context's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextState {
    /// The kernel is up and waiting for code.
    Idle,
    /// A cell is running.
    Busy,
}

/// A context as the API reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_reason: Option<String>,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    fn env_names() {
        assert!(valid_env_name("FOO_1"));
        assert!(valid_env_name("_x"));
        assert!(!valid_env_name("1A"));
        assert!(!valid_env_name("A-B"));
        assert!(!valid_env_name("A;rm"));
        assert!(!valid_env_name(""));
    }
}
