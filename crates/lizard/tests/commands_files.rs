//! End-to-end tests of commands, terminals and files through the server, in real sandboxes: exit
//! codes, stderr, stdin, background runs, kill, reconnect, bytes, timeouts, PTY echo and resize,
//! file round trips, listing, watch events, and path traversal attempts.

mod common;

use base64::Engine as _;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lizard_test_support::{terminal_lines, url_path};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const NDJSON: &str = "application/x-ndjson";

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// A request to the server as admin, with any body; the response streams.
async fn send(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> hyper::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "lizard")
        .header("authorization", format!("Bearer {}", s.admin_key));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    tx.send_request(b.body(Full::new(body.into())).unwrap())
        .await
        .unwrap()
}

/// NDJSON lines of a streamed response.
struct Lines {
    body: Incoming,
    buf: Vec<u8>,
}

impl Lines {
    fn new(resp: hyper::Response<Incoming>) -> Lines {
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], NDJSON);
        Lines {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(T, async {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=pos).collect();
                    return Some(serde_json::from_slice(&line).unwrap());
                }
                match self.body.frame().await {
                    Some(f) => {
                        if let Ok(d) = f.unwrap().into_data() {
                            self.buf.extend_from_slice(&d);
                        }
                    }
                    None => return None,
                }
            }
        })
        .await
        .expect("no NDJSON line in time")
    }

    async fn rest(&mut self) -> Vec<Value> {
        let mut v = Vec::new();
        while let Some(e) = self.next().await {
            v.push(e);
        }
        v
    }
}

async fn stream_post(s: &Server, path: &str, body: Value) -> Lines {
    Lines::new(
        send(
            s,
            "POST",
            path,
            &[("content-type", "application/json"), ("accept", NDJSON)],
            body.to_string(),
        )
        .await,
    )
}

async fn connect(s: &Server, id: &str, pid: u64) -> Lines {
    Lines::new(
        send(
            s,
            "GET",
            &format!("/v1/sandboxes/{id}/commands/{pid}/stream"),
            &[("accept", NDJSON)],
            Bytes::new(),
        )
        .await,
    )
}

/// Run a command and return its aggregated result.
async fn run(s: &Server, id: &str, body: Value) -> Value {
    let r = s.post(&format!("/v1/sandboxes/{id}/commands"), body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body
}

/// Start `body` as a background command in the sandbox at `base`: its pid.
async fn background(s: &Server, base: &str, body: Value) -> u64 {
    let r = s.post(&format!("{base}/commands"), body).await;
    r.expect_status(201).body["pid"].as_u64().unwrap()
}

/// Send `signal` to process `pid` of the sandbox at `base`: the answer's status.
async fn signal(s: &Server, base: &str, pid: u64, signal: &str) -> u16 {
    let path = format!("{base}/commands/{pid}/signal");
    s.post(&path, json!({ "signal": signal })).await.status
}

/// The pids of the processes the sandbox at `base` lists.
async fn listed(s: &Server, base: &str) -> Vec<u64> {
    let l = s.admin("GET", &format!("{base}/commands"), None).await;
    let all = l.body.as_array().unwrap_or_else(|| panic!("{}", l.text));
    all.iter().filter_map(|p| p["pid"].as_u64()).collect()
}

/// The `key` of every entry of the JSON list `r` answered.
fn each<'a>(r: &'a Resp, key: &str) -> Vec<&'a str> {
    let all = r.body.as_array().unwrap_or_else(|| panic!("{}", r.text));
    all.iter().map(|e| e[key].as_str().unwrap()).collect()
}

/// Whether the terminal output `raw` has the line `want` yet; fails the test once `deadline` is
/// past without it.
fn has_line(raw: &[u8], want: &str, deadline: Instant) -> bool {
    let lines = terminal_lines(raw);
    if lines.iter().any(|l| l == want) {
        return true;
    }
    assert!(Instant::now() < deadline, "no line {want:?} in {lines:?}");
    false
}

fn text_of(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .filter_map(|e| e["text"].as_str())
        .collect()
}

