//! The agent's two routers: every route of the agent's modules, merged, with the one fallback,
//! body limit and drain layer.
//!
//! The TCP listener inside the sandbox (`127.0.0.1:8080`) gets [`router`]; the Unix socket only the
//! server reaches gets [`host_router`].

use crate::api::{method_not_allowed, not_found};
use crate::context::Contexts;
use axum::extract::DefaultBodyLimit;
use axum::Router;
use lizard_http::api::MAX_BODY_BYTES;
use std::sync::Arc;

/// The API of the agent's TCP listener inside the sandbox (`127.0.0.1:8080`), which every
/// process of the sandbox can reach: everything but the host-only routes of [`host_router`].
pub fn router(contexts: Arc<Contexts>) -> Router {
    routes(contexts, false)
}

/// The API of the agent's Unix socket, which only the server uses: [`router`]'s routes and those
/// only the server calls — `/executions` (metering) and `/hibernate/snapshot|restore` (which take
/// any directory). Code in the sandbox cannot reach these through the TCP listener; the ports
/// proxy refuses the agent's own port anyway.
pub fn host_router(contexts: Arc<Contexts>) -> Router {
    routes(contexts, true)
}

fn routes(contexts: Arc<Contexts>, host: bool) -> Router {
    let cfg = contexts.config();
    let (home, bash) = (cfg.default_cwd.clone(), cfg.kernels.bash.clone());
    let procs = crate::procs::Processes::new(home.clone(), bash);
    Router::new()
        .merge(crate::e2b::routes(
            contexts.clone(),
            procs.clone(),
            home.clone(),
        ))
        .merge(crate::api::routes(host))
        .merge(crate::commands::routes(procs.clone()))
        .merge(crate::pty::routes(procs))
        .merge(crate::files::routes(home))
        .merge(crate::ports::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // A body left unread by an early answer is drained, so the kept-alive connection survives.
        .layer(axum::middleware::map_request(drain_unread_body))
        .with_state(contexts)
}

async fn drain_unread_body(req: axum::extract::Request) -> axum::extract::Request {
    lizard_http::drain::drain_unread_body(req).map(axum::body::Body::new)
}
