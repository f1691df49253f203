//! Router-level tests: the server's whole router (`lizard_server::router::router`, every layer —
//! the gate, E2B's traffic routing, the body limit, the drain — and every fallback) called in
//! process, with a real store, keys and lifecycle, but no sandbox: what a request gets before any
//! sandbox is involved (authentication, project scoping, typed errors for every malformed
//! request, routing, limits). No root, no processes, no sockets. What reaches a sandbox is tested
//! end to end with the real agent (`crates/lizard/tests`).

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use lizard_proto::{ErrorBody, ErrorCode};
use lizard_server::sandboxes::{CheckpointTool, SandboxConfig, Sandboxes};
use lizard_server::state::AppState;
use lizard_server::store::{Retention, Store};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tower_service::Service;

struct Api {
    router: Router,
    admin: String,
    _dir: tempfile::TempDir,
}

/// A server's router over a fresh data dir: its admin key, no sandbox. `rate`/`burst`: the rate
/// limit (as `lizard serve --rate-limit-rps/--rate-limit-burst`).
fn api_with_limits(rate: f64, burst: u32) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let store = Arc::new(Store::open(&data.join("lizard.db")).unwrap());
    let admin = lizard_server::auth::issue_key(&store, None).unwrap();
    // The agent's executable is never run here: any file will do.
    let exe =
        lizard_jail::exe::SealedExe::copy_of(std::path::Path::new("/bin/true"), "agent").unwrap();
    let cfg = SandboxConfig {
        data_dir: data.clone(),
        templates_data_dir: data.clone(),
        lizard_bin: "/bin/false".into(),
        agent_exe: Arc::new(exe),
        agent_wrapper: None,
        agent_exe_file: None,
        default_template: "code-interpreter-v1".into(),
        default_timeout_ms: 300_000,
        max_timeout_ms: 24 * 3600 * 1000,
        default_limits: Default::default(),
        id_shift: 1 << 20,
        ready_timeout: Duration::from_secs(1),
        pool_size: 0,
        volume_owner: (1 << 20, 1 << 20),
        egress: Arc::new(lizard_server::egress::EgressService::new(Default::default())),
        secrets: Arc::new(
            lizard_server::secrets::SecretBox::open(&data.join("secrets.key")).unwrap(),
        ),
        hibernate_after: None,
        agent_env: Default::default(),
        hibernate_below_mb: None,
        agent_limits: Default::default(),
        final_sample_deadline: Duration::from_millis(100),
        executions_retention: Retention::default(),
        disk_overcommit: 1.0,
        checkpoint: CheckpointTool::default(),
        packages: None,
    };
    let sandboxes = Sandboxes::new(cfg, store);
    let templates = lizard_server::templates::Templates::new(sandboxes.clone(), Default::default());
    let state = Arc::new(AppState {
        sandboxes,
        e2b: lizard_server::e2b::E2b::open(&data, None).unwrap(),
        limiter: lizard_server::ratelimit::RateLimiter::new(rate, burst),
        audit_retention: Retention::default(),
        templates,
    });
    Api {
        router: lizard_server::router::router(state),
        admin,
        _dir: dir,
    }
}

fn api() -> Api {
    api_with_limits(0.0, 0)
}

struct Answer {
    status: StatusCode,
    body: Value,
}

impl Answer {
    /// The typed error body every failure has.
    fn error(&self) -> ErrorBody {
        serde_json::from_value(self.body.clone())
            .unwrap_or_else(|e| panic!("not an ErrorBody ({e}): {}", self.body))
    }
}

impl Api {
    async fn call(&mut self, req: Request<Body>) -> Answer {
        let r = self.router.call(req).await.unwrap();
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer { status, body }
    }

    async fn req(
        &mut self,
        method: Method,
        uri: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(k) = key {
            b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        let req = match body {
            Some(v) => b
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        };
        self.call(req.unwrap()).await
    }

    async fn admin(&mut self, method: Method, uri: &str, body: Option<Value>) -> Answer {
        let key = self.admin.clone();
        self.req(method, uri, Some(&key), body).await
    }
}

#[tokio::test]
async fn public_routes_answer_without_a_key() {
    let mut a = api();
    let h = a.req(Method::GET, "/health", None, None).await;
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.body["status"], "ok");
    let doc = a.req(Method::GET, "/v1/openapi.json", None, None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.body["openapi"], "3.1.0");
}

