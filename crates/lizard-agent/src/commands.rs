//! Commands: shell command lines and programs run in the sandbox besides kernels, with live output,
//! stdin, signals, timeouts, background runs and reattaching.
//!
//! `cmd` runs as `bash -c CMD` (not a login shell, so the sandbox's `PATH` is kept); `argv` runs a
//! program directly. Each process leads its own process group; signals and timeouts act on the group.
//! `POST /commands` streams [`CommandEvent`](lizard_proto::CommandEvent)s (NDJSON/SSE by `Accept`),
//! or returns the aggregated result when the process ends, or (`background: true`) returns its
//! [`ProcessInfo`] at once. A client that disconnects does **not** stop the process (E2B semantics):
//! reattach with `GET /commands/{pid}/stream`, or stop it with `POST /commands/{pid}/signal`. Use
//! `timeout_ms` for a bound that holds without a client.
//!
//! `user` is absent or `user` (the sandbox user, the default) or `root`: the sandbox's own root
//! (uid 0 of its user namespace with the agent's kept capabilities, working directory `/root`,
//! `HOME=/root`; see `crate::users`). The process table, output buffers and the pump live in
//! `crate::procs`; terminals (`crate::pty`) share them.

use crate::procs::{respond, CommandError, Processes, Spawn};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use lizard_http::api::{ApiError, ApiJson, ApiQuery, Framing};
use lizard_jail::Signal;
use lizard_proto::{
    ProcessInfo, ProcessInputRequest, SignalRequest, StartCommandRequest, StreamQuery,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Largest `timeout_ms` accepted (one day).
const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// The sandbox user's name in requests.
pub const SANDBOX_USER: &str = crate::users::SANDBOX_USER_NAME;

type St = State<Arc<Processes>>;

/// The `/commands` routes.
pub fn routes<S: Clone + Send + Sync + 'static>(procs: Arc<Processes>) -> Router<S> {
    Router::new()
        .route("/commands", get(list).post(start))
        .route("/commands/{pid}", get(info))
        .route("/commands/{pid}/stream", get(connect))
        .route("/commands/{pid}/stdin", post(stdin))
        .route("/commands/{pid}/stdin/close", post(close_stdin))
        .route("/commands/{pid}/signal", post(signal))
        .with_state(procs)
}

/// Fields shared by command and terminal requests, validated into a [`Spawn`].
pub(crate) struct Launch {
    pub cmd: Option<String>,
    pub argv: Option<Vec<String>>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
    pub user: Option<String>,
    pub tag: Option<String>,
}

impl Launch {
    /// Validate. `default_argv` is used when neither `cmd` nor `argv` is given (else that is an
    /// error).
    pub(crate) fn into_spawn(
        self,
        procs: &Processes,
        default_argv: Option<Vec<String>>,
    ) -> Result<Spawn, CommandError> {
        let invalid = |m: String| CommandError::Invalid(m);
        let bash = procs.bash.display().to_string();
        let argv =
            match (&self.cmd, self.argv) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "pass either `cmd` (a shell command line) or `argv`, not both".into(),
                    ))
                }
                (Some(c), None) => {
                    if c.trim().is_empty() {
                        return Err(invalid("`cmd` is empty".into()));
                    }
                    if c.contains('\0') {
                        return Err(invalid("`cmd` contains a NUL byte".into()));
                    }
                    vec![bash, "-c".into(), c.clone()]
                }
                (None, Some(a)) => {
                    if a.first().is_none_or(|p| p.is_empty()) {
                        return Err(invalid("`argv` must name a program in argv[0]".into()));
                    }
                    if a.iter().any(|x| x.contains('\0')) {
                        return Err(invalid("`argv` contains a NUL byte".into()));
                    }
                    a
                }
                (None, None) => match default_argv {
                    Some(a) => a,
                    None => return Err(invalid(
                        "pass `cmd` (a shell command line) or `argv` (a program and its arguments)"
                            .into(),
                    )),
                },
            };
        for (k, v) in &self.env {
            if !lizard_proto::valid_env_name(k) {
                return Err(invalid(format!(
                    "invalid environment variable name {k:?}: use letters, digits and _"
                )));
            }
            if v.contains('\0') {
                return Err(invalid(format!(
                    "environment variable {k} contains a NUL byte"
                )));
            }
        }
        let user = crate::users::RunAs::parse(self.user.as_deref()).map_err(invalid)?;
        let home = match user {
            crate::users::RunAs::Root if crate::users::sandbox_user().is_some() => {
                PathBuf::from(crate::users::ROOT_HOME)
            }
            _ => procs.default_cwd.clone(),
        };
        let cwd: PathBuf = match &self.cwd {
            None => home,
            Some(c) => {
                let p =
                    crate::files::resolve(&home, c).map_err(|e| invalid(format!("cwd: {e}")))?;
                if !p.is_dir() {
                    return Err(CommandError::BadCwd(c.clone()));
                }
                p
            }
        };
        let timeout = match self.timeout_ms {
            Some(0) => return Err(invalid("timeout_ms must be positive".into())),
            Some(t) if t > MAX_TIMEOUT_MS => {
                return Err(invalid(format!(
                    "timeout_ms must be at most {MAX_TIMEOUT_MS}"
                )))
            }
            Some(t) => Some(Duration::from_millis(t)),
            None => None,
        };
        if let Some(t) = &self.tag {
            if t.len() > 256 || t.contains('\0') {
                return Err(invalid(
                    "`tag` must be at most 256 bytes without NUL".into(),
                ));
            }
        }
        Ok(Spawn {
            argv,
            cmd: self.cmd,
            cwd,
            env: self.env,
            timeout,
            stdin: false,
            tag: self.tag,
            pty: None,
            user,
        })
    }
}

