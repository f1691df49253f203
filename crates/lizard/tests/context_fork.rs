//! Fork of a context (`POST /v1/sandboxes/{id}/contexts/{ctx}/fork`): the new context's kernel is
//! a copy-on-write fork of the source's live kernel (Python, JavaScript, Bash). Real server, real
//! sandboxes and kernels.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A server of the test's with one sandbox: what the helpers below work on, so that a call names
/// only the context.
struct Sb {
    s: Server,
    id: String,
}

/// How long a cell that must time out may run.
const TIMEOUT_MS: u64 = 1500;

impl Sb {
    /// A server with default flags and a sandbox.
    async fn start() -> Sb {
        let (s, id) = Server::with_sandbox().await;
        Sb { s, id }
    }

    /// A server started with `flags` and a sandbox.
    async fn with_flags(flags: &str) -> Sb {
        let s = Server::with_flags(flags);
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        Sb { s, id }
    }

    /// The sandbox's path `rest` (`contexts/{ctx}`, …).
    fn path(&self, rest: &str) -> String {
        format!("/v1/sandboxes/{}/{rest}", self.id)
    }

    async fn context(&self, language: &str) -> String {
        context(&self.s, &self.id, language).await
    }

    /// A new context made with `body` (`language`, `limits`); its id.
    async fn context_with(&self, body: Value) -> String {
        context_with(&self.s, &self.id, body).await
    }

    async fn fork_with(&self, ctx: &str, body: Value) -> Resp {
        let path = self.path(&format!("contexts/{ctx}/fork"));
        self.s.post(&path, body).await
    }

    async fn fork(&self, ctx: &str) -> Resp {
        let path = self.path(&format!("contexts/{ctx}/fork"));
        self.s.admin("POST", &path, None).await
    }

