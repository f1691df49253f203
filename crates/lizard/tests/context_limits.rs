//! Per-context cgroups and limits: each context's kernel in a cgroup of its own inside the
//! sandbox's, with optional memory and CPU limits at context creation. Real server, real
//! sandboxes, measured from the cgroups themselves.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

async fn context(s: &Server, id: &str, body: Value) -> Value {
    let r = s.post(&format!("/v1/sandboxes/{id}/contexts"), body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

async fn py(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    s.run(id, json!({"code": code, "context": ctx})).await
}

async fn delete_context(s: &Server, id: &str, cid: &str) {
    let r = s
        .admin(
            "DELETE",
            &format!("/v1/sandboxes/{id}/contexts/{cid}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
}

/// The host directory of a sandbox's cgroup in the v1 memory hierarchy (the test runs as root).
fn host_memory_cgroup(id: &str) -> Option<PathBuf> {
    host_cgroup("/sys/fs/cgroup/memory", id)
}

/// A context over its memory limit loses its kernel alone: the run ends with `KernelDied`, the
/// context gets a fresh kernel (in the same cgroup, still limited), and a sibling context keeps
/// its state. The context reports its limits and its memory use; the kernel is in the context's
/// own cgroup; killing the sandbox leaves no cgroup behind.
#[tokio::test]
async fn memory_bomb_in_a_limited_context_dies_alone() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let limited = context(
        &s,
        &id,
        json!({"language": "python", "limits": {"memory_mb": 128}}),
    )
    .await;
    assert_eq!(limited["limits"]["memory_mb"], 128, "{limited}");
    // A kernel forked from the zygote starts with almost nothing of its own charged (the pages it
    // shares with the zygote stay where they were): the figure is there, and grows with use.
    assert!(limited["memory_bytes"].as_u64().is_some(), "{limited}");
    let lid = limited["id"].as_str().unwrap().to_string();
    let sibling = context(&s, &id, json!({"language": "python"})).await;
    assert!(sibling.get("limits").is_none(), "{sibling}");
    let sid = sibling["id"].as_str().unwrap().to_string();

    py(&s, &id, &sid, "x = 42").await;
    // The kernel runs in its context's cgroup (paths are relative to the sandbox's cgroup).
    let ex = py(
        &s,
        &id,
        &lid,
        "held = bytearray(32 << 20)\nprint(open('/proc/self/cgroup').read())",
    )
    .await;
    let cg = stdout(&ex);
    let info = s
        .admin("GET", &format!("/v1/sandboxes/{id}/contexts/{lid}"), None)
        .await
        .body;
    assert!(
        info["memory_bytes"].as_u64().unwrap() >= 32 << 20,
        "what the context allocates is charged to it: {info}"
    );
    assert!(
        cg.lines()
            .any(|l| l.ends_with(&format!(":memory:/ctx/ctx-{lid}"))),
        "{cg}"
    );

    let ex = py(&s, &id, &lid, "b = b'x' * (400 << 20)\nprint('survived')").await;
    assert_eq!(ex["status"], "kernel_died", "{ex}");
    assert_eq!(ex["error"]["name"], "KernelDied", "{ex}");
    let msg = ex["error"]["value"].as_str().unwrap_or_default();
    assert!(
        msg.contains("out-of-memory") && msg.contains("128 MiB"),
        "{ex}"
    );
    assert!(!stdout(&ex).contains("survived"), "{ex}");

    // The sibling kept its state; the limited context works again, still limited.
    let ex = py(&s, &id, &sid, "print(x)").await;
    assert_eq!(stdout(&ex), "42\n", "{ex}");
    let ex = py(&s, &id, &lid, "print(1 + 1)").await;
    assert_eq!(stdout(&ex), "2\n", "{ex}");
    let info = s
        .admin("GET", &format!("/v1/sandboxes/{id}/contexts/{lid}"), None)
        .await
        .body;
    assert_eq!(info["kernel_restarts"], 1, "{info}");
    assert_eq!(info["limits"]["memory_mb"], 128, "{info}");
    let ex = py(
        &s,
        &id,
        &lid,
        "print(open('/proc/self/cgroup').read())\nb = b'x' * (400 << 20)",
    )
    .await;
    assert_eq!(
        ex["status"], "kernel_died",
        "the new kernel is limited too: {ex}"
    );

    // Kill: the sandbox's cgroup goes, with the contexts' cgroups in it.
    let host = host_memory_cgroup(&id).expect("the sandbox's memory cgroup");
    assert!(host.join(format!("ctx/ctx-{lid}")).is_dir());
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(!host.exists(), "{} left behind", host.display());
}

/// A CPU-limited context's busy loop gets no more than its quota, measured from the context's
/// own `cpuacct.usage` over 2 s; the CFS throttling counters show the quota at work.
#[tokio::test]
async fn cpu_quota_is_respected() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let c = context(
        &s,
        &id,
        json!({"language": "python", "limits": {"cpu_millicores": 200}}),
    )
    .await;
    assert_eq!(c["limits"]["cpu_millicores"], 200, "{c}");
    let cid = c["id"].as_str().unwrap();
    let code = format!(
        "import time\n\
         u = lambda: int(open('/sys/fs/cgroup/cpuacct/ctx-{cid}/cpuacct.usage').read())\n\
         u0, t0 = u(), time.monotonic()\n\
         while time.monotonic() - t0 < 2.0:\n    pass\n\
         print((u() - u0) / 1e9 / (time.monotonic() - t0))\n\
         print(open('/sys/fs/cgroup/cpu/ctx-{cid}/cpu.stat').read())"
    );
    let ex = py(&s, &id, cid, &code).await;
    let out = stdout(&ex);
    let cores: f64 = out.lines().next().unwrap().parse().unwrap();
    assert!(
        cores <= 0.3,
        "a 200-millicore context used {cores} cores: {out}"
    );
    assert!(cores > 0.05, "the loop hardly ran ({cores} cores): {out}");
    let throttled: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(throttled > 0, "{out}");
}

/// Limits above the sandbox's own, below the minimums, or malformed are refused with a typed 400;
/// nothing is created.
#[tokio::test]
async fn limits_above_the_sandboxs_are_refused() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = s
        .create(
            &s.admin_key.clone(),
            json!({"limits": {"memory_mb": 512, "cpu_millicores": 500}}),
        )
        .await;
    // The sandbox's default context is prestarted in the background and may appear at any time
    // (later with the shared zygote, which joins after the agent answers): count the others.
    let others = |body: serde_json::Value| {
        body.as_array()
            .map(|a| a.iter().filter(|c| c["is_default"] != json!(true)).count())
    };
    let before = others(
        s.admin("GET", &format!("/v1/sandboxes/{id}/contexts"), None)
            .await
            .body,
    );
    for (limits, words) in [
        (json!({"memory_mb": 1024}), "512 MiB"),
        (json!({"cpu_millicores": 1000}), "500 millicores"),
        (json!({"memory_mb": 1}), "at least"),
        (json!({"cpu_millicores": 1}), "at least"),
        (json!({"memory": 64}), "unknown field"),
        (json!({"memory_mb": -5}), "invalid"),
    ] {
        let r = s
            .post(
                &format!("/v1/sandboxes/{id}/contexts"),
                json!({"language": "python", "limits": limits}),
            )
            .await;
        assert_eq!(r.status, 400, "{limits}: {}", r.text);
        assert_eq!(r.body["code"], "invalid_request", "{}", r.text);
        assert!(
            r.body["message"].as_str().unwrap().contains(words),
            "{}",
            r.text
        );
    }
    let after = others(
        s.admin("GET", &format!("/v1/sandboxes/{id}/contexts"), None)
            .await
            .body,
    );
    assert_eq!(before, after);
    // At the sandbox's limits exactly is fine.
    let c = context(
        &s,
        &id,
        json!({"language": "bash", "limits": {"memory_mb": 512, "cpu_millicores": 500}}),
    )
    .await;
    assert_eq!(c["limits"]["memory_mb"], 512);
}

/// Contexts without limits get a cgroup of their own too (per-context accounting); deleting a
/// context removes it.
#[tokio::test]
async fn unlimited_contexts_are_accounted_and_cleaned_up() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let c = context(&s, &id, json!({"language": "javascript"})).await;
    let cid = c["id"].as_str().unwrap().to_string();
    // A kernel forked from the zygote starts with (nearly) nothing of its own: the pages it shares
    // with the zygote stay the sandbox's. What it allocates is its context's.
    py(
        &s,
        &id,
        &cid,
        "globalThis.keep = Buffer.alloc(48 << 20, 1); 0",
    )
    .await;
    let info = s
        .admin("GET", &format!("/v1/sandboxes/{id}/contexts/{cid}"), None)
        .await;
    assert!(
        info.body["memory_bytes"].as_u64().unwrap() > 40 << 20,
        "{}",
        info.text
    );
    let host = host_memory_cgroup(&id).unwrap();
    let dir = host.join(format!("ctx/ctx-{cid}"));
    assert!(dir.is_dir());
    delete_context(&s, &id, &cid).await;
    assert!(
        eventually(Duration::from_secs(15), || {
            let d = dir.clone();
            async move { !d.exists() }
        })
        .await,
        "{} left behind",
        dir.display()
    );
}

