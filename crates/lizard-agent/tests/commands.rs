//! End-to-end tests of commands and terminals on a real agent: exit codes, streams, bytes, stdin,
//! background runs, reattaching, signals, timeouts, disconnects, buffering, PTYs, bad input.

mod common;
mod streaming;

use common::*;
use lizard_test_support::terminal_lines;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use streaming::*;

const NDJSON: &str = "application/x-ndjson";
const T: Duration = Duration::from_secs(30);

/// Run a command and wait for its aggregated result.
async fn run(a: &Agent, body: Value) -> Value {
    let (s, v) = a.post("/commands", body).await;
    assert_eq!(s, 200, "{v}");
    v
}

/// Start a command in the background; its pid.
async fn background(a: &Agent, body: Value) -> u64 {
    let mut body = body;
    body["background"] = json!(true);
    let (s, v) = a.post("/commands", body).await;
    assert_eq!(s, 201, "{v}");
    v["pid"].as_u64().unwrap()
}

async fn stream(a: &Agent, path: &str, body: Value) -> Lines {
    Lines::new(send(&a.socket, json_req("POST", path, &body, Some(NDJSON))).await)
}

async fn connect(a: &Agent, pid: u64, query: &str) -> Lines {
    let req = hyper::Request::get(format!("/commands/{pid}/stream{query}"))
        .header("host", "agent")
        .header("accept", NDJSON)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    Lines::new(send(&a.socket, req).await)
}

#[tokio::test]
async fn exit_codes_output_env_and_cwd() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let r = run(&a, json!({"cmd": "echo out; echo err >&2; exit 3"})).await;
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert!(r.get("signal").is_none());

    let r = run(&a, json!({"argv": ["printf", "%s|", "a b", "c"]})).await;
    assert_eq!(
        (r["exit_code"].as_i64(), r["stdout"].as_str()),
        (Some(0), Some("a b|c|"))
    );

    let r = run(
        &a,
        json!({"cmd": "echo \"$GREETING\"; pwd", "env": {"GREETING": "hi there"}}),
    )
    .await;
    let out: Vec<&str> = r["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(out[0], "hi there");
    let home = out[1].to_string();
    let (s, _) = a.post("/files/mkdir", json!({"path": "sub/dir"})).await;
    assert_eq!(s, 201);
    let r = run(&a, json!({"cmd": "pwd", "cwd": "sub/dir"})).await;
    assert_eq!(
        r["stdout"],
        format!("{home}/sub/dir\n"),
        "relative cwd is under the default cwd"
    );
    let r = run(&a, json!({"cmd": "pwd", "cwd": "/"})).await;
    assert_eq!(r["stdout"], "/\n");
    // `user` may name the sandbox user.
    let r = run(&a, json!({"cmd": "true", "user": "user"})).await;
    assert_eq!(r["exit_code"], 0);
}

#[tokio::test]
async fn streams_events_live_in_order() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let mut s = stream(
        &a,
        "/commands",
        json!({"cmd": "echo one; sleep 1; echo two >&2; sleep 1; echo three; exit 7"}),
    )
    .await;
    let start = s.next_within(T).await.unwrap();
    assert_eq!(start["type"], "start");
    assert!(start["pid"].as_u64().unwrap() > 0);
    let first = s.next_within(T).await.unwrap();
    assert_eq!(
        (first["type"].as_str(), first["text"].as_str()),
        (Some("stdout"), Some("one\n"))
    );
    let first_at = Instant::now();
    let rest = s.rest(T).await;
    // The first line came live, long before the process ended (two `sleep 1`s after it).
    assert!(
        first_at.elapsed() > Duration::from_millis(1000),
        "the first line came only with the rest"
    );
    let kinds: Vec<&str> = rest.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["stderr", "stdout", "end"], "{rest:?}");
    assert_eq!(rest[0]["text"], "two\n");
    let end = &rest[2];
    assert_eq!(end["exit_code"], 7);
    // Two `sleep 1`s: about 2 s, measured from when the agent had started the process (a few
    // ms after the process itself started, on a loaded machine), so not exactly ≥ 2000.
    assert!(end["duration_ms"].as_u64().unwrap() >= 1800, "{end}");

    // SSE framing works too.
    let resp = send(
        &a.socket,
        json_req(
            "POST",
            "/commands",
            &json!({"cmd": "echo x"}),
            Some("text/event-stream"),
        ),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = String::from_utf8(body_bytes(resp).await.to_vec()).unwrap();
    assert!(body.starts_with("event: start\ndata: {"), "{body}");
    assert!(body.contains("event: end\n"), "{body}");
}

