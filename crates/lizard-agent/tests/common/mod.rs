//! Test harness: starts the real `lizard-agent` binary with the real kernel environment and talks
//! HTTP to it over its Unix socket (and TCP where a test is about TCP). What every crate's tests
//! share (the root check, waiting, processes) is in `lizard-test-support`.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use lizard_proto::{EventFrame, Execution, ExecutionEvent};
use lizard_test_support as support;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub struct Agent {
    child: Child,
    pub socket: PathBuf,
    pub tcp: String,
    _dir: tempfile::TempDir,
}

/// The kernel environment made by `scripts/kernel-env.sh`.
pub fn kernel_env() -> PathBuf {
    support::built(
        "LIZARD_KERNEL_ENV",
        "kernel-env",
        |p| p.join(".stamp").exists(),
        "the kernel environment",
        "run scripts/kernel-env.sh first (the README's test command does)",
    )
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
        let dir = support::temp_dir("agent-test");
        let socket = dir.path().join("agent.sock");
        let (child, line) = support::spawn_ready(
            Command::new(env!("CARGO_BIN_EXE_lizard-agent"))
                .arg("--listen")
                .arg("127.0.0.1:0")
                .arg("--socket")
                .arg(&socket)
                .arg("--kernel-env")
                .arg(kernel_env())
                .arg("--run-dir")
                .arg(dir.path().join("run"))
                .args(extra)
                .envs(env.iter().copied()),
            "lizard-agent",
        );
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("lizard-agent did not start ({e}): {line:?}"));
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
        support::send_over(stream, req).await.unwrap()
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

    /// `POST path` with the JSON `body`.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body)).await
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
        support::stop_within(&mut self.child, "-TERM", Duration::from_secs(10));
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
    u32::try_from(pid).is_ok_and(|p| !support::gone_or_zombie(p))
}

/// Poll `f` until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    support::eventually(timeout, || std::future::ready(f())).await
}
