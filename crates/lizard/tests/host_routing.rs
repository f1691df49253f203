//! Sandbox traffic by host name (`<port>-<sandbox id>.<sandbox domain>`, `crate::hosts` of the
//! server), and what else E2B's SDKs reach that way: the create answer's `domain`, public ports
//! (`allowPublicTraffic`), the one-time token link a browser follows (a cookie of that host only,
//! never shown to the service inside), E2B's signed file URLs, and pausing without keeping the
//! memory (`keepMemory: false`: hibernation), and resuming on a request (`autoResume`).

mod common;

use common::*;
use lizard_test_support::{http, RawAnswer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// A service on port 8000 inside the sandbox that answers every request with what it received:
/// its path and its `Cookie` header.
const ECHO: &str = r#"
import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("path=%s cookie=%s" % (self.path, self.headers.get("Cookie"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
"#;

/// A hostile page on port 8001: HTML with a script, and headers that would reach into the origin
/// it is shown at (a cookie, a service worker's scope, an order to clear the origin's data).
const HOSTILE_PAGE: &str = r#"
import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<script>navigator.serviceWorker.register('/sw.js')</script>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Set-Cookie", "planted=1; Path=/")
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Clear-Site-Data", '"*"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8001), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
"#;

struct Sbx {
    id: String,
    token: String,
    domain: String,
}

async fn e2b_create(s: &Server, key: &str, body: Value) -> (u16, Value) {
    raw(
        &s.addr,
        "POST",
        "/v2/sandboxes",
        &[
            ("X-API-Key", key),
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ],
        &body.to_string(),
    )
    .await
}

async fn echo_sandbox(s: &Server, key: &str, network: Value) -> Sbx {
    let (status, b) = e2b_create(s, key, json!({"templateID": "base", "network": network})).await;
    assert_eq!(status, 201, "{b}");
    let sbx = Sbx {
        id: b["sandboxID"].as_str().unwrap().into(),
        token: b["envdAccessToken"].as_str().unwrap().into(),
        domain: b["domain"]
            .as_str()
            .expect("the create answer names a domain")
            .into(),
    };
    let ex = s
        .run(&sbx.id, json!({"code": ECHO, "language": "python"}))
        .await;
    assert!(ex["error"].is_null(), "{ex}");
    sbx
}

fn get(s: &Server, host: &str, path: &str, headers: &[(&str, &str)]) -> RawAnswer {
    let addr: SocketAddr = s.addr.parse().unwrap();
    let mut h = vec![("Host", host)];
    h.extend_from_slice(headers);
    http(addr, "GET", path, &h, b"").expect("the server answers")
}

fn text(a: &RawAnswer) -> String {
    String::from_utf8_lossy(&a.body).into_owned()
}

#[tokio::test]
async fn a_sandbox_port_is_reached_by_host_name_with_its_token_a_key_or_a_browser_link() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("web").await;
    let sbx = echo_sandbox(&s, &key, json!({})).await;
    let port: u16 = s.addr.rsplit(':').next().unwrap().parse().unwrap();
    // Without --sandbox-domain: localhost and the listener's port, which browsers resolve alone.
    assert_eq!(sbx.domain, format!("localhost:{port}"));
    let host = format!("8000-{}.{}", sbx.id, sbx.domain);

    // Nobody without a credential, whatever the id (the same 401 for one that does not exist).
    let a = get(&s, &host, "/x", &[]);
    assert_eq!(a.status, 401, "{}", text(&a));
    let a = get(&s, &format!("8000-nosuchsandbox.{}", sbx.domain), "/x", &[]);
    assert_eq!(a.status, 401, "{}", text(&a));
    // The token, as E2B's SDKs send it.
    let a = get(
        &s,
        &host,
        "/a?b=1",
        &[("E2B-Traffic-Access-Token", &sbx.token)],
    );
    assert_eq!(a.status, 200, "{}", text(&a));
    assert_eq!(text(&a), "path=/a?b=1 cookie=None");
    // A key that sees the sandbox; another project's key does not.
    let bearer = format!("Bearer {key}");
    let a = get(&s, &host, "/k", &[("Authorization", &bearer)]);
    assert_eq!(a.status, 200, "{}", text(&a));
    // Not for envd or the code interpreter: those want the sandbox's token.
    for p in [49983, 49999] {
        let a = get(
            &s,
            &format!("{p}-{}.{}", sbx.id, sbx.domain),
            "/health",
            &[("Authorization", &bearer)],
        );
        assert_eq!(a.status, 401, "port {p}: {}", text(&a));
    }
    let other = format!("Bearer {}", s.project_key("other").await);
    let a = get(&s, &host, "/k", &[("Authorization", &other)]);
    assert_eq!(a.status, 401, "{}", text(&a));
    // The host name decides, whatever routing headers the client sent.
    let a = get(
        &s,
        &host,
        "/h",
        &[
            ("E2B-Traffic-Access-Token", &sbx.token),
            ("E2b-Sandbox-Port", "49983"),
        ],
    );
    assert_eq!(text(&a), "path=/h cookie=None");
    // The agent's own port is not a service of the sandbox.
    let a = get(
        &s,
        &format!("8080-{}.{}", sbx.id, sbx.domain),
        "/",
        &[("E2B-Traffic-Access-Token", &sbx.token)],
    );
    assert_eq!(a.status, 403, "{}", text(&a));

    // A browser's link: the token once in the query, a redirect that sets it as this host's
    // cookie, then the cookie alone; the service inside sees the other cookies, never that one.
    let a = get(
        &s,
        &host,
        &format!("/page?q=1&lizard_access_token={}", sbx.token),
        &[],
    );
    assert_eq!(a.status, 303, "{}", text(&a));
    assert_contains(&a.head, "location: /page?q=1\r\n");
    assert_contains(
        &a.head,
        &format!(
            "set-cookie: lizard_access_token={}; path=/; httponly; samesite=lax",
            sbx.token
        ),
    );
    let cookie = format!("theme=dark; lizard_access_token={}", sbx.token);
    let a = get(&s, &host, "/page?q=1", &[("Cookie", &cookie)]);
    assert_eq!(a.status, 200, "{}", text(&a));
    assert_eq!(text(&a), "path=/page?q=1 cookie=theme=dark");
    // A wrong token in a link sets nothing.
    let a = get(&s, &host, "/?lizard_access_token=wrong", &[]);
    assert_eq!(a.status, 401);
    assert!(!a.head.contains("set-cookie"), "{}", a.head);
    // Another sandbox's token is wrong for this one.
    let second = echo_sandbox(&s, &key, json!({})).await;
    let a = get(
        &s,
        &host,
        "/",
        &[("Cookie", &format!("lizard_access_token={}", second.token))],
    );
    assert_eq!(a.status, 401);
    // Other host names are the server's own API, as before.
    let a = get(&s, &format!("localhost:{port}"), "/v1/openapi.json", &[]);
    assert_eq!(a.status, 200, "{}", text(&a));
}

#[tokio::test]
async fn public_ports_need_no_token_but_envd_and_the_code_interpreter_still_do() {
    lizard_test_support::needs_root!();
    let s = Server::start_in(
        lizard_test_support::temp_dir("lizard-test"),
        &["--sandbox-domain", "Sandboxes.Example.COM"],
    );
    let key = s.project_key("public").await;
    let sbx = echo_sandbox(&s, &key, json!({"allowPublicTraffic": true})).await;
    assert_eq!(sbx.domain, "sandboxes.example.com");
    let a = get(
        &s,
        &format!("8000-{}.sandboxes.example.com", sbx.id),
        "/p",
        &[],
    );
    assert_eq!(a.status, 200, "{}", text(&a));
    assert_eq!(text(&a), "path=/p cookie=None");
    // The same by E2B's routing headers.
    let a = get(
        &s,
        "lizard",
        "/q",
        &[("E2b-Sandbox-Id", &sbx.id), ("E2b-Sandbox-Port", "8000")],
    );
    assert_eq!(a.status, 200, "{}", text(&a));
    for p in [49983, 49999] {
        let a = get(
            &s,
            &format!("{p}-{}.sandboxes.example.com", sbx.id),
            "/health",
            &[],
        );
        assert_eq!(a.status, 401, "port {p}: {}", text(&a));
    }
    // A sandbox created without it keeps its ports closed.
    let closed = echo_sandbox(&s, &key, json!({})).await;
    let a = get(
        &s,
        &format!("8000-{}.sandboxes.example.com", closed.id),
        "/p",
        &[],
    );
    assert_eq!(a.status, 401);
    // The sandbox's network says so in Lizard's API.
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{}", sbx.id), None)
        .await;
    assert_eq!(r.body["network"]["public_ports"], true, "{}", r.text);
}

/// E2B's signature of a file URL (the SDKs' `getSignature`).
fn signature(path: &str, op: &str, user: &str, token: &str, exp: Option<u64>) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut raw = format!("{path}:{op}:{user}:{token}");
    if let Some(e) = exp {
        raw.push_str(&format!(":{e}"));
    }
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(raw))
    )
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn signed_file_urls_read_and_write_one_path_until_they_expire() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("files").await;
    let sbx = echo_sandbox(&s, &key, json!({})).await;
    let _other = echo_sandbox(&s, &key, json!({})).await;
    s.sh(&sbx.id, "echo signed content > /home/user/f.txt")
        .await;
    let addr: SocketAddr = s.addr.parse().unwrap();
    let envd_host = format!("49983-{}.{}", sbx.id, sbx.domain);
    let q = |path: &str, op: &str, user: &str, exp: Option<u64>| {
        let mut q = format!(
            "/files?path={}&signature={}",
            path.replace('/', "%2F"),
            signature(path, op, user, &sbx.token, exp)
                .replace('+', "%2B")
                .replace('/', "%2F")
        );
        if !user.is_empty() {
            q.push_str(&format!("&username={user}"));
        }
        if let Some(e) = exp {
            q.push_str(&format!("&signature_expiration={e}"));
        }
        q
    };
    let later = Some(now_s() + 600);
    // By the sandbox's host name, and at the server's own address (E2B_SANDBOX_URL), where the
    // signature alone finds the sandbox.
    for host in [envd_host.as_str(), "lizard"] {
        let a = get(&s, host, &q("/home/user/f.txt", "read", "", None), &[]);
        assert_eq!(a.status, 200, "{host}: {}", text(&a));
        assert_eq!(text(&a), "signed content\n");
        let a = get(&s, host, &q("/home/user/f.txt", "read", "user", later), &[]);
        assert_eq!(a.status, 200, "{host}: {}", text(&a));
    }
    // Expired, for another path, for writing, or tampered with: refused.
    let past = Some(now_s() - 5);
    for bad in [
        q("/home/user/f.txt", "read", "", past),
        q("/home/user/f.txt", "write", "", None),
        q("/home/user/f.txt", "read", "", None).replace("f.txt", "g.txt"),
        q("/home/user/f.txt", "read", "root", None).replace("username=root", "username=user"),
    ] {
        for host in [envd_host.as_str(), "lizard"] {
            let a = get(&s, host, &bad, &[]);
            assert_eq!(a.status, 401, "{host} {bad}: {}", text(&a));
        }
    }
    // An upload URL writes its path (a multipart form, as a browser posts it).
    let form = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.txt\"\r\n\
                Content-Type: text/plain\r\n\r\nuploaded\r\n--XyZ--\r\n";
    let a = http(
        addr,
        "POST",
        &q("/home/user/up.txt", "write", "", later),
        &[
            ("Host", "lizard"),
            ("Content-Type", "multipart/form-data; boundary=XyZ"),
        ],
        form.as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 200, "{}", text(&a));
    let (out, _) = s.sh(&sbx.id, "cat /home/user/up.txt").await;
    assert_eq!(out, "uploaded");
    // The read URL does not write.
    let a = http(
        addr,
        "POST",
        &q("/home/user/up.txt", "read", "", None),
        &[
            ("Host", "lizard"),
            ("Content-Type", "multipart/form-data; boundary=XyZ"),
        ],
        form.as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 401, "{}", text(&a));
}