pub(crate) fn parse_pid(s: &str) -> Result<u32, CommandError> {
    s.parse::<u32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| CommandError::Invalid(format!("{s:?} is not a process id")))
}

/// The bytes of an input request: exactly one of `data` and `data_b64`.
pub(crate) fn input_bytes(req: ProcessInputRequest) -> Result<Vec<u8>, CommandError> {
    match (req.data, req.data_b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| CommandError::Invalid(format!("data_b64 is not valid base64: {e}"))),
        _ => Err(CommandError::Invalid(
            "pass exactly one of `data` (text) and `data_b64` (bytes)".into(),
        )),
    }
}

/// A signal name: `SIGTERM`, `TERM`, `sigterm` or E2B's `SIGNAL_SIGTERM`.
pub(crate) fn parse_signal(s: &str) -> Result<Signal, CommandError> {
    let up = s.trim().to_ascii_uppercase();
    let up = up.strip_prefix("SIGNAL_").unwrap_or(&up);
    let name = if up.starts_with("SIG") {
        up.to_string()
    } else {
        format!("SIG{up}")
    };
    Signal::from_str(&name).map_err(|_| {
        CommandError::Invalid(format!(
            "unknown signal {s:?}: use a name like SIGTERM, SIGKILL, SIGINT, SIGHUP"
        ))
    })
}

/// `POST /commands`.
async fn start(
    State(procs): St,
    headers: HeaderMap,
    ApiJson(req): ApiJson<StartCommandRequest>,
) -> Result<Response, ApiError> {
    let (background, base64, stdin) = (req.background, req.base64, req.stdin);
    let mut spec = Launch {
        cmd: req.cmd,
        argv: req.argv,
        cwd: req.cwd,
        env: req.env,
        timeout_ms: req.timeout_ms,
        user: req.user,
        tag: req.tag,
    }
    .into_spawn(&procs, None)?;
    spec.stdin = stdin;
    start_and_respond(&procs, spec, background, base64, &headers).await
}

/// Start `spec`; answer at once (background) or with its output.
pub(crate) async fn start_and_respond(
    procs: &Arc<Processes>,
    spec: Spawn,
    background: bool,
    base64: bool,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (proc, sub) = procs.spawn(spec, !background, base64)?;
    match sub {
        Some(sub) => Ok(respond(Framing::from_headers(headers), sub).await),
        None => Ok((StatusCode::CREATED, Json(proc.info())).into_response()),
    }
}

/// `GET /commands`: running processes (commands and terminals).
async fn list(State(procs): St) -> Json<Vec<ProcessInfo>> {
    Json(procs.list())
}

/// `GET /commands/{pid}`: a running process, or a finished one (with `end`) for 60 s.
async fn info(State(procs): St, Path(pid): Path<String>) -> Result<Json<ProcessInfo>, ApiError> {
    Ok(Json(procs.get(parse_pid(&pid)?)?.info()))
}

/// `GET /commands/{pid}/stream`: what is still buffered, then live output and `end`.
async fn connect(
    State(procs): St,
    Path(pid): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<StreamQuery>,
) -> Result<Response, ApiError> {
    let proc = procs.get(parse_pid(&pid)?)?;
    Ok(respond(Framing::from_headers(&headers), proc.subscribe(q.base64)).await)
}

/// `POST /commands/{pid}/stdin`.
async fn stdin(
    State(procs): St,
    Path(pid): Path<String>,
    ApiJson(req): ApiJson<ProcessInputRequest>,
) -> Result<StatusCode, ApiError> {
    let proc = procs.get(parse_pid(&pid)?)?;
    let data = input_bytes(req)?;
    proc.write_input(&data).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /commands/{pid}/stdin/close`: end of input.
async fn close_stdin(State(procs): St, Path(pid): Path<String>) -> Result<StatusCode, ApiError> {
    procs.get(parse_pid(&pid)?)?.close_input().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /commands/{pid}/signal`.
async fn signal(
    State(procs): St,
    Path(pid): Path<String>,
    ApiJson(req): ApiJson<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    let proc = procs.get(parse_pid(&pid)?)?;
    proc.signal(parse_signal(&req.signal)?)?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        for s in ["SIGTERM", "TERM", "sigterm", "SIGNAL_SIGTERM"] {
            assert_eq!(parse_signal(s).unwrap(), Signal::SIGTERM, "{s}");
        }
        assert_eq!(parse_signal("KILL").unwrap(), Signal::SIGKILL);
        assert!(parse_signal("SIGNOPE").is_err());
        assert!(parse_signal("9").is_err());
    }

    #[test]
    fn input_is_exactly_one_of_text_and_bytes() {
        let r = |data: Option<&str>, b64: Option<&str>| {
            input_bytes(ProcessInputRequest {
                data: data.map(Into::into),
                data_b64: b64.map(Into::into),
            })
        };
        assert_eq!(r(Some("hi"), None).unwrap(), b"hi");
        assert_eq!(r(None, Some("/w==")).unwrap(), [0xff]);
        assert!(r(None, None).is_err());
        assert!(r(Some("a"), Some("YQ==")).is_err());
        assert!(r(None, Some("!!")).is_err());
    }
}