#[tokio::test]
async fn invalid_utf8_and_binary_output_survive() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    // Every byte value, once, in order.
    let all = r#"for i in $(seq 0 255); do printf "\\x$(printf %02x $i)"; done"#;
    let r = run(&a, json!({"cmd": all, "base64": true})).await;
    let expect: Vec<u8> = (0..=255u8).collect();
    assert_eq!(b64(r["stdout_b64"].as_str().unwrap()), expect);
    let text = r["stdout"].as_str().unwrap();
    assert!(
        text.starts_with('\0') && text.contains('\u{FFFD}'),
        "lossy text: {text:?}"
    );

    // Streamed with bytes: concatenating data_b64 gives the exact bytes.
    let mut s = stream(&a, "/commands", json!({"cmd": all, "base64": true})).await;
    let events = s.rest(T).await;
    assert_eq!(bytes_of(&events, "stdout"), expect);

    // A character split across writes is never split in text.
    let mut s = stream(
        &a,
        "/commands",
        json!({"cmd": r"printf '\xe2\x82'; sleep 0.3; printf '\xac\xff\n'"}),
    )
    .await;
    let events = s.rest(T).await;
    assert_eq!(text_of(&events, "stdout"), "€\u{FFFD}\n", "{events:?}");
    assert!(
        events.iter().all(|e| e.get("data_b64").is_none()),
        "bytes only on request"
    );
    // A truncated character at the very end becomes one replacement character.
    let r = run(&a, json!({"cmd": r"printf 'a\xe2\x82'"})).await;
    assert_eq!(r["stdout"], "a\u{FFFD}");
}