#[tokio::test]
async fn pausing_without_keeping_memory_hibernates() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("mem").await;
    let e2b = |method: &'static str, path: String, body: Value| {
        let key = key.clone();
        let addr = s.addr.clone();
        async move {
            raw(
                &addr,
                method,
                &path,
                &[
                    ("X-API-Key", &key),
                    ("Content-Type", "application/json"),
                    ("Connection", "close"),
                ],
                &body.to_string(),
            )
            .await
        }
    };
    let (status, b) = e2b_create(&s, &key, json!({"templateID": "base"})).await;
    assert_eq!(status, 201, "{b}");
    let id = b["sandboxID"].as_str().unwrap().to_string();
    s.run(&id, json!({"code": "kept = 41 + 1", "language": "python"}))
        .await;
    let (status, b) = e2b(
        "POST",
        format!("/sandboxes/{id}/pause"),
        json!({"memory": false}),
    )
    .await;
    assert_eq!(status, 204, "{b}");
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(r.body["state"], "hibernated", "{}", r.text);
    let (status, b) = e2b("GET", format!("/sandboxes/{id}"), json!(null)).await;
    assert_eq!((status, b["state"].as_str()), (200, Some("paused")), "{b}");
    let (status, b) = e2b(
        "POST",
        format!("/sandboxes/{id}/connect"),
        json!({"timeout": 60}),
    )
    .await;
    assert_eq!(status, 201, "{b}");
    let ex = s
        .run(&id, json!({"code": "kept", "language": "python"}))
        .await;
    assert_eq!(ex["results"][0]["data"]["text/plain"], "42", "{ex}");

    // On a timeout: `autoPause` with `autoPauseMemory: false` hibernates.
    let (status, b) = e2b_create(
        &s,
        &key,
        json!({"templateID": "base", "timeout": 1, "autoPause": true, "autoPauseMemory": false}),
    )
    .await;
    assert_eq!(status, 201, "{b}");
    let id = b["sandboxID"].as_str().unwrap().to_string();
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(r.body["on_timeout"], "hibernate", "{}", r.text);
    let hibernated = s
        .reaches_state(&id, "hibernated", Duration::from_secs(60))
        .await;
    assert!(hibernated, "the timeout did not hibernate the sandbox");
}

