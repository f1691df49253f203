//! Fork of a context: `POST /contexts/{id}/fork` (through the server:
//! `POST /v1/sandboxes/{id}/contexts/{ctx}/fork`). The agent forks the context's live kernel
//! (copy-on-write, no serialisation) into a new context of the same sandbox; when that fork would
//! lose part of the kernel's live state (threads, children, sockets), the server makes the fork
//! exact with a CRIU checkpoint of the kernel's process tree instead ([`ForkMethod::Checkpoint`],
//! through the agent's host-only `/context-forks/{id}/prepare` and `/context-forks/{id}/adopt`).

use crate::{Context, ContextId, ContextLimits, LostItem};
use serde::{Deserialize, Serialize};

/// The (optional) body of a fork request. An empty body means all defaults.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkContextRequest {
    /// Limits of the fork's own cgroup; the source context's limits when absent.
    pub limits: Option<ContextLimits>,
    /// `true`: the fork must carry everything (threads, child processes, listening sockets): a
    /// checkpoint of the kernel's process tree when a live fork would lose something, and an error
    /// when that cannot be made. `false`: a live fork only (the fastest; what it loses is in
    /// `lost`). Absent: exact when the server can checkpoint, else live.
    pub exact: Option<bool>,
}

/// How a context was forked.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ForkMethod {
    /// fork(2) of the live kernel: copy-on-write, a few milliseconds; only the forking thread
    /// comes along (see `lost`).
    #[default]
    Live,
    /// A CRIU checkpoint of the kernel's process tree restored into a pid namespace of its own:
    /// every thread, child process and socket comes along. A fork whose kernel had listening or
    /// bound inet sockets gets a network namespace of its own (loopback only).
    Checkpoint,
}

/// The answer to a fork (201): the new context, as context creation answers it, plus where it
/// came from and what of the source's live state it does not have.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextFork {
    #[serde(flatten)]
    pub context: Context,
    /// The context that was forked.
    pub forked_from: ContextId,
    /// What did not come along, with the reason: threads that were running in the source (a fork
    /// keeps only the forking thread), the source's child processes and background jobs, shared
    /// sockets, an asyncio loop's pending tasks. Empty when the copy is complete.
    #[serde(default)]
    pub lost: Vec<LostItem>,
    /// How it was forked.
    #[serde(default)]
    pub method: ForkMethod,
    /// Why a live fork was made although it loses something (the checkpoint was not possible:
    /// no usable CRIU on the host, or it failed).
    pub checkpoint_error: Option<String>,
}

/// The agent's host-only `POST /context-forks/{id}/prepare` (body: [`ForkContextRequest`]): a live
/// fork when it loses nothing, else what the host needs to checkpoint the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreparedFork {
    /// Done: the live fork carried everything.
    Live(ContextFork),
    /// The host checkpoints the kernel's tree, then calls `/context-forks/{new}/adopt` (or `abort`). The source's kernel is held (no cell starts) until then, at most a minute.
    Checkpoint(CheckpointPlan),
}

/// What the host needs to fork a kernel exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPlan {
    /// The new context (not listed until adopted).
    pub context_id: ContextId,
    /// The source's kernel, in the sandbox's pid namespace.
    pub kernel_pid: i32,
    /// The kernel's pipes the copy gets anew: the agent's pipes at `agent_fd`.
    pub channels: Vec<ForkChannel>,
    /// The new context's cgroup (a directory of the delegated `ctx/`), if contexts have cgroups.
    #[serde(default)]
    pub cgroup: Option<String>,
    /// What a live fork would have lost (said if the checkpoint fails and the fork falls back).
    #[serde(default)]
    pub lost: Vec<LostItem>,
}

/// One pipe of an exact fork: wherever the source kernel holds the pipe `pipe_inode` (its
/// stdout, stderr, events or control), the copy holds the pipe at the agent's `agent_fd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkChannel {
    pub pipe_inode: u64,
    pub agent_fd: i32,
}

/// The agent's host-only `POST /context-forks/{id}/adopt`: the restored copy of the kernel (its
/// pid in the sandbox's pid namespace). The copy's init needs no word: it ends with the fork's
/// cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdoptFork {
    /// The copy of the kernel.
    pub kernel_pid: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextState, Language};

    #[test]
    fn a_fork_answer_is_a_context_with_its_source_and_losses() {
        let f = ContextFork {
            context: Context {
                id: ContextId("b".into()),
                language: Language::Python,
                cwd: "/home/user".into(),
                is_default: false,
                state: ContextState::Idle,
                execution_count: 3,
                kernel_restarts: 0,
                last_restart_reason: None,
                limits: None,
                memory_bytes: None,
            },
            forked_from: ContextId("a".into()),
            lost: vec![LostItem {
                name: "thread worker".into(),
                reason: "only the forking thread survives a fork".into(),
            }],
            method: ForkMethod::Live,
            checkpoint_error: None,
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["id"], "b");
        assert_eq!(v["execution_count"], 3);
        assert_eq!(v["forked_from"], "a");
        assert_eq!(v["lost"][0]["name"], "thread worker");
        assert_eq!(v["method"], "live");
        let back: ContextFork = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
        let req: ForkContextRequest = serde_json::from_str("{}").unwrap();
        assert!(req.limits.is_none());
        assert!(serde_json::from_str::<ForkContextRequest>(r#"{"x":1}"#).is_err());
        // An older agent's answer has no method: it was a live fork.
        let old: ContextFork = serde_json::from_str(
            r#"{"id":"b","language":"python","cwd":"/","is_default":false,"state":"idle",
                "execution_count":0,"kernel_restarts":0,"forked_from":"a"}"#,
        )
        .unwrap();
        assert_eq!(old.method, ForkMethod::Live);
    }

    #[test]
    fn a_prepared_fork_is_live_or_a_plan() {
        let plan = PreparedFork::Checkpoint(CheckpointPlan {
            context_id: ContextId("c".into()),
            kernel_pid: 6,
            channels: vec![ForkChannel {
                pipe_inode: 77,
                agent_fd: 40,
            }],
            cgroup: Some("ctx-c".into()),
            lost: vec![],
        });
        let v = serde_json::to_value(&plan).unwrap();
        assert_eq!(v["checkpoint"]["kernel_pid"], 6);
        assert_eq!(serde_json::from_value::<PreparedFork>(v).unwrap(), plan);
    }
}
