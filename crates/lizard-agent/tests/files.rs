//! End-to-end tests of the files API on a real agent: round trips, stat/list/mkdir/rename/remove,
//! streamed bodies beyond the JSON body limit, watch events, bad input.

mod common;
mod streaming;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use lizard_test_support::url_path;
use serde_json::{json, Value};
use std::time::Duration;
use streaming::*;

const T: Duration = Duration::from_secs(30);

async fn put(a: &Agent, path: &str, data: impl Into<Bytes>) -> (u16, Value) {
    a.raw(
        "PUT",
        &format!("/files?path={}", url_path(path)),
        Some("application/octet-stream"),
        data,
    )
    .await
}

/// A GET of the agent's `path_and_query`, without a body.
fn get_req(path_and_query: &str) -> hyper::Request<http_body_util::Empty<Bytes>> {
    hyper::Request::get(path_and_query)
        .header("host", "agent")
        .body(http_body_util::Empty::new())
        .unwrap()
}

async fn get(a: &Agent, path: &str) -> (u16, Bytes) {
    let req = get_req(&format!("/files?path={}", url_path(path)));
    let resp = send(&a.socket, req).await;
    let status = resp.status().as_u16();
    (status, body_bytes(resp).await)
}

async fn stat(a: &Agent, path: &str) -> (u16, Value) {
    a.call("GET", &format!("/files/stat?path={}", url_path(path)), None)
        .await
}

/// Remove `path`: the answer's status.
async fn remove(a: &Agent, path: &str) -> u16 {
    let path = format!("/files?path={}", url_path(path));
    a.raw("DELETE", &path, None, Bytes::new()).await.0
}

