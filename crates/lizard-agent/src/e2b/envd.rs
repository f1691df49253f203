//! E2B's envd over the agent's processes and files: the Connect-protocol JSON services
//! `process.Process` (`Start`, `Connect`, `List`, `SendSignal`, `SendInput`, `CloseStdin`,
//! `Update`) and `filesystem.Filesystem` (`Stat`, `ListDir`, `MakeDir`, `Move`, `Remove`), and the
//! HTTP routes `GET|POST /files`, `GET /health`, `GET /envs`.
//!
//! Streams (`Start`, `Connect`) answer `200 application/connect+json`: `start{pid}` first, output as
//! base64 `data` events, exactly one `end`, keepalives while quiet, and the end-of-stream envelope.
//! `Connect-Timeout-Ms` bounds the process's life (as envd does; the SDKs send 60 s by default, 0
//! for none): a process stopped by it ends the stream with `deadline_exceeded` instead of `end`.
//! A client that leaves only detaches; the process runs on (reattach with `Connect`).
//! Unary errors are a Connect `{code, message}` with the code's HTTP status (`not_found`,
//! `already_exists`, … which the SDKs branch on).
//!
//! Watching: `WatchDir` streams events (after a `start`); `CreateWatcher` keeps a watcher whose events
//! collect (at most [`MAX_POLLED_EVENTS`], oldest dropped) until `GetWatcherEvents` takes them, and
//! `RemoveWatcher` ends it; both ride on `crate::files`'s inotify watcher. With `includeEntry`
//! (envd 0.6.3) create, write and chmod events carry the entry as it is when the event is sent; a
//! directory on a network file system is watched only with `allowNetworkMounts` (0.6.4).
//!
//! File metadata (envd 0.6.2): `POST /files` stores its `X-Metadata-<key>` headers (keys
//! lowercased, envd's limits: `lizard_proto::e2b::envd::validate_metadata`) on every file it
//! writes, as `user.e2b.<key>` extended attributes (`crate::files::metadata`), replacing what the
//! file had; every `EntryInfo` (`Stat`, `ListDir`, `MakeDir`, `Move`, watch entries) reports them.
//!
//! Not here: `StreamInput` (client streaming), signed download URLs. Users: `user` (the default) and `root` (the sandbox's own root, see
//! `crate::users`: processes run as it, file operations act as it, relative paths resolve against
//! `/root`); any other name is refused with `permission_denied`.

use crate::commands::Launch;
use crate::files::{self, FilesError};
use crate::procs::{CommandError, Item, Proc, Processes, Stream, Subscription};
use crate::users::{files_as, RunAs};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures_util::{StreamExt, TryStreamExt};
use lizard_proto::e2b::envd::{self as wire, ConnectError, EndStream, ProcessEvent};
use lizard_proto::{CommandEnd, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

/// Keepalive interval when the client does not ask for one (`Keepalive-Ping-Interval`, seconds).
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);
/// Largest process lifetime accepted through `Connect-Timeout-Ms` (one day).
const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// Events a polled watcher keeps for `GetWatcherEvents`.
const MAX_POLLED_EVENTS: usize = 10_000;
/// Polled watchers per agent.
const MAX_WATCHERS: usize = 256;

struct Envd {
    procs: Arc<Processes>,
    home: PathBuf,
    watchers: std::sync::Mutex<std::collections::HashMap<String, PolledWatcher>>,
}

/// A `CreateWatcher` watcher: a task collecting events until removed.
struct PolledWatcher {
    events: Arc<std::sync::Mutex<std::collections::VecDeque<wire::FilesystemEvent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PolledWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type St = State<Arc<Envd>>;

pub fn routes<S: Clone + Send + Sync + 'static>(procs: Arc<Processes>, home: PathBuf) -> Router<S> {
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .route("/envs", get(envs))
        .route(
            "/files",
            get(read_file)
                .post(write_files)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/process.Process/Start", post(start))
        .route("/process.Process/Connect", post(connect))
        .route("/process.Process/List", post(list))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/Update", post(update))
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/filesystem.Filesystem/ListDir", post(list_dir))
        .route("/filesystem.Filesystem/MakeDir", post(make_dir))
        .route("/filesystem.Filesystem/Move", post(move_entry))
        .route("/filesystem.Filesystem/Remove", post(remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch_dir))
        .route("/filesystem.Filesystem/CreateWatcher", post(create_watcher))
        .route(
            "/filesystem.Filesystem/GetWatcherEvents",
            post(get_watcher_events),
        )
        .route("/filesystem.Filesystem/RemoveWatcher", post(remove_watcher))
        .fallback(unimplemented)
        .with_state(Arc::new(Envd {
            procs,
            home,
            watchers: Default::default(),
        }))
}

// ---- errors ----

/// A unary Connect failure.
pub struct RpcError(ConnectError);

impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0)).into_response()
    }
}

