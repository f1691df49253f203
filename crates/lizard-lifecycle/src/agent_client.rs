//! HTTP to one sandbox's agent over its Unix socket: forwarding requests (streamed both ways) and
//! the few calls the server makes itself (health, contexts, the execution log, hibernation).
//!
//! The agent is untrusted (it is the sandbox's PID 1; user code can replace it). Every call the
//! server makes on its own behalf therefore runs under a deadline that covers the connect, the
//! response head and the whole body, and reads the body through a hard byte cap
//! ([`AgentLimits`]): a slower answer is [`AgentError::TimedOut`], a bigger one
//! [`AgentError::TooLarge`], and neither is ever buffered whole (at most the cap plus hyper's read
//! buffer is in memory). Forwarded client traffic ([`AgentClient::send`]) is streamed both ways
//! with backpressure and has no deadline here: it concerns only that sandbox's own client.
//! Forwarded requests reuse the connections of earlier ones ([`IdleConnections`]); the server's
//! own calls always open their own.
//!
//! The socket is a host path in a directory only root can write (`<data>/sandboxes/<id>/agent.sock`,
//! made by the launcher and handed to the agent as an fd; the sandbox never sees it). Each connect
//! checks that path from `/` without following a symlink (`lizard_jail::hostpath`), and then that
//! the peer (`SO_PEERCRED`: whoever called `listen`) is the sandbox's PID 1: anything else is
//! refused before a byte of the request is sent.
//!
//! Not here: which requests may be forwarded (see `crate::proxy`); validating what the agent
//! reports (see `crate::sandboxes::metering`).

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lizard_proto::{ExecutionLog, Health};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request body for the agent: a forwarded request's body or bytes of the server's own, boxed.
pub type Body = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, body::BoxError>;

/// Making [`Body`]s.
pub mod body {
    use bytes::Bytes;
    use http_body_util::BodyExt;

    pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// Any body of bytes (a request the server forwards), boxed.
    pub fn boxed<B>(b: B) -> super::Body
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        b.map_err(Into::into).boxed_unsync()
    }

    pub fn empty() -> super::Body {
        boxed(http_body_util::Empty::<Bytes>::new())
    }

    pub fn full(bytes: impl Into<Bytes>) -> super::Body {
        boxed(http_body_util::Full::new(bytes.into()))
    }
}

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
    /// The whole exchange (connect, head, body) did not finish within the call's deadline.
    #[error("the sandbox's agent did not answer {call} within {ms} ms")]
    TimedOut { call: &'static str, ms: u64 },
    /// The answer's body is larger than the call's cap (it was not read further).
    #[error("the sandbox's agent answered {call} with more than {limit} bytes")]
    TooLarge { call: &'static str, limit: usize },
}

/// The deadline and body cap of one kind of call the server makes to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimit {
    /// Connect + request + response head + whole body.
    pub deadline: Duration,
    /// Largest response body read; a larger one is [`AgentError::TooLarge`].
    pub max_body_bytes: usize,
}

const MIB: usize = 1024 * 1024;

/// Deadlines and body caps of the calls the server makes to an agent on its own behalf.
///
/// Defaults: health and contexts 3 s / 1 MiB; the execution log 3 s / 4 MiB (10,000 records are
/// about 2 MiB of JSON); hibernation snapshot and restore 300 s / 1 MiB (the agent itself waits
/// up to 5 s for a busy context and gives each kernel up to 180 s to save or load its state;
/// a hibernation that takes longer fails, for that sandbox only, and leaves it as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    pub health: CallLimit,
    pub contexts: CallLimit,
    pub executions: CallLimit,
    pub hibernate: CallLimit,
    /// The calls of a context fork (the live fork, its plan, the adoption): 30 s / 1 MiB.
    pub fork: CallLimit,
}

impl Default for AgentLimits {
    fn default() -> Self {
        let small = CallLimit {
            deadline: Duration::from_secs(3),
            max_body_bytes: MIB,
        };
        AgentLimits {
            health: small,
            contexts: small,
            executions: CallLimit {
                deadline: Duration::from_secs(3),
                max_body_bytes: 4 * MIB,
            },
            hibernate: CallLimit {
                deadline: Duration::from_secs(300),
                max_body_bytes: MIB,
            },
            fork: CallLimit {
                deadline: Duration::from_secs(30),
                max_body_bytes: MIB,
            },
        }
    }
}

/// How much of an error answer's body is kept in [`AgentError::Status`].
const MAX_ERROR_TEXT: usize = 1024;

