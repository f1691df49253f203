//! Recorded execution streams (`tests/fixtures/executions/NAME.ndjson`: the raw NDJSON body of a
//! real `POST /v1/sandboxes/{id}/execute` with `Accept: application/x-ndjson`) and the Execution
//! the Rust fold makes of each (`NAME.execution.json`). The Python and TypeScript SDKs fold the
//! same files in their own tests (sdk/python/tests/test_fold_fixtures.py,
//! sdk/typescript/test/fold-fixtures.test.js) and must reach the same Execution.
//!
//! `fixtures_fold_to_their_committed_execution` needs no server. `record_fixtures` re-records every
//! fixture from a real server and real sandboxes, only with `LIZARD_UPDATE_FIXTURES=1`:
//!
//! ```text
//! LIZARD_UPDATE_FIXTURES=1 cargo test -p lizard --test wire_fixtures record_fixtures -- --nocapture
//! ```

mod common;

use common::*;
use lizard_proto::execution::{EventFrame, Execution};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Output cap (stdout + stderr bytes per run) of the recording server's agents, so that the
/// truncation fixture stays small; every other fixture writes far less than this.
const MAX_OUTPUT_BYTES: u64 = 2048;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/executions")
}

/// Parse an NDJSON body as the Rust event frames (every non-blank line must be one; `seq` counts
/// 0, 1, 2, …; the stream starts with `start` and ends with `end`) and fold it.
fn fold(name: &str, ndjson: &str) -> Execution {
    let mut ex = Execution::default();
    let mut kinds = Vec::new();
    for (i, line) in ndjson.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let frame: EventFrame = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "{name}.ndjson line {}: not an EventFrame ({e}): {line}",
                i + 1
            )
        });
        assert_eq!(frame.seq, i as u64, "{name}.ndjson line {}: seq", i + 1);
        kinds.push(frame.event.kind());
        ex.apply(frame.event);
    }
    assert_eq!(kinds.first(), Some(&"start"), "{name}.ndjson: first frame");
    assert_eq!(kinds.last(), Some(&"end"), "{name}.ndjson: last frame");
    ex
}

/// The committed form of an Execution: pretty JSON (MIME bundles are ordered maps), one newline.
fn render(ex: &Execution) -> String {
    serde_json::to_string_pretty(ex).unwrap() + "\n"
}

/// The first place where two JSON values differ, as a path.
fn first_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some(format!("{path}.{k}: {p:?} vs {q:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if let Some(d) = first_difference(p, q, format!("{path}[{i}]")) {
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| format!("{path}: {} vs {} elements", x.len(), y.len()))
        }
        _ => (a != b).then(|| format!("{path}: {a} vs {b}")),
    }
}

fn names_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(suffix).map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

#[test]
fn fixtures_fold_to_their_committed_execution() {
    let dir = fixtures_dir();
    let streams = names_with(&dir, ".ndjson");
    let folded = names_with(&dir, ".execution.json");
    for n in &streams {
        assert!(folded.contains(n), "{n}.ndjson has no {n}.execution.json");
    }
    for n in &folded {
        assert!(streams.contains(n), "{n}.execution.json has no {n}.ndjson");
    }
    // Every case of the recorder has its fixture.
    let expected = cases();
    for c in &expected {
        assert!(
            streams.iter().any(|s| s == c.name),
            "fixture {} is missing in {}",
            c.name,
            dir.display()
        );
    }
    assert!(streams.len() >= expected.len());
    for n in &streams {
        let ndjson = std::fs::read_to_string(dir.join(format!("{n}.ndjson"))).unwrap();
        let ex = fold(n, &ndjson);
        let committed = std::fs::read_to_string(dir.join(format!("{n}.execution.json"))).unwrap();
        let want: Value = serde_json::from_str(&committed)
            .unwrap_or_else(|e| panic!("{n}.execution.json is not JSON: {e}"));
        let got = serde_json::to_value(&ex).unwrap();
        if let Some(d) = first_difference(&got, &want, "$".into()) {
            panic!(
                "fixture {n}: the Rust fold differs from {n}.execution.json at {d} (fold vs file)"
            );
        }
        // The committed file is exactly what the recorder writes (so a re-record diffs cleanly).
        assert_eq!(
            committed,
            render(&ex),
            "fixture {n}: {n}.execution.json is not in the recorder's form"
        );
    }
}

