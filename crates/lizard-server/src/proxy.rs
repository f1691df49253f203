//! Forwarding agent routes into a sandbox: `/v1/sandboxes/{id}/{contexts…,execute,commands…,pty…,
//! files…}` → the agent's `/{…}` over the sandbox's Unix socket, and `/v1/sandboxes/{id}/ports/…` to
//! services inside the sandbox (see [`forward_port`]).
//!
//! Bodies stream through in both directions without buffering or re-encoding (an execution's NDJSON
//! or SSE frames reach the client as the agent writes them). A client that disconnects drops the
//! agent connection, which interrupts the cell. The server never parses what passes through.

use crate::api::{visible, ApiError, AppState, Auth};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use lizard_proto::ErrorCode;
use std::sync::Arc;

/// Headers passed to the agent; everything else (notably `Authorization`) stays at the server.
const FORWARDED_REQUEST_HEADERS: [header::HeaderName; 3] =
    [header::CONTENT_TYPE, header::ACCEPT, header::CONTENT_LENGTH];

/// The running sandbox a `/v1/sandboxes/{id}/…` request addresses (visible to the caller) and the
/// agent URI it maps to (the rest of the path, with the query).
fn target(
    st: &AppState,
    who: &crate::auth::Principal,
    req: &Request,
) -> Result<(Arc<crate::sandboxes::Sandbox>, String), ApiError> {
    let path = req.uri().path();
    let rest = path.strip_prefix("/v1/sandboxes/").unwrap_or("");
    let (id, agent_path) = rest.split_once('/').unwrap_or((rest, ""));
    let sb = visible(st, who, id)?;
    if sb.is_hibernating() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("sandbox {id} is being hibernated: resume it when that is done"),
        ));
    }
    match sb.state() {
        crate::store::StoredState::Running => {}
        crate::store::StoredState::Hibernated => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("sandbox {id} is hibernated: resume it first"),
            ))
        }
        _ => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("sandbox {id} is paused: resume it first"),
            ))
        }
    }
    let mut uri = format!("/{agent_path}");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    Ok((sb, uri))
}

pub async fn forward(
    State(st): State<Arc<AppState>>,
    Auth(who): Auth,
    req: Request,
) -> Result<Response, ApiError> {
    let (sb, uri) = target(&st, &who, &req)?;
    let (parts, body) = req.into_parts();
    let mut out = axum::http::Request::builder()
        .method(parts.method)
        .uri(uri)
        .header(header::HOST, HeaderValue::from_static("agent"));
    for h in FORWARDED_REQUEST_HEADERS {
        if let Some(v) = parts.headers.get(&h) {
            out = out.header(&h, v);
        }
    }
    let out = out
        .body(body)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))?;
    let resp = sb
        .agent
        .send(out)
        .await
        .map_err(|e| unreachable(sb.as_ref(), &e))?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)).into_response())
}

/// The answer when the agent could not be reached (or the exchange broke), with its cause.
fn unreachable(sb: &crate::sandboxes::Sandbox, e: &crate::agent_client::AgentError) -> ApiError {
    let msg = crate::api::chain(e);
    tracing::warn!(sandbox = %sb.id, error = %msg, "forwarding to the agent");
    ApiError::new(
        ErrorCode::Unavailable,
        format!("the sandbox's agent is not reachable: {msg}"),
    )
}

/// `/v1/sandboxes/{id}/ports/{port}/…` → the agent's `/ports/{port}/…`: a sandbox's service on
/// `port`, HTTP or WebSocket. Unlike the agent routes, every end-to-end header goes through (cookies,
/// `Sec-WebSocket-*`, …) except the caller's `Authorization`, which stays at the server.
pub async fn forward_port(
    State(st): State<Arc<AppState>>,
    Auth(who): Auth,
    req: Request,
) -> Result<Response, ApiError> {
    let (sb, uri) = target(&st, &who, &req)?;
    relay(&sb, req, uri, &[]).await
}

/// Send `req` to the sandbox's agent at `uri` with every end-to-end header except Lizard's
/// credentials (a Bearer `Authorization`, `X-API-Key`) and the `strip`ped ones, splicing the connection through when the
/// agent switches protocols (WebSocket).
pub async fn relay(
    sb: &crate::sandboxes::Sandbox,
    mut req: Request,
    uri: String,
    strip: &[&str],
) -> Result<Response, ApiError> {
    let upgrade = req.headers().get(header::UPGRADE).cloned();
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut headers = lizard_http::end_to_end_headers(&parts.headers, upgrade.as_ref());
    // Other schemes (e.g. envd's `Basic <user>:`) belong to the service inside.
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() >= 7 && v[..7].eq_ignore_ascii_case("bearer "));
    if bearer {
        headers.remove(header::AUTHORIZATION);
    }
    headers.remove("x-api-key");
    for h in strip {
        headers.remove(*h);
    }
    headers.insert(header::HOST, HeaderValue::from_static("agent"));
    let mut out = axum::http::Request::builder().method(parts.method).uri(uri);
    if let Some(h) = out.headers_mut() {
        *h = headers;
    }
    let out = out
        .body(body)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))?;
    let mut resp = sb.agent.send(out).await.map_err(|e| unreachable(sb, &e))?;
    if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            lizard_http::splice(client, hyper::upgrade::on(&mut resp));
        }
    }
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)).into_response())
}
