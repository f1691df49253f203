//! End-to-end tests of the agent's API surface: contexts CRUD, defaults, request validation,
//! framing. Real agent, real kernels.

mod common;

use common::*;
use lizard_proto::{ExecutionEvent, ExecutionStatus};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn health_over_unix_socket_and_tcp() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let (s, v) = a.call("GET", "/health", None).await;
    assert_eq!(s, 200);
    assert_eq!(v["status"], "ok");
    // The TCP listener serves the same API.
    let stream = tokio::net::TcpStream::connect(&a.tcp).await.unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let resp = tx
        .send_request(
            hyper::Request::get("/health")
                .header("host", "x")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn contexts_crud_and_restart_clears_state() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let (s, list) = a.call("GET", "/contexts", None).await;
    assert_eq!(s, 200);
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == id.as_str()));

    a.run_in(&id, "x = 42").await;
    assert_eq!(a.run_in(&id, "print(x * 2)").await.stdout_text(), "84\n");

    let (s, c) = a
        .call("POST", &format!("/contexts/{id}/restart"), None)
        .await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["id"], id.as_str());
    assert_eq!(c["kernel_restarts"], 1);
    let after = a.run_in(&id, "x").await;
    assert_eq!(after.error.unwrap().name, "NameError");
    assert_eq!(after.execution_count, 1, "a restarted kernel counts from 1");

    let (s, _) = a.call("DELETE", &format!("/contexts/{id}"), None).await;
    assert_eq!(s, 204);
    let (s, v) = a.call("GET", &format!("/contexts/{id}"), None).await;
    assert_eq!(s, 404);
    assert_eq!(v["code"], "not_found");
    let (s, _) = a.call("DELETE", &format!("/contexts/{id}"), None).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn delete_kills_the_kernel_process_tree() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for lang in ["python", "javascript", "bash"] {
        let id = a.context(lang).await;
        let code = match lang {
            "python" => "import os, subprocess; p = subprocess.Popen(['sleep', '300']); print(os.getpid(), p.pid)",
            "javascript" => "const cp = require('child_process'); const c = cp.spawn('sleep', ['300']); console.log(process.pid, c.pid)",
            _ => "sleep 300 & echo $$ $!",
        };
        let out = a.run_in(&id, code).await;
        let pids: Vec<i64> = out
            .stdout_text()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "{lang}: {out:?}");
        assert!(pids.iter().all(|p| alive(*p)));
        let (s, _) = a.call("DELETE", &format!("/contexts/{id}"), None).await;
        assert_eq!(s, 204);
        assert!(
            eventually(Duration::from_secs(10), || pids.iter().all(|p| !alive(*p))).await,
            "{lang}: kernel {pids:?} still alive after delete"
        );
    }
}

/// Contexts are listed in the order they were made (E2B's SDKs show them so), not by their
/// random ids: eight in a row come back in that order.
#[tokio::test]
async fn contexts_are_listed_in_creation_order() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let mut made = Vec::new();
    for i in 0..8 {
        made.push(a.context(if i % 2 == 0 { "bash" } else { "python" }).await);
    }
    let (s, list) = a.call("GET", "/contexts", None).await;
    assert_eq!(s, 200);
    let listed: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .filter(|id| made.contains(id))
        .collect();
    assert_eq!(listed, made);
}

#[tokio::test]
async fn contexts_are_isolated() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let p1 = a.context("python").await;
    let p2 = a.context("python").await;
    a.run_in(&p1, "secret = 1").await;
    let e = a.run_in(&p2, "print(secret)").await;
    assert_eq!(e.error.unwrap().name, "NameError");

    let j1 = a.context("js").await;
    let j2 = a.context("javascript").await;
    a.run_in(&j1, "const secret = 1").await;
    let e = a.run_in(&j2, "secret").await;
    assert_eq!(e.error.unwrap().name, "ReferenceError");

    let b1 = a.context("sh").await;
    let b2 = a.context("bash").await;
    a.run_in(&b1, "secret=1").await;
    assert_eq!(
        a.run_in(&b2, "echo \"[$secret]\"").await.stdout_text(),
        "[]\n"
    );
}

