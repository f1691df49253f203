//! The one way a request enters a sandbox: [`send`] builds the upstream request for the sandbox's
//! agent (its URI, the filtered headers of [`upstream_headers`], `Host: agent`), sends it over the
//! sandbox's Unix socket and hands the answer back, splicing the two connections together when
//! the agent switches protocols (WebSocket). Every caller goes through it: [`forward`] for
//! `/v1/sandboxes/{id}/{contexts…,execute,commands…,pty…,files…,ports…}` (→ the agent's `/{…}`;
//! `ports/{port}/…` reaches a service inside the sandbox through the agent), and E2B's sandbox
//! traffic (`crate::e2b`, → the agent's `/e2b/{port}/…` or `/ports/{port}/…`).
//!
//! Headers: every end-to-end header crosses; hop-by-hop ones (RFC 9110 §7.6.1, and whatever the
//! request's `Connection` names) and what the server itself reads as credentials or routing (a
//! Bearer `Authorization`, `X-API-Key`, E2B's sandbox tokens and `E2b-Sandbox-*`) never do. Other
//! `Authorization` schemes (envd's `Basic <user>:`) and cookies belong to what runs inside.
//!
//! Bodies stream through in both directions without buffering or re-encoding (an execution's NDJSON
//! or SSE frames reach the client as the agent writes them). A client that disconnects drops the
//! agent connection, which interrupts the cell. The server never parses what passes through.
//!
//! Not here: which sandbox a request may reach and which agent path it maps to (the callers:
//! `target` here for the `/v1` routes, `crate::e2b` for E2B's), or response headers (the agent's
//! answer is passed back as it is).

use crate::sandboxes::Sandbox;
use crate::state::{visible, AppState, Auth};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use lizard_http::api::ApiError;
use lizard_proto::ErrorCode;
use std::sync::Arc;

/// Headers that never cross into a sandbox besides `lizard_http`'s hop-by-hop ones:
/// `Proxy-Connection` (hop-by-hop by RFC 9110 §7.6.1) and what the server reads itself — Lizard's
/// key as E2B's SDKs send it, E2B's per-sandbox tokens (`crate::gate`, `crate::e2b`) and E2B's
/// routing headers (`crate::e2b::sandbox_traffic`). A Bearer `Authorization` is dropped as well
/// (see [`is_bearer`]).
const SERVER_ONLY: [&str; 6] = [
    "proxy-connection",
    "x-api-key",
    "x-access-token",
    "e2b-traffic-access-token",
    "e2b-sandbox-id",
    "e2b-sandbox-port",
];

/// The TCP port the agent listens on inside every sandbox (its `--listen 127.0.0.1:8080`, set
/// where the server builds the agent's command line). The ports proxy refuses it: the agent's
/// API is reached through the server's own routes (which check what a key may do), never as a
/// "service" of the sandbox.
pub const AGENT_PORT: u16 = 8080;

/// A 403 for the agent's own port in a ports request (`/v1/…/ports/{port}`, E2B's traffic).
pub fn refuse_agent_port(port: u16) -> Result<(), ApiError> {
    if port == AGENT_PORT {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("port {port} is the sandbox agent's own API, not a service of the sandbox"),
        ));
    }
    Ok(())
}

