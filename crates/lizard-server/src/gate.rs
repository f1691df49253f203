//! The front door, one middleware around every request of the main listener: find out who is
//! calling (an API key, an E2B sandbox token, or nobody: then the client's IP address), take a token
//! from that principal's rate-limit bucket (`429` + `Retry-After` when it is empty), and write the
//! audit log for lifecycle calls and authentication failures.
//!
//! It decides nothing about authorization: handlers still check what the caller may see (the
//! caller found here travels in the request's extensions as an [`auth::Caller`], so the key is hashed
//! and looked up once). A request counts once however long it streams (execute, file transfers).
//! The client address is the TCP peer's (no `X-Forwarded-For`: a proxy in front would make every
//! client one principal). E2B's debug listeners do not pass through here (they have no keys and
//! serve one local developer).

use crate::audit::{self, Action};
use crate::auth::{self, Caller};
use crate::state::{bearer_token, AppState};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lizard_http::api::ApiError;
use lizard_proto::{AuditEvent, ErrorCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// A request that fails authentication costs this many tokens of its address's bucket (so
/// guessing keys, and filling the audit log with failures, is 10× slower than ordinary requests).
pub const AUTH_FAILURE_COST: f64 = 10.0;

/// Create answers are read (to log the new object's id) up to this size.
const MAX_CREATE_ANSWER: usize = 1024 * 1024;

/// Whether a request belongs to E2B's surface (its control plane or sandbox traffic), whose
/// errors are E2B's `{code: <status>, message}`.
fn is_e2b(path: &str, sandbox_traffic: bool) -> bool {
    sandbox_traffic
        || path == "/sandboxes"
        || path.starts_with("/sandboxes/")
        || path == "/snapshots"
        || path == "/files"
        || path == "/volumes"
        || path.starts_with("/volumes/")
        || path.starts_with("/volumecontent/")
        || path == "/secrets"
        || path.starts_with("/secrets/")
        || path.starts_with("/v2/")
        || path.starts_with("/v3/")
        || path.starts_with("/templates/")
        || path.starts_with("/e2b/")
}

/// The sandbox a request of the API is its own traffic of (`/v1/sandboxes/{id}/` followed by
/// `execute`, `contexts`, `commands`, `files`, `ports` or `pty`), if it is.
fn own_sandbox_traffic(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/sandboxes/")?;
    let (id, rest) = rest.split_once('/')?;
    let first = rest.split('/').next().unwrap_or("");
    matches!(
        first,
        "execute" | "contexts" | "commands" | "files" | "ports" | "pty"
    )
    .then_some(id)
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn gate(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let client = peer.map_or_else(|| "unknown".to_string(), |a| a.to_string());
    let sandbox_id = header(&req, "e2b-sandbox-id");
    let e2b = is_e2b(req.uri().path(), sandbox_id.is_some());

    // Who: a valid sandbox token, a valid key, or the client's address. A sandbox's own traffic
    // (by its token, or by a key that may use it) counts against the sandbox's bucket: the
    // control plane (creates, lists, lifecycle calls) stays limited per key, and one honest
    // client running cells back to back in its sandbox is not throttled at the control plane's
    // rate.
    let mut caller: Option<Caller> = None;
    let mut sandbox_traffic = false;
    let bucket = if let Some(id) = &sandbox_id {
        let token = header(&req, "x-access-token")
            .or_else(|| header(&req, "e2b-traffic-access-token"))
            .unwrap_or_default();
        sandbox_traffic = st.e2b.token_ok(id, &token);
        sandbox_traffic.then(|| format!("sbx:{id}"))
    } else if let Some(token) = bearer_token(req.headers()) {
        // A store failure here is reported by the handler's own lookup.
        caller = auth::caller(&st.sandboxes.store, token).ok().flatten();
        caller.as_ref().map(|c| {
            match own_sandbox_traffic(req.uri().path())
                .and_then(|id| st.sandboxes.get(id))
                .filter(|sb| c.principal.can_see(&sb.project))
            {
                Some(sb) => {
                    sandbox_traffic = true;
                    format!("sbx:{}", sb.id)
                }
                None => format!("key:{}", c.key_hash.0),
            }
        })
    } else {
        None
    };
    let bucket = bucket.unwrap_or_else(|| match peer {
        Some(a) => format!("ip:{}", a.ip()),
        None => "ip:unknown".to_string(),
    });

    let limiter = match sandbox_traffic {
        true => &st.sandbox_limiter,
        false => &st.limiter,
    };
    if let Some(limiter) = limiter {
        if let Err(wait) = limiter.check(&bucket, Instant::now()) {
            return too_many(e2b, crate::ratelimit::retry_after_secs(wait));
        }
    }

    let action = if sandbox_id.is_none() {
        audit::classify(req.method(), req.uri().path())
    } else {
        None
    };
    let path = req.uri().path().to_string();
    // The project of an existing sandbox or volume (by id) named by the call, looked up before a
    // kill or delete removes it.
    let object_project = action.as_ref().and_then(|a| {
        let obj = a.object.as_deref()?;
        if a.sandbox {
            st.sandboxes.get(obj).map(|sb| sb.project.clone())
        } else if obj.starts_with("vol_") {
            st.sandboxes
                .store
                .get_volume(obj)
                .ok()
                .flatten()
                .map(|v| v.project)
        } else {
            None
        }
    });
    if let Some(c) = &caller {
        req.extensions_mut().insert(c.clone());
    }

    let passthrough = sandbox_id.is_some() || is_port_route(&path);
    let mut resp = next.run(req).await;
    if !passthrough {
        resp = typed_errors(resp, e2b).await;
    }
    let status = resp.status();
    // A 401 of the sandbox's own (a service behind the ports proxy, the agent) is no
    // authentication failure of the server's: it is the sandbox's answer, passed on.
    let from_sandbox = resp
        .extensions()
        .get::<crate::proxy::FromSandbox>()
        .is_some();

    if status == StatusCode::UNAUTHORIZED && !from_sandbox {
        if let Some(limiter) = limiter {
            // The one taken on the way in counts too.
            limiter.charge(&bucket, AUTH_FAILURE_COST - 1.0, Instant::now());
        }
        audit(
            &st,
            AuditEvent {
                actor: "anonymous".into(),
                key_prefix: sandbox_id.as_ref().map(|_| "sandbox-token".to_string()),
                action: "auth.failed".into(),
                object: Some(audit::cut(&path)),
                status: status.as_u16(),
                client,
                ..AuditEvent::default()
            },
        );
        return resp;
    }
    let Some(action) = action else {
        return resp;
    };
    let (resp, created) = if status.is_success() {
        match action.created_field {
            Some(field) => created_object(resp, field).await,
            None => (resp, None),
        }
    } else {
        (resp, None)
    };
    record_action(&st, action, caller, object_project, created, status, client);
    resp
}

/// Into the audit log, which numbers and dates `e`.
fn audit(st: &AppState, e: AuditEvent) {
    audit::record(&st.sandboxes.store, st.audit_retention, e);
}

fn record_action(
    st: &AppState,
    action: Action,
    caller: Option<Caller>,
    object_project: Option<String>,
    created: Option<(String, Option<String>)>,
    status: StatusCode,
    client: String,
) {
    let (actor, key_prefix, own_project) = match caller {
        Some(Caller {
            principal: auth::Principal::Admin,
            key_prefix,
            ..
        }) => ("admin", Some(key_prefix), None),
        Some(Caller {
            principal: auth::Principal::Project(p),
            key_prefix,
            ..
        }) => ("project", Some(key_prefix), Some(p)),
        None => ("anonymous", None, None),
    };
    let (created_id, created_project) = created.unwrap_or_default();
    // A project key's events are its project's; an admin's belong to the object's project.
    let project = own_project.or(object_project).or(created_project);
    audit(
        st,
        AuditEvent {
            actor: actor.into(),
            project,
            key_prefix,
            action: action.name.into(),
            object: action
                .object
                .or((!created_id.is_empty()).then_some(created_id)),
            status: status.as_u16(),
            client,
            ..AuditEvent::default()
        },
    );
}

/// The new object's id (`field` of the JSON answer) and project (its `project` field, if any);
/// the answer is passed on unchanged.
async fn created_object(
    resp: Response,
    field: &str,
) -> (Response, Option<(String, Option<String>)>) {
    if let Some(c) = resp.extensions().get::<audit::Created>() {
        let created = (audit::cut(&c.id), c.project.as_deref().map(audit::cut));
        return (resp, Some(created));
    }
    let (parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_CREATE_ANSWER).await {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "reading a create answer for the audit log failed");
            return (
                ApiError(lizard_proto::ErrorBody::internal()).into_response(),
                None,
            );
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let id = v[field].as_str().map(audit::cut);
    let project = v["project"].as_str().map(audit::cut);
    (
        Response::from_parts(parts, Body::from(bytes)),
        id.map(|id| (id, project)),
    )
}

/// `/v1/sandboxes/{id}/ports/{port}…`: a sandbox's own service answers; never rewritten.
fn is_port_route(path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').collect();
    matches!(segs.as_slice(), ["", "v1", "sandboxes", _, "ports", ..])
}

/// Error bodies of the framework itself (axum's extractor rejections are plain text, e.g. a path
/// parameter that is not UTF-8) become the typed body — E2B's shape on E2B's routes — with the
/// same status and the text as the message. JSON answers pass unchanged.
async fn typed_errors(resp: Response, e2b: bool) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut r = if e2b {
        crate::e2b_shared::E2bError(status, message).into_response()
    } else {
        let code = match status.as_u16() {
            401 => ErrorCode::Unauthenticated,
            403 => ErrorCode::PermissionDenied,
            404 => ErrorCode::NotFound,
            409 => ErrorCode::Conflict,
            413 => ErrorCode::PayloadTooLarge,
            415 => ErrorCode::UnsupportedMediaType,
            429 => ErrorCode::RateLimited,
            503 => ErrorCode::Unavailable,
            507 => ErrorCode::InsufficientStorage,
            400..=499 => ErrorCode::InvalidRequest,
            _ => ErrorCode::Internal,
        };
        ApiError::new(code, message).into_response()
    };
    *r.status_mut() = status;
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            r.headers_mut().entry(k).or_insert(v.clone());
        }
    }
    // What the handler said about the answer (e.g. `proxy::FromSandbox`: an agent's plain-text
    // 401 is still the sandbox's, not an authentication failure) stays with it.
    r.extensions_mut().extend(parts.extensions);
    r
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `429` with `Retry-After`: Lizard's typed body, or E2B's `{code, message}` on E2B's surface.
fn too_many(e2b: bool, retry_after: u64) -> Response {
    let message = format!("rate limit exceeded: retry after {retry_after} s");
    let mut r = if e2b {
        crate::e2b_shared::E2bError(StatusCode::TOO_MANY_REQUESTS, message).into_response()
    } else {
        ApiError::new(ErrorCode::RateLimited, message).into_response()
    };
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    r
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_sandboxs_own_traffic_is_its_code_files_ports_and_terminals() {
        for (path, id) in [
            ("/v1/sandboxes/abc/execute", Some("abc")),
            ("/v1/sandboxes/abc/contexts/c1/fork", Some("abc")),
            ("/v1/sandboxes/abc/commands", Some("abc")),
            ("/v1/sandboxes/abc/files/list", Some("abc")),
            ("/v1/sandboxes/abc/ports/8080/x", Some("abc")),
            ("/v1/sandboxes/abc/pty", Some("abc")),
            ("/v1/sandboxes/abc", None),
            ("/v1/sandboxes/abc/pause", None),
            ("/v1/sandboxes/abc/snapshots", None),
            ("/v1/sandboxes", None),
            ("/v1/projects/p/usage", None),
            ("/v1/sandboxes/abc/executeX", None),
        ] {
            assert_eq!(own_sandbox_traffic(path), id, "{path}");
        }
    }

    use super::*;

    #[test]
    fn e2b_surface() {
        assert!(is_e2b("/anything", true));
        assert!(is_e2b("/sandboxes", false));
        assert!(is_e2b("/sandboxes/x/pause", false));
        assert!(is_e2b("/v2/sandboxes", false));
        assert!(is_e2b("/snapshots", false));
        assert!(!is_e2b("/v1/snapshots", false));
        assert!(!is_e2b("/v1/sandboxes", false));
        assert!(!is_e2b("/health", false));
        assert!(!is_e2b("/sandboxesx", false));
    }

    #[test]
    fn port_routes_pass_through() {
        assert!(is_port_route("/v1/sandboxes/x/ports/8000"));
        assert!(is_port_route("/v1/sandboxes/x/ports/8000/a/b"));
        assert!(!is_port_route("/v1/sandboxes/x/files"));
        assert!(!is_port_route("/v1/sandboxes"));
    }

    #[tokio::test]
    async fn plain_text_errors_become_typed() {
        let plain = (StatusCode::BAD_REQUEST, "Invalid URL: bad").into_response();
        let r = typed_errors(plain, false).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let e: lizard_proto::ErrorBody = serde_json::from_slice(&b).unwrap();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.message, "Invalid URL: bad");

        let plain = (StatusCode::NOT_FOUND, "").into_response();
        let r = typed_errors(plain, true).await;
        let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let e: lizard_proto::e2b::api::Error = serde_json::from_slice(&b).unwrap();
        assert_eq!(e.code, 404);

        // Success and JSON errors are left alone.
        let ok = (StatusCode::OK, "fine").into_response();
        let r = typed_errors(ok, false).await;
        let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        assert_eq!(&b[..], b"fine");
    }
}