#[derive(Debug, Clone)]
pub struct AgentClient {
    socket: PathBuf,
    /// Host pid of the sandbox's PID 1: the only peer accepted.
    peer_pid: i32,
    limits: AgentLimits,
    /// Requests forwarded to the agent and not yet matched by an execution record it reported
    /// (shared by clones): a run is always started by a forwarded request, so an agent can never
    /// truthfully report more runs than this (see `crate::sandboxes::metering::validate`).
    unmatched: Arc<AtomicU64>,
    /// Connections of finished forwarded requests, ready for the next ones (shared by clones).
    idle: Arc<IdleConnections>,
}

/// At most this many idle connections are kept per sandbox.
const MAX_IDLE: usize = 4;
/// An idle connection is closed after this long unused: an idle sandbox holds none.
const IDLE_FOR: Duration = Duration::from_secs(5);
/// How long a checkpoint waits in [`AgentClient::close_idle`] for the kept connections to close
/// on the server's side.
pub const CLOSE_IDLE_WAIT: Duration = Duration::from_secs(1);

/// One HTTP/1 connection to the agent: its sender, and the task that drives it (ends when the
/// connection closes: the agent closed it, it broke, or every sender was dropped).
struct AgentConnection {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    driver: tokio::task::JoinHandle<()>,
}

/// Connections to one agent whose last response was read to its end, so that forwarded requests
/// do not pay a connect, a path check, a peer check and a handshake each (both sides). Nothing
/// but whole exchanges is reused: a response dropped before its end (a client that left) closes
/// its connection, and the agent interrupts the cell as before. A connection is used by one
/// request at a time, checked once (path and peer) when it was opened, and closed after
/// [`IDLE_FOR`] unused or when [`AgentClient::close_idle`] is called (before a checkpoint: CRIU
/// cannot dump a connection whose other end is on the host).
#[derive(Default)]
struct IdleConnections {
    next: AtomicU64,
    conns: std::sync::Mutex<Vec<(u64, AgentConnection)>>,
}

impl std::fmt::Debug for IdleConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.conns.lock().map(|c| c.len()).unwrap_or(0);
        f.debug_struct("IdleConnections").field("idle", &n).finish()
    }
}

impl IdleConnections {
    /// The most recently used idle connection, if any.
    fn take(&self) -> Option<AgentConnection> {
        let mut conns = self.conns.lock().ok()?;
        conns.pop().map(|(_, c)| c)
    }

    /// Keep `conn` for the next request (unless [`MAX_IDLE`] are kept already); its key.
    fn put(&self, conn: AgentConnection) -> Option<u64> {
        let mut conns = self.conns.lock().ok()?;
        if conns.len() >= MAX_IDLE {
            return None;
        }
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        conns.push((key, conn));
        Some(key)
    }

    /// Drop the connection kept as `key` if it is still idle.
    fn expire(&self, key: u64) {
        if let Ok(mut conns) = self.conns.lock() {
            conns.retain(|(k, _)| *k != key);
        }
    }