#[tokio::test]
async fn default_contexts_per_language() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    a.exec(json!({"code": "x = 1"})).await;
    let py = a.exec(json!({"code": "x + 1", "language": "python"})).await;
    assert_eq!(main_text(&py).as_deref(), Some("2"));
    let js = a
        .exec(json!({"code": "1 + 1", "language": "javascript"}))
        .await;
    assert_eq!(main_text(&js).as_deref(), Some("2"));
    a.exec(json!({"code": "y=3", "language": "bash"})).await;
    let sh = a.exec(json!({"code": "echo $y", "language": "sh"})).await;
    assert_eq!(sh.stdout_text(), "3\n");
    let (_, list) = a.call("GET", "/contexts", None).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "one default context per language: {list:?}");
    assert!(list.iter().all(|c| c["is_default"] == true));
}

#[tokio::test]
async fn concurrent_first_runs_share_one_default_context() {
    lizard_test_support::needs_root!();
    let a = std::sync::Arc::new(Agent::start());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            a.exec(json!({"code": "1", "language": "python"})).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, list) = a.call("GET", "/contexts", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn execution_count_is_monotonic() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("javascript").await;
    for i in 1..=5 {
        assert_eq!(a.run_in(&id, "1").await.execution_count, i);
    }
    let (_, c) = a.call("GET", &format!("/contexts/{id}"), None).await;
    assert_eq!(c["execution_count"], 5);
}

#[tokio::test]
async fn bad_requests_get_typed_errors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let (s, v) = a
        .post(
            "/execute",
            json!({"code": "1", "language": "python", "context": "x"}),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));
    assert!(v["message"].as_str().unwrap().contains("not both"));

    let (s, v) = a
        .post("/execute", json!({"code": "1", "context": "nope"}))
        .await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));

    let (s, v) = a
        .raw("POST", "/execute", Some("application/json"), "{not json")
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));

    let (s, v) = a.post("/execute", json!({"code": 5})).await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));

    let (s, v) = a
        .post("/execute", json!({"code": "1", "surprise": true}))
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));
    assert!(v["message"].as_str().unwrap().contains("surprise"));

    let (s, v) = a
        .post("/execute", json!({"code": "1", "language": "cobol"}))
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));
    assert!(v["message"].as_str().unwrap().contains("unknown language"));

    let (s, v) = a
        .post("/execute", json!({"code": "1", "env": {"A-B": "x"}}))
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));

    let (s, v) = a.raw("POST", "/execute", Some("text/plain"), "1").await;
    assert_eq!(
        (s, v["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );

    let big = format!("{{\"code\": \"{}\"}}", "x".repeat(17 * 1024 * 1024));
    let (s, v) = a
        .raw("POST", "/execute", Some("application/json"), big)
        .await;
    assert_eq!((s, v["code"].as_str()), (413, Some("payload_too_large")));

    let (s, v) = a
        .post(
            "/contexts",
            json!({"language": "python", "cwd": "/definitely/not/here"}),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("invalid_request")));

    let (s, v) = a.call("GET", "/no/such/route", None).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));

    // Nothing was lost: the agent still works.
    let ok = a.exec(json!({"code": "1 + 1"})).await;
    assert_eq!(ok.status, Some(ExecutionStatus::Ok));
}

#[tokio::test]
async fn context_cwd() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let dir = tempfile::tempdir().unwrap();
    let (s, c) = a
        .post(
            "/contexts",
            json!({"language": "bash", "cwd": dir.path().display().to_string()}),
        )
        .await;
    assert_eq!(s, 201);
    let out = a.run_in(c["id"].as_str().unwrap(), "pwd").await;
    assert_eq!(
        out.stdout_text().trim(),
        dir.path().canonicalize().unwrap().display().to_string()
    );
}