/// One case of the recorder: a fixture name, the execute request, and whether it is run while
/// another task interrupts it.
struct Case {
    name: &'static str,
    body: Value,
    interrupt: bool,
}

/// What the recorded run must show for its fixture to be what its name says.
fn shows_what_it_should(name: &str, ex: &Execution) -> bool {
    use lizard_proto::execution::ExecutionStatus::*;
    let has = |mime: &str| ex.results.iter().any(|r| r.data.contains_key(mime));
    let error = ex.error.as_ref().map(|e| e.name.as_str());
    match name {
        "python_stdout_stderr" => !ex.stdout.is_empty() && !ex.stderr.is_empty(),
        "python_result_and_display" => {
            ex.results.len() == 2 && ex.main_result().is_some() && has("text/html")
        }
        "python_matplotlib_png" => has("image/png"),
        "python_dataframe" => has("text/html") && has(lizard_proto::execution::TABLE_MIME),
        "python_exception" => error == Some("ZeroDivisionError") && ex.status == Some(Error),
        "python_several_results" => ex.results.len() >= 4,
        "python_unicode_split" => ex.stdout.len() >= 2 && ex.stdout_text().contains('🦎'),
        "python_output_truncated" => ex.stderr_text().contains("output truncated"),
        "python_timeout" => error == Some("Timeout") && ex.status == Some(Timeout),
        "python_interrupt" => error == Some("KeyboardInterrupt") && ex.status == Some(Interrupted),
        "javascript_result" => ex.main_result().is_some() && !ex.stdout.is_empty(),
        "javascript_error" => error == Some("TypeError"),
        "bash_exit_status" => error == Some("ExitCode") && ex.status == Some(Error),
        "bash_kernel_died" => error == Some("KernelDied") && ex.status == Some(KernelDied),
        other => panic!("no expectation for {other}"),
    }
}