/// A context's limits survive hibernation: the resumed context has the same limits and its kernel
/// is in its own, limited cgroup again.
#[tokio::test]
async fn limits_survive_hibernation() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let c = context(
        &s,
        &id,
        json!({"language": "python", "limits": {"memory_mb": 200, "cpu_millicores": 300}}),
    )
    .await;
    let cid = c["id"].as_str().unwrap().to_string();
    py(&s, &id, &cid, "y = 5").await;
    for op in ["hibernate", "resume"] {
        let r = s.act(&id, op).await;
        assert_eq!(r.status, 200, "{op}: {}", r.text);
    }
    let info = s
        .admin("GET", &format!("/v1/sandboxes/{id}/contexts/{cid}"), None)
        .await
        .body;
    assert_eq!(
        info["limits"],
        json!({"memory_mb": 200, "cpu_millicores": 300}),
        "{info}"
    );
    let ex = py(
        &s,
        &id,
        &cid,
        &format!(
            "print(y)\nprint(open('/sys/fs/cgroup/memory/ctx-{cid}/memory.limit_in_bytes').read().strip())"
        ),
    )
    .await;
    assert_eq!(stdout(&ex), format!("5\n{}\n", 200u64 << 20), "{ex}");
}

/// JavaScript contexts (the first spawned, later ones taken from the spare kernel, whose own cgroup
/// is renamed to the context's) each run in their context's cgroup with the context's limits.
#[tokio::test]
async fn javascript_contexts_get_their_cgroup_and_limits() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    for mb in [64u64, 96, 128] {
        let c = context(
            &s,
            &id,
            json!({"language": "javascript", "limits": {"memory_mb": mb}}),
        )
        .await;
        let cid = c["id"].as_str().unwrap().to_string();
        let code = format!(
            "const fs = require('fs');\n\
             console.log(fs.readFileSync('/proc/self/cgroup', 'utf8').split('\\n')\
             .find((l) => l.includes(':memory:')));\n\
             console.log(fs.readFileSync('/sys/fs/cgroup/memory/ctx-{cid}/memory.limit_in_bytes', 'utf8').trim());"
        );
        let ex = s.run(&id, json!({"code": code, "context": cid})).await;
        let out = stdout(&ex);
        let mut lines = out.lines();
        assert!(
            lines
                .next()
                .is_some_and(|l| l.ends_with(&format!(":memory:/ctx/ctx-{cid}"))),
            "{ex}"
        );
        assert_eq!(lines.next(), Some((mb << 20).to_string().as_str()), "{ex}");
    }
}

