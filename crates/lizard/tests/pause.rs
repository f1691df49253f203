//! Pause, resume and server restarts: kernel state survives all of them. Real server, real
//! sandboxes.

mod common;

use common::registries::TestPackage;
use common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn pause_resume_keeps_kernel_state() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    s.run(&id, json!({"code": "import numpy as np\nx = 42\narr = np.arange(10)\nf = open('/home/user/notes.txt', 'w+')\nf.write('kept')\nf.flush()"})).await;
    s.run(&id, json!({"code": "y=7", "language": "bash"})).await;

    let p = s.act(&id, "pause").await;
    assert_eq!(p.status, 200, "{}", p.text);
    assert_eq!(p.body["state"], "paused");
    // Idempotent.
    let p = s.act(&id, "pause").await;
    assert_eq!((p.status, p.body["state"].as_str()), (200, Some("paused")));
    // A paused sandbox rejects execute with a clear error.
    let e = s
        .post(&format!("/v1/sandboxes/{id}/execute"), json!({"code": "1"}))
        .await;
    assert_eq!((e.status, e.body["code"].as_str()), (409, Some("conflict")));
    assert!(e.body["message"].as_str().unwrap().contains("paused"));
    let l = s.admin("GET", "/v1/sandboxes?state=paused", None).await;
    assert_eq!(l.body.as_array().unwrap().len(), 1);

    let r = s.act(&id, "resume").await;
    assert_eq!((r.status, r.body["state"].as_str()), (200, Some("running")));
    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200);
    let ex = s
        .run(
            &id,
            json!({"code": "f.seek(0)\nprint(x, arr.sum(), f.read())"}),
        )
        .await;
    assert_eq!(stdout(&ex), "42 45 kept\n");
    let (out, _) = s.sh(&id, "echo $y").await;
    assert_eq!(out, "7\n");
}

#[tokio::test]
async fn twenty_pause_resume_cycles_lose_nothing() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    for i in 0..20 {
        s.run(
            &id,
            json!({"code": format!("v{i} = {i}\nopen('/home/user/f{i}', 'w').write('{i}')")}),
        )
        .await;
        let p = s.act(&id, "pause").await;
        assert_eq!(p.status, 200);
        let r = s.act(&id, "resume").await;
        assert_eq!(r.status, 200);
    }
    let ex = s
        .run(&id, json!({"code": "print(sum(globals()[f'v{i}'] for i in range(20)), sum(int(open(f'/home/user/f{i}').read()) for i in range(20)))"}))
        .await;
    assert_eq!(stdout(&ex), "190 190\n");
}

#[tokio::test]
async fn concurrent_pause_and_resume_calls_are_safe() {
    lizard_test_support::needs_root!();
    concurrent_calls_keep_state("pause", 10).await;
}

#[tokio::test]
async fn a_running_cell_continues_after_resume() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let runner = s.run_in_background(
        &id,
        json!({"code": "import time\nfor i in range(6):\n    print(i, flush=True)\n    time.sleep(0.25)"}),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.act(&id, "pause").await.status, 200);
    assert_eq!(s.act(&id, "resume").await.status, 200);
    let ex = runner.await.unwrap();
    assert_eq!(ex.status, 200, "{}", ex.text);
    assert_eq!(stdout(&ex.body), "0\n1\n2\n3\n4\n5\n");
}

#[tokio::test]
async fn server_kill_9_and_restart_loses_nothing() {
    lizard_test_support::needs_root!();
    let (s, running) = Server::with_sandbox().await;
    let paused = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&running, json!({"code": "x = 'still here'"})).await;
    s.run(&paused, json!({"code": "y = 'me too'"})).await;
    s.act(&paused, "pause").await;
    let key = s.admin_key.clone();

    let dir = s.stop("-KILL");
    let s = Server::start_in(dir, &[]);
    assert_eq!(s.admin_key, key);
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{running}"), None)
        .await;
    assert_eq!(r.body["state"], "running", "{}", r.text);
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{paused}"), None)
        .await;
    assert_eq!(r.body["state"], "paused", "{}", r.text);
    assert_eq!(
        stdout(&s.run(&running, json!({"code": "print(x)"})).await),
        "still here\n"
    );
    s.act(&paused, "resume").await;
    assert_eq!(
        stdout(&s.run(&paused, json!({"code": "print(y)"})).await),
        "me too\n"
    );
}

