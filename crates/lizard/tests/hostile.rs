//! The hostile agent harness: sandboxes whose PID 1 is not the real agent but
//! `lizard-hostile-agent` in one of its attack modes (it hangs, floods, lies, redirects, floods its
//! log or dies), next to ordinary sandboxes on the same server. Lizard's threat model says the
//! agent is untrusted — code in the sandbox can replace it — so every server-wide effect of a
//! misbehaving agent is asserted absent here: other sandboxes keep their round trip and their
//! timeouts, metering goes on, kill completes and leaves nothing behind, a restarted server
//! listens, the server's memory and store stay bounded.
//!
//! The server runs with `--agent-wrapper <lizard-hostile-agent>`: a sandbox created without
//! `HOSTILE_AGENT` in its env runs the real agent (the wrapper executes it at once), one created
//! with `env: {HOSTILE_AGENT: <mode>}` gets the attacker.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The hostile agent, built next to the `lizard` binary by `cargo build --workspace`.
fn hostile_agent() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_lizard"));
    let p = bin.with_file_name("lizard-hostile-agent");
    assert!(
        p.is_file(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        p.display()
    );
    p
}

fn start(extra: &[&str]) -> Server {
    start_in(tempfile::tempdir().unwrap(), extra)
}

fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
    let wrapper = hostile_agent();
    let mut args = vec![
        "--agent-wrapper",
        wrapper.to_str().unwrap(),
        "--pool-size",
        "0",
        "--sample-interval-s",
        "1",
    ];
    args.extend_from_slice(extra);
    Server::start_in(dir, &args)
}

async fn create_hostile(s: &Server, mode: &str) -> String {
    s.create(
        &s.admin_key.clone(),
        json!({"env": {"HOSTILE_AGENT": mode}, "timeout_ms": 600_000}),
    )
    .await
}

async fn create_plain(s: &Server, body: Value) -> String {
    s.create(&s.admin_key.clone(), body).await
}

/// Median round trip of `n` trivial cells in sandbox `id`.
async fn round_trip(s: &Server, id: &str, n: usize) -> Duration {
    let mut times = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let ex = s.run(id, json!({"code": format!("{i} + 1")})).await;
        times.push(t.elapsed());
        assert!(ex["error"].is_null(), "{ex}");
    }
    times.sort();
    times[n / 2]
}

/// Whether the API has let go of sandbox `id`: a killed sandbox answers 404 (or, while its
/// cleanup ends, says `killed`).
async fn is_gone(s: &Server, id: &str) -> bool {
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    r.status == 404 || r.body["state"] == "killed"
}

/// Kill `id` and check that it returns in bounded time and leaves nothing on the host.
async fn kill_completely(s: &Server, id: &str) {
    let pid = runtime_json(s, id)["pid"].as_i64().unwrap_or(0);
    let t = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None),
    )
    .await
    .expect("kill returns even when the agent misbehaves");
    assert!(
        r.status == 204 || r.status == 200,
        "{} {}",
        r.status,
        r.text
    );
    assert!(t.elapsed() < Duration::from_secs(60));
    assert_nothing_left(s, id, pid).await;
}

/// No process, cgroup, mount or directory of sandbox `id` (PID 1 at host pid `pid`) is left.
async fn assert_nothing_left(s: &Server, id: &str, pid: i64) {
    let gone = eventually(Duration::from_secs(30), || async {
        // A zombie is gone as far as the sandbox is concerned once its parent reaps it.
        let proc_gone = pid <= 0 || gone_or_zombie(pid as u32);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = s.data_dir.path().join("sandboxes").join(id);
        proc_gone
            && !mounts.contains(id)
            && host_cgroup("/sys/fs/cgroup", id).is_none()
            && !dir.exists()
    })
    .await;
    assert!(gone, "sandbox {id} left something behind after its kill");
}

