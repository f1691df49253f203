//! Router-level tests: the server's whole router (`lizard_server::router::router`, every layer —
//! the gate, E2B's traffic routing, the body limit, the drain — and every fallback) called in
//! process, with a real store, keys and lifecycle: what a request gets before any sandbox is
//! involved (authentication, project scoping, typed errors for every malformed request, routing,
//! limits), and what crosses to a sandbox's agent and back — against a stand-in agent in this
//! process that speaks the agent's protocol on a Unix socket (`Sandboxes::insert_stand_in`, the
//! lifecycle's `stand-in` feature). No root, no sandbox processes. The real agent, with real
//! kernels, is tested end to end (`crates/lizard/tests`).

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
    state: Arc<AppState>,
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
        pool_max: 0,
        pool_refills: 1,
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
        host_zygotes: false,
    };
    let sandboxes = Sandboxes::new(cfg, store);
    let templates = lizard_server::templates::Templates::new(sandboxes.clone(), Default::default());
    let state = Arc::new(AppState {
        sandboxes,
        e2b: lizard_server::e2b::E2b::open(&data, None).unwrap(),
        limiter: lizard_server::ratelimit::RateLimiter::new(rate, burst),
        // A sandbox's own traffic: the server's default budget.
        sandbox_limiter: lizard_server::ratelimit::RateLimiter::new(5000.0, 10_000),
        audit_retention: Retention::default(),
        templates,
    });
    Api {
        router: lizard_server::router::router(state.clone()),
        state,
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
async fn the_web_console_is_served_at_the_root_without_a_key() {
    let mut a = api();
    for key in [None, Some("lz_not_a_key")] {
        for (uri, ct) in [
            ("/", "text/html; charset=utf-8"),
            ("/console/console.js", "text/javascript; charset=utf-8"),
            ("/console/console.css", "text/css; charset=utf-8"),
        ] {
            let mut b = Request::builder().uri(uri);
            if let Some(k) = key {
                b = b.header(header::AUTHORIZATION, format!("Bearer {k}"));
            }
            let r = a.router.call(b.body(Body::empty()).unwrap()).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{uri} {key:?}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], ct, "{uri}");
        }
    }
    // The console's pages are fragments of `/`: the API and E2B's routes are as they were.
    let r = a.req(Method::GET, "/sandboxes", None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = a.req(Method::POST, "/", None, None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
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

/// What the stand-in agent was sent.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: axum::http::HeaderMap,
    body: bytes::Bytes,
}

/// A stand-in for a sandbox's agent, served by this process on a Unix socket: `POST /execute`
/// answers the agent's NDJSON (`start`, one `stdout` frame at once, `end` once `release` is
/// notified), every other request a 404 of the agent's shape. It keeps what it was sent.
struct StandIn {
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    release: Arc<tokio::sync::Notify>,
    dir: tempfile::TempDir,
}

impl StandIn {
    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("agent.sock")
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn frame(seq: u64, event: lizard_proto::ExecutionEvent) -> String {
    let mut line = serde_json::to_string(&lizard_proto::EventFrame { seq, event }).unwrap();
    line.push('\n');
    line
}

async fn stand_in() -> StandIn {
    use axum::response::IntoResponse;
    use futures_util::StreamExt;
    use lizard_proto::ExecutionEvent;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("cgroup")).unwrap();
    let listener = tokio::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
    let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Default::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let (s, r) = (seen.clone(), release.clone());
    let app = Router::new().fallback(move |req: Request<Body>| {
        let (seen, release) = (s.clone(), r.clone());
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            seen.lock().unwrap().push(Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                headers: parts.headers.clone(),
                body,
            });
            if parts.method == Method::GET && parts.uri.path() == "/executions" {
                return execution_log(&seen).await.into_response();
            }
            if parts.method != Method::POST || parts.uri.path() != "/execute" {
                return (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"code": "not_found", "message": "no such route"})),
                )
                    .into_response();
            }
            let first = futures_util::stream::iter([
                frame(
                    0,
                    ExecutionEvent::Start {
                        execution_count: 1,
                        context_id: "ctx_standin".into(),
                    },
                ),
                frame(
                    1,
                    ExecutionEvent::Stdout {
                        text: "hi\n".into(),
                    },
                ),
            ]);
            let last = futures_util::stream::once(async move {
                release.notified().await;
                frame(
                    2,
                    ExecutionEvent::End {
                        status: lizard_proto::ExecutionStatus::Ok,
                        duration_ms: 1,
                        usage: None,
                    },
                )
            });
            let frames = first
                .chain(last)
                .map(|line| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line)));
            (
                [(header::CONTENT_TYPE, lizard_proto::NDJSON)],
                Body::from_stream(frames),
            )
                .into_response()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    StandIn { seen, release, dir }
}

