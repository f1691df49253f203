//! Ports: a service listening inside a sandbox is reachable through the server (HTTP and
//! WebSocket), only with the project's key; nothing listens on the host for it; it gets the
//! caller's end-to-end headers but never the server's credentials, routing or hop-by-hop headers.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WS_ECHO: &str = r#"
import base64, hashlib, socket, threading
def _recvn(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b
def _handle(c):
    data = b""
    while b"\r\n\r\n" not in data:
        data += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in data.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    try:
        while True:
            h = _recvn(c, 2)
            n = h[1] & 127
            mask = _recvn(c, 4)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(_recvn(c, n)))
            if h[0] & 15 == 8:
                break
            c.sendall(bytes([0x81, len(payload)]) + payload)
    except EOFError:
        pass
    c.close()
_listening = threading.Event()
def _serve():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 8765))
    s.listen()
    _listening.set()
    while True:
        c, _ = s.accept()
        threading.Thread(target=_handle, args=(c,), daemon=True).start()
threading.Thread(target=_serve, daemon=True).start()
# The cell ends once the service listens (the test connects right after it).
assert _listening.wait(10)
"#;

#[tokio::test]
async fn http_service_in_the_sandbox_is_reachable_through_the_server() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    s.sh(&id, "mkdir -p ~/site && echo '<h1>hello from the sandbox</h1>' > ~/site/index.html && (cd ~/site && nohup python -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)")
        .await;
    let up = eventually(Duration::from_secs(20), || async {
        s.admin(
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8000/index.html"),
            None,
        )
        .await
        .status
            == 200
    })
    .await;
    assert!(up, "the http.server never answered through the proxy");
    let r = s
        .admin(
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8000/index.html?x=1"),
            None,
        )
        .await;
    assert!(r.text.contains("hello from the sandbox"), "{}", r.text);
    // The project's key is required, and another project's key sees nothing.
    let r = s
        .req(
            None,
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8000/"),
            None,
        )
        .await;
    assert_eq!(r.status, 401);
    let other = s.project_key("other").await;
    let r = s
        .req(
            Some(&other),
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8000/"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    // A port nobody listens on is a clear error.
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{id}/ports/8001/"), None)
        .await;
    r.expect_error(503, "unavailable");
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{id}/ports/99999/"), None)
        .await;
    assert_eq!(r.status, 400);
    // Nothing listens on the host for it.
    assert!(tokio::net::TcpStream::connect("127.0.0.1:8000")
        .await
        .is_err());
}

#[tokio::test]
async fn websocket_service_in_the_sandbox_is_reachable_through_the_server() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let ex = s.run(&id, json!({"code": WS_ECHO})).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let (reply, head) = {
        let mut tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
        let req = format!(
            "GET /v1/sandboxes/{id}/ports/8765/chat HTTP/1.1\r\nHost: lizard\r\nAuthorization: Bearer {}\r\n\
             Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n",
            s.admin_key
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            tcp.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        // One masked text frame, as a browser would send it.
        let msg = b"hello";
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | msg.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(msg.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        tcp.write_all(&frame).await.unwrap();
        let mut h = [0u8; 2];
        tcp.read_exact(&mut h).await.unwrap();
        let mut payload = vec![0u8; (h[1] & 127) as usize];
        tcp.read_exact(&mut payload).await.unwrap();
        (String::from_utf8(payload).unwrap(), head)
    };
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    assert_eq!(reply, "hello");
}

/// A service on 8766 that answers every GET with the request's headers as `[[name, value], …]`.
const ECHO_HEADERS: &str = r#"
import http.server, json, threading
class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps([[k.lower(), v] for k, v in self.headers.items()]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
_srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8766), _Echo)
threading.Thread(target=_srv.serve_forever, daemon=True).start()
"#;

/// The values of `name` among the echoed headers.
fn seen(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p[0] == name)
        .map(|p| p[1].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn services_get_end_to_end_headers_but_not_the_servers() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("headers").await;
    // Created through E2B's control plane, so the same sandbox is reachable both ways.
    let (id, token) = e2b_create(&s, &key).await;
    let ex = s.run(&id, json!({"code": ECHO_HEADERS})).await;
    assert_eq!(ex["status"], "ok", "{ex}");

    // Lizard's route: the key, the hop options and E2B's token stay at the server.
    let bearer = format!("Bearer {key}");
    let (status, echo) = raw(
        &s.addr,
        "GET",
        &format!("/v1/sandboxes/{id}/ports/8766/h?q=1"),
        &[
            ("Authorization", &bearer),
            ("Cookie", "session=abc"),
            ("X-Custom", "yes"),
            ("X-Hop", "for the next hop only"),
            ("X-Access-Token", &token),
            ("Connection", "close, X-Hop"),
        ],
        "",
    )
    .await;
    assert_eq!(status, 200, "{echo}");
    assert_eq!(seen(&echo, "cookie"), ["session=abc"], "{echo}");
    assert_eq!(seen(&echo, "x-custom"), ["yes"], "{echo}");
    for name in ["authorization", "x-hop", "x-access-token", "x-api-key"] {
        assert!(
            seen(&echo, name).is_empty(),
            "{name} reached the service: {echo}"
        );
    }

    // E2B's traffic: the sandbox token and the routing headers stay; another scheme's
    // `Authorization` is the service's.
    let (status, echo) = raw(
        &s.addr,
        "GET",
        "/h",
        &[
            ("E2b-Sandbox-Id", &id),
            ("E2b-Sandbox-Port", "8766"),
            ("X-Access-Token", &token),
            ("Authorization", "Basic dXNlcjo="),
            ("Cookie", "c=d"),
            ("Connection", "close"),
        ],
        "",
    )
    .await;
    assert_eq!(status, 200, "{echo}");
    assert_eq!(seen(&echo, "authorization"), ["Basic dXNlcjo="], "{echo}");
    assert_eq!(seen(&echo, "cookie"), ["c=d"], "{echo}");
    for name in ["e2b-sandbox-id", "e2b-sandbox-port", "x-access-token"] {
        assert!(
            seen(&echo, name).is_empty(),
            "{name} reached the service: {echo}"
        );
    }
}

