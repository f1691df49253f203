//! Snapshots, clones and forks of running sandboxes (docs/ARCHITECTURE.md, "Snapshots and
//! forks"): real server, real sandboxes and kernels. The tests of the per-language capture ask
//! for it (`--criu none`; CRIU, the default, is `snapshots_exact.rs`); the others run with
//! whatever this host has.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> String {
    let ex = s.run(id, json!({"code": code, "context": ctx})).await;
    assert!(ex["error"].is_null(), "{code}: {ex}");
    stdout(&ex)
}

/// The source's three kernels with state, and a file.
struct Source {
    id: String,
    py: String,
    js: String,
    sh: String,
}

async fn source(s: &Server, key: &str) -> Source {
    let id = s.create(key, json!({})).await;
    let py = context(s, &id, "python").await;
    let js = context(s, &id, "javascript").await;
    let sh = context(s, &id, "bash").await;
    run_in(s, &id, &py, "answer = 41 + 1\nnotes = {'k': [1, 2]}").await;
    run_in(
        s,
        &id,
        &js,
        "let count = 10; function bump() { count += 1; return count; }",
    )
    .await;
    run_in(s, &id, &sh, "GREETING=hello-from-bash").await;
    s.sh(&id, "echo original > /home/user/note.txt").await;
    Source { id, py, js, sh }
}

/// The state a clone must have: the source's variables, closure over a global, file.
async fn assert_has_source_state(s: &Server, id: &str, src: &Source) {
    assert_eq!(
        run_in(s, id, &src.py, "print(answer, notes['k'][1])")
            .await
            .trim(),
        "42 2"
    );
    assert_eq!(
        run_in(s, id, &src.js, "console.log(bump())").await.trim(),
        "11"
    );
    assert_eq!(
        run_in(s, id, &src.sh, "echo $GREETING").await.trim(),
        "hello-from-bash"
    );
    assert_eq!(
        s.sh(id, "cat /home/user/note.txt").await.0.trim(),
        "original"
    );
}