#[tokio::test]
async fn every_route_needs_a_known_key_and_says_how_to_send_one() {
    let mut a = api();
    for (method, uri) in [
        (Method::GET, "/v1/sandboxes"),
        (Method::POST, "/v1/sandboxes"),
        (Method::GET, "/v1/projects"),
        (Method::GET, "/v1/volumes"),
        (Method::GET, "/v1/audit"),
        (Method::GET, "/v1/sandboxes/sb1/contexts"),
    ] {
        for key in [None, Some("lz_not_a_key")] {
            let r = a.req(method.clone(), uri, key, None).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {uri} {key:?}");
            let e = r.error();
            assert_eq!(e.code, ErrorCode::Unauthenticated);
            assert!(e.message.contains("Authorization: Bearer"), "{}", e.message);
        }
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_are_typed_errors() {
    let mut a = api();
    let r = a.admin(Method::GET, "/v1/nothing-here", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.error().code, ErrorCode::NotFound);
    let r = a.admin(Method::PUT, "/v1/projects", None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.error().code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn malformed_requests_are_typed_400s_and_oversized_ones_413s() {
    let mut a = api();
    let key = a.admin.clone();
    let raw = |body: &str, ct: Option<&str>| {
        let mut b =
            Request::post("/v1/projects").header(header::AUTHORIZATION, format!("Bearer {key}"));
        if let Some(ct) = ct {
            b = b.header(header::CONTENT_TYPE, ct);
        }
        b.body(Body::from(body.to_owned())).unwrap()
    };
    let r = a.call(raw("{", Some("application/json"))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.error().message.contains("malformed JSON"), "{}", r.body);
    let r = a
        .call(raw(r#"{"name": 3}"#, Some("application/json")))
        .await;
    assert_eq!(r.error().code, ErrorCode::InvalidRequest);
    let r = a
        .call(raw(r#"{"name": "p", "nope": 1}"#, Some("application/json")))
        .await;
    assert!(r.error().message.contains("unknown field"), "{}", r.body);
    let r = a.call(raw(r#"{"name": "p"}"#, None)).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(r.error().code, ErrorCode::UnsupportedMediaType);
    // A body over the 16 MiB limit, announced or not.
    let big = "x".repeat(lizard_http::api::MAX_BODY_BYTES + 1);
    let r = a.call(raw(&big, Some("application/json"))).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.error().code, ErrorCode::PayloadTooLarge);
    // A query that does not parse.
    let r = a.admin(Method::GET, "/v1/audit?limit=many", None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error().code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn a_project_key_sees_only_its_own_project() {
    let mut a = api();
    let made = a
        .admin(Method::POST, "/v1/projects", Some(json!({"name": "alpha"})))
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    let alpha = made.body["api_key"].as_str().unwrap().to_string();
    let other = a
        .admin(Method::POST, "/v1/projects", Some(json!({"name": "beta"})))
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
    // Its own project, yes; another's is a 404, as if it did not exist.
    let own = a
        .req(Method::GET, "/v1/projects/alpha", Some(&alpha), None)
        .await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    for uri in [
        "/v1/projects/beta",
        "/v1/projects/beta/usage",
        "/v1/projects/beta/secrets",
    ] {
        let r = a.req(Method::GET, uri, Some(&alpha), None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}: {}", r.body);
        assert_eq!(r.error().code, ErrorCode::NotFound);
    }
    // Admin-only calls are refused to it.
    let r = a
        .req(
            Method::POST,
            "/v1/projects",
            Some(&alpha),
            Some(json!({"name": "gamma"})),
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    // A sandbox of no one's, and another project's, look the same: not found.
    let r = a
        .req(Method::GET, "/v1/sandboxes/nope", Some(&alpha), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = a
        .req(
            Method::POST,
            "/v1/sandboxes/nope/execute",
            Some(&alpha),
            Some(json!({"code": "1"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.error().code, ErrorCode::NotFound);
    // Its list is its own (empty).
    let r = a
        .req(Method::GET, "/v1/sandboxes", Some(&alpha), None)
        .await;
    assert_eq!(r.body, json!([]));
}

#[tokio::test]
async fn create_is_refused_with_a_typed_error_before_any_launch() {
    let mut a = api();
    for (body, code) in [
        (json!({"template": "no-such-template"}), ErrorCode::NotFound),
        (json!({"timeout_ms": 0}), ErrorCode::InvalidRequest),
        (
            json!({"envs": {"BAD NAME": "x"}}),
            ErrorCode::InvalidRequest,
        ),
        (
            json!({"network": {"egress": {"allow": ["a b"]}}}),
            ErrorCode::InvalidRequest,
        ),
    ] {
        let r = a
            .admin(Method::POST, "/v1/sandboxes", Some(body.clone()))
            .await;
        assert_eq!(r.error().code, code, "{body}: {}", r.body);
    }
    // Nothing was launched or kept.
    let r = a.admin(Method::GET, "/v1/sandboxes", None).await;
    assert_eq!(r.body, json!([]));
}

#[tokio::test]
async fn lifecycle_calls_and_failed_authentications_reach_the_audit_log() {
    let mut a = api();
    a.admin(Method::POST, "/v1/projects", Some(json!({"name": "alpha"})))
        .await;
    a.req(Method::GET, "/v1/sandboxes", Some("lz_wrong"), None)
        .await;
    let log = a.admin(Method::GET, "/v1/audit", None).await;
    let actions: Vec<&str> = log
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"project.create"), "{actions:?}");
    assert!(actions.iter().any(|a| a.starts_with("auth")), "{actions:?}");
}

#[tokio::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let mut a = api_with_limits(1.0, 3);
    let mut limited = None;
    for _ in 0..10 {
        let key = a.admin.clone();
        let req = Request::get("/v1/projects")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .body(Body::empty())
            .unwrap();
        let r = a.router.call(req).await.unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("10 requests at once go past a burst of 3");
    assert!(r.headers().contains_key(header::RETRY_AFTER));
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let e: ErrorBody = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(e.code, ErrorCode::RateLimited);
}
