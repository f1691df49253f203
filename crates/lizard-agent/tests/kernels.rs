//! End-to-end tests of kernel behaviour through the agent: statefulness, rich results, errors,
//! streaming, interrupts, timeouts, crashes, big and binary output, parallel contexts.

mod common;

use base64::Engine as _;
use common::*;
use lizard_proto::{ExecutionEvent, ExecutionStatus};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn python_state_and_results() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    assert_eq!(
        a.run_in(&id, "x = 42").await.status,
        Some(ExecutionStatus::Ok)
    );
    assert_eq!(a.run_in(&id, "print(x * 2)").await.stdout_text(), "84\n");
    let r = a
        .run_in(
            &id,
            "import math\ndef f(n):\n    return math.sqrt(n)\nf(16)",
        )
        .await;
    assert_eq!(main_text(&r).as_deref(), Some("4.0"));
    // The last expression only; a trailing semicolon suppresses it (IPython semantics).
    assert!(a.run_in(&id, "f(9);").await.results.is_empty());
    // Magics and shell escapes work because this is IPython.
    let m = a.run_in(&id, "%env LIZARD_T=1\n!echo from-shell").await;
    assert!(m.stdout_text().contains("from-shell"), "{m:?}");
}

#[tokio::test]
async fn python_rich_results() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let df = a
        .run_in(
            &id,
            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})",
        )
        .await;
    let main = df.main_result().expect("main result");
    assert!(main.data["text/html"].as_str().unwrap().contains("<table"));
    assert!(main.data["text/plain"].as_str().unwrap().contains('a'));

    let d = a
        .run_in(
            &id,
            "from IPython.display import display, HTML\nprint('one')\ndisplay(HTML('<b>hi</b>'))\nprint('two')",
        )
        .await;
    assert_eq!(d.results.len(), 1);
    assert!(!d.results[0].is_main_result);
    assert_eq!(d.results[0].data["text/html"], "<b>hi</b>");

    // Order of output and display() is kept in the stream.
    let frames = a
        .stream(json!({"code": "from IPython.display import display, HTML\nprint('one')\ndisplay(HTML('<i>x</i>'))\nprint('two')", "context": id}))
        .await;
    let mut kinds: Vec<&str> = events(&frames)
        .iter()
        .filter(|e| !matches!(e, ExecutionEvent::Start { .. } | ExecutionEvent::End { .. }))
        .map(|e| e.kind())
        .collect();
    kinds.dedup();
    assert_eq!(kinds, ["stdout", "result", "stdout"]);

    let plot = a
        .run_in(
            &id,
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('t')\nplt.show()",
        )
        .await;
    let png = plot
        .results
        .iter()
        .find_map(|r| r.data.get("image/png"))
        .expect("a PNG result");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png.as_str().unwrap())
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");

    // A figure left open at the end of a cell is shown too.
    let open = a
        .run_in(&id, "plt.figure(); plt.bar([1, 2], [3, 4]);")
        .await;
    assert!(
        open.results
            .iter()
            .any(|r| r.data.contains_key("image/png")),
        "{open:?}"
    );

    let json_r = a
        .run_in(&id, "from IPython.display import JSON\nJSON({'k': [1, 2]})")
        .await;
    assert_eq!(
        json_r.main_result().unwrap().data["application/json"],
        json!({"k": [1, 2]})
    );
}

/// PIL images are results as in E2B's kernel: the last value of a cell (its PNG) and `show()` (a
/// display, not an external viewer), with PIL imported by user code only. On the host's kernel
/// environment (Python 3.11); `crates/lizard/tests/stack.rs` checks the same in the template (3.14).
#[tokio::test]
async fn python_pil_images_are_results() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let r = a
        .run_in(
            &id,
            "import sys
'PIL' in sys.modules or 'PIL.Image' in sys.modules",
        )
        .await;
    assert_eq!(main_text(&r).as_deref(), Some("False"), "{r:?}");
    let r = a
        .run_in(
            &id,
            "from PIL import Image
img = Image.new('RGB', (8, 8), 'blue')
img.show()
print('shown')
img",
        )
        .await;
    assert_eq!(r.stdout_text(), "shown\n", "{r:?}");
    let pngs: Vec<bool> = r
        .results
        .iter()
        .filter(|x| x.data.contains_key("image/png"))
        .map(|x| x.is_main_result)
        .collect();
    assert_eq!(pngs, [false, true], "{r:?}");
    let png = r.main_result().unwrap().data["image/png"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png)
        .unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

