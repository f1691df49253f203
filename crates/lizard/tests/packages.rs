//! The package registries' mirror (`lizard-packages`, issue #19): every sandbox, with no egress at
//! all, reaches the operator's registries through a listener of the server's at
//! `127.100.0.1:3142` inside its own network namespace, and nothing else through it. Here the
//! registry is a small upstream on the host's loopback that records what reaches it (the real
//! registries, pypiserver and verdaccio, are in `packages_install.rs`); sandboxes attack the
//! mirror from inside with raw HTTP and check that only the registry's own paths ever leave.

mod common;

use common::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An upstream "registry" on the host's loopback: answers every request with
/// `upstream saw <path>` (text/plain) and records the request lines it got.
struct Upstream {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start() -> Upstream {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                        match c.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let line = head.lines().next().unwrap_or_default().to_string();
                    let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                    seen.lock().unwrap().push(head);
                    let body = format!("upstream saw {path}");
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = c.write_all(resp.as_bytes()).await;
                });
            }
        });
        Upstream { url, seen, task }
    }

    /// The request heads it received so far.
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Python for the sandbox: send `raw` (bytes, already escaped for a Python literal) to the
/// mirror and print the status line and the body's first 600 characters.
fn raw_request(raw: &str) -> String {
    format!(
        r#"
import socket
s = socket.create_connection(("127.100.0.1", 3142), timeout=30)
s.sendall(b"{raw}")
data = b""
def more():
    global data
    try:
        c = s.recv(65536)
    except socket.timeout:
        return False
    data += c
    return bool(c)
while b"\r\n\r\n" not in data and more():
    pass
head, _, body = data.partition(b"\r\n\r\n")
length = None
for line in head.split(b"\r\n")[1:]:
    k, _, v = line.partition(b":")
    if k.strip().lower() == b"content-length":
        length = int(v.strip())
while (length is None or len(body) < length) and more():
    head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(errors="replace"))
print(body[:600].decode(errors="replace"))
"#
    )
}

async fn py(s: &Server, id: &str, code: &str) -> Value {
    s.run(id, json!({"code": code, "language": "python"})).await
}