    /// Fork `ctx`, expecting success; returns the answer.
    async fn forked(&self, ctx: &str) -> Value {
        let r = self.fork(ctx).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["forked_from"], ctx, "{}", r.text);
        assert_ne!(r.body["id"], ctx, "{}", r.text);
        r.body
    }

    /// Fork `ctx` live (`exact: false`), expecting success; returns the answer.
    async fn forked_live(&self, ctx: &str) -> Value {
        let r = self.fork_with(ctx, json!({"exact": false})).await;
        r.expect_status(201).body
    }

    /// Fork `ctx` by default, expecting an exact fork (a checkpoint); returns the answer.
    async fn forked_exactly(&self, ctx: &str) -> Value {
        let f = self.fork(ctx).await.expect_status(201);
        assert_eq!(f.body["method"], "checkpoint", "{}", f.text);
        f.body
    }

    async fn run(&self, ctx: &str, code: &str) -> Value {
        self.s
            .run(&self.id, json!({ "code": code, "context": ctx }))
            .await
    }

    /// Run and return stdout, asserting the run succeeded.
    async fn out(&self, ctx: &str, code: &str) -> String {
        let ex = self.run(ctx, code).await;
        assert_eq!(ex["status"], "ok", "{code}: {ex}");
        stdout(&ex)
    }

    /// Run `code`, which prints a number: the number.
    async fn number(&self, ctx: &str, code: &str) -> u64 {
        let out = self.out(ctx, code).await;
        out.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{code}: {out:?}: {e}"))
    }

    /// Run `code` with a timeout of [`TIMEOUT_MS`], which it must reach.
    async fn times_out(&self, ctx: &str, code: &str) {
        let body = json!({"code": code, "context": ctx, "timeout_ms": TIMEOUT_MS});
        let ex = self.s.run(&self.id, body).await;
        assert_eq!(ex["status"], "timeout", "{ex}");
    }

    /// Start `code` in `ctx` in the background and wait until the context is busy with it; the
    /// answer once the run ends.
    async fn busy_with(&self, ctx: &str, code: &str) -> tokio::task::JoinHandle<Resp> {
        let long = self
            .s
            .run_in_background(&self.id, json!({"code": code, "context": ctx}));
        assert!(
            eventually(Duration::from_secs(30), || async {
                self.get_context(ctx).await["state"] == "busy"
            })
            .await,
            "{ctx} never got busy with {code}"
        );
        long
    }

    /// `POST …/contexts/{ctx}/{action}` (`interrupt`, `restart`): the answer.
    async fn act(&self, ctx: &str, action: &str) -> Resp {
        let path = self.path(&format!("contexts/{ctx}/{action}"));
        self.s.admin("POST", &path, None).await
    }

    /// Delete context `ctx`, which must succeed.
    async fn delete(&self, ctx: &str) {
        let path = self.path(&format!("contexts/{ctx}"));
        self.s.admin("DELETE", &path, None).await.expect_status(204);
    }

    async fn get_context(&self, ctx: &str) -> Value {
        let path = self.path(&format!("contexts/{ctx}"));
        self.s
            .admin("GET", &path, None)
            .await
            .expect_status(200)
            .body
    }

    /// The sandbox's contexts (`GET …/contexts`).
    async fn contexts(&self) -> Resp {
        self.s.admin("GET", &self.path("contexts"), None).await
    }

    /// How many contexts other than the default one (prestarted in the background, so it may
    /// appear between two counts).
    async fn context_count(&self) -> usize {
        let r = self.contexts().await;
        r.body
            .as_array()
            .map(|a| a.iter().filter(|c| c["is_default"] != json!(true)).count())
            .unwrap_or(0)
    }

    /// Wait until `code`'s output (a number) in `ctx` is above `above`; returns it.
    async fn grows(&self, ctx: &str, code: &str, above: u64) -> u64 {
        let mut last = 0;
        for _ in 0..200 {
            last = self.out(ctx, code).await.trim().parse().unwrap_or(0);
            if last > above {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{code}: stayed at {last}, not above {above}");
    }
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

/// Python: the fork holds the source's variables, functions and imports, and its execution count;
/// then the two diverge. Forking twice, and forking a fork, work the same way.
#[tokio::test]
async fn a_python_fork_has_the_sources_state_and_then_diverges() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("python").await;
    sb.out(&a, "import math\nx = 41\ndef f(): return x + 1")
        .await;
    sb.out(&a, "x += 1").await;

    let b = sb.forked(&a).await;
    assert_eq!(b["language"], "python", "{b}");
    assert_eq!(
        b["execution_count"], 2,
        "the fork goes on from the source's count: {b}"
    );
    assert_eq!(b["lost"], json!([]), "{b}");
    let b = id_of(&b);
    let ex = sb.run(&b, "print(x, f(), math.pi > 3)").await;
    assert_eq!(stdout(&ex), "42 43 True\n", "{ex}");
    assert_eq!(ex["execution_count"], 3, "{ex}");

    // Divergence: each change stays in its context.
    sb.out(&b, "x = 'fork'").await;
    sb.out(&a, "x = 'source'").await;
    assert_eq!(sb.out(&a, "print(x)").await, "source\n");
    assert_eq!(sb.out(&b, "print(x)").await, "fork\n");
    // Different processes, each its own group leader, both children of the agent.
    let pa = sb
        .out(
            &a,
            "import os; print(os.getpid(), os.getpgid(0), os.getppid())",
        )
        .await;
    let pb = sb
        .out(
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
    let c = id_of(&sb.forked(&a).await);
    assert_eq!(sb.out(&c, "print(x)").await, "source\n");
    let d = id_of(&sb.forked(&b).await);
    assert_eq!(sb.out(&d, "print(x, f.__name__)").await, "fork f\n");
}

/// JavaScript: a closure and its captured state come along, timers keep firing in both kernels
/// (the event loop is forked with uv_loop_fork), a listening server is reported as shared by a
/// live fork.
#[tokio::test]
async fn a_javascript_fork_keeps_closures_and_timers() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("javascript").await;
    sb.out(
                &a,
        "const mk = () => { let n = 0; return () => ++n; };\nglobalThis.counter = mk();\ncounter(); counter();\nglobalThis.ticks = 0; setInterval(() => { ticks++; }, 10);",
    )
    .await;
    let b = sb.forked(&a).await;
    assert_eq!(b["language"], "javascript", "{b}");
    assert_eq!(b["execution_count"], 1, "{b}");
    assert_eq!(b["lost"], json!([]), "timers go along: {b}");
    let b = id_of(&b);
    assert_eq!(
        sb.out(&b, "console.log(counter(), counter())").await,
        "3 4\n"
    );
    assert_eq!(sb.out(&a, "console.log(counter())").await, "3\n");
    // The fork's own process group gets the interrupt; its state stays.
    sb.times_out(&b, "while (true) {}").await;
    assert_eq!(sb.out(&b, "console.log(counter())").await, "5\n");
    // The interval runs in the fork's own loop.
    let t0 = sb.number(&b, "console.log(ticks)").await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            sb.number(&b, "console.log(ticks)").await > t0
        })
        .await,
        "the fork's timer never fired"
    );
    // process.pid is the fork's own.
    let pa = sb.out(&a, "console.log(process.pid)").await;
    let pb = sb.out(&b, "console.log(process.pid)").await;
    assert_ne!(pa, pb);
    // A listening socket is shared with the fork: said so.
    sb.out(&a, "globalThis.srv = require('net').createServer().listen(0, '127.0.0.1');\nawait new Promise((r) => srv.once('listening', r));").await;
    sb.out(
        &a,
        "globalThis.cp = require('child_process').spawn('sleep', ['300']);",
    )
    .await;
    // Asked for a live fork: the exact one (the default) would carry them (see
    // `an_exact_fork_carries_threads_servers_and_commands`).
    let c = sb.forked_live(&a).await;
    let lost = c["lost"].to_string();
    assert!(lost.contains("listening socket"), "{c}");
    assert!(lost.contains("child process"), "{c}");
    assert_eq!(sb.out(&id_of(&c), "console.log(counter())").await, "4\n");
}