#[tokio::test]
async fn python_errors_are_typed_and_colourless() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let e = a.run_in(&id, "def g():\n    return 1 / 0\ng()").await;
    assert_eq!(e.status, Some(ExecutionStatus::Error));
    let err = e.error.unwrap();
    assert_eq!(err.name, "ZeroDivisionError");
    assert!(err.value.contains("division by zero"));
    assert!(err.traceback.contains("g()"), "{}", err.traceback);
    assert!(
        !err.traceback.contains('\x1b'),
        "ANSI codes in {:?}",
        err.traceback
    );
    let s = a.run_in(&id, "def (:").await;
    assert_eq!(s.error.unwrap().name, "SyntaxError");
    // The context is still fine.
    assert_eq!(a.run_in(&id, "print('ok')").await.stdout_text(), "ok\n");
}

#[tokio::test]
async fn javascript_state_results_and_errors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("javascript").await;
    assert_eq!(
        main_text(&a.run_in(&id, "1 + 1").await).as_deref(),
        Some("2")
    );
    a.run_in(
        &id,
        "let n = 1; const k = 10; function inc(x) { return x + 1 }; class P { v() { return 7 } }",
    )
    .await;
    assert_eq!(
        main_text(&a.run_in(&id, "inc(n) + k + new P().v()").await).as_deref(),
        Some("19")
    );
    // Redeclaring in a later cell works as in a notebook, not a crash of the context.
    a.run_in(&id, "const k = 20").await;
    assert_eq!(main_text(&a.run_in(&id, "k").await).as_deref(), Some("20"));
    // Top-level await and imports.
    assert_eq!(
        main_text(
            &a.run_in(&id, "await new Promise(r => setTimeout(() => r(5), 10))")
                .await
        )
        .as_deref(),
        Some("5")
    );
    a.run_in(&id, "import path from 'path'").await;
    assert_eq!(
        main_text(&a.run_in(&id, "path.join('a', 'b')").await).as_deref(),
        Some("'a/b'")
    );
    assert_eq!(
        main_text(&a.run_in(&id, "require('os').EOL.length").await).as_deref(),
        Some("1")
    );
    let out = a
        .run_in(&id, "console.log('out'); console.error('err')")
        .await;
    assert_eq!(out.stdout_text(), "out\n");
    assert_eq!(out.stderr_text(), "err\n");
    let html = a.run_in(&id, "display.html('<b>x</b>'); 1").await;
    assert!(html
        .results
        .iter()
        .any(|r| r.data.get("text/html").and_then(|v| v.as_str()) == Some("<b>x</b>")));
    let e = a
        .run_in(
            &id,
            "function boom() { throw new TypeError('bad thing') }\nboom()",
        )
        .await;
    let err = e.error.unwrap();
    assert_eq!(
        (err.name.as_str(), err.value.as_str()),
        ("TypeError", "bad thing")
    );
    assert!(err.traceback.contains("boom"), "{}", err.traceback);
    assert_eq!(
        a.run_in(&id, "let = ;").await.error.unwrap().name,
        "SyntaxError"
    );
    assert_eq!(
        a.run_in(&id, "undefinedThing").await.error.unwrap().name,
        "ReferenceError"
    );
}

