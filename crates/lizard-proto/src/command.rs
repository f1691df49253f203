//! Commands and terminals: processes started in a sandbox besides kernels.
//!
//! # Wire format
//!
//! `POST /commands` (and `POST /pty`, and `GET /commands/{pid}/stream`) answer with a stream of
//! [`CommandEvent`]s when `Accept` is `application/x-ndjson` (one JSON object per line) or
//! `text/event-stream` (one `data:` line per event, the `type` as the SSE `event:` name); with any
//! other `Accept` they wait for the process to end and return one [`CommandResult`]. Every stream
//! starts with exactly one `start` and, unless the client leaves first, ends with exactly one `end`.
//! Clients must ignore event types they do not know.
//!
//! ## `start`
//! `{"type":"start","pid":123}` — the process exists. On a reattach (`GET /commands/{pid}/stream`)
//! `dropped_stdout_bytes` / `dropped_stderr_bytes` say how much of the earliest output fell out of
//! the agent's bounded buffer (the last 1 MiB per stream is kept) and is not replayed.
//!
//! ## `stdout` / `stderr`
//! `{"type":"stdout","text":"hi\n"}` — a chunk of output as the process wrote it (not a line).
//! `text` is lossy UTF-8: bytes that are not UTF-8 become U+FFFD and a multi-byte character is never
//! split across chunks. When the request asked for `base64` (always for a PTY), `data_b64` carries
//! the chunk's exact bytes in standard base64; `text` may then be empty (a partial character). A
//! PTY's terminal output arrives as `stdout` (a terminal merges the two streams).
//!
//! ## `end`
//! `{"type":"end","exit_code":0,"duration_ms":12}` or
//! `{"type":"end","signal":"SIGKILL","timed_out":true,"duration_ms":1000}` — the process is gone:
//! `exit_code` when it exited, `signal` (a name like `SIGTERM`) when a signal killed it. Background
//! children it left behind in its process group keep running, unless `timed_out`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /commands`: start a process. Exactly one of `cmd` and `argv`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartCommandRequest {
    /// A shell command line, run as `bash -c CMD` (no login shell: the sandbox's `PATH` stays).
    pub cmd: Option<String>,
    /// A program and its arguments, run directly (no shell); `argv[0]` is looked up in `PATH`.
    pub argv: Option<Vec<String>>,
    /// Working directory (default: the user's home); relative paths resolve against the user's
    /// home (`/home/user`, or `/root` for `user: "root"`).
    pub cwd: Option<String>,
    /// Environment variables, merged over the sandbox's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Stop the process group after this many milliseconds (SIGTERM, then SIGKILL after 2 s); the
    /// `end` event then says `timed_out`. No limit when absent.
    pub timeout_ms: Option<u64>,
    /// Return at once with the process's [`ProcessInfo`] (201) instead of streaming or waiting.
    #[serde(default, skip_serializing_if = "is_false")]
    pub background: bool,
    /// Keep a stdin pipe open for `POST /commands/{pid}/stdin`; otherwise stdin is `/dev/null`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stdin: bool,
    /// Also send each output chunk's raw bytes as `data_b64` (and `stdout_b64`/`stderr_b64` in the
    /// aggregated result), so arbitrary bytes survive.
    #[serde(default, skip_serializing_if = "is_false")]
    pub base64: bool,
    /// The user to run as: `user` (the sandbox user, the default) or `root` (the sandbox's own
    /// root: uid 0 of the sandbox's user namespace with the agent's kept capabilities, `HOME` and
    /// default cwd `/root`, umask 022); anything else is a 400.
    pub user: Option<String>,
    /// A free-form label shown by `GET /commands`.
    pub tag: Option<String>,
}

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

/// `POST /pty`: start a process on a new pseudo-terminal. At most one of `cmd` and `argv`; neither
/// runs an interactive `bash -i`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartPtyRequest {
    pub cols: u16,
    pub rows: u16,
    pub cmd: Option<String>,
    pub argv: Option<Vec<String>>,
    pub cwd: Option<String>,
    /// Merged over the sandbox's environment; `TERM` defaults to `xterm-256color`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
    /// Return at once with the [`ProcessInfo`] (201); attach with `GET /commands/{pid}/stream`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub background: bool,
    pub user: Option<String>,
    pub tag: Option<String>,
}