#[tokio::test]
async fn stdin_pipe_and_close() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let pid = background(&a, json!({"cmd": "cat; echo eof", "stdin": true})).await;
    let mut s = connect(&a, pid, "?base64=true").await;
    assert_eq!(s.next_within(T).await.unwrap()["type"], "start");
    let (st, v) = a
        .post(
            &format!("/commands/{pid}/stdin"),
            json!({"data": "hello\n"}),
        )
        .await;
    assert_eq!(st, 204, "{v}");
    let e = s.next_within(T).await.unwrap();
    assert_eq!(e["text"], "hello\n");
    let (st, _) = a
        .post(
            &format!("/commands/{pid}/stdin"),
            json!({"data_b64": "AP8K"}),
        )
        .await;
    assert_eq!(st, 204);
    let e = s.next_within(T).await.unwrap();
    assert_eq!(b64(e["data_b64"].as_str().unwrap()), [0, 0xff, b'\n']);
    let (st, _) = a
        .call("POST", &format!("/commands/{pid}/stdin/close"), None)
        .await;
    assert_eq!(st, 204);
    let rest = s.rest(T).await;
    assert_eq!(text_of(&rest, "stdout"), "eof\n");
    assert_eq!(rest.last().unwrap()["exit_code"], 0);
    // Exited: input is a conflict.
    let (st, v) = a
        .post(&format!("/commands/{pid}/stdin"), json!({"data": "x"}))
        .await;
    assert_eq!((st, v["code"].as_str()), (409, Some("conflict")), "{v}");

    // Without `stdin: true` there is no pipe (stdin is /dev/null) and input is a conflict.
    let r = run(&a, json!({"cmd": "cat; echo done"})).await;
    assert_eq!(r["stdout"], "done\n", "cat read /dev/null");
    let pid = background(&a, json!({"cmd": "sleep 30"})).await;
    let (st, v) = a
        .post(&format!("/commands/{pid}/stdin"), json!({"data": "x"}))
        .await;
    assert_eq!((st, v["code"].as_str()), (409, Some("conflict")), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("stdin: true"),
        "{v}"
    );
    let (st, v) = a
        .post(
            &format!("/commands/{pid}/stdin"),
            json!({"data": "x", "data_b64": "eA=="}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    a.post(
        &format!("/commands/{pid}/signal"),
        json!({"signal": "SIGKILL"}),
    )
    .await;
}

#[tokio::test]
async fn background_list_reconnect_and_signal() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let pid = background(
        &a,
        json!({"cmd": "for i in 1 2 3; do echo line$i; sleep 0.3; done; sleep 30", "tag": "svc"}),
    )
    .await;
    let (s, list) = a.call("GET", "/commands", None).await;
    assert_eq!(s, 200);
    let me = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("{pid} not in {list}"))
        .clone();
    assert_eq!(
        me["cmd"],
        "for i in 1 2 3; do echo line$i; sleep 0.3; done; sleep 30"
    );
    assert_eq!(me["tag"], "svc");
    assert_eq!(me["argv"][1], "-c");
    assert!(me["cwd"].as_str().unwrap().starts_with('/'));
    assert!(me["started_at_ms"].as_u64().unwrap() > 0);
    assert!(me.get("end").is_none());

    // Reattach after some output: it is replayed, then the rest arrives live.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let mut s = connect(&a, pid, "").await;
    let start = s.next_within(T).await.unwrap();
    assert_eq!(
        (start["type"].as_str(), start["pid"].as_u64()),
        (Some("start"), Some(pid))
    );
    assert!(start.get("dropped_stdout_bytes").is_none());
    let mut out = String::new();
    while out != "line1\nline2\nline3\n" {
        let e = s.next_within(T).await.unwrap();
        out.push_str(e["text"].as_str().unwrap_or_default());
    }
    // A second reader at the same time sees the same.
    let mut s2 = connect(&a, pid, "").await;
    s2.next_within(T).await.unwrap();
    assert_eq!(s2.next_within(T).await.unwrap()["text"], "line1\n");

    let (st, v) = a
        .post(
            &format!("/commands/{pid}/signal"),
            json!({"signal": "SIGTERM"}),
        )
        .await;
    assert_eq!(st, 204, "{v}");
    let rest = s.rest(T).await;
    let end = rest.last().unwrap();
    assert_eq!(end["type"], "end");
    assert_eq!(end["signal"], "SIGTERM", "{end}");
    assert!(end.get("exit_code").is_none());
    drop(s2);

    // Finished: still queryable with its end, not listed as running, not signallable.
    let (st, info) = a.call("GET", &format!("/commands/{pid}"), None).await;
    assert_eq!(st, 200);
    assert_eq!(info["end"]["signal"], "SIGTERM");
    let (_, list) = a.call("GET", "/commands", None).await;
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["pid"].as_u64() != Some(pid)));
    let (st, v) = a
        .post(
            &format!("/commands/{pid}/signal"),
            json!({"signal": "SIGKILL"}),
        )
        .await;
    assert_eq!((st, v["code"].as_str()), (404, Some("not_found")), "{v}");
    // A late `wait` (aggregate of the stream) still gets the output and the exit.
    let (st, r) = a
        .call("GET", &format!("/commands/{pid}/stream"), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(r["stdout"], "line1\nline2\nline3\n");
    assert_eq!(r["signal"], "SIGTERM");

    // Signals go to the whole process group.
    let pid = background(&a, json!({"cmd": "sleep 300 & echo $!; wait"})).await;
    let mut s = connect(&a, pid, "").await;
    s.next_within(T).await.unwrap();
    let child: i64 = s.next_within(T).await.unwrap()["text"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(child));
    a.post(
        &format!("/commands/{pid}/signal"),
        json!({"signal": "KILL"}),
    )
    .await;
    assert_eq!(s.rest(T).await.last().unwrap()["signal"], "SIGKILL");
    assert!(
        eventually(T, || !alive(child)).await,
        "the group's child was killed too"
    );
}

#[tokio::test]
async fn client_disconnect_does_not_stop_the_command() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let mut s = stream(&a, "/commands", json!({"cmd": "sleep 0.5; echo finished"})).await;
    let pid = s.next_within(T).await.unwrap()["pid"].as_u64().unwrap();
    drop(s);
    let mut info = Value::Null;
    for _ in 0..200 {
        info = a.call("GET", &format!("/commands/{pid}"), None).await.1;
        if info.get("end").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(info["end"]["exit_code"], 0, "it ran to the end: {info}");
    let (_, r) = a
        .call("GET", &format!("/commands/{pid}/stream"), None)
        .await;
    assert_eq!(r["stdout"], "finished\n");
}