/// Bash: variables, functions and aliases come along (a forked subshell), the two diverge, and a
/// fork of the fork works.
#[tokio::test]
async fn a_bash_fork_keeps_variables_functions_and_aliases() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("bash").await;
    sb.out(
        &a,
        "x=41\nf() { echo \"f:$x\"; }\nalias hi='echo hi'\ncd /tmp\ntrap 'echo got-usr1' USR1",
    )
    .await;
    let b = sb.forked(&a).await;
    assert_eq!(b["execution_count"], 1, "{b}");
    assert_eq!(b["lost"], json!([]), "no background job: {b}");
    let b = id_of(&b);
    assert_eq!(sb.out(&b, "f; hi; pwd").await, "f:41\nhi\n/tmp\n");
    // The source's traps are the fork's too (a subshell would have reset them).
    assert_eq!(
        sb.out(&b, "kill -USR1 $BASHPID; echo after").await,
        "got-usr1\nafter\n"
    );
    sb.out(&b, "x=2").await;
    assert_eq!(sb.out(&a, "f").await, "f:41\n");
    assert_eq!(sb.out(&b, "f").await, "f:2\n");
    // A declare in a cell stays global in the fork too (its loop is at the top level).
    sb.out(&b, "declare -A m=([k]=v)").await;
    assert_eq!(sb.out(&b, "echo ${m[k]}").await, "v\n");
    // Own process group; a failing cell and `exit` behave as in any Bash context.
    let pg = sb.out(&b, "echo $BASHPID $(ps -o pgid= -p $BASHPID)").await;
    let v: Vec<&str> = pg.split_whitespace().collect();
    assert_eq!(v[0], v[1], "{pg}");
    let ex = sb.run(&b, "false").await;
    assert_eq!(ex["status"], "error", "{ex}");
    // Interrupted by its own process group's SIGINT, the fork's loop survives with its state.
    sb.times_out(&b, "sleep 30").await;
    assert_eq!(sb.out(&b, "f").await, "f:2\n");
    let c = id_of(&sb.forked(&b).await);
    assert_eq!(sb.out(&c, "f; hi").await, "f:2\nhi\n");
    let ex = sb.run(&c, "exit 3").await;
    assert_eq!(ex["status"], "kernel_died", "{ex}");
    assert_eq!(
        sb.out(&b, "f").await,
        "f:2\n",
        "the fork's fork dying leaves the fork"
    );
    // The source's background jobs stay with it, counted in `lost` (no job: nothing said).
    sb.out(&b, "sleep 60 & sleep 61 &").await;
    let d = sb.forked(&b).await;
    assert!(d["lost"].to_string().contains("2 background job(s)"), "{d}");
    assert_eq!(sb.out(&id_of(&d), "jobs -p | wc -l").await, "0\n");
    sb.out(&b, "kill $(jobs -p); wait; true").await;
}

