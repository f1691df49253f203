//! Running code: the request, the event stream and the aggregated result.
//!
//! # Wire format
//!
//! A streamed execution is a sequence of [`EventFrame`]s: JSON objects with a `seq` number (0, 1, 2,
//! … within one execution) and a `type`. In NDJSON each frame is one line; in SSE each frame is one
//! `data:` line with the `type` also given as the SSE `event:` name. Every execution starts with
//! exactly one `start` and ends with exactly one `end`; between them come any number of `stdout`,
//! `stderr` and `result` frames, and at most one `error`. This list of types may expand over time:
//! clients must ignore types they do not know.
//!
//! ## `start`
//! `{"seq":0,"type":"start","execution_count":3,"context_id":"…"}` — the cell was accepted by the
//! context's kernel; `execution_count` is the kernel's counter for this cell (1 for its first).
//!
//! ## `stdout` / `stderr`
//! `{"seq":1,"type":"stdout","text":"hello\n"}` — a chunk of output as the kernel wrote it. Chunks are
//! not lines: a line may be split over chunks, a chunk may hold many lines. Bytes that are not UTF-8
//! arrive as U+FFFD replacement characters; a multi-byte character is never split.
//!
//! ## `result`
//! `{"seq":2,"type":"result","is_main_result":true,"data":{"text/plain":"2"}}` — a rich value as a
//! MIME bundle. `is_main_result` is true for the value of the cell's last expression, false for
//! `display()` output. Binary types (`image/png`, `image/jpeg`) are base64 strings; `application/json`
//! is any JSON value; text types are strings. `metadata` is present when the kernel gave some.
//!
//! ## `error`
//! `{"seq":3,"type":"error","name":"NameError","value":"name 'x' is not defined","traceback":"…"}` —
//! the cell failed. `name` is the exception class (`KeyboardInterrupt` after an interrupt, `ExitCode`
//! for a Bash cell whose status was not 0 — then `value` is the status, `KernelDied` when the kernel
//! process ended, `Timeout` when `timeout_ms` passed); `traceback` is plain text without colour codes.
//!
//! ## `end`
//! `{"seq":4,"type":"end","status":"ok","duration_ms":12,"usage":{"cpu_ms":3,"peak_rss_bytes":…}}` —
//! the run is over and the context accepts the next one.