/// `GET /pty/ws` (a WebSocket): start a process on a new pseudo-terminal, as `POST /pty` does,
/// and drive it over one WebSocket. Subprotocol [`PTY_WS_PROTOCOL`]. Binary messages carry the
/// terminal's bytes both ways; text messages are JSON control messages: [`PtyWsServerMessage`]
/// from the server (`start` first, `end` last, then the socket closes), [`PtyWsClientMessage`]
/// from the client. Closing the socket kills the process's group (a terminal's hang-up).
///
/// Browsers cannot set `Authorization` on a WebSocket: Lizard's server also takes the API key
/// as a second subprotocol, `lizard.key.<key>`, which it never forwards nor echoes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PtyWsQuery {
    /// Columns (default 80).
    pub cols: Option<u16>,
    /// Rows (default 24).
    pub rows: Option<u16>,
    /// A shell command line to run (`bash -c`); an interactive `bash -i` without it.
    pub cmd: Option<String>,
    pub cwd: Option<String>,
    /// `user` (the default) or `root`, as for commands.
    pub user: Option<String>,
}

/// The subprotocol of `GET /pty/ws`.
pub const PTY_WS_PROTOCOL: &str = "lizard.pty.v1";

/// The prefix of the subprotocol that carries an API key to Lizard's server (`GET /pty/ws`).
pub const WS_KEY_PROTOCOL_PREFIX: &str = "lizard.key.";

/// A JSON control message the server sends on a terminal's WebSocket (`GET /pty/ws`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyWsServerMessage {
    /// The process started (its pid, for `GET /commands/{pid}` and signals).
    Start { pid: u32 },
    /// The process ended; the socket closes next.
    End(CommandEnd),
    /// A control message was refused (the terminal goes on).
    Error { message: String },
}

/// A JSON control message a client sends on a terminal's WebSocket (`GET /pty/ws`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PtyWsClientMessage {
    /// The terminal's new size (the program gets SIGWINCH).
    Resize { cols: u16, rows: u16 },
    /// Text to type (binary messages carry raw bytes).
    Input { data: String },
    /// A signal to the process's group, e.g. `SIGINT`.
    Signal { signal: String },
}

/// `POST /pty/{pid}/resize`.
pub type ResizePtyRequest = PtySize;

/// `POST /commands/{pid}/stdin` and `POST /pty/{pid}/input`: exactly one of `data` (text, sent as
/// UTF-8) and `data_b64` (bytes).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessInputRequest {
    pub data: Option<String>,
    pub data_b64: Option<String>,
}

/// `POST /commands/{pid}/signal`: `signal` is a name such as `SIGTERM`, `SIGKILL`, `SIGINT`,
/// `SIGHUP`, `SIGUSR1` (the `SIG` prefix is optional). It goes to the process's whole group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    pub signal: String,
}

/// `GET /commands/{pid}/stream?base64=`: reattach to a process's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// As `StartCommandRequest::base64` (always on for a PTY).
    #[serde(default)]
    pub base64: bool,
}

/// How a process ended.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommandEnd {
    /// The exit status, when the process exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it (e.g. `SIGKILL`), when one did.
    pub signal: Option<String>,
    /// `timeout_ms` passed and the agent stopped the process group.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// From start to exit.
    pub duration_ms: u64,
}

/// One event of a process's output stream (see the module docs).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CommandEvent {
    Start {
        pid: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        dropped_stdout_bytes: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        dropped_stderr_bytes: u64,
    },
    Stdout {
        text: String,
        data_b64: Option<String>,
    },
    Stderr {
        text: String,
        data_b64: Option<String>,
    },
    End(CommandEnd),
}

impl CommandEvent {
    /// The `type` tag, also used as the SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            CommandEvent::Start { .. } => "start",
            CommandEvent::Stdout { .. } => "stdout",
            CommandEvent::Stderr { .. } => "stderr",
            CommandEvent::End(_) => "end",
        }
    }
}

/// A finished process with all its output: what a non-streaming `POST /commands` (or
/// `GET /commands/{pid}/stream`) returns. A non-zero exit is not an HTTP error.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommandResult {
    pub pid: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    pub duration_ms: u64,
    /// All output as lossy UTF-8.
    pub stdout: String,
    pub stderr: String,
    /// The exact bytes, when `base64` was asked for.
    pub stdout_b64: Option<String>,
    pub stderr_b64: Option<String>,
    /// Output beyond 64 MiB per stream was left out of this aggregate (stream it instead).
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// Earliest output that had fallen out of the agent's buffer before this reader attached.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_stdout_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_stderr_bytes: u64,
}