#[tokio::test]
async fn commands_through_the_server() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.admin_key.clone();
    let id = s.create(&key, json!({"env": {"GREETING": "hi"}})).await;
    let base = format!("/v1/sandboxes/{id}");

    // Exit codes, stderr, the sandbox user, home and env.
    let r = run(
        &s,
        &id,
        json!({"cmd": "whoami; pwd; echo $GREETING $X; echo oops >&2; exit 3", "env": {"X": "x"}}),
    )
    .await;
    assert_eq!(r["stdout"], "user\n/home/user\nhi x\n", "{r}");
    assert_eq!(
        (r["stderr"].as_str(), r["exit_code"].as_i64()),
        (Some("oops\n"), Some(3))
    );
    let r = run(
        &s,
        &id,
        json!({"argv": ["python3", "-c", "import sys; print(sys.argv[1:])", "a b"]}),
    )
    .await;
    assert_eq!(r["stdout"], "['a b']\n", "{r}");
    let r = s
        .post(
            &format!("{base}/commands"),
            json!({"cmd": "id", "user": "nobody"}),
        )
        .await;
    r.expect_error(400, "invalid_request");

    // Streaming passes through live.
    let mut st = stream_post(
        &s,
        &format!("{base}/commands"),
        json!({"cmd": "echo a; sleep 1.5; echo b >&2"}),
    )
    .await;
    assert_eq!(st.next().await.unwrap()["type"], "start");
    assert_eq!(st.next().await.unwrap()["text"], "a\n");
    let first_at = Instant::now();
    let rest = st.rest().await;
    // Live, not buffered until the end: the rest came a good part of the sleep later.
    assert!(
        first_at.elapsed() > Duration::from_millis(700),
        "the first line came only with the rest"
    );
    assert_eq!(text_of(&rest, "stderr"), "b\n");
    assert_eq!(rest.last().unwrap()["exit_code"], 0);

    // Invalid UTF-8 and binary output.
    let all = r#"for i in $(seq 0 255); do printf "\\x$(printf %02x $i)"; done"#;
    let r = run(&s, &id, json!({"cmd": all, "base64": true})).await;
    assert_eq!(
        b64(r["stdout_b64"].as_str().unwrap()),
        (0..=255u8).collect::<Vec<_>>()
    );
    let r = run(&s, &id, json!({"cmd": r"printf 'ok\xff\xfe\n'"})).await;
    assert_eq!(r["stdout"], "ok\u{FFFD}\u{FFFD}\n");

    // stdin.
    let pid = background(
        &s,
        &base,
        json!({"cmd": "tr a-z A-Z", "stdin": true, "background": true}),
    )
    .await;
    let stdin = format!("{base}/commands/{pid}/stdin");
    s.post(&stdin, json!({"data": "hello\n"}))
        .await
        .expect_status(204);
    s.admin("POST", &format!("{base}/commands/{pid}/stdin/close"), None)
        .await;
    let r = s
        .admin("GET", &format!("{base}/commands/{pid}/stream"), None)
        .await;
    assert_eq!(
        (r.body["stdout"].as_str(), r.body["exit_code"].as_i64()),
        (Some("HELLO\n"), Some(0)),
        "{}",
        r.text
    );

    // Background, list, reconnect, kill.
    let pid = background(
        &s,
        &base,
        json!({"cmd": "echo started; sleep 300", "background": true}),
    )
    .await;
    let pids = listed(&s, &base).await;
    assert!(pids.contains(&pid), "{pids:?}");
    let mut c = connect(&s, &id, pid).await;
    assert_eq!(c.next().await.unwrap()["type"], "start");
    assert_eq!(
        c.next().await.unwrap()["text"],
        "started\n",
        "replayed on reconnect"
    );
    assert_eq!(signal(&s, &base, pid, "SIGKILL").await, 204);
    let end = c.rest().await.pop().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["signal"].as_str()),
        (Some("end"), Some("SIGKILL"))
    );
    assert_eq!(
        signal(&s, &base, pid, "SIGKILL").await,
        404,
        "an exited process is gone for kill"
    );
    let pids = listed(&s, &base).await;
    assert!(!pids.contains(&pid), "{pids:?}");

    // A client that disconnects does not stop the command; a later reconnect gets its end.
    let mut st = stream_post(
        &s,
        &format!("{base}/commands"),
        json!({"cmd": "sleep 1; echo done"}),
    )
    .await;
    let pid = st.next().await.unwrap()["pid"].as_u64().unwrap();
    drop(st);
    let mut c = connect(&s, &id, pid).await;
    let events = c.rest().await;
    assert_eq!(text_of(&events, "stdout"), "done\n");
    assert_eq!(events.last().unwrap()["exit_code"], 0);

    // Timeout.
    let t0 = Instant::now();
    let r = run(&s, &id, json!({"cmd": "sleep 60", "timeout_ms": 500})).await;
    assert_eq!(
        (r["timed_out"].as_bool(), r["signal"].as_str()),
        (Some(true), Some("SIGTERM")),
        "{r}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));

    // Unknown processes and routes are typed.
    let r = s
        .admin("GET", &format!("{base}/commands/999999"), None)
        .await;
    r.expect_error(404, "not_found");
    s.kill_all().await;
    let r = s.admin("GET", &format!("{base}/commands"), None).await;
    assert_eq!(r.status, 404, "a killed sandbox has no commands");
}