#[tokio::test]
async fn a_hanging_agent_slows_no_one_else() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let plain = create_plain(&s, json!({})).await;
    let before = round_trip(&s, &plain, 15).await;

    let hostile = create_hostile(&s, "hang").await;
    // Clients of the hostile sandbox wait on it (each a connection the server holds open).
    let mut waiting = Vec::new();
    for _ in 0..20 {
        let s2 = Server::client_for(&s.addr, &s.admin_key);
        let path = format!("/v1/sandboxes/{hostile}/contexts");
        waiting.push(tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(20), s2.admin("GET", &path, None)).await;
        }));
    }
    // A sandbox whose timeout passes while the hostile agent hangs is still killed.
    let timed = create_plain(&s, json!({"timeout_ms": 3000})).await;
    // Several sampler rounds (1 s each) pass with the hanging agent among the sampled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = round_trip(&s, &plain, 15).await;
    assert!(
        after <= before * 2 + Duration::from_millis(20),
        "the plain sandbox's round trip went from {before:?} to {after:?}"
    );
    let killed = eventually(Duration::from_secs(30), || async {
        is_gone(&s, &timed).await
    })
    .await;
    assert!(
        killed,
        "a timeout did not fire while another sandbox's agent hung"
    );
    // Metering of the plain sandbox goes on.
    let usage = |s: &Server| {
        let s = Server::client_for(&s.addr, &s.admin_key);
        let plain = plain.clone();
        async move {
            let r = s.admin("GET", "/v1/projects/default/usage", None).await;
            r.body["sandboxes"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|u| u["sandbox_id"] == plain.as_str())
                        .cloned()
                })
                .and_then(|u| u["running_seconds"].as_f64())
                .unwrap_or(0.0)
        }
    };
    let u0 = usage(&s).await;
    let advanced = eventually(Duration::from_secs(20), || async { usage(&s).await > u0 }).await;
    assert!(advanced, "metering stopped while an agent hung");

    kill_completely(&s, &hostile).await;
    for w in waiting {
        let _ = w.await;
    }
}

#[tokio::test]
async fn a_restarted_server_listens_while_an_agent_hangs() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let plain = create_plain(&s, json!({})).await;
    s.run(&plain, json!({"code": "kept = 41"})).await;
    let hostile = create_hostile(&s, "hang").await;
    let dir = s.stop("-KILL");
    // `start_in` returns once the server prints that it listens: it must not wait on the agent.
    let started = tokio::task::spawn_blocking(move || start_in(dir, &[]));
    let s = tokio::time::timeout(Duration::from_secs(60), started)
        .await
        .expect("the restarted server listens while an agent hangs")
        .unwrap();
    let health = s.req(None, "GET", "/health", None).await;
    assert_eq!(health.status, 200, "{}", health.text);
    // The plain sandbox was adopted with its state.
    let ok = eventually(Duration::from_secs(30), || async {
        s.post(
            &format!("/v1/sandboxes/{plain}/execute"),
            json!({"code": "kept + 1"}),
        )
        .await
        .text
        .contains("42")
    })
    .await;
    assert!(ok, "the plain sandbox was not adopted");
    // The hanging one is still known to the server (not lost) and can be killed.
    let known = eventually(Duration::from_secs(30), || async {
        s.admin("GET", &format!("/v1/sandboxes/{hostile}"), None)
            .await
            .status
            == 200
    })
    .await;
    assert!(known, "the hanging sandbox was lost at the restart");
    kill_completely(&s, &hostile).await;
}

#[tokio::test]
async fn a_flooding_agent_does_not_grow_the_server() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let pid = server_pid(s.data_dir.path());
    let plain = create_plain(&s, json!({})).await;
    round_trip(&s, &plain, 5).await;
    let rss_before = vm_hwm(pid);
    let mut hostile = Vec::new();
    for mode in ["flood", "flood-chunked", "slow"] {
        hostile.push(create_hostile(&s, mode).await);
    }
    // The server's own calls to these agents: sampler rounds (execution log), hibernation (the
    // snapshot report), and clients of the sandboxes that read a little and go away.
    for id in &hostile {
        let r = tokio::time::timeout(Duration::from_secs(120), s.act(id, "hibernate"))
            .await
            .expect("hibernate returns even when the agent floods");
        assert!(
            r.status >= 400,
            "a flooded snapshot is an error: {} {}",
            r.status,
            r.text
        );
        assert!(r.body["code"].is_string(), "typed error: {}", r.text);
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let grown = vm_hwm(pid).saturating_sub(rss_before);
    assert!(
        grown < 200 * 1024 * 1024,
        "the server grew by {} MiB while agents flooded it",
        grown / 1024 / 1024
    );
    let after = round_trip(&s, &plain, 5).await;
    assert!(after < Duration::from_secs(2), "{after:?}");
    for id in &hostile {
        kill_completely(&s, id).await;
    }
}

