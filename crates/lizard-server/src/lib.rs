//! The Lizard server: one process that owns projects, API keys, sandboxes and usage, and serves the
//! `/v1` HTTP API.
//!
//! It launches sandboxes through `lizard-jail` (via the `lizard sandbox-init` helper), keeps its
//! state in SQLite (`crate::store`), meters usage (`crate::sandboxes::metering`) and forwards agent routes into
//! sandboxes (`crate::proxy`).
//!
//! **Architecture Invariant:** the server never parses kernel output; the agent never knows about
//! projects or billing.

pub mod api;
pub mod audit;
pub mod console;
pub mod e2b;
pub mod e2b_resources;
pub mod e2b_shared;
pub mod e2b_templates;
pub mod e2b_volume_content;
pub mod gate;
pub mod hosts;
pub mod openapi;
pub mod proxy;
pub mod ratelimit;
pub mod router;
pub mod state;

/// The lifecycle's modules, by the paths the HTTP side and the `lizard` binary use.
pub use lizard_lifecycle::{
    agent_client, auth, egress, host_logs, id_ranges, ids, sandboxes, secrets, storage, store,
    templates, volumes,
};

/// The OpenAPI document served at `/v1/openapi.json` (made once, see [`openapi`]).
pub fn openapi_json() -> &'static str {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOC.get_or_init(openapi::document_text)
}