/// Unknown context → 404; a context running a cell → 409 (documented: fork between cells); a
/// source's running threads are reported lost.
#[tokio::test]
async fn fork_refusals_and_losses_are_said() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let r = sb.fork("0123456789abcdef0123456789abcdef").await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.body["code"], "not_found", "{}", r.text);
    let a = sb.context("python").await;
    let r = sb.fork_with(&a, json!({"bogus": 1})).await;
    assert_eq!(r.status, 400, "{}", r.text);

    // Busy: a cell runs (started in the background), the fork is refused and the cell goes on.
    let long = sb
        .busy_with(
            &a,
            "import time\nfor i in range(600): time.sleep(0.05)\nprint('finished')",
        )
        .await;
    let r = sb.fork(&a).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["code"], "conflict", "{}", r.text);
    assert!(r.text.contains("between cells"), "{}", r.text);
    sb.act(&a, "interrupt").await.expect_status(204);
    let done = long.await.unwrap();
    assert_eq!(done.body["status"], "interrupted", "{}", done.text);

    // Threads: only the forking one survives; said in `lost`.
    sb.out(
                &a,
        "import threading, time\nthreading.Thread(target=time.sleep, args=(120,), name='sleeper', daemon=True).start()\ny = 7",
    )
    .await;
    // A task left pending on IPython's asyncio loop: the fork gets a loop of its own.
    sb.out(
                &a,
        "import asyncio\nawait asyncio.sleep(0)\npending = asyncio.ensure_future(asyncio.sleep(300))",
    )
    .await;
    // Asked for a live fork (`exact: false`; by default the server would checkpoint instead).
    let b = sb.forked_live(&a).await;
    assert_eq!(b["method"], "live", "{b}");
    let lost = b["lost"].to_string();
    assert!(lost.contains("thread sleeper"), "{b}");
    assert!(lost.contains("asyncio tasks"), "{b}");
    let b = id_of(&b);
    assert_eq!(
        sb.out(&b, "import threading\nprint(y, [t.name for t in threading.enumerate() if t.name == 'sleeper'])").await,
        "7 []\n"
    );
    assert_eq!(
        sb.out(&b, "await asyncio.sleep(0.01)\nprint('own loop')")
            .await,
        "own loop\n"
    );
}

/// A fork is a context of its own: interrupted, restarted and deleted without its source (and
/// the other way round); killing the source's kernel or deleting the source leaves the fork.
#[tokio::test]
async fn a_fork_lives_on_its_own() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("python").await;
    sb.out(&a, "x = 1").await;
    let b = id_of(&sb.forked(&a).await);
    let c = id_of(&sb.forked(&a).await);

    // Interrupt the fork's cell: its state stays, the source is untouched.
    sb.times_out(&b, "import time\nwhile True: time.sleep(0.01)")
        .await;
    assert_eq!(sb.out(&b, "print(x)").await, "1\n");
    assert_eq!(sb.out(&a, "print(x)").await, "1\n");

    // Restart the fork: its state goes, the source's and the sibling's stay.
    sb.act(&b, "restart").await.expect_status(200);
    let ex = sb.run(&b, "x").await;
    assert_eq!(ex["error"]["name"], "NameError", "{ex}");
    assert_eq!(sb.out(&c, "print(x)").await, "1\n");

    // Kill the source's kernel: the forks live.
    let ex = sb
        .run(
            &a,
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        )
        .await;
    assert_eq!(ex["status"], "kernel_died", "{ex}");
    assert_eq!(sb.out(&c, "print(x)").await, "1\n");

    // Delete the source: the fork lives, and the uid it shares is not given to a new context.
    let uid = sb.out(&c, "import os; print(os.getuid())").await;
    sb.delete(&a).await;
    assert_eq!(sb.out(&c, "print(x)").await, "1\n");
    for _ in 0..3 {
        let n = sb.context("python").await;
        let other = sb.out(&n, "import os; print(os.getuid())").await;
        assert_ne!(other, uid, "a new context got the uid a fork still runs as");
    }
    // Delete a fork: the other lives.
    sb.delete(&b).await;
    assert_eq!(sb.out(&c, "print(x)").await, "1\n");
    let info = sb.get_context(&c).await;
    assert_eq!(info["state"], "idle", "{info}");
}

