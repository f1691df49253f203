//! The sandbox lifecycle of the Lizard server, without HTTP: sandboxes (create, pool, launch,
//! pause/resume, hibernate/wake, snapshots, clones and forks, timeouts, adoption after a restart,
//! metering), the store (SQLite: projects, keys, sandboxes, volumes, usage, audit), volumes,
//! egress and secrets, host id ranges, the client of each sandbox's agent, user templates and the
//! audit log's writing side. `lizard-server` calls it from its HTTP handlers (its typed
//! operations are `sandboxes::Sandboxes`' methods, `templates::Templates`' and the store's).
//!
//! **Architecture Invariant:** no HTTP framework here (no axum): requests and answers are
//! `lizard-proto` types and this crate's own; the agent client speaks HTTP to the agent with
//! hyper.

pub mod agent_client;
pub mod api_errors;
pub mod audit;
pub mod auth;
pub mod egress;
pub mod host_logs;
pub mod host_zygotes;
pub mod id_ranges;
pub mod ids;
pub mod sandboxes;
pub mod secret_uses;
pub mod secrets;
pub mod storage;
pub mod store;
pub mod templates;
pub mod volumes;
