//! Hibernation's method selection with the CRIU of `scripts/criu.sh` (`target/criu/criu`, found by
//! `lizard serve` next to its build directory) and without it (`--criu none`). Real server, real
//! sandboxes, real CRIU.
//!
//! The sandbox's user namespace owns its other namespaces, so CRIU dumps a real sandbox (left
//! running). With a usable CRIU (the default) the checkpoint is kept (host-side,
//! root-only, across a server `kill -9`), the hibernation reports `criu`, and the resume restores
//! the sandbox exactly: a Python variable, a JavaScript closure over a local, a Bash variable, a
//! thread still counting, a TCP server started in a cell still answering, a background command
//! still running (the same process) — twice: a sandbox restored by CRIU is checkpointed exactly
//! again. A dump that fails falls back to the per-language save (the sandbox runs on); a restore
//! that fails relaunches with fresh contexts and says why (an exact hibernation is the checkpoint
//! alone); `--criu none` is per-language only.
//!
//! Skipped, with a message, only when the cached CRIU is not installed and `LIZARD_REQUIRE_CRIU`
//! is not 1 (`scripts/test.sh` installs it and sets it).

mod common;

use common::*;
use serde_json::{json, Value};

async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    let ex = s.run(id, json!({"code": code, "context": ctx})).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    ex
}

/// A sandbox with a Python variable, a JavaScript closure and a Bash variable, and (from inside,
/// hostile to a checkpointer) a stopped background process; hibernated and resumed. Returns the
/// hibernation's and the resume's reports.
async fn hibernate_and_resume(s: &Server) -> (Value, Value) {
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let (py, js, sh) = fill(s, &id).await;
    let h = hibernate(s, &id).await;
    let r = resume(s, &id).await;
    // What the per-language save carries came back.
    let ex = run_in(s, &id, &py, "print(x + 1)").await;
    assert_eq!(stdout(&ex), "42\n", "{ex}");
    let ex = run_in(s, &id, &sh, "echo $B").await;
    assert_eq!(stdout(&ex), "bash-kept\n", "{ex}");
    // The JavaScript context answers again.
    let ex = run_in(s, &id, &js, "1 + 1").await;
    assert!(ex.to_string().contains("\"2\""), "{ex}");
    (h, r)
}

/// Contexts with state only an exact method keeps: returns (python, javascript, bash).
async fn fill(s: &Server, id: &str) -> (String, String, String) {
    let py = context(s, id, "python").await;
    let js = context(s, id, "javascript").await;
    let sh = context(s, id, "bash").await;
    run_in(s, id, &py, "x = 41").await;
    run_in(
        s,
        id,
        &js,
        "const counter = (() => { let c = 0; return () => ++c })(); counter(); counter();",
    )
    .await;
    run_in(s, id, &sh, "B=bash-kept").await;
    // A process that stopped itself: a dump must not wait for it.
    run_in(
        s,
        id,
        &sh,
        "(sh -c 'kill -STOP $$; sleep 1000') >/dev/null 2>&1 &",
    )
    .await;
    (py, js, sh)
}