async fn snapshot(s: &Server, key: &str, id: &str) -> Value {
    let r = s
        .post_as(
            key,
            &format!("/v1/sandboxes/{id}/snapshots"),
            json!({"metadata": {"why": "test"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

async fn clone(s: &Server, key: &str, snap: &str) -> Value {
    let r = s
        .post_as(key, "/v1/sandboxes", json!({"snapshot_id": snap}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

#[tokio::test]
async fn clones_have_the_sources_state_and_stay_apart() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let key = s.admin_key.clone();
    let src = source(&s, &key).await;

    let t = Instant::now();
    let snap = snapshot(&s, &key, &src.id).await;
    let snapshot_ms = t.elapsed().as_millis();
    let snap_id = snap["snapshot_id"].as_str().unwrap().to_string();
    assert!(snap_id.starts_with("snap_"), "{snap}");
    assert_eq!(snap["sandbox_id"], src.id.as_str());
    assert_eq!(snap["method"], "per-language", "{snap}");
    assert!(snap["method_reason"]
        .as_str()
        .unwrap()
        .contains("per-language"));
    assert_eq!(snap["metadata"]["why"], "test");
    assert!(snap["size_bytes"].as_u64().unwrap() > 0, "{snap}");
    // Our three contexts, and the default ones the helpers used.
    let ctx_ids = |r: &Value| -> Vec<String> {
        r["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    for c in [&src.py, &src.js, &src.sh] {
        assert!(ctx_ids(&snap).contains(c), "{c} not saved: {snap}");
    }
    // The source kept running, with its kernels intact.
    assert_eq!(
        run_in(&s, &src.id, &src.py, "print(answer)").await.trim(),
        "42"
    );

    let t = Instant::now();
    let a = clone(&s, &key, &snap_id).await;
    let clone_ms = t.elapsed().as_millis();
    let b = clone(&s, &key, &snap_id).await;
    let (a_id, b_id) = (
        a["sandbox_id"].as_str().unwrap().to_string(),
        b["sandbox_id"].as_str().unwrap().to_string(),
    );
    assert_ne!(a_id, b_id);
    assert_ne!(a_id, src.id);
    assert_eq!(a["state"], "running");
    assert_eq!(a["restore"]["method"], "per-language", "{a}");
    for c in [&src.py, &src.js, &src.sh] {
        assert!(ctx_ids(&a["restore"]).contains(c), "{c} not restored: {a}");
    }
    let t = Instant::now();
    assert_has_source_state(&s, &a_id, &src).await;
    let first_result_ms = clone_ms + t.elapsed().as_millis();
    assert_has_source_state(&s, &b_id, &src).await;
    // The clone's kernels know the clone's own id, not the source's (agent-set LIZARD_*
    // variables are not carried over).
    for (ctx, code) in [
        (&src.sh, "echo $LIZARD_SANDBOX_ID $HOSTNAME"),
        (
            &src.py,
            "import os; print(os.environ['LIZARD_SANDBOX_ID'], os.environ['HOSTNAME'])",
        ),
        (
            &src.js,
            "console.log(process.env.LIZARD_SANDBOX_ID, process.env.HOSTNAME)",
        ),
    ] {
        let out = run_in(&s, &a_id, ctx, code).await;
        assert_eq!(out.trim(), format!("{a_id} {a_id}"), "{code}");
    }
    eprintln!(
        "measured: snapshot {snapshot_ms} ms, clone {clone_ms} ms, clone → first results \
         {first_result_ms} ms, snapshot size {} bytes",
        snap["size_bytes"]
    );

    // Each clone has its own host ids, and its files are owned by them.
    let ids = |id: &str| runtime_json(&s, id)["id_base"].as_u64().unwrap();
    assert_ne!(ids(&a_id), ids(&b_id));
    assert_ne!(ids(&a_id), ids(&src.id));
    // (shown inside as the source showed them, never as the overflow id).
    let owner = |id: String| {
        let s = &s;
        async move {
            s.sh(&id, "stat -c %U:%G /home/user/note.txt /home/user")
                .await
                .0
        }
    };
    let shown = owner(a_id.clone()).await;
    assert_eq!(shown, owner(src.id.clone()).await);
    assert!(
        !shown.contains("nobody") && !shown.contains("65534"),
        "{shown}"
    );

    // A change in clone A is seen nowhere else.
    run_in(&s, &a_id, &src.py, "answer = 'changed-in-a'").await;
    s.sh(
        &a_id,
        "echo changed-in-a > /home/user/note.txt; echo new > /home/user/only-a",
    )
    .await;
    assert_eq!(
        run_in(&s, &b_id, &src.py, "print(answer)").await.trim(),
        "42"
    );
    assert_eq!(
        s.sh(&b_id, "cat /home/user/note.txt").await.0.trim(),
        "original"
    );
    assert_eq!(
        run_in(&s, &src.id, &src.py, "print(answer)").await.trim(),
        "42"
    );
    assert_eq!(
        s.sh(&src.id, "cat /home/user/note.txt").await.0.trim(),
        "original"
    );
    // A change in the source after the snapshot is not in a clone made later.
    s.sh(&src.id, "echo changed-in-source > /home/user/note.txt")
        .await;
    s.admin("DELETE", &format!("/v1/sandboxes/{a_id}"), None)
        .await;
    let c = clone(&s, &key, &snap_id).await;
    let c_id = c["sandbox_id"].as_str().unwrap().to_string();
    assert_has_source_state(&s, &c_id, &src).await;
    let (ls, _) = s.sh(&c_id, "ls /home/user/only-a 2>&1 || true").await;
    assert!(ls.contains("No such"), "{ls}");

    // Listing, getting, deleting.
    let list = s
        .admin("GET", &format!("/v1/snapshots?sandbox_id={}", src.id), None)
        .await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.body.as_array().unwrap().len(), 1, "{}", list.text);
    let other = s.admin("GET", "/v1/snapshots?sandbox_id=nope", None).await;
    assert_eq!(other.body.as_array().unwrap().len(), 0);
    let got = s
        .admin("GET", &format!("/v1/snapshots/{snap_id}"), None)
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["snapshot_id"], snap_id.as_str());
    assert!(s
        .data_dir
        .path()
        .join("snapshots")
        .join(&snap_id)
        .join("disk.img")
        .exists());
    let del = s
        .admin("DELETE", &format!("/v1/snapshots/{snap_id}"), None)
        .await;
    assert_eq!(del.status, 204, "{}", del.text);
    assert!(!s.data_dir.path().join("snapshots").join(&snap_id).exists());
    for (m, p) in [
        ("GET", format!("/v1/snapshots/{snap_id}")),
        ("DELETE", format!("/v1/snapshots/{snap_id}")),
    ] {
        let r = s.admin(m, &p, None).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.text);
        assert_eq!(r.body["code"], "not_found");
    }
    let r = s
        .post("/v1/sandboxes", json!({"snapshot_id": snap_id}))
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    // Clones outlive their snapshot.
    assert_eq!(
        run_in(&s, &c_id, &src.py, "print(answer)").await.trim(),
        "42"
    );
    // Usage counts snapshot storage (the deleted one keeps its GiB-hours).
    let u = s.admin("GET", "/v1/projects/default/usage", None).await;
    assert_eq!(u.status, 200, "{}", u.text);
    assert_eq!(
        u.body["snapshots"][0]["snapshot_id"],
        snap_id.as_str(),
        "{}",
        u.text
    );
    assert_eq!(u.body["snapshots"][0]["deleted"], true);
    assert!(u.body["totals"]["snapshot_gib_hours"].as_f64().unwrap() > 0.0);
    // Audited.
    let audit = s.admin("GET", "/v1/audit", None).await;
    let actions: Vec<&str> = audit.body["events"]
        .as_array()
        .or(audit.body.as_array())
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"snapshot.create"), "{actions:?}");
    assert!(actions.contains(&"snapshot.delete"), "{actions:?}");
}

#[tokio::test]
async fn fork_and_a_snapshot_across_a_server_restart() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let key = s.admin_key.clone();
    let src = source(&s, &key).await;
    let t = Instant::now();
    let r = s
        .admin("POST", &format!("/v1/sandboxes/{}/fork", src.id), None)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    eprintln!("measured: fork {} ms", t.elapsed().as_millis());
    let fork = r.body["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(r.body["restore"]["method"], "per-language", "{}", r.text);
    assert_has_source_state(&s, &fork, &src).await;
    // A fork keeps no snapshot.
    let list = s.admin("GET", "/v1/snapshots", None).await;
    assert_eq!(list.body.as_array().unwrap().len(), 0, "{}", list.text);
    assert_eq!(
        std::fs::read_dir(s.data_dir.path().join("snapshots"))
            .unwrap()
            .count(),
        0
    );
    run_in(&s, &fork, &src.py, "answer = 'fork'").await;
    assert_eq!(
        run_in(&s, &src.id, &src.py, "print(answer)").await.trim(),
        "42"
    );

    let snap = snapshot(&s, &key, &src.id).await;
    let snap_id = snap["snapshot_id"].as_str().unwrap().to_string();
    s.kill_all().await;
    let dir = s
        .stop_within("-TERM", Duration::from_secs(60))
        .expect("the server stops");
    let s = Server::start_in(dir, &["--criu", "none"]);
    let key = s.admin_key.clone();
    let got = s
        .admin("GET", &format!("/v1/snapshots/{snap_id}"), None)
        .await;
    assert_eq!(got.status, 200, "{}", got.text);
    let c = clone(&s, &key, &snap_id).await;
    let c_id = c["sandbox_id"].as_str().unwrap().to_string();
    assert_has_source_state(&s, &c_id, &src).await;
}

#[tokio::test]
async fn snapshots_belong_to_their_project_and_bad_input_is_typed() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = s.project_key("snap-a").await;
    let b = s.project_key("snap-b").await;
    let id = s.create(&a, json!({})).await;
    let snap = snapshot(&s, &a, &id).await;
    let snap_id = snap["snapshot_id"].as_str().unwrap().to_string();
    assert_eq!(snap["project"], "snap-a");
    // Another project's key: 404 for everything, never 403, and nothing listed.
    for (m, p, body) in [
        ("GET", format!("/v1/snapshots/{snap_id}"), None),
        ("DELETE", format!("/v1/snapshots/{snap_id}"), None),
        (
            "POST",
            "/v1/sandboxes".to_string(),
            Some(json!({"snapshot_id": snap_id})),
        ),
        ("POST", format!("/v1/sandboxes/{id}/snapshots"), None),
        ("POST", format!("/v1/sandboxes/{id}/fork"), None),
    ] {
        let r = s.req(Some(&b), m, &p, body).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.text);
        assert_eq!(r.body["code"], "not_found", "{}", r.text);
    }
    let list = s.req(Some(&b), "GET", "/v1/snapshots", None).await;
    assert_eq!(list.body.as_array().unwrap().len(), 0, "{}", list.text);
    let list = s.req(Some(&a), "GET", "/v1/snapshots", None).await;
    assert_eq!(list.body.as_array().unwrap().len(), 1, "{}", list.text);
    // The admin sees it.
    let list = s.admin("GET", "/v1/snapshots", None).await;
    assert_eq!(list.body.as_array().unwrap().len(), 1, "{}", list.text);
    // Bad input: typed 4xx.
    for (body, status) in [
        (json!({"snapshot_id": "snap_aaaaaaaaaaaaaaaaaaaa"}), 404),
        (json!({"snapshot_id": "../../etc/passwd"}), 404),
        (
            json!({"snapshot_id": snap_id, "template": "code-interpreter-v1"}),
            400,
        ),
        (json!({"snapshot_id": snap_id, "env": {"A": "b"}}), 400),
        (json!({"snapshot_id": snap_id, "timeout_ms": 0}), 400),
    ] {
        let r = s.post_as(&a, "/v1/sandboxes", body.clone()).await;
        assert_eq!(r.status, status, "{body}: {}", r.text);
        assert!(r.body["code"].is_string(), "{}", r.text);
    }
    let r = s
        .post_as(
            &a,
            &format!("/v1/sandboxes/{id}/snapshots"),
            json!({"bogus": 1}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = s
        .req(Some(&a), "GET", "/v1/snapshots/snap_nope", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    // A killed sandbox has nothing to snapshot or fork.
    s.req(Some(&a), "DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    for op in ["snapshots", "fork"] {
        let r = s
            .req(Some(&a), "POST", &format!("/v1/sandboxes/{id}/{op}"), None)
            .await;
        assert_eq!(r.status, 404, "{op}: {}", r.text);
    }
    // The snapshot outlives its source, and a clone of it works.
    let c = clone(&s, &a, &snap_id).await;
    assert_eq!(c["project"], "snap-a");
}

/// The sandbox plants links to host paths, a fifo, a huge sparse file and a fake saved state
/// (as its root: it may replace what its agent wrote) where the snapshot's state lives: the
/// host copies and shifts without following or reading any of it, the clone only ever sees its
/// own files, and a lying saved state only costs the clone its contexts.
#[tokio::test]
async fn a_hostile_sandbox_cannot_make_the_host_follow_or_read_its_saved_state() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let key = s.admin_key.clone();
    let id = s.create(&key, json!({})).await;
    let py = context(&s, &id, "python").await;
    run_in(&s, &id, &py, "x = 7").await;
    // A host file the links point at: its owner and contents must not change.
    let host = s.data_dir.path().join("host-secret");
    std::fs::write(&host, "host only").unwrap();
    let host_path = host.display().to_string();
    let r = s.root_cmd(
        &id,
        &format!(
            "ln -s {host_path} /home/user/to-host && ln -s / /home/user/root-link && \
             mkfifo /home/user/fifo && truncate -s 200G /home/user/huge 2>/dev/null; \
             truncate -s 900M /home/user/big && \
             mkdir -p /run/lizard/snapshot && ln -sfn {host_path} /run/lizard/snapshot/manifest.json && \
             chattr +i /run/lizard 2>/dev/null; echo planted"
        ),
    )
    .await;
    assert!(stdout_of(&r).contains("planted"), "{r}");
    let snap = snapshot(&s, &key, &id).await;
    let snap_id = snap["snapshot_id"].as_str().unwrap();
    // The copy is bounded by the sandbox's disk size, whatever the sandbox claims.
    let limit = 1024 * 1024 * 1024 + (1 << 20);
    assert!(snap["size_bytes"].as_u64().unwrap() < limit, "{snap}");
    let c = clone(&s, &key, snap_id).await;
    let c_id = c["sandbox_id"].as_str().unwrap().to_string();
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&host).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "the host file was chowned");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "host only");
    // Inside the clone the links resolve in the clone's own root.
    let (out, _) = s
        .sh(
            &c_id,
            "cat /home/user/to-host 2>&1; ls -la /home/user/fifo | cut -c1",
        )
        .await;
    assert!(!out.contains("host only"), "{out}");
    assert!(out.contains('p'), "{out}");
    // Now the agent "lies": the saved state is replaced by a link to a host path after the
    // snapshot is written (the clone's restore reads it inside the clone only).
    let r = s
        .root_cmd(
            &c_id,
            &format!(
                "rm -rf /run/lizard/snapshot; mkdir -p /run/lizard/snapshot && \
             ln -s {host_path} /run/lizard/snapshot/manifest.json && echo lied"
            ),
        )
        .await;
    assert!(stdout_of(&r).contains("lied"), "{r}");
    let snap2 = snapshot(&s, &key, &c_id).await;
    let c2 = clone(&s, &key, snap2["snapshot_id"].as_str().unwrap()).await;
    assert_eq!(c2["state"], "running", "{c2}");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "host only");
}