/// The stand-in's execution log, from the start: one finished run (the one execution a test
/// sends). Answered once a second read has come in, or after 300 ms: two reads at once (two usage
/// samples of the sandbox overlapping) both get the run.
async fn execution_log(seen: &std::sync::Mutex<Vec<Seen>>) -> axum::Json<Value> {
    let reads = || {
        let seen = seen.lock().unwrap();
        seen.iter()
            .filter(|r| r.uri.starts_with("/executions"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_millis(300);
    while reads() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    axum::Json(json!({
        "next": 2,
        "dropped": 0,
        "records": [{
            "seq": 1, "context_id": "ctx_standin", "language": "python", "status": "ok",
            "wall_ms": 1, "cpu_ms": 0, "peak_rss_bytes": 0, "finished_at_ms": now,
        }],
    }))
}

/// A sandbox `id` of project `project` (made) whose agent is `agent`.
async fn sandbox_of(a: &mut Api, agent: &StandIn, id: &str, project: &str, network: Value) {
    let r = a
        .admin(Method::POST, "/v1/projects", Some(json!({"name": project})))
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    a.state.sandboxes.insert_stand_in(
        id,
        project,
        serde_json::from_value(network).unwrap(),
        &agent.dir.path().join("cgroup"),
        agent.socket(),
    );
}

fn execute(key: &str, id: &str) -> Request<Body> {
    Request::post(format!("/v1/sandboxes/{id}/execute?x=1"))
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, lizard_proto::NDJSON)
        .header("x-api-key", key)
        .header("x-custom", "kept")
        .body(Body::from(r#"{"code": "print('hi')"}"#))
        .unwrap()
}

#[tokio::test]
async fn an_execution_reaches_the_agent_as_it_expects_and_streams_back_frame_by_frame() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sbstandin1", "alpha", json!({})).await;
    let key = a.admin.clone();
    let r = a.router.call(execute(&key, "sbstandin1")).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CONTENT_TYPE], lizard_proto::NDJSON);
    // The first frames arrive while the run goes on (nothing is buffered to its end).
    let mut body = r.into_body();
    let mut got = String::new();
    while got.lines().count() < 2 {
        let f = body.frame().await.unwrap().unwrap();
        got.push_str(std::str::from_utf8(f.data_ref().unwrap()).unwrap());
    }
    assert!(!got.contains("\"end\""), "{got}");
    agent.release.notify_one();
    got.push_str(std::str::from_utf8(&body.collect().await.unwrap().to_bytes()).unwrap());
    let frames: Vec<lizard_proto::EventFrame> = got
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        frames.iter().map(|f| f.event.kind()).collect::<Vec<_>>(),
        ["start", "stdout", "end"]
    );
    let run: lizard_proto::Execution = frames.into_iter().map(|f| f.event).collect();
    assert_eq!(run.stdout, ["hi\n"]);
    // What the agent got: its own path with the query, the body as sent, the client's own
    // headers, and none of the server's credentials.
    let seen = agent.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.uri.as_str()),
        ("POST", "/execute?x=1")
    );
    assert_eq!(&s.body[..], br#"{"code": "print('hi')"}"#);
    assert_eq!(s.headers[header::HOST], "agent");
    assert_eq!(s.headers["x-custom"], "kept");
    assert_eq!(s.headers[header::ACCEPT], lizard_proto::NDJSON);
    assert!(
        !s.headers.contains_key(header::AUTHORIZATION),
        "{:?}",
        s.headers
    );
    assert!(!s.headers.contains_key("x-api-key"), "{:?}", s.headers);
    let text = format!("{:?}", s.headers);
    assert!(!text.contains(&key), "the key crossed: {text}");
}