/// TypeScript in a JavaScript context: a cell that is not JavaScript but is TypeScript runs with
/// its types stripped (lines and columns kept); JavaScript is never changed; what strip-only
/// TypeScript refuses (enums) and what is neither is a SyntaxError; `typescript`/`ts` name the
/// JavaScript kernel.
#[tokio::test]
async fn typescript_cells_run_in_javascript_contexts() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let (s, v) = a.post("/contexts", json!({"language": "ts"})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["language"], "javascript");
    let id = v["id"].as_str().unwrap().to_string();
    let ex = a
        .run_in(
            &id,
            "interface Point { x: number; y: number }\nconst p: Point = { x: 3, y: 4 };\nfunction norm<T extends Point>(q: T): number { return Math.hypot(q.x, q.y) }\nlet r = norm(p) as number;\nr",
        )
        .await;
    assert_eq!(main_text(&ex).as_deref(), Some("5"), "{ex:?}");
    assert_eq!(ex.stderr_text(), "", "no warning about the stripper");
    // State persists like any cell's, typed or not.
    let ex = a
        .run_in(&id, "const twice = (n: number): number => n * 2; twice(r)")
        .await;
    assert_eq!(main_text(&ex).as_deref(), Some("10"), "{ex:?}");
    let ex = a.run_in(&id, "twice(p.y)").await;
    assert_eq!(main_text(&ex).as_deref(), Some("8"), "{ex:?}");
    // Errors keep their line numbers (types are blanked, not removed).
    let ex = a
        .run_in(
            &id,
            "type T = string;\nconst s: T = 'x';\nthrow new Error('line ' + s)",
        )
        .await;
    let err = ex.error.expect("an error");
    assert_eq!(err.name, "Error");
    assert!(err.traceback.contains(":3"), "{}", err.traceback);
    // Refused TypeScript, and what is neither, are syntax errors.
    let ex = a.run_in(&id, "enum Color { Red }").await;
    let err = ex.error.expect("an error");
    assert_eq!(err.name, "SyntaxError");
    assert!(err.value.contains("enum"), "{}", err.value);
    let ex = a.run_in(&id, "let = = 1").await;
    assert_eq!(ex.error.expect("an error").name, "SyntaxError");
    // JavaScript that a TypeScript stripper would read differently stays JavaScript.
    let ex = a
        .run_in(&id, "const a = 1, b = 2, c = 3; (a < b) > c")
        .await;
    assert_eq!(main_text(&ex).as_deref(), Some("false"), "{ex:?}");
    // Node's "experimental feature" warning about the stripper never reaches the user, not even
    // after the cell that loaded it.
    let ex = a
        .run_in(&id, "await new Promise((r) => setTimeout(r, 50)); 1")
        .await;
    assert_eq!(ex.stderr_text(), "", "{ex:?}");
}

/// Waits (up to a generous deadline) until `cond` holds; false if it never did.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// Spawned JavaScript kernels (and zygotes) share a V8 code cache of their parser (acorn), written
/// by the first one after its warm-up; a corrupt cache is rejected by V8 and written anew, and never
/// breaks a kernel. (Kernels forked from the zygote inherit acorn compiled.)
#[tokio::test]
async fn javascript_parser_code_cache_is_shared_and_survives_corruption() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&["--javascript-zygote", "false"]);
    let cache = a.run_dir().join("acorn.v8cache");
    let id = a.context("javascript").await;
    assert_eq!(
        main_text(&a.run_in(&id, "let {p, q} = {p: 2, q: 3}; p * q").await).as_deref(),
        Some("6")
    );
    let size = || std::fs::metadata(&cache).map(|m| m.len()).unwrap_or(0);
    assert!(
        eventually(|| size() > 10_000).await,
        "no code cache written"
    );

    std::fs::write(&cache, b"not a code cache").unwrap();
    // The next two creates: the second one's kernel starts after the cache was spoiled.
    let _second = a.context("javascript").await;
    let third = a.context("javascript").await;
    let r = a
        .run_in(
            &third,
            "class K { m() { return 7 } }\nconst k = new K(); k.m()",
        )
        .await;
    assert_eq!(main_text(&r).as_deref(), Some("7"), "{r:?}");
    assert!(
        eventually(|| size() > 10_000).await,
        "the spoiled cache was not replaced"
    );
}

#[tokio::test]
async fn bash_state_and_exit_codes() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("bash").await;
    a.run_in(
        &id,
        "cd /tmp; export A=1; B=2; f() { echo \"f:$1\"; }; alias hi='echo hi'",
    )
    .await;
    let out = a.run_in(&id, "pwd; echo $A $B; f x; hi").await;
    assert_eq!(out.stdout_text(), "/tmp\n1 2\nf:x\nhi\n");
    let e = a.run_in(&id, "echo to-err >&2; (exit 3)").await;
    assert_eq!(e.stderr_text(), "to-err\n");
    assert_eq!(e.status, Some(ExecutionStatus::Error));
    let err = e.error.unwrap();
    assert_eq!((err.name.as_str(), err.value.as_str()), ("ExitCode", "3"));
    // Still usable, and a command reading stdin cannot eat the kernel's command stream.
    assert_eq!(
        a.run_in(&id, "cat; read x; echo after").await.stdout_text(),
        "after\n"
    );
    assert_eq!(a.run_in(&id, "echo $A").await.stdout_text(), "1\n");
}