/// A running sandbox left frozen by a server that died in the middle of a snapshot or hibernation
/// (here: its freezer cgroup frozen from the host, then `kill -9`) is thawed by the next server,
/// which adopts it; a paused one stays frozen.
#[tokio::test]
async fn a_running_sandbox_left_frozen_by_a_dead_server_is_thawed_by_the_next() {
    lizard_test_support::needs_root!();
    let (s, running) = Server::with_sandbox().await;
    let paused = s.create(&s.admin_key.clone(), json!({})).await;
    s.run(&running, json!({"code": "x = 'thawed'"})).await;
    s.act(&paused, "pause").await;
    let state = |id: &str| {
        let cg = host_cgroup("/sys/fs/cgroup/freezer", id).expect("the freezer cgroup");
        move || {
            std::fs::read_to_string(cg.join("freezer.state"))
                .unwrap_or_default()
                .trim()
                .to_string()
        }
    };
    let (running_state, paused_state) = (state(&running), state(&paused));
    let cg = host_cgroup("/sys/fs/cgroup/freezer", &running).unwrap();
    std::fs::write(cg.join("freezer.state"), "FROZEN").unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            running_state() == "FROZEN"
        })
        .await
    );

    let dir = s.stop("-KILL");
    let s = Server::start_in(dir, &[]);
    assert!(
        eventually(Duration::from_secs(30), || async {
            running_state() == "THAWED"
        })
        .await,
        "the adopted running sandbox is still {}",
        running_state()
    );
    assert_eq!(
        stdout(&s.run(&running, json!({"code": "print(x)"})).await),
        "thawed\n"
    );
    assert_eq!(paused_state(), "FROZEN");
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{paused}"), None)
        .await;
    assert_eq!(r.body["state"], "paused", "{}", r.text);
}

#[tokio::test]
async fn timeout_can_pause_instead_of_kill() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = s
        .create(
            &s.admin_key.clone(),
            json!({"timeout_ms": 1000, "on_timeout": "pause"}),
        )
        .await;
    s.run(&id, json!({"code": "z = 'kept'"})).await;
    let paused = eventually(Duration::from_secs(30), || async {
        s.admin("GET", &format!("/v1/sandboxes/{id}"), None)
            .await
            .body["state"]
            == "paused"
    })
    .await;
    assert!(paused, "the sandbox was not paused by its timeout");
    let r = s.act(&id, "resume").await;
    assert_eq!(r.body["state"], "running");
    assert_eq!(r.body["on_timeout"], "pause");
    assert_eq!(
        stdout(&s.run(&id, json!({"code": "print(z)"})).await),
        "kept\n"
    );
}

/// Packages installed with `pip install --user` (from a local wheel: sandboxes have no network)
/// stay in the sandbox's writable layer across pause/resume cycles.
#[tokio::test]
async fn pip_install_user_survives_pause_resume() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let make_wheel = registries::wheels_cell(
        &[TestPackage::new("lzdemo", "1.0", "VALUE = 42\n")],
        "/home/user",
    );
    let ex = s.run(&id, json!({"code": make_wheel})).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let (out, ex) = s
        .sh(&id, "pip install --user --no-index ~/lzdemo-1.0-py3-none-any.whl 2>&1 | tail -1; ls ~/.local/lib/python3*/site-packages")
        .await;
    assert!(out.contains("Successfully installed lzdemo"), "{out}\n{ex}");
    for _ in 0..5 {
        assert_eq!(s.act(&id, "pause").await.status, 200);
        assert_eq!(s.act(&id, "resume").await.status, 200);
    }
    // A new context (a fresh Python process) imports it from the user site.
    let c = s
        .post(
            &format!("/v1/sandboxes/{id}/contexts"),
            json!({"language": "python"}),
        )
        .await;
    let ctx = c.body["id"].as_str().unwrap();
    let ex = s
        .run(
            &id,
            json!({"code": "import lzdemo; print(lzdemo.VALUE)", "context": ctx}),
        )
        .await;
    assert_eq!(stdout(&ex), "42\n", "{ex}");
}