#[tokio::test]
async fn another_projects_key_never_reaches_the_agent() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sbstandin2", "alpha", json!({})).await;
    let r = a
        .admin(Method::POST, "/v1/projects", Some(json!({"name": "beta"})))
        .await;
    let beta = r.body["api_key"].as_str().unwrap().to_string();
    for (method, path) in [
        (Method::POST, "/v1/sandboxes/sbstandin2/execute"),
        (Method::GET, "/v1/sandboxes/sbstandin2/contexts"),
        (
            Method::GET,
            "/v1/sandboxes/sbstandin2/files?path=/etc/passwd",
        ),
        (Method::GET, "/v1/sandboxes/sbstandin2/ports/8000/"),
    ] {
        let r = a.req(method, path, Some(&beta), None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.body);
        assert_eq!(r.error().code, ErrorCode::NotFound);
    }
    assert!(agent.seen().is_empty(), "{:?}", agent.seen());
    // The agent's own port is refused before anything is sent, even to the owner.
    let r = a
        .admin(Method::GET, "/v1/sandboxes/sbstandin2/ports/8080/", None)
        .await;
    assert_eq!(r.error().code, ErrorCode::PermissionDenied, "{}", r.body);
    // The owner's requests do reach it, and the agent's answer (here a 404) is passed as it is.
    let r = a
        .admin(Method::GET, "/v1/sandboxes/sbstandin2/contexts", None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body["message"], "no such route");
    assert_eq!(agent.seen().len(), 1);
}

