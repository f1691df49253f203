//! The server's router: Lizard's own routes ([`crate::api`]), E2B's control plane and template
//! builds ([`crate::e2b`], [`crate::e2b_templates`]), the web console's files
//! ([`crate::console`]), the fallbacks, and the layers every request passes: the body limit, E2B
//! sandbox traffic routed by header ([`crate::e2b::sandbox_traffic`]), the gate ([`crate::gate`]:
//! caller, rate limits, audit), host-name routing of sandbox traffic ([`crate::hosts`]) and the
//! drain of unread bodies.

use crate::state::AppState;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Router;
use lizard_http::api::{ApiError, MAX_BODY_BYTES};
use lizard_proto::ErrorCode;
use std::sync::Arc;

/// The server's router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .merge(crate::e2b::routes())
        .merge(crate::e2b_templates::routes())
        .merge(crate::e2b_resources::routes())
        .merge(crate::api::routes())
        .merge(crate::console::routes())
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            let mut r = ApiError::invalid("method not allowed on this route").into_response();
            *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            r
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // E2B sandbox traffic is routed by header before any path matching.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::e2b::sandbox_traffic,
        ))
        // Outermost: who is calling, rate limits, the audit log (crate::gate).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::gate::gate,
        ))
        // Outside the gate: a request to `<port>-<id>.<sandbox domain>` becomes sandbox traffic
        // (crate::hosts), which the gate then sees as it sees E2B's headers.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::hosts::host_routing,
        ))
        // Around everything: a body left unread by an early answer is drained, so the client's
        // kept-alive connection survives it (lizard_http::drain).
        .layer(axum::middleware::map_request(drain_unread_body))
        .with_state(state)
}

async fn drain_unread_body(req: Request) -> Request {
    lizard_http::drain::drain_unread_body(req).map(axum::body::Body::new)
}
