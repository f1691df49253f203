//! Test harness: a real `lizard serve` on a free port with a temporary data dir, sharing the
//! template built once by `scripts/test.sh` (`LIZARD_TEMPLATES_FROM`), and a small HTTP client.
//! What every crate's tests share (the root check, waiting, processes, raw HTTP) is in
//! `lizard-test-support`. Dropping a [`Server`] kills every sandbox it lists (sandboxes outlive
//! their server by design), so a test need not end with [`Server::kill_all`]; it then fails the
//! test if a sandbox of its data dir still runs, one the server lost track of.

#![allow(dead_code)]

pub mod outside;
pub mod registries;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use lizard_test_support as support;
#[allow(unused_imports)] // each test binary uses a part of the harness
pub use lizard_test_support::{cached_criu, eventually, gone_or_zombie};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

pub struct Server {
    child: Option<Child>,
    pub addr: String,
    pub data_dir: tempfile::TempDir,
    pub admin_key: String,
}

/// The data dir holding the built templates (made by `lizard template build`, see scripts/test.sh).
pub fn templates_from() -> PathBuf {
    support::built(
        "LIZARD_TEMPLATES_FROM",
        "lizard-data",
        |p| p.join("templates").is_dir(),
        "the built templates",
        "run scripts/test.sh (it builds code-interpreter-v1 first)",
    )
}

pub struct Resp {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    /// Assert that this is the typed error `code` with HTTP `status`.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.body["code"].as_str()),
            (status, Some(code)),
            "{}",
            self.text
        );
    }
}