#[tokio::test]
async fn an_agent_that_is_not_there_is_a_typed_503() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sbstandin3", "alpha", json!({})).await;
    std::fs::remove_file(agent.socket()).unwrap();
    let r = a
        .admin(
            Method::POST,
            "/v1/sandboxes/sbstandin3/execute",
            Some(json!({"code": "1"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    let e = r.error();
    assert_eq!(e.code, ErrorCode::Unavailable);
    assert!(
        e.message.contains("agent is not reachable"),
        "{}",
        e.message
    );
}

/// A sandbox with secret injection rules: each execution is registered in flight, with the key
/// that sent it, for exactly as long as its answer streams (the audit log's `secret.use` events
/// name it); a sandbox without rules registers nothing.
#[tokio::test]
async fn executions_are_in_flight_while_their_answer_streams() {
    let mut a = api();
    let agent = stand_in().await;
    let network = json!({
        "egress": {"allow": ["api.example.com"]},
        "inject": [{"host": "api.example.com", "headers": {"Authorization": "Bearer ${secret:t}"}}]
    });
    sandbox_of(&mut a, &agent, "sbstandin4", "alpha", network).await;
    sandbox_of(&mut a, &agent, "sbstandin5", "alpha5", json!({})).await;
    let executions = a.state.sandboxes.secret_uses.executions.clone();
    let key = a.admin.clone();
    let r = a.router.call(execute(&key, "sbstandin4")).await.unwrap();
    let plain = a.router.call(execute(&key, "sbstandin5")).await.unwrap();
    let during = executions.in_flight("sbstandin4");
    assert_eq!(during.count, 1, "{during:?}");
    assert_eq!(
        during.keys.into_iter().collect::<Vec<_>>(),
        [key[..8].to_string()]
    );
    assert_eq!(executions.in_flight("sbstandin5").count, 0);
    agent.release.notify_one();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&body).unwrap().contains("\"end\""));
    assert_eq!(
        executions.in_flight("sbstandin4").count,
        0,
        "ended with its stream"
    );
    // A client that leaves mid-stream ends it too.
    let r = a.router.call(execute(&key, "sbstandin4")).await.unwrap();
    assert_eq!(executions.in_flight("sbstandin4").count, 1);
    drop(r);
    assert_eq!(executions.in_flight("sbstandin4").count, 0);
    drop(plain);
}

/// The rate limit of a key is the control plane's: a sandbox's own traffic (here its contexts) by a
/// key that may use it counts against the sandbox's budget, not the key's — and by a key that may
/// not, against that key's (it cannot spend a sandbox's budget it does not own).
#[tokio::test]
async fn a_sandboxs_own_traffic_does_not_spend_the_keys_budget() {
    let mut a = api_with_limits(0.01, 3);
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sbrate1", "alpha", json!({})).await;
    // Its project was made with one of the key's 3 tokens.
    for i in 0..30 {
        let r = a
            .admin(Method::GET, "/v1/sandboxes/sbrate1/contexts", None)
            .await;
        assert_ne!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "call {i}: {}",
            r.body
        );
    }
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(a.admin(Method::GET, "/v1/projects", None).await.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        2,
        "the control plane kept its own budget: {statuses:?}"
    );
    assert_eq!(statuses[3], StatusCode::TOO_MANY_REQUESTS);
    // Another project's key: its calls to a sandbox it cannot see are its own key's.
    let mut b = api_with_limits(0.01, 3);
    sandbox_of(&mut b, &agent, "sbrate2", "alpha", json!({})).await;
    let r = b
        .admin(Method::POST, "/v1/projects", Some(json!({"name": "beta"})))
        .await;
    let beta = r.body["api_key"].as_str().unwrap().to_string();
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(
            b.req(
                Method::GET,
                "/v1/sandboxes/sbrate2/contexts",
                Some(&beta),
                None,
            )
            .await
            .status,
        );
    }
    assert_eq!(&got[..3], [StatusCode::NOT_FOUND; 3], "{got:?}");
    assert_eq!(got[3], StatusCode::TOO_MANY_REQUESTS, "{got:?}");
}

#[tokio::test]
async fn a_sandboxs_metrics_are_its_cgroups_and_only_for_keys_that_see_it() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sbmetrics1", "alpha", json!({})).await;
    std::fs::write(agent.dir.path().join("cgroup/memory.current"), "12345\n").unwrap();
    let before = lizard_server::store::now_ms();
    // Before the sampler's first two samples: one taken now, from the sandbox's cgroup.
    let r = a
        .admin(Method::GET, "/v1/sandboxes/sbmetrics1/metrics", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let samples: Vec<lizard_proto::MetricSample> = serde_json::from_value(r.body).unwrap();
    assert_eq!(samples.len(), 1, "{samples:?}");
    assert_eq!(samples[0].memory_bytes, 12345);
    assert!(samples[0].at_ms >= before, "{samples:?}");
    assert!((0.0..=100.0).contains(&samples[0].cpu_pct), "{samples:?}");
    // A range asks the sampler only (nothing sampled yet here).
    let r = a
        .admin(Method::GET, "/v1/sandboxes/sbmetrics1/metrics?from=0", None)
        .await;
    assert_eq!(r.body, json!([]));
    let r = a
        .admin(Method::GET, "/v1/sandboxes/sbmetrics1/metrics?from=x", None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.error().code, ErrorCode::InvalidRequest);
    // Another project's key: not found, as for every other route of the sandbox.
    let r = a
        .admin(Method::POST, "/v1/projects", Some(json!({"name": "beta"})))
        .await;
    let beta = r.body["api_key"].as_str().unwrap().to_string();
    let r = a
        .req(
            Method::GET,
            "/v1/sandboxes/sbmetrics1/metrics",
            Some(&beta),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.error().code, ErrorCode::NotFound);
}

