//! Nobody can stall or exhaust the server: half-sent request heads from one client do not take
//! the API down for others, and an agent that never answers (here: the sandbox's PID 1 stopped
//! with SIGSTOP from the host, so its socket accepts and nothing ever answers) delays neither a
//! restart, nor other sandboxes' timeouts, nor its own kill. Real server, real sandboxes.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One request from source address `from` (another client than the test's usual 127.0.0.1).
async fn send_from(
    from: &str,
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(format!("{from}:0").parse().unwrap())
        .map_err(|e| e.to_string())?;
    let stream = sock
        .connect(addr.parse().unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "lizard")
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let resp = tx.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Open descriptors of a process.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn signal(pid: u64, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn half_sent_heads_from_one_client_do_not_take_the_api_down() {
    lizard_test_support::needs_root!();
    // The server starts as an operator's would: with the usual soft open-file limit of 1024
    // (it must raise it itself); this test process needs more for its attack.
    lizard_jail::process::set_nofile_soft(1024).unwrap();
    let s = Server::start();
    lizard_jail::process::raise_nofile_to_hard().unwrap();
    let pid = server_pid(s.data_dir.path());
    let before = open_fds(pid);

    // 1,200 connections from 127.0.0.1 (four threads), each with a request head that never
    // ends, all held open.
    let addr = s.addr.clone();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut held = Vec::new();
                let addr: std::net::SocketAddr = addr.parse().unwrap();
                // (A server out of descriptors stops accepting: then its backlog fills and
                // connects time out. On a busy machine a connect may time out anyway: the attack
                // tries again a few times, then holds what it got.)
                let mut failures = 0;
                while held.len() < 300 && failures < 10 {
                    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                        Ok(mut c) => {
                            let _ =
                                c.write_all(b"GET /health HTTP/1.1\r\nHost: lizard\r\nX-Slow: ");
                            held.push(c);
                        }
                        Err(_) => failures += 1,
                    }
                }
                held
            })
        })
        .collect();
    let held: Vec<std::net::TcpStream> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(held.len() >= 1_000, "opened {}", held.len());

    // Another client (127.0.0.2) is served at once: /health, and the API with a sandbox.
    let t0 = Instant::now();
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(8),
        send_from("127.0.0.2", &addr, "GET", "/health", "", None),
    )
    .await
    .expect("/health did not answer while one client held 1,200 half-sent heads")
    .expect("/health refused");
    assert_eq!(status, 200);
    let fds = open_fds(pid);
    // The per-address cap (512 by default) bounds what one client holds.
    assert!(
        fds <= before + 512 + 100,
        "{fds} fds open ({before} before)"
    );
    let key = s.admin_key.clone();
    let (status, created) = send_from(
        "127.0.0.2",
        &addr,
        "POST",
        "/v1/sandboxes",
        &key,
        Some(json!({})),
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{created}");
    let id = created["sandbox_id"].as_str().unwrap().to_string();
    let (status, ex) = send_from(
        "127.0.0.2",
        &addr,
        "POST",
        &format!("/v1/sandboxes/{id}/execute"),
        &key,
        Some(json!({"code": "echo served", "language": "bash"})),
    )
    .await
    .unwrap();
    assert_eq!((status, stdout(&ex).trim()), (200, "served"), "{ex}");
    eprintln!(
        "served another client in {:?} with {} heads held",
        t0.elapsed(),
        held.len()
    );

    // Half-open connections are shed after the head deadline (10 s): the server closes them
    // although the client keeps its ends open.
    assert!(
        eventually(Duration::from_secs(60), || async {
            open_fds(pid) < before + 100
        })
        .await,
        "{} fds still open ({before} before)",
        open_fds(pid)
    );
    drop(held);
}

