//! End-to-end tests of the Python zygote (`crates/lizard-agent/src/kernel/zygote.rs`): contexts
//! forked from it are isolated from each other and behave like spawned kernels (interrupt,
//! timeout, crash, delete), the zygote survives a crashing child, and a killed zygote falls back
//! to spawning and is replaced.
//!
//! A forked kernel is recognised by its `/proc/self/environ`: that is the environment the process
//! image was exec'ed with, which a fork keeps, so it names `LIZARD_ZYGOTE_FD` (the zygote's)
//! instead of `LIZARD_EVENT_FD` (a spawned kernel's).

mod common;

use common::*;
use lizard_proto::ExecutionStatus;
use serde_json::json;
use std::time::Duration;

/// Cell code printing `forked` or `spawned`.
const HOW: &str = "print('forked' if b'LIZARD_ZYGOTE_FD=' in open('/proc/self/environ','rb').read() else 'spawned')";

async fn how(a: &Agent, ctx: &str) -> String {
    let ex = a.run_in(ctx, HOW).await;
    assert_eq!(ex.status, Some(ExecutionStatus::Ok), "{ex:?}");
    ex.stdout_text().trim().to_string()
}

async fn pid_of(a: &Agent, ctx: &str) -> i64 {
    let ex = a.run_in(ctx, "import os; print(os.getpid())").await;
    ex.stdout_text().trim().parse().unwrap()
}

/// The zygote: the agent's child whose working directory is the run dir's `zygote`.
fn zygote_pid(agent: u32) -> Option<i64> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i64 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (ppid == agent && cwd.ends_with("run/zygote") && alive(pid)).then_some(pid)
    })
}