    fn drain(&self) -> Vec<AgentConnection> {
        match self.conns.lock() {
            Ok(mut conns) => conns.drain(..).map(|(_, c)| c).collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl AgentClient {
    /// The agent listening on `socket` (a host path, every directory on the way root's) as the
    /// process `peer_pid` (host pid), with the production [`AgentLimits`].
    pub fn new(socket: PathBuf, peer_pid: i32) -> AgentClient {
        AgentClient::with_limits(socket, peer_pid, AgentLimits::default())
    }

    pub fn with_limits(socket: PathBuf, peer_pid: i32, limits: AgentLimits) -> AgentClient {
        AgentClient {
            socket,
            peer_pid,
            limits,
            unmatched: Default::default(),
            idle: Default::default(),
        }
    }

    /// How many runs the agent may still report (forwarded requests not yet matched by records).
    pub fn unmatched_requests(&self) -> u64 {
        self.unmatched.load(Ordering::SeqCst)
    }

    /// `n` reported runs are matched against forwarded requests.
    pub fn match_runs(&self, n: u64) {
        let _ = self
            .unmatched
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// Allow `n` more reported runs without requests seen by this client (a sandbox adopted
    /// after a restart may have finished runs the previous server forwarded).
    pub fn allow_runs(&self, n: u64) {
        self.unmatched.fetch_add(n, Ordering::SeqCst);
    }

    pub fn limits(&self) -> &AgentLimits {
        &self.limits
    }

    /// Connect, checking the path and the peer (see the module docs).
    async fn connect(&self) -> Result<tokio::net::UnixStream, AgentError> {
        let path = || self.socket.display().to_string();
        let (_dir, target) =
            lizard_jail::hostpath::unix_socket_entry(&self.socket).map_err(|e| match e {
                lizard_jail::hostpath::HostPathError::Io(lizard_jail::StepIo {
                    source, ..
                }) => AgentError::Connect {
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

    /// Send one forwarded request, on an idle connection if there is one, else on a new one; the
    /// response body streams from the agent (no deadline, nothing buffered here). Once that body
    /// has been read to its end the connection is kept for the next request.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, AgentError> {
        self.unmatched.fetch_add(1, Ordering::SeqCst);
        let mut req = req;
        while let Some(mut conn) = self.idle.take() {
            match conn.sender.try_send_request(req).await {
                Ok(resp) => {
                    self.keep_when_done(conn);
                    return Ok(resp);
                }
                // Closed by the agent while idle, before the request was written: a new one.
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(e.into_error().into()),
                },
            }
        }
        let mut conn = self.open().await?;
        let resp = conn.sender.send_request(req).await?;
        self.keep_when_done(conn);
        Ok(resp)
    }

    /// A new connection for forwarded requests, driven by a task of its own (upgrades allowed:
    /// a WebSocket is spliced to the client's). The task ends when the connection closes.
    async fn open(&self) -> Result<AgentConnection, AgentError> {
        let stream = self.connect().await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let driver = tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(AgentConnection { sender, driver })
    }

    /// Once `conn`'s response has been read to its end, keep it idle for [`IDLE_FOR`]. A response
    /// dropped before its end, an upgrade or an error closes it instead.
    fn keep_when_done(&self, mut conn: AgentConnection) {
        let idle = self.idle.clone();
        tokio::spawn(async move {
            if conn.sender.ready().await.is_err() {
                return;
            }
            if let Some(key) = idle.put(conn) {
                tokio::time::sleep(IDLE_FOR).await;
                idle.expire(key);
            }
        });
    }

    /// Close every idle connection and wait (at most `wait`) until they are closed on this side.
    /// Called before a checkpoint: CRIU fails on a connection whose other end is on the host.
    pub async fn close_idle(&self, wait: Duration) {
        let drivers = self.drop_idle();
        if !drivers.is_empty() {
            let _ = tokio::time::timeout(wait, futures_util::future::join_all(drivers)).await;
        }
    }

    /// Drop every idle connection (each closes in its task, promptly: it has no request); the
    /// tasks, which end once they are closed.
    pub fn drop_idle(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.idle
            .drain()
            .into_iter()
            .map(|AgentConnection { sender, driver }| {
                drop(sender);
                driver
            })
            .collect()
    }

    /// `req` on a fresh connection and its answer read by `read`, everything within `deadline`.
    /// The connection is driven here, not in a task of its own, so it is closed when this
    /// returns, whatever the agent does; should it end first (its last bytes already handed to
    /// the body, or failed and the body says so), `read` finishes promptly either way.
    async fn exchange<T, Fut>(
        &self,
        call: &'static str,
        deadline: Duration,
        req: Request<Body>,
        read: impl FnOnce(Response<Incoming>) -> Fut,
    ) -> Result<T, AgentError>
    where
        Fut: std::future::Future<Output = Result<T, AgentError>>,
    {
        let exchange = async {
            let stream = self.connect().await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            let answer = async {
                let resp = sender.send_request(req).await?;
                read(resp).await
            };
            tokio::pin!(answer, conn);
            tokio::select! {
                r = &mut answer => r,
                _ = &mut conn => answer.await,
            }
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| AgentError::TimedOut {
                call,
                ms: deadline.as_millis() as u64,
            })?
    }

    /// One call of the server's own: `req` on a fresh connection, the answer's status and body
    /// (at most `limit.max_body_bytes`), everything within `deadline`. The connection is driven
    /// here, not in a task of its own, so it is closed when this returns, whatever the agent does.
    async fn call(
        &self,
        call: &'static str,
        req: Request<Body>,
        limit: CallLimit,
        deadline: Duration,
    ) -> Result<(u16, Bytes), AgentError> {
        self.exchange(call, deadline, req, |resp| async move {
            let status = resp.status().as_u16();
            let announced = resp
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if announced.is_some_and(|n| n > limit.max_body_bytes as u64) {
                return Err(AgentError::TooLarge {
                    call,
                    limit: limit.max_body_bytes,
                });
            }
            let body = read_capped(resp.into_body(), limit.max_body_bytes, call).await?;
            Ok((status, body))
        })
        .await
    }

    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        call: &'static str,
        req: Request<Body>,
        limit: CallLimit,
        deadline: Duration,
    ) -> Result<T, AgentError> {
        let (status, bytes) = self.call(call, req, limit, deadline).await?;
        if status != 200 {
            let text = String::from_utf8_lossy(&bytes);
            return Err(AgentError::Status {
                status,
                body: text.chars().take(MAX_ERROR_TEXT).collect(),
            });
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path)
            .header("host", "agent")
            .body(body::empty())
            .expect("static request")
    }

    fn post<B: serde::Serialize>(path: &str, body: &B) -> Result<Request<Body>, AgentError> {
        Ok(Request::post(path)
            .header("host", "agent")
            .header("content-type", "application/json")
            .body(body::full(serde_json::to_vec(body)?))
            .expect("static request"))
    }

    /// Write `bytes` to the file `path` inside the sandbox (`PUT /files`), within `deadline`.
    pub async fn put_file(
        &self,
        path: &str,
        bytes: Bytes,
        deadline: Duration,
    ) -> Result<(), AgentError> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("path", path)
            .finish();
        let req = Request::put(format!("/files?{q}"))
            .header("host", "agent")
            .header("content-type", "application/octet-stream")
            .body(body::full(bytes))
            .expect("static request");
        let limit = CallLimit {
            deadline,
            max_body_bytes: 64 * 1024,
        };
        let (status, body) = self.call("files upload", req, limit, deadline).await?;
        if !(200..300).contains(&status) {
            return Err(AgentError::Status {
                status,
                body: String::from_utf8_lossy(&body)
                    .chars()
                    .take(MAX_ERROR_TEXT)
                    .collect(),
            });
        }
        Ok(())
    }

    /// Run a command (`POST /commands`, NDJSON) and hand each output event to `on_event`, all
    /// within `deadline`; no line longer than `max_line` bytes is read. Returns how the process
    /// ended. The connection is driven here and closed on return, whatever the agent does.
    pub async fn run_command(
        &self,
        req: &lizard_proto::StartCommandRequest,
        deadline: Duration,
        max_line: usize,
        on_event: &mut (dyn FnMut(&lizard_proto::CommandEvent) + Send),
    ) -> Result<lizard_proto::CommandEnd, AgentError> {
        let call = "command";
        let request = Request::post("/commands")
            .header("host", "agent")
            .header("content-type", "application/json")
            .header("accept", lizard_proto::NDJSON)
            .body(body::full(serde_json::to_vec(req)?))
            .expect("static request");
        self.exchange(call, deadline, request, |resp| async move {
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            if status != 200 {
                let b = read_capped(body, MAX_ERROR_TEXT * 4, call)
                    .await
                    .unwrap_or_default();
                return Err(AgentError::Status {
                    status,
                    body: String::from_utf8_lossy(&b)
                        .chars()
                        .take(MAX_ERROR_TEXT)
                        .collect(),
                });
            }
            let mut buf = BytesMut::new();
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                buf.extend_from_slice(&data);
                while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                    let line = buf.split_to(i + 1);
                    let line = &line[..i];
                    if line.is_empty() {
                        continue;
                    }
                    let ev: lizard_proto::CommandEvent = serde_json::from_slice(line)?;
                    if let lizard_proto::CommandEvent::End(end) = ev {
                        return Ok(end);
                    }
                    on_event(&ev);
                }
                if buf.len() > max_line {
                    return Err(AgentError::TooLarge {
                        call,
                        limit: max_line,
                    });
                }
            }
            Err(AgentError::Status {
                status: 200,
                body: "the command's stream ended without an end event".into(),
            })
        })
        .await
    }

    /// Hibernation: every context saves its state into `dir` (a path inside the sandbox).
    pub async fn hibernate_snapshot(
        &self,
        dir: &str,
    ) -> Result<lizard_proto::HibernationReport, AgentError> {
        self.hibernate("hibernate/snapshot", dir).await
    }

    /// Resume from hibernation: recreate the contexts saved in `dir` with their state.
    pub async fn hibernate_restore(
        &self,
        dir: &str,
    ) -> Result<lizard_proto::HibernationReport, AgentError> {
        self.hibernate("hibernate/restore", dir).await
    }

    /// `POST /{call}` with `dir`, under the hibernation limits.
    async fn hibernate(
        &self,
        call: &'static str,
        dir: &str,
    ) -> Result<lizard_proto::HibernationReport, AgentError> {
        let req = lizard_proto::HibernateDirRequest { dir: dir.into() };
        let l = self.limits.hibernate;
        let path = format!("/{call}");
        self.call_json(call, Self::post(&path, &req)?, l, l.deadline)
            .await
    }

    /// Context forks (`lizard_proto::fork`): `POST {path}` with `body`, the agent's 2xx answer
    /// parsed (`None` for an empty one), within the fork limit.
    async fn fork_call<B: serde::Serialize, T: serde::de::DeserializeOwned>(
        &self,
        call: &'static str,
        path: &str,
        body: &B,
    ) -> Result<Option<T>, AgentError> {
        let l = self.limits.fork;
        let (status, bytes) = self
            .call(call, Self::post(path, body)?, l, l.deadline)
            .await?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&bytes);
            return Err(AgentError::Status {
                status,
                body: text.chars().take(MAX_ERROR_TEXT).collect(),
            });
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        Ok(Some(serde_json::from_slice(&bytes)?))
    }

    /// A live fork of context `ctx` (the agent's public `fork`). `ctx` must be a plain id.
    pub async fn fork_live(
        &self,
        ctx: &str,
        req: &lizard_proto::ForkContextRequest,
    ) -> Result<lizard_proto::ContextFork, AgentError> {
        self.fork_call("fork", &format!("/contexts/{ctx}/fork"), req)
            .await?
            .ok_or(AgentError::Status {
                status: 201,
                body: "an empty fork answer".into(),
            })
    }

    /// A live fork of `ctx` if it loses nothing, else the plan of an exact one.
    pub async fn fork_prepare(
        &self,
        ctx: &str,
        req: &lizard_proto::ForkContextRequest,
    ) -> Result<lizard_proto::PreparedFork, AgentError> {
        self.fork_call(
            "fork/prepare",
            &format!("/context-forks/{ctx}/prepare"),
            req,
        )
        .await?
        .ok_or(AgentError::Status {
            status: 200,
            body: "an empty fork plan".into(),
        })
    }

    /// The restored copy becomes the planned fork `new`'s kernel.
    pub async fn fork_adopt(
        &self,
        new: &str,
        adopt: &lizard_proto::AdoptFork,
    ) -> Result<lizard_proto::ContextFork, AgentError> {
        self.fork_call("fork/adopt", &format!("/context-forks/{new}/adopt"), adopt)
            .await?
            .ok_or(AgentError::Status {
                status: 201,
                body: "an empty fork answer".into(),
            })
    }

    /// Forget the planned fork `new`.
    pub async fn fork_abort(&self, new: &str) -> Result<(), AgentError> {
        self.fork_call::<_, serde_json::Value>(
            "fork/abort",
            &format!("/context-forks/{new}/abort"),
            &serde_json::json!({}),
        )
        .await
        .map(drop)
    }

    /// The sandbox's contexts.
    pub async fn contexts(&self) -> Result<Vec<lizard_proto::Context>, AgentError> {
        let l = self.limits.contexts;
        self.call_json("contexts", Self::get("/contexts"), l, l.deadline)
            .await
    }

    pub async fn health(&self) -> Result<Health, AgentError> {
        let l = self.limits.health;
        self.call_json("health", Self::get("/health"), l, l.deadline)
            .await
    }

    /// Finished runs after `after` (for metering), at most [`MAX_EXECUTIONS_PER_PAGE`].
    pub async fn executions(&self, after: u64) -> Result<ExecutionLog, AgentError> {
        self.executions_within(after, self.limits.executions.deadline)
            .await
    }

    /// [`Self::executions`] under `deadline` (at most the configured one), e.g. the short last
    /// look before a kill.
    pub async fn executions_within(
        &self,
        after: u64,
        deadline: Duration,
    ) -> Result<ExecutionLog, AgentError> {
        let l = self.limits.executions;
        let req = Self::get(&format!(
            "/executions?after={after}&limit={MAX_EXECUTIONS_PER_PAGE}"
        ));
        self.call_json("executions", req, l, deadline.min(l.deadline))
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
            let l = self.limits.contexts;
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let contexts: Vec<lizard_proto::Context> = self
                .call_json("contexts", Self::get("/contexts"), l, l.deadline.min(left))
                .await?;
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

    /// Poll `/health` until it answers or `timeout` passes (each poll under the health deadline,
    /// never past `timeout`).
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), AgentError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            let l = self.limits.health;
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            match self
                .call_json::<Health>("health", Self::get("/health"), l, l.deadline.min(left))
                .await
            {
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

/// Records asked for per page of the execution log (the agent's own log keeps 10,000).
pub const MAX_EXECUTIONS_PER_PAGE: usize = 10_000;

/// Read `body` into memory, refusing (without reading further) past `cap` bytes.
async fn read_capped(
    mut body: Incoming,
    cap: usize,
    call: &'static str,
) -> Result<Bytes, AgentError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if buf.len() + data.len() > cap {
                return Err(AgentError::TooLarge { call, limit: cap });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
pub(crate) mod tests {
    //! Against a real hostile agent: an HTTP server on a Unix socket in a temp dir that answers as
    //! an attacker would (never, endlessly, hugely, byte by byte).

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How the fake agent answers every request.
    #[derive(Clone)]
    pub(crate) enum Mode {
        /// Accepts, reads the request, never answers.
        Silent,
        /// A valid head, then a chunked body that never ends.
        Endless,
        /// `Content-Length: n` and then n bytes (of `fill`).
        Sized(u64),
        /// A valid 200 with this body, one byte every `gap`.
        Trickle(Vec<u8>, Duration),
        /// A valid 200 with this JSON body.
        Json(Vec<u8>),
    }

    pub(crate) struct FakeAgent {
        pub dir: tempfile::TempDir,
        /// Body bytes the agent managed to write, over all connections.
        pub served: Arc<AtomicU64>,
    }

    impl FakeAgent {
        pub fn socket(&self) -> PathBuf {
            self.dir.path().join("agent.sock")
        }
    }

    pub(crate) fn fake_agent(mode: Mode) -> FakeAgent {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
        let served = Arc::new(AtomicU64::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let (mode, count) = (mode.clone(), count.clone());
                tokio::spawn(async move {
                    // The request head (the server's own calls have small bodies, read with it).
                    let mut head = Vec::new();
                    let mut b = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&b[..n]),
                        }
                    }
                    let chunk = vec![b'x'; 64 * 1024];
                    match mode {
                        Mode::Silent => {
                            let _ = s.read(&mut b).await;
                            std::future::pending::<()>().await;
                        }
                        Mode::Endless => {
                            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                            if s.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let framed = [
                                format!("{:x}\r\n", chunk.len()).into_bytes(),
                                chunk.clone(),
                                b"\r\n".to_vec(),
                            ]
                            .concat();
                            while s.write_all(&framed).await.is_ok() {
                                count.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                            }
                        }
                        Mode::Sized(n) => {
                            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n");
                            if s.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let mut left = n;
                            while left > 0 {
                                let k = left.min(chunk.len() as u64) as usize;
                                if s.write_all(&chunk[..k]).await.is_err() {
                                    return;
                                }
                                count.fetch_add(k as u64, Ordering::SeqCst);
                                left -= k as u64;
                            }
                        }
                        Mode::Trickle(body, gap) => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                 content-length: {}\r\n\r\n",
                                body.len()
                            );
                            if s.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            for byte in body {
                                if s.write_all(&[byte]).await.is_err() {
                                    return;
                                }
                                count.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(gap).await;
                            }
                        }
                        Mode::Json(body) => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                 content-length: {}\r\n\r\n",
                                body.len()
                            );
                            let _ = s.write_all(head.as_bytes()).await;
                            if s.write_all(&body).await.is_ok() {
                                count.fetch_add(body.len() as u64, Ordering::SeqCst);
                            }
                        }
                    }
                });
            }
        });
        FakeAgent { dir, served }
    }

    /// The fake agent listens in this process: its pid is the peer the client expects.
    fn me() -> i32 {
        std::process::id() as i32
    }

    fn quick() -> AgentLimits {
        let l = CallLimit {
            deadline: Duration::from_millis(500),
            max_body_bytes: 64 * 1024,
        };
        AgentLimits {
            health: l,
            contexts: l,
            executions: l,
            hibernate: l,
            fork: l,
        }
    }

    /// Every call of the server's own, as (name, result).
    async fn every_call(c: &AgentClient) -> Vec<(&'static str, Result<(), AgentError>)> {
        vec![
            ("health", c.health().await.map(|_| ())),
            ("executions", c.executions(0).await.map(|_| ())),
            ("snapshot", c.hibernate_snapshot("/run/x").await.map(|_| ())),
            ("restore", c.hibernate_restore("/run/x").await.map(|_| ())),
            (
                "contexts",
                c.wait_default_context(lizard_proto::Language::Python, Duration::from_secs(1))
                    .await,
            ),
        ]
    }

    #[tokio::test]
    async fn an_agent_that_never_answers_times_out_every_call() {
        lizard_test_support::needs_root!();
        let agent = fake_agent(Mode::Silent);
        let c = AgentClient::with_limits(agent.socket(), me(), quick());
        for (name, r) in every_call(&c).await {
            assert!(
                matches!(r, Err(AgentError::TimedOut { .. })),
                "{name}: {r:?}"
            );
        }
        // Each one within its deadline (+ generous slack on a loaded machine).
        let t0 = Instant::now();
        let r = c.health().await;
        assert!(matches!(r, Err(AgentError::TimedOut { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let t0 = Instant::now();
        assert!(c.wait_ready(Duration::from_secs(1)).await.is_err());
        assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    }

    #[tokio::test]
    async fn an_endless_body_is_refused_at_the_cap_not_buffered() {
        lizard_test_support::needs_root!();
        let agent = fake_agent(Mode::Endless);
        let c = AgentClient::with_limits(agent.socket(), me(), quick());
        for (name, r) in every_call(&c).await {
            assert!(
                matches!(r, Err(AgentError::TooLarge { limit, .. }) if limit == 64 * 1024),
                "{name}: {r:?}"
            );
        }
        // The connections are closed: the agent stops being able to write soon after.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = agent.served.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(agent.served.load(Ordering::SeqCst), after, "still reading");
        // Five calls (one per kind): each read at most its cap plus what sits in socket and read
        // buffers, nowhere near "endless".
        assert!(after < 5 * (64 * 1024 + 4 * MIB as u64), "served {after}");
    }

    #[tokio::test]
    async fn a_hundred_mib_answer_is_refused_from_its_length() {
        lizard_test_support::needs_root!();
        let agent = fake_agent(Mode::Sized(100 * MIB as u64));
        let c = AgentClient::new(agent.socket(), me());
        let t0 = Instant::now();
        let r = c.executions(0).await;
        assert!(
            matches!(r, Err(AgentError::TooLarge { limit, .. }) if limit == 4 * MIB),
            "{r:?}"
        );
        let r = c.health().await;
        assert!(matches!(r, Err(AgentError::TooLarge { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let served = agent.served.load(Ordering::SeqCst);
        assert!(served < 16 * MIB as u64, "served {served} of 200 MiB");
    }

    #[tokio::test]
    async fn a_body_sent_byte_by_byte_times_out_at_the_deadline() {
        lizard_test_support::needs_root!();
        let body = serde_json::to_vec(&ExecutionLog::default()).unwrap();
        let agent = fake_agent(Mode::Trickle(body, Duration::from_millis(200)));
        let c = AgentClient::with_limits(agent.socket(), me(), quick());
        let t0 = Instant::now();
        let r = c.executions(0).await;
        assert!(matches!(r, Err(AgentError::TimedOut { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // A shorter deadline for one call (the last look before a kill) is honoured.
        let t0 = Instant::now();
        let r = c.executions_within(0, Duration::from_millis(100)).await;
        assert!(
            matches!(r, Err(AgentError::TimedOut { ms: 100, .. })),
            "{r:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_honest_small_answer_still_works() {
        lizard_test_support::needs_root!();
        let log = ExecutionLog {
            next: 3,
            records: Vec::new(),
            dropped: 0,
        };
        let agent = fake_agent(Mode::Json(serde_json::to_vec(&log).unwrap()));
        let c = AgentClient::with_limits(agent.socket(), me(), quick());
        assert_eq!(c.executions(0).await.unwrap(), log);
    }

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

    /// An agent that keeps connections alive (axum, as the real one): `/ok` answers at once,
    /// `/stream` sends a chunk and then whatever its test sends on the channel it hands over
    /// (closed: the body ends). Counts the connections it accepted.
    struct KeepAliveAgent {
        dir: tempfile::TempDir,
        accepted: Arc<AtomicU64>,
        streams: tokio::sync::mpsc::UnboundedReceiver<tokio::sync::mpsc::Sender<Bytes>>,
    }

    fn keep_alive_agent() -> KeepAliveAgent {
        use axum::serve::ListenerExt;
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::UnixListener::bind(dir.path().join("agent.sock")).unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let listener = listener.tap_io(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        });
        let (streams_tx, streams) = tokio::sync::mpsc::unbounded_channel();
        let app = axum::Router::new()
            .route("/ok", axum::routing::get(|| async { "ok" }))
            .route(
                "/stream",
                axum::routing::get(move || {
                    let streams_tx = streams_tx.clone();
                    async move {
                        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
                        tx.send(Bytes::from_static(b"first")).await.unwrap();
                        let _ = streams_tx.send(tx);
                        let body = futures_util::stream::unfold(rx, |mut rx| async move {
                            rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
                        });
                        axum::body::Body::from_stream(body)
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        KeepAliveAgent {
            dir,
            accepted,
            streams,
        }
    }

    async fn get(c: &AgentClient, path: &str) -> Response<Incoming> {
        let req = Request::get(path)
            .header("host", "agent")
            .body(body::empty())
            .unwrap();
        c.send(req).await.unwrap()
    }

    async fn text(resp: Response<Incoming>) -> String {
        let b = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// Until `cond` holds (a connection is kept only after its response has been read, in a task).
    async fn until(mut cond: impl FnMut() -> bool) {
        let held =
            lizard_test_support::eventually(Duration::from_secs(5), || std::future::ready(cond()))
                .await;
        assert!(held, "not within 5 s");
    }

    /// The next data frame of `body`.
    async fn next_data(body: &mut Incoming) -> Bytes {
        body.frame().await.unwrap().unwrap().into_data().unwrap()
    }

    fn idle(c: &AgentClient) -> usize {
        c.idle.conns.lock().unwrap().len()
    }

    #[tokio::test]
    async fn forwarded_requests_reuse_one_connection_once_each_answer_is_read() {
        lizard_test_support::needs_root!();
        let agent = keep_alive_agent();
        let c = AgentClient::new(agent.dir.path().join("agent.sock"), me());
        for _ in 0..5 {
            assert_eq!(text(get(&c, "/ok").await).await, "ok");
            until(|| idle(&c) == 1).await;
        }
        assert_eq!(agent.accepted.load(Ordering::SeqCst), 1);
        // A clone shares them.
        assert_eq!(text(get(&c.clone(), "/ok").await).await, "ok");
        assert_eq!(agent.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_whose_answer_still_streams_is_not_shared() {
        lizard_test_support::needs_root!();
        let mut agent = keep_alive_agent();
        let c = AgentClient::new(agent.dir.path().join("agent.sock"), me());
        let mut streaming = get(&c, "/stream").await.into_body();
        let more = agent.streams.recv().await.unwrap();
        let first = next_data(&mut streaming).await;
        assert_eq!(&first[..], b"first");
        // Meanwhile another request: a connection of its own, answered at once.
        assert_eq!(idle(&c), 0);
        assert_eq!(text(get(&c, "/ok").await).await, "ok");
        assert_eq!(agent.accepted.load(Ordering::SeqCst), 2);
        until(|| idle(&c) == 1).await;
        // The stream goes on, then ends; then its connection is idle too.
        more.send(Bytes::from_static(b"second")).await.unwrap();
        let second = next_data(&mut streaming).await;
        assert_eq!(&second[..], b"second");
        drop(more);
        assert!(streaming.frame().await.is_none());
        until(|| idle(&c) == 2).await;
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_end_closes_its_connection() {
        lizard_test_support::needs_root!();
        let mut agent = keep_alive_agent();
        let c = AgentClient::new(agent.dir.path().join("agent.sock"), me());
        let streaming = get(&c, "/stream").await;
        let more = agent.streams.recv().await.unwrap();
        // The client left: the agent sees its connection close (as it did with one connection
        // per request), which is how it knows to interrupt the cell.
        drop(streaming);
        tokio::time::timeout(Duration::from_secs(10), more.closed())
            .await
            .expect("the agent did not see the connection close");
        assert_eq!(idle(&c), 0);
        assert_eq!(text(get(&c, "/ok").await).await, "ok");
        assert_eq!(agent.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn close_idle_closes_every_idle_connection() {
        lizard_test_support::needs_root!();
        let agent = keep_alive_agent();
        let c = AgentClient::new(agent.dir.path().join("agent.sock"), me());
        let (a, b) = tokio::join!(get(&c, "/ok"), get(&c, "/ok"));
        let _ = tokio::join!(text(a), text(b));
        until(|| idle(&c) == 2).await;
        c.close_idle(Duration::from_secs(5)).await;
        assert_eq!(idle(&c), 0);
        assert_eq!(text(get(&c, "/ok").await).await, "ok");
        assert_eq!(agent.accepted.load(Ordering::SeqCst), 3);
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