async fn hibernate(s: &Server, id: &str) -> Value {
    let h = s.act(id, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    assert_eq!(h.body["state"], "hibernated", "{}", h.text);
    h.body["hibernation"].clone()
}

async fn resume(s: &Server, id: &str) -> Value {
    let r = s.act(id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "running");
    // CRIU's images never outlive the resume (and were never where the sandbox could reach).
    let images = s.data_dir.path().join("sandboxes").join(id).join("criu");
    assert!(!images.exists(), "{} left behind", images.display());
    r.body["restore"].clone()
}

fn int(ex: &Value) -> u64 {
    stdout(ex)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {ex}"))
}

/// The exact method end to end: hibernate, optionally restart the server (`kill -9`), resume; the
/// live state of every kind is there and still moving.
async fn exact_round_trip(restart: bool) {
    let (s, id) = Server::with_sandbox().await;
    let (py, js, sh) = fill(&s, &id).await;
    // A thread counting, a TCP server answering, a background command writing, all started in
    // cells.
    run_in(&s, &id, &py, LIVE_PYTHON).await;
    run_in(&s, &id, &sh, LIVE_BASH).await;
    // And one appending to a file on the sandbox's disk, which hibernation keeps as it is (not
    // in the checkpoint): nothing may run between the checkpoint and the stop, or the restored
    // process, back at its checkpointed count, would write numbers the file already has.
    run_in(
        &s,
        &id,
        &sh,
        "(i=0; while :; do i=$((i+1)); echo $i >> ~/seq; sleep 0.005; done) >/dev/null 2>&1 &",
    )
    .await;
    let before = int(&run_in(&s, &id, &py, "time.sleep(0.2); print(n)").await);
    assert!(before > 0);
    let bg_pid = stdout(&run_in(&s, &id, &sh, "cat /tmp/bg.pid").await);
    // What confines the sandbox's processes, as the kernel shows it: capabilities, no_new_privs,
    // seccomp, the id map, its network namespace's settings (every port bindable; loopback up,
    // which gives it ::1 — the dump leaves the namespace out and the restore makes it again), the mount table (mount points, flags, file system types and sources;
    // not the super-block options, which name the launcher's descriptors). A restore must give
    // back exactly this (CRIU restores each of them; a tree restored unconfined would be a hole).
    let confinement = r#"grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status /proc/1/status
cat /proc/self/uid_map
cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/net/if_inet6
awk '{ for (i = 7; $i != "-"; i++) ; print $5, $6, $(i+1), $(i+2) }' /proc/self/mountinfo | sort"#;
    let confined_before = stdout(&run_in(&s, &id, &sh, confinement).await);
    assert!(confined_before.contains("Seccomp:\t2"), "{confined_before}");
    assert!(confined_before.contains("\n0\n"), "{confined_before}");
    assert!(
        confined_before.contains(" lo\n"),
        "no ::1 on lo: {confined_before}"
    );
    // Twice: a sandbox restored by CRIU is dumped exactly again (its restored agent's namespaces
    // are opened host-side by the patched CRIU of scripts/criu.sh), and each round trip keeps all of
    // it.
    let mut s = s;
    for round in 0..2u64 {
        let hib = hibernate(&s, &id).await;
        assert_eq!(hib["method"], "criu", "{hib}");
        // CRIU kept what it probed about the kernel in its own /run: a tmpfs in the data dir.
        assert!(
            s.data_dir.path().join("criu-run/criu.kdat").is_file(),
            "no kernel-facts cache"
        );
        // The checkpoint is host-side and root's alone while the sandbox is hibernated.
        let dir = s.data_dir.path().join("sandboxes").join(&id);
        let meta = std::fs::symlink_metadata(dir.join("criu")).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert!(meta.is_dir());
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o700));
        assert!(std::fs::symlink_metadata(dir.join("criu.json"))
            .unwrap()
            .is_file());
        s = if restart && round == 0 {
            let dir = s.stop("-KILL");
            Server::start_in(dir, &[])
        } else {
            s
        };
        let restore = resume(&s, &id).await;
        eprintln!("{}\n{}", hib["method_reason"], restore["method_reason"]);
        assert_eq!(restore["method"], "criu", "{restore}");
        assert_eq!(
            restore["contexts"].as_array().map(Vec::len),
            hib["contexts"].as_array().map(Vec::len),
            "{restore}"
        );
        assert_eq!(
            stdout(&run_in(&s, &id, &sh, confinement).await),
            confined_before,
            "the restored sandbox is not confined as before"
        );
        // The Python variable, the closure's local (a third call gives 3), the Bash variable.
        assert_eq!(stdout(&run_in(&s, &id, &py, "print(x + 1)").await), "42\n");
        let ex = run_in(&s, &id, &js, "counter()").await;
        let want = format!("\"{}\"", 3 + round);
        assert!(ex.to_string().contains(&want), "round {round}: {ex}");
        assert_eq!(
            stdout(&run_in(&s, &id, &sh, "echo $B").await),
            "bash-kept\n"
        );
        // The thread went on from where it was, and still counts.
        let after = int(&run_in(&s, &id, &py, "print(n)").await);
        assert!(after >= before, "{after} < {before}");
        let later = int(&run_in(&s, &id, &py, "time.sleep(0.3); print(n)").await);
        assert!(
            later > after,
            "the thread stopped counting ({later} <= {after})"
        );
        // The TCP server started in a cell answers.
        let ex = run_in(
            &s,
            &id,
            &py,
            "c = socket.create_connection(('127.0.0.1', port), timeout=10); print(c.recv(100).decode()); c.close()",
        )
        .await;
        assert_eq!(stdout(&ex), "still here\n", "{ex}");
        // The background command is the same process, still writing.
        let ex = run_in(
            &s,
            &id,
            &sh,
            "a=$(cat /tmp/bg); sleep 0.5; b=$(cat /tmp/bg); kill -0 $(cat /tmp/bg.pid) && [ $b -gt $a ] && cat /tmp/bg.pid",
        )
        .await;
        assert_eq!(stdout(&ex), bg_pid, "{ex}");
        // The file on disk matches the memory: each number once, in order, still growing.
        let seq = r#"n=$(wc -l < ~/seq); for _ in $(seq 400); do [ $(wc -l < ~/seq) -gt $n ] && break; sleep 0.05; done
awk 'NR != $1 { print "line " NR ": " $1; exit } END { print "ok", NR }' ~/seq"#;
        let out = stdout(&run_in(&s, &id, &sh, seq).await);
        assert!(
            out.starts_with("ok "),
            "round {round}: the disk ran ahead of the memory: {out}"
        );
        // The restored agent listens on a socket of its own sandbox again (the server handed it
        // one made in the sandbox's network namespace: `lizard_agent::relisten`), so the server's
        // peer check is the usual one (PID 1).
        let rt = runtime_json(&s, &id);
        assert!(rt.get("agent_peer").is_none(), "{rt}");
    }
    // The restored kernels are in their contexts' cgroups again (CRIU restores processes, not the
    // delegated cgroup tree: the agent makes it again after the restore), and new contexts of
    // every language start and run.
    // Its cgroup namespace is its own again: no host cgroup path shows.
    let cg = stdout(&run_in(&s, &id, &py, "print(open('/proc/self/cgroup').read())").await);
    assert!(cg.contains(&format!("ctx-{py}")), "{cg}");
    assert!(!cg.contains("lizard/"), "host cgroup paths show: {cg}");
    for (lang, code) in [
        ("python", "print(1 + 1)"),
        ("javascript", "console.log(1 + 1)"),
        ("bash", "echo 2"),
    ] {
        let c = context(&s, &id, lang).await;
        let ex = s.run(&id, json!({"code": code, "context": c})).await;
        assert_eq!(
            ex["status"], "ok",
            "a new {lang} context after the restore: {ex}"
        );
        assert_eq!(stdout(&ex), "2\n", "{ex}");
    }
}

