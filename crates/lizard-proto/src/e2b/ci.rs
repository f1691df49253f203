//! The E2B code interpreter's wire: `POST /execute` (NDJSON lines) and the contexts routes.
//!
//! Lines are produced from Lizard's own [`ExecutionEvent`]s by [`line`]; nothing here runs code.
//! What the SDKs parse (from their source): one JSON object per line, `number_of_executions` first,
//! `stdout`/`stderr` with an ISO `timestamp` (the Python SDK requires it when callbacks are given),
//! `result` with E2B's field names and `is_main_result`, at most one `error{name,value,traceback}`,
//! `keepalive` while idle, and `end_of_execution` last.

use crate::{ExecutionEvent, ExecutionResult, Language, CHART_MIME, TABLE_MIME};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /execute`. Unknown fields are ignored (E2B's server is pydantic with default settings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    pub code: String,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
}

/// `POST /contexts` (the Python SDK may send `{}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateContextRequest {
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub language: Option<String>,
}

/// A context as E2B describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub id: String,
    pub language: String,
    pub cwd: String,
}

/// E2B's language names → Lizard's: trimmed and lower-cased, `js` → javascript, `ts` /
/// `typescript` → javascript (its kernel strips TypeScript types), empty → python. R and Java
/// kernels are not in Lizard's template: those are errors naming what is.
pub fn normalize_language(name: Option<&str>) -> Result<Language, String> {
    let n = name.unwrap_or("").trim().to_ascii_lowercase();
    match n.as_str() {
        "" | "python" | "python3" => Ok(Language::Python),
        "js" | "javascript" | "node" | "ts" | "typescript" => Ok(Language::Javascript),
        "bash" | "sh" | "shell" => Ok(Language::Bash),
        other => Err(format!(
            "language {other:?} is not available in this sandbox: use python, javascript (js, ts) or bash"
        )),
    }
}

/// One line of the `/execute` stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    NumberOfExecutions {
        execution_count: u64,
    },
    Stdout {
        text: String,
        timestamp: String,
    },
    Stderr {
        text: String,
        timestamp: String,
    },
    Result(Box<ResultLine>),
    Error {
        name: String,
        value: String,
        traceback: String,
    },
    Keepalive,
    EndOfExecution,
}

/// A rich result with E2B's field per MIME type; unknown types go to `extra`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub text: Option<String>,
    pub html: Option<String>,
    pub markdown: Option<String>,
    pub svg: Option<String>,
    pub png: Option<String>,
    pub jpeg: Option<String>,
    pub pdf: Option<String>,
    pub latex: Option<String>,
    pub json: Option<serde_json::Value>,
    pub javascript: Option<String>,
    pub data: Option<serde_json::Value>,
    pub chart: Option<serde_json::Value>,
    /// Always present (possibly `{}`), as E2B's server sends it.
    #[serde(default)]
    pub extra: BTreeMap<String, serde_json::Value>,
    pub is_main_result: bool,
}

impl From<&ExecutionResult> for ResultLine {
    fn from(r: &ExecutionResult) -> Self {
        let mut out = ResultLine {
            is_main_result: r.is_main_result,
            ..Default::default()
        };
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        for (mime, v) in &r.data {
            match mime.as_str() {
                "text/plain" => out.text = Some(strip_quotes(&text(v))),
                "text/html" => out.html = Some(text(v)),
                "text/markdown" => out.markdown = Some(text(v)),
                "image/svg+xml" => out.svg = Some(text(v)),
                "image/png" => out.png = Some(text(v)),
                "image/jpeg" => out.jpeg = Some(text(v)),
                "application/pdf" => out.pdf = Some(text(v)),
                "text/latex" => out.latex = Some(text(v)),
                "application/json" => out.json = Some(v.clone()),
                "application/javascript" => out.javascript = Some(text(v)),
                m if m == TABLE_MIME => out.data = Some(v.clone()),
                m if m == CHART_MIME => out.chart = Some(v.clone()),
                other => {
                    out.extra.insert(other.to_string(), v.clone());
                }
            }
        }
        out
    }
}

/// E2B's server strips one pair of surrounding quotes from `text/plain` (so `'hi'` reads `hi`).
fn strip_quotes(s: &str) -> String {
    let b = s.as_bytes();
    if b.len() >= 2 && (b[0] == b'\'' || b[0] == b'"') && b[b.len() - 1] == b[0] {
        s[1..s.len() - 1].to_string()
    } else {
        s.to_string()
    }
}