/// Rows of the store's `executions` table for sandbox `id` (read from the server's SQLite file,
/// which the API caps per page).
fn stored_executions(s: &Server, id: &str) -> u64 {
    let db = rusqlite::Connection::open_with_flags(
        s.data_dir.path().join("lizard.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT COUNT(*) FROM executions WHERE sandbox_id = ?1",
        [id],
        |r| r.get::<_, i64>(0),
    )
    .unwrap() as u64
}

#[tokio::test]
async fn a_lying_agent_cannot_inflate_the_store() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let hostile = create_hostile(&s, "lie").await;
    let created = Instant::now();
    // Every sampler round (1 s) the agent offers 10,000 invented records, new each time: stored
    // as they come they would be ~80,000 rows by now.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let rows = stored_executions(&s, &hostile);
    assert!(rows <= 10_000, "{rows} execution rows from one lying agent");
    let u = s.admin("GET", "/v1/projects/default/usage", None).await;
    let lived_s = created.elapsed().as_secs_f64() + 60.0;
    let totals = &u.body["totals"];
    for field in ["execution_wall_seconds", "execution_cpu_seconds"] {
        let v = totals[field].as_f64().unwrap_or(0.0);
        assert!(
            v <= lived_s * 1000.0,
            "{field} = {v}: impossible values were counted"
        );
    }
    let executions = totals["executions"].as_u64().unwrap_or(0);
    assert!(
        executions <= 100_000,
        "{executions} executions counted from one lying agent"
    );
    kill_completely(&s, &hostile).await;
}

#[tokio::test]
async fn an_agent_flooding_its_log_stays_bounded() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let hostile = create_hostile(&s, "log-flood").await;
    let log = s
        .data_dir
        .path()
        .join("sandboxes")
        .join(&hostile)
        .join("agent.log");
    let mut biggest = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        biggest = biggest.max(std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
    }
    assert!(
        biggest <= 9 * 1024 * 1024,
        "agent.log reached {} MiB between two looks",
        biggest / 1024 / 1024
    );
    kill_completely(&s, &hostile).await;
}

#[tokio::test]
async fn a_dying_agent_is_noticed() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let hostile = create_hostile(&s, "die").await;
    let pid = runtime_json(&s, &hostile)["pid"].as_i64().unwrap_or(0);
    let noticed = eventually(Duration::from_secs(30), || async {
        is_gone(&s, &hostile).await
    })
    .await;
    assert!(
        noticed,
        "the API still says the sandbox runs after its PID 1 died"
    );
    assert_nothing_left(&s, &hostile, pid).await;
}

#[tokio::test]
async fn redirects_and_garbage_from_an_agent_are_typed_errors() {
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let hostile = create_hostile(&s, "redirect").await;
    // Server-side calls on the agent answer with typed errors, never by following the agent.
    let r = s.act(&hostile, "hibernate").await;
    assert!(
        r.status >= 400 && r.body["code"].is_string(),
        "{} {}",
        r.status,
        r.text
    );
    kill_completely(&s, &hostile).await;
}