#[tokio::test]
async fn a_hung_agent_delays_neither_a_restart_nor_its_own_kill() {
    lizard_test_support::needs_root!();
    let (s, hung) = Server::with_sandbox().await;
    let key = s.admin_key.clone();
    let thawed = s.create(&key, json!({})).await;
    s.sh(&thawed, "x=1").await;
    let pid = |id: &str| runtime_json(&s, id)["pid"].as_u64().unwrap();
    let (hung_pid, thawed_pid) = (pid(&hung), pid(&thawed));
    let hung_pids = sandbox_pids(&s, &hung);
    // Both agents stop answering: their sockets still accept, nothing ever answers.
    signal(hung_pid, "-STOP");
    signal(thawed_pid, "-STOP");

    let dir = s.stop("-KILL");
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Server::start_in(dir, &[]));
    });
    let s = match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(s) => s,
        Err(_) => {
            // Do not leave the stuck server (or the stopped sandboxes) behind.
            signal(server_pid(&path) as u64, "-KILL");
            signal(hung_pid, "-KILL");
            signal(thawed_pid, "-KILL");
            panic!("the restarted server did not listen within 90 s: adoption waits on an agent");
        }
    };
    let r = s.req(None, "GET", "/health", None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Both are adopted (alive by host-side facts), not lost.
    for id in [&hung, &thawed] {
        let info = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(
            (info.status, info.body["state"].as_str()),
            (200, Some("running")),
            "{}",
            info.text
        );
    }
    // An adopted sandbox whose agent comes back works as before.
    signal(thawed_pid, "-CONT");
    let (out, _) = s.sh(&thawed, "echo back").await;
    assert_eq!(out.trim(), "back");

    // The kill of the hung one completes, and its processes are gone.
    let t0 = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        s.admin("DELETE", &format!("/v1/sandboxes/{hung}"), None),
    )
    .await
    .expect("kill hung on a silent agent");
    assert!(r.status < 300, "{} {}", r.status, r.text);
    eprintln!("killed a sandbox with a silent agent in {:?}", t0.elapsed());
    assert!(
        eventually(Duration::from_secs(30), || async {
            hung_pids.iter().all(|p| gone_or_zombie(*p))
        })
        .await,
        "processes of the killed sandbox remain"
    );
    let gone = s.admin("GET", &format!("/v1/sandboxes/{hung}"), None).await;
    assert_eq!(gone.status, 404);
}

#[tokio::test]
async fn a_hung_agent_does_not_hold_up_other_sandboxes_timeouts() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let key = s.admin_key.clone();
    // Its timeout comes first, and its agent never answers the kill's last look.
    let hung = s.create(&key, json!({"timeout_ms": 2_000})).await;
    signal(runtime_json(&s, &hung)["pid"].as_u64().unwrap(), "-STOP");
    let other = s.create(&key, json!({"timeout_ms": 4_000})).await;
    for id in [&hung, &other] {
        assert!(
            eventually(Duration::from_secs(60), || async {
                s.admin("GET", &format!("/v1/sandboxes/{id}"), None)
                    .await
                    .status
                    == 404
            })
            .await,
            "sandbox {id} outlived its timeout"
        );
    }
}

/// A cell that streams for an hour (the sandbox decides how long a request is in flight) holds a
/// SIGTERM'd server for its shutdown grace at most: the server exits, the sandbox stays (a
/// restarted server adopts it).
#[tokio::test]
async fn a_streaming_cell_does_not_hold_the_servers_shutdown() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--shutdown-grace 1s");
    let key = s.admin_key.clone();
    let id = s.create(&key, json!({})).await;
    let mut stream = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let body =
        json!({"code": "print('up', flush=True)\nimport time\ntime.sleep(3600)"}).to_string();
    let head = format!(
        "POST /v1/sandboxes/{id}/execute HTTP/1.1\r\nhost: lizard\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\naccept: application/x-ndjson\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    // Until the cell runs (its first output is on the wire).
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let running = tokio::time::timeout(Duration::from_secs(60), async {
        while !String::from_utf8_lossy(&seen).contains("up") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        running.is_ok(),
        "the cell did not start: {}",
        String::from_utf8_lossy(&seen)
    );

    // The shutdown waits out the grace, not the cell (generous bound for a loaded machine).
    let dir = s
        .stop_within("-TERM", Duration::from_secs(60))
        .expect("the server was still running 60 s after SIGTERM: a streaming cell held it");
    // The held connection was closed by the server.
    let n = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break 0,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert_eq!(
        n,
        Ok(0),
        "the connection stayed open after the server exited"
    );

    // The sandbox outlived the server; a restarted one adopts it and kills it.
    let s = Server::start_in(dir, &[]);
    let info = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(info.status, 200, "{}", info.text);
}
