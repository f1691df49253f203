//! The E2B-compatible surfaces of the agent: E2B's code interpreter ([`ci`], its port 49999) and
//! envd ([`envd`], its port 49983), served under `/e2b/49999/…` and `/e2b/49983/…`. The server maps
//! an E2B request (routed by its `E2b-Sandbox-Port` header) onto these prefixes.
//!
//! These are adapters over the agent's own machinery, not second implementations: runs go through
//! `crate::context` and produce `lizard_proto::ExecutionEvent`s that are re-serialized as E2B lines;
//! processes go through `crate::procs`; files through `crate::files`. What differs is only the wire
//! (E2B's field names, text/plain errors, Connect framing). Authentication is the server's job.

pub mod ci;
pub mod envd;

use crate::context::Contexts;
use crate::procs::Processes;
use axum::Router;
use std::path::PathBuf;
use std::sync::Arc;

/// Both surfaces, under their prefixes.
pub fn routes<S: Clone + Send + Sync + 'static>(
    contexts: Arc<Contexts>,
    procs: Arc<Processes>,
    home: PathBuf,
) -> Router<S> {
    Router::new()
        .nest("/e2b/49999", ci::routes(contexts))
        .nest("/e2b/49983", envd::routes(procs, home))
}
