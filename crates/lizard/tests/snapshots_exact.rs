//! Exact snapshots, clones and forks with the CRIU of `scripts/criu.sh` (`target/criu/criu`, found
//! by `lizard serve` next to its build directory): real server, real sandboxes, real CRIU
//! (docs/ARCHITECTURE.md, "Snapshots and forks"). A source with a Python thread counting, a TCP
//! server started in a cell, a background command writing a file, a Python variable, a JavaScript
//! closure over a local and a Bash variable is snapshotted (method `criu`) and cloned twice, forked,
//! and cloned again after a `kill -9` of the server: in each clone all of it is alive, and a change
//! in one is seen neither in the other nor in the source. A CRIU-restored sandbox (the fork) gets
//! an agent socket of its own; its own snapshot falls back per language, and says why. A clone has its own host ids, host name
//! and network: it cannot reach a server the source started after the snapshot, and finds the
//! source's E2B token nowhere it can read (docs/SECURITY.md, "Exact clones").
//!
//! Skipped, with a message, only when the cached CRIU is not installed (`scripts/test.sh` installs
//! it). The per-language path (`--criu none`) is `snapshots.rs`.

mod common;

use common::*;
use serde_json::{json, Value};

async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> String {
    let ex = s.run(id, json!({"code": code, "context": ctx})).await;
    assert_eq!(ex["status"], "ok", "{id}: {code}: {ex}");
    stdout(&ex)
}

/// The live source's contexts: (python, javascript, bash), and the TCP server's port.
struct Live {
    id: String,
    py: String,
    js: String,
    sh: String,
    port: String,
}

async fn live_source(s: &Server, id: String) -> Live {
    let py = context(s, &id, "python").await;
    let js = context(s, &id, "javascript").await;
    let sh = context(s, &id, "bash").await;
    run_in(s, &id, &py, "x = 41").await;
    run_in(
        s,
        &id,
        &js,
        "const counter = (() => { let c = 0; return () => ++c })(); counter(); counter();",
    )
    .await;
    run_in(s, &id, &sh, "B=bash-kept").await;
    let port = run_in(s, &id, &py, LIVE_PYTHON).await.trim().to_string();
    run_in(s, &id, &sh, LIVE_BASH).await;
    Live {
        id,
        py,
        js,
        sh,
        port,
    }
}

/// In sandbox `id` (the source or a clone of it): the thread counts on, the TCP server answers,
/// the background command runs on as the same process, the variables hold; the closure's local
/// is `closure` after this call.
async fn assert_alive(s: &Server, id: &str, src: &Live, closure: u64) {
    // The thread goes on counting (polled with a deadline, inside the cell).
    let out = run_in(
        s,
        id,
        &src.py,
        "a = n\nt = time.time()\nwhile n == a and time.time() - t < 20: time.sleep(0.01)\nprint(n > a)",
    )
    .await;
    assert_eq!(out, "True\n", "{id}: the thread stopped counting");
    let out = run_in(
        s,
        id,
        &src.py,
        &format!(
            "c = socket.create_connection(('127.0.0.1', {}), timeout=10); print(c.recv(100).decode()); c.close()",
            src.port
        ),
    )
    .await;
    assert_eq!(out, "still here\n", "{id}: the TCP server");
    let out = run_in(
        s,
        id,
        &src.sh,
        "a=$(cat /tmp/bg); for _ in $(seq 400); do b=$(cat /tmp/bg); [ \"$b\" -gt \"$a\" ] && break; sleep 0.05; done; \
         kill -0 $(cat /tmp/bg.pid) && [ \"$b\" -gt \"$a\" ] && echo running",
    )
    .await;
    assert_eq!(out, "running\n", "{id}: the background command");
    assert_eq!(run_in(s, id, &src.py, "print(x + 1)").await, "42\n", "{id}");
    let out = s
        .run(id, json!({"code": "counter()", "context": src.js}))
        .await;
    assert!(
        out.to_string().contains(&format!("\"{closure}\"")),
        "{id}: the closure: {out}"
    );
    assert_eq!(
        run_in(s, id, &src.sh, "echo $B").await,
        "bash-kept\n",
        "{id}"
    );
}

