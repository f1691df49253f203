//! Fork of a context (`POST /v1/sandboxes/{id}/contexts/{ctx}/fork`): the new context's kernel is
//! a copy-on-write fork of the source's live kernel (Python, JavaScript, Bash). Real server, real
//! sandboxes and kernels.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

async fn context(s: &Server, id: &str, language: &str) -> String {
    let r = s
        .admin(
            "POST",
            &format!("/v1/sandboxes/{id}/contexts"),
            Some(json!({ "language": language })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["id"].as_str().unwrap().to_string()
}

async fn fork(s: &Server, id: &str, ctx: &str) -> Resp {
    s.admin(
        "POST",
        &format!("/v1/sandboxes/{id}/contexts/{ctx}/fork"),
        None,
    )
    .await
}

/// Fork `ctx`, expecting success; returns the answer.
async fn forked(s: &Server, id: &str, ctx: &str) -> Value {
    let r = fork(s, id, ctx).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["forked_from"], ctx, "{}", r.text);
    assert_ne!(r.body["id"], ctx, "{}", r.text);
    r.body
}

async fn run(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    s.run(id, json!({ "code": code, "context": ctx })).await
}

/// Run and return stdout, asserting the run succeeded.
async fn out(s: &Server, id: &str, ctx: &str, code: &str) -> String {
    let ex = run(s, id, ctx, code).await;
    assert_eq!(ex["status"], "ok", "{code}: {ex}");
    stdout(&ex)
}

async fn get_context(s: &Server, id: &str, ctx: &str) -> Resp {
    s.admin("GET", &format!("/v1/sandboxes/{id}/contexts/{ctx}"), None)
        .await
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

/// Python: the fork holds the source's variables, functions and imports, and its execution count;
/// then the two diverge. Forking twice, and forking a fork, work the same way.
#[tokio::test]
async fn a_python_fork_has_the_sources_state_and_then_diverges() {
    let s = Server::start();
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let a = context(&s, &id, "python").await;
    out(&s, &id, &a, "import math\nx = 41\ndef f(): return x + 1").await;
    out(&s, &id, &a, "x += 1").await;

    let b = forked(&s, &id, &a).await;
    assert_eq!(b["language"], "python", "{b}");
    assert_eq!(
        b["execution_count"], 2,
        "the fork goes on from the source's count: {b}"
    );
    assert_eq!(b["lost"], json!([]), "{b}");
    let b = id_of(&b);
    let ex = run(&s, &id, &b, "print(x, f(), math.pi > 3)").await;
    assert_eq!(stdout(&ex), "42 43 True\n", "{ex}");
    assert_eq!(ex["execution_count"], 3, "{ex}");

    // Divergence: each change stays in its context.
    out(&s, &id, &b, "x = 'fork'").await;
    out(&s, &id, &a, "x = 'source'").await;
    assert_eq!(out(&s, &id, &a, "print(x)").await, "source\n");
    assert_eq!(out(&s, &id, &b, "print(x)").await, "fork\n");
    // Different processes, each its own group leader, both children of the agent.
    let pa = out(
        &s,
        &id,
        &a,
        "import os; print(os.getpid(), os.getpgid(0), os.getppid())",
    )
    .await;
    let pb = out(
        &s,
        &id,
        &b,
        "import os; print(os.getpid(), os.getpgid(0), os.getppid())",
    )
    .await;
    let (va, vb): (Vec<&str>, Vec<&str>) = (
        pa.split_whitespace().collect(),
        pb.split_whitespace().collect(),
    );
    assert_ne!(va[0], vb[0], "{pa} {pb}");
    assert_eq!(vb[0], vb[1], "the fork leads its own process group: {pb}");
    assert_eq!(va[2], vb[2], "both are the agent's children: {pa} {pb}");

    // A second fork of the source, and a fork of the fork.
    let c = id_of(&forked(&s, &id, &a).await);
    assert_eq!(out(&s, &id, &c, "print(x)").await, "source\n");
    let d = id_of(&forked(&s, &id, &b).await);
    assert_eq!(out(&s, &id, &d, "print(x, f.__name__)").await, "fork f\n");
    s.kill_all().await;
}