#[tokio::test]
async fn sse_framing() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let req = hyper::Request::post("/execute")
        .header("host", "x")
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            json!({"code": "echo hi", "language": "bash"}).to_string(),
        )))
        .unwrap();
    let (s, body) = {
        let stream = tokio::net::UnixStream::connect(&a.socket).await.unwrap();
        let (mut tx, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let resp = tx.send_request(req).await.unwrap();
        let s = resp.status();
        use http_body_util::BodyExt;
        (s, resp.into_body().collect().await.unwrap().to_bytes())
    };
    assert_eq!(s, 200);
    let text = String::from_utf8(body.to_vec()).unwrap();
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds, ["start", "stdout", "end"], "{text}");
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let f: lizard_proto::EventFrame = serde_json::from_str(data).unwrap();
        if let ExecutionEvent::Stdout { text } = f.event {
            assert_eq!(text, "hi\n");
        }
    }
}

#[tokio::test]
async fn execution_log_for_metering() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    a.exec(json!({"code": "sum(range(10**6))"})).await;
    a.exec(json!({"code": "1/0"})).await;
    let (s, v) = a.call("GET", "/executions?after=0", None).await;
    assert_eq!(s, 200);
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 2, "{v}");
    assert_eq!(recs[0]["status"], "ok");
    assert_eq!(recs[1]["status"], "error");
    assert!(recs[0]["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["next"], 2);
    let (_, v) = a.call("GET", "/executions?after=2", None).await;
    assert!(v["records"].as_array().unwrap().is_empty());
    assert_eq!(v["next"], 2);
    let (s, _) = a.call("GET", "/executions?after=x", None).await;
    assert_eq!(s, 400);
}

/// Outside a sandbox there is no delegated cgroup: per-context limits are refused with a typed
/// `unsupported` error (also with a `--context-cgroups` directory that is not delegated), and
/// contexts without limits work as usual, with no memory figure of their own.
#[tokio::test]
async fn context_limits_without_a_delegated_cgroup_are_refused() {
    lizard_test_support::needs_root!();
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().display().to_string();
    for agent in [
        Agent::start(),
        Agent::start_with(&["--context-cgroups", &dir]),
    ] {
        let (s, v) = agent
            .post(
                "/contexts",
                json!({"language": "python", "limits": {"memory_mb": 64}}),
            )
            .await;
        assert_eq!(s, 501, "{v}");
        assert_eq!(v["code"], "unsupported", "{v}");
        assert!(v["message"].as_str().unwrap().contains("limits"), "{v}");
        let (s, v) = agent.post("/contexts", json!({"language": "bash"})).await;
        assert_eq!(s, 201, "{v}");
        assert!(
            v.get("memory_bytes").is_none() && v.get("limits").is_none(),
            "{v}"
        );
        let (s, v) = agent
            .post("/contexts", json!({"language": "bash", "limits": {}}))
            .await;
        assert_eq!(s, 201, "empty limits are no limits: {v}");
    }
}

/// `--socket-fd`: the agent serves on a socket handed over already bound (as the launcher does for
/// sandboxes) and listens on it itself, so a client's `SO_PEERCRED` names the agent; an fd that is
/// not a Unix stream socket is refused at start.
#[test]
fn an_inherited_socket_is_served_and_anything_else_refused() {
    lizard_test_support::needs_root!();
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let sock = lizard_jail::hostpath::bind_unix_listener(&path).unwrap();
    let agent = |fd: std::os::fd::OwnedFd| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lizard-agent"));
        cmd.args([
            "--listen",
            "127.0.0.1:0",
            "--socket-fd",
            "3",
            "--kernel-env",
        ])
        .arg(kernel_env())
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .env("LIZARD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        lizard_jail::map_fds(&mut cmd, vec![(fd, 3)]);
        let child = cmd.spawn().unwrap();
        drop(cmd);
        child
    };
    let mut child = agent(sock);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let ready: serde_json::Value = serde_json::from_str(&line).expect("listening line");
    assert_eq!(ready["socket_fd"], 3, "{line}");
    let mut conn = std::os::unix::net::UnixStream::connect(&path).unwrap();
    conn.write_all(b"GET /health HTTP/1.1\r\nhost: agent\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let _ = child.kill();
    let _ = child.wait();

    let (r, _w) = lizard_jail::cloexec_pipe().unwrap();
    let out = agent(r).wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a socket"), "{err}");
}
