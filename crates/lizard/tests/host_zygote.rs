//! The shared Python zygote (`lizard serve --host-zygotes`, on by default;
//! `docs/design/shared-zygote.md`) with
//! the real server, real sandboxes and the real template: a fork of the host zygote joins each new
//! sandbox and its agent adopts it, so Python kernels are forks of the one host-wide import;
//! state, checkpoints and the sandbox's isolation are as without it, and what a sandbox does to
//! its adopted zygote stays in that sandbox.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A server whose default template's host zygote is ready (its launches use it from then on).
fn server() -> Server {
    let s = Server::with_flags("--pool-size 0 --host-zygotes true");
    zygote_pid(&s);
    s
}

/// The host pid of `s`'s host zygote, once it is ready.
fn zygote_pid(s: &Server) -> u32 {
    let ready = s
        .data_dir
        .path()
        .join("zygotes/code-interpreter-v1")
        .join(lizard_server::sandboxes::zygote::READY_FILE);
    lizard_test_support::poll(Duration::from_secs(120), "the host zygote", || {
        std::fs::read_to_string(&ready).ok()?.trim().parse().ok()
    })
}

/// Whether a kernel is a fork of the host zygote: the process that joined the sandbox leads a
/// session of its own there, so its kernels are in that session; the agent's own zygote and its
/// kernels are in the agent's (PID 1's).
const HOW: &str = "import os\nos.getsid(0) != 1";

async fn py(s: &Server, id: &str, ctx: Option<&str>, code: &str) -> Value {
    let mut body = json!({ "code": code });
    if let Some(c) = ctx {
        body["context"] = c.into();
    }
    let ex = s.run(id, body).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    ex
}