fn stdout_of(r: &Value) -> String {
    r["stdout"].as_str().unwrap_or_default().to_string()
}

/// The hostile agent (`lizard-hostile-agent`), built next to the `lizard` binary.
fn hostile_agent() -> std::path::PathBuf {
    let p = std::path::PathBuf::from(env!("CARGO_BIN_EXE_lizard"))
        .with_file_name("lizard-hostile-agent");
    assert!(
        p.is_file(),
        "{} is missing: cargo build --workspace",
        p.display()
    );
    p
}

/// An agent that hangs, floods or lies when asked to save its state: the snapshot and the fork
/// fail with a typed error within the agent deadline, nothing is kept, the source is not left
/// frozen, and an ordinary sandbox's snapshot meanwhile is unaffected.
#[tokio::test]
async fn a_hostile_agent_cannot_hang_flood_or_fool_a_snapshot() {
    lizard_test_support::needs_root!();
    let wrapper = hostile_agent();
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &[
            "--agent-wrapper",
            wrapper.to_str().unwrap(),
            "--pool-size",
            "0",
            "--agent-hibernate-timeout",
            "5s",
        ],
    );
    let key = s.admin_key.clone();
    let plain = s.create(&key, json!({})).await;
    s.run(&plain, json!({"code": "kept = 5"})).await;
    for mode in ["hang", "flood", "lie"] {
        let id = s
            .create(
                &key,
                json!({"env": {"HOSTILE_AGENT": mode}, "timeout_ms": 600_000}),
            )
            .await;
        for op in ["snapshots", "fork"] {
            let r = tokio::time::timeout(Duration::from_secs(120), s.act(&id, op))
                .await
                .unwrap_or_else(|_| panic!("{mode} {op}: no answer"));
            assert!(r.status >= 400, "{mode} {op}: {} {}", r.status, r.text);
            assert!(r.body["code"].is_string(), "{mode} {op}: {}", r.text);
        }
        // Nothing kept, nothing half-made; the sandbox is not left frozen.
        let list = s.admin("GET", "/v1/snapshots", None).await;
        assert_eq!(
            list.body.as_array().unwrap().len(),
            0,
            "{mode}: {}",
            list.text
        );
        let dirs = std::fs::read_dir(s.data_dir.path().join("snapshots"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(dirs, 0, "{mode}: snapshot files left");
        let info = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
        assert_eq!(info.body["state"], "running", "{mode}: {}", info.text);
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None),
        )
        .await
        .expect("the kill returns");
        assert!(r.status < 300, "{}", r.text);
    }
    // The ordinary sandbox snapshots and clones as usual.
    let snap = snapshot(&s, &key, &plain).await;
    let c = clone(&s, &key, snap["snapshot_id"].as_str().unwrap()).await;
    let ex = s
        .run(
            c["sandbox_id"].as_str().unwrap(),
            json!({"code": "print(kept)"}),
        )
        .await;
    assert_eq!(stdout(&ex).trim(), "5", "{ex}");
}