/// The running sandbox a `/v1/sandboxes/{id}/…` request addresses (visible to the caller) and the
/// agent URI it maps to (the rest of the path, with the query).
fn target(
    st: &AppState,
    who: &crate::auth::Principal,
    req: &Request,
) -> Result<(Arc<Sandbox>, String), ApiError> {
    let path = req.uri().path();
    let rest = path.strip_prefix("/v1/sandboxes/").unwrap_or("");
    let (id, agent_path) = rest.split_once('/').unwrap_or((rest, ""));
    let sb = visible(st, who, id)?;
    if let ["ports", port, ..] = agent_path.split('/').collect::<Vec<_>>().as_slice() {
        if let Ok(port) = port.parse::<u16>() {
            refuse_agent_port(port)?;
        }
    }
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

/// The handler of every `/v1/sandboxes/{id}/…` route that the agent serves (contexts, execute,
/// commands, pty, files, and `ports/{port}/…` — HTTP or WebSocket — for a service inside).
pub async fn forward(
    State(st): State<Arc<AppState>>,
    Auth(who): Auth,
    req: Request,
) -> Result<Response, ApiError> {
    let (sb, uri) = match target(&st, &who, &req) {
        Ok(t) => t,
        // A paused sandbox that resumes on requests: resume it, then look again.
        Err(e) => match paused_visible(&st, &who, &req) {
            Some(sb) => {
                auto_resumed(&st, sb).await?;
                target(&st, &who, &req)?
            }
            None => return Err(e),
        },
    };
    send(&st, &sb, req, &uri).await
}

/// The sandbox a `/v1/sandboxes/{id}/…` request names, if the caller sees it and it is paused
/// or hibernated with `network.auto_resume`.
fn paused_visible(
    st: &AppState,
    who: &crate::auth::Principal,
    req: &Request,
) -> Option<Arc<Sandbox>> {
    let rest = req.uri().path().strip_prefix("/v1/sandboxes/")?;
    let id = rest.split('/').next()?;
    let sb = visible(st, who, id).ok()?;
    let paused = matches!(
        sb.state(),
        crate::store::StoredState::Paused | crate::store::StoredState::Hibernated
    );
    (paused && !sb.is_hibernating() && sb.network().auto_resume).then_some(sb)
}

/// `sb`, resumed first if it is paused or hibernated and resumes on requests
/// (`network.auto_resume`, E2B's `autoResume`); as it is otherwise. The sandbox that answers is
/// the one returned (a wake from hibernation relaunches it).
pub async fn auto_resumed(st: &AppState, sb: Arc<Sandbox>) -> Result<Arc<Sandbox>, ApiError> {
    let paused = matches!(
        sb.state(),
        crate::store::StoredState::Paused | crate::store::StoredState::Hibernated
    );
    if !paused || !sb.network().auto_resume {
        return Ok(sb);
    }
    tracing::info!(sandbox = %sb.id, "a request resumes the sandbox (auto_resume)");
    let (sb, _report) = st.sandboxes.resume(&sb.id).await?;
    Ok(sb)
}

/// Send `req` to the sandbox's agent at `uri` (a path with its query) and return the agent's
/// answer, streamed; when the agent switches protocols (WebSocket), the client's connection and the
/// agent's are spliced together. An execution in a sandbox that injects secrets is registered in
/// flight until its answer's stream ends (the audit log's `secret.use` events name it).
pub async fn send(
    st: &AppState,
    sb: &Sandbox,
    mut req: Request,
    uri: &str,
) -> Result<Response, ApiError> {
    let running = (is_execution(uri) && sb.injects_secrets()).then(|| {
        let by = match req.extensions().get::<crate::auth::Caller>() {
            Some(c) => c.key_prefix.as_str(),
            None => "sandbox-token",
        };
        st.sandboxes.secret_uses.executions.start(&sb.id, by)
    });
    let client_upgrade = req
        .headers()
        .contains_key(header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let out = upstream_request(req, uri)?;
    let mut resp = sb
        .agent
        .send(out.map(crate::agent_client::body::boxed))
        .await
        .map_err(|e| unreachable(sb, &e))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            lizard_http::splice(client, hyper::upgrade::on(&mut resp));
        }
    }
    let (parts, body) = resp.into_parts();
    let body = match running {
        // The registration lives as long as the answer's body: to its end, or the client's leaving.
        Some(guard) => Body::new(http_body_util::BodyExt::map_frame(body, move |f| {
            let _in_flight = &guard;
            f
        })),
        None => Body::new(body),
    };
    let mut resp = Response::from_parts(parts, body).into_response();
    resp.extensions_mut().insert(FromSandbox);
    Ok(resp)
}