/// The E2B line for one of Lizard's execution events, stamped with `timestamp` (RFC 3339).
pub fn line(event: &ExecutionEvent, timestamp: impl FnOnce() -> String) -> Line {
    match event {
        ExecutionEvent::Start {
            execution_count, ..
        } => Line::NumberOfExecutions {
            execution_count: *execution_count,
        },
        ExecutionEvent::Stdout { text } => Line::Stdout {
            text: text.clone(),
            timestamp: timestamp(),
        },
        ExecutionEvent::Stderr { text } => Line::Stderr {
            text: text.clone(),
            timestamp: timestamp(),
        },
        ExecutionEvent::Result(r) => Line::Result(Box::new(r.into())),
        ExecutionEvent::Error(e) => Line::Error {
            name: e.name.clone(),
            value: e.value.clone(),
            traceback: e.traceback.clone(),
        },
        ExecutionEvent::End { .. } => Line::EndOfExecution,
    }
}

impl Line {
    /// The line as sent: compact JSON and `\n`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextId, ExecutionError, ExecutionStatus};
    use serde_json::json;

    fn ts() -> String {
        "2025-01-01T12:00:00.000000Z".into()
    }

    #[test]
    fn events_become_e2b_lines() {
        let start = ExecutionEvent::Start {
            execution_count: 3,
            context_id: ContextId("c".into()),
        };
        assert_eq!(
            serde_json::to_value(line(&start, ts)).unwrap(),
            json!({"type": "number_of_executions", "execution_count": 3})
        );
        let out = ExecutionEvent::Stdout {
            text: "hi\n".into(),
        };
        assert_eq!(
            serde_json::to_value(line(&out, ts)).unwrap(),
            json!({"type": "stdout", "text": "hi\n", "timestamp": ts()})
        );
        let err = ExecutionEvent::Error(ExecutionError {
            name: "NameError".into(),
            value: "name 'x' is not defined".into(),
            traceback: "tb".into(),
        });
        assert_eq!(
            serde_json::to_value(line(&err, ts)).unwrap(),
            json!({"type": "error", "name": "NameError", "value": "name 'x' is not defined", "traceback": "tb"})
        );
        let end = ExecutionEvent::End {
            status: ExecutionStatus::Ok,
            duration_ms: 1,
            usage: None,
        };
        assert_eq!(
            line(&end, ts).to_bytes(),
            b"{\"type\":\"end_of_execution\"}\n"
        );
    }

    #[test]
    fn results_map_mime_types_to_fields() {
        let r = ExecutionResult {
            is_main_result: true,
            data: [
                ("text/plain".to_string(), json!("'hello'")),
                ("image/png".to_string(), json!("iVBOR")),
                (TABLE_MIME.to_string(), json!({"a": [1, 2]})),
                (CHART_MIME.to_string(), json!({"type": "line"})),
                ("application/x-custom".to_string(), json!("z")),
            ]
            .into_iter()
            .collect(),
            metadata: None,
        };
        let v = serde_json::to_value(line(&ExecutionEvent::Result(r), ts)).unwrap();
        assert_eq!(
            v,
            json!({"type": "result", "text": "hello", "png": "iVBOR", "data": {"a": [1, 2]},
                   "chart": {"type": "line"}, "extra": {"application/x-custom": "z"},
                   "is_main_result": true})
        );
    }

    #[test]
    fn quotes_are_stripped_once_and_only_in_pairs() {
        assert_eq!(strip_quotes("'a'"), "a");
        assert_eq!(strip_quotes("\"a\""), "a");
        assert_eq!(strip_quotes("'a\""), "'a\"");
        assert_eq!(strip_quotes("'"), "'");
        assert_eq!(strip_quotes("2"), "2");
    }

    #[test]
    fn language_names() {
        assert_eq!(normalize_language(None), Ok(Language::Python));
        assert_eq!(normalize_language(Some(" JS ")), Ok(Language::Javascript));
        assert_eq!(normalize_language(Some("bash")), Ok(Language::Bash));
        assert_eq!(normalize_language(Some("ts")), Ok(Language::Javascript));
        assert_eq!(
            normalize_language(Some("TypeScript")),
            Ok(Language::Javascript)
        );
        assert!(normalize_language(Some("r")).is_err());
    }

    #[test]
    fn requests_accept_python_nulls_and_unknown_fields() {
        let r: ExecuteRequest = serde_json::from_str(
            r#"{"code":"1","context_id":null,"language":null,"env_vars":null,"x":1}"#,
        )
        .unwrap();
        assert_eq!(r.code, "1");
        let c: CreateContextRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(c, CreateContextRequest::default());
    }
}