#[tokio::test]
async fn per_run_env_is_visible_only_during_the_run() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for (lang, read) in [
        (
            "python",
            "import os; print(os.environ.get('LZ_T', 'unset'))",
        ),
        ("javascript", "console.log(process.env.LZ_T ?? 'unset')"),
        ("bash", "echo ${LZ_T:-unset}"),
    ] {
        let id = a.context(lang).await;
        let with = a
            .exec(json!({"code": read, "context": id, "env": {"LZ_T": "it's \"v\" $x"}}))
            .await;
        assert_eq!(with.stdout_text(), "it's \"v\" $x\n", "{lang}");
        assert_eq!(a.run_in(&id, read).await.stdout_text(), "unset\n", "{lang}");
    }
}

#[tokio::test]
async fn output_streams_while_the_cell_runs() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for (lang, code) in [
        ("python", "import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.6)"),
        ("javascript", "for (let i = 0; i < 3; i++) { console.log(i); await new Promise(r => setTimeout(r, 600)) }"),
        ("bash", "for i in 0 1 2; do echo $i; sleep 0.6; done"),
    ] {
        let id = a.context(lang).await;
        let frames = a.stream(json!({"code": code, "context": id})).await;
        let outs: Vec<Instant> = frames
            .iter()
            .filter(|(_, f)| matches!(f.event, ExecutionEvent::Stdout { .. }))
            .map(|(t, _)| *t)
            .collect();
        let end = frames.last().unwrap().0;
        let text: String = frames
            .iter()
            .filter_map(|(_, f)| match &f.event {
                ExecutionEvent::Stdout { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "0\n1\n2\n", "{lang}");
        assert!(outs.len() >= 3, "{lang}: output arrived in {} chunks", outs.len());
        // The first line arrived long before the cell ended (the cell sleeps 1.8 s after it).
        assert!(
            end.duration_since(outs[0]) > Duration::from_millis(900),
            "{lang}: first output only {:?} before the end",
            end.duration_since(outs[0])
        );
    }
}

#[tokio::test]
async fn interrupt_stops_the_cell_and_keeps_state() {
    lizard_test_support::needs_root!();
    let a = std::sync::Arc::new(Agent::start());
    for (lang, setup, busy, check) in [
        ("python", "x = 7", "while True: pass", "print(x)"),
        (
            "javascript",
            "var x = 7",
            "while (true) {}",
            "console.log(x)",
        ),
        ("bash", "x=7", "while true; do :; done", "echo $x"),
        (
            "python",
            "x = 7",
            "import time; time.sleep(100)",
            "print(x)",
        ),
        ("bash", "x=7", "sleep 100", "echo $x"),
        (
            "javascript",
            "var x = 7",
            "await new Promise(r => setTimeout(r, 100000))",
            "console.log(x)",
        ),
    ] {
        let id = a.context(lang).await;
        a.run_in(&id, setup).await;
        let runner = {
            let a = a.clone();
            let id = id.clone();
            let busy = busy.to_string();
            tokio::spawn(async move { a.run_in(&id, &busy).await })
        };
        loop {
            let (_, c) = a.call("GET", &format!("/contexts/{id}"), None).await;
            if c["state"] == "busy" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = Instant::now();
        let (s, _) = a
            .call("POST", &format!("/contexts/{id}/interrupt"), None)
            .await;
        assert_eq!(s, 204);
        let ex = runner.await.unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{lang}: interrupt took {:?}",
            t0.elapsed()
        );
        assert_eq!(
            ex.status,
            Some(ExecutionStatus::Interrupted),
            "{lang} {busy}: {ex:?}"
        );
        assert!(ex.error.is_some());
        assert_eq!(
            a.run_in(&id, check).await.stdout_text(),
            "7\n",
            "{lang}: state lost"
        );
    }
}

#[tokio::test]
async fn timeout_interrupts_and_keeps_state() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    a.run_in(&id, "x = 1").await;
    let t0 = Instant::now();
    let ex = a
        .exec(json!({"code": "while True: pass", "context": id, "timeout_ms": 300}))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Timeout));
    assert_eq!(ex.error.as_ref().unwrap().name, "Timeout", "{ex:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let sh = a.context("bash").await;
    let ex = a
        .exec(json!({"code": "sleep 30", "context": sh, "timeout_ms": 300}))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Timeout));
    assert_eq!(ex.error.unwrap().name, "Timeout");
    assert_eq!(a.run_in(&id, "print(x)").await.stdout_text(), "1\n");
}