/// The names `GET /files/list?{query}` answers, which must succeed.
async fn list_names(a: &Agent, query: &str) -> Vec<String> {
    let (s, l) = a.call("GET", &format!("/files/list?{query}"), None).await;
    assert_eq!(s, 200, "{l}");
    let entries = l.as_array().unwrap();
    entries
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// The events of a watch (`GET /files/watch?{query}`), its `start` first.
async fn watch(a: &Agent, query: &str) -> Lines {
    let req = get_req(&format!("/files/watch?{query}"));
    Lines::new(send(&a.socket, req).await)
}

#[tokio::test]
async fn round_trip_stat_list_mkdir_rename_remove() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    // Text, with parents created.
    let (s, e) = put(&a, "notes/day1/a.txt", "hello\n").await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(
        (e["name"].as_str(), e["type"].as_str(), e["size"].as_u64()),
        (Some("a.txt"), Some("file"), Some(6))
    );
    let home = e["path"]
        .as_str()
        .unwrap()
        .strip_suffix("/notes/day1/a.txt")
        .unwrap()
        .to_string();
    assert_eq!(
        get(&a, "notes/day1/a.txt").await,
        (200, Bytes::from("hello\n"))
    );
    assert_eq!(
        get(&a, &format!("{home}/notes/day1/a.txt")).await.1,
        "hello\n",
        "absolute path"
    );
    assert_eq!(
        get(&a, "~/notes/./day1/../day1/a.txt").await.1,
        "hello\n",
        "normalised"
    );
    // Binary: every byte value; overwriting replaces the content and keeps the mode.
    let bin: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let (s, _) = put(&a, "notes/day1/a.txt", bin.clone()).await;
    assert_eq!(s, 200);
    assert_eq!(get(&a, "notes/day1/a.txt").await.1, bin);
    // Empty file.
    put(&a, "empty", Bytes::new()).await;
    assert_eq!(get(&a, "empty").await, (200, Bytes::new()));

    let (s, st) = stat(&a, "notes/day1/a.txt").await;
    assert_eq!(s, 200);
    assert_eq!(st["size"], 70_000);
    assert_eq!(st["mode"], 0o644);
    assert_eq!(st["permissions"], "-rw-r--r--");
    assert!(!st["owner"].as_str().unwrap().is_empty());
    assert!(!st["group"].as_str().unwrap().is_empty());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now_ms - st["modified_ms"].as_i64().unwrap()).abs() < 60_000,
        "{st}"
    );
    let (_, d) = stat(&a, "notes").await;
    assert_eq!(
        (d["type"].as_str(), d["permissions"].as_str()),
        (Some("dir"), Some("drwxr-xr-x"))
    );

    // mkdir: 201, then 409 when it exists (E2B's makeDir → false).
    let (s, m) = a
        .post("/files/mkdir", json!({"path": "notes/day2/deep"}))
        .await;
    assert_eq!(s, 201, "{m}");
    assert_eq!(m["type"], "dir");
    let (s, m) = a
        .post("/files/mkdir", json!({"path": "notes/day2/deep"}))
        .await;
    assert_eq!((s, m["code"].as_str()), (409, Some("conflict")));
    let (s, _) = a
        .post("/files/mkdir", json!({"path": "notes/day1/a.txt"}))
        .await;
    assert_eq!(s, 409, "a file is in the way");

    // list: depth 1 and 2, sorted by path.
    assert_eq!(list_names(&a, "path=notes").await, ["day1", "day2"]);
    let (_, l) = a.call("GET", "/files/list?path=notes&depth=3", None).await;
    let paths: Vec<String> = l
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["path"]
                .as_str()
                .unwrap()
                .strip_prefix(&home)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/notes/day1",
            "/notes/day1/a.txt",
            "/notes/day2",
            "/notes/day2/deep"
        ]
    );

    // A symlink is reported as one, with its target, and not followed by list.
    a.post("/commands", json!({"cmd": "ln -s day1 notes/link"}))
        .await;
    let (_, ln) = stat(&a, "notes/link").await;
    assert_eq!(
        (ln["type"].as_str(), ln["symlink_target"].as_str()),
        (Some("symlink"), Some("day1"))
    );
    assert_eq!(
        get(&a, "notes/link/a.txt").await.1,
        bin,
        "reads follow symlinks"
    );
    a.post(
        "/commands",
        json!({"cmd": "ln -s day1/a.txt notes/file-link"}),
    )
    .await;
    put(&a, "notes/file-link", "through the link").await;
    assert_eq!(
        get(&a, "notes/day1/a.txt").await.1,
        "through the link",
        "writes follow symlinks"
    );
    assert_eq!(stat(&a, "notes/file-link").await.1["type"], "symlink");
    put(&a, "notes/day1/a.txt", bin.clone()).await;

    // rename (parents of the target are created); remove.
    let (s, r) = a
        .post(
            "/files/rename",
            json!({"from": "notes/day1/a.txt", "to": "archive/2024/a.txt"}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["name"], "a.txt");
    assert_eq!(stat(&a, "notes/day1/a.txt").await.0, 404);
    assert_eq!(get(&a, "archive/2024/a.txt").await.1, bin);
    let (s, v) = a
        .post("/files/rename", json!({"from": "nope", "to": "x"}))
        .await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    assert_eq!(remove(&a, "notes/link").await, 204);
    assert_eq!(
        stat(&a, "notes/day1").await.0,
        200,
        "removing a symlink keeps its target"
    );
    assert_eq!(
        remove(&a, "notes").await,
        204,
        "directories go with their contents"
    );
    let (s, v) = stat(&a, "notes").await;
    assert_eq!(
        (s, v["code"].as_str()),
        (404, Some("not_found")),
        "exists → false"
    );
    assert_eq!(remove(&a, "notes").await, 404);
}

#[tokio::test]
async fn bad_paths_and_requests_get_typed_errors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    put(&a, "f.txt", "x").await;
    for (method, path, code) in [
        ("GET", "/files?path=", "invalid_request"),
        ("GET", "/files?path=a%00b", "invalid_request"),
        ("GET", "/files", "invalid_request"),
        ("GET", "/files?path=f.txt&surprise=1", "invalid_request"),
        ("GET", "/files?path=no/such/file", "not_found"),
        ("GET", "/files?path=/", "invalid_request"),
        ("GET", "/files?path=/dev/null", "invalid_request"),
        ("PUT", "/files?path=", "invalid_request"),
        ("PUT", "/files?path=/", "invalid_request"),
        ("PUT", "/files?path=f.txt/below", "invalid_request"),
        ("DELETE", "/files?path=/", "invalid_request"),
        ("GET", "/files/stat?path=", "invalid_request"),
        ("GET", "/files/list?path=f.txt", "invalid_request"),
        ("GET", "/files/list?path=.&depth=0", "invalid_request"),
        ("GET", "/files/list?path=.&depth=x", "invalid_request"),
        ("GET", "/files/list?path=missing", "not_found"),
        ("GET", "/files/watch?path=missing", "not_found"),
    ] {
        let (s, v) = a.raw(method, path, None, Bytes::new()).await;
        assert_eq!(v["code"], code, "{method} {path} → {s} {v}");
        assert!((400..500).contains(&s), "{method} {path} → {s}");
    }
    for body in [json!({}), json!({"path": ""}), json!({"path": "x", "y": 1})] {
        let (s, _) = a.post("/files/mkdir", body).await;
        assert_eq!(s, 400);
    }
    let (s, _) = a
        .post("/files/rename", json!({"from": "f.txt", "to": "/"}))
        .await;
    assert_eq!(s, 400);
}