/// Security, attacked from inside: a fork runs as its source's uid, so it reaches its source (one
/// owner, one security domain) but no unrelated context; and a source whose user code lies about
/// the fork (the pid of another context's process) does not make the agent adopt that process.
#[tokio::test]
async fn a_fork_cannot_reach_an_unrelated_context() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("python").await;
    let u = sb.context("python").await;
    sb.out(
        &u,
        "secret = 's3'\nimport subprocess\nchild = subprocess.Popen(['sleep', '600'])",
    )
    .await;
    let upid = sb
        .out(&u, "import os; print(os.getpid())")
        .await
        .trim()
        .to_string();
    let cpid = sb.out(&u, "print(child.pid)").await.trim().to_string();
    let b = id_of(&sb.forked(&a).await);

    // From inside the fork: no signal, no memory, no fds, no environment of the unrelated kernel.
    let probe = format!(
        r#"import os
res = []
for what, f in [
    ("kill", lambda: os.kill({upid}, 0)),
    ("kill-child", lambda: os.kill({cpid}, 0)),
    ("environ", lambda: open("/proc/{upid}/environ", "rb").read()),
    ("mem", lambda: open("/proc/{upid}/mem", "rb").read(1)),
    ("fd", lambda: os.listdir("/proc/{upid}/fd")),
]:
    try:
        f()
        res.append(what + ":reached")
    except (PermissionError, ProcessLookupError) as e:
        res.append(what + ":denied")
print(" ".join(res))"#
    );
    let got = sb.out(&b, &probe).await;
    assert_eq!(
        got.trim(),
        "kill:denied kill-child:denied environ:denied mem:denied fd:denied",
        "{got}"
    );
    // The fork runs as its source's uid (documented: one owner).
    let ua = sb.out(&a, "import os; print(os.getuid())").await;
    let ub = sb.out(&b, "import os; print(os.getuid())").await;
    let uu = sb.out(&u, "import os; print(os.getuid())").await;
    assert_eq!(ua, ub);
    assert_ne!(ub, uu);

    // A lying source: its user code (finding the runner's globals through its SIGINT handler)
    // replaces the runner's fork with one that names the unrelated context's child process
    // (another uid), then its kernel: both refused, nothing adopted.
    let before = sb.context_count().await;
    for victim in [&cpid, &upid] {
        let lie = format!(
            r#"import signal
R = signal.getsignal(signal.SIGINT).__globals__
def _lie(shell, msg):
    R["_emit"]({{"ev": "forked", "id": msg["id"], "pid": {victim}, "lost": []}}, interruptible=False)
    R["_emit"]({{"ev": "done", "id": msg["id"], "status": "ok"}}, interruptible=False)
    return False
R["_fork_op"] = _lie"#
        );
        sb.out(&b, &lie).await;
        let r = sb.fork(&b).await;
        assert_eq!(r.status, 503, "{}", r.text);
        assert!(r.text.contains(&format!("pid {victim}")), "{}", r.text);
    }
    assert_eq!(sb.out(&u, "print(secret, child.poll())").await, "s3 None\n");
    assert_eq!(
        sb.context_count().await,
        before,
        "no context was made of the lies"
    );
}