#[tokio::test]
async fn kernel_ignoring_sigint_is_killed_and_reported() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&["--interrupt-grace-ms", "500"]);
    let id = a.context("python").await;
    let ex = a
        .exec(json!({
            "code": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nx = 1\nwhile True: pass",
            "context": id, "timeout_ms": 300
        }))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::KernelDied));
    let err = ex.error.unwrap();
    assert_eq!(err.name, "KernelDied");
    assert!(err.value.contains("state was lost"), "{}", err.value);
    let (_, c) = a.call("GET", &format!("/contexts/{id}"), None).await;
    assert_eq!(c["kernel_restarts"], 1);
    assert!(c["last_restart_reason"]
        .as_str()
        .unwrap()
        .contains("did not stop"));
    // A fresh kernel answers.
    assert_eq!(a.run_in(&id, "x").await.error.unwrap().name, "NameError");
}

#[tokio::test]
async fn kernel_death_is_an_event_and_the_context_recovers() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for (lang, setup, die, probe) in [
        (
            "python",
            "x = 1",
            "import os; print('bye', flush=True); os._exit(1)",
            "print('x' in globals())",
        ),
        (
            "javascript",
            "var x = 1",
            "console.log('bye'); process.exit(3)",
            "console.log(typeof x !== 'undefined')",
        ),
        ("bash", "x=1", "echo bye; exit 4", "echo ${x:-False}"),
    ] {
        let id = a.context(lang).await;
        a.run_in(&id, setup).await;
        let ex = a.run_in(&id, die).await;
        assert_eq!(
            ex.status,
            Some(ExecutionStatus::KernelDied),
            "{lang}: {ex:?}"
        );
        assert_eq!(
            ex.stdout_text(),
            "bye\n",
            "{lang}: output before death kept"
        );
        let err = ex.error.unwrap();
        assert_eq!(err.name, "KernelDied");
        assert!(err.value.contains("exit code"), "{}", err.value);
        let next = a.run_in(&id, probe).await;
        assert_eq!(next.status, Some(ExecutionStatus::Ok), "{lang}: {next:?}");
        assert_eq!(
            next.stdout_text().to_lowercase(),
            "false\n",
            "{lang}: fresh state"
        );
    }
}