/// An error of a server-streaming call (`Process.Start`, `Process.Connect`, `Filesystem.WatchDir`).
/// The Connect protocol answers a stream with HTTP 200 and puts the error in its end-of-stream
/// message; a client maps any other status to `internal` (E2B's JS SDK then says "[internal] HTTP
/// 400" instead of the error's own code and message).
struct StreamError(RpcError);

impl<E: Into<RpcError>> From<E> for StreamError {
    fn from(e: E) -> Self {
        StreamError(e.into())
    }
}

impl IntoResponse for StreamError {
    fn into_response(self) -> Response {
        let body = EndStream {
            error: Some(self.0 .0),
        }
        .envelope();
        let mut r = Response::new(Body::from(body));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(wire::CONNECT_STREAM_JSON),
        );
        r
    }
}

fn rpc(code: &str, message: impl Into<String>) -> RpcError {
    RpcError(ConnectError::new(code, message))
}

fn connect_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::UnsupportedMediaType
        | ErrorCode::InvalidDockerfile => "invalid_argument",
        ErrorCode::Unauthenticated => "unauthenticated",
        ErrorCode::NotFound => "not_found",
        ErrorCode::PermissionDenied => "permission_denied",
        ErrorCode::Conflict => "already_exists",
        ErrorCode::VolumeInUse | ErrorCode::TemplateInUse | ErrorCode::BuildFailed => {
            "failed_precondition"
        }
        ErrorCode::PayloadTooLarge | ErrorCode::RateLimited | ErrorCode::InsufficientStorage => {
            "resource_exhausted"
        }
        ErrorCode::Unavailable => "unavailable",
        ErrorCode::Unsupported => "unimplemented",
        ErrorCode::Internal => "internal",
    }
}

impl From<lizard_http::api::ApiError> for RpcError {
    fn from(e: lizard_http::api::ApiError) -> Self {
        rpc(connect_code(e.0.code), e.0.message)
    }
}

impl From<FilesError> for RpcError {
    fn from(e: FilesError) -> Self {
        let not_dir = matches!(e, FilesError::NotADirectory(_));
        let mut r = RpcError::from(lizard_http::api::ApiError::from(e));
        if not_dir {
            r.0.code = "invalid_argument".into();
        }
        r
    }
}

impl From<CommandError> for RpcError {
    fn from(e: CommandError) -> Self {
        let exited = matches!(e, CommandError::Exited(_) | CommandError::StdinClosed(_));
        let mut r = RpcError::from(lizard_http::api::ApiError::from(e));
        if exited {
            r.0.code = "failed_precondition".into();
        }
        r
    }
}

async fn unimplemented(req: Request) -> RpcError {
    rpc(
        "unimplemented",
        format!("{} is not implemented by Lizard's envd", req.uri().path()),
    )
}

/// A unary request's JSON message (Connect sends `application/json`; the type is not enforced).
struct Msg<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Msg<T> {
    type Rejection = RpcError;
    async fn from_request(req: Request, state: &S) -> Result<Self, RpcError> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| rpc("invalid_argument", e.body_text()))?;
        let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        serde_json::from_slice(body)
            .map(Msg)
            .map_err(|e| rpc("invalid_argument", format!("invalid message: {e}")))
    }
}

/// A streaming request's one message, from its envelope.
struct StreamMsg<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StreamMsg<T> {
    type Rejection = RpcError;
    async fn from_request(req: Request, state: &S) -> Result<Self, RpcError> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| rpc("invalid_argument", e.body_text()))?;
        let envs = wire::envelopes(&body).map_err(|e| rpc("invalid_argument", e.to_string()))?;
        let Some((_, msg)) = envs
            .into_iter()
            .find(|(f, _)| f & wire::FLAG_END_STREAM == 0)
        else {
            return Err(rpc("invalid_argument", "the request has no message"));
        };
        serde_json::from_slice(msg)
            .map(StreamMsg)
            .map_err(|e| rpc("invalid_argument", format!("invalid message: {e}")))
    }
}

/// The user named by `Authorization: Basic base64("<user>:")`: `user` (also when there is none)
/// or `root`.
fn check_user(headers: &HeaderMap) -> Result<RunAs, RpcError> {
    let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(RunAs::User);
    };
    let Some(b64) = v.strip_prefix("Basic ") else {
        return Ok(RunAs::User);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| rpc("invalid_argument", "malformed Basic authorization"))?;
    let text = String::from_utf8_lossy(&decoded);
    let user = text.split(':').next().unwrap_or("");
    check_user_name(user)
}

fn check_user_name(user: &str) -> Result<RunAs, RpcError> {
    RunAs::parse(Some(user)).map_err(|m| rpc("permission_denied", m))
}

/// Who a file operation acts as (`check_user` of its `Authorization`) and where its relative paths
/// resolve (that user's home).
struct Fs {
    who: RunAs,
    base: PathBuf,
}

impl axum::extract::FromRequestParts<Arc<Envd>> for Fs {
    type Rejection = RpcError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &Arc<Envd>,
    ) -> Result<Fs, RpcError> {
        let who = check_user(&parts.headers)?;
        Ok(Fs {
            who,
            base: st.base(who),
        })
    }
}