/// What the server forwards into a sandbox carries no credential of the client's: an agent that
/// answers every request with the head it got sees no key, whether it came as a bearer token,
/// as E2B's `X-API-Key` or offered as a WebSocket subprotocol for a terminal (a browser's way).
#[tokio::test]
async fn an_eavesdropping_agent_sees_no_key() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    lizard_test_support::needs_root!();
    let s = start(&[]);
    let id = create_hostile(&s, "eavesdrop").await;
    let key = s.admin_key.clone();
    let handshake = format!(
        "GET /v1/sandboxes/{id}/pty/ws?cols=80&rows=24 HTTP/1.1\r\nHost: {}\r\n\
         Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: lizard.pty.v1, lizard.key.{key}\r\n\r\n",
        s.addr
    );
    let api_key = format!(
        "GET /v1/sandboxes/{id}/commands HTTP/1.1\r\nHost: {}\r\nX-API-Key: {key}\r\n\
         Connection: close\r\n\r\n",
        s.addr
    );
    let bearer = format!(
        "GET /v1/sandboxes/{id}/commands HTTP/1.1\r\nHost: {}\r\n\
         Authorization: Bearer {key}\r\nConnection: close\r\n\r\n",
        s.addr
    );
    for (what, request, seen) in [
        (
            "a terminal's handshake",
            handshake,
            "GET /pty/ws?cols=80&rows=24",
        ),
        ("X-API-Key", api_key, "GET /commands"),
        ("a bearer token", bearer, "GET /commands"),
    ] {
        let mut c = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
        c.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), c.read_to_end(&mut got)).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.contains(seen), "{what}: the agent's answer is {got:?}");
        assert!(
            !got.contains(&key),
            "{what}: the agent saw the key: {got:?}"
        );
        assert!(!got.contains("lizard.key."), "{what}: {got:?}");
    }
    kill_completely(&s, &id).await;
}

#[tokio::test]
async fn a_hanging_snapshot_does_not_hold_other_sandboxes_memory_relief() {
    lizard_test_support::needs_root!();
    // Always under "memory pressure": every paused sandbox is to be hibernated, one at a time.
    // The hostile snapshot may hang for 30 s (longer than the 10 s one hibernation may hold the
    // next back; short enough that the hostile sandbox's kill, which waits for its hibernation
    // to end, stays within the test's bounds).
    let s = start(&[
        "--hibernate-below-mb",
        "100000000",
        "--agent-hibernate-timeout",
        "30s",
    ]);
    let hostile = create_hostile(&s, "hang").await;
    let r = s.act(&hostile, "pause").await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Paused after the hostile one: hibernated second, while the hostile snapshot still hangs.
    let plain = create_plain(&s, json!({})).await;
    s.run(&plain, json!({"code": "kept = 41"})).await;
    let r = s.act(&plain, "pause").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let relieved = s
        .reaches_state(&plain, "hibernated", Duration::from_secs(28))
        .await;
    assert!(
        relieved,
        "a hostile agent's hanging snapshot held back another sandbox's hibernation"
    );
    kill_completely(&s, &hostile).await;
}

/// An agent that lies in the host-only half of an exact context fork (its plan: itself as the
/// kernel, its socket as a pipe, a pipe the kernel does not hold, a cgroup outside its own, a pid
/// that is not its child): the host refuses each plan before it checkpoints anything, answers a
/// typed error, and leaves nothing behind (no images, no copy's init).
#[tokio::test]
async fn a_lying_agent_gets_no_context_fork() {
    lizard_test_support::needs_root_and_criu!();
    let s = start(&[]);
    let id = create_hostile(&s, "fork-lie").await;
    let refusals = [
        "is not a kernel",
        "not a pipe",
        "holds no pipe 12345",
        "names cgroup",
        "no child of the sandbox's PID 1",
    ];
    for (n, why) in refusals.iter().enumerate() {
        let r = s
            .post(
                &format!("/v1/sandboxes/{id}/contexts/ctx{n}/fork"),
                json!({"exact": true}),
            )
            .await;
        assert_eq!(r.status, 409, "{}", r.text);
        assert_eq!(r.body["code"], "conflict", "{}", r.text);
        assert!(r.text.contains(why), "lie {n}: {}", r.text);
    }
    let dir = s.data_dir.path().join("sandboxes").join(&id);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ctxfork-"))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "images left behind: {left:?}");
    // No copy's init (a child of the sandbox's PID 1 running the helper's code) was left.
    let pid1 = runtime_json(&s, &id)["pid"].as_i64().unwrap();
    let inits = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            status.contains(&format!("\nPPid:\t{pid1}\n"))
                && std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c == b"lizard\0context-fork\0")
        })
        .count();
    assert_eq!(inits, 0, "a copy's init is left");
    kill_completely(&s, &id).await;
}
