//! Test harness: starts the real `lizard-agent` binary with the real kernel environment and talks
//! HTTP to it over its Unix socket (and TCP where a test is about TCP).

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lizard_proto::{EventFrame, Execution, ExecutionEvent};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Agent {
    child: Child,
    pub socket: PathBuf,
    pub tcp: String,
    _dir: tempfile::TempDir,
}

/// The kernel environment made by `scripts/kernel-env.sh`.
pub fn kernel_env() -> PathBuf {
    let p = std::env::var_os("LIZARD_KERNEL_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kernel-env"));
    assert!(
        p.join(".stamp").exists(),
        "kernel environment {} missing: run scripts/kernel-env.sh first (the README's test \
         command does)",
        p.display()
    );
    p
}

impl Agent {
    pub fn start() -> Agent {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Agent {
        Self::start_with_env(extra, &[])
    }

    /// Started with `extra` arguments and `env` added to its environment.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_lizard-agent"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--socket")
            .arg(&socket)
            .arg("--kernel-env")
            .arg(kernel_env())
            .arg("--run-dir")
            .arg(dir.path().join("run"))
            .args(extra)
            .envs(env.iter().copied())
            .env(
                "LIZARD_LOG",
                std::env::var("LIZARD_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lizard-agent");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line).expect("listening line");
        Agent {
            child,
            socket,
            tcp: ready["tcp"].as_str().unwrap().to_string(),
            _dir: dir,
        }
    }

    /// The agent's run dir (runner scripts, scratch files, caches).
    pub fn run_dir(&self) -> PathBuf {
        self._dir.path().join("run")
    }

    /// pid of the agent process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        let stream = tokio::net::UnixStream::connect(&self.socket).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender.send_request(req).await.unwrap()
    }

    /// Any request; returns the status and the body parsed as JSON (Null when empty).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> (u16, Value) {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "agent");
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        let resp = self.send(b.body(Full::new(body.into())).unwrap()).await;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!("non-JSON body ({e}): {}", String::from_utf8_lossy(&bytes))
            })
        };
        (status, v)
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        match body {
            Some(b) => {
                self.raw(method, path, Some("application/json"), b.to_string())
                    .await
            }
            None => self.raw(method, path, None, Bytes::new()).await,
        }
    }

    /// Create a context, returning its id.
    pub async fn context(&self, language: &str) -> String {
        let (s, v) = self
            .call("POST", "/contexts", Some(json!({ "language": language })))
            .await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().unwrap().to_string()
    }

    /// Non-streaming execute; panics on a non-200.
    pub async fn exec(&self, body: Value) -> Execution {
        let (s, v) = self.call("POST", "/execute", Some(body)).await;
        assert_eq!(s, 200, "{v}");
        serde_json::from_value(v).unwrap()
    }

    pub async fn run_in(&self, ctx: &str, code: &str) -> Execution {
        self.exec(json!({ "code": code, "context": ctx })).await
    }

    /// Streaming execute: every frame with the time it arrived.
    pub async fn stream(&self, body: Value) -> Vec<(Instant, EventFrame)> {
        let mut resp = self.stream_open(body).await;
        let mut frames = Vec::new();
        let mut buf = Vec::new();
        while let Some(frame) = resp.frame().await {
            let data = frame.unwrap().into_data().unwrap_or_default();
            buf.extend_from_slice(&data);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                frames.push((Instant::now(), serde_json::from_slice(&line).unwrap()));
            }
        }
        frames
    }

    /// Start a streaming execute and return the open response body.
    pub async fn stream_open(&self, body: Value) -> Incoming {
        let req = Request::builder()
            .method("POST")
            .uri("/execute")
            .header("host", "agent")
            .header("content-type", "application/json")
            .header("accept", "application/x-ndjson")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = self.send(req).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        resp.into_body()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn events(frames: &[(Instant, EventFrame)]) -> Vec<&ExecutionEvent> {
    frames.iter().map(|(_, f)| &f.event).collect()
}

/// The main result's text/plain.
pub fn main_text(ex: &Execution) -> Option<String> {
    ex.main_result()
        .and_then(|r| r.data.get("text/plain"))
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// Whether a process exists.
pub fn alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

/// Poll `f` until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
