//! Terminals: processes on a pseudo-terminal, for clients that drive interactive and full-screen
//! programs (shells, editors, REPLs, TUIs).
//!
//! `POST /pty {cols, rows, cmd? | argv?, cwd?, env?}` starts the program (an interactive `bash -i`
//! by default; not a login shell, so the sandbox's `PATH` stays) as the leader of a new session
//! whose controlling terminal is the PTY. Its output is the same event stream as a command's, with
//! the terminal's bytes as `stdout` events that always carry `data_b64`. Input goes to
//! `POST /pty/{pid}/input`, size changes to `POST /pty/{pid}/resize` (the program gets SIGWINCH).
//! Terminals live in the command process table (`crate::procs`): list, reattach
//! (`GET /commands/{pid}/stream`) and kill (`POST /commands/{pid}/signal`) work the same way, and a
//! client that disconnects leaves the terminal running.
//!
//! `GET /pty/ws?cols&rows&cmd&cwd&user` (a WebSocket, subprotocol `lizard.pty.v1`) starts the same
//! terminal and drives it over one socket: binary messages are its bytes both ways, text messages
//! JSON control (`lizard_proto::PtyWsServerMessage`: `start`, `end`, `error`;
//! `lizard_proto::PtyWsClientMessage`: `resize`, `input`, `signal`). The socket's end is the
//! terminal's hang-up: the process's group is killed.
//!
//! Not here: terminal emulation (the client renders the bytes), or a `TERM` other than the one
//! asked for (`xterm-256color` by default).

use crate::commands::{input_bytes, parse_pid, start_and_respond, Launch};
use crate::procs::{CommandError, Processes};
use crate::procs::{Item, Proc, Subscription};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use lizard_http::api::{ApiError, ApiJson, ApiQuery};
use lizard_proto::{
    ErrorCode, ProcessInputRequest, PtySize, PtyWsClientMessage, PtyWsQuery, PtyWsServerMessage,
    ResizePtyRequest, StartPtyRequest, PTY_WS_PROTOCOL,
};
use std::sync::Arc;

/// Largest terminal dimension accepted.
const MAX_CELLS: u16 = 4096;
/// `TERM` of a terminal whose request does not set one.
const DEFAULT_TERM: &str = "xterm-256color";
/// Largest message a terminal's WebSocket takes from its client (keystrokes, pastes, control).
const MAX_WS_MESSAGE: usize = 1 << 20;

type St = State<Arc<Processes>>;

/// The `/pty` routes.
pub fn routes<S: Clone + Send + Sync + 'static>(procs: Arc<Processes>) -> Router<S> {
    Router::new()
        .route("/pty", post(start))
        .route("/pty/{pid}/input", post(input))
        .route("/pty/{pid}/resize", post(resize))
        .route("/pty/ws", get(websocket))
        .with_state(procs)
}

fn check_size(cols: u16, rows: u16) -> Result<PtySize, CommandError> {
    if cols == 0 || rows == 0 || cols > MAX_CELLS || rows > MAX_CELLS {
        return Err(CommandError::Invalid(format!(
            "cols and rows must be between 1 and {MAX_CELLS}"
        )));
    }
    Ok(PtySize { cols, rows })
}

/// `POST /pty`.
async fn start(
    State(procs): St,
    headers: HeaderMap,
    ApiJson(req): ApiJson<StartPtyRequest>,
) -> Result<Response, ApiError> {
    let background = req.background;
    let spec = pty_spawn(&procs, req)?;
    start_and_respond(&procs, spec, background, true, &headers).await
}

/// What starting the terminal `req` asks for runs.
fn pty_spawn(
    procs: &Arc<Processes>,
    req: StartPtyRequest,
) -> Result<crate::procs::Spawn, CommandError> {
    let size = check_size(req.cols, req.rows)?;
    let mut env = req.env;
    env.entry("TERM".into())
        .or_insert_with(|| DEFAULT_TERM.into());
    let default = vec![procs.bash.display().to_string(), "-i".into()];
    let mut spec = Launch {
        cmd: req.cmd,
        argv: req.argv,
        cwd: req.cwd,
        env,
        timeout_ms: req.timeout_ms,
        user: req.user,
        tag: req.tag,
    }
    .into_spawn(procs, Some(default))?;
    spec.pty = Some(size);
    Ok(spec)
}