/// What the processes sandbox `id` starts now see as its identity, each as "<LIZARD_SANDBOX_ID>
/// <HOSTNAME> [<uname -n>]": a command (run as the sandbox user and as root), a new Python
/// context's and a new JavaScript context's kernel (forked from zygotes that may predate a
/// restore).
async fn identities(s: &Server, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    for user in ["user", "root"] {
        let cmd = "echo $LIZARD_SANDBOX_ID $HOSTNAME $(uname -n)";
        let r = s.command(id, json!({"cmd": cmd, "user": user})).await;
        out.push(command_stdout(&r).trim().to_string());
    }
    for (language, code) in [
        (
            "python",
            "import os; print(os.environ['LIZARD_SANDBOX_ID'], os.environ['HOSTNAME'], os.uname().nodename)",
        ),
        (
            "javascript",
            "console.log(process.env.LIZARD_SANDBOX_ID, process.env.HOSTNAME, require('os').hostname())",
        ),
    ] {
        let ctx = context(s, id, language).await;
        out.push(run_in(s, id, &ctx, code).await.trim().to_string());
    }
    out
}

/// Every process sandbox `id` starts sees `id` as its identity (see `identities`).
async fn assert_identity(s: &Server, id: &str) {
    let want = format!("{id} {id} {id}");
    for (what, got) in ["command", "root command", "new python", "new javascript"]
        .iter()
        .zip(identities(s, id).await)
    {
        assert_eq!(got, want, "{what} in {id}");
    }
}