#[tokio::test]
async fn timeout_stops_the_process_group() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let t0 = Instant::now();
    let r = run(
        &a,
        json!({"cmd": "echo before; sleep 30; echo after", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["signal"], "SIGTERM");
    assert_eq!(r["stdout"], "before\n");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A process that ignores SIGTERM is killed after the grace period.
    let t0 = Instant::now();
    let r = run(
        &a,
        json!({"cmd": "trap '' TERM; sleep 30", "timeout_ms": 200}),
    )
    .await;
    assert_eq!(
        (r["timed_out"].as_bool(), r["signal"].as_str()),
        (Some(true), Some("SIGKILL")),
        "{r}"
    );
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(2000) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // A command that finishes in time is not marked.
    let r = run(&a, json!({"cmd": "true", "timeout_ms": 10000})).await;
    assert!(r.get("timed_out").is_none(), "{r}");
}

#[tokio::test]
async fn late_readers_get_the_last_mib_and_live_readers_get_everything() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    // 3 MiB with nobody attached: a later reader gets the last 1 MiB (give or take a chunk) and is
    // told how much it missed.
    let total = 3 * 1024 * 1024u64;
    let pid = background(
        &a,
        json!({"cmd": format!("head -c {total} /dev/zero | tr '\\0' a")}),
    )
    .await;
    let mut ended = false;
    for _ in 0..200 {
        let (_, info) = a.call("GET", &format!("/commands/{pid}"), None).await;
        if info.get("end").is_some() {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ended);
    let (_, r) = a
        .call("GET", &format!("/commands/{pid}/stream"), None)
        .await;
    let kept = r["stdout"].as_str().unwrap().len() as u64;
    let dropped = r["dropped_stdout_bytes"].as_u64().unwrap();
    assert_eq!(kept + dropped, total);
    assert!(
        (1024 * 1024..=1024 * 1024 + 64 * 1024).contains(&kept),
        "kept {kept}"
    );
    let mut s = connect(&a, pid, "").await;
    let start = s.next_within(T).await.unwrap();
    assert_eq!(start["dropped_stdout_bytes"].as_u64(), Some(dropped));

    // 24 MiB to an attached reader: nothing is lost (the process waits for the reader).
    let total = 24 * 1024 * 1024usize;
    let mut s = stream(
        &a,
        "/commands",
        json!({"cmd": format!("yes 0123456789abcdef | head -c {total}")}),
    )
    .await;
    let mut got = 0usize;
    let mut end = Value::Null;
    while let Some(e) = s.next_within(T).await {
        match e["type"].as_str() {
            Some("stdout") => got += e["text"].as_str().unwrap().len(),
            Some("end") => end = e,
            _ => {}
        }
        if got < 4 * 1024 * 1024 {
            // Read slowly at first, so the process gets ahead of us.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert_eq!(got, total);
    assert_eq!(end["exit_code"], 0);
}

#[tokio::test]
async fn terminal_echo_resize_input_and_kill() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let (s, v) = a
        .post("/pty", json!({"cols": 80, "rows": 24, "background": true}))
        .await;
    assert_eq!(s, 201, "{v}");
    let pid = v["pid"].as_u64().unwrap();
    assert_eq!(v["pty"], json!({"cols": 80, "rows": 24}));
    assert_eq!(v["stdin"], true);
    let mut out = connect(&a, pid, "").await;
    assert_eq!(out.next_within(T).await.unwrap()["type"], "start");
    let mut raw = Vec::new();
    let send_keys = |keys: &'static str| {
        let path = format!("/pty/{pid}/input");
        let a = &a;
        async move {
            let (s, v) = a.post(&path, json!({"data": keys})).await;
            assert_eq!(s, 204, "{v}");
        }
    };
    async fn read_until(out: &mut Lines, raw: &mut Vec<u8>, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !terminal_lines(raw).iter().any(|l| l == want) {
            assert!(
                Instant::now() < deadline,
                "no line {want:?} in {:?}",
                terminal_lines(raw)
            );
            let e = out
                .next_within(Duration::from_secs(20))
                .await
                .expect("terminal ended");
            assert_eq!(e["type"], "stdout", "{e}");
            raw.extend(b64(e["data_b64"]
                .as_str()
                .expect("PTY output carries bytes")));
        }
    }
    send_keys("echo $((6*7))\r").await;
    read_until(&mut out, &mut raw, "42").await;

    let (s, v) = a
        .post(
            &format!("/pty/{pid}/resize"),
            json!({"cols": 100, "rows": 50}),
        )
        .await;
    assert_eq!(s, 204, "{v}");
    send_keys("stty size\r").await;
    read_until(&mut out, &mut raw, "50 100").await;
    let (_, info) = a.call("GET", &format!("/commands/{pid}"), None).await;
    assert_eq!(info["pty"], json!({"cols": 100, "rows": 50}));
    // It is a real terminal: the shell sees a tty, and raw bytes (Ctrl-C) reach it.
    send_keys("echo sleeping; sleep 100\r").await;
    read_until(&mut out, &mut raw, "sleeping").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, _) = a
        .post(&format!("/pty/{pid}/input"), json!({"data_b64": "Aw=="}))
        .await;
    assert_eq!(s, 204);
    send_keys("test -t 0 && echo is-a-tty\r").await;
    read_until(&mut out, &mut raw, "is-a-tty").await;

    let (s, _) = a
        .post(
            &format!("/commands/{pid}/signal"),
            json!({"signal": "SIGKILL"}),
        )
        .await;
    assert_eq!(s, 204);
    let rest = out.rest(T).await;
    assert_eq!(rest.last().unwrap()["signal"], "SIGKILL");

    // Foreground PTY with a command: streams until it exits.
    let mut s = stream(
        &a,
        "/pty",
        json!({"cols": 20, "rows": 5, "cmd": "stty size; tty"}),
    )
    .await;
    let events = s.rest(T).await;
    let lines = terminal_lines(&bytes_of(&events, "stdout"));
    assert_eq!(lines[0], "5 20", "{lines:?}");
    assert!(lines[1].starts_with("/dev/pts/"), "{lines:?}");
    assert_eq!(events.last().unwrap()["exit_code"], 0);

    // PTY routes refuse plain commands, and sizes are checked.
    let cpid = background(&a, json!({"cmd": "sleep 30"})).await;
    let (s, v) = a
        .post(&format!("/pty/{cpid}/input"), json!({"data": "x"}))
        .await;
    assert_eq!((s, v["code"].as_str()), (409, Some("conflict")));
    let (s, _) = a
        .post(
            &format!("/pty/{cpid}/resize"),
            json!({"cols": 10, "rows": 10}),
        )
        .await;
    assert_eq!(s, 409);
    a.post(
        &format!("/commands/{cpid}/signal"),
        json!({"signal": "SIGKILL"}),
    )
    .await;
    for body in [
        json!({"cols": 0, "rows": 24}),
        json!({"cols": 80}),
        json!({"cols": 80, "rows": 24, "x": 1}),
    ] {
        let (s, v) = a.post("/pty", body).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("invalid_request")),
            "{v}"
        );
    }
}