/// `GET /pty/ws`: a terminal on a WebSocket (see the module docs). The process starts before the
/// upgrade, so a bad request is a typed error; it is killed if the upgrade never completes.
async fn websocket(
    State(procs): St,
    ApiQuery(q): ApiQuery<PtyWsQuery>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = ws.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("GET /pty/ws is a WebSocket (subprotocol {PTY_WS_PROTOCOL}): {e}"),
        )
    })?;
    let spec = pty_spawn(
        &procs,
        StartPtyRequest {
            cols: q.cols.unwrap_or(80),
            rows: q.rows.unwrap_or(24),
            cmd: q.cmd,
            cwd: q.cwd,
            user: q.user,
            tag: Some("websocket".into()),
            ..Default::default()
        },
    )?;
    let (proc, sub) = procs.spawn(spec, true, false)?;
    let Some(sub) = sub else {
        return Err(ApiError::new(
            ErrorCode::Internal,
            "the terminal has no output stream",
        ));
    };
    let hangup = HangUp(proc.clone());
    Ok(ws
        .protocols([PTY_WS_PROTOCOL])
        .max_message_size(MAX_WS_MESSAGE)
        .on_upgrade(move |socket| async move {
            drive(socket, &proc, sub).await;
            drop(hangup);
        })
        .into_response())
}

/// Kills the terminal's group when dropped: the socket ended (or never opened).
struct HangUp(Arc<Proc>);

impl Drop for HangUp {
    fn drop(&mut self) {
        if self.0.is_running() {
            let _ = self.0.signal(lizard_jail::Signal::SIGKILL);
        }
    }
}

/// Pump the terminal's output to the socket and the socket's messages to the terminal, until
/// the process ends (then `end` and a close) or the client goes.
async fn drive(mut socket: WebSocket, proc: &Arc<Proc>, mut sub: Subscription) {
    let control =
        |m: &PtyWsServerMessage| Message::Text(serde_json::to_string(m).unwrap_or_default().into());
    if socket
        .send(control(&PtyWsServerMessage::Start { pid: proc.pid }))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            items = sub.next_items() => {
                let Some(items) = items else { return };
                for item in items {
                    let msg = match item {
                        Item::Output(_, data) => Message::Binary(data),
                        Item::End(end) => {
                            let _ = socket.send(control(&PtyWsServerMessage::End(end))).await;
                            let _ = socket
                                .send(Message::Close(Some(CloseFrame {
                                    code: axum::extract::ws::close_code::NORMAL,
                                    reason: "the process ended".into(),
                                })))
                                .await;
                            return;
                        }
                    };
                    if socket.send(msg).await.is_err() {
                        return;
                    }
                }
            }
            msg = socket.recv() => {
                let refused = match msg {
                    Some(Ok(Message::Binary(data))) => proc.write_input(&data).await.err(),
                    Some(Ok(Message::Text(text))) => {
                        match serde_json::from_str::<PtyWsClientMessage>(text.as_str()) {
                            Ok(m) => apply(proc, m).await.err(),
                            Err(e) => Some(CommandError::Invalid(format!(
                                "a text message is JSON control (resize, input, signal): {e}"
                            ))),
                        }
                    }
                    Some(Ok(_)) => None,
                    // Closed, or broken: the terminal hangs up.
                    Some(Err(_)) | None => return,
                };
                if let Some(e) = refused {
                    let m = PtyWsServerMessage::Error { message: e.to_string() };
                    if socket.send(control(&m)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// One control message from the client.
async fn apply(proc: &Arc<Proc>, m: PtyWsClientMessage) -> Result<(), CommandError> {
    match m {
        PtyWsClientMessage::Resize { cols, rows } => proc.resize(check_size(cols, rows)?),
        PtyWsClientMessage::Input { data } => proc.write_input(data.as_bytes()).await,
        PtyWsClientMessage::Signal { signal } => {
            proc.signal(crate::commands::parse_signal(&signal)?)
        }
    }
}

/// `POST /pty/{pid}/input`: bytes to the terminal (keystrokes: `\r` is Enter, `\x03` is Ctrl-C).
async fn input(
    State(procs): St,
    Path(pid): Path<String>,
    ApiJson(req): ApiJson<ProcessInputRequest>,
) -> Result<StatusCode, ApiError> {
    let proc = procs.get(parse_pid(&pid)?)?;
    if !proc.is_pty() {
        return Err(CommandError::NotPty(proc.pid).into());
    }
    let data = input_bytes(req)?;
    proc.write_input(&data).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /pty/{pid}/resize {cols, rows}`.
async fn resize(
    State(procs): St,
    Path(pid): Path<String>,
    ApiJson(req): ApiJson<ResizePtyRequest>,
) -> Result<StatusCode, ApiError> {
    let size = check_size(req.cols, req.rows)?;
    procs.get(parse_pid(&pid)?)?.resize(size)?;
    Ok(StatusCode::NO_CONTENT)
}