impl CommandResult {
    /// Fold one event into the aggregate (text only: `*_b64` are filled by whoever has the bytes).
    pub fn apply(&mut self, event: CommandEvent) {
        match event {
            CommandEvent::Start {
                pid,
                dropped_stdout_bytes,
                dropped_stderr_bytes,
            } => {
                self.pid = pid;
                self.dropped_stdout_bytes = dropped_stdout_bytes;
                self.dropped_stderr_bytes = dropped_stderr_bytes;
            }
            CommandEvent::Stdout { text, .. } => self.stdout.push_str(&text),
            CommandEvent::Stderr { text, .. } => self.stderr.push_str(&text),
            CommandEvent::End(end) => self.set_end(end),
        }
    }

    pub fn set_end(&mut self, end: CommandEnd) {
        self.exit_code = end.exit_code;
        self.signal = end.signal;
        self.timed_out = end.timed_out;
        self.duration_ms = end.duration_ms;
    }
}

/// A process as `GET /commands` and `GET /commands/{pid}` report it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The shell command line, when started with `cmd`.
    pub cmd: Option<String>,
    /// What was executed, e.g. `["/bin/bash", "-c", "echo hi"]`.
    pub argv: Vec<String>,
    pub cwd: String,
    /// The request's environment variables (not the inherited ones).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub tag: Option<String>,
    /// The terminal size, for a PTY process.
    pub pty: Option<PtySize>,
    /// Whether it has a stdin pipe (`stdin: true`, or a PTY).
    pub stdin: bool,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// How it ended; absent while it runs. Finished processes stay visible for 60 s.
    pub end: Option<CommandEnd>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_wire_shape() {
        let e = CommandEvent::Stdout {
            text: "hi\n".into(),
            data_b64: None,
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"stdout","text":"hi\n"}"#
        );
        let end = CommandEvent::End(CommandEnd {
            exit_code: None,
            signal: Some("SIGKILL".into()),
            timed_out: true,
            duration_ms: 5,
        });
        let s = serde_json::to_string(&end).unwrap();
        assert_eq!(
            s,
            r#"{"type":"end","signal":"SIGKILL","timed_out":true,"duration_ms":5}"#
        );
        assert_eq!(serde_json::from_str::<CommandEvent>(&s).unwrap(), end);
        assert_eq!(
            serde_json::to_string(&CommandEvent::Start {
                pid: 7,
                dropped_stdout_bytes: 0,
                dropped_stderr_bytes: 0
            })
            .unwrap(),
            r#"{"type":"start","pid":7}"#
        );
    }

    #[test]
    fn requests_reject_unknown_fields() {
        assert!(serde_json::from_str::<StartCommandRequest>(r#"{"cmd":"ls","bogus":1}"#).is_err());
        let r: StartCommandRequest =
            serde_json::from_str(r#"{"cmd":"ls","env":{"A":"b"},"timeout_ms":5}"#).unwrap();
        assert_eq!(r.timeout_ms, Some(5));
        assert!(serde_json::from_str::<StartPtyRequest>(r#"{"cols":80}"#).is_err());
    }

    #[test]
    fn fold_events() {
        let mut r = CommandResult::default();
        for e in [
            CommandEvent::Start {
                pid: 3,
                dropped_stdout_bytes: 0,
                dropped_stderr_bytes: 0,
            },
            CommandEvent::Stdout {
                text: "a".into(),
                data_b64: None,
            },
            CommandEvent::Stderr {
                text: "e".into(),
                data_b64: None,
            },
            CommandEvent::Stdout {
                text: "b".into(),
                data_b64: None,
            },
            CommandEvent::End(CommandEnd {
                exit_code: Some(2),
                duration_ms: 1,
                ..Default::default()
            }),
        ] {
            r.apply(e);
        }
        assert_eq!(
            (r.pid, r.stdout.as_str(), r.stderr.as_str()),
            (3, "ab", "e")
        );
        assert_eq!(r.exit_code, Some(2));
    }
}