/// A sandbox whose launch a server's end cut short before the server recorded it (its directory
/// has no runtime file yet; its processes run in the cgroup named after it) is killed when the
/// next server starts: nothing of it runs on, re-parented to init.
#[tokio::test]
async fn a_launch_cut_short_by_a_server_kill_leaves_nothing_running() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let dir = s.stop("-9");
    // What such a launch leaves: the sandbox's directory, and its processes in its cgroup under
    // the server's own (the server's cgroups are this test's: it does not move itself).
    let id = "cutshort0launch0test";
    let (cg, mut orphan) = stray_sandbox(dir.path(), id);

    let s = Server::start_in(dir, &["--pool-size", "0"]);
    let killed = eventually(Duration::from_secs(60), || {
        let done = orphan.try_wait().ok().flatten().is_some();
        async move { done }
    })
    .await;
    if !killed {
        let _ = orphan.kill();
    }
    assert!(killed, "the cut-short sandbox's process still runs");
    let gone = eventually(Duration::from_secs(60), || {
        let left = cg.remaining_dirs();
        async move { left.is_empty() }
    })
    .await;
    assert!(gone, "its cgroup is left: {:?}", cg.remaining_dirs());
    // Its files go after its cgroup (`adopt::kill_unrecorded`, then `remove_files`).
    let dir = s.data_dir.path().join("sandboxes").join(id);
    let removed = eventually(Duration::from_secs(60), || {
        let left = dir.exists();
        async move { !left }
    })
    .await;
    assert!(removed, "its directory is left: {}", dir.display());
}

/// The harness's own check (`common::Server`'s drop): a sandbox that still runs after its server
/// exited, though the server listed none, was lost by the server; the test that made it fails,
/// and the sandbox is killed instead of running on for ever under init.
#[tokio::test]
async fn a_sandbox_its_server_lost_fails_the_test_and_is_killed() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    // What a lost sandbox looks like from the host: its directory in the data dir, and its
    // processes in its cgroup under the server's own (this test's).
    let id = "lost0sandbox0harness";
    let (cg, mut orphan) = stray_sandbox(s.data_dir.path(), id);

    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(s)));
    let why = dropped.expect_err("the harness let a lost sandbox pass");
    let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(why.contains(id), "{why}");
    let killed = eventually(Duration::from_secs(30), || {
        let done = orphan.try_wait().ok().flatten().is_some();
        async move { done }
    })
    .await;
    if !killed {
        let _ = orphan.kill();
    }
    assert!(killed, "the lost sandbox's process still runs");
    assert!(cg.remaining_dirs().is_empty(), "{:?}", cg.remaining_dirs());
}

/// A sandbox no server knows of, in `data_dir`: its directory `sandboxes/<id>`, and its cgroup
/// `lizard/<id>` under this test's own (the servers it starts share it) holding a `sleep`.
fn stray_sandbox(
    data_dir: &std::path::Path,
    id: &str,
) -> (lizard_jail::cgroup::Cgroup, std::process::Child) {
    std::fs::create_dir_all(data_dir.join("sandboxes").join(id)).unwrap();
    let cg = lizard_jail::cgroup::Hierarchy::detect()
        .unwrap()
        .create(id, &Default::default())
        .unwrap();
    let orphan = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    cg.add_pid(orphan.id() as i32).unwrap();
    (cg, orphan)
}