#[tokio::test]
async fn forked_contexts_are_isolated_and_fresh() {
    let a = Agent::start();
    let dir = tempfile::tempdir().unwrap();
    let (s, v) = a
        .call(
            "POST",
            "/contexts",
            Some(json!({"language": "python", "cwd": dir.path()})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let one = v["id"].as_str().unwrap().to_string();
    let two = a.context("python").await;
    assert_eq!(how(&a, &one).await, "forked");
    assert_eq!(how(&a, &two).await, "forked");

    // Execution counts start at 1 (the zygote's warm-up cell is not counted).
    let (_, info) = a.call("GET", &format!("/contexts/{two}"), None).await;
    assert_eq!(info["execution_count"], 1, "{info}");
    let first = a.run_in(&two, "1").await;
    assert_eq!(first.execution_count, 2);

    // Own process group, child of the agent, not of the zygote.
    let agent = a.pid();
    let check = format!("import os; print(os.getpgid(0) == os.getpid(), os.getppid() == {agent})");
    assert_eq!(a.run_in(&one, &check).await.stdout_text(), "True True\n");
    assert_ne!(pid_of(&a, &one).await, pid_of(&a, &two).await);

    // Working directory, variables, imports, sys.modules and os.environ are per context.
    assert_eq!(
        a.run_in(&one, "import os; print(os.getcwd())")
            .await
            .stdout_text(),
        format!("{}\n", std::fs::canonicalize(dir.path()).unwrap().display())
    );
    assert_ne!(
        a.run_in(&two, "import os; print(os.getcwd())")
            .await
            .stdout_text(),
        a.run_in(&one, "import os; print(os.getcwd())")
            .await
            .stdout_text()
    );
    a.run_in(
        &one,
        "import sys, types, os, json\nx = 1\nsys.modules['lizard_fake'] = types.ModuleType('lizard_fake')\nos.environ['LIZARD_ONE'] = '1'\njson.dumps = None",
    )
    .await;
    let probe = a
        .run_in(
            &two,
            "import sys, os, json\nprint('x' in globals(), 'lizard_fake' in sys.modules, 'LIZARD_ONE' in os.environ, json.dumps is None)",
        )
        .await;
    assert_eq!(
        probe.stdout_text(),
        "False False False False\n",
        "{probe:?}"
    );

    // Random state differs between two children (stdlib and numpy).
    let draw = "import random, numpy\nprint(random.random(), numpy.random.random())";
    let (r1, r2) = (a.run_in(&one, draw).await, a.run_in(&two, draw).await);
    assert_eq!(r1.status, Some(ExecutionStatus::Ok), "{r1:?}");
    assert_ne!(r1.stdout_text(), r2.stdout_text());
    let rand_only = "import random\nprint(random.getrandbits(64))";
    assert_ne!(
        a.run_in(&one, rand_only).await.stdout_text(),
        a.run_in(&two, rand_only).await.stdout_text()
    );

    // The environment a fresh kernel gets: no protocol variables, inline matplotlib.
    let env = a
        .run_in(
            &two,
            "import os\nprint(sorted(k for k in os.environ if k.endswith('_FD')), os.environ['MPLBACKEND'])",
        )
        .await;
    assert_eq!(
        env.stdout_text(),
        "[] module://matplotlib_inline.backend_inline\n"
    );
}

#[tokio::test]
async fn forked_kernels_interrupt_time_out_crash_and_die_alone() {
    let a = Agent::start();
    let one = a.context("python").await;
    let two = a.context("python").await;
    assert_eq!(how(&a, &one).await, "forked");
    a.run_in(&two, "keep = 'still here'").await;
    let zygote = zygote_pid(a.pid()).expect("a zygote");

    // Timeout (SIGINT to the process group) stops the cell and keeps the state.
    a.run_in(&one, "y = 5").await;
    let ex = a
        .exec(json!({"code": "import time\nwhile True: time.sleep(0.01)", "context": one, "timeout_ms": 300}))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Timeout), "{ex:?}");
    assert_eq!(a.run_in(&one, "print(y)").await.stdout_text(), "5\n");

    // A crash reports the real exit status (reaped through the pidfd) ...
    let ex = a.run_in(&one, "import os; os._exit(7)").await;
    assert_eq!(ex.status, Some(ExecutionStatus::KernelDied), "{ex:?}");
    assert!(ex.error.unwrap().value.contains("exit code 7"));
    let ex = a
        .run_in(
            &one,
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        )
        .await;
    assert!(ex.error.unwrap().value.contains("SIGKILL"));
    // ... and touches neither the sibling nor the zygote; the replacement is forked too.
    assert_eq!(
        a.run_in(&two, "print(keep)").await.stdout_text(),
        "still here\n"
    );
    assert_eq!(zygote_pid(a.pid()), Some(zygote));
    assert_eq!(how(&a, &one).await, "forked");
    assert_eq!(
        a.run_in(&one, "print('y' in globals())")
            .await
            .stdout_text(),
        "False\n"
    );

    // Restart forks a fresh kernel; delete kills it (and it is reaped, not left a zombie).
    let old = pid_of(&a, &one).await;
    let (s, _) = a
        .call("POST", &format!("/contexts/{one}/restart"), None)
        .await;
    assert_eq!(s, 200);
    assert!(eventually(Duration::from_secs(10), || !alive(old)).await);
    assert_eq!(how(&a, &one).await, "forked");
    let pid = pid_of(&a, &one).await;
    let (s, _) = a.call("DELETE", &format!("/contexts/{one}"), None).await;
    assert_eq!(s, 204);
    assert!(
        eventually(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists())
        .await,
        "deleted kernel {pid} not gone or not reaped"
    );
}

