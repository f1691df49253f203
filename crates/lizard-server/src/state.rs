//! What every HTTP handler of the server shares: the application state ([`AppState`]), the
//! caller ([`Auth`], from the API key a request carries) and the one visibility rule (a key sees
//! only its project's sandboxes: [`visible`]).

use crate::auth::{self, Principal};
use crate::sandboxes::{Sandbox, Sandboxes};
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use lizard_http::api::ApiError;
use lizard_proto::ErrorCode;
use std::sync::Arc;

/// The server's state, shared by every handler.
pub struct AppState {
    pub sandboxes: Arc<Sandboxes>,
    /// E2B compatibility: sandbox tokens and debug mode.
    pub e2b: crate::e2b_shared::E2b,
    /// Requests per principal (`None`: no limit); applied by [`crate::gate`] to every request but
    /// the ones on a sandbox the caller may use.
    pub limiter: Option<crate::ratelimit::RateLimiter>,
    /// Requests per sandbox on its own traffic (its code, contexts, commands, files, ports and
    /// terminals, by a key that may use it, or E2B's sandbox traffic); `None`: no limit.
    pub sandbox_limiter: Option<crate::ratelimit::RateLimiter>,
    /// How long and how many audit events are kept ([`crate::audit::run_retention`]).
    pub audit_retention: crate::audit::Retention,
    /// User templates (`/v1/templates`).
    pub templates: Arc<crate::templates::Templates>,
}

/// The caller, from `Authorization: Bearer <key>` (or E2B's `X-API-Key`).
pub struct Auth(pub Principal);

/// The credential a request carries: `Authorization: Bearer <key>`, E2B's `X-API-Key`, or on a
/// WebSocket handshake (a browser cannot set headers on one) a [`ws_key`].
pub(crate) fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| {
            // E2B's SDKs send the key in X-API-Key.
            headers.get("x-api-key").and_then(|v| v.to_str().ok())
        })
        .or_else(|| ws_key(headers))
        .map(str::trim)
}

/// The key a WebSocket handshake carries as the subprotocol `lizard.key.<key>`
/// (`lizard_proto::WS_KEY_PROTOCOL_PREFIX`); never forwarded (`crate::proxy`) nor echoed.
pub(crate) fn ws_key(headers: &axum::http::HeaderMap) -> Option<&str> {
    let upgrade = headers.get(header::UPGRADE)?.to_str().ok()?;
    if !upgrade.trim().eq_ignore_ascii_case("websocket") {
        return None;
    }
    ws_protocols(headers).find_map(|p| p.strip_prefix(lizard_proto::WS_KEY_PROTOCOL_PREFIX))
}

/// The subprotocols a WebSocket handshake offers, in order.
pub(crate) fn ws_protocols(headers: &axum::http::HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

impl FromRequestParts<Arc<AppState>> for Auth {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, st: &Arc<AppState>) -> Result<Self, ApiError> {
        // The gate (crate::gate) has usually looked the key up already.
        if let Some(c) = parts.extensions.get::<auth::Caller>() {
            return Ok(Auth(c.principal.clone()));
        }
        let unauth = || {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "missing or unknown API key: send `Authorization: Bearer <key>` (LIZARD_API_KEY)",
            )
        };
        let token = bearer_token(&parts.headers).ok_or_else(unauth)?;
        match auth::principal(&st.sandboxes.store, token)? {
            Some(p) => Ok(Auth(p)),
            None => Err(unauth()),
        }
    }
}

/// A sandbox visible to the caller (404 otherwise, whether it exists or not).
pub fn visible(st: &AppState, who: &Principal, id: &str) -> Result<Arc<Sandbox>, ApiError> {
    match st.sandboxes.get(id) {
        Some(sb) if who.can_see(&sb.project) => Ok(sb),
        _ => Err(ApiError::not_found("sandbox")),
    }
}