/// Whether agent URI `uri` runs code: Lizard's `/execute` or E2B's code interpreter's.
fn is_execution(uri: &str) -> bool {
    let path = uri.split('?').next().unwrap_or_default();
    path == "/execute"
        || path
            .strip_prefix("/e2b/")
            .and_then(|p| p.strip_suffix("/execute"))
            .is_some_and(|port| port.parse() == Ok(lizard_proto::e2b::CODE_INTERPRETER_PORT))
}

/// Marks an answer that came from inside a sandbox (its agent, or a service behind the ports
/// proxy): its status is the sandbox's, not the server's. `crate::gate` does not count a 401 so
/// marked as an authentication failure of the caller's (no `auth.failed` event, no charge to the
/// caller's bucket): code in a sandbox could otherwise forge audit events with the caller's
/// address and throttle the caller's whole project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FromSandbox;

/// The request the agent gets for `req`: same method and body (not read here), `uri`, the
/// [`upstream_headers`].
fn upstream_request(req: Request, uri: &str) -> Result<Request, ApiError> {
    let uri: Uri = uri
        .parse()
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, format!("path {uri:?}: {e}")))?;
    let (parts, body) = req.into_parts();
    let mut out = Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = upstream_headers(&parts.headers);
    Ok(out)
}

/// The headers of a request as they go to the agent: its end-to-end headers (an upgrade stays an
/// upgrade) without those named by its `Connection` header, the [`SERVER_ONLY`] ones, a Bearer
/// `Authorization` and a `lizard.key.*` WebSocket subprotocol; `Host: agent`.
fn upstream_headers(from: &HeaderMap) -> HeaderMap {
    let mut out = lizard_http::end_to_end_headers(from, from.get(header::UPGRADE));
    for name in SERVER_ONLY {
        out.remove(name);
    }
    let kept: Vec<HeaderValue> = out
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter(|v| !is_bearer(v))
        .cloned()
        .collect();
    out.remove(header::AUTHORIZATION);
    for v in kept {
        out.append(header::AUTHORIZATION, v);
    }
    // An API key offered as a WebSocket subprotocol is the server's (crate::state::ws_key).
    let protocols: Vec<&str> = crate::state::ws_protocols(from)
        .filter(|p| !p.starts_with(lizard_proto::WS_KEY_PROTOCOL_PREFIX))
        .collect();
    out.remove(header::SEC_WEBSOCKET_PROTOCOL);
    if let Ok(v) = HeaderValue::from_str(&protocols.join(", ")) {
        if !protocols.is_empty() {
            out.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
        }
    }
    out.insert(header::HOST, HeaderValue::from_static("agent"));
    out
}

/// Whether an `Authorization` value is a Bearer credential: a Lizard API key, or one meant to be
/// (the scheme is case-insensitive, RFC 9110 §11.1).
fn is_bearer(v: &HeaderValue) -> bool {
    let scheme = v
        .as_bytes()
        .split(|b| b.is_ascii_whitespace())
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    scheme.eq_ignore_ascii_case(b"bearer")
}