fn text(ex: &Value) -> String {
    ex["results"][0]["data"]["text/plain"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Kernels of every new sandbox are forks of the host zygote: a default context and a new one,
/// in two sandboxes; each runs as its context's user, is the agent's child, keeps its state
/// between calls, and sees nothing of the host zygote.
#[tokio::test]
async fn new_sandboxes_fork_their_kernels_from_the_host_zygote() {
    lizard_test_support::needs_root!();
    let s = server();
    let admin = s.admin_key.clone();
    for _ in 0..2 {
        let id = s.create(&admin, json!({})).await;
        let ex = py(&s, &id, None, HOW).await;
        assert_eq!(text(&ex), "True", "{ex}");
        let ctx = context(&s, &id, "python").await;
        let ex = py(&s, &id, Some(&ctx), HOW).await;
        assert_eq!(text(&ex), "True", "{ex}");
        // The sandbox's limits, not the server's (the zygote was started by it).
        let ex = py(
            &s,
            &id,
            Some(&ctx),
            "import resource as r\n(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_CORE))",
        )
        .await;
        assert_eq!(text(&ex), "((4096, 4096), (0, 0))", "{ex}");
        // In the sandbox's cgroup namespace like every process of it: no host path shows.
        let ex = py(
            &s,
            &id,
            Some(&ctx),
            "'lizard' in open('/proc/self/cgroup').read()",
        )
        .await;
        assert_eq!(text(&ex), "False", "{ex}");
        py(&s, &id, Some(&ctx), "x = 41").await;
        let ex = py(
            &s,
            &id,
            Some(&ctx),
            "import os\n(x + 1, os.getppid(), os.getuid() >= 2000)",
        )
        .await;
        assert_eq!(text(&ex), "(42, 1, True)", "{ex}");
        // From inside: no process of an id the sandbox does not map (the host zygote's uid
        // would show as the overflow id), and the adoption socket is gone.
        let r = s
            .root_cmd(
                &id,
                "for d in /proc/[0-9]*; do awk '/^Uid:/{print $2}' $d/status; done | sort -u; \
                 test -e /tmp/.lizard-agent/adopt/python.sock && echo socket-left",
            )
            .await;
        let out = r["stdout"].as_str().unwrap_or_default();
        assert!(!out.contains("65534"), "{r}");
        assert!(!out.contains("socket-left"), "{r}");
    }
    // The server's stop ends its zygote (sandboxes keep the forks they adopted).
    let pid = zygote_pid(&s);
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    s.kill_all().await;
    let _dir = s.stop("-TERM");
    lizard_test_support::poll(Duration::from_secs(30), "the zygote to end", || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
}

/// The sandbox's root kills its adopted zygote: the agent starts its own and new contexts still
/// work there, and the host zygote goes on serving other sandboxes.
#[tokio::test]
async fn a_sandbox_that_kills_its_adopted_zygote_harms_only_itself() {
    lizard_test_support::needs_root!();
    let s = server();
    let admin = s.admin_key.clone();
    let id = s.create(&admin, json!({})).await;
    let ex = py(&s, &id, None, HOW).await;
    assert_eq!(text(&ex), "True", "{ex}");
    // The adopted zygote: the agent's child that leads a session of its own (its kernels are in
    // that session; the agent's other children are in the agent's).
    let r = s
        .root_cmd(
            &id,
            "for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$$\" ] && continue; \
               [ \"$(awk '/^PPid:/{print $2}' $d/status)\" = 1 ] || continue; \
               [ \"$(cut -d' ' -f6 $d/stat)\" = \"$p\" ] && kill -9 $p && echo killed; \
             done",
        )
        .await;
    assert!(
        r["stdout"].as_str().unwrap_or_default().contains("killed"),
        "{r}"
    );
    // A new context: forked by a zygote the agent started (or spawned), and it works.
    let ctx = context(&s, &id, "python").await;
    let ex = py(&s, &id, Some(&ctx), "6 * 7").await;
    assert_eq!(text(&ex), "42", "{ex}");
    let ex = py(&s, &id, Some(&ctx), HOW).await;
    assert_eq!(text(&ex), "False", "{ex}");
    // Another sandbox still gets the host zygote's fork.
    let other = s.create(&admin, json!({})).await;
    let ex = py(&s, &other, None, HOW).await;
    assert_eq!(text(&ex), "True", "{ex}");
}

/// A sandbox whose kernels came from the host zygote is hibernated with CRIU and resumed: the
/// adopted zygote and its kernel are in the checkpoint, the variable survives, and a new context
/// is forked from the restored zygote.
#[tokio::test]
async fn a_sandbox_with_an_adopted_zygote_hibernates_exactly() {
    lizard_test_support::needs_root_and_criu!();
    let s = server();
    let admin = s.admin_key.clone();
    let id = s.create(&admin, json!({})).await;
    py(&s, &id, None, "x = 41").await;
    let r = s.act(&id, "hibernate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["state"], "hibernated", "{}", r.text);
    assert_eq!(r.body["hibernation"]["method"], "criu", "{}", r.text);
    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["restore"]["method"], "criu", "{}", r.text);
    let ex = py(&s, &id, None, "x + 1").await;
    assert_eq!(text(&ex), "42", "{ex}");
    let ctx = context(&s, &id, "python").await;
    let ex = py(&s, &id, Some(&ctx), HOW).await;
    assert_eq!(text(&ex), "True", "{ex}");
}

/// The host zygote dies (killed from the host): the next launch does without it and starts
/// another, and sandboxes made after that one is ready fork from it again.
#[tokio::test]
async fn a_host_zygote_that_dies_is_replaced() {
    lizard_test_support::needs_root!();
    let s = server();
    let admin = s.admin_key.clone();
    let first = zygote_pid(&s);
    lizard_test_support::signal(first, "-KILL");
    lizard_test_support::poll(Duration::from_secs(30), "the zygote to die", || {
        gone_or_zombie(first).then_some(())
    });
    let id = s.create(&admin, json!({})).await;
    let ex = py(&s, &id, None, HOW).await;
    assert_eq!(text(&ex), "False", "{ex}");
    let second = lizard_test_support::poll(Duration::from_secs(120), "a new zygote", || {
        let pid = zygote_pid(&s);
        (pid != first).then_some(pid)
    });
    assert_ne!(second, first);
    let id = s.create(&admin, json!({})).await;
    let ex = py(&s, &id, None, HOW).await;
    assert_eq!(text(&ex), "True", "{ex}");
}