async fn snapshot(s: &Server, id: &str) -> Value {
    let r = s
        .post(&format!("/v1/sandboxes/{id}/snapshots"), json!({}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

async fn clone(s: &Server, snap: &str) -> Value {
    let r = s
        .post("/v1/sandboxes", json!({ "snapshot_id": snap }))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

/// A snapshot of sandbox `id`, which must be exact (method `criu`): the answer, and its id.
async fn exact_snapshot(s: &Server, id: &str) -> (Value, String) {
    let snap = snapshot(s, id).await;
    assert_eq!(snap["method"], "criu", "{snap}");
    let snap_id = snap["snapshot_id"].as_str().unwrap().to_string();
    (snap, snap_id)
}

/// The files of a snapshot's CRIU images directory, with their sizes.
fn image_files(images: &std::path::Path) -> Vec<(String, u64)> {
    std::fs::read_dir(images)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (e.file_name().to_string_lossy().into_owned(), m.len())
        })
        .collect()
}

fn exact(answer: &Value) -> String {
    assert_eq!(answer["restore"]["method"], "criu", "{answer}");
    answer["sandbox_id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn exact_clones_are_alive_and_stay_apart() {
    lizard_test_support::needs_root_and_criu!();
    let s = Server::start();
    let (src_id, token) = e2b_create(&s, &s.admin_key.clone()).await;
    let src = live_source(&s, src_id).await;
    // A context with a memory limit of its own: its kernel must be in its limited cgroup in a
    // clone (the clone's, not the source's).
    let limited = context_with(
        &s,
        &src.id,
        json!({"language": "python", "limits": {"memory_mb": 200}}),
    )
    .await;
    run_in(&s, &src.id, &limited, "z = 7").await;
    let (snap, snap_id) = exact_snapshot(&s, &src.id).await;
    eprintln!("snapshot: {}", snap["method_reason"]);
    // How long the source was frozen for it, typed (also in the reason's words).
    let frozen = snap["frozen_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("{snap}"));
    assert!(
        snap["method_reason"]
            .as_str()
            .unwrap()
            .contains(&format!("frozen {frozen} ms")),
        "{snap}"
    );
    // The images are host-side and root's alone.
    let images = s
        .data_dir
        .path()
        .join("snapshots")
        .join(&snap_id)
        .join("criu");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(&images).unwrap();
    assert!(meta.is_dir());
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o700));
    let images_before = image_files(&images);

    let a = clone(&s, &snap_id).await;
    eprintln!("clone: {}", a["restore"]["method_reason"]);
    let a = exact(&a);
    let b = exact(&clone(&s, &snap_id).await);
    assert_ne!(a, b);
    // Every kind of live state, in each clone and in the source.
    assert_alive(&s, &a, &src, 3).await;
    assert_alive(&s, &b, &src, 3).await;
    assert_alive(&s, &src.id, &src, 3).await;
    // A change in one clone is seen neither in the other nor in the source.
    run_in(&s, &a, &src.py, "x = 1000").await;
    run_in(&s, &a, &src.sh, "B=changed; echo a > /home/user/only-a.txt").await;
    assert_eq!(run_in(&s, &a, &src.py, "print(x + 1)").await, "1001\n");
    for other in [&b, &src.id] {
        assert_eq!(run_in(&s, other, &src.py, "print(x + 1)").await, "42\n");
        assert_eq!(run_in(&s, other, &src.sh, "echo $B").await, "bash-kept\n");
        assert_eq!(
            run_in(
                &s,
                other,
                &src.sh,
                "cat /home/user/only-a.txt 2>&1 || echo absent"
            )
            .await
            .lines()
            .last(),
            Some("absent")
        );
    }
    // The snapshot's images are never changed by a restore.
    assert_eq!(images_before, image_files(&images));

    // Each clone is its own sandbox: host ids, host name, processes in its own cgroup.
    let ids = |id: &str| runtime_json(&s, id)["id_base"].as_u64().unwrap();
    assert_ne!(ids(&a), ids(&b));
    assert_ne!(ids(&a), ids(&src.id));
    let (map, _) = s.sh(&a, "cat /proc/self/uid_map").await;
    assert!(
        map.split_whitespace().nth(1) == Some(&ids(&a).to_string()),
        "{map}"
    );
    let (name, _) = s.sh(&a, "cat /proc/sys/kernel/hostname").await;
    assert_eq!(name.trim(), a);
    // Its processes are in its own cgroup (host-side: nothing of the source's).
    let cg = run_in(&s, &a, &src.py, "print(open('/proc/self/cgroup').read())").await;
    assert!(!cg.contains(&src.id), "{cg}");
    // The restored kernels are in their contexts' cgroups, seen through the clone's own cgroup
    // namespace (no host cgroup path), and a context's own limit applies there: host-side, the
    // clone's `ctx/ctx-<id>` has the limit and the kernel, and belongs to the clone's root.
    assert!(cg.contains(&format!("ctx-{}", src.py)), "{cg}");
    assert!(
        !cg.contains("lizard/"),
        "host cgroup paths show in a clone: {cg}"
    );
    let cg = run_in(
        &s,
        &a,
        &limited,
        "print(z); print(open('/proc/self/cgroup').read())",
    )
    .await;
    assert!(cg.starts_with("7\n"), "{cg}");
    assert!(cg.contains(&format!("ctx-{limited}")), "{cg}");
    assert!(!cg.contains("lizard/"), "{cg}");
    let memory = runtime_json(&s, &a)["cgroup"]["memory"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(memory.contains(&a), "{memory}");
    let ctx_dir = std::path::Path::new(&memory).join("ctx");
    let lim_dir = ctx_dir.join(format!("ctx-{limited}"));
    let limit = std::fs::read_to_string(lim_dir.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (200u64 << 20).to_string());
    let procs = std::fs::read_to_string(lim_dir.join("cgroup.procs")).unwrap();
    assert!(
        !procs.trim().is_empty(),
        "the limited context's kernel is not in its cgroup"
    );
    for p in [&ctx_dir, &lim_dir, &lim_dir.join("memory.limit_in_bytes")] {
        let owner = std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(u64::from(owner), ids(&a), "{}", p.display());
    }
    // New contexts with limits of their own start in the clone.
    let fresh = context_with(
        &s,
        &a,
        json!({"language": "python", "limits": {"memory_mb": 100}}),
    )
    .await;
    assert_eq!(run_in(&s, &a, &fresh, "print(6 * 7)").await, "42\n");
    // Every process a clone's agent starts after the restore has the clone's id and host name,
    // not the source's (CRIU restored the source's environment; the handover named the clone's);
    // a kernel restored from the source is an exact copy and keeps the source's.
    let env = "import os; print(os.environ['LIZARD_SANDBOX_ID'])";
    assert_eq!(run_in(&s, &a, &fresh, env).await.trim(), a);
    assert_eq!(run_in(&s, &a, &src.py, env).await.trim(), src.id);
    for id in [&a, &b, &src.id] {
        assert_identity(&s, id).await;
    }
    for id in [&a, &b] {
        let pids = sandbox_pids(&s, id);
        assert!(!pids.is_empty());
        // (A process that exited meanwhile has no ids left to read.)
        for (pid, uid) in pids
            .into_iter()
            .filter_map(|p| host_ids(p, "Uid:").first().map(|u| (p, u64::from(*u))))
        {
            assert!(
                (ids(id)..ids(id) + 65536).contains(&uid),
                "{id}: pid {pid} runs as host uid {uid}"
            );
        }
    }

    // The clone cannot reach the source: a server the source starts now is not there for it.
    let fresh_port = run_in(
        &s,
        &src.id,
        &src.py,
        "srv2 = socket.socket(); srv2.bind(('127.0.0.1', 0)); srv2.listen(); print(srv2.getsockname()[1])",
    )
    .await;
    let out = run_in(
        &s,
        &a,
        &src.py,
        &format!(
            "try:\n    socket.create_connection(('127.0.0.1', {}), timeout=5); print('reached')\nexcept OSError as e:\n    print('refused')",
            fresh_port.trim()
        ),
    )
    .await;
    assert_eq!(out, "refused\n", "a clone reached a port of its source");
    // Nor its credentials: the source's E2B token is held by the server only (derived from the
    // sandbox id), so nothing a clone can read holds it.
    let r = s
        .command(&a, json!({
                // (The token in two halves, joined in a pipe: the scan's own command line and
                // environment never hold it whole.)
                "cmd": format!(
                    "printf '%s%s\\n' '{}' '{}' | grep -rlsF -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline /tmp /home /run /etc 2>/dev/null; echo scanned",
                    &token[..token.len() / 2],
                    &token[token.len() / 2..]
                ),
                "user": "root",
            }))
        .await;
    assert_eq!(command_stdout(&r), "scanned\n", "{r}");
}

#[tokio::test]
async fn exact_fork_and_a_clone_after_a_server_kill_9() {
    lizard_test_support::needs_root_and_criu!();
    let (s, id) = Server::with_sandbox().await;
    let src = live_source(&s, id).await;
    let f = s
        .post(&format!("/v1/sandboxes/{}/fork", src.id), json!({}))
        .await;
    assert_eq!(f.status, 201, "{}", f.text);
    let forked = exact(&f.body);
    assert_alive(&s, &forked, &src, 3).await;
    assert_alive(&s, &src.id, &src, 3).await;
    // A fork keeps no snapshot.
    let list = s.admin("GET", "/v1/snapshots", None).await;
    assert_eq!(list.body.as_array().map(Vec::len), Some(0), "{}", list.text);
    // A sandbox restored by CRIU has an agent socket of its own again (handed over by the
    // server after the restore: the peer check is the usual one) and is dumped exactly again
    // (a snapshot of a fork, cloned: a third generation with all of it, still independent).
    assert!(runtime_json(&s, &forked).get("agent_peer").is_none());
    let (_, again) = exact_snapshot(&s, &forked).await;
    let c = exact(&clone(&s, &again).await);
    assert_alive(&s, &c, &src, 4).await;
    assert_alive(&s, &forked, &src, 4).await;
    // A fork's processes, and those of a clone of a fork (its agent had the fork's id already),
    // have their own sandbox's id.
    assert_identity(&s, &forked).await;
    assert_identity(&s, &c).await;

    // From paused: it stays paused.
    let p = s
        .admin("POST", &format!("/v1/sandboxes/{}/pause", src.id), None)
        .await;
    assert_eq!(p.status, 200, "{}", p.text);
    let (_, snap_id) = exact_snapshot(&s, &src.id).await;
    let g = s
        .admin("GET", &format!("/v1/sandboxes/{}", src.id), None)
        .await;
    assert_eq!(g.body["state"], "paused", "{}", g.text);
    let dir = s.stop("-KILL");
    let s = Server::start_in(dir, &[]);
    let c = exact(&clone(&s, &snap_id).await);
    // The closure was called once more in the source before the snapshot (by assert_alive).
    assert_alive(&s, &c, &src, 4).await;
}

#[tokio::test]
async fn without_criu_snapshots_are_per_language_and_say_why() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let snap = snapshot(&s, &id).await;
    assert_eq!(snap["method"], "per-language", "{snap}");
    let why = snap["method_reason"].as_str().unwrap();
    assert!(why.contains("no usable CRIU (--criu none)"), "{why}");
    let snap_id = snap["snapshot_id"].as_str().unwrap();
    let c = clone(&s, snap_id).await;
    assert_eq!(c["restore"]["method"], "per-language", "{c}");
}

/// A restored agent that takes the server's socket handover and never answers (a test server's
/// fault injection, `LIZARD_TEST_RELISTEN_FAULT=hang`, which only the operator's `--agent-env` can
/// set): the clone's create still answers (the handover gives up at its deadline), the clone runs
/// on the launcher's socket, and the source is served meanwhile.
#[tokio::test]
async fn a_restored_agent_that_never_answers_the_handover_holds_nothing() {
    lizard_test_support::needs_root_and_criu!();
    let s = Server::with_flags("--agent-env LIZARD_TEST_RELISTEN_FAULT=hang");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let py = context(&s, &id, "python").await;
    run_in(&s, &id, &py, "x = 41").await;
    let (_, snap_id) = exact_snapshot(&s, &id).await;
    let (made, served) = tokio::join!(
        tokio::time::timeout(std::time::Duration::from_secs(120), clone(&s, &snap_id)),
        async {
            // The source is served while the clone's agent hangs.
            run_in(&s, &id, &py, "print(x + 1)").await
        }
    );
    assert_eq!(served, "42\n");
    let c = exact(&made.expect("the clone's create did not answer"));
    // It kept the launcher's socket (the peer check expects the launcher), and it works.
    assert!(
        runtime_json(&s, &c).get("agent_peer").is_some(),
        "{}",
        runtime_json(&s, &c)
    );
    assert_eq!(run_in(&s, &c, &py, "print(x + 1)").await, "42\n");
}

/// Sum of `/proc/<pid>/ksm_merging_pages` over a sandbox's processes, and whether any of them
/// has a mergeable mapping of at least `min_bytes` (smaps' `mg` flag).
fn merging(s: &Server, id: &str, min_bytes: u64) -> (u64, bool) {
    let mut pages = 0;
    let mut big_mergeable = false;
    for pid in sandbox_pids(s, id) {
        pages += lizard_jail::ksm::merging_pages(pid as i32);
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        let mut size = 0u64;
        for line in smaps.lines() {
            if let Some(kb) = line.strip_prefix("Size:") {
                size = kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 1024;
            } else if let Some(flags) = line.strip_prefix("VmFlags:") {
                if size >= min_bytes && flags.split_whitespace().any(|f| f == "mg") {
                    big_mergeable = true;
                }
            }
        }
    }
    (pages, big_mergeable)
}

/// With `--share-clone-memory` the clones of one snapshot share the pages they hold alike
/// (same-page merging): 64 MiB of random bytes in a Python context, cloned twice, ends up merged
/// between the clones, while the source (never marked) merges nothing; a write in one clone
/// changes neither the other nor the source (copy-on-write of the merged pages).
#[tokio::test]
async fn clones_share_their_identical_pages_with_share_clone_memory() {
    lizard_test_support::needs_root_and_criu!();
    let s = Server::with_flags("--share-clone-memory");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let py = context(&s, &id, "python").await;
    let digest = "import hashlib; print(hashlib.sha256(state).hexdigest())";
    run_in(
        &s,
        &id,
        &py,
        "import os\nstate = bytearray(os.urandom(64 << 20))",
    )
    .await;
    let want = run_in(&s, &id, &py, digest).await;
    let (_, snap_id) = exact_snapshot(&s, &id).await;
    let a = clone(&s, &snap_id).await;
    assert!(
        a["restore"]["method_reason"]
            .as_str()
            .unwrap()
            .contains("--share-clone-memory"),
        "{a}"
    );
    let a = exact(&a);
    let b = exact(&clone(&s, &snap_id).await);
    for c in [&a, &b] {
        let (_, marked) = merging(&s, c, 64 << 20);
        assert!(marked, "{c}: no mergeable mapping holds the 64 MiB state");
    }
    // The kernel's merging thread scans at the operator's rate: wait for it (no time asserted).
    let merged = eventually(std::time::Duration::from_secs(600), || async {
        merging(&s, &a, 0).0 >= 8192 && merging(&s, &b, 0).0 >= 8192
    })
    .await;
    assert!(
        merged,
        "clones' pages not merged: {:?} / {:?}, {:?}",
        merging(&s, &a, 0),
        merging(&s, &b, 0),
        lizard_jail::ksm::stats()
    );
    assert_eq!(merging(&s, &id, 0), (0, false), "the source was marked");
    // Copy-on-write: a write in one clone is its own.
    run_in(&s, &a, &py, "state[12345] ^= 1").await;
    assert_ne!(run_in(&s, &a, &py, digest).await, want);
    assert_eq!(run_in(&s, &b, &py, digest).await, want);
    assert_eq!(run_in(&s, &id, &py, digest).await, want);
}