/// The answer when the agent could not be reached (or the exchange broke), with its cause.
fn unreachable(sb: &Sandbox, e: &crate::agent_client::AgentError) -> ApiError {
    let msg = lizard_http::api::error_chain(e);
    tracing::warn!(sandbox = %sb.id, error = %msg, "forwarding to the agent");
    ApiError::new(
        ErrorCode::Unavailable,
        format!("the sandbox's agent is not reachable: {msg}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::HeaderName;
    use axum::http::Method;

    #[test]
    fn executions_are_lizards_and_e2bs_execute_only() {
        assert!(is_execution("/execute"));
        assert!(is_execution("/execute?x=1"));
        assert!(is_execution("/e2b/49999/execute"));
        for other in [
            "/executes",
            "/e2b/49983/execute",
            "/contexts",
            "/ports/8000/execute",
        ] {
            assert!(!is_execution(other), "{other}");
        }
    }

    #[test]
    fn the_agents_port_is_refused() {
        let e = refuse_agent_port(AGENT_PORT).unwrap_err();
        assert_eq!(e.0.code, ErrorCode::PermissionDenied);
        assert!(refuse_agent_port(8000).is_ok());
        assert!(refuse_agent_port(49999).is_ok());
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    /// The values of `name` in `h`, in order.
    fn values(h: &HeaderMap, name: &str) -> Vec<String> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_key_offered_as_a_websocket_subprotocol_is_taken_and_never_forwarded() {
        let h = headers(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            (
                "sec-websocket-protocol",
                "lizard.pty.v1, lizard.key.lz_secret",
            ),
            ("sec-websocket-protocol", "other"),
        ]);
        assert_eq!(crate::state::bearer_token(&h), Some("lz_secret"));
        let out = upstream_headers(&h);
        assert_eq!(
            values(&out, "sec-websocket-protocol"),
            ["lizard.pty.v1, other"]
        );
        // Only the key: nothing offered is left out.
        let h = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "lizard.key.k"),
        ]);
        assert!(upstream_headers(&h).get("sec-websocket-protocol").is_none());
        // Not a WebSocket handshake: no key from there.
        let h = headers(&[("sec-websocket-protocol", "lizard.key.k")]);
        assert_eq!(crate::state::bearer_token(&h), None);
    }

    #[test]
    fn end_to_end_headers_pass_and_server_credentials_stay() {
        let from = headers(&[
            ("host", "lizard.example:8000"),
            ("content-type", "application/json"),
            ("content-length", "12"),
            ("accept", "application/x-ndjson"),
            ("accept-encoding", "gzip"),
            ("cookie", "session=abc"),
            ("x-custom", "1"),
            ("x-custom", "2"),
            ("connect-timeout-ms", "500"),
            ("authorization", "Bearer lz_secret"),
            ("x-api-key", "lz_secret"),
            ("x-access-token", "tok"),
            ("e2b-traffic-access-token", "tok"),
            ("e2b-sandbox-id", "sbx"),
            ("e2b-sandbox-port", "49983"),
            ("connection", "keep-alive, X-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "only for the next hop"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic cHJveHk6cHc="),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
        ]);
        let out = upstream_headers(&from);
        for (name, want) in [
            ("host", vec!["agent"]),
            ("content-type", vec!["application/json"]),
            ("content-length", vec!["12"]),
            ("accept", vec!["application/x-ndjson"]),
            ("accept-encoding", vec!["gzip"]),
            ("cookie", vec!["session=abc"]),
            ("x-custom", vec!["1", "2"]),
            ("connect-timeout-ms", vec!["500"]),
        ] {
            assert_eq!(values(&out, name), want, "{name} passes");
        }
        for name in [
            "authorization",
            "x-api-key",
            "x-access-token",
            "e2b-traffic-access-token",
            "e2b-sandbox-id",
            "e2b-sandbox-port",
            "connection",
            "keep-alive",
            "x-hop",
            "proxy-connection",
            "proxy-authorization",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ] {
            assert!(out.get(name).is_none(), "{name} is dropped: {out:?}");
        }
        assert_eq!(out.len(), 9, "nothing else: {out:?}");
    }

    #[test]
    fn only_bearer_authorization_is_the_servers() {
        // envd's user (`Basic <user>:`) and a service's own schemes go to the sandbox.
        let from = headers(&[
            ("authorization", "bearer lz_lowercase"),
            ("authorization", "Basic dXNlcjo="),
            ("authorization", "BEARER\tlz_tab"),
            ("authorization", "Digest username=\"u\""),
            ("authorization", "Bearer"),
            ("authorization", "Bearerish x"),
        ]);
        assert_eq!(
            values(&upstream_headers(&from), "authorization"),
            ["Basic dXNlcjo=", "Digest username=\"u\"", "Bearerish x"]
        );
    }

    #[test]
    fn upgrades_stay_upgrades_without_their_hop_options() {
        let from = headers(&[
            ("connection", "Upgrade"),
            ("connection", "x-hop, not a header name, "),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("x-hop", "1"),
        ]);
        let out = upstream_headers(&from);
        assert_eq!(values(&out, "upgrade"), ["websocket"]);
        assert_eq!(values(&out, "connection"), ["upgrade"]);
        assert_eq!(
            values(&out, "sec-websocket-key"),
            ["dGhlIHNhbXBsZSBub25jZQ=="]
        );
        assert_eq!(values(&out, "sec-websocket-version"), ["13"]);
        assert!(out.get("x-hop").is_none());
    }

    #[tokio::test]
    async fn upstream_request_keeps_method_path_query_and_body() {
        let mut req = Request::new(Body::from("print(1)"));
        *req.method_mut() = Method::PUT;
        *req.uri_mut() = "/v1/sandboxes/sbx/files?path=/a%20b".parse().unwrap();
        *req.headers_mut() = headers(&[("authorization", "Bearer k"), ("x-a", "b")]);
        let out = upstream_request(req, "/files?path=/a%20b").unwrap();
        assert_eq!(out.method(), Method::PUT);
        assert_eq!(out.uri(), "/files?path=/a%20b");
        assert_eq!(values(out.headers(), "host"), ["agent"]);
        assert_eq!(values(out.headers(), "x-a"), ["b"]);
        assert!(out.headers().get("authorization").is_none());
        let body = axum::body::to_bytes(out.into_body(), 100).await.unwrap();
        assert_eq!(body, "print(1)");
        let bad = upstream_request(Request::new(Body::empty()), "/a b").unwrap_err();
        assert_eq!(bad.0.code, ErrorCode::InvalidRequest);
    }

    proptest::proptest! {
        /// Whatever a request carries, no server credential, routing or hop-by-hop header reaches
        /// the agent, `Host` is the agent's, and every other header passes with all its values.
        #[test]
        fn no_server_header_crosses(
            pairs in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "authorization", "x-api-key", "X-Access-Token", "e2b-sandbox-id",
                        "E2b-Sandbox-Port", "e2b-traffic-access-token", "connection", "te",
                        "transfer-encoding", "keep-alive", "proxy-connection", "host", "cookie",
                        "x-a", "x-b", "accept", "content-type",
                    ]),
                    proptest::prop_oneof!["[ -~]{0,20}", "(x-a|x-b|cookie|accept|Content-Type)(, ?x-b)?"],
                ),
                0..12,
            ),
        ) {
            let mut from = HeaderMap::new();
            for (k, v) in &pairs {
                from.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            let out = upstream_headers(&from);
            proptest::prop_assert_eq!(values(&out, "host"), ["agent"]);
            for name in SERVER_ONLY.iter().chain(&["connection", "te", "transfer-encoding", "keep-alive"]) {
                proptest::prop_assert!(out.get(*name).is_none(), "{} crossed", name);
            }
            proptest::prop_assert!(out.get_all("authorization").iter().all(|v| !is_bearer(v)));
            let named: Vec<String> = values(&from, "connection")
                .iter()
                .flat_map(|c| c.split(',').map(|o| o.trim().to_ascii_lowercase()).collect::<Vec<_>>())
                .collect();
            for name in ["x-a", "x-b", "accept", "content-type", "cookie"] {
                if named.iter().any(|n| n == name) {
                    proptest::prop_assert!(out.get(name).is_none(), "{} was named in Connection", name);
                } else {
                    proptest::prop_assert_eq!(values(&out, name), values(&from, name));
                }
            }
        }
    }
}
