//! HTTP to one sandbox's agent over its Unix socket: forwarding requests (streamed both ways) and
//! the few calls the server makes itself (health, the execution log, hibernation).
//!
//! The socket is a host path in a directory only root can write (`<data>/sandboxes/<id>/agent.sock`,
//! made by the launcher and handed to the agent as an fd; the sandbox never sees it). Each connect
//! checks that path from `/` without following a symlink (`lizard_jail::hostpath`), and then that
//! the peer (`SO_PEERCRED`: whoever called `listen`) is the sandbox's PID 1: anything else is
//! refused before a byte of the request is sent.
//!
//! Not here: which requests may be forwarded (see `crate::proxy`).

use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lizard_proto::{ExecutionLog, Health};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Failures talking to an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot connect to the sandbox's agent at {path}")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing the sandbox's agent socket {path}: {reason}")]
    Untrusted { path: String, reason: String },
    #[error("the process listening on {path} is pid {got:?}, not the sandbox's PID 1 (pid {expected}): refused")]
    WrongPeer {
        path: String,
        expected: i32,
        got: Option<i32>,
    },
    #[error("HTTP exchange with the sandbox's agent failed")]
    Http(#[from] hyper::Error),
    #[error("the sandbox's agent answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("unexpected answer from the sandbox's agent")]
    Decode(#[from] serde_json::Error),
}

#[derive(Debug, Clone)]
pub struct AgentClient {
    socket: PathBuf,
    /// Host pid of the sandbox's PID 1: the only peer accepted.
    peer_pid: i32,
}

impl AgentClient {
    /// The agent listening on `socket` (a host path, every directory on the way root's) as the
    /// process `peer_pid` (host pid).
    pub fn new(socket: PathBuf, peer_pid: i32) -> AgentClient {
        AgentClient { socket, peer_pid }
    }

    /// Connect, checking the path and the peer (see the module docs).
    async fn connect(&self) -> Result<tokio::net::UnixStream, AgentError> {
        let path = || self.socket.display().to_string();
        let (_dir, target) =
            lizard_jail::hostpath::unix_socket_entry(&self.socket).map_err(|e| match e {
                lizard_jail::hostpath::HostPathError::Io { source, .. } => AgentError::Connect {
                    path: path(),
                    source,
                },
                e => AgentError::Untrusted {
                    path: path(),
                    reason: e.to_string(),
                },
            })?;
        // `target` names the socket through the held directory fd (`_dir`, open until here).
        let stream = tokio::net::UnixStream::connect(&target)
            .await
            .map_err(|source| AgentError::Connect {
                path: path(),
                source,
            })?;
        check_peer(&stream, self.peer_pid).map_err(|got| AgentError::WrongPeer {
            path: path(),
            expected: self.peer_pid,
            got,
        })?;
        Ok(stream)
    }

    /// Send one request on a fresh connection; the response body streams from the agent.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, AgentError> {
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the response body is done or dropped (a client that left): the agent then
            // sees its connection close and interrupts the cell.
            let _ = conn.with_upgrades().await;
        });
        Ok(sender.send_request(req).await?)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, AgentError> {
        let req = Request::get(path)
            .header("host", "agent")
            .body(Body::empty())
            .expect("static request");
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let bytes: Bytes = resp.into_body().collect().await?.to_bytes();
        if status != 200 {
            return Err(AgentError::Status {
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    async fn post_json<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, AgentError> {
        let req = Request::post(path)
            .header("host", "agent")
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body)?))
            .expect("static request");
        let resp = self.send(req).await?;
        let status = resp.status().as_u16();
        let bytes: Bytes = resp.into_body().collect().await?.to_bytes();
        if status != 200 {
            return Err(AgentError::Status {
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Hibernation: every context saves its state into `dir` (a path inside the sandbox).
    pub async fn hibernate_snapshot(
        &self,
        dir: &str,
    ) -> Result<lizard_proto::HibernationReport, AgentError> {
        let req = lizard_proto::HibernateDirRequest { dir: dir.into() };
        self.post_json("/hibernate/snapshot", &req).await
    }

    /// Resume from hibernation: recreate the contexts saved in `dir` with their state.
    pub async fn hibernate_restore(
        &self,
        dir: &str,
    ) -> Result<lizard_proto::HibernationReport, AgentError> {
        let req = lizard_proto::HibernateDirRequest { dir: dir.into() };
        self.post_json("/hibernate/restore", &req).await
    }

    pub async fn health(&self) -> Result<Health, AgentError> {
        self.get_json("/health").await
    }

    /// Finished runs after `after` (for metering).
    pub async fn executions(&self, after: u64) -> Result<ExecutionLog, AgentError> {
        self.get_json(&format!("/executions?after={after}&limit=10000"))
            .await
    }

    /// Wait until the default context of `language` exists (the agent prestarts it), up to
    /// `timeout`.
    pub async fn wait_default_context(
        &self,
        language: lizard_proto::Language,
        timeout: Duration,
    ) -> Result<(), AgentError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            let contexts: Vec<lizard_proto::Context> = self.get_json("/contexts").await?;
            if contexts
                .iter()
                .any(|c| c.is_default && c.language == language)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(AgentError::Status {
                    status: 503,
                    body: format!(
                        "no default {language} context after {} ms",
                        timeout.as_millis()
                    ),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Whether this client talks to the agent at `socket` (the host path).
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Poll `/health` until it answers or `timeout` passes.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), AgentError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            match self.health().await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
            }
        }
    }
}

/// `Ok` when the peer of `stream` (the process that called `listen` on the other end, as
/// `SO_PEERCRED` says, in the server's pid namespace) is `expected`; else the pid it is (`None`:
/// unknown, e.g. the listener is gone).
fn check_peer(stream: &tokio::net::UnixStream, expected: i32) -> Result<(), Option<i32>> {
    let got = stream.peer_cred().ok().and_then(|c| c.pid());
    if got == Some(expected) {
        Ok(())
    } else {
        Err(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tempfile's directories are 0700 (root's, when the tests run as root, as the server does).
    fn private_dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[tokio::test]
    async fn a_listener_that_is_not_the_sandboxs_pid_1_is_refused() {
        if !is_root() {
            return;
        }
        let t = private_dir();
        let path = t.path().join("agent.sock");
        let _listener = tokio::net::UnixListener::bind(&path).unwrap();
        let me = std::process::id() as i32;
        // The expected peer connects (this process listens)...
        let ok = AgentClient::new(path.clone(), me);
        ok.connect().await.unwrap();
        // ...any other pid is refused, with the pid found.
        let other = AgentClient::new(path.clone(), me + 1);
        match other.connect().await {
            Err(AgentError::WrongPeer { expected, got, .. }) => {
                assert_eq!(expected, me + 1);
                assert_eq!(got, Some(me));
            }
            r => panic!("expected WrongPeer, got {r:?}"),
        }
        assert!(matches!(
            other.health().await,
            Err(AgentError::WrongPeer { .. })
        ));
    }

    #[tokio::test]
    async fn a_symlinked_socket_is_never_connected_to() {
        if !is_root() {
            return;
        }
        let t = private_dir();
        let real = t.path().join("real.sock");
        let listener = tokio::net::UnixListener::bind(&real).unwrap();
        let link = t.path().join("agent.sock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let me = std::process::id() as i32;
        let c = AgentClient::new(link, me);
        assert!(matches!(
            c.connect().await,
            Err(AgentError::Untrusted { .. })
        ));
        // Nothing reached the listener.
        let accepted =
            tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "the symlink's target got a connection");
        // A directory on the way that someone else may write is refused too.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::os::unix::fs::chown(&open, Some(1000), Some(1000)).unwrap();
        let c = AgentClient::new(open.join("agent.sock"), me);
        assert!(matches!(
            c.connect().await,
            Err(AgentError::Untrusted { .. })
        ));
    }

    fn is_root() -> bool {
        // The effective uid of this process (the trusted-directory checks need root's files).
        std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
                    .unwrap_or(false)
            })
            .unwrap_or(false)
    }
}