#[tokio::test]
async fn bad_requests_get_typed_errors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for body in [
        json!({}),
        json!({"cmd": "ls", "argv": ["ls"]}),
        json!({"cmd": "  "}),
        json!({"cmd": "echo \u{0}"}),
        json!({"argv": []}),
        json!({"argv": [""]}),
        json!({"cmd": "ls", "env": {"A-B": "x"}}),
        json!({"cmd": "ls", "env": {"A": "x\u{0}"}}),
        json!({"cmd": "ls", "cwd": "/no/such/dir"}),
        json!({"cmd": "ls", "cwd": ""}),
        json!({"cmd": "ls", "timeout_ms": 0}),
        json!({"cmd": "ls", "user": "root"}),
        json!({"cmd": "ls", "surprise": 1}),
        json!({"cmd": 5}),
        json!({"argv": ["/no/such/program"]}),
    ] {
        let (s, v) = a.post("/commands", body.clone()).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("invalid_request")),
            "{body} → {v}"
        );
        assert!(!v["message"].as_str().unwrap().is_empty());
    }
    let (s, v) = a.call("GET", "/commands/4000000", None).await;
    assert_eq!((s, v["code"].as_str()), (404, Some("not_found")));
    let (s, _) = a.call("GET", "/commands/abc", None).await;
    assert_eq!(s, 400);
    let (s, _) = a.call("GET", "/commands/4000000/stream", None).await;
    assert_eq!(s, 404);
    let (s, _) = a
        .post("/commands/4000000/signal", json!({"signal": "SIGTERM"}))
        .await;
    assert_eq!(s, 404);
    let pid = background(&a, json!({"cmd": "sleep 30"})).await;
    for sig in ["SIGNOPE", "", "9"] {
        let (s, v) = a
            .post(&format!("/commands/{pid}/signal"), json!({"signal": sig}))
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("invalid_request")),
            "{sig}: {v}"
        );
    }
    let (s, _) = a
        .call("GET", &format!("/commands/{pid}/stream?bogus=1"), None)
        .await;
    assert_eq!(s, 400);
    a.post(
        &format!("/commands/{pid}/signal"),
        json!({"signal": "SIGKILL"}),
    )
    .await;
}