impl Envd {
    /// Where relative paths of `who`'s file operations resolve: its home.
    fn base(&self, who: RunAs) -> PathBuf {
        match who {
            RunAs::Root if crate::users::sandbox_user().is_some() => {
                PathBuf::from(crate::users::ROOT_HOME)
            }
            _ => self.home.clone(),
        }
    }
}

// ---- process ----

fn timeout_ms(headers: &HeaderMap) -> Result<Option<u64>, RpcError> {
    match headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
    {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(t) => Ok(Some(t.min(MAX_TIMEOUT_MS))),
            Err(_) => Err(rpc(
                "invalid_argument",
                "Connect-Timeout-Ms is not a number",
            )),
        },
    }
}

fn keepalive(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.min(3600)))
        .unwrap_or(DEFAULT_KEEPALIVE)
}

async fn start(
    State(st): St,
    headers: HeaderMap,
    StreamMsg(req): StreamMsg<wire::StartRequest>,
) -> Result<Response, StreamError> {
    let who = check_user(&headers)?;
    let p = req.process;
    if p.cmd.is_empty() {
        return Err(rpc("invalid_argument", "process.cmd is empty").into());
    }
    let mut argv = vec![p.cmd];
    argv.extend(p.args);
    let mut spec = Launch {
        cmd: None,
        argv: Some(argv),
        cwd: p.cwd.filter(|c| !c.is_empty()),
        env: p.envs,
        timeout_ms: timeout_ms(&headers)?,
        user: Some(match who {
            RunAs::Root => crate::users::ROOT_NAME.into(),
            RunAs::User => crate::users::SANDBOX_USER_NAME.into(),
        }),
        tag: req.tag,
    }
    .into_spawn(&st.procs, None)?;
    spec.stdin = req.stdin.unwrap_or(true);
    if let Some(size) = req.pty.map(|p| p.size.unwrap_or_default()) {
        let clamp = |v: u32, d: u16| if v == 0 { d } else { v.min(4096) as u16 };
        spec.pty = Some(lizard_proto::PtySize {
            cols: clamp(size.cols, 80),
            rows: clamp(size.rows, 24),
        });
    }
    let (_, sub) = st.procs.spawn(spec, true, true)?;
    let sub = sub.ok_or_else(|| rpc("internal", "the process has no reader"))?;
    Ok(stream_process(sub, keepalive(&headers)))
}

fn select(procs: &Processes, s: &wire::ProcessSelector) -> Result<Arc<Proc>, RpcError> {
    if let Some(pid) = s.pid {
        return Ok(procs.get(pid)?);
    }
    if let Some(tag) = &s.tag {
        let info = procs
            .list()
            .into_iter()
            .find(|p| p.tag.as_deref() == Some(tag.as_str()))
            .ok_or_else(|| rpc("not_found", format!("no running process tagged {tag:?}")))?;
        return Ok(procs.get(info.pid)?);
    }
    Err(rpc("invalid_argument", "select a process by pid or tag"))
}

async fn connect(
    State(st): St,
    headers: HeaderMap,
    StreamMsg(req): StreamMsg<wire::SelectRequest>,
) -> Result<Response, StreamError> {
    let proc = select(&st.procs, &req.process)?;
    if !proc.is_running() {
        return Err(rpc("not_found", format!("process {} has exited", proc.pid)).into());
    }
    Ok(stream_process(proc.subscribe(true), keepalive(&headers)))
}

/// Go's `ProcessState.String()` wording, which E2B's `end.status` carries.
fn end_event(end: &CommandEnd) -> wire::EndEvent {
    let (exit_code, status) = match (&end.exit_code, &end.signal) {
        (Some(c), _) => (*c, format!("exit status {c}")),
        (None, Some(sig)) => {
            let name = match sig.as_str() {
                "SIGKILL" => "killed",
                "SIGTERM" => "terminated",
                "SIGINT" => "interrupt",
                "SIGHUP" => "hangup",
                other => other,
            };
            (-1, format!("signal: {name}"))
        }
        (None, None) => (-1, "unknown".to_string()),
    };
    wire::EndEvent {
        exit_code,
        exited: end.exit_code.is_some(),
        status,
        error: None,
    }
}