#[tokio::test]
async fn a_request_resumes_a_sandbox_that_asked_for_it() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("resume").await;
    // E2B's lifecycle.autoResume: a pause, then sandbox traffic resumes it (and it says so).
    let (status, b) = e2b_create(
        &s,
        &key,
        json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}),
    )
    .await;
    assert_eq!(status, 201, "{b}");
    let id = b["sandboxID"].as_str().unwrap().to_string();
    let token = b["envdAccessToken"].as_str().unwrap().to_string();
    s.run(
        &id,
        json!({"code": "kept = 'before the pause'", "language": "python"}),
    )
    .await;
    let r = s.act(&id, "pause").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["network"]["auto_resume"], true, "{}", r.text);
    let a = get(
        &s,
        "lizard",
        "/health",
        &[
            ("E2b-Sandbox-Id", &id),
            ("E2b-Sandbox-Port", "49983"),
            ("X-Access-Token", &token),
        ],
    );
    assert!(a.status < 300, "{} {}", a.status, text(&a));
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(r.body["state"], "running", "{}", r.text);
    let (status, b) = raw(
        &s.addr,
        "GET",
        &format!("/sandboxes/{id}"),
        &[("X-API-Key", &key), ("Connection", "close")],
        "",
    )
    .await;
    assert_eq!(
        (status, &b["lifecycle"]["autoResume"]),
        (200, &json!(true)),
        "{b}"
    );

    // Lizard's network.auto_resume: an execute resumes it from hibernation too.
    let id = s
        .create(&key, json!({"network": {"auto_resume": true}}))
        .await;
    s.run(&id, json!({"code": "kept = 7", "language": "python"}))
        .await;
    let r = s.act(&id, "hibernate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ex = s
        .run(&id, json!({"code": "kept * 6", "language": "python"}))
        .await;
    assert_eq!(ex["results"][0]["data"]["text/plain"], "42", "{ex}");

    // Without it, a paused sandbox stays paused and says so.
    let id = s.create(&key, json!({})).await;
    let r = s.act(&id, "pause").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s
        .post(&format!("/v1/sandboxes/{id}/execute"), json!({"code": "1"}))
        .await;
    r.expect_error(409, "conflict");
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(r.body["state"], "paused", "{}", r.text);
}