/// One request with arbitrary method, headers and body bytes on a fresh connection; the answer
/// with its headers, its body as JSON (Null if it is not) and as text.
pub async fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Resp {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "lizard");
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    let resp = support::send_over(stream, b.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: no answer ({e})"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: body cut ({e})"))
        .to_bytes();
    Resp {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Template build sandboxes get 2 GiB disks in tests, not the default 8 GiB: every disk is promised
/// space on the data dir's file system up front, and a CI machine's may have less than 9 GiB free
/// (the builds of the tests need far less).
pub const SMALL_BUILD_DISK: [&str; 2] = ["--template-build-disk-mb", "2048"];

impl Server {
    pub fn start() -> Server {
        Self::start_in(tempfile::tempdir().unwrap(), &[])
    }

    /// A server with default flags and one sandbox of the admin's (its id).
    pub async fn with_sandbox() -> (Server, String) {
        let s = Server::start();
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        (s, id)
    }

    /// A server in a fresh data dir started with `flags`, split at white space
    /// (`"--pool-size 0 --rate-limit-rps 0"`).
    pub fn with_flags(flags: &str) -> Server {
        let flags: Vec<&str> = flags.split_whitespace().collect();
        Self::start_in(tempfile::tempdir().unwrap(), &flags)
    }

    pub fn start_in(data_dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Self::start_from(Path::new(env!("CARGO_BIN_EXE_lizard")), data_dir, extra)
    }

    /// [`Server::start_in`] with another `lizard` binary (e.g. a stand-in for an upgrade).
    ///
    /// Its pool holds 2 sandboxes unless `extra` (or LIZARD_POOL_SIZE) says otherwise: the
    /// default sized from the host's memory would launch ≈ 20 at every test server's start.
    pub fn start_from(program: &Path, data_dir: tempfile::TempDir, extra: &[&str]) -> Server {
        let pool_size = std::env::var("LIZARD_POOL_SIZE").unwrap_or_else(|_| "2".into());
        Self::spawn(program, data_dir, extra, Some(&pool_size))
    }

    /// A server started with `flags` and the product's default pool (sized from the host).
    #[allow(dead_code)]
    pub fn with_default_pool(flags: &str) -> Server {
        let program = Path::new(env!("CARGO_BIN_EXE_lizard"));
        let flags: Vec<&str> = flags.split_whitespace().collect();
        Self::spawn(program, tempfile::tempdir().unwrap(), &flags, None)
    }

    fn spawn(
        program: &Path,
        data_dir: tempfile::TempDir,
        extra: &[&str],
        pool_size: Option<&str>,
    ) -> Server {
        let mut cmd = Command::new(program);
        match pool_size {
            Some(n) => cmd.env("LIZARD_POOL_SIZE", n),
            None => cmd.env_remove("LIZARD_POOL_SIZE"),
        };
        let (child, line) = support::spawn_ready(
            cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(data_dir.path())
                .arg("--templates-from")
                .arg(templates_from())
                .args(SMALL_BUILD_DISK)
                .args(extra),
            "lizard serve",
        );
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("lizard serve did not start ({e}): {line:?}"));
        let admin_key = std::fs::read_to_string(data_dir.path().join("admin-key"))
            .unwrap()
            .trim()
            .to_string();
        Server {
            child: Some(child),
            addr: ready["addr"].as_str().unwrap().to_string(),
            data_dir,
            admin_key,
        }
    }

    /// A second handle on a running server (for use from another task); it does not own the
    /// process.
    pub fn client_for(addr: &str, admin_key: &str) -> Server {
        Server {
            child: None,
            addr: addr.to_string(),
            data_dir: tempfile::tempdir().unwrap(),
            admin_key: admin_key.to_string(),
        }
    }

    /// Stop the server process (sandboxes keep running), returning the data dir for a restart.
    pub fn stop(mut self, signal: &str) -> tempfile::TempDir {
        if let Some(mut c) = self.child.take() {
            support::signal(c.id(), signal);
            let _ = c.wait();
        }
        let dir = std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap());
        std::mem::forget(self);
        dir
    }

    /// Send `signal` and wait at most `deadline` for the server to exit: the data dir, or `None`
    /// if it was still running then (it is SIGKILLed, so a failing test never leaves it behind).
    pub fn stop_within(mut self, signal: &str, deadline: Duration) -> Option<tempfile::TempDir> {
        let mut c = self.child.take()?;
        let exited = support::stop_within(&mut c, signal, deadline);
        let dir = std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap());
        std::mem::forget(self);
        if !exited {
            // Its sandboxes still run with their disks mounted there: remove nothing under them.
            std::mem::forget(dir);
            return None;
        }
        Some(dir)
    }

    pub async fn req(
        &self,
        key: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Resp {
        let mut headers = Vec::new();
        if let Some(k) = key {
            headers.push(("authorization", format!("Bearer {k}")));
        }
        let body = match body {
            Some(v) => {
                headers.push(("content-type", "application/json".to_string()));
                v.to_string().into_bytes()
            }
            None => Vec::new(),
        };
        send(&self.addr, method, path, &headers, body).await
    }

    /// As admin.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.req(Some(&self.admin_key.clone()), method, path, body)
            .await
    }

    /// `POST path` with `key` and the JSON `body`.
    pub async fn post_as(&self, key: &str, path: &str, body: Value) -> Resp {
        self.req(Some(key), "POST", path, Some(body)).await
    }

    /// `POST path` with the admin key and the JSON `body`.
    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.admin("POST", path, Some(body)).await
    }

    /// `POST /v1/sandboxes/{id}/{action}` with the admin key and no body (`pause`, `resume`,
    /// `hibernate`, …).
    pub async fn act(&self, id: &str, action: &str) -> Resp {
        let path = format!("/v1/sandboxes/{id}/{action}");
        self.admin("POST", &path, None).await
    }

    /// Whether the sandbox's `state` becomes `state` within `limit`.
    pub async fn reaches_state(&self, id: &str, state: &str, limit: Duration) -> bool {
        let path = format!("/v1/sandboxes/{id}");
        eventually(limit, || async {
            self.admin("GET", &path, None).await.body["state"] == state
        })
        .await
    }

    pub async fn create(&self, key: &str, body: Value) -> String {
        let r = self
            .req(Some(key), "POST", "/v1/sandboxes", Some(body))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["sandbox_id"].as_str().unwrap().to_string()
    }

    /// Run code (aggregated) in a sandbox as admin.
    pub async fn run(&self, id: &str, body: Value) -> Value {
        let r = self
            .admin("POST", &format!("/v1/sandboxes/{id}/execute"), Some(body))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.body
    }

    /// Start a run in sandbox `id` in the background (as admin); the answer when it ends.
    #[allow(dead_code)]
    pub fn run_in_background(&self, id: &str, body: Value) -> tokio::task::JoinHandle<Resp> {
        let (addr, key) = (self.addr.clone(), self.admin_key.clone());
        let path = format!("/v1/sandboxes/{id}/execute");
        tokio::spawn(async move {
            send(
                &addr,
                "POST",
                &path,
                &[
                    ("authorization", format!("Bearer {key}")),
                    ("content-type", "application/json".into()),
                ],
                body.to_string().into_bytes(),
            )
            .await
        })
    }

    /// Run bash in a sandbox; returns (stdout, whole execution).
    pub async fn sh(&self, id: &str, code: &str) -> (String, Value) {
        let ex = self
            .run(id, json!({"code": code, "language": "bash"}))
            .await;
        (stdout(&ex), ex)
    }

    /// Run a shell command as the sandbox's root (`POST …/commands` with `user: "root"`), as
    /// admin; returns the command's result (`stdout`, `stderr`, `exit_code`).
    pub async fn root_cmd(&self, id: &str, cmd: &str) -> Value {
        let r = self
            .admin(
                "POST",
                &format!("/v1/sandboxes/{id}/commands"),
                Some(json!({ "cmd": cmd, "user": "root" })),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.body
    }

    pub async fn project_key(&self, name: &str) -> String {
        let r = self
            .admin("POST", "/v1/projects", Some(json!({"name": name})))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["api_key"].as_str().unwrap().to_string()
    }

    /// Kill every sandbox the server knows (tests clean up after themselves: sandboxes outlive the
    /// server by design).
    pub async fn kill_all(&self) {
        let r = self.admin("GET", "/v1/sandboxes", None).await;
        for sb in r.body.as_array().cloned().unwrap_or_default() {
            let id = sb["sandbox_id"].as_str().unwrap();
            self.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
                .await;
        }
    }

    /// `lizard <args>` as a client of this server (admin key), `stdin` its input (none: empty),
    /// within 5 minutes: its exit code, stdout and stderr.
    pub fn cli(&self, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        let (status, out, err) = support::output_within(
            std::process::Command::new(env!("CARGO_BIN_EXE_lizard"))
                .args(args)
                .env("LIZARD_API_URL", format!("http://{}", self.addr))
                .env("LIZARD_API_KEY", &self.admin_key),
            stdin.unwrap_or_default().as_bytes(),
            Duration::from_secs(300),
        );
        (status.code().unwrap_or(-1), out, err)
    }

    /// `lizard <args> --json`, which must succeed: its output parsed, and as printed.
    pub fn cli_json(&self, args: &[&str]) -> (serde_json::Value, String) {
        let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
        let (code, out, err) = self.cli(&args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
        (v, out)
    }
}

impl Server {
    /// One blocking request as admin with a raw HTTP/1.1 client (for `Drop`, which cannot
    /// await): the answer's body.
    fn blocking_req(&self, method: &str, path: &str) -> Option<Vec<u8>> {
        let auth = format!("Bearer {}", self.admin_key);
        let headers = [("Host", "lizard"), ("Authorization", auth.as_str())];
        support::http(self.addr.parse().ok()?, method, path, &headers, b"").map(|a| a.body)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // Sandboxes outlive their server by design, so a test that did not kill its own (it
        // panicked first, or left them for the harness) would leave them running for ever,
        // bombs included: kill what the server still lists.
        for id in self.listed_sandboxes() {
            self.blocking_req("DELETE", &format!("/v1/sandboxes/{id}"));
        }
        support::signal(c.id(), "-TERM");
        let _ = c.wait();
        // What runs now under a sandbox of this data dir was lost by the server (neither listed
        // nor drained with its pool): a leak of the product's, which fails the test.
        let leaked = kill_leftovers(self.data_dir.path());
        if !leaked.is_empty() && !std::thread::panicking() {
            panic!(
                "sandboxes {leaked:?} still ran after their server (listed none of them) exited: \
                 the server lost track of them (they are killed now)"
            );
        }
    }
}

impl Server {
    /// The ids the server lists (none if it does not answer).
    fn listed_sandboxes(&self) -> Vec<String> {
        let list = self
            .blocking_req("GET", "/v1/sandboxes")
            .unwrap_or_default();
        serde_json::from_slice::<Value>(&list)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|sb| sb["sandbox_id"].as_str().map(str::to_string))
            .collect()
    }
}

