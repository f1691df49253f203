//! The process table shared by commands (`crate::commands`) and terminals (`crate::pty`): spawning,
//! one pump task per process, bounded output buffers, readers, signals, input and retention.
//!
//! A process is a task of its own, not tied to any HTTP request: a client that disconnects from its
//! output stream only stops reading (E2B semantics); the process runs on until it exits, its
//! `timeout_ms` passes, or someone signals it. Every process leads its own process group (a PTY
//! process its own session), and signals go to the whole group.
//!
//! Output: each process keeps the last [`RETAIN_BYTES`] of stdout and of stderr, so a reader that
//! attaches late (`GET /commands/{pid}/stream`) replays what is left and is told how much fell out.
//! Attached readers are lossless: output they have not read yet is never dropped; if one falls more
//! than [`LAG_BYTES`] behind, the pump stops reading the process's pipes (the process then blocks on
//! write, as with any pipe) until it catches up or goes away.
//!
//! A finished process stays in the table for [`FINISHED_RETENTION`] (at most [`MAX_FINISHED`] of
//! them), so a late reader still gets its output and exit status.
//!
//! Not here: HTTP routes and request validation (see `crate::commands`, `crate::pty`).

use crate::utf8::Utf8Stream;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use bytes::Bytes;
use lizard_http::api::{error_chain, stream_response, ApiError, Framing};
use lizard_jail::{signal_group, Signal};
use lizard_proto::{
    CommandEnd, CommandEvent, CommandResult, ErrorCode, ProcessInfo, PtySize, NDJSON, SSE,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{watch, Notify};

/// Output kept per stream for readers that attach late.
pub const RETAIN_BYTES: usize = 1024 * 1024;
/// How far an attached reader may fall behind before the process's output is no longer read.
pub const LAG_BYTES: usize = 4 * 1024 * 1024;
/// How long a finished process stays queryable.
pub const FINISHED_RETENTION: Duration = Duration::from_secs(60);
/// At most this many finished processes are kept (the oldest go first).
pub const MAX_FINISHED: usize = 64;
/// After a timeout's SIGTERM, how long the group has before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(2);
/// Aggregated (non-streaming) results keep at most this much output per stream.
pub const AGGREGATE_LIMIT: usize = 64 * 1024 * 1024;
/// After the process exits, how long output still arriving from its pipes (e.g. from a background
/// child that keeps them open) is collected before `end`.
const EXIT_DRAIN: Duration = Duration::from_millis(100);
const READ_CHUNK: usize = 64 * 1024;
/// Largest batch of output one reader takes from the buffer at a time.
const BATCH_BYTES: usize = 256 * 1024;
/// OOM score adjustment of commands (as for kernels: the OOM killer should take them, not the agent).
pub(crate) const OOM_SCORE_ADJ: i32 = 500;

/// Failures of process operations, mapped to API errors.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("no process {0} (it never existed, or it ended more than 60 s ago)")]
    NotFound(u32),
    #[error("process {0} has exited")]
    Exited(u32),
    #[error("process {0} has already exited")]
    AlreadyExited(u32),
    #[error("process {0} was started without `stdin: true`; its stdin is /dev/null")]
    NoStdin(u32),
    #[error("the stdin of process {0} is closed")]
    StdinClosed(u32),
    #[error("process {0} is not running on a terminal (start it with POST /pty)")]
    NotPty(u32),
    #[error("{0}")]
    Invalid(String),
    #[error("working directory {0:?} does not exist or is not a directory")]
    BadCwd(String),
    #[error("cannot run {program:?}: {source}")]
    Program {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot start {program:?}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot open a terminal")]
    Pty(#[source] io::Error),
    #[error("writing to process {pid}")]
    Input {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("signalling process group {0}")]
    Signal(u32, #[source] lizard_jail::process::ProcessError),
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        let code = match &e {
            CommandError::NotFound(_) | CommandError::AlreadyExited(_) => ErrorCode::NotFound,
            CommandError::Exited(_)
            | CommandError::NoStdin(_)
            | CommandError::StdinClosed(_)
            | CommandError::NotPty(_) => ErrorCode::Conflict,
            CommandError::Invalid(_) | CommandError::BadCwd(_) | CommandError::Program { .. } => {
                ErrorCode::InvalidRequest
            }
            CommandError::Input { source, .. } if source.kind() == io::ErrorKind::BrokenPipe => {
                return ApiError::new(
                    ErrorCode::Conflict,
                    format!("{e}: the process closed its input"),
                )
            }
            CommandError::Spawn { .. } | CommandError::Pty(_) => ErrorCode::Unavailable,
            CommandError::Input { .. } | CommandError::Signal(..) => ErrorCode::Internal,
        };
        let message = match &e {
            // The source is already in the message.
            CommandError::Program { .. } => e.to_string(),
            _ => error_chain(&e),
        };
        if code == ErrorCode::Internal || code == ErrorCode::Unavailable {
            tracing::warn!(error = %message, "process operation failed");
        }
        ApiError::new(code, message)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Processes whose exit status this agent collects itself, and process groups it created. As PID 1
/// the agent reaps orphans; it must leave these to their pumps (see `crate::cli::reap_orphans`).
#[derive(Default)]
struct Registry {
    waiting: BTreeSet<i32>,
    groups: BTreeSet<i32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    waiting: BTreeSet::new(),
    groups: BTreeSet::new(),
});

/// Run `f` with the pids of command and terminal processes that have not been reaped yet, holding
/// the registry lock (a process being spawned meanwhile is registered before the lock is released,
/// so a reaper calling this never takes an exit status that a pump is waiting for).
pub fn with_owned_pids<R>(f: impl FnOnce(&BTreeSet<i32>) -> R) -> R {
    f(&lock(&REGISTRY).waiting)
}

/// Run a helper program (e.g. `mv`) to its end and collect its output. It is registered as owned
/// while it runs, so the orphan reaper leaves its exit status to us.
pub async fn output_owned(cmd: &mut tokio::process::Command) -> io::Result<std::process::Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = {
        let mut reg = lock(&REGISTRY);
        let child = cmd.spawn()?;
        if let Some(pid) = child.id() {
            reg.waiting.insert(pid as i32);
        }
        child
    };
    let pid = child.id();
    let out = child.wait_with_output().await;
    if let Some(pid) = pid {
        lock(&REGISTRY).waiting.remove(&(pid as i32));
    }
    out
}

/// Spawn `cmd` (which leads a process group of its own) registered as owned: the orphan reaper
/// leaves its exit status to the caller's `wait`, and agent shutdown kills its group. Call
/// [`disown`] once it has been waited for.
pub fn spawn_owned_group(cmd: &mut tokio::process::Command) -> io::Result<tokio::process::Child> {
    let mut reg = lock(&REGISTRY);
    let child = cmd.spawn()?;
    if let Some(pid) = child.id() {
        reg.waiting.insert(pid as i32);
        reg.groups.insert(pid as i32);
    }
    Ok(child)
}

/// Forget a process of [`spawn_owned_group`] (it has been reaped).
pub fn disown(pid: i32) {
    let mut reg = lock(&REGISTRY);
    reg.waiting.remove(&pid);
    reg.groups.remove(&pid);
}

/// SIGKILL every process group this agent started that is still in its table (agent shutdown).
pub fn kill_all() {
    let groups: Vec<i32> = lock(&REGISTRY).groups.iter().copied().collect();
    for g in groups {
        let _ = signal_group(g, Signal::SIGKILL);
    }
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout = 0,
    Stderr = 1,
}

struct Chunk {
    seq: u64,
    data: Bytes,
}

/// A process's buffered output, its readers' positions, and its end.
#[derive(Default)]
struct Log {
    streams: [VecDeque<Chunk>; 2],
    retained: [usize; 2],
    /// Bytes that fell out of the front of each stream's buffer.
    dropped: [u64; 2],
    next_seq: u64,
    /// Reader id → the next seq it wants.
    readers: HashMap<u64, u64>,
    next_reader: u64,
    end: Option<CommandEnd>,
}

impl Log {
    fn trim(&mut self) {
        let min_cursor = self.readers.values().copied().min().unwrap_or(u64::MAX);
        for s in 0..2 {
            // Keep at least the last RETAIN_BYTES (so up to one chunk more).
            while let Some(c) = self.streams[s].front() {
                let len = c.data.len();
                if c.seq >= min_cursor || self.retained[s] - len < RETAIN_BYTES {
                    break;
                }
                self.retained[s] -= len;
                self.dropped[s] += len as u64;
                self.streams[s].pop_front();
            }
        }
    }

    fn over_high_water(&self) -> bool {
        self.retained[0] + self.retained[1] > 2 * RETAIN_BYTES + LAG_BYTES
    }
}

/// Where input to the process goes.
enum Input {
    None,
    Pipe(ChildStdin),
    Pty(pipe::Sender),
    Closed,
}

/// One command or terminal process (running, or finished and retained).
pub struct Proc {
    pub pid: u32,
    info: Mutex<ProcessInfo>,
    started: Instant,
    log: Mutex<Log>,
    /// Bumped on every change of `log` (output, end) for readers.
    changed: watch::Sender<u64>,
    /// Signalled when a reader advances or leaves (for the pump's backpressure).
    progress: Notify,
    input: tokio::sync::Mutex<Input>,
    /// The terminal's master side (for resizing), for a PTY process.
    pty: Option<OwnedFd>,
}

impl Proc {
    pub fn info(&self) -> ProcessInfo {
        let mut i = lock(&self.info).clone();
        i.end = lock(&self.log).end.clone();
        i
    }

    pub fn is_running(&self) -> bool {
        lock(&self.log).end.is_none()
    }

    pub fn is_pty(&self) -> bool {
        self.pty.is_some()
    }

    /// Attach a reader: it replays what is still buffered, then follows live output to the end.
    pub fn subscribe(self: &Arc<Self>, base64: bool) -> Subscription {
        let mut log = lock(&self.log);
        let id = log.next_reader;
        log.next_reader += 1;
        let first = [&log.streams[0], &log.streams[1]]
            .iter()
            .filter_map(|s| s.front().map(|c| c.seq))
            .min()
            .unwrap_or(log.next_seq);
        log.readers.insert(id, first);
        let dropped = log.dropped;
        drop(log);
        Subscription {
            proc: self.clone(),
            id,
            cursor: first,
            rx: self.changed.subscribe(),
            utf8: [Utf8Stream::default(), Utf8Stream::default()],
            base64: base64 || self.is_pty(),
            dropped,
            state: SubState::New,
        }
    }

    /// Send `sig` to the process's group. A finished process is `not_found` (as for E2B's `kill`),
    /// even if children it left in its group live on.
    pub fn signal(&self, sig: Signal) -> Result<(), CommandError> {
        if !self.is_running() {
            return Err(CommandError::AlreadyExited(self.pid));
        }
        signal_group(self.pid as i32, sig).map_err(|e| CommandError::Signal(self.pid, e))
    }

    /// Write `data` to the process's stdin (or terminal).
    pub async fn write_input(&self, data: &[u8]) -> Result<(), CommandError> {
        if !self.is_running() {
            return Err(CommandError::Exited(self.pid));
        }
        let pid = self.pid;
        let io_err = |source| CommandError::Input { pid, source };
        let mut input = self.input.lock().await;
        match &mut *input {
            Input::None => Err(CommandError::NoStdin(pid)),
            Input::Closed => Err(CommandError::StdinClosed(pid)),
            Input::Pipe(w) => {
                w.write_all(data).await.map_err(io_err)?;
                w.flush().await.map_err(io_err)
            }
            Input::Pty(w) => {
                w.write_all(data).await.map_err(io_err)?;
                w.flush().await.map_err(io_err)
            }
        }
    }

    /// Close the process's stdin (end of file). For a terminal, send the EOF character instead.
    pub async fn close_input(&self) -> Result<(), CommandError> {
        if !self.is_running() {
            return Err(CommandError::Exited(self.pid));
        }
        let mut input = self.input.lock().await;
        match &*input {
            Input::None => Err(CommandError::NoStdin(self.pid)),
            Input::Closed => Ok(()),
            Input::Pty(_) => {
                drop(input);
                // ^D: the terminal's VEOF in its default (canonical) mode.
                self.write_input(&[4]).await
            }
            Input::Pipe(_) => {
                *input = Input::Closed;
                Ok(())
            }
        }
    }

    /// Resize the process's terminal.
    pub fn resize(&self, size: PtySize) -> Result<(), CommandError> {
        let Some(fd) = &self.pty else {
            return Err(CommandError::NotPty(self.pid));
        };
        if !self.is_running() {
            return Err(CommandError::Exited(self.pid));
        }
        lizard_jail::pty::set_window_size(fd.as_fd(), size.cols, size.rows).map_err(|source| {
            CommandError::Input {
                pid: self.pid,
                source,
            }
        })?;
        lock(&self.info).pty = Some(size);
        Ok(())
    }

    fn push(&self, stream: Stream, data: Bytes) {
        let mut log = lock(&self.log);
        let seq = log.next_seq;
        log.next_seq += 1;
        let s = stream as usize;
        log.retained[s] += data.len();
        log.streams[s].push_back(Chunk { seq, data });
        log.trim();
        drop(log);
        self.changed.send_modify(|v| *v += 1);
    }

    fn finish(&self, end: CommandEnd) {
        lock(&self.log).end = Some(end);
        self.changed.send_modify(|v| *v += 1);
    }

    fn over_high_water(&self) -> bool {
        lock(&self.log).over_high_water()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubState {
    New,
    Streaming,
    Done,
}

/// What a reader gets next.
pub enum Item {
    Output(Stream, Bytes),
    End(CommandEnd),
}

/// One reader of a process's output. Dropping it detaches (the process keeps running).
pub struct Subscription {
    proc: Arc<Proc>,
    id: u64,
    cursor: u64,
    rx: watch::Receiver<u64>,
    utf8: [Utf8Stream; 2],
    base64: bool,
    dropped: [u64; 2],
    state: SubState,
}

impl Subscription {
    pub fn pid(&self) -> u32 {
        self.proc.pid
    }

    /// Whether the process runs on a terminal (its output is one stream).
    pub fn is_pty(&self) -> bool {
        self.proc.is_pty()
    }

    /// The next batch of raw output, then one `End`, then `None`.
    pub async fn next_items(&mut self) -> Option<Vec<Item>> {
        if self.state == SubState::Done {
            return None;
        }
        self.state = SubState::Streaming;
        loop {
            self.rx.borrow_and_update();
            let mut items = Vec::new();
            let mut end = None;
            {
                let mut log = lock(&self.proc.log);
                let mut taken = 0usize;
                let mut idx = [
                    log.streams[0].partition_point(|c| c.seq < self.cursor),
                    log.streams[1].partition_point(|c| c.seq < self.cursor),
                ];
                while taken < BATCH_BYTES {
                    let next = (0..2)
                        .filter_map(|s| log.streams[s].get(idx[s]).map(|c| (c.seq, s)))
                        .min();
                    let Some((seq, s)) = next else { break };
                    let data = log.streams[s][idx[s]].data.clone();
                    taken += data.len();
                    idx[s] += 1;
                    self.cursor = seq + 1;
                    let stream = if s == 0 {
                        Stream::Stdout
                    } else {
                        Stream::Stderr
                    };
                    items.push(Item::Output(stream, data));
                }
                if items.is_empty() {
                    self.cursor = self.cursor.max(log.next_seq);
                    end = log.end.clone();
                }
                log.readers.insert(self.id, self.cursor);
                log.trim();
            }
            if !items.is_empty() {
                self.proc.progress.notify_one();
                return Some(items);
            }
            if let Some(end) = end {
                self.state = SubState::Done;
                return Some(vec![Item::End(end)]);
            }
            if self.rx.changed().await.is_err() {
                // Cannot happen while we hold the process (it owns the sender); end defensively.
                self.state = SubState::Done;
                return None;
            }
        }
    }

    /// The next batch of wire events: `start` first, output, then `end`, then `None`.
    pub async fn next_events(&mut self) -> Option<Vec<CommandEvent>> {
        if self.state == SubState::New {
            self.state = SubState::Streaming;
            return Some(vec![CommandEvent::Start {
                pid: self.proc.pid,
                dropped_stdout_bytes: self.dropped[0],
                dropped_stderr_bytes: self.dropped[1],
            }]);
        }
        let items = self.next_items().await?;
        let mut events = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Item::Output(stream, data) => {
                    let text = self.utf8[stream as usize].push(&data);
                    if text.is_empty() && !self.base64 {
                        continue;
                    }
                    let data_b64 = self
                        .base64
                        .then(|| base64::engine::general_purpose::STANDARD.encode(&data));
                    events.push(output_event(stream, text, data_b64));
                }
                Item::End(end) => {
                    for (s, stream) in [(0, Stream::Stdout), (1, Stream::Stderr)] {
                        let rest = self.utf8[s].finish();
                        if !rest.is_empty() {
                            events.push(output_event(stream, rest, None));
                        }
                    }
                    events.push(CommandEvent::End(end));
                }
            }
        }
        Some(events)
    }

    /// Read to the end and fold everything into one result.
    pub async fn aggregate(mut self) -> CommandResult {
        let mut result = CommandResult {
            pid: self.proc.pid,
            dropped_stdout_bytes: self.dropped[0],
            dropped_stderr_bytes: self.dropped[1],
            ..Default::default()
        };
        let mut bufs: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
        while let Some(items) = self.next_items().await {
            for item in items {
                match item {
                    Item::Output(stream, data) => {
                        let buf = &mut bufs[stream as usize];
                        let room = AGGREGATE_LIMIT.saturating_sub(buf.len());
                        if data.len() > room {
                            result.truncated = true;
                        }
                        buf.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    Item::End(end) => result.set_end(end),
                }
            }
        }
        if self.base64 {
            let b64 = |b: &[u8]| Some(base64::engine::general_purpose::STANDARD.encode(b));
            result.stdout_b64 = b64(&bufs[0]);
            result.stderr_b64 = b64(&bufs[1]);
        }
        let [out, err] = bufs;
        result.stdout = String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        result.stderr = String::from_utf8(err)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        result
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut log = lock(&self.proc.log);
        log.readers.remove(&self.id);
        log.trim();
        drop(log);
        self.proc.progress.notify_one();
    }
}

fn output_event(stream: Stream, text: String, data_b64: Option<String>) -> CommandEvent {
    match stream {
        Stream::Stdout => CommandEvent::Stdout { text, data_b64 },
        Stream::Stderr => CommandEvent::Stderr { text, data_b64 },
    }
}

/// Answer with a process's output as the client asked: NDJSON or SSE events as they happen, or the
/// aggregated [`CommandResult`] once it ends. Either way, a client that leaves only detaches.
pub async fn respond(framing: Framing, sub: Subscription) -> Response {
    match framing {
        Framing::Aggregate => Json(sub.aggregate().await).into_response(),
        Framing::Ndjson | Framing::Sse => {
            let sse = framing == Framing::Sse;
            let body = futures_util::stream::unfold(sub, move |mut sub| async move {
                let events = sub.next_events().await?;
                let mut out = Vec::new();
                for e in events {
                    let json = serde_json::to_vec(&e).unwrap_or_default();
                    if sse {
                        out.extend_from_slice(format!("event: {}\ndata: ", e.kind()).as_bytes());
                        out.extend_from_slice(&json);
                        out.extend_from_slice(b"\n\n");
                    } else {
                        out.extend_from_slice(&json);
                        out.push(b'\n');
                    }
                }
                Some((Ok::<_, Infallible>(Bytes::from(out)), sub))
            });
            stream_response(if sse { SSE } else { NDJSON }, Body::from_stream(body))
        }
    }
}

/// What to start (validated by the caller).
#[derive(Debug, Clone)]
pub struct Spawn {
    pub argv: Vec<String>,
    /// The shell command line, when `argv` is `bash -c CMD`.
    pub cmd: Option<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    pub stdin: bool,
    pub tag: Option<String>,
    pub pty: Option<PtySize>,
    /// The sandbox user (default) or the sandbox's root.
    pub user: crate::users::RunAs,
}

/// The table: every running process, and finished ones for a while.
pub struct Processes {
    map: Mutex<HashMap<u32, Arc<Proc>>>,
    finished: Mutex<VecDeque<Arc<Proc>>>,
    /// Base of relative paths (the sandbox user's home inside a sandbox).
    pub default_cwd: PathBuf,
    /// The shell that runs `cmd` strings and default terminals.
    pub bash: PathBuf,
}

impl Processes {
    pub fn new(default_cwd: PathBuf, bash: PathBuf) -> Arc<Processes> {
        Arc::new(Processes {
            map: Mutex::new(HashMap::new()),
            finished: Mutex::new(VecDeque::new()),
            default_cwd,
            bash,
        })
    }

    pub fn get(&self, pid: u32) -> Result<Arc<Proc>, CommandError> {
        lock(&self.map)
            .get(&pid)
            .cloned()
            .ok_or(CommandError::NotFound(pid))
    }

    /// Running processes, by pid.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let procs: Vec<Arc<Proc>> = lock(&self.map).values().cloned().collect();
        let mut v: Vec<ProcessInfo> = procs
            .iter()
            .filter(|p| p.is_running())
            .map(|p| p.info())
            .collect();
        v.sort_by_key(|i| i.pid);
        v
    }

    /// Start a process. With `attach`, a reader is registered before any output exists, so it sees
    /// everything from the first byte.
    pub fn spawn(
        self: &Arc<Self>,
        spec: Spawn,
        attach: bool,
        base64: bool,
    ) -> Result<(Arc<Proc>, Option<Subscription>), CommandError> {
        let program = spec.argv.first().cloned().unwrap_or_default();
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&spec.argv[1..]).current_dir(&spec.cwd);
        // After a CRIU restore: the clone's id, not the source's (`crate::identity`); the
        // process's own variables come after.
        crate::identity::apply(&mut cmd);
        cmd.envs(&spec.env).kill_on_drop(false);
        let root = spec.user == crate::users::RunAs::Root;
        // Inside a sandbox: the sandbox user, no supplementary groups (std drops them when the
        // agent is root), no capabilities (the uid change clears them). Or, asked for, the
        // sandbox's root: uid 0 with the kept capabilities (the bounding set, `no_new_privs`
        // and the seccomp filter are every process's), its own home and umask.
        if let Some(ids) = crate::users::sandbox_user() {
            if root {
                cmd.env("HOME", crate::users::ROOT_HOME)
                    .env("USER", crate::users::ROOT_NAME)
                    .env("LOGNAME", crate::users::ROOT_NAME)
                    .envs(&spec.env);
                lizard_jail::creds::become_user_on_exec(
                    cmd.as_std_mut(),
                    0,
                    0,
                    crate::users::ROOT_UMASK,
                );
            } else {
                cmd.uid(ids.uid).gid(ids.gid);
            }
        }
        let mut pty_master = None;
        match spec.pty {
            Some(size) => {
                // Opened as the user it is for: the terminal's slave (`/dev/pts/N`) is then the
                // user's, as a login would make it (programs reopen it by name).
                let open = || lizard_jail::pty::open(size.cols, size.rows);
                let pty = if root {
                    open()
                } else {
                    crate::users::with_sandbox_user(open)
                }
                .map_err(CommandError::Pty)?;
                let slave = |p: &lizard_jail::pty::Pty| {
                    p.slave
                        .try_clone()
                        .map(Stdio::from)
                        .map_err(CommandError::Pty)
                };
                cmd.stdin(slave(&pty)?)
                    .stdout(slave(&pty)?)
                    .stderr(slave(&pty)?);
                lizard_jail::pty::make_controlling_terminal(cmd.as_std_mut());
                pty_master = Some(pty.master);
                // `pty.slave` is dropped here; the child's copies are in `cmd` until it is dropped.
            }
            None => {
                cmd.stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .stdin(if spec.stdin {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    })
                    .process_group(0);
            }
        }

        let mut child = {
            let mut reg = lock(&REGISTRY);
            let child = cmd.spawn().map_err(|source| match source.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => {
                    CommandError::Program {
                        program: program.clone(),
                        source,
                    }
                }
                _ => CommandError::Spawn {
                    program: program.clone(),
                    source,
                },
            })?;
            if let Some(pid) = child.id() {
                reg.waiting.insert(pid as i32);
                reg.groups.insert(pid as i32);
            }
            child
        };
        // Closes the parent's copies of the terminal's slave side.
        drop(cmd);
        let pid = child.id().unwrap_or(0);
        let _ = lizard_jail::procfs::set_oom_score_adj(pid as i32, OOM_SCORE_ADJ);

        let (readers, input, pty) = match pty_master {
            Some(master) => {
                // Both ends go through the reactor; the master itself stays for resizing. It is
                // non-blocking (see `lizard_jail::pty::open`), as the reactor needs.
                let dup = || master.try_clone().map_err(CommandError::Pty);
                let reader =
                    pipe::Receiver::from_owned_fd_unchecked(dup()?).map_err(CommandError::Pty)?;
                let writer =
                    pipe::Sender::from_owned_fd_unchecked(dup()?).map_err(CommandError::Pty)?;
                (
                    [Some(Reader::Pty(reader)), None],
                    Input::Pty(writer),
                    Some(master),
                )
            }
            None => {
                let out = child.stdout.take().map(Reader::Stdout);
                let err = child.stderr.take().map(Reader::Stderr);
                let input = match child.stdin.take() {
                    Some(w) => Input::Pipe(w),
                    None => Input::None,
                };
                ([out, err], input, None)
            }
        };
        let (changed, _) = watch::channel(0);
        let proc = Arc::new(Proc {
            pid,
            info: Mutex::new(ProcessInfo {
                pid,
                cmd: spec.cmd,
                argv: spec.argv,
                cwd: spec.cwd.display().to_string(),
                env: spec.env,
                tag: spec.tag,
                pty: spec.pty,
                stdin: spec.stdin || spec.pty.is_some(),
                started_at_ms: now_ms(),
                end: None,
            }),
            started: Instant::now(),
            log: Mutex::new(Log::default()),
            changed,
            progress: Notify::new(),
            input: tokio::sync::Mutex::new(input),
            pty,
        });
        let sub = attach.then(|| proc.subscribe(base64));
        // A finished entry with a recycled pid is replaced.
        lock(&self.map).insert(pid, proc.clone());
        tokio::spawn(pump(
            self.clone(),
            proc.clone(),
            child,
            readers,
            spec.timeout,
        ));
        Ok((proc, sub))
    }

    fn retire(self: &Arc<Self>, proc: &Arc<Proc>) {
        let evicted: Vec<Arc<Proc>> = {
            let mut fin = lock(&self.finished);
            fin.push_back(proc.clone());
            let n = fin.len().saturating_sub(MAX_FINISHED);
            fin.drain(..n).collect()
        };
        for p in evicted {
            self.remove(&p);
        }
        let this = self.clone();
        let proc = Arc::downgrade(proc);
        tokio::spawn(async move {
            tokio::time::sleep(FINISHED_RETENTION).await;
            if let Some(p) = proc.upgrade() {
                this.remove(&p);
            }
        });
    }

    fn remove(&self, proc: &Arc<Proc>) {
        let mut map = lock(&self.map);
        if map.get(&proc.pid).is_some_and(|p| Arc::ptr_eq(p, proc)) {
            map.remove(&proc.pid);
            lock(&REGISTRY).groups.remove(&(proc.pid as i32));
        }
        drop(map);
        lock(&self.finished).retain(|p| !Arc::ptr_eq(p, proc));
    }
}