#[tokio::test]
async fn concurrent_commands_keep_their_exit_codes() {
    lizard_test_support::needs_root!();
    // The agent is PID 1 and reaps orphans; it must never take a command's exit status.
    let (s, id) = Server::with_sandbox().await;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let c = Server::client_for(&s.addr, &s.admin_key);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let cmd = format!("(sleep 0.0{} &) ; exit {}", i % 10, i);
            let r = run(&c, &id, json!({ "cmd": cmd })).await;
            (i, r)
        }));
    }
    for t in tasks {
        let (i, r) = t.await.unwrap();
        assert_eq!(r["exit_code"].as_i64(), Some(i), "{r}");
    }
}

#[tokio::test]
async fn terminal_through_the_server() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let base = format!("/v1/sandboxes/{id}");
    let mut out = stream_post(&s, &format!("{base}/pty"), json!({"cols": 80, "rows": 24})).await;
    let pid = out.next().await.unwrap()["pid"].as_u64().unwrap();
    let mut raw = Vec::new();
    async fn keys(s: &Server, base: &str, pid: u64, data: &str) {
        let r = s
            .post(&format!("{base}/pty/{pid}/input"), json!({"data": data}))
            .await;
        assert_eq!(r.status, 204, "{}", r.text);
    }
    async fn read_until(out: &mut Lines, raw: &mut Vec<u8>, want: &str) {
        let deadline = Instant::now() + T;
        while !has_line(raw, want, deadline) {
            let e = out.next().await.expect("terminal ended");
            raw.extend(b64(e["data_b64"].as_str().unwrap()));
        }
    }
    keys(&s, &base, pid, "echo $((6*7))\r").await;
    read_until(&mut out, &mut raw, "42").await;
    let r = s
        .post(
            &format!("{base}/pty/{pid}/resize"),
            json!({"cols": 132, "rows": 43}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    keys(&s, &base, pid, "stty size; whoami; echo $TERM\r").await;
    read_until(&mut out, &mut raw, "43 132").await;
    read_until(&mut out, &mut raw, "user").await;
    read_until(&mut out, &mut raw, "xterm-256color").await;
    keys(&s, &base, pid, "exit 5\r").await;
    let end = out.rest().await.pop().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["exit_code"].as_i64()),
        (Some("end"), Some(5))
    );
}

/// The terminal over a WebSocket, as a browser opens it: the key as a subprotocol (never
/// echoed), bytes both ways, JSON control (resize, a refused message), and the socket's close
/// killing the shell. Without a key, or with a key of another project, no terminal opens.
#[tokio::test]
async fn terminal_over_a_websocket() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let url = format!("ws://{}/v1/sandboxes/{id}/pty/ws?cols=80&rows=24", s.addr);
    let open = |protocols: String| {
        let mut req = url.as_str().into_client_request().unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", protocols.parse().unwrap());
        tokio_tungstenite::connect_async(req)
    };
    // No key, a wrong key, another project's key: refused before any terminal starts.
    let other = s.project_key("other-project").await;
    for (protocols, status) in [
        ("lizard.pty.v1".to_string(), 401),
        ("lizard.pty.v1, lizard.key.lz_nope".to_string(), 401),
        (format!("lizard.pty.v1, lizard.key.{other}"), 404),
    ] {
        match open(protocols.clone()).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(r.status().as_u16(), status, "{protocols}")
            }
            other => panic!("{protocols}: {:?}", other.map(|_| ())),
        }
    }

    let (mut ws, resp) = open(format!("lizard.pty.v1, lizard.key.{}", s.admin_key))
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "lizard.pty.v1",
        "only the terminal's subprotocol is chosen; the key is never echoed"
    );
    let mut raw = Vec::new();
    let mut control = Vec::new();
    let first = ws.next().await.unwrap().unwrap();
    let start: Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
    assert_eq!(start["type"], "start", "{start}");
    let pid = start["pid"].as_u64().unwrap();
    async fn read_until(
        ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
        raw: &mut Vec<u8>,
        control: &mut Vec<Value>,
        want: &str,
    ) {
        let deadline = Instant::now() + T;
        while !has_line(raw, want, deadline) {
            match ws.next().await.expect("terminal ended").unwrap() {
                Message::Binary(b) => raw.extend_from_slice(&b),
                Message::Text(t) => control.push(serde_json::from_str(t.as_str()).unwrap()),
                _ => {}
            }
        }
    }
    ws.send(Message::binary(&b"echo $((6*7))\r"[..]))
        .await
        .unwrap();
    read_until(&mut ws, &mut raw, &mut control, "42").await;
    ws.send(Message::text(r#"{"type":"resize","cols":132,"rows":43}"#))
        .await
        .unwrap();
    ws.send(Message::text(r#"{"type":"resize","cols":0,"rows":43}"#))
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"type":"input","data":"stty size; whoami\r"}"#,
    ))
    .await
    .unwrap();
    read_until(&mut ws, &mut raw, &mut control, "43 132").await;
    read_until(&mut ws, &mut raw, &mut control, "user").await;
    assert!(
        control
            .iter()
            .any(|m| m["type"] == "error" && m["message"].as_str().unwrap().contains("cols")),
        "{control:?}"
    );
    // The terminal is a process of the sandbox's: listed, and killed when the socket closes.
    let info = s
        .admin("GET", &format!("/v1/sandboxes/{id}/commands/{pid}"), None)
        .await;
    assert_eq!(info.status, 200, "{}", info.text);
    ws.close(None).await.unwrap();
    let gone = eventually(T, || async {
        let r = s
            .admin("GET", &format!("/v1/sandboxes/{id}/commands/{pid}"), None)
            .await;
        r.status == 404 || r.body["end"].is_object()
    })
    .await;
    assert!(gone, "closing the socket ends the shell");

    // A shell that exits says how, then the socket closes.
    let (mut ws, _) = open(format!("lizard.pty.v1, lizard.key.{}", s.admin_key))
        .await
        .unwrap();
    ws.send(Message::binary(&b"exit 5\r"[..])).await.unwrap();
    let mut end = None;
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["type"] == "end" {
                end = Some(v);
            }
        }
    }
    assert_eq!(end.unwrap()["exit_code"], 5);
}

