//! End-to-end tests of the zygotes (`crates/lizard-agent/src/kernel/zygote.rs`,
//! `kernels/js/zygote.js`): Python and JavaScript contexts forked from them are isolated from each
//! other and behave like spawned kernels (interrupt, timeout, crash, delete), the zygote survives
//! a crashing child, and a killed zygote falls back to spawning and is replaced. Also the spare
//! JavaScript kernel used without the JavaScript zygote.
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

/// The Python zygote: the agent's child whose working directory is the run dir's `zygote`.
fn zygote_pid(agent: u32) -> Option<i64> {
    zygote_in(agent, "run/zygote")
}

/// The JavaScript zygote: the agent's child whose working directory is the run dir's `zygote-js`.
fn js_zygote_pid(agent: u32) -> Option<i64> {
    zygote_in(agent, "run/zygote-js")
}

fn zygote_in(agent: u32, dir: &str) -> Option<i64> {
    // A kernel just forked has the zygote's working directory until it enters its own, and may
    // already be the agent's child by then: the zygote is the oldest such process.
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let pid: i64 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            let ppid: u32 = rest.get(1)?.parse().ok()?;
            let started: u64 = rest.get(19)?.parse().ok()?;
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            (ppid == agent && cwd.ends_with(dir) && alive(pid)).then_some((started, pid))
        })
        .min()
        .map(|(_, pid)| pid)
}