/// A process's output as a Connect stream.
fn stream_process(mut sub: Subscription, keepalive: Duration) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let pty = sub.is_pty();
    tokio::spawn(async move {
        let send = |b: Vec<u8>| tx.send(Bytes::from(b));
        if send(ProcessEvent::Start { pid: sub.pid() }.envelope())
            .await
            .is_err()
        {
            return;
        }
        loop {
            let items = tokio::select! {
                items = sub.next_items() => items,
                _ = tokio::time::sleep(keepalive) => {
                    if send(ProcessEvent::Keepalive {}.envelope()).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let Some(items) = items else {
                let _ = send(EndStream::default().envelope()).await;
                return;
            };
            for item in items {
                let out = match item {
                    Item::Output(stream, data) => {
                        let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
                        let o = match (pty, stream) {
                            (true, _) => wire::Output::Pty(b64),
                            (false, Stream::Stdout) => wire::Output::Stdout(b64),
                            (false, Stream::Stderr) => wire::Output::Stderr(b64),
                        };
                        ProcessEvent::Data(o).envelope()
                    }
                    Item::End(end) if end.timed_out => {
                        let mut out = Vec::new();
                        out.extend(
                            EndStream {
                                error: Some(ConnectError::new(
                                    "deadline_exceeded",
                                    "the process ran past its timeout and was killed",
                                )),
                            }
                            .envelope(),
                        );
                        let _ = send(out).await;
                        return;
                    }
                    Item::End(end) => {
                        let mut out = ProcessEvent::End(end_event(&end)).envelope();
                        out.extend(EndStream::default().envelope());
                        let _ = send(out).await;
                        return;
                    }
                };
                if send(out).await.is_err() {
                    return;
                }
            }
        }
    });
    connect_stream(rx)
}

async fn list(State(st): St) -> Json<wire::ListResponse> {
    let processes = st
        .procs
        .list()
        .into_iter()
        .map(|p| {
            let mut argv = p.argv.into_iter();
            wire::ListedProcess {
                config: wire::ProcessConfig {
                    cmd: argv.next().unwrap_or_default(),
                    args: argv.collect(),
                    envs: p.env,
                    cwd: Some(p.cwd),
                },
                pid: p.pid,
                tag: p.tag,
            }
        })
        .collect();
    Json(wire::ListResponse { processes })
}

async fn send_signal(
    State(st): St,
    Msg(req): Msg<wire::SendSignalRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    let name = req.signal.signal_name().ok_or_else(|| {
        rpc(
            "invalid_argument",
            "unknown signal: use SIGNAL_SIGTERM or SIGNAL_SIGKILL",
        )
    })?;
    let sig = crate::commands::parse_signal(name)?;
    select(&st.procs, &req.process)?.signal(sig)?;
    Ok(Json(serde_json::json!({})))
}

fn decode_b64(s: &str) -> Result<Vec<u8>, RpcError> {
    base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(|e| {
            rpc(
                "invalid_argument",
                format!("input is not valid base64: {e}"),
            )
        })
}

async fn send_input(
    State(st): St,
    Msg(req): Msg<wire::SendInputRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    let data = match (&req.input.stdin, &req.input.pty) {
        (Some(s), _) | (None, Some(s)) => decode_b64(s)?,
        (None, None) => Vec::new(),
    };
    select(&st.procs, &req.process)?.write_input(&data).await?;
    Ok(Json(serde_json::json!({})))
}

async fn close_stdin(
    State(st): St,
    Msg(req): Msg<wire::SelectRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    select(&st.procs, &req.process)?.close_input().await?;
    Ok(Json(serde_json::json!({})))
}

async fn update(
    State(st): St,
    Msg(req): Msg<wire::UpdateRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    let proc = select(&st.procs, &req.process)?;
    if let Some(size) = req.pty.and_then(|p| p.size) {
        if size.cols == 0 || size.rows == 0 || size.cols > 4096 || size.rows > 4096 {
            return Err(rpc("invalid_argument", "cols and rows must be 1..4096"));
        }
        proc.resize(lizard_proto::PtySize {
            cols: size.cols as u16,
            rows: size.rows as u16,
        })?;
    }
    Ok(Json(serde_json::json!({})))
}

// ---- filesystem ----

fn entry(e: &lizard_proto::EntryInfo) -> wire::EntryInfo {
    e.into()
}

/// `entries` with their files' metadata (read as the request's user: call inside its
/// `files_as`).
async fn with_metadata(mut entries: Vec<wire::EntryInfo>) -> Vec<wire::EntryInfo> {
    let paths = entries.iter().map(|e| e.path.clone()).collect();
    for (e, m) in entries
        .iter_mut()
        .zip(files::metadata::read_all(paths).await)
    {
        e.metadata = m;
    }
    entries
}

/// [`entry`] with its metadata.
async fn entry_with_metadata(e: &lizard_proto::EntryInfo) -> wire::EntryInfo {
    let mut out = with_metadata(vec![entry(e)]).await;
    out.pop().unwrap_or_else(|| entry(e))
}

/// [`entry`] as envd reports a symlink: the type of what it leads to and its absolute target
/// (the link itself when it leads nowhere). Call inside the request's `files_as`.
async fn entry_followed(e: &lizard_proto::EntryInfo) -> wire::EntryInfo {
    if e.file_type != lizard_proto::FileType::Symlink {
        return entry(e);
    }
    let mut e = e.clone();
    if let Some((target, kind)) = files::followed(&e.path).await {
        e.file_type = kind;
        e.symlink_target = Some(target);
    }
    entry(&e)
}

async fn stat(
    Fs { who, base }: Fs,
    Msg(req): Msg<wire::PathRequest>,
) -> Result<Json<wire::EntryResponse>, RpcError> {
    let entry = files_as(who, async {
        let e = files::stat_path(&base, &req.path).await?;
        let e = entry_followed(&e).await;
        Ok::<_, FilesError>(with_metadata(vec![e.clone()]).await.pop().unwrap_or(e))
    })
    .await?;
    Ok(Json(wire::EntryResponse { entry }))
}

async fn list_dir(
    Fs { who, base }: Fs,
    Msg(req): Msg<wire::ListDirRequest>,
) -> Result<Json<wire::ListDirResponse>, RpcError> {
    let depth = req.depth.unwrap_or(1).max(1);
    let entries = files_as(who, async {
        let mut out = Vec::new();
        for e in files::list_dir(&base, &req.path, depth).await? {
            out.push(entry_followed(&e).await);
        }
        Ok::<_, FilesError>(with_metadata(out).await)
    })
    .await?;
    Ok(Json(wire::ListDirResponse { entries }))
}

async fn make_dir(
    Fs { who, base }: Fs,
    Msg(req): Msg<wire::PathRequest>,
) -> Result<Json<wire::EntryResponse>, RpcError> {
    let entry = files_as(who, async {
        let e = files::make_dir(&base, &req.path).await?;
        Ok::<_, FilesError>(entry_with_metadata(&e).await)
    })
    .await?;
    Ok(Json(wire::EntryResponse { entry }))
}

async fn move_entry(
    Fs { who, base }: Fs,
    Msg(req): Msg<wire::MoveRequest>,
) -> Result<Json<wire::EntryResponse>, RpcError> {
    let entry = files_as(who, async {
        let e = files::rename_path(&base, &req.source, &req.destination).await?;
        Ok::<_, FilesError>(entry_with_metadata(&e).await)
    })
    .await?;
    Ok(Json(wire::EntryResponse { entry }))
}

async fn remove(
    Fs { who, base }: Fs,
    Msg(req): Msg<wire::PathRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    match files_as(who, files::remove_path(&base, &req.path)).await {
        // envd removes like `rm -rf`: a path that is not there is already removed.
        Ok(()) | Err(FilesError::NotFound(_)) => Ok(Json(serde_json::json!({}))),
        Err(e) => Err(e.into()),
    }
}

/// envd watches directories only: a path that is not one is `invalid_argument`, as E2B's, and so
/// is one on a network file system unless `allowNetworkMounts` says otherwise.
async fn watched_dir(home: &std::path::Path, req: &wire::WatchDirRequest) -> Result<(), RpcError> {
    let path = &req.path;
    let e = files::stat_path(home, path).await?;
    if e.file_type != lizard_proto::FileType::Dir {
        return Err(rpc(
            "invalid_argument",
            format!("path {path} is not a directory"),
        ));
    }
    if !req.allow_network_mounts && files::on_network_fs(&e.path).await? {
        return Err(rpc(
            "invalid_argument",
            format!(
                "cannot watch path on network filesystem: {} (set allowNetworkMounts to watch it)",
                e.path
            ),
        ));
    }
    Ok(())
}

/// E2B's events of a batch; with `entries`, creates, writes and chmods carry the entry at their
/// path as it is now (as the sandbox user sees it; none when it is gone), as envd's do.
async fn fs_events(
    events: Vec<lizard_proto::FsEvent>,
    entries: Option<&std::path::Path>,
) -> Vec<wire::FilesystemEvent> {
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        let Some(event_type) = wire::EventType::from_lizard(e.event_type) else {
            continue;
        };
        let entry = match entries {
            Some(home) if event_type.carries_entry() => event_entry(home, &e.path).await,
            _ => None,
        };
        out.push(wire::FilesystemEvent {
            event_type,
            name: e.name,
            entry,
        });
    }
    out
}

