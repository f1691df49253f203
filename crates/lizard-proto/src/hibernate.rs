//! Hibernation wire types: what was saved when a sandbox was hibernated to disk and what was
//! restored (or lost, with the reason) when it was resumed.
//!
//! Used by the server's `POST /v1/sandboxes/{id}/hibernate` and `/resume` answers and by the agent's
//! internal `/hibernate/snapshot` and `/hibernate/restore` routes. Not here: how a kernel saves its
//! state (see `kernels/PROTOCOL.md`).

use crate::{ContextId, Language};
use serde::{Deserialize, Serialize};

/// How kernel state was carried across hibernation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HibernationMethod {
    /// Each kernel saved its own state (variables, functions, classes, imports, cwd...) and a fresh
    /// kernel loaded it; what could not be saved is listed as lost.
    PerLanguage,
    /// The whole sandbox (every process, its memory, descriptors, sockets, threads) was
    /// checkpointed with CRIU and restored exactly.
    Criu,
}

/// One item of a context's state that was saved or restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StateItem {
    /// Variable, function, class, module alias or alias name; the path for `cwd`.
    pub name: String,
    /// `variable`, `function`, `class`, `module`, `alias`, `cwd`, `env`, `execution_count`, or
    /// `process` (the whole kernel process, restored by CRIU).
    pub kind: String,
}

/// One item that did not survive, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LostItem {
    pub name: String,
    pub reason: String,
}

/// What happened to one context's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextReport {
    pub id: ContextId,
    pub language: Language,
    /// Saved (in a hibernate answer) or restored (in a resume answer).
    pub restored: Vec<StateItem>,
    pub lost: Vec<LostItem>,
}

/// The state report of a hibernation or of a resume from one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HibernationReport {
    pub method: HibernationMethod,
    /// Why this method: e.g. no checkpoint tool (CRIU >= 4.1) on the host.
    pub method_reason: String,
    pub contexts: Vec<ContextReport>,
}

/// Agent `POST /hibernate/snapshot` and `/hibernate/restore`: the directory (inside the sandbox)
/// that holds the saved state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HibernateDirRequest {
    pub dir: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_wire_shape() {
        let r = HibernationReport {
            method: HibernationMethod::PerLanguage,
            method_reason: "no criu".into(),
            contexts: vec![ContextReport {
                id: ContextId("c1".into()),
                language: Language::Python,
                restored: vec![StateItem {
                    name: "x".into(),
                    kind: "variable".into(),
                }],
                lost: vec![LostItem {
                    name: "g".into(),
                    reason: "generator".into(),
                }],
            }],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["method"], "per-language");
        assert_eq!(v["contexts"][0]["language"], "python");
        assert_eq!(v["contexts"][0]["lost"][0]["name"], "g");
        let back: HibernationReport = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
