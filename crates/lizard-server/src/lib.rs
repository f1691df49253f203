//! The Lizard server: one process that owns projects, API keys, sandboxes and usage, and serves the
//! `/v1` HTTP API.
//!
//! It launches sandboxes through `lizard-jail` (via the `lizard sandbox-init` helper), keeps its
//! state in SQLite (`crate::store`), meters usage (`crate::sandboxes::metering`) and forwards agent routes into
//! sandboxes (`crate::proxy`).
//!
//! **Architecture Invariant:** the server never parses kernel output; the agent never knows about
//! projects or billing.

pub mod agent_client;
pub mod api;
pub mod audit;
pub mod auth;
pub mod e2b;
pub mod e2b_shared;
pub mod e2b_templates;
pub mod egress;
pub mod gate;
pub mod host_logs;
pub mod id_ranges;
pub mod ids;
pub mod openapi;
pub mod proxy;
pub mod ratelimit;
pub mod router;
pub mod sandboxes;
pub mod secrets;
pub mod state;
pub mod storage;
pub mod store;
pub mod templates;
pub mod volumes;

/// The OpenAPI document served at `/v1/openapi.json` (made once, see [`openapi`]).
pub fn openapi_json() -> &'static str {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOC.get_or_init(openapi::document_text)
}