#[tokio::test]
async fn large_bodies_stream_past_the_json_limit() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    // 48 MiB (3× the 16 MiB JSON body limit), sent in 1 MiB chunks without a Content-Length.
    let chunk = |i: u32| Bytes::from(vec![(i % 251) as u8; 1 << 20]);
    let frames = futures_util::stream::iter(
        (0..48u32).map(move |i| Ok::<_, std::convert::Infallible>(Frame::data(chunk(i)))),
    );
    let req = hyper::Request::put("/files?path=big.bin")
        .header("host", "agent")
        .body(StreamBody::new(frames))
        .unwrap();
    let resp = send(&a.socket, req).await;
    let status = resp.status();
    let v: Value = serde_json::from_slice(&body_bytes(resp).await).unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["size"], 48 << 20);
    let resp = send(&a.socket, get_req("/files?path=big.bin")).await;
    assert_eq!(
        resp.headers()["content-length"],
        (48u64 << 20).to_string().as_str()
    );
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    let mut body = resp.into_body();
    let mut pos = 0usize;
    while let Some(f) = body.frame().await {
        let data = f.unwrap().into_data().unwrap_or_default();
        for (k, b) in data.iter().enumerate() {
            let i = ((pos + k) >> 20) as u32;
            assert_eq!(*b, (i % 251) as u8, "byte {}", pos + k);
        }
        pos += data.len();
    }
    assert_eq!(pos, 48 << 20);
    // No half-written file is ever visible: only the final name exists.
    assert_eq!(list_names(&a, "path=.").await, ["big.bin"]);
    // The JSON routes keep their limit.
    let (s, v) = a
        .raw(
            "POST",
            "/files/mkdir",
            Some("application/json"),
            vec![b' '; 17 << 20],
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (413, Some("payload_too_large")));
}

#[tokio::test]
async fn interrupted_upload_leaves_the_old_file() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    put(&a, "keep.txt", "old").await;
    let frames = futures_util::stream::iter(vec![
        Ok(Frame::data(Bytes::from(vec![b'n'; 1 << 20]))),
        Err(std::io::Error::other("client gave up")),
    ]);
    let req = hyper::Request::put("/files?path=keep.txt")
        .header("host", "agent")
        .body(StreamBody::new(frames))
        .unwrap();
    let stream = tokio::net::UnixStream::connect(&a.socket).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let _ = sender.send_request(req).await;
    // The agent notices the broken body, removes its temporary file and keeps the old content.
    let mut clean = false;
    for _ in 0..100 {
        let (_, l) = a.call("GET", "/files/list?path=.", None).await;
        if l.as_array().unwrap().len() == 1 {
            clean = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(clean, "the temporary file was removed");
    assert_eq!(get(&a, "keep.txt").await.1, "old");
}

/// Read watch events until every `(type, name)` of `want` was seen.
async fn await_events(
    events: &mut Lines,
    root: &str,
    want: &[(&str, &str)],
    seen: &mut Vec<(String, String)>,
) {
    let deadline = std::time::Instant::now() + T;
    while !want
        .iter()
        .all(|(t, n)| seen.iter().any(|(st, sn)| st == t && sn == n))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "missing events; saw {seen:?}"
        );
        let e = events.next_within(T).await.expect("watch ended");
        assert_eq!(
            e["path"].as_str().unwrap(),
            format!("{root}/{}", e["name"].as_str().unwrap())
        );
        seen.push((
            e["type"].as_str().unwrap().into(),
            e["name"].as_str().unwrap().into(),
        ));
    }
}