/// A service in the sandbox that answers 401 through the ports proxy is the sandbox's answer,
/// not an authentication failure of the server's: it writes no `auth.failed` event and does not
/// cost the caller's key 10 requests each (before, 50 such answers emptied a bucket of 200 and
/// throttled the whole project). The server's own 401s still count.
#[tokio::test]
async fn a_services_401_is_not_the_servers() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--rate-limit-rps 1 --rate-limit-burst 200");
    let key = s.project_key("p401").await;
    let id = s.create(&key, json!({})).await;
    let code = r#"
import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401)
        self.send_header("WWW-Authenticate", "Basic realm=x")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8401), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
"#;
    let ex = s.run(&id, json!({ "code": code })).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let path = format!("/v1/sandboxes/{id}/ports/8401/secret");
    let mut statuses = Vec::new();
    for _ in 0..50 {
        statuses.push(s.req(Some(&key), "GET", &path, None).await.status);
    }
    assert!(statuses.iter().all(|st| *st == 401), "{statuses:?}");
    // The key still has most of its budget: another 100 ordinary requests pass.
    for i in 0..100 {
        let r = s.req(Some(&key), "GET", "/v1/sandboxes", None).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text);
    }
    // A wrong key is the server's own 401: still audited.
    let r = s.req(Some("lz_wrong"), "GET", &path, None).await;
    assert_eq!(r.status, 401);
    let audit = s.admin("GET", "/v1/audit", None).await;
    let failed: Vec<_> = audit
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "auth.failed")
        .collect();
    assert_eq!(failed.len(), 1, "only the wrong key's: {failed:?}");
}

/// The ports proxy does not reach the agent's own API on port 8080 (a typed 403, on Lizard's
/// routes and E2B's traffic), and the agent's TCP listener inside the sandbox serves no
/// host-only route (`/executions`, `/hibernate/*`: 404) — only its Unix socket, the server's,
/// does. The public routes still answer on TCP.
#[tokio::test]
async fn the_agents_port_is_not_a_service() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.project_key("agentport").await;
    let id = s.create(&key, json!({})).await;
    for p in ["8080/executions", "8080/health", "08080/hibernate/snapshot"] {
        let r = s
            .req(
                Some(&key),
                "GET",
                &format!("/v1/sandboxes/{id}/ports/{p}"),
                None,
            )
            .await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (403, Some("permission_denied")),
            "{p}: {}",
            r.text
        );
    }
    let (e2b_id, token) = e2b_create(&s, &key).await;
    let (status, body) = raw(
        &s.addr,
        "GET",
        "/executions",
        &[
            ("E2b-Sandbox-Id", &e2b_id),
            ("E2b-Sandbox-Port", "8080"),
            ("X-Access-Token", &token),
            ("Connection", "close"),
        ],
        "",
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let code = r#"
import urllib.request, urllib.error
def status(method, path):
    req = urllib.request.Request("http://127.0.0.1:8080" + path, method=method,
                                 data=b"{}" if method == "POST" else None,
                                 headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
for m, p in [("GET", "/executions?after=0"), ("POST", "/hibernate/snapshot"),
             ("POST", "/hibernate/restore"), ("GET", "/health"), ("GET", "/contexts")]:
    print(m, p, status(m, p))
"#;
    // From a command (the sandbox user, whom the port serves): the public routes only.
    let r = s
        .command(&id, json!({"argv": ["python3", "-c", code]}))
        .await;
    assert_eq!(
        command_stdout(&r),
        "GET /executions?after=0 404\nPOST /hibernate/snapshot 404\nPOST /hibernate/restore 404\nGET /health 200\nGET /contexts 200\n",
        "{r}"
    );
    // From a context (a uid of its own): the port serves it nothing at all.
    let ex = s.run(&id, json!({ "code": code })).await;
    assert_eq!(
        stdout(&ex),
        "GET /executions?after=0 403\nPOST /hibernate/snapshot 403\nPOST /hibernate/restore 403\nGET /health 403\nGET /contexts 403\n",
        "{ex}"
    );
}