/// The entry at `path` for a watch event, if it is still there.
async fn event_entry(home: &std::path::Path, path: &str) -> Option<Box<wire::EntryInfo>> {
    let e = files::stat_path(home, path).await.ok()?;
    let e = entry_followed(&e).await;
    with_metadata(vec![e]).await.pop().map(Box::new)
}

/// `WatchDir`: `start`, then events as they happen (keepalives while quiet) until the client leaves.
async fn watch_dir(
    State(st): St,
    headers: HeaderMap,
    StreamMsg(req): StreamMsg<wire::WatchDirRequest>,
) -> Result<Response, StreamError> {
    // Watching acts as the sandbox user whoever asks (what it cannot read is not watched).
    check_user(&headers)?;
    watched_dir(&st.home, &req).await?;
    let (_, mut w) = files::open_watch(&st.home, &req.path, req.recursive).await?;
    let keepalive = keepalive(&headers);
    let entries = req.include_entry.then(|| st.home.clone());
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let msg = |m: wire::WatchDirResponse| {
        Bytes::from(wire::envelope(
            0,
            &serde_json::to_vec(&m).unwrap_or_default(),
        ))
    };
    tokio::spawn(async move {
        if tx
            .send(msg(wire::WatchDirResponse::Start {}))
            .await
            .is_err()
        {
            return;
        }
        loop {
            let batch = tokio::select! {
                b = w.next() => b,
                _ = tokio::time::sleep(keepalive) => {
                    if tx.send(msg(wire::WatchDirResponse::Keepalive {})).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let Some(batch) = batch else {
                let _ = tx.send(Bytes::from(EndStream::default().envelope())).await;
                return;
            };
            for e in fs_events(batch, entries.as_deref()).await {
                if tx
                    .send(msg(wire::WatchDirResponse::Filesystem(e)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    Ok(connect_stream(rx))
}

async fn create_watcher(
    State(st): St,
    headers: HeaderMap,
    Msg(req): Msg<wire::WatchDirRequest>,
) -> Result<Json<wire::CreateWatcherResponse>, RpcError> {
    check_user(&headers)?;
    if st.watchers.lock().map(|m| m.len()).unwrap_or(0) >= MAX_WATCHERS {
        return Err(rpc(
            "resource_exhausted",
            format!("at most {MAX_WATCHERS} watchers: remove some first"),
        ));
    }
    watched_dir(&st.home, &req).await?;
    let (_, mut w) = files::open_watch(&st.home, &req.path, req.recursive).await?;
    let entries = req.include_entry.then(|| st.home.clone());
    let events: Arc<std::sync::Mutex<std::collections::VecDeque<wire::FilesystemEvent>>> =
        Default::default();
    let sink = events.clone();
    let task = tokio::spawn(async move {
        while let Some(batch) = w.next().await {
            let batch = fs_events(batch, entries.as_deref()).await;
            let Ok(mut q) = sink.lock() else { return };
            for e in batch {
                if q.len() == MAX_POLLED_EVENTS {
                    q.pop_front();
                }
                q.push_back(e);
            }
        }
    });
    let id = crate::ids::new_id();
    if let Ok(mut m) = st.watchers.lock() {
        m.insert(id.clone(), PolledWatcher { events, task });
    }
    Ok(Json(wire::CreateWatcherResponse { watcher_id: id }))
}

async fn get_watcher_events(
    State(st): St,
    Msg(req): Msg<wire::WatcherRequest>,
) -> Result<Json<wire::GetWatcherEventsResponse>, RpcError> {
    let events = st
        .watchers
        .lock()
        .ok()
        .and_then(|m| {
            m.get(&req.watcher_id)
                .and_then(|w| w.events.lock().ok().map(|mut q| q.drain(..).collect()))
        })
        .ok_or_else(|| rpc("not_found", format!("no watcher {}", req.watcher_id)))?;
    Ok(Json(wire::GetWatcherEventsResponse { events }))
}

async fn remove_watcher(
    State(st): St,
    Msg(req): Msg<wire::WatcherRequest>,
) -> Result<Json<serde_json::Value>, RpcError> {
    let removed = st
        .watchers
        .lock()
        .ok()
        .and_then(|mut m| m.remove(&req.watcher_id));
    match removed {
        Some(_) => Ok(Json(serde_json::json!({}))),
        None => Err(rpc("not_found", format!("no watcher {}", req.watcher_id))),
    }
}

// ---- HTTP ----

/// envd's HTTP error body: `{"code": <status>, "message": …}`.
#[derive(Debug)]
struct HttpError(StatusCode, String);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.0.as_u16(), "message": self.1});
        (self.0, Json(body)).into_response()
    }
}

impl From<FilesError> for HttpError {
    fn from(e: FilesError) -> Self {
        let api = lizard_http::api::ApiError::from(e);
        HttpError(
            StatusCode::from_u16(api.0.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            api.0.message,
        )
    }
}

#[derive(Debug, Deserialize)]
struct FilesQuery {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    username: Option<String>,
}

fn check_query_user(q: &FilesQuery) -> Result<RunAs, HttpError> {
    match q.username.as_deref() {
        None | Some("") => Ok(RunAs::User),
        Some(u) => check_user_name(u).map_err(|e| HttpError(StatusCode::BAD_REQUEST, e.0.message)),
    }
}

async fn read_file(
    State(st): St,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    let Query(q) = q.map_err(|e| HttpError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let who = check_query_user(&q)?;
    let path = q
        .path
        .ok_or_else(|| HttpError(StatusCode::BAD_REQUEST, "missing ?path=".into()))?;
    Ok(files_as(who, files::read_file(&st.base(who), &path)).await?)
}

/// A written file as `POST /files` answers it, with the metadata stored on it (`None`: none).
fn written(e: &lizard_proto::EntryInfo, metadata: Option<&Metadata>) -> wire::WrittenFile {
    wire::WrittenFile {
        path: e.path.clone(),
        name: e.name.clone(),
        file_type: "file".into(),
        metadata: metadata.cloned().unwrap_or_default(),
    }
}

type Metadata = std::collections::BTreeMap<String, String>;

/// The upload's metadata from its `X-Metadata-*` headers (envd's checks; a refusal is a 400).
fn upload_metadata(headers: &HeaderMap) -> Result<Metadata, HttpError> {
    wire::metadata_from_headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
        .map_err(|m| HttpError(StatusCode::BAD_REQUEST, m))
}

/// `POST /files`: multipart (part `file`, its filename the path when `?path=` is absent) or a raw
/// `application/octet-stream` body for `?path=`.
async fn write_files(
    State(st): St,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Result<Json<Vec<wire::WrittenFile>>, HttpError> {
    let Query(q) = q.map_err(|e| HttpError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let who = check_query_user(&q)?;
    let metadata = match upload_metadata(req.headers()) {
        Ok(m) => m,
        Err(e) => {
            lizard_http::api::drain(&mut req.into_body().into_data_stream()).await;
            return Err(e);
        }
    };
    let is_multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    if !is_multipart {
        let path = q.path.ok_or_else(|| {
            HttpError(
                StatusCode::BAD_REQUEST,
                "missing ?path= for a raw upload".into(),
            )
        })?;
        let gzip = req
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase());
        let mut body = req.into_body().into_data_stream();
        let base = st.base(who);
        let result = match gzip.as_deref() {
            None | Some("identity") => {
                let write = files::write_file_with(&base, &path, &mut body, Some(&metadata));
                files_as(who, write).await
            }
            // E2B's SDKs' `write(…, { gzip: true })`: the file is what the body inflates to.
            Some("gzip") => {
                let inflated = gunzip(&mut body);
                let write = files::write_file_with(&base, &path, inflated, Some(&metadata));
                files_as(who, write).await
            }
            Some(other) => {
                lizard_http::api::drain(&mut body).await;
                return Err(HttpError(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("Content-Encoding {other:?} is not supported (gzip and identity are)"),
                ));
            }
        };
        if result.is_err() {
            lizard_http::api::drain(&mut body).await;
        }
        let (e, stored) = result?;
        return Ok(Json(vec![written(&e, stored.then_some(&metadata))]));
    }
    // The body is shared so that whatever the multipart parser leaves unread (the epilogue, the
    // chunked terminator) is drained at the end: an HTTP/1 server that answers before reading its
    // request to the end closes the connection, and the relaying server may then see a broken pipe
    // instead of the answer.
    let (parts, body) = req.into_parts();
    let shared = Arc::new(std::sync::Mutex::new(body.into_data_stream()));
    let share = |s: Arc<std::sync::Mutex<axum::body::BodyDataStream>>| {
        futures_util::stream::poll_fn(move |cx| {
            s.lock()
                .map(|mut s| s.poll_next_unpin(cx))
                .unwrap_or(std::task::Poll::Ready(None))
        })
    };
    let req = Request::from_parts(parts, Body::from_stream(share(shared.clone())));
    let result = files_as(who, write_parts(&st, &q, who, req, &metadata)).await;
    lizard_http::api::drain(&mut Box::pin(share(shared))).await;
    result
}

/// `body`, a gzip stream, inflated chunk by chunk as it arrives (nothing held but the chunk at
/// hand: the file's size is bounded by the sandbox's disk, like any upload's). A stream that is
/// not gzip, or is cut short, ends in an error.
fn gunzip<'a, S>(
    body: S,
) -> impl futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin + 'a
where
    S: futures_util::Stream<Item = Result<Bytes, axum::Error>> + Unpin + 'a,
{
    use std::io::Write as _;
    let inflate = |dec: &mut flate2::write::GzDecoder<Vec<u8>>, chunk: Option<&[u8]>| {
        match chunk {
            Some(c) => dec.write_all(c),
            None => dec.try_finish(),
        }
        .map(|()| Bytes::from(std::mem::take(dec.get_mut())))
        .map_err(|e| axum::Error::new(std::io::Error::new(e.kind(), format!("gzip body: {e}"))))
    };
    let state = (body, Some(flate2::write::GzDecoder::new(Vec::new())));
    Box::pin(futures_util::stream::unfold(
        state,
        move |(mut body, dec)| async move {
            let mut dec = dec?;
            let out = match body.next().await {
                Some(Ok(chunk)) => match inflate(&mut dec, Some(&chunk)) {
                    Ok(b) => return Some((Ok(b), (body, Some(dec)))),
                    Err(e) => Err(e),
                },
                Some(Err(e)) => Err(e),
                None => inflate(&mut dec, None),
            };
            Some((out, (body, None)))
        },
    ))
}

async fn write_parts(
    st: &Envd,
    q: &FilesQuery,
    who: RunAs,
    req: Request,
    metadata: &Metadata,
) -> Result<Json<Vec<wire::WrittenFile>>, HttpError> {
    let mut mp = Multipart::from_request(req, &())
        .await
        .map_err(|e| HttpError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let mut out = Vec::new();
    loop {
        let field = match mp.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return Err(HttpError(StatusCode::BAD_REQUEST, e.body_text())),
        };
        let target = match (&q.path, field.file_name()) {
            (Some(p), _) if out.is_empty() => p.clone(),
            (_, Some(f)) if !f.is_empty() => f.to_string(),
            _ => {
                return Err(HttpError(
                    StatusCode::BAD_REQUEST,
                    "each file part needs a filename (its path) when ?path= is absent".into(),
                ))
            }
        };
        let body = field.map_err(axum::Error::new).into_stream();
        let base = st.base(who);
        let (e, stored) =
            files::write_file_with(&base, &target, Box::pin(body), Some(metadata)).await?;
        out.push(written(&e, stored.then_some(metadata)));
    }
    if out.is_empty() {
        return Err(HttpError(
            StatusCode::BAD_REQUEST,
            "the multipart body has no file part".into(),
        ));
    }
    Ok(Json(out))
}

/// The sandbox's environment as processes inherit it (Lizard's own variables left out).
async fn envs() -> Json<std::collections::BTreeMap<String, String>> {
    Json(
        std::env::vars()
            .filter(|(k, _)| !k.starts_with("LIZARD_"))
            .collect(),
    )
}

/// A Connect server stream (`application/connect+json`) of the frames `rx` yields.
fn connect_stream(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Response {
    let mut r = Response::new(Body::from_stream(
        ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>),
    ));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(wire::CONNECT_STREAM_JSON),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn inflate(chunks: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
        let body = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, axum::Error>(Bytes::from(c))),
        );
        let mut out = Vec::new();
        let mut s = gunzip(body);
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c.map_err(|e| e.to_string())?);
        }
        Ok(out)
    }

    #[test]
    fn upload_metadata_comes_from_x_metadata_headers() {
        let mut h = HeaderMap::new();
        h.insert("x-metadata-Author", HeaderValue::from_static("me"));
        h.append("x-metadata-author", HeaderValue::from_static("not me"));
        h.insert("x-access-token", HeaderValue::from_static("t"));
        assert_eq!(
            upload_metadata(&h).unwrap(),
            Metadata::from([("author".to_string(), "me".to_string())])
        );
        h.insert(
            "x-metadata-big",
            HeaderValue::from_str(&"v".repeat(5000)).unwrap(),
        );
        let Err(HttpError(status, message)) = upload_metadata(&h) else {
            panic!("5000 bytes of metadata were accepted");
        };
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(message.contains("total metadata size"), "{message}");
        let r = HttpError(status, message).into_response();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        // The /files answer carries what was stored, and nothing when nothing was.
        let e = lizard_proto::EntryInfo {
            name: "a".into(),
            path: "/a".into(),
            file_type: lizard_proto::FileType::File,
            size: 0,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_ms: 0,
            symlink_target: None,
        };
        let m = Metadata::from([("k".to_string(), "v".to_string())]);
        assert_eq!(written(&e, Some(&m)).metadata, m);
        assert!(written(&e, None).metadata.is_empty());
    }

    #[tokio::test]
    async fn watch_events_carry_entries_when_asked() {
        use lizard_proto::{FsEvent, FsEventType};
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let m = Metadata::from([("k".to_string(), "v".to_string())]);
        let body = futures_util::stream::iter(vec![Ok::<_, axum::Error>(Bytes::from("x"))]);
        let (_, stored) = files::write_file_with(home, "f.txt", body, Some(&m))
            .await
            .unwrap();
        let ev = |t, name: &str| FsEvent {
            event_type: t,
            path: home.join(name).display().to_string(),
            name: name.into(),
            is_dir: false,
        };
        let batch = || {
            vec![
                ev(FsEventType::Start, ""),
                ev(FsEventType::Create, "f.txt"),
                ev(FsEventType::Write, "f.txt"),
                ev(FsEventType::Remove, "f.txt"),
                ev(FsEventType::Create, "gone.txt"),
            ]
        };
        let plain = fs_events(batch(), None).await;
        assert_eq!(plain.len(), 4, "no start event");
        assert!(plain.iter().all(|e| e.entry.is_none()));
        let full = fs_events(batch(), Some(home)).await;
        let entry = full[0].entry.as_ref().expect("a create carries its entry");
        assert_eq!(entry.path, home.join("f.txt").display().to_string());
        assert_eq!(entry.file_type, wire::FileType::File);
        if stored {
            assert_eq!(entry.metadata, m);
        }
        assert!(full[1].entry.is_some(), "a write too");
        assert!(full[2].entry.is_none(), "a remove never does");
        assert!(full[3].entry.is_none(), "nor an entry that is gone");
    }

    #[tokio::test]
    async fn gzip_bodies_inflate_chunk_by_chunk_and_bad_ones_fail() {
        use std::io::Write as _;
        let text = b"sent compressed ".repeat(1000);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&text).unwrap();
        let gz = enc.finish().unwrap();
        // In one piece, and split at every 7 bytes.
        assert_eq!(inflate(vec![gz.clone()]).await.unwrap(), text);
        assert_eq!(
            inflate(gz.chunks(7).map(<[u8]>::to_vec).collect())
                .await
                .unwrap(),
            text
        );
        // Not gzip, or cut short: an error, not a file of whatever came out.
        let e = inflate(vec![b"plain text".to_vec()]).await.unwrap_err();
        assert!(e.contains("gzip body"), "{e}");
        assert!(inflate(vec![gz[..gz.len() / 2].to_vec()]).await.is_err());
    }
}