use crate::{ContextId, Language};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /execute`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    /// The cell's source.
    pub code: String,
    /// Run in this context. Mutually exclusive with `language`.
    pub context: Option<ContextId>,
    /// Run in this language's default context. Mutually exclusive with `context`. Neither: Python.
    pub language: Option<Language>,
    /// Environment variables visible to this run only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Interrupt the cell after this many milliseconds (the run then ends with a `Timeout` error).
    pub timeout_ms: Option<u64>,
}

/// A MIME bundle: MIME type → value.
pub type MimeBundle = BTreeMap<String, serde_json::Value>;

/// MIME type of a table's data in a result: a pandas `DataFrame` as `{column: [values…]}`
/// (`to_dict(orient="list")`, timestamps as ISO strings). Added by the Python kernel next to the
/// DataFrame's `text/plain` and `text/html`.
pub const TABLE_MIME: &str = "application/vnd.lizard.table+json";
/// MIME type of a chart's data in a result: a matplotlib figure described as a chart object (type,
/// title, axes, elements: E2B's chart schema, made by the `e2b-charts` package). Added by the
/// Python kernel next to the figure's `image/png` when the figure is a supported chart.
pub const CHART_MIME: &str = "application/vnd.lizard.chart+json";

/// A rich result of a cell.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionResult {
    pub is_main_result: bool,
    pub data: MimeBundle,
    pub metadata: Option<serde_json::Value>,
}

/// A failed cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionError {
    /// Exception class name, e.g. `NameError`, `ReferenceError`, `ExitCode`, `KernelDied`.
    pub name: String,
    /// The exception's message.
    pub value: String,
    /// The traceback as plain text (no ANSI colour codes).
    pub traceback: String,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// The cell ran to completion.
    Ok,
    /// The cell raised, threw, or (Bash) exited non-zero.
    Error,
    /// An interrupt request or a client disconnect stopped the cell.
    Interrupted,
    /// `timeout_ms` passed and the cell was stopped.
    Timeout,
    /// The kernel process ended during the run; the context has a fresh kernel now.
    KernelDied,
}

/// Resources one run used, measured on the kernel process and its children.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ExecutionUsage {
    /// User + system CPU time of the kernel (and its waited-for children) during the run.
    pub cpu_ms: u64,
    /// Peak resident set size of the kernel process during the run.
    pub peak_rss_bytes: u64,
}

/// One event of a streamed execution (see the module docs for the wire format).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecutionEvent {
    Start {
        execution_count: u64,
        context_id: ContextId,
    },
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    Result(ExecutionResult),
    Error(ExecutionError),
    End {
        status: ExecutionStatus,
        duration_ms: u64,
        usage: Option<ExecutionUsage>,
    },
}

impl ExecutionEvent {
    /// The `type` tag, also used as the SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            ExecutionEvent::Start { .. } => "start",
            ExecutionEvent::Stdout { .. } => "stdout",
            ExecutionEvent::Stderr { .. } => "stderr",
            ExecutionEvent::Result(_) => "result",
            ExecutionEvent::Error(_) => "error",
            ExecutionEvent::End { .. } => "end",
        }
    }
}

/// An event with its position in the execution's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EventFrame {
    pub seq: u64,
    #[serde(flatten)]
    pub event: ExecutionEvent,
}

/// A whole run, folded from its events: what a non-streaming `POST /execute` returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Execution {
    pub context_id: Option<ContextId>,
    pub execution_count: u64,
    /// Output chunks in arrival order.
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    pub results: Vec<ExecutionResult>,
    pub error: Option<ExecutionError>,
    /// `None` only while the run has not ended.
    pub status: Option<ExecutionStatus>,
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ExecutionUsage>,
}

impl Execution {
    /// Fold one event into the aggregate.
    pub fn apply(&mut self, event: ExecutionEvent) {
        match event {
            ExecutionEvent::Start {
                execution_count,
                context_id,
            } => {
                self.execution_count = execution_count;
                self.context_id = Some(context_id);
            }
            ExecutionEvent::Stdout { text } => self.stdout.push(text),
            ExecutionEvent::Stderr { text } => self.stderr.push(text),
            ExecutionEvent::Result(r) => self.results.push(r),
            ExecutionEvent::Error(e) => self.error = Some(e),
            ExecutionEvent::End {
                status,
                duration_ms,
                usage,
            } => {
                self.status = Some(status);
                self.duration_ms = duration_ms;
                self.usage = usage;
            }
        }
    }

    /// All stdout chunks joined.
    pub fn stdout_text(&self) -> String {
        self.stdout.concat()
    }

    /// All stderr chunks joined.
    pub fn stderr_text(&self) -> String {
        self.stderr.concat()
    }

    /// The main result, if the cell's last expression had a value.
    pub fn main_result(&self) -> Option<&ExecutionResult> {
        self.results.iter().find(|r| r.is_main_result)
    }
}

/// One finished run as the agent records it, for metering (`GET /executions?after=N` on the agent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionRecord {
    /// Position in the agent's log (1, 2, 3, …).
    pub seq: u64,
    pub context_id: ContextId,
    pub language: Language,
    pub status: ExecutionStatus,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub peak_rss_bytes: u64,
    /// When the run ended, in milliseconds since the Unix epoch.
    pub finished_at_ms: u64,
}

/// A page of the agent's execution log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionLog {
    /// Pass this as `after` to get the next page.
    pub next: u64,
    pub records: Vec<ExecutionRecord>,
    /// Records that fell out of the agent's bounded log before anyone read them.
    pub dropped: u64,
}

impl FromIterator<ExecutionEvent> for Execution {
    fn from_iter<I: IntoIterator<Item = ExecutionEvent>>(iter: I) -> Self {
        let mut e = Execution::default();
        for ev in iter {
            e.apply(ev);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_wire_shape() {
        let f = EventFrame {
            seq: 2,
            event: ExecutionEvent::Stdout {
                text: "hi\n".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            r#"{"seq":2,"type":"stdout","text":"hi\n"}"#
        );
        let back: EventFrame = serde_json::from_str(r#"{"seq":2,"type":"stdout","text":"hi\n"}"#)
            .expect("frame parses");
        assert_eq!(back, f);

        let r = EventFrame {
            seq: 3,
            event: ExecutionEvent::Result(ExecutionResult {
                is_main_result: true,
                data: [("text/plain".to_string(), serde_json::json!("2"))].into(),
                metadata: None,
            }),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"seq":3,"type":"result","is_main_result":true,"data":{"text/plain":"2"}}"#
        );
        assert_eq!(serde_json::from_str::<EventFrame>(&s).unwrap(), r);
    }

    #[test]
    fn fold_events() {
        let ex: Execution = [
            ExecutionEvent::Start {
                execution_count: 1,
                context_id: "c".into(),
            },
            ExecutionEvent::Stdout { text: "a".into() },
            ExecutionEvent::Stdout { text: "b".into() },
            ExecutionEvent::Error(ExecutionError {
                name: "E".into(),
                value: "v".into(),
                traceback: String::new(),
            }),
            ExecutionEvent::End {
                status: ExecutionStatus::Error,
                duration_ms: 5,
                usage: None,
            },
        ]
        .into_iter()
        .collect();
        assert_eq!(ex.stdout_text(), "ab");
        assert_eq!(ex.status, Some(ExecutionStatus::Error));
        assert_eq!(ex.error.unwrap().name, "E");
    }

    #[test]
    fn execute_request_rejects_unknown_fields() {
        let err = serde_json::from_str::<ExecuteRequest>(r#"{"code":"1","bogus":1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"));
        let ok: ExecuteRequest =
            serde_json::from_str(r#"{"code":"1","language":"js","env":{"A":"b"}}"#).unwrap();
        assert_eq!(ok.language, Some(Language::Javascript));
    }
}
