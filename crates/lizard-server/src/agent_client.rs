//! HTTP to one sandbox's agent over its Unix socket: forwarding requests (streamed both ways) and
//! the few calls the server makes itself (health, the execution log, hibernation).
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
}

impl AgentClient {
    pub fn new(socket: PathBuf) -> AgentClient {
        AgentClient { socket }
    }

    /// Send one request on a fresh connection; the response body streams from the agent.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, AgentError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|source| AgentError::Connect {
                path: self.socket.display().to_string(),
                source,
            })?;
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
