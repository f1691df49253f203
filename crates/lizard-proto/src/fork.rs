//! Fork of a context: `POST /contexts/{id}/fork` (through the server:
//! `POST /v1/sandboxes/{id}/contexts/{ctx}/fork`). The agent forks the context's live kernel
//! (copy-on-write, no serialisation) into a new context of the same sandbox.

use crate::{Context, ContextId, ContextLimits, LostItem};
use serde::{Deserialize, Serialize};

/// The (optional) body of a fork request. An empty body means all defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkContextRequest {
    /// Limits of the fork's own cgroup; the source context's limits when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ContextLimits>,
}

/// The answer to a fork (201): the new context, as context creation answers it, plus where it
/// came from and what of the source's live state it does not have.
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
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["id"], "b");
        assert_eq!(v["execution_count"], 3);
        assert_eq!(v["forked_from"], "a");
        assert_eq!(v["lost"][0]["name"], "thread worker");
        let back: ContextFork = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
        let req: ForkContextRequest = serde_json::from_str("{}").unwrap();
        assert!(req.limits.is_none());
        assert!(serde_json::from_str::<ForkContextRequest>(r#"{"x":1}"#).is_err());
    }
}