#[tokio::test]
async fn forked_contexts_are_isolated_and_fresh() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    let dir = tempfile::tempdir().unwrap();
    let (s, v) = a
        .post(
            "/contexts",
            json!({"language": "python", "cwd": dir.path()}),
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

/// What the generic tests below run in one language.
struct Lang {
    language: &'static str,
    zygote: fn(u32) -> Option<i64>,
    /// Prints `forked` or `spawned`.
    how: &'static str,
    /// Prints the kernel's pid.
    pid: &'static str,
    /// Sets `keep` to 'still here' / `y` to 5; prints `keep` / `y`.
    set_keep: &'static str,
    print_keep: &'static str,
    set_y: &'static str,
    print_y: &'static str,
    /// Prints whether `y` exists (`False`/`false` in a fresh kernel).
    has_y: &'static str,
    absent: &'static str,
    /// Runs until interrupted; exits with status 7 / 3; kills itself with SIGKILL.
    forever: &'static str,
    exit7: &'static str,
    exit3: &'static str,
    sigkill: &'static str,
}

const PY: Lang = Lang {
    language: "python",
    zygote: zygote_pid,
    how: HOW,
    pid: "import os; print(os.getpid())",
    set_keep: "keep = 'still here'",
    print_keep: "print(keep)",
    set_y: "y = 5",
    print_y: "print(y)",
    has_y: "print('y' in globals())",
    absent: "False\n",
    forever: "import time\nwhile True: time.sleep(0.01)",
    exit7: "import os; os._exit(7)",
    exit3: "import os; os._exit(3)",
    sigkill: "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
};

const JS: Lang = Lang {
    language: "javascript",
    zygote: js_zygote_pid,
    how: JS_HOW,
    pid: "console.log(process.pid)",
    set_keep: "var keep = 'still here'",
    print_keep: "console.log(keep)",
    set_y: "var y = 5",
    print_y: "console.log(y)",
    has_y: "console.log(typeof y !== 'undefined')",
    absent: "false\n",
    forever: "while (true) {}",
    // process.exit goes through the runner's exit path (_exit in a fork, not Node's teardown).
    exit7: "process.exit(7)",
    exit3: "process.exit(3)",
    sigkill: "process.kill(process.pid, 'SIGKILL')",
};

async fn out(a: &Agent, ctx: &str, code: &str) -> String {
    a.run_in(ctx, code).await.stdout_text()
}

/// Forked kernels time out, crash and are deleted alone: the sibling and the zygote live on, the
/// replacement is forked too, and a deleted kernel is reaped.
async fn forked_kernels_die_alone(l: &Lang) {
    let a = Agent::start();
    let one = a.context(l.language).await;
    let two = a.context(l.language).await;
    assert_eq!(out(&a, &one, l.how).await, "forked\n");
    a.run_in(&two, l.set_keep).await;
    let zygote = (l.zygote)(a.pid()).expect("a zygote");

    // Timeout (SIGINT to the process group) stops the cell and keeps the state.
    a.run_in(&one, l.set_y).await;
    let ex = a
        .exec(json!({"code": l.forever, "context": one, "timeout_ms": 300}))
        .await;
    assert_eq!(ex.status, Some(ExecutionStatus::Timeout), "{ex:?}");
    assert_eq!(out(&a, &one, l.print_y).await, "5\n");

    // A crash reports the real exit status (reaped through the pidfd), and nothing else ...
    let ex = a.run_in(&one, l.exit7).await;
    assert_eq!(ex.status, Some(ExecutionStatus::KernelDied), "{ex:?}");
    assert!(
        ex.error.as_ref().unwrap().value.contains("exit code 7"),
        "{ex:?}"
    );
    assert!(!ex.stderr_text().contains("Assertion"), "{ex:?}");
    let ex = a.run_in(&one, l.sigkill).await;
    assert!(ex.error.unwrap().value.contains("SIGKILL"));
    // ... and touches neither the sibling nor the zygote; the replacement is forked too.
    assert_eq!(out(&a, &two, l.print_keep).await, "still here\n");
    assert_eq!((l.zygote)(a.pid()), Some(zygote));
    assert_eq!(out(&a, &one, l.how).await, "forked\n");
    assert_eq!(out(&a, &one, l.has_y).await, l.absent);

    // Restart forks a fresh kernel; delete kills it (and it is reaped, not left a zombie).
    let pid_of = |ctx: String| {
        let a = &a;
        async move { out(a, &ctx, l.pid).await.trim().parse::<i64>().unwrap() }
    };
    let old = pid_of(one.clone()).await;
    let (s, _) = a
        .call("POST", &format!("/contexts/{one}/restart"), None)
        .await;
    assert_eq!(s, 200);
    assert!(eventually(Duration::from_secs(10), || !alive(old)).await);
    assert_eq!(out(&a, &one, l.how).await, "forked\n");
    let pid = pid_of(one.clone()).await;
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

/// A killed zygote: existing contexts live on, new ones still start (spawned, or forked from a
/// new zygote once it is up), a new zygote appears, and a kernel of the old one still reports its
/// exit status.
async fn a_killed_zygote_is_replaced(l: &Lang) {
    let a = Agent::start();
    let one = a.context(l.language).await;
    a.run_in(&one, l.set_keep).await;
    let zygote = (l.zygote)(a.pid()).expect("a zygote");
    let killed = std::process::Command::new("kill")
        .args(["-9", &zygote.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(eventually(Duration::from_secs(10), || !alive(zygote)).await);

    assert_eq!(out(&a, &one, l.print_keep).await, "still here\n");
    let two = a.context(l.language).await;
    assert_eq!(out(&a, &two, l.has_y).await, l.absent);
    assert!(
        eventually(Duration::from_secs(30), || (l.zygote)(a.pid())
            .is_some_and(|z| z != zygote))
        .await,
        "no new zygote"
    );
    let three = a.context(l.language).await;
    assert_eq!(out(&a, &three, l.how).await, "forked\n");
    let ex = a.run_in(&one, l.exit3).await;
    assert!(
        ex.error.unwrap().value.contains("exit code 3"),
        "status lost"
    );
}

#[tokio::test]
async fn forked_kernels_interrupt_time_out_crash_and_die_alone() {
    lizard_test_support::needs_root!();
    forked_kernels_die_alone(&PY).await;
}

#[tokio::test]
async fn forked_javascript_kernels_interrupt_time_out_crash_and_die_alone() {
    lizard_test_support::needs_root!();
    forked_kernels_die_alone(&JS).await;
}

#[tokio::test]
async fn a_killed_zygote_falls_back_and_is_replaced() {
    lizard_test_support::needs_root!();
    a_killed_zygote_is_replaced(&PY).await;
}

#[tokio::test]
async fn a_killed_javascript_zygote_falls_back_and_is_replaced() {
    lizard_test_support::needs_root!();
    a_killed_zygote_is_replaced(&JS).await;
}

#[tokio::test]
async fn twenty_concurrent_forks() {
    lizard_test_support::needs_root!();
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
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&["--python-zygote", "false"]);
    let one = a.context("python").await;
    assert_eq!(how(&a, &one).await, "spawned");
    assert_eq!(zygote_pid(a.pid()), None);
}

/// The agent's children running in the run dir's `spare-js` directory whose command is node.
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
                && cwd.ends_with("run/spare-js")
                && String::from_utf8_lossy(&cmd).contains("runner.js")
                && alive(pid))
            .then_some(pid)
        })
        .collect()
}