/// Kernels forked from a zygote (and spare JavaScript kernels) start in the zygote's current
/// "nursery" cgroup, which becomes their context's by renaming (limits written): afterwards each
/// context's cgroup holds its kernel alone (the zygote has moved on to a fresh nursery), with its
/// limits, and old nurseries do not pile up.
#[tokio::test]
async fn forked_kernels_start_in_their_contexts_cgroup() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let ctx_dir = host_memory_cgroup(&id).unwrap().join("ctx");
    let nurseries = || {
        std::fs::read_dir(&ctx_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ctx-nursery-"))
            .count()
    };
    for (language, code) in [
        ("python", "import os; print(os.getpid())"),
        ("javascript", "console.log(process.pid)"),
    ] {
        for _ in 0..3 {
            let c = context(
                &s,
                &id,
                json!({"language": language, "limits": {"memory_mb": 200}}),
            )
            .await;
            let cid = c["id"].as_str().unwrap().to_string();
            let ex = py(&s, &id, &cid, code).await;
            assert_eq!(ex["status"], "ok", "{ex}");
            let dir = ctx_dir.join(format!("ctx-{cid}"));
            let limit = std::fs::read_to_string(dir.join("memory.limit_in_bytes")).unwrap();
            assert_eq!(limit.trim(), (200u64 << 20).to_string(), "{language}");
            let alone = || {
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .map(|p| p.lines().count() == 1)
                    .unwrap_or(false)
            };
            assert!(
                eventually(Duration::from_secs(15), || async { alone() }).await,
                "{language}: {:?}",
                std::fs::read_to_string(dir.join("cgroup.procs"))
            );
            delete_context(&s, &id, &cid).await;
        }
    }
    // One nursery per zygote (Python, JavaScript), plus the one the spare JavaScript kernel was
    // forked in (it becomes the next JavaScript context's), once the moves are done.
    assert!(
        eventually(Duration::from_secs(30), || async { nurseries() == 3 }).await,
        "{} nurseries",
        nurseries()
    );
}