#[tokio::test]
async fn watch_reports_changes() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    a.post("/files/mkdir", json!({"path": "w/sub"})).await;
    let mut events = watch(&a, "path=w&recursive=true").await;
    let start = events.next_within(T).await.unwrap();
    assert_eq!(
        (start["type"].as_str(), start["is_dir"].as_bool()),
        (Some("start"), Some(true))
    );
    let root = start["path"].as_str().unwrap().to_string();

    put(&a, "w/sub/new.txt", "1").await;
    let script =
        "cd w && echo more >> sub/new.txt && chmod 600 sub/new.txt && mv sub/new.txt moved.txt \
                  && rm moved.txt";
    let r = a.post("/commands", json!({"cmd": script})).await.1;
    assert_eq!(r["exit_code"], 0, "{r}");
    let want = [
        ("create", "sub/new.txt"),
        ("write", "sub/new.txt"),
        ("chmod", "sub/new.txt"),
        ("rename", "sub/new.txt"),
        ("create", "moved.txt"),
        ("remove", "moved.txt"),
    ];
    let mut seen: Vec<(String, String)> = Vec::new();
    await_events(&mut events, &root, &want, &mut seen).await;
    // New directories are watched too (once their `create` is seen).
    a.post("/files/mkdir", json!({"path": "w/d2/d3"})).await;
    await_events(&mut events, &root, &[("create", "d2")], &mut seen).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    put(&a, "w/d2/d3/inner", "x").await;
    // An upload is a create and a write, as a write in place shows (E2B's SDKs wait for both).
    await_events(
        &mut events,
        &root,
        &[("create", "d2/d3/inner"), ("write", "d2/d3/inner")],
        &mut seen,
    )
    .await;
    assert!(
        seen.iter().all(|(_, n)| !n.contains(".lizard-upload-")),
        "upload temporaries are hidden: {seen:?}"
    );
    // Non-recursive watches see only direct entries.
    let mut flat = watch(&a, "path=w").await;
    flat.next_within(T).await.unwrap();
    put(&a, "w/sub/deep.txt", "x").await;
    put(&a, "w/top.txt", "x").await;
    let e = flat.next_within(T).await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["name"].as_str()),
        (Some("create"), Some("top.txt")),
        "{e}"
    );
}

#[tokio::test]
async fn kernel_file_systems_are_refused_however_the_path_gets_there() {
    lizard_test_support::needs_root!();
    // The files API runs in the agent: /proc/self there is the agent's own memory, descriptors
    // and environment (in a sandbox its descriptors name host files), not a file of the sandbox.
    let a = Agent::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::os::unix::fs::symlink("/proc/self", d.join("me")).unwrap();
    std::os::unix::fs::symlink("/proc/self/fd/1", d.join("stdout")).unwrap();
    std::os::unix::fs::symlink("/sys", d.join("sys")).unwrap();
    // A chain of relative links that ends in /proc.
    std::fs::create_dir(d.join("hop")).unwrap();
    std::os::unix::fs::symlink("../hop2", d.join("hop").join("next")).unwrap();
    std::os::unix::fs::symlink("/proc/1", d.join("hop2")).unwrap();
    let p = |rel: &str| d.join(rel).display().to_string();
    let refused = |status: u16, body: &Value, what: &str| {
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("permission_denied")),
            "{what}: {body}"
        );
    };
    for path in [
        "/proc/self/status".to_string(),
        "/proc/self/environ".to_string(),
        "/proc/1/cmdline".to_string(),
        "/sys/kernel/notes".to_string(),
        p("me/maps"),
        p("stdout"),
        p("hop/next/status"),
        format!("{}/../../../../../../proc/self/mem", d.display()),
    ] {
        let (status, body) = get(&a, &path).await;
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        refused(status, &body, &format!("read {path}"));
        let (status, body) = stat(&a, &path).await;
        refused(status, &body, &format!("stat {path}"));
        let (status, body) = put(&a, &path, "x").await;
        refused(status, &body, &format!("write {path}"));
    }
    let (status, body) = a
        .call(
            "GET",
            &format!("/files/list?path={}", url_path(&p("sys"))),
            None,
        )
        .await;
    refused(status, &body, "list a link to /sys");
    let (status, body) = a
        .post(
            "/files/rename",
            json!({"from": p("hop"), "to": "/proc/self/x"}),
        )
        .await;
    refused(status, &body, "rename into /proc");
    // A listing of `/` shows /proc and /sys as entries but never walks into them.
    let (status, body) = a.call("GET", "/files/list?path=%2F&depth=2", None).await;
    assert_eq!(status, 200, "{body}");
    let paths: Vec<&str> = body
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(paths.contains(&"/proc"), "{paths:?}");
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("/proc/") || p.starts_with("/sys/")),
        "listed inside a kernel file system: {:?}",
        paths
            .iter()
            .filter(|p| p.starts_with("/proc/"))
            .take(5)
            .collect::<Vec<_>>()
    );
    // Ordinary files next to the links are still served.
    let (status, _) = put(&a, &p("plain.txt"), "ok").await;
    assert_eq!(status, 200);
    let (status, bytes) = get(&a, &p("plain.txt")).await;
    assert_eq!((status, &bytes[..]), (200, &b"ok"[..]));
}