#[tokio::test]
async fn the_mirror_reaches_only_its_registries_whatever_the_sandbox_sends() {
    lizard_test_support::needs_root!();
    let up = Upstream::start().await;
    let reg = format!("pypi={}", up.url);
    let s = Server::start_in(tempfile::tempdir().unwrap(), &["--package-registry", &reg]);
    let api_port = s.addr.rsplit(':').next().unwrap().to_string();
    let id = s.create(&s.admin_key.clone(), json!({})).await;

    // The sandbox's tools are pointed at the mirror out of the box, and a request through it
    // reaches the registry, at the registry's own path.
    let ex = py(
        &s,
        &id,
        "import os, urllib.request\n\
         print(os.environ['PIP_INDEX_URL'])\n\
         print(urllib.request.urlopen(os.environ['PIP_INDEX_URL'] + 'tabulate/').read().decode())",
    )
    .await;
    let out = stdout(&ex);
    assert!(out.contains("http://127.100.0.1:3142/pypi/simple/"), "{ex}");
    assert!(out.contains("upstream saw /simple/tabulate/"), "{ex}");

    // Each of these is refused by the mirror, and none reaches anything.
    let before = up.seen().len();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            "GET /pypi/../../etc/passwd HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".into(),
            "400",
            "path traversal",
        ),
        (
            "GET /pypi/%2e%2e/%2e%2e/etc/passwd HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".into(),
            "400",
            "encoded path traversal",
        ),
        (
            format!(
                "GET http://127.0.0.1:{api_port}/v1/sandboxes HTTP/1.1\\r\\nHost: 127.0.0.1:{api_port}\\r\\n\\r\\n"
            ),
            "403",
            "the host's API, absolute-form",
        ),
        (
            format!("CONNECT 127.0.0.1:{api_port} HTTP/1.1\\r\\nHost: 127.0.0.1:{api_port}\\r\\n\\r\\n"),
            "403",
            "the host's API, CONNECT",
        ),
        (
            "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\\r\\nHost: 169.254.169.254\\r\\n\\r\\n".into(),
            "403",
            "the metadata address",
        ),
        (
            "CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n".into(),
            "403",
            "any other host",
        ),
        (
            "POST /pypi/x HTTP/1.1\\r\\nHost: x\\r\\ncontent-length: 2\\r\\n\\r\\nhi".into(),
            "405",
            "a POST",
        ),
        (
            "GET /nosuchregistry/x HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".into(),
            "404",
            "an unknown registry",
        ),
    ];
    for (raw, status, what) in &cases {
        let ex = py(&s, &id, &raw_request(raw)).await;
        let out = stdout(&ex);
        let first = out.lines().next().unwrap_or_default();
        assert!(
            first.contains(status),
            "{what}: expected {status}, got {out:?} {}",
            stderr(&ex)
        );
    }
    assert_eq!(
        up.seen().len(),
        before,
        "a refused request reached the registry: {:?}",
        &up.seen()[before..]
    );

    // The Host header cannot choose the upstream: the registry gets it, at its own path.
    let ex = py(
        &s,
        &id,
        &raw_request(&format!(
            "GET /pypi/hosted HTTP/1.1\\r\\nHost: 127.0.0.1:{api_port}\\r\\nConnection: close\\r\\n\\r\\n"
        )),
    )
    .await;
    assert!(stdout(&ex).contains("upstream saw /hosted"), "{ex}");

    // Without egress, any other destination gets the explanation at once (the proxy variables
    // point there), not a DNS time-out.
    let ex = py(
        &s,
        &id,
        "import urllib.request\n\
         try:\n    urllib.request.urlopen('https://example.com/', timeout=60)\n\
         except Exception as e:\n    print('refused:', e)",
    )
    .await;
    let out = stdout(&ex);
    assert!(out.contains("refused:"), "{ex}");
    assert!(out.contains("no internet egress"), "{ex}");
    let (out, ex) = s.sh(&id, "curl -sS http://example.com/ 2>&1; true").await;
    assert!(out.contains("network.egress"), "{ex}");
    // Node's own fetch too (NODE_USE_ENV_PROXY): the proxy's 403, at once.
    let ex = s
        .run(
            &id,
            json!({"language": "javascript", "code": "let why = []; try { await fetch('https://example.com/') } catch (e) { for (let c = e; c; c = c.cause) why.push(String(c) + ' ' + (c.code ?? '')) } console.log('refused:', why.join(' <- '))"}),
        )
        .await;
    assert!(stdout(&ex).contains("403"), "{ex}");

    // The owner sees what was refused (bounded, newest last) and the traffic.
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{id}/network/log"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let refused: Vec<String> = r.body["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["method"].as_str().unwrap(),
                e["destination"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        refused.iter().any(|d| d == "CONNECT example.com:443"),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|d| d.contains("169.254.169.254")),
        "{refused:?}"
    );
    assert!(
        r.body["mirror"]["refused"].as_u64().unwrap() >= 6,
        "{}",
        r.text
    );
    assert!(
        r.body["mirror"]["served_bytes"].as_u64().unwrap() > 0,
        "{}",
        r.text
    );
    // Another project's key sees nothing of it.
    let other = s.project_key("someone-else").await;
    let r = s
        .req(
            Some(&other),
            "GET",
            &format!("/v1/sandboxes/{id}/network/log"),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

#[tokio::test]
async fn one_sandbox_holding_every_connection_does_not_slow_another() {
    lizard_test_support::needs_root!();
    let up = Upstream::start().await;
    let reg = format!("pypi={}", up.url);
    let s = Server::start_in(tempfile::tempdir().unwrap(), &["--package-registry", &reg]);
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let server = server_pid(s.data_dir.path());
    let a = s.create(&s.admin_key.clone(), json!({})).await;
    let b = s.create(&s.admin_key.clone(), json!({})).await;
    let before = fds(server);
    // Sandbox a opens 900 connections to the mirror and keeps them (a background process, so
    // that they stay open while b works).
    let (_, ex) = s
        .sh(
            &a,
            "nohup python3 -c '
import socket, time
held = []
for i in range(900):
    try:
        held.append(socket.create_connection((\"127.100.0.1\", 3142), timeout=5))
    except OSError:
        pass
open(\"/tmp/held\", \"w\").write(str(len(held)))
time.sleep(600)
' >/dev/null 2>&1 &
for i in $(seq 1 600); do [ -s /tmp/held ] && break; sleep 0.1; done; cat /tmp/held",
        )
        .await;
    assert!(stdout(&ex).trim().parse::<u32>().unwrap_or(0) > 100, "{ex}");
    // The server holds only a's budget of them (the others are closed at once)...
    let during = fds(server);
    assert!(
        during < before + 200,
        "the server holds {during} descriptors, {before} before sandbox a's 900 connections"
    );
    // ...and b is served as usual.
    let ex = py(
        &s,
        &b,
        &raw_request("GET /pypi/b HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n"),
    )
    .await;
    assert!(stdout(&ex).contains("upstream saw /b"), "{ex}");
}

/// Fetch `<PIP_INDEX_URL>probe/` from inside and return what came back.
async fn probe(s: &Server, id: &str) -> String {
    let ex = py(
        s,
        id,
        "import os, urllib.request\n\
         try:\n    print(urllib.request.urlopen(os.environ['PIP_INDEX_URL'] + 'probe/', timeout=60).read().decode())\n\
         except Exception as e:\n    print('failed:', e)",
    )
    .await;
    stdout(&ex)
}

#[tokio::test]
async fn the_mirror_follows_the_sandbox_through_hibernation_clones_and_a_server_restart() {
    lizard_test_support::needs_root!();
    let up = Upstream::start().await;
    let reg = format!("pypi={}", up.url);
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--package-registry", &reg, "--pool-size", "0"],
    );
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    assert!(probe(&s, &id).await.contains("upstream saw"));
    // A connection to the mirror open across the checkpoint: its peer is the host's, outside the
    // dumped tree; the sandbox is still checkpointed exactly (the connection is reset after).
    let (_, ex) = s
        .sh(
            &id,
            "nohup python3 -c 'import socket, time; s = socket.create_connection((\"127.100.0.1\", 3142)); open(\"/tmp/conn\", \"w\").write(\"1\"); time.sleep(600)' >/dev/null 2>&1 &
for i in $(seq 1 600); do [ -s /tmp/conn ] && break; sleep 0.1; done; cat /tmp/conn",
        )
        .await;
    assert_eq!(stdout(&ex).trim(), "1", "{ex}");
    for op in ["hibernate", "resume"] {
        let r = s.act(&id, op).await;
        assert_eq!(r.status, 200, "{op}: {}", r.text);
        if cached_criu().is_some() {
            let report = if op == "hibernate" {
                "hibernation"
            } else {
                "restore"
            };
            assert_eq!(r.body[report]["method"], "criu", "{op}: {}", r.text);
        }
    }
    assert!(
        probe(&s, &id).await.contains("upstream saw"),
        "after hibernate and resume"
    );
    let r = s
        .post(&format!("/v1/sandboxes/{id}/snapshots"), json!({}))
        .await;
    assert!(r.status == 200 || r.status == 201, "{}", r.text);
    let snap = r.body["snapshot_id"].as_str().unwrap().to_string();
    let clone = s
        .create(&s.admin_key.clone(), json!({"snapshot_id": snap}))
        .await;
    assert!(
        probe(&s, &clone).await.contains("upstream saw"),
        "in a clone"
    );
    let addr_args = ["--package-registry", reg.as_str(), "--pool-size", "0"];
    let dir = s.stop("-9");
    let s = Server::start_in(dir, &addr_args);
    assert!(
        probe(&s, &id).await.contains("upstream saw"),
        "after a server restart"
    );
    // Usage counts the mirror traffic of all three lives (before the hibernation, after the
    // resume — sampled by the snapshot —, after the restart): each life's counters start at zero
    // and add up.
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let r = s.admin("GET", "/v1/projects/default/usage", None).await;
    let u = r.body["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sandbox_id"] == json!(id))
        .cloned()
        .unwrap_or_else(|| panic!("no usage for {id}: {}", r.text));
    assert!(u["mirror_requests"].as_u64().unwrap() >= 3, "{u}");
}

#[tokio::test]
async fn a_project_without_package_registries_is_told_so() {
    lizard_test_support::needs_root!();
    let up = Upstream::start().await;
    let reg = format!("pypi={}", up.url);
    let s = Server::start_in(tempfile::tempdir().unwrap(), &["--package-registry", &reg]);
    let r = s
        .post(
            "/v1/projects",
            json!({"name": "offline", "package_registries": false}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let key = r.body["api_key"].as_str().unwrap().to_string();
    let r = s.req(Some(&key), "GET", "/v1/projects/offline", None).await;
    assert_eq!(r.body["package_registries"], json!(false), "{}", r.text);
    let id = s.create(&key, json!({})).await;
    let out = probe(&s, &id).await;
    assert!(out.contains("turned off"), "{out}");
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    // A project key may not turn them back on; an admin may, for the next sandboxes.
    let r = s
        .req(
            Some(&key),
            "PATCH",
            "/v1/projects/offline",
            Some(json!({"package_registries": true})),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = s
        .admin(
            "PATCH",
            "/v1/projects/offline",
            Some(json!({"package_registries": true})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = s.create(&key, json!({})).await;
    assert!(probe(&s, &id).await.contains("upstream saw"));
    let r = s
        .admin(
            "PATCH",
            "/v1/projects/offline",
            Some(json!({"package_registries": "yes"})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
}

/// The inode of the mirror's listening socket in the network namespace of `pid` (from its
/// `/proc/<pid>/net/tcp`: 127.100.0.1:3142, state LISTEN), if there is one.
fn mirror_listener_inode(pid: u32) -> Option<String> {
    let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"0100647F:0C46") && f.get(3) == Some(&"0A")).then(|| f[9].to_string())
    })
}

/// Whether process `pid` holds the socket with that inode.
fn holds_socket(pid: u32, inode: &str) -> bool {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == want))
}

/// The sandbox's PID 1 on the host (the lowest pid of its cgroup is its init).
fn init_pid(s: &Server, id: &str) -> u32 {
    let pids = sandbox_pids(s, id);
    *pids
        .first()
        .unwrap_or_else(|| panic!("no processes in {id}"))
}

/// Whether the server lets go of the socket within a minute.
async fn released(server: u32, inode: &str) -> bool {
    eventually(Duration::from_secs(60), || {
        let held = holds_socket(server, inode);
        async move { !held }
    })
    .await
}

#[tokio::test]
async fn killing_or_hibernating_a_sandbox_closes_its_listener_and_a_squatter_deprives_only_itself()
{
    lizard_test_support::needs_root!();
    let up = Upstream::start().await;
    let reg = format!("pypi={}", up.url);
    let args = ["--package-registry", reg.as_str(), "--pool-size", "0"];
    let s = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let server = server_pid(s.data_dir.path());
    let a = s.create(&s.admin_key.clone(), json!({})).await;
    let b = s.create(&s.admin_key.clone(), json!({})).await;
    assert!(probe(&s, &a).await.contains("upstream saw"));

    // Hibernation: the server's listener in a's namespace is closed...
    let inode = mirror_listener_inode(init_pid(&s, &a)).expect("a's mirror listener");
    assert!(
        holds_socket(server, &inode),
        "the server holds a's listener"
    );
    let r = s.act(&a, "hibernate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        released(server, &inode).await,
        "a hibernated sandbox's listener is still open"
    );
    // ...and a new one is made at the resume, closed again at the kill.
    let r = s.act(&a, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(probe(&s, &a).await.contains("upstream saw"));
    let inode = mirror_listener_inode(init_pid(&s, &a)).expect("a's mirror listener");
    let r = s.admin("DELETE", &format!("/v1/sandboxes/{a}"), None).await;
    assert!(r.status < 300, "{}", r.text);
    assert!(
        released(server, &inode).await,
        "a killed sandbox's listener is still open"
    );

    // b keeps trying to take the mirror's address; while the server holds it, it cannot.
    let b_init = init_pid(&s, &b);
    let (_, ex) = s
        .sh(
            &b,
            "nohup python3 -c '
import os, socket, time
while True:
    l = socket.socket()
    try:
        l.bind((\"127.100.0.1\", 3142))
        l.listen(8)
        break
    except OSError:
        l.close()
        if not os.path.exists(\"/tmp/refused\"):
            open(\"/tmp/refused.new\", \"w\").write(\"yes\")
            os.rename(\"/tmp/refused.new\", \"/tmp/refused\")
        time.sleep(0.05)
open(\"/tmp/squatting\", \"w\").write(\"yes\")
while True:
    c, _ = l.accept()
    c.recv(65536)
    c.sendall(b\"HTTP/1.1 200 OK\\r\\ncontent-length: 8\\r\\nconnection: close\\r\\n\\r\\nsquatter\")
    c.close()
' >/dev/null 2>&1 &
for i in $(seq 1 600); do [ -s /tmp/refused ] && break; sleep 0.1; done
cat /tmp/refused; echo; cat /tmp/squatting 2>/dev/null || echo not-squatting",
        )
        .await;
    assert_eq!(stdout(&ex).trim(), "yes\nnot-squatting", "{ex}");
    // The server goes (its listeners with it) and b takes the address before the next server
    // adopts it: b deprives only itself, the new server goes on and serves the others.
    let dir = s.stop("-9");
    let squatting = eventually(Duration::from_secs(60), || {
        let bound = mirror_listener_inode(b_init).is_some();
        async move { bound }
    })
    .await;
    assert!(squatting, "b did not take the address");
    let s = Server::start_in(dir, &args);
    let server = server_pid(s.data_dir.path());
    assert!(probe(&s, &b).await.contains("squatter"));
    let squat = mirror_listener_inode(b_init).expect("b's own listener");
    assert!(!holds_socket(server, &squat));
    let c = s.create(&s.admin_key.clone(), json!({})).await;
    assert!(probe(&s, &c).await.contains("upstream saw"));
    let (_, ex) = s.sh(&b, "echo still-served").await;
    assert_eq!(stdout(&ex).trim(), "still-served", "{ex}");
}