/// A data dir below `/mnt` (a disk mounted there, as operators do): the restore's staging of its
/// mount sources hides nothing of it (it once mounted a tmpfs over `/mnt` itself, and every
/// restore of such a server failed and relaunched).
#[tokio::test]
async fn with_criu_a_data_dir_below_mnt_is_restored_exactly() {
    lizard_test_support::needs_root!();
    if cached_criu().is_none() || !std::path::Path::new("/mnt").is_dir() {
        return;
    }
    let s = Server::start_in(tempfile::tempdir_in("/mnt").unwrap(), &[]);
    let (hib, restore) = hibernate_and_resume(&s).await;
    assert_eq!(hib["method"], "criu", "{hib}");
    assert_eq!(restore["method"], "criu", "{restore}");
}

#[tokio::test]
async fn with_criu_hibernation_is_exact_by_default() {
    lizard_test_support::needs_root_and_criu!();
    let s = Server::start();
    let (hib, restore) = hibernate_and_resume(&s).await;
    assert_eq!(hib["method"], "criu", "{hib}");
    assert_eq!(restore["method"], "criu", "{restore}");
}

#[tokio::test]
async fn with_criu_a_failed_restore_relaunches_with_fresh_contexts_and_says_why() {
    lizard_test_support::needs_root_and_criu!();
    let (s, id) = Server::with_sandbox().await;
    let (py, _js, _sh) = fill(&s, &id).await;
    let hib = hibernate(&s, &id).await;
    assert_eq!(hib["method"], "criu", "{hib}");
    // An exact hibernation is the checkpoint alone (no per-language save is taken besides).
    let dir = s.data_dir.path().join("sandboxes").join(&id);
    // A checkpoint CRIU cannot restore (its process tree image is gone).
    std::fs::remove_file(dir.join("criu").join("pstree.img")).unwrap();
    let restore = resume(&s, &id).await;
    let why = restore["method_reason"].as_str().unwrap();
    assert!(why.contains("the CRIU restore failed"), "{why}");
    assert_relaunched_with_fresh_contexts(&s, &id, &restore, &py).await;
}