/// A JavaScript context in a fresh directory holding `helper.js` (`module.exports = 'from helper'`).
async fn js_context_with_helper(a: &Agent) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("helper.js"),
        "module.exports = 'from helper';",
    )
    .unwrap();
    let (s, v) = a
        .post(
            "/contexts",
            json!({"language": "javascript", "cwd": dir.path()}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    (dir, v["id"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn javascript_creates_take_a_prestarted_spare() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&["--javascript-zygote", "false"]);
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

    let (dir, two) = js_context_with_helper(&a).await;
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

/// Cell code printing `forked` or `spawned` in a JavaScript context.
const JS_HOW: &str = "console.log(require('fs').readFileSync('/proc/self/environ', 'latin1').includes('LIZARD_ZYGOTE_FD=') ? 'forked' : 'spawned')";

async fn js_how(a: &Agent, ctx: &str) -> String {
    let ex = a.run_in(ctx, JS_HOW).await;
    assert_eq!(ex.status, Some(ExecutionStatus::Ok), "{ex:?}");
    ex.stdout_text().trim().to_string()
}

#[tokio::test]
async fn javascript_contexts_are_forked_isolated_and_fresh() {
    lizard_test_support::needs_root!();
    let a = Agent::start();
    assert_eq!(
        js_zygote_pid(a.pid()),
        None,
        "no zygote before JavaScript is used"
    );
    let (dir, one) = js_context_with_helper(&a).await;
    let two = a.context("javascript").await;
    assert_eq!(js_how(&a, &one).await, "forked");
    assert_eq!(js_how(&a, &two).await, "forked");
    assert!(js_zygote_pid(a.pid()).is_some());
    // The spare is forked from the zygote too, and the next create takes it.
    assert!(
        eventually(Duration::from_secs(30), || js_spares(a.pid()).len() == 1).await,
        "no spare"
    );
    let spare = js_spares(a.pid())[0];
    let three = a.context("javascript").await;
    assert_eq!(js_how(&a, &three).await, "forked");
    assert_eq!(
        a.run_in(
            &three,
            "console.log(process.pid, process.cwd().endsWith('spare-js'))"
        )
        .await
        .stdout_text(),
        format!("{spare} false\n")
    );

    // Execution counts start at 1 (the zygote's warm-up is not counted), nothing of it is left.
    let (_, info) = a.call("GET", &format!("/contexts/{two}"), None).await;
    assert_eq!(info["execution_count"], 1, "{info}");
    let ex = a.run_in(&two, "console.log(typeof warm)").await;
    assert_eq!(ex.execution_count, 2);
    assert_eq!(ex.stdout_text(), "undefined\n", "{ex:?}");

    // The process knows who it is: its own pid and group, a child of the agent.
    let agent = a.pid();
    let who = "const fs = require('fs'); console.log(process.pid === Number(fs.readlinkSync('/proc/self')), process.ppid, fs.readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')[2] === String(process.pid))";
    assert_eq!(
        a.run_in(&one, who).await.stdout_text(),
        format!("true {agent} true\n")
    );
    let pid = |ctx: String| {
        let a = &a;
        async move {
            a.run_in(&ctx, "console.log(process.pid)")
                .await
                .stdout_text()
        }
    };
    assert_ne!(pid(one.clone()).await, pid(two.clone()).await);

    // Working directory, module resolution, globals, process.env are per context.
    let real = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        a.run_in(
            &one,
            "console.log(process.cwd(), __dirname, require('./helper.js'))"
        )
        .await
        .stdout_text(),
        format!("{0} {0} from helper\n", real.display())
    );
    a.run_in(
        &one,
        "var mine = 1; process.env.LIZARD_ONE = '1'; Array.prototype.evil = 1",
    )
    .await;
    assert_eq!(
        a.run_in(
            &two,
            "console.log(typeof mine, 'LIZARD_ONE' in process.env, [].evil)"
        )
        .await
        .stdout_text(),
        "undefined false undefined\n"
    );

    // Random state differs between two children: Math.random, crypto, workers.
    let draw = "console.log(Math.random(), require('crypto').randomUUID())";
    let (r1, r2) = (a.run_in(&one, draw).await, a.run_in(&two, draw).await);
    assert_eq!(r1.status, Some(ExecutionStatus::Ok), "{r1:?}");
    assert_ne!(r1.stdout_text(), r2.stdout_text());
    let worker = "const { Worker } = require('worker_threads');\nawait new Promise((ok) => new Worker('require(\"worker_threads\").parentPort.postMessage(Math.random())', { eval: true }).on('message', (m) => { console.log(m); ok(); }))";
    let (w1, w2) = (a.run_in(&one, worker).await, a.run_in(&two, worker).await);
    assert_eq!(w1.status, Some(ExecutionStatus::Ok), "{w1:?}");
    assert_ne!(w1.stdout_text(), w2.stdout_text());

    // The event loop, the thread pool, subprocesses, sockets and the GC work in a fork.
    let busy = r#"const fs = require('fs'), net = require('net'), cp = require('child_process'), zlib = require('zlib');
await new Promise((ok) => setTimeout(ok, 5));
const text = await fs.promises.readFile('/proc/self/stat', 'utf8');
const zipped = await new Promise((ok, no) => zlib.gzip(Buffer.alloc(1 << 20), (e, b) => (e ? no(e) : ok(b))));
const echoed = cp.execFileSync('/bin/echo', ['sub']).toString().trim();
const spawned = await new Promise((ok) => cp.execFile('/bin/echo', ['async'], (e, out) => ok(out.trim())));
const reply = await new Promise((ok) => { const srv = net.createServer((s) => s.end('hi')).listen(0, '127.0.0.1', () => net.connect(srv.address().port, '127.0.0.1').on('data', (d) => { srv.close(); ok(String(d)); })); });
let keep = []; for (let i = 0; i < 2e6; i++) { keep.push({ i }); if (keep.length > 1e5) keep = []; }
const m = await import('node:path');
console.log(text.length > 0, zipped.length < 5000, echoed, spawned, reply, typeof m.join)"#;
    let ex = a.run_in(&two, busy).await;
    assert_eq!(
        ex.stdout_text(),
        "true true sub async hi function\n",
        "{ex:?}"
    );
}

#[tokio::test]
async fn without_the_javascript_zygote_kernels_are_spawned() {
    lizard_test_support::needs_root!();
    let a = Agent::start_with(&[
        "--javascript-zygote",
        "false",
        "--javascript-spare",
        "false",
    ]);
    let one = a.context("javascript").await;
    assert_eq!(js_how(&a, &one).await, "spawned");
    assert_eq!(js_zygote_pid(a.pid()), None);
}

/// A Node without `node:ffi` (the machine's Node 20): the zygote cannot start, JavaScript kernels
/// are spawned (and a spare kept) instead, and they work.
#[tokio::test]
async fn a_node_that_cannot_fork_falls_back_to_spawning() {
    lizard_test_support::needs_root!();
    let old_node = std::path::Path::new("/usr/bin/node");
    assert!(
        old_node.exists(),
        "this test needs the machine's own Node (Debian's nodejs package)"
    );
    let a = Agent::start_with(&["--node", "/usr/bin/node"]);
    let one = a.context("javascript").await;
    assert_eq!(js_how(&a, &one).await, "spawned");
    assert_eq!(
        a.run_in(
            &one,
            "let [p, q] = [6, 7]; console.log(p * q, process.versions.node.split('.')[0] < 26)"
        )
        .await
        .stdout_text(),
        "42 true\n"
    );
    let two = a.context("javascript").await;
    assert_eq!(js_how(&a, &two).await, "spawned");
    assert_eq!(js_zygote_pid(a.pid()), None);
}

/// A fork that dies before it answers the agent (injected: its intermediate process dies of SIGSEGV
/// at its start, or once it has forked the kernel — as forks made while another thread of the
/// zygote was mid-change were seen to) is tried again by the zygote: the context is still forked,
/// the zygote stays the same, and no kernel of the
/// dead attempt shares the context's channels (every cell is answered once, in order).
#[tokio::test]
async fn a_javascript_fork_that_dies_before_answering_is_tried_again() {
    lizard_test_support::needs_root!();
    for fault in ["intermediate-dies", "dies-after-fork"] {
        let a = Agent::start_with_env(&[], &[("LIZARD_TEST_ZYGOTE_FAULT", fault)]);
        let ctx = a.context("javascript").await;
        // (A fork that never answered would have been spawned instead, after the deadline.)
        assert_eq!(out(&a, &ctx, JS_HOW).await, "forked\n", "{fault}");
        let zygote = js_zygote_pid(a.pid()).expect("a zygote");
        for n in 1..=5 {
            let ex = a
                .run_in(
                    &ctx,
                    "var n = (typeof n === 'number' ? n : 0) + 1; console.log(n)",
                )
                .await;
            assert_eq!(ex.stdout_text(), format!("{n}\n"), "{fault}: {ex:?}");
        }
        let other = a.context("javascript").await;
        assert_eq!(out(&a, &other, JS_HOW).await, "forked\n", "{fault}");
        assert_eq!(js_zygote_pid(a.pid()), Some(zygote), "{fault}");
    }
}