/// The new kernel joins its cgroup thread-wise (`tasks`, single-threaded right after the fork):
/// a source whose user code makes the new kernel start a thread before it joins, so that the
/// thread stays in the source's cgroup (outside the fork's limits), gets no fork — the agent
/// checks every thread — and the half-joined process is gone, the source untouched.
#[tokio::test]
async fn a_fork_that_leaves_a_thread_in_its_sources_cgroup_is_refused() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb.context("python").await;
    let marker = "lizard-left-behind";
    let split = format!(
        r#"import signal, threading, time
R = signal.getsignal(signal.SIGINT).__globals__
_orig = R["_become_fork"]
def _split(d, procs, intermediate):
    threading.Thread(target=time.sleep, args=(3600,), name="{marker}", daemon=True).start()
    return _orig(d, procs, intermediate)
R["_become_fork"] = _split
x = 7"#
    );
    sb.out(&a, &split).await;
    let r = sb.fork(&a).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.text.contains("did not join its cgroup"), "{}", r.text);
    // No context was made of it: there is the source and at most the sandbox's default one
    // (prestarted meanwhile, so no count before and after).
    let all = sb.contexts().await;
    assert!(
        all.body
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"] == json!(a) || c["is_default"] == json!(true)),
        "{}",
        all.text
    );
    // The source goes on; no process of its uid but its own kernel is left (the half-joined one
    // was killed, with its thread).
    let left = r#"import os, time
me, mine = os.getpid(), []
deadline = time.time() + 10
while True:
    mine = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me
            and os.stat("/proc/" + p).st_uid == os.getuid()]
    if not mine or time.time() > deadline:
        break
    time.sleep(0.05)
print(x, mine)"#;
    assert_eq!(sb.out(&a, left).await, "7 []\n");
}