/// A source of process output.
enum Reader {
    Stdout(ChildStdout),
    Stderr(ChildStderr),
    /// A terminal's master side: reads fail with EIO once the terminal's last user is gone.
    Pty(pipe::Receiver),
}

impl Reader {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Reader::Stdout(r) => r.read(buf).await,
            Reader::Stderr(r) => r.read(buf).await,
            Reader::Pty(r) => r.read(buf).await,
        }
    }
}

async fn read_opt(r: &mut Option<Reader>, buf: &mut [u8]) -> io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365)
}

/// The life of one process: read its output into its log, enforce its timeout, collect its exit.
async fn pump(
    procs: Arc<Processes>,
    proc: Arc<Proc>,
    mut child: tokio::process::Child,
    readers: [Option<Reader>; 2],
    timeout: Option<Duration>,
) {
    use tokio::time::{sleep_until, Instant as TInstant};
    let pid = proc.pid as i32;
    let [mut r0, mut r1] = readers;
    let mut open = [r0.is_some(), r1.is_some()];
    let mut b0 = vec![0u8; READ_CHUNK];
    let mut b1 = vec![0u8; READ_CHUNK];
    let deadline = timeout.map(|t| TInstant::now() + t);
    let mut timed_out = false;
    let mut kill_at: Option<TInstant> = None;
    let mut status: Option<io::Result<std::process::ExitStatus>> = None;
    let mut drain_until: Option<TInstant> = None;

    loop {
        if status.is_some() && !open[0] && !open[1] {
            break;
        }
        // Backpressure for lagging readers; once the process is gone, read what is left anyway.
        let blocked = status.is_none() && proc.over_high_water();
        tokio::select! {
            r = read_opt(&mut r0, &mut b0), if open[0] && !blocked => match r {
                Ok(0) => open[0] = false,
                Ok(n) => proc.push(Stream::Stdout, Bytes::copy_from_slice(&b0[..n])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // EIO: a terminal whose other side is closed.
                Err(_) => open[0] = false,
            },
            r = read_opt(&mut r1, &mut b1), if open[1] && !blocked => match r {
                Ok(0) => open[1] = false,
                Ok(n) => proc.push(Stream::Stderr, Bytes::copy_from_slice(&b1[..n])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => open[1] = false,
            },
            _ = proc.progress.notified(), if blocked => {}
            s = child.wait(), if status.is_none() => {
                status = Some(s);
                lock(&REGISTRY).waiting.remove(&pid);
                drain_until = Some(TInstant::now() + EXIT_DRAIN);
                if timed_out {
                    // Whatever the group still holds goes too.
                    let _ = signal_group(pid, Signal::SIGKILL);
                }
            }
            _ = sleep_until(drain_until.unwrap_or_else(far_future)), if drain_until.is_some() => break,
            _ = sleep_until(deadline.unwrap_or_else(far_future)),
                if deadline.is_some() && !timed_out && status.is_none() => {
                timed_out = true;
                let _ = signal_group(pid, Signal::SIGTERM);
                kill_at = Some(TInstant::now() + TERM_GRACE);
            }
            _ = sleep_until(kill_at.unwrap_or_else(far_future)),
                if kill_at.is_some() && status.is_none() => {
                let _ = signal_group(pid, Signal::SIGKILL);
                kill_at = None;
            }
        }
    }
    drop((r0, r1));
    let (exit_code, signal) = match status {
        Some(Ok(s)) => (
            s.code(),
            s.signal().map(|n| {
                Signal::try_from(n)
                    .map(|sig| sig.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {n}"))
            }),
        ),
        Some(Err(e)) => {
            tracing::warn!(pid, error = %e, "cannot collect a command's exit status");
            (None, None)
        }
        None => (None, None),
    };
    // The stdin pipe goes; a terminal stays open until the entry is dropped. (A writer blocked on a
    // pipe that a leftover child holds open keeps it; the end must not wait for that writer.)
    if let Ok(mut input) = proc.input.try_lock() {
        if matches!(*input, Input::Pipe(_)) {
            *input = Input::Closed;
        }
    }
    proc.finish(CommandEnd {
        exit_code,
        signal,
        timed_out,
        duration_ms: proc.started.elapsed().as_millis() as u64,
    });
    procs.retire(&proc);
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_keeps_what_readers_have_not_read() {
        let mut log = Log::default();
        log.readers.insert(0, 0);
        for i in 0..3u64 {
            log.streams[0].push_back(Chunk {
                seq: i,
                data: Bytes::from(vec![0u8; RETAIN_BYTES]),
            });
            log.retained[0] += RETAIN_BYTES;
        }
        log.next_seq = 3;
        log.trim();
        assert_eq!(log.streams[0].len(), 3, "the reader at 0 has read nothing");
        log.readers.insert(0, 2);
        log.trim();
        assert_eq!(log.streams[0].len(), 1);
        assert_eq!(log.dropped[0], 2 * RETAIN_BYTES as u64);
        log.readers.clear();
        log.trim();
        assert_eq!(log.streams[0].len(), 1, "the last MiB is retained");
    }

    #[test]
    fn command_errors_carry_their_cause_once() {
        let msg = |e: CommandError| ApiError::from(e).0.message;
        let gone = || io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(
            msg(CommandError::Spawn {
                program: "bash".into(),
                source: io::Error::other("out of pids"),
            }),
            "cannot start \"bash\": out of pids"
        );
        let program = msg(CommandError::Program {
            program: "nope".into(),
            source: gone(),
        });
        assert_eq!(program, format!("cannot run \"nope\": {}", gone()));
        assert_eq!(
            msg(CommandError::NotPty(7)),
            CommandError::NotPty(7).to_string()
        );
    }
}