#[tokio::test]
async fn client_disconnect_interrupts_the_cell() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    a.run_in(&id, "x = 5").await;
    {
        use http_body_util::BodyExt;
        let mut body = a
            .stream_open(json!({"code": "import time; time.sleep(60)", "context": id}))
            .await;
        // Wait for `start`, then hang up.
        let _ = body.frame().await;
    }
    let t0 = Instant::now();
    let next = a.run_in(&id, "print(x)").await;
    assert_eq!(next.stdout_text(), "5\n", "{next:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "next run took {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn huge_and_binary_output() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let big = a
        .run_in(
            &id,
            "import sys\nsys.stdout.write('x' * (10 * 1024 * 1024))\nprint()",
        )
        .await;
    assert_eq!(big.stdout_text().len(), 10 * 1024 * 1024 + 1);
    let bin = a
        .run_in(
            &id,
            "import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe\\x00end\\n'); sys.stdout.flush()",
        )
        .await;
    assert_eq!(bin.stdout_text(), "ok\u{FFFD}\u{FFFD}\0end\n");
    let sh = a.context("bash").await;
    let b = a.run_in(&sh, "head -c 100000 /dev/urandom; echo").await;
    assert_eq!(b.status, Some(ExecutionStatus::Ok));
    assert!(!b.stdout_text().is_empty());
    let js = a.context("javascript").await;
    let j = a
        .run_in(
            &js,
            "process.stdout.write('y'.repeat(5 * 1024 * 1024)); 'done'",
        )
        .await;
    assert_eq!(j.stdout_text().len(), 5 * 1024 * 1024);
    assert_eq!(main_text(&j).as_deref(), Some("'done'"));
}

#[tokio::test]
async fn twenty_contexts_in_parallel() {
    lizard_test_support::needs_root!();
    let a = std::sync::Arc::new(Agent::start());
    let langs = ["python", "javascript", "bash"];
    let mut tasks = Vec::new();
    for i in 0..20 {
        let a = a.clone();
        let lang = langs[i % 3];
        tasks.push(tokio::spawn(async move {
            let id = a.context(lang).await;
            let (set, get) = match lang {
                "python" => (format!("v = {i}"), "print(v)"),
                "javascript" => (format!("const v = {i}"), "console.log(v)"),
                _ => (format!("v={i}"), "echo $v"),
            };
            a.run_in(&id, &set).await;
            let out = a.run_in(&id, get).await;
            assert_eq!(out.stdout_text(), format!("{i}\n"), "{lang} #{i}");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, list) = a.call("GET", "/contexts", None).await;
    assert_eq!(list.as_array().unwrap().len(), 20);
}

#[tokio::test]
async fn bash_cells_may_use_low_file_descriptors() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("bash").await;
    let out = a
        .run_in(
            &id,
            "exec 3>/tmp/lz-fd3-$$; echo via-fd3 >&3; exec 3>&-; exec 4</dev/null; echo ok",
        )
        .await;
    assert_eq!(out.stdout_text(), "ok\n");
    assert_eq!(a.run_in(&id, "echo still").await.stdout_text(), "still\n");
}

#[tokio::test]
async fn output_flood_is_truncated_with_a_notice() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&["--max-output-bytes", "1000000"]);
    let id = a.context("python").await;
    let ex = a
        .run_in(&id, "import sys\nfor _ in range(50):\n    sys.stdout.write('x' * 100000 + '\\n')\nprint('done')")
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Ok));
    let out = ex.stdout_text();
    assert!(out.len() <= 1_000_000, "{} bytes got through", out.len());
    assert!(out.len() > 900_000);
    assert!(
        ex.stderr_text().contains("output truncated"),
        "{}",
        ex.stderr_text()
    );
    // The next run has its own budget.
    assert_eq!(a.run_in(&id, "print('next')").await.stdout_text(), "next\n");
}

#[tokio::test]
async fn the_runners_fast_paths_give_what_ipython_gives() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let ex = a
        .run_in(&id, include_str!("python/fast_paths_match_ipython.py"))
        .await;
    assert_eq!(ex.stdout_text(), "mismatches: []\n", "{ex:?}");
    // And the kernel goes on as before: a value, a magic, a shell escape, help.
    let ex = a.run_in(&id, "1+1").await;
    assert_eq!(main_text(&ex).as_deref(), Some("2"), "{ex:?}");
    let ex = a.run_in(&id, "%precision 3\n1/3").await;
    assert_eq!(main_text(&ex).as_deref(), Some("0.333"), "{ex:?}");
    let ex = a.run_in(&id, "!echo shell").await;
    assert_eq!(ex.stdout_text(), "shell\n", "{ex:?}");
}

/// A streamed run that waits for its context (another run in it) gets its answer's head at once,
/// not when it starts: the head waits for `start` only a moment.
#[tokio::test]
async fn a_streamed_run_waiting_for_its_context_gets_its_head_at_once() {
    use http_body_util::BodyExt;
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let id = a.context("python").await;
    let mut first = a
        .stream_open(json!({"code": "import time; time.sleep(60)", "context": id}))
        .await;
    let _start = first.frame().await;
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        a.stream_open(json!({"code": "6 * 7", "context": id})),
    )
    .await
    .expect("the second run's head waited for the first run to end");
    // The first one's client leaves: it is interrupted, and the second runs.
    drop(first);
    let body = tokio::time::timeout(Duration::from_secs(30), second.collect())
        .await
        .expect("the second run did not end")
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"42\""), "{text}");
}