/// The sandboxes of `data_dir` (its `sandboxes/<id>` directories) whose cgroup (`lizard/<id>`
/// under this process's own, which the servers it starts share) still holds a process, each
/// killed whole, its cgroup removed and its disk unmounted: their ids.
pub fn kill_leftovers(data_dir: &Path) -> Vec<String> {
    let Ok(hierarchy) = lizard_jail::cgroup::Hierarchy::detect() else {
        return Vec::new();
    };
    let mut leaked = Vec::new();
    let dirs = std::fs::read_dir(data_dir.join("sandboxes"))
        .into_iter()
        .flatten();
    for id in dirs
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
    {
        let Ok(Some(cg)) = hierarchy.existing(&id) else {
            continue;
        };
        if cg.pids().unwrap_or_default().is_empty() {
            continue;
        }
        leaked.push(id.clone());
        let _ = cg.kill_all();
        let _ = cg.remove();
        let dir = data_dir.join("sandboxes").join(&id);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for m in mounts.lines().filter_map(|l| l.split(' ').nth(4)) {
            if Path::new(m).starts_with(&dir) {
                let _ = Command::new("umount").args(["-l", m]).status();
            }
        }
    }
    leaked
}

pub fn stdout(ex: &Value) -> String {
    ex["stdout"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default()
}

pub fn stderr(ex: &Value) -> String {
    ex["stderr"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default()
}

/// Peak resident memory (VmHWM) of a process, in bytes.
pub fn vm_hwm(pid: u32) -> u64 {
    support::proc_status(pid, "VmHWM")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no VmHWM of process {pid}"))
        * 1024
}

/// The pid of the `lizard serve` using `data_dir`.
pub fn server_pid(data_dir: &std::path::Path) -> u32 {
    let needle = data_dir.to_string_lossy().into_owned();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "serve") && args.contains(&needle) {
            return pid;
        }
    }
    panic!("no lizard serve for {needle}");
}