/// What a sandbox answers at the server's own address — the origin of the web console and the
/// API, where a person's key is — is confined: an opaque origin with nothing run or loaded
/// (`Content-Security-Policy: sandbox`), no sniffing, and none of its cookies, service-worker
/// scope or `Clear-Site-Data`. At the sandbox's own host name (its own origin) it passes as it is.
#[tokio::test]
async fn a_sandboxs_page_never_runs_at_the_servers_own_origin() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("pages").await;
    let sbx = echo_sandbox(&s, &key, json!({})).await;
    let ex = s
        .run(&sbx.id, json!({"code": HOSTILE_PAGE, "language": "python"}))
        .await;
    assert!(ex["error"].is_null(), "{ex}");
    let bearer = format!("Bearer {key}");
    let own = get(
        &s,
        &s.addr,
        &format!("/v1/sandboxes/{}/ports/8001/", sbx.id),
        &[("Authorization", &bearer)],
    );
    assert_eq!(own.status, 200, "{}", text(&own));
    assert_contains(&text(&own), "<script>"); // the body passes
    assert_contains(
        &own.head,
        "content-security-policy: sandbox; default-src 'none'",
    );
    assert_contains(&own.head, "x-content-type-options: nosniff");
    for h in ["set-cookie", "service-worker-allowed", "clear-site-data"] {
        assert!(!own.head.contains(h), "{h} passed: {}", own.head);
    }
    // E2B's envd at the server's own address (a signed file URL's way): confined too.
    let envd = get(
        &s,
        &s.addr,
        "/health",
        &[
            ("E2B-Sandbox-Id", &sbx.id),
            ("E2B-Sandbox-Port", "49983"),
            ("X-Access-Token", &sbx.token),
        ],
    );
    assert!(envd.status < 300, "{}", text(&envd));
    assert_contains(&envd.head, "content-security-policy: sandbox");
    // The sandbox's own origin gets its page as it is.
    let host = format!("8001-{}.{}", sbx.id, sbx.domain);
    let a = get(&s, &host, "/", &[("E2B-Traffic-Access-Token", &sbx.token)]);
    assert_eq!(a.status, 200, "{}", text(&a));
    assert_contains(&a.head, "set-cookie: planted=1");
    assert!(!a.head.contains("content-security-policy"), "{}", a.head);
}