fn py(name: &'static str, code: &str) -> Case {
    Case {
        name,
        body: json!({"code": code, "language": "python"}),
        interrupt: false,
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![
        py(
            "python_stdout_stderr",
            "import sys\nprint('hello from stdout')\nprint('a warning', file=sys.stderr)\nsys.stdout.write('no newline')",
        ),
        py(
            "python_result_and_display",
            "from IPython.display import display, HTML\ndisplay(HTML('<b>bold</b>'))\n6 * 7",
        ),
        py(
            "python_matplotlib_png",
            "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(1, 1), dpi=20)\nax.plot([1, 2, 3], [1, 4, 9])\nax.set_title('squares')\nplt.show()",
        ),
        py(
            "python_dataframe",
            "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, 18.0]})",
        ),
        py(
            "python_exception",
            "def inner(x):\n    return 1 / x\n\ndef outer():\n    return inner(0)\n\nprint('before')\nouter()",
        ),
        py(
            "python_several_results",
            "from IPython.display import display, Markdown, JSON\ndisplay(Markdown('# Title'))\ndisplay({'a': 1}, raw=False)\ndisplay(JSON({'k': [1, 2]}))\nprint('between')\n'last'",
        ),
        py(
            "python_unicode_split",
            // A 4-byte emoji written in two halves, an invalid byte (U+FFFD), then text in
            // several scripts.
            "import sys\nout = sys.stdout.buffer\nout.write('lizard '.encode() + '🦎'.encode()[:2]); out.flush()\nout.write('🦎'.encode()[2:] + b' \\xff end\\n'); out.flush()\nprint('héllo wörld, 日本語, Ελληνικά, 👍🏽')",
        ),
        py(
            "python_output_truncated",
            // 40 lines of 100 bytes: twice the recording agents' 2048-byte cap.
            "for i in range(40):\n    print(f'{i:02d} ' + 'x' * 96)",
        ),
        Case {
            name: "python_timeout",
            body: json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('not reached')", "language": "python", "timeout_ms": 1500}),
            interrupt: false,
        },
        Case {
            name: "python_interrupt",
            // The marker tells the recorder that the cell runs; then it interrupts it.
            body: json!({"code": "import time\nprint('waiting', flush=True)\nopen('/tmp/fixture-started', 'w').close()\ntime.sleep(60)\nprint('not reached')"}),
            interrupt: true,
        },
        Case {
            name: "javascript_result",
            body: json!({"code": "console.log('from js'); console.error('js stderr');\nconst o = { n: 1 + 1, s: 'two' };\no", "language": "javascript"}),
            interrupt: false,
        },
        Case {
            name: "javascript_error",
            body: json!({"code": "function f() { throw new TypeError('bad thing'); }\nconsole.log('about to throw');\nf();", "language": "javascript"}),
            interrupt: false,
        },
        Case {
            name: "bash_exit_status",
            body: json!({"code": "echo out line\necho err line >&2\n(exit 3)", "language": "bash"}),
            interrupt: false,
        },
        Case {
            // `exit` ends the Bash kernel itself.
            name: "bash_kernel_died",
            body: json!({"code": "echo bye\nexit 3", "language": "bash"}),
            interrupt: false,
        },
    ];
    v.sort_by_key(|c| c.name);
    v
}

/// `POST /execute` with `Accept: application/x-ndjson`: the raw body.
async fn execute_ndjson(addr: &str, key: &str, id: &str, body: &Value) -> String {
    let r = send(
        addr,
        "POST",
        &format!("/v1/sandboxes/{id}/execute"),
        &[
            ("authorization", format!("Bearer {key}")),
            ("content-type", "application/json".into()),
            ("accept", "application/x-ndjson".into()),
        ],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{body}: {}", r.text);
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/x-ndjson"),
        "{body}"
    );
    r.text
}

#[tokio::test]
async fn record_fixtures() {
    if std::env::var("LIZARD_UPDATE_FIXTURES").as_deref() != Ok("1") {
        eprintln!("record_fixtures: skipped (set LIZARD_UPDATE_FIXTURES=1 to re-record tests/fixtures/executions)");
        return;
    }
    lizard_test_support::needs_root!();
    let cap = format!("LIZARD_MAX_OUTPUT_BYTES={MAX_OUTPUT_BYTES}");
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--agent-env", &cap, "--pool-size", "1"],
    );
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let dir = fixtures_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for case in cases() {
        let mut body = case.body.clone();
        let ndjson = if case.interrupt {
            let ctx = context(&s, &id, "python").await;
            body["context"] = json!(ctx);
            let (addr, key, sid) = (s.addr.clone(), s.admin_key.clone(), id.clone());
            let b = body.clone();
            let run = tokio::spawn(async move { execute_ndjson(&addr, &key, &sid, &b).await });
            assert!(
                eventually(Duration::from_secs(60), || async {
                    s.sh(&id, "test -f /tmp/fixture-started && echo yes")
                        .await
                        .0
                        == "yes\n"
                })
                .await,
                "{}: the cell did not start",
                case.name
            );
            let r = s
                .admin(
                    "POST",
                    &format!("/v1/sandboxes/{id}/contexts/{ctx}/interrupt"),
                    None,
                )
                .await;
            assert_eq!(r.status, 204, "{}", r.text);
            run.await.unwrap()
        } else {
            execute_ndjson(&s.addr, &s.admin_key, &id, &body).await
        };
        let ex = fold(case.name, &ndjson);
        assert!(
            shows_what_it_should(case.name, &ex),
            "{}: the recorded run is not what the fixture is for: {ndjson}",
            case.name
        );
        eprintln!(
            "{}: {} frames, status {:?}",
            case.name,
            ndjson.lines().count(),
            ex.status
        );
        std::fs::write(dir.join(format!("{}.ndjson", case.name)), &ndjson).unwrap();
        std::fs::write(
            dir.join(format!("{}.execution.json", case.name)),
            render(&ex),
        )
        .unwrap();
    }
}