/// One raw HTTP/1.1 exchange with the headers exactly as given (they must include
/// `Connection: close`: the answer is read to the end); the answer's status and JSON body.
pub async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: lizard\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let a = support::parse_answer(&answer)
        .unwrap_or_else(|| panic!("no status: {}", String::from_utf8_lossy(&answer)));
    (
        a.status,
        serde_json::from_slice(&a.body).unwrap_or_default(),
    )
}

/// Create a sandbox of the default template through E2B's control plane with `key`; its id and
/// envd access token.
pub async fn e2b_create(s: &Server, key: &str) -> (String, String) {
    let (status, created) = raw(
        &s.addr,
        "POST",
        "/sandboxes",
        &[
            ("X-API-Key", key),
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ],
        r#"{"templateID":"base"}"#,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    (
        created["sandboxID"].as_str().unwrap().to_string(),
        created["envdAccessToken"].as_str().unwrap().to_string(),
    )
}

/// The `runtime.json` the server keeps in sandbox `id`'s directory.
pub fn runtime_json(s: &Server, id: &str) -> Value {
    let path = s
        .data_dir
        .path()
        .join("sandboxes")
        .join(id)
        .join("runtime.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The host pids in sandbox `id`'s cgroup (every hierarchy named in its `runtime.json`),
/// sorted, without duplicates.
pub fn sandbox_pids(s: &Server, id: &str) -> Vec<u32> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(p) if p.starts_with("/sys/fs/cgroup") => out.push(p.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut dirs = Vec::new();
    walk(&runtime_json(s, id)["cgroup"], &mut dirs);
    let mut pids: Vec<u32> = dirs
        .iter()
        .flat_map(|d| {
            // The sandbox's cgroup and the delegated `ctx/…` children below it.
            let mut found = Vec::new();
            let mut stack = vec![PathBuf::from(d)];
            while let Some(dir) = stack.pop() {
                if let Ok(t) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                    found.extend(t.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
                }
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    stack.extend(
                        entries
                            .flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.path()),
                    );
                }
            }
            found
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The four ids (real, effective, saved, fs) of `Uid` or `Gid` in `/proc/<pid>/status`; empty if
/// the process is gone.
pub fn host_ids(pid: u32, key: &str) -> Vec<u32> {
    support::proc_status(pid, key)
        .map(|v| {
            v.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The `comm` of a host process.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The host directory named `id` under a `lizard` directory of the v1 hierarchy at `root`.
pub fn host_cgroup(root: &str, id: &str) -> Option<std::path::PathBuf> {
    fn find(dir: &std::path::Path, name: &str, depth: usize) -> Option<std::path::PathBuf> {
        if depth == 0 {
            return None;
        }
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            if !e.file_type().ok()?.is_dir() {
                continue;
            }
            if e.file_name() == name && dir.file_name().is_some_and(|n| n == "lizard") {
                return Some(e.path());
            }
            if let Some(p) = find(&e.path(), name, depth - 1) {
                return Some(p);
            }
        }
        None
    }
    find(std::path::Path::new(root), id, 6)
}

/// A new context of `language` in sandbox `id` (as the admin); its id.
pub async fn context(s: &Server, id: &str, language: &str) -> String {
    let r = s
        .admin(
            "POST",
            &format!("/v1/sandboxes/{id}/contexts"),
            Some(serde_json::json!({ "language": language })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["id"].as_str().unwrap().to_string()
}

/// After a failed exact restore, sandbox `id` runs again with fresh contexts: its restore report
/// (`restore`) is per language and says so, its old context `gone` is not found, a new Python
/// context runs.
pub async fn assert_relaunched_with_fresh_contexts(
    s: &Server,
    id: &str,
    restore: &Value,
    gone: &str,
) {
    assert_eq!(restore["method"], "per-language", "{restore}");
    let why = restore["method_reason"].as_str().unwrap_or_default();
    assert!(why.contains("fresh contexts"), "{why}");
    let r = s
        .admin(
            "POST",
            &format!("/v1/sandboxes/{id}/execute"),
            Some(json!({"code": "print(1 + 1)", "context": gone})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    let c = context(s, id, "python").await;
    let ex = s
        .run(id, json!({"code": "print(1 + 1)", "context": c}))
        .await;
    assert_eq!(stdout(&ex), "2\n", "{ex}");
}

/// Fires `n` calls at one sandbox at once, `op` and `resume` in turn: each succeeds, and the
/// kernel's state is there after a last resume.
pub async fn concurrent_calls_keep_state(op: &'static str, n: usize) {
    let s = std::sync::Arc::new(Server::start());
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&id, json!({"code": "x = 'kept'"})).await;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move { s.act(&id, if i % 2 == 0 { op } else { "resume" }).await })
        })
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{op}: {}", r.text);
    }
    let r = s.act(&id, "resume").await;
    assert_eq!(r.body["state"], "running", "{}", r.text);
    let ex = s.run(&id, json!({"code": "print(x)"})).await;
    assert_eq!(stdout(&ex), "kept\n", "{ex}");
    s.kill_all().await;
}

/// Python state that lives between cells and must still move after a checkpoint: a thread
/// counting `n` up every 10 ms and a TCP server on `port` answering `still here`. Prints the
/// port.
pub const LIVE_PYTHON: &str = "import threading, time, socket\n\
         n = 0\n\
         def count():\n    global n\n    while True:\n        n += 1\n        time.sleep(0.01)\n\
         threading.Thread(target=count, daemon=True).start()\n\
         srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n\
         port = srv.getsockname()[1]\n\
         def serve():\n    while True:\n        c, _ = srv.accept(); c.sendall(b'still here'); c.close()\n\
         threading.Thread(target=serve, daemon=True).start()\n\
         print(port)";

/// A background shell loop writing its count to `/tmp/bg` every 50 ms (its pid in
/// `/tmp/bg.pid`).
pub const LIVE_BASH: &str = "(i=0; while :; do i=$((i+1)); echo $i > /tmp/bg; sleep 0.05; done) >/dev/null 2>&1 & echo $! > /tmp/bg.pid";

impl Resp {
    /// Assert that the answer has HTTP `status` (its body in the message if not); the answer.
    #[track_caller]
    pub fn expect_status(self, status: u16) -> Resp {
        assert_eq!(self.status, status, "{}", self.text);
        self
    }
}

impl Server {
    /// Run a command in sandbox `id` (`POST …/commands` with `body`) as admin, which must be
    /// answered 200: the command's result (`stdout`, `stderr`, `exit_code`).
    pub async fn command(&self, id: &str, body: Value) -> Value {
        let path = format!("/v1/sandboxes/{id}/commands");
        self.post(&path, body).await.expect_status(200).body
    }
}

/// Assert that `haystack` holds `needle`, showing the whole haystack if it does not.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str) {
    assert!(haystack.contains(needle), "no {needle:?} in: {haystack}");
}

/// The `stdout` of a command's result (empty if it has none).
pub fn command_stdout(result: &Value) -> &str {
    result["stdout"].as_str().unwrap_or("")
}

/// A new context in sandbox `id` made with `body` (`language`, `limits`, …) as the admin; its id.
pub async fn context_with(s: &Server, id: &str, body: Value) -> String {
    let path = format!("/v1/sandboxes/{id}/contexts");
    let r = s.post(&path, body).await.expect_status(201);
    r.body["id"].as_str().unwrap().to_string()
}
