//! Snapshot wire types: a saved copy of a running sandbox (its kernels' state and its writable
//! layer) that new sandboxes start from (clones), and the fork of a sandbox (a snapshot that is
//! not kept).
//!
//! Used by the server's `POST /v1/sandboxes/{id}/snapshots`, `GET|DELETE /v1/snapshots[/{id}]`,
//! `POST /v1/sandboxes` with `snapshot_id` and `POST /v1/sandboxes/{id}/fork`. What each context
//! saved (and, in a clone's answer, got back) is a [`crate::HibernationReport`]: the same
//! per-context `restored`/`lost` report as hibernation's, with the capture `method` used.

use crate::{ContextReport, HibernationMethod, SandboxLimits};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/sandboxes/{id}/snapshots` (the body is optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshotRequest {
    /// Free-form labels of the snapshot (the bounds of a sandbox's metadata).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// A snapshot as the API reports it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SnapshotInfo {
    /// `snap_` + 20 characters.
    pub snapshot_id: String,
    /// The sandbox it was taken of (it may be gone since).
    pub sandbox_id: String,
    pub project: String,
    pub template: String,
    pub created_at_ms: u64,
    /// Host disk the snapshot holds (its copy of the writable layer's image, saved state
    /// included).
    pub size_bytes: u64,
    /// How the memory state was captured.
    pub method: HibernationMethod,
    /// Why this method (what the host offers).
    pub method_reason: String,
    /// How long the source sandbox's processes were frozen for it (the memory dump and the disk
    /// copy), in milliseconds; absent for snapshots of older servers.
    pub frozen_ms: Option<u64>,
    /// Per context: what was saved (`restored`) and what could not be (`lost`).
    pub contexts: Vec<ContextReport>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The source's limits, which every clone gets (its disk is a copy of the source's).
    pub limits: SandboxLimits,
}

/// `GET /v1/snapshots?sandbox_id=&project=`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Only the snapshots of this sandbox.
    pub sandbox_id: Option<String>,
    /// Admin keys: only this project's (all projects' when absent).
    pub project: Option<String>,
}

/// `POST /v1/sandboxes/{id}/fork` (the body is optional): the new sandbox's own lifetime and
/// labels; the rest (template, limits, environment, network, volumes) is the source's.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSandboxRequest {
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// One snapshot's storage in a project's usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SnapshotUsage {
    pub snapshot_id: String,
    pub sandbox_id: String,
    pub size_bytes: u64,
    /// `size_bytes` × the time it existed (until now, or its deletion), GiB-hours.
    pub gib_hours: f64,
    /// Deleted snapshots keep their usage.
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shapes() {
        let s = SnapshotInfo {
            snapshot_id: "snap_x".into(),
            sandbox_id: "a".into(),
            project: "p".into(),
            template: "t".into(),
            created_at_ms: 1,
            size_bytes: 2,
            method: HibernationMethod::PerLanguage,
            method_reason: "r".into(),
            frozen_ms: Some(3),
            contexts: vec![],
            metadata: BTreeMap::new(),
            limits: SandboxLimits::default(),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["method"], "per-language");
        assert_eq!(v["size_bytes"], 2);
        assert_eq!(v["frozen_ms"], 3);
        assert_eq!(serde_json::from_value::<SnapshotInfo>(v).unwrap(), s);
        let r: CreateSnapshotRequest = serde_json::from_str("{}").unwrap();
        assert!(r.metadata.is_empty());
        assert!(serde_json::from_str::<CreateSnapshotRequest>(r#"{"x":1}"#).is_err());
        let f: ForkSandboxRequest = serde_json::from_str(r#"{"timeout_ms":5}"#).unwrap();
        assert_eq!(f.timeout_ms, Some(5));
    }
}