#[tokio::test]
async fn with_criu_a_dump_that_fails_falls_back_per_language() {
    lizard_test_support::needs_root_and_criu!();
    let (s, id) = Server::with_sandbox().await;
    let (py, js, sh) = fill(&s, &id).await;
    // An open file of 2 MB already deleted: CRIU would have to copy it into the checkpoint and
    // refuses (its ghost-file limit is 1 MB), so the dump fails and the sandbox runs on.
    run_in(
        &s,
        &id,
        &py,
        "import os\nghost = open(os.path.expanduser('~/ghost'), 'wb')\n\
         ghost.write(b'x' * (2 << 20)); ghost.flush(); os.unlink(ghost.name)",
    )
    .await;
    let hib = hibernate(&s, &id).await;
    assert_eq!(hib["method"], "per-language", "{hib}");
    let why = hib["method_reason"].as_str().unwrap();
    assert!(why.contains("could not checkpoint"), "{why}");
    let restore = resume(&s, &id).await;
    assert_eq!(restore["method"], "per-language", "{restore}");
    // The per-language save is what comes back.
    assert_eq!(stdout(&run_in(&s, &id, &py, "print(x + 1)").await), "42\n");
    assert_eq!(
        stdout(&run_in(&s, &id, &sh, "echo $B").await),
        "bash-kept\n"
    );
    let ex = run_in(&s, &id, &js, "1 + 1").await;
    assert!(ex.to_string().contains("\"2\""), "{ex}");
}

#[tokio::test]
async fn with_criu_a_sandbox_is_hibernated_and_resumed_exactly() {
    lizard_test_support::needs_root_and_criu!();
    exact_round_trip(false).await;
}

#[tokio::test]
async fn with_criu_exact_hibernation_survives_a_server_restart() {
    lizard_test_support::needs_root_and_criu!();
    exact_round_trip(true).await;
}

#[tokio::test]
async fn without_criu_hibernation_is_per_language_and_says_so() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--criu none");
    let (hib, restore) = hibernate_and_resume(&s).await;
    assert_eq!(hib["method"], "per-language", "{hib}");
    let why = hib["method_reason"].as_str().unwrap();
    assert!(why.contains("no usable CRIU (--criu none)"), "{why}");
    assert!(why.starts_with("per-language"), "{why}");
    assert_eq!(restore["method"], "per-language", "{restore}");
}