#[tokio::test]
async fn files_through_the_server() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let base = format!("/v1/sandboxes/{id}");
    let put = |path: &str, data: Vec<u8>| {
        let url = format!("{base}/files?path={}", url_path(path));
        let s = &s;
        async move {
            let r = send(
                s,
                "PUT",
                &url,
                &[("content-type", "application/octet-stream")],
                data,
            )
            .await;
            let status = r.status().as_u16();
            let body = r.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let get = |path: &str| {
        let url = format!("{base}/files?path={}", url_path(path));
        let s = &s;
        async move {
            let r = send(s, "GET", &url, &[], Bytes::new()).await;
            let status = r.status().as_u16();
            (status, r.into_body().collect().await.unwrap().to_bytes())
        }
    };

    // Round trips: text (relative to /home/user, parents created) and binary.
    let (st, e) = put("docs/readme.txt", b"hello\n".to_vec()).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["path"], "/home/user/docs/readme.txt");
    assert_eq!(
        (e["owner"].as_str(), e["group"].as_str(), e["mode"].as_u64()),
        // umask 0002: the group's too (contexts share files through it).
        (Some("user"), Some("user"), Some(0o664))
    );
    assert_eq!(get("docs/readme.txt").await, (200, Bytes::from("hello\n")));
    assert_eq!(get("/home/user/docs/readme.txt").await.1, "hello\n");
    let bin: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    put("docs/blob.bin", bin.clone()).await;
    assert_eq!(get("docs/blob.bin").await.1, bin);
    let (out, _) = s
        .sh(
            &id,
            "cat /home/user/docs/readme.txt; stat -c %s /home/user/docs/blob.bin",
        )
        .await;
    assert_eq!(out, "hello\n300000\n", "visible to code in the sandbox");

    // An upload refused before it is read (a directory in the way) gets its typed error, not a
    // broken connection: the agent drains the body before answering (20 rounds of 8 MiB).
    let big = vec![7u8; 8 * 1024 * 1024];
    for _ in 0..20 {
        let (st, e) = put("docs", big.clone()).await;
        assert_eq!(st, 400, "{e}");
        assert_eq!(e["code"], "invalid_request", "{e}");
    }

    // stat, list, mkdir, rename, remove, exists.
    let r = s
        .admin("GET", &format!("{base}/files/stat?path=docs"), None)
        .await;
    assert_eq!(
        (r.body["type"].as_str(), r.body["permissions"].as_str()),
        (Some("dir"), Some("drwxrwsr-x")), // setgid home, umask 0002
        "{}",
        r.text
    );
    let mkdir = format!("{base}/files/mkdir");
    let sub = json!({"path": "docs/sub"});
    s.post(&mkdir, sub.clone()).await.expect_status(201);
    let r = s.post(&mkdir, sub).await;
    r.expect_error(409, "conflict");
    let r = s
        .post(
            &format!("{base}/files/rename"),
            json!({"from": "docs/blob.bin", "to": "docs/sub/blob.bin"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s
        .admin("GET", &format!("{base}/files/list?path=docs&depth=2"), None)
        .await;
    assert_eq!(
        each(&r, "path"),
        [
            "/home/user/docs/readme.txt",
            "/home/user/docs/sub",
            "/home/user/docs/sub/blob.bin"
        ]
    );
    let r = s
        .admin("DELETE", &format!("{base}/files?path=docs/sub"), None)
        .await;
    assert_eq!(r.status, 204);
    let r = s
        .admin(
            "GET",
            &format!("{base}/files/stat?path=docs/sub/blob.bin"),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (404, Some("not_found")),
        "exists → false"
    );

    // The sandbox's permissions apply: the user cannot write system files.
    let (st, e) = put("/etc/passwd", b"x".to_vec()).await;
    assert_eq!(
        (st, e["code"].as_str()),
        (403, Some("permission_denied")),
        "{e}"
    );
    let (st, _) = get("/etc/shadow").await;
    assert_eq!(st, 403);

    // Traversal attempts all land in the sandbox's own filesystem.
    for p in [
        "../../../../etc/passwd",
        "/etc/passwd",
        "/home/user/../../../../../etc/./passwd",
        "~/../../etc/passwd",
    ] {
        let (st, body) = get(p).await;
        assert_eq!(st, 200, "{p}");
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains("\nuser:x:1000:1000:"),
            "{p}: not the template's passwd: {text}"
        );
    }
    run(
        &s,
        &id,
        json!({"cmd": "ln -s / /home/user/escape && ln -s /work /home/user/work"}),
    )
    .await;
    let (st, body) = get("escape/etc/passwd").await;
    assert_eq!(st, 200);
    assert!(String::from_utf8_lossy(&body).contains("\nuser:x:1000:1000:"));
    let host_readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    for p in [
        host_readme,
        "work/main/README.md",
        "/proc/1/root/work/main/README.md",
    ] {
        let (st, _) = get(p).await;
        assert!(st == 404 || st == 403, "{p}: host file visible? {st}");
    }
    let r = s
        .admin(
            "GET",
            &format!("{base}/files/list?path=..%2F..%2F..%2F"),
            None,
        )
        .await;
    let names = each(&r, "name");
    assert!(
        names.contains(&"home") && !names.contains(&"work"),
        "{names:?}"
    );
    for bad in ["", "a%00b"] {
        let r = s
            .admin("GET", &format!("{base}/files?path={bad}"), None)
            .await;
        r.expect_error(400, "invalid_request");
    }

    // Watch: create, write, chmod, rename, remove.
    s.post(&mkdir, json!({"path": "watched"})).await;
    let mut w = Lines::new(
        send(
            &s,
            "GET",
            &format!("{base}/files/watch?path=watched&recursive=true"),
            &[],
            Bytes::new(),
        )
        .await,
    );
    let start = w.next().await.unwrap();
    assert_eq!(
        (start["type"].as_str(), start["path"].as_str()),
        (Some("start"), Some("/home/user/watched"))
    );
    run(
        &s,
        &id,
        json!({"cmd": "cd watched && echo 1 > a && echo 2 >> a && chmod 600 a && mv a b && rm b"}),
    )
    .await;
    let want = [
        ("create", "a"),
        ("write", "a"),
        ("chmod", "a"),
        ("rename", "a"),
        ("create", "b"),
        ("remove", "b"),
    ];
    let mut seen = Vec::new();
    let deadline = Instant::now() + T;
    while !want.iter().all(|(t, n)| {
        seen.iter()
            .any(|(a, b): &(String, String)| a == t && b == n)
    }) {
        assert!(
            Instant::now() < deadline,
            "missing watch events; saw {seen:?}"
        );
        let e = w.next().await.expect("watch ended");
        seen.push((
            e["type"].as_str().unwrap().to_string(),
            e["name"].as_str().unwrap().to_string(),
        ));
    }
    drop(w);
}

/// A rename between file systems (the overlay home and the /tmp tmpfs) moves the data.
#[tokio::test]
async fn rename_across_file_systems() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    s.sh(&id, "mkdir -p ~/d/sub && echo moved > ~/d/sub/f.txt")
        .await;
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/files/rename"),
            json!({"from": "d", "to": "/tmp/d2"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (out, _) = s
        .sh(
            &id,
            "cat /tmp/d2/sub/f.txt; ls ~/d 2>&1 | grep -c 'No such'",
        )
        .await;
    assert_eq!(out, "moved\n1\n");
}