/// The CLI (through the Rust client) and the OpenAPI document cover snapshots.
#[tokio::test]
async fn the_cli_and_the_openapi_document_cover_snapshots() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&id, json!({"code": "v = 'from-cli'"})).await;
    let (code, out, err) = s.cli(&["snapshot", "create", &id, "--metadata", "k=v"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("method    per-language"), "{out}");
    let snap = out.lines().last().unwrap().trim().to_string();
    assert!(snap.starts_with("snap_"), "{out}");
    let (code, out, err) = s.cli(&["snapshot", "list", "--sandbox", &id], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&snap), "{out}");
    let (code, out, err) = s.cli(&["sandbox", "create", "--snapshot", &snap], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored"), "{out}");
    let clone = out.lines().last().unwrap().trim().to_string();
    let ex = s.run(&clone, json!({"code": "print(v)"})).await;
    assert_eq!(stdout(&ex).trim(), "from-cli", "{ex}");
    let (code, out, err) = s.cli(&["sandbox", "fork", &id, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let fork: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(fork["restore"]["method"], "per-language", "{out}");
    let (code, _, err) = s.cli(&["snapshot", "delete", &snap], None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = s.cli(&["snapshot", "delete", &snap], None);
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");

    let doc = s.req(None, "GET", "/v1/openapi.json", None).await.body;
    for p in [
        "/v1/sandboxes/{id}/snapshots",
        "/v1/sandboxes/{id}/fork",
        "/v1/snapshots",
        "/v1/snapshots/{snapshot}",
    ] {
        assert!(
            doc["paths"][p].is_object(),
            "{p} not in the OpenAPI document"
        );
    }
    for sch in [
        "SnapshotInfo",
        "CreateSnapshotRequest",
        "ForkSandboxRequest",
        "SnapshotUsage",
    ] {
        assert!(doc["components"]["schemas"][sch].is_object(), "{sch}");
    }
    assert!(
        doc["components"]["schemas"]["CreateSandboxRequest"]["properties"]["snapshot_id"]
            .is_object()
    );
}
