//! Fork of a context through a real agent outside a sandbox (no per-context uids, no delegated
//! cgroups): the live kernel is forked for each language, zygote-forked and spawned kernels alike;
//! a JavaScript kernel spawned with V8's threads is refused. (In a sandbox, with uids and
//! cgroups: `crates/lizard/tests/context_fork.rs`.)

mod common;

use common::*;

async fn fork(a: &Agent, ctx: &str) -> (u16, serde_json::Value) {
    a.call("POST", &format!("/contexts/{ctx}/fork"), None).await
}

fn stdout(ex: &lizard_proto::Execution) -> String {
    ex.stdout.concat()
}

#[tokio::test]
async fn every_language_forks_outside_a_sandbox_too() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    for (lang, set, get) in [
        ("python", "v = [1, 2]", "print(v)"),
        (
            "javascript",
            "globalThis.v = [1, 2]; const g = () => v;",
            "console.log(JSON.stringify(g()))",
        ),
        ("bash", "v='[1, 2]'", "echo \"$v\""),
    ] {
        let ctx = a.context(lang).await;
        let ex = a.run_in(&ctx, set).await;
        assert_eq!(ex.error, None, "{lang}: {ex:?}");
        let (status, body) = fork(&a, &ctx).await;
        assert_eq!(status, 201, "{lang}: {body}");
        assert_eq!(body["forked_from"], ctx.as_str(), "{body}");
        assert_eq!(body["execution_count"], 1, "{body}");
        let new = body["id"].as_str().unwrap().to_string();
        let ex = a.run_in(&new, get).await;
        assert_eq!(stdout(&ex).replace(' ', ""), "[1,2]\n", "{lang}: {ex:?}");
        assert_eq!(ex.execution_count, 2, "{lang}: {ex:?}");
        // The fork's channels are gone from the run dir once it is ready.
        let left: Vec<_> = std::fs::read_dir(a.run_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".fork"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[tokio::test]
async fn a_spawned_python_kernel_forks_and_a_threaded_node_is_refused() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&[
        "--python-zygote",
        "false",
        "--javascript-zygote",
        "false",
        "--javascript-spare",
        "false",
    ]);
    let py = a.context("python").await;
    a.run_in(&py, "z = 5").await;
    let (status, body) = fork(&a, &py).await;
    assert_eq!(status, 201, "{body}");
    let ex = a.run_in(body["id"].as_str().unwrap(), "print(z)").await;
    assert_eq!(stdout(&ex), "5\n", "{ex:?}");

    let js = a.context("javascript").await;
    a.run_in(&js, "globalThis.z = 5").await;
    let (status, body) = fork(&a, &js).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "conflict", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot be forked"),
        "{body}"
    );
    // The refused source is untouched.
    let ex = a.run_in(&js, "console.log(z)").await;
    assert_eq!(stdout(&ex), "5\n", "{ex:?}");
    let (_, list) = a.call("GET", "/contexts", None).await;
    assert_eq!(list.as_array().unwrap().len(), 3, "{list}");
}