/// Fork → first result in the new context, measured back to back and after 100 ms without a fork
/// (medians; reported in docs/PERFORMANCE.md, not asserted).
/// `cargo test --release -p lizard --test context_fork fork_latency -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn fork_latency() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    for (lang, code, one) in [
        ("python", "import json\nx = list(range(100000))", "print(1)"),
        (
            "javascript",
            "globalThis.x = Array.from({length: 100000}, (_, i) => i);",
            "console.log(1)",
        ),
        ("bash", "x=1", "echo 1"),
    ] {
        let a = sb.context(lang).await;
        sb.out(&a, code).await;
        // Back to back, and each fork after 100 ms without any (a cgroup move's cost, for one,
        // depends on how recently the last one happened).
        let mut fork_ms = [Vec::new(), Vec::new()];
        let mut total_ms = [Vec::new(), Vec::new()];
        for i in 0..30 {
            let idle = i % 2;
            if idle == 1 {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let t = std::time::Instant::now();
            let b = id_of(&sb.forked(&a).await);
            let f = t.elapsed();
            assert_eq!(sb.out(&b, one).await, "1\n");
            total_ms[idle].push(t.elapsed().as_secs_f64() * 1000.0);
            fork_ms[idle].push(f.as_secs_f64() * 1000.0);
            sb.delete(&b).await;
        }
        // The same machine, the same moment: a create → first result of the language.
        let mut create_ms = Vec::new();
        for _ in 0..15 {
            let t = std::time::Instant::now();
            let b = sb.context(lang).await;
            assert_eq!(sb.out(&b, one).await, "1\n");
            create_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            sb.delete(&b).await;
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let [mut tight_f, mut idle_f] = fork_ms;
        let [mut tight_t, mut idle_t] = total_ms;
        println!(
            "{lang}: fork median {:.1} ms, fork + first result median {:.1} ms; after 100 ms idle: fork {:.1} ms, fork + first result {:.1} ms (create + first result {:.1} ms)",
            med(&mut tight_f),
            med(&mut tight_t),
            med(&mut idle_f),
            med(&mut idle_t),
            med(&mut create_ms)
        );
    }
}

/// A fork has a cgroup of its own (the kernel is in it, not in its source's) with its source's
/// limits, or the request's: a fork over its memory limit dies alone.
#[tokio::test]
async fn a_fork_has_its_own_cgroup_and_limits() {
    lizard_test_support::needs_root!();
    let sb = Sb::start().await;
    let a = sb
        .context_with(json!({"language": "python", "limits": {"memory_mb": 512}}))
        .await;
    sb.out(&a, "x = 1").await;
    let b = sb.forked(&a).await;
    assert_eq!(b["limits"]["memory_mb"], 512, "the source's limits: {b}");
    let b = id_of(&b);
    let r = sb
        .fork_with(&a, json!({"limits": {"memory_mb": 128}}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["limits"]["memory_mb"], 128, "{}", r.text);
    let c = id_of(&r.body);
    let r = sb
        .fork_with(&a, json!({"limits": {"memory_mb": 1 << 30}}))
        .await;
    assert_eq!(r.status, 400, "limits above the sandbox's: {}", r.text);

    for (ctx, name) in [(&a, &a), (&b, &b), (&c, &c)] {
        let cg = sb.out(ctx, "print(open('/proc/self/cgroup').read())").await;
        assert!(
            cg.lines()
                .any(|l| l.ends_with(&format!(":memory:/ctx/ctx-{name}"))),
            "{ctx}: {cg}"
        );
    }
    let ex = sb
        .run(&c, "b = b'x' * (300 << 20)\nprint('survived')")
        .await;
    assert_eq!(ex["status"], "kernel_died", "{ex}");
    assert!(
        ex["error"]["value"].as_str().unwrap().contains("128 MiB"),
        "{ex}"
    );
    assert_eq!(sb.out(&a, "print(x)").await, "1\n");
    assert_eq!(sb.out(&b, "print(x)").await, "1\n");
}

/// An exact fork (a CRIU checkpoint of the kernel's processes, by default when a live fork would
/// lose something): a thread still counting, a TCP server started in a cell still answering and
/// a background command still running — in the fork, independently of its source — for Python,
/// JavaScript and Bash.
#[tokio::test]
async fn an_exact_fork_carries_threads_servers_and_commands() {
    lizard_test_support::needs_root_and_criu!();
    let sb = Sb::start().await;

    // Python.
    let py = sb.context("python").await;
    sb.out(
                &py,
        "import threading, time, socket, subprocess\n\
         n = 0\n\
         def count():\n    global n\n    while True:\n        n += 1\n        time.sleep(0.01)\n\
         threading.Thread(target=count, daemon=True).start()\n\
         srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n\
         port = srv.getsockname()[1]\n\
         def serve():\n    while True:\n        c, _ = srv.accept(); c.sendall(b'answer %d' % n); c.close()\n\
         threading.Thread(target=serve, daemon=True).start()\n\
         bg = subprocess.Popen(['sleep', '600'])\n\
         x = 'source'",
    )
    .await;
    let f = sb.forked_exactly(&py).await;
    assert_eq!(f["lost"], json!([]), "{f}");
    let fp = id_of(&f);
    let n0 = sb.number(&fp, "print(n)").await;
    sb.grows(&fp, "print(n)", n0).await;
    let answer = sb.out(
                &fp,
        "c = socket.create_connection(('127.0.0.1', port)); print(c.recv(100).decode()); c.close()",
    )
    .await;
    assert!(answer.starts_with("answer "), "{answer}");
    assert_eq!(
        sb.out(&fp, "print(bg.poll(), x); x = 'fork'").await,
        "None source\n"
    );
    assert_eq!(sb.out(&py, "print(x, bg.poll())").await, "source None\n");
    // The copy's /proc is its own: the sandbox's (the source's, its agent's) is untouched.
    assert_eq!(
        sb.out(
            &py,
            "import os\nprint(os.readlink('/proc/self') == str(os.getpid()))"
        )
        .await,
        "True\n"
    );
    // Interrupting the fork's cell keeps its state.
    let long = sb.busy_with(&fp, "time.sleep(120)").await;
    sb.act(&fp, "interrupt").await.expect_status(204);
    assert_eq!(long.await.unwrap().body["status"], "interrupted");
    assert_eq!(sb.out(&fp, "print(x)").await, "fork\n");

    // JavaScript: a timer counting, a server listening, a child process.
    let js = sb.context("javascript").await;
    let ex = sb
        .run(
            &js,
            "const net = require('net'); const cp = require('child_process');\n\
         globalThis.ticks = 0; setInterval(() => { globalThis.ticks++ }, 10);\n\
         globalThis.srv = net.createServer(c => c.end('js answer ' + globalThis.ticks));\n\
         await new Promise(r => globalThis.srv.listen(0, '127.0.0.1', r));\n\
         globalThis.jsport = globalThis.srv.address().port;\n\
         globalThis.child = cp.spawn('sleep', ['600'], { stdio: 'ignore' });\n\
         globalThis.y = 'source';\n\
         const next = (() => { let c = 0; return () => ++c; })(); next(); next();",
        )
        .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let fj = id_of(&sb.forked_exactly(&js).await);
    let t0 = sb.number(&fj, "console.log(globalThis.ticks)").await;
    sb.grows(&fj, "console.log(globalThis.ticks)", t0).await;
    let answer = sb.out(
                &fj,
        "const got = await new Promise((ok, bad) => { const c = require('net').connect(globalThis.jsport, '127.0.0.1'); let d = ''; c.on('data', x => d += x); c.on('end', () => ok(d)); c.on('error', bad); }); console.log(got)",
    )
    .await;
    assert!(answer.starts_with("js answer "), "{answer}");
    assert_eq!(
        sb.out(
                        &fj,
            "console.log(process.kill(globalThis.child.pid, 0), globalThis.y); globalThis.y = 'fork'"
        )
        .await,
        "true source\n"
    );
    assert_eq!(sb.out(&js, "console.log(globalThis.y)").await, "source\n");
    // A closure's captured state, in each on its own.
    assert_eq!(sb.out(&fj, "console.log(next())").await, "3\n");
    assert_eq!(sb.out(&fj, "console.log(next())").await, "4\n");
    assert_eq!(sb.out(&js, "console.log(next())").await, "3\n");

    // Bash: a variable and a background job still running.
    let sh = sb.context("bash").await;
    sb.out(
                &sh,
        "V=source; (i=0; while :; do i=$((i+1)); echo $i > /tmp/forkbg; sleep 0.02; done) >/dev/null 2>&1 & JOB=$!",
    )
    .await;
    let fb = id_of(&sb.forked_exactly(&sh).await);
    assert_eq!(
        sb.out(&fb, "kill -0 $JOB && echo $V alive; V=fork").await,
        "source alive\n"
    );
    assert_eq!(sb.out(&sh, "echo $V").await, "source\n");
    assert_eq!(sb.out(&fb, "echo $V").await, "fork\n");

    // Deleting a fork ends every process it had (its init with them); the source's go on.
    sb.delete(&fp).await;
    let sleepers = "import os, time\n\
        def k():\n    \
            n = 0\n    \
            for p in os.listdir('/proc'):\n        \
                try:\n            \
                    n += p.isdigit() and open(f'/proc/{p}/cmdline', 'rb').read() == b'sleep\\x00600\\x00'\n        \
                except OSError:\n            \
                    pass\n    \
            return n\n\
        for _ in range(200):\n    \
            if k() == 3: break\n    \
            time.sleep(0.05)\n\
        print(k(), bg.poll())";
    // The source's `sleep 600`, the JavaScript one's and its fork's: the Python fork's went.
    assert_eq!(sb.out(&py, sleepers).await, "3 None\n");
}

/// Without CRIU (`--criu none`) the fork is live and says what it lost and why it is not exact;
/// asking for an exact one is a typed 409.
#[tokio::test]
async fn without_criu_a_fork_is_live_and_says_why() {
    lizard_test_support::needs_root!();
    let sb = Sb::with_flags("--criu none").await;
    let a = sb.context("python").await;
    sb.out(
                &a,
        "import threading, time\nthreading.Thread(target=time.sleep, args=(120,), name='sleeper', daemon=True).start()",
    )
    .await;
    let f = sb.fork(&a).await;
    assert_eq!(f.status, 201, "{}", f.text);
    assert_eq!(f.body["method"], "live", "{}", f.text);
    assert!(f.body["lost"].to_string().contains("sleeper"), "{}", f.text);
    assert!(
        f.body["checkpoint_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{}",
        f.text
    );
    // The agent's host-only half of an exact fork is no client's to call.
    for path in [
        sb.path(&format!("contexts/{a}/fork/prepare")),
        sb.path(&format!("context-forks/{a}/prepare")),
        sb.path(&format!("context-forks/{a}/adopt")),
    ] {
        let r = sb.s.post(&path, json!({})).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
    }
    let r = sb.fork_with(&a, json!({"exact": true})).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["code"], "conflict", "{}", r.text);
    assert!(r.text.contains("CRIU"), "{}", r.text);
}