/// Two usage samples of one sandbox at once (the sampler's and a kill's final one) count each of
/// its runs once: they are taken one after the other. At once, both read the same run from the
/// agent's log; the second dropped it as impossible (the first had matched it) and wrote back the
/// usage it had read before the first's write, so the run was lost from the usage.
#[tokio::test]
async fn overlapping_usage_samples_lose_no_run() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "sampledtwice", "p", json!({})).await;
    let admin = a.admin.clone();
    // The run ends at once (a permit kept for the stand-in's wait).
    agent.release.notify_one();
    let answer = a.call(execute(&admin, "sampledtwice")).await;
    assert_eq!(answer.status, StatusCode::OK);
    let sandboxes = &a.state.sandboxes;
    let sb = sandboxes.get("sampledtwice").unwrap();
    use lizard_server::sandboxes::metering::sample;
    tokio::join!(sample(sandboxes, &sb), sample(sandboxes, &sb));
    let usage = sandboxes.store.get_usage("sampledtwice").unwrap().unwrap();
    assert_eq!(usage.executions, 1, "{usage:?}");
    assert_eq!(usage.agent_log_seq, 2, "{usage:?}");
}

/// A kill under way — its sandbox already gone from the API (404), the final usage sample still
/// reading the agent's log — is waited for by `finish_kills`, the server's last step at shutdown:
/// a server that exited in between left running a sandbox it had reported gone.
#[tokio::test]
async fn the_shutdown_waits_for_a_kill_under_way() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "killedlate", "p", json!({})).await;
    let sandboxes = a.state.sandboxes.clone();
    let killing = tokio::spawn({
        let sandboxes = sandboxes.clone();
        async move { sandboxes.kill("killedlate").await }
    });
    // The kill's final sample reads the stand-in's log, which answers after 300 ms.
    kill_sampling(&agent).await;
    assert!(
        sandboxes.get("killedlate").is_none(),
        "gone from the API first"
    );
    assert!(
        !killing.is_finished(),
        "the stand-in's log read still waits"
    );
    assert!(sandboxes.finish_kills(Duration::from_secs(30)).await);
    assert!(
        killing.is_finished(),
        "finish_kills returned before the kill did"
    );
    assert!(!agent.dir.path().join("cgroup").exists(), "not destroyed");
}

/// The stand-in's log read by a kill's final sample (the kill is then half-way: its sandbox
/// already gone from the API, not yet destroyed).
async fn kill_sampling(agent: &StandIn) {
    let sampled = tokio::time::timeout(Duration::from_secs(10), async {
        while !agent
            .seen()
            .iter()
            .any(|r| r.uri.starts_with("/executions"))
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(
        sampled.is_ok(),
        "the kill's final sample never read the log"
    );
}

/// A kill whose caller goes away half-way (a client that hung up, a request dropped at the
/// server's shutdown grace) is carried out all the same: its sandbox already answers 404, so a
/// kill stopped there would leave it running.
#[tokio::test]
async fn a_kill_whose_caller_goes_away_is_carried_out() {
    let mut a = api();
    let agent = stand_in().await;
    sandbox_of(&mut a, &agent, "killdropped", "p", json!({})).await;
    let sandboxes = a.state.sandboxes.clone();
    let caller = tokio::spawn({
        let sandboxes = sandboxes.clone();
        async move { sandboxes.kill("killdropped").await }
    });
    kill_sampling(&agent).await;
    caller.abort();
    assert!(sandboxes.finish_kills(Duration::from_secs(30)).await);
    assert!(sandboxes.get("killdropped").is_none());
    assert!(!agent.dir.path().join("cgroup").exists(), "not destroyed");
}