#[tokio::test]
async fn a_killed_zygote_falls_back_and_is_replaced() {
    let a = Agent::start();
    let one = a.context("python").await;
    a.run_in(&one, "kept = 1").await;
    let zygote = zygote_pid(a.pid()).expect("a zygote");
    let killed = std::process::Command::new("kill")
        .args(["-9", &zygote.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(eventually(Duration::from_secs(10), || !alive(zygote)).await);

    // Existing contexts are unaffected; new ones still start (spawned, or forked from a new
    // zygote once it is up), and a new zygote appears.
    assert_eq!(a.run_in(&one, "print(kept)").await.stdout_text(), "1\n");
    let two = a.context("python").await;
    assert_eq!(a.run_in(&two, "print(2)").await.stdout_text(), "2\n");
    assert!(
        eventually(Duration::from_secs(30), || zygote_pid(a.pid())
            .is_some_and(|z| z != zygote))
        .await,
        "no new zygote"
    );
    let three = a.context("python").await;
    assert_eq!(how(&a, &three).await, "forked");
    // A crash of a kernel forked by the old zygote is still reported with its status.
    let ex = a.run_in(&one, "import os; os._exit(3)").await;
    assert!(
        ex.error.unwrap().value.contains("exit code 3"),
        "status lost"
    );
}

#[tokio::test]
async fn twenty_concurrent_forks() {
    let a = std::sync::Arc::new(Agent::start());
    let mut tasks = Vec::new();
    for i in 0..20 {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            let id = a.context("python").await;
            a.run_in(&id, &format!("v = {i}")).await;
            let out = a.run_in(&id, &format!("{HOW}\nprint(v)")).await;
            assert_eq!(out.stdout_text(), format!("forked\n{i}\n"), "#{i}: {out:?}");
            a.run_in(&id, "import os; print(os.getpid())")
                .await
                .stdout_text()
        }));
    }
    let mut pids = std::collections::BTreeSet::new();
    for t in tasks {
        pids.insert(t.await.unwrap());
    }
    assert_eq!(pids.len(), 20);
}

#[tokio::test]
async fn without_the_zygote_kernels_are_spawned() {
    let a = Agent::start_with(&["--python-zygote", "false"]);
    let one = a.context("python").await;
    assert_eq!(how(&a, &one).await, "spawned");
    assert_eq!(zygote_pid(a.pid()), None);
}

/// The agent's children running in the run dir's `zygote` directory whose command is node.
fn js_spares(agent: u32) -> Vec<i64> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i64 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (ppid == agent
                && cwd.ends_with("run/zygote")
                && String::from_utf8_lossy(&cmd).contains("runner.js")
                && alive(pid))
            .then_some(pid)
        })
        .collect()
}

#[tokio::test]
async fn javascript_creates_take_a_prestarted_spare() {
    let a = Agent::start();
    assert!(
        js_spares(a.pid()).is_empty(),
        "no spare before JavaScript is used"
    );
    let one = a.context("javascript").await;
    a.run_in(&one, "var mine = 1").await;
    assert!(
        eventually(Duration::from_secs(30), || js_spares(a.pid()).len() == 1).await,
        "no spare after the first JavaScript context"
    );
    let spare = js_spares(a.pid())[0];

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("helper.js"),
        "module.exports = 'from helper';",
    )
    .unwrap();
    let (s, v) = a
        .call(
            "POST",
            "/contexts",
            Some(json!({"language": "javascript", "cwd": dir.path()})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let two = v["id"].as_str().unwrap().to_string();
    let real = std::fs::canonicalize(dir.path()).unwrap();
    let ex = a
        .run_in(
            &two,
            "console.log(process.pid, process.cwd(), __dirname, require('./helper.js'), typeof mine)",
        )
        .await;
    assert_eq!(
        ex.stdout_text(),
        format!("{spare} {0} {0} from helper undefined\n", real.display()),
        "{ex:?}"
    );
    let (_, info) = a.call("GET", &format!("/contexts/{two}"), None).await;
    assert_eq!(info["execution_count"], 1, "{info}");
    // A new spare replaces the one taken.
    assert!(
        eventually(Duration::from_secs(30), || js_spares(a.pid())
            .iter()
            .any(|p| *p != spare))
        .await,
        "spare not replaced"
    );
    // Interrupting a cell of a former spare works (its process group is its own).
    let ex = a
        .exec(json!({"code": "while (true) {}", "context": two, "timeout_ms": 300}))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Timeout), "{ex:?}");
    assert_eq!(
        a.run_in(&two, "console.log(1+1)").await.stdout_text(),
        "2\n"
    );
}
