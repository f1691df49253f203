//! Port forwarding into the sandbox: `/ports/{port}/{path}` is proxied to
//! `http://127.0.0.1:{port}/{path}` inside the sandbox's network namespace, HTTP and WebSocket (any
//! `Upgrade`) alike, bodies streamed both ways.
//!
//! The agent is the only way in: nothing listens on the host's network for a sandbox's ports; the
//! server forwards `/v1/sandboxes/{id}/ports/{port}/…` here over the agent's Unix socket after
//! checking the caller's key. Not here: authentication (the server's job) or TLS.

use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use hyper_util::rt::TokioIo;
use lizard_http::api::ApiError;
use lizard_proto::ErrorCode;
use std::collections::HashMap;

/// The agent's own TCP port, which `/ports/…` refuses (set once the listener is bound).
static OWN_PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();

/// Refuse `port` (the agent's own) in `/ports/{port}/…`: forwarding to it would be a way around
/// the server's view of the agent (the server refuses it too).
pub fn refuse_port(port: u16) {
    let _ = OWN_PORT.set(port);
}

/// The routes of this module.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ports/{port}", any(forward))
        .route("/ports/{port}/", any(forward))
        .route("/ports/{port}/{*path}", any(forward))
}

async fn forward(
    params: Result<Path<HashMap<String, String>>, axum::extract::rejection::PathRejection>,
    mut req: Request,
) -> Result<Response, ApiError> {
    // A path that is no valid UTF-8 is the caller's error, typed like every other.
    let Path(params) =
        params.map_err(|e| ApiError::invalid(format!("invalid path: {}", e.body_text())))?;
    let port: u16 = params
        .get("port")
        .and_then(|p| p.parse().ok())
        .filter(|p| *p != 0)
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidRequest, "port must be 1-65535"))?;
    if OWN_PORT.get() == Some(&port) {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("port {port} is the sandbox agent's own API, not a service of the sandbox"),
        ));
    }
    let path = params.get("path").map(String::as_str).unwrap_or("");
    let mut uri = format!("/{path}");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("nothing answers on port {port} in the sandbox: {e}"),
            )
        })?;
    let _ = tcp.set_nodelay(true);
    let upgrade = req.headers().get(header::UPGRADE).cloned();
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut out = hyper::Request::builder().method(parts.method).uri(uri);
    if let Some(h) = out.headers_mut() {
        *h = lizard_http::end_to_end_headers(&parts.headers, upgrade.as_ref());
        h.insert(
            header::HOST,
            HeaderValue::from_str(&format!("localhost:{port}"))
                .unwrap_or(HeaderValue::from_static("localhost")),
        );
    }
    let out = out
        .body(body)
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| bad_gateway(port, &e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp = sender
        .send_request(out)
        .await
        .map_err(|e| bad_gateway(port, &e))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            lizard_http::splice(client, hyper::upgrade::on(&mut resp));
        }
    }
    let (mut parts, body) = resp.into_parts();
    let upgraded = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    let resp_upgrade = parts.headers.get(header::UPGRADE).cloned();
    parts.headers =
        lizard_http::end_to_end_headers(&parts.headers, resp_upgrade.as_ref().filter(|_| upgraded));
    Ok(Response::from_parts(parts, Body::new(body)))
}

fn bad_gateway(port: u16, e: &hyper::Error) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!("the service on port {port} in the sandbox failed: {e}"),
    )
}
