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
//! Not here: terminal emulation (the client renders the bytes), or a `TERM` other than the one
//! asked for (`xterm-256color` by default).

use crate::commands::{input_bytes, parse_pid, start_and_respond, Launch};
use crate::procs::{CommandError, Processes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use lizard_http::api::{ApiError, ApiJson};
use lizard_proto::{ProcessInputRequest, PtySize, ResizePtyRequest, StartPtyRequest};
use std::sync::Arc;

/// Largest terminal dimension accepted.
const MAX_CELLS: u16 = 4096;
/// `TERM` of a terminal whose request does not set one.
const DEFAULT_TERM: &str = "xterm-256color";

type St = State<Arc<Processes>>;

/// The `/pty` routes.
pub fn routes<S: Clone + Send + Sync + 'static>(procs: Arc<Processes>) -> Router<S> {
    Router::new()
        .route("/pty", post(start))
        .route("/pty/{pid}/input", post(input))
        .route("/pty/{pid}/resize", post(resize))
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
    .into_spawn(&procs, Some(default))?;
    spec.pty = Some(size);
    start_and_respond(&procs, spec, req.background, true, &headers).await
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
