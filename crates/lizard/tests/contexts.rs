//! Contexts are a boundary: each context's kernel runs as a uid of its own and is not dumpable, so
//! code in one context cannot read another's memory, write into its pipes, signal it, or drive it
//! through the agent's TCP port; nothing user code runs can signal the agent. What contexts do
//! share — the files, through the sandbox user's group — still works. Real server, real sandboxes.

mod common;

use common::registries::TestPackage;
use common::*;
use serde_json::{json, Value};

/// Run `code` in context `ctx`.
async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    s.run(id, json!({ "code": code, "context": ctx })).await
}

/// A command's aggregated result.
async fn command(s: &Server, id: &str, cmd: &str) -> Value {
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/commands"),
            json!({ "cmd": cmd }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body
}

/// From context A: B's memory through `/proc/<B>/mem`, B's fds under `/proc/<B>/fd/` (its
/// control pipe, which would make B run A's code), `os.kill(B, 9)` — all refused, and B keeps its
/// state. (Before: every context ran as uid 1000, and all three worked.)
#[tokio::test]
async fn one_context_cannot_read_write_or_kill_another() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let a = context(&s, &id, "python").await;
    let b = context(&s, &id, "python").await;
    let ex = run_in(
        &s,
        &id,
        &b,
        "secret = 'lizard-secret-' + 'x' * 16\nimport os\nprint(os.getpid(), os.getuid())",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let out = stdout(&ex);
    let mut it = out.split_whitespace();
    let (b_pid, b_uid) = (
        it.next().unwrap().to_string(),
        it.next().unwrap().to_string(),
    );
    let attack = format!(
        r#"
import os, re
pid = {b_pid}
def attempt(name, f):
    try:
        f()
        print(name, "ALLOWED")
    except OSError as e:
        print(name, type(e).__name__)
def read_mem():
    maps = open("/proc/%d/maps" % pid).read()
    with open("/proc/%d/mem" % pid, "rb") as m:
        for line in maps.splitlines():
            if "[heap]" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                m.seek(lo)
                if b"lizard-secret-" in m.read(hi - lo):
                    return
    raise OSError("not found")
attempt("mem", read_mem)
attempt("fds", lambda: os.listdir("/proc/%d/fd" % pid))
def write_control():
    with open("/proc/%d/fd/4" % pid, "w") as f:
        f.write('{{"op":"exec","id":99,"code":"secret = 0","env":{{}}}}\n')
attempt("control", write_control)
attempt("environ", lambda: open("/proc/%d/environ" % pid).read())
attempt("kill", lambda: os.kill(pid, 9))
print("uid", os.getuid())
"#
    );
    let ex = run_in(&s, &id, &a, &attack).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let out = stdout(&ex);
    assert!(!out.contains("ALLOWED"), "{out}");
    for probe in ["mem", "fds", "control", "environ", "kill"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(probe) && l.contains("PermissionError")),
            "{probe}: {out}"
        );
    }
    let a_uid = out
        .lines()
        .find_map(|l| l.strip_prefix("uid "))
        .unwrap()
        .to_string();
    assert_ne!(a_uid, b_uid, "two contexts share a uid");
    // B is alive, its state intact.
    let ex = run_in(&s, &id, &b, "print(secret, os.getpid())").await;
    assert_eq!(ex["status"], "ok", "{ex}");
    assert_eq!(
        stdout(&ex).trim(),
        format!("lizard-secret-{} {b_pid}", "x".repeat(16))
    );
}

/// `kill -TERM 1` (and SIGKILL) from a command and from a context fails with EPERM, and the
/// agent keeps answering. (Before: the agent ran as the same uid as user code; the signal was
/// only dropped because PID 1 installs no handler, and any handler would have let it through.)
#[tokio::test]
async fn user_code_cannot_signal_the_agent() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let r = command(
        &s,
        &id,
        "kill -TERM 1; echo rc=$?; kill -KILL 1; echo rc=$?",
    )
    .await;
    let out = format!(
        "{}{}",
        r["stdout"].as_str().unwrap_or_default(),
        r["stderr"].as_str().unwrap_or_default()
    );
    assert_eq!(out.matches("rc=1").count(), 2, "{r}");
    assert!(out.contains("Operation not permitted"), "{r}");
    let ex = s
        .run(
            &id,
            json!({"code": "import os\ntry:\n    os.kill(1, 15)\n    print('sent')\nexcept PermissionError:\n    print('EPERM')"}),
        )
        .await;
    assert_eq!(stdout(&ex).trim(), "EPERM", "{ex}");
    let (out, _) = s.sh(&id, "kill -TERM 1 2>&1; echo rc=$?").await;
    assert!(
        out.contains("Operation not permitted") && out.contains("rc=1"),
        "{out}"
    );
    let ex = s.run(&id, json!({"code": "6 * 7"})).await;
    assert_eq!(ex["results"][0]["data"]["text/plain"], "42", "{ex}");
}

/// The agent's TCP port (127.0.0.1:8080 inside) serves the sandbox user's processes only: a
/// context's code that calls it (to drive another context) gets a typed 403; a command still
/// can. (Before: `POST /execute {context_id: B}` from context A ran code in B.)
#[tokio::test]
async fn a_context_cannot_drive_the_agent_over_tcp() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let b = context(&s, &id, "python").await;
    let ex = s
        .run(
            &id,
            json!({"code": format!(r#"
import json, urllib.request, urllib.error
req = urllib.request.Request("http://127.0.0.1:8080/execute", method="POST",
    data=json.dumps({{"code": "pwned = 1", "context": "{b}"}}).encode(),
    headers={{"content-type": "application/json"}})
try:
    urllib.request.urlopen(req, timeout=10)
    print("ALLOWED")
except urllib.error.HTTPError as e:
    print(e.code, json.loads(e.read())["code"])
"#)}),
        )
        .await;
    assert_eq!(stdout(&ex).trim(), "403 permission_denied", "{ex}");
    let ex = run_in(&s, &id, &b, "print('pwned' in globals())").await;
    assert_eq!(stdout(&ex).trim(), "False", "{ex}");
    let r = command(
        &s,
        &id,
        "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/health",
    )
    .await;
    assert_eq!(r["stdout"], "200", "{r}");
}

/// What contexts legitimately share still works: a file written by context A is readable and
/// writable by context B, by a command and through the files API; `pip install --user` from a
/// context is importable in another; `whoami` works in a context and in a command.
#[tokio::test]
async fn contexts_share_files_through_the_group() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let a = context(&s, &id, "python").await;
    let b = context(&s, &id, "javascript").await;
    let ex = run_in(
        &s,
        &id,
        &a,
        "open('/home/user/shared.txt', 'w').write('a\\n'); import os; os.makedirs('/home/user/d/e', exist_ok=True); open('/home/user/d/e/f', 'w').write('a')",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let ex = run_in(
        &s,
        &id,
        &b,
        "const fs = require('fs'); fs.appendFileSync('/home/user/shared.txt', 'b\\n'); fs.writeFileSync('/home/user/d/e/f', 'b'); fs.writeFileSync('/home/user/d/e/g', 'b'); 'ok'",
    )
    .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let r = command(
        &s,
        &id,
        "echo c >> ~/shared.txt && echo c > ~/d/e/f && whoami && id -u",
    )
    .await;
    assert_eq!(r["stdout"], "user\n1000\n", "{r}");
    let base = format!("/v1/sandboxes/{id}");
    let auth = [("authorization", format!("Bearer {}", s.admin_key))];
    let got = send(
        &s.addr,
        "GET",
        &format!("{base}/files?path=shared.txt"),
        &auth,
        vec![],
    )
    .await;
    assert_eq!(got.text, "a\nb\nc\n", "{}", got.text);
    let put = send(
        &s.addr,
        "PUT",
        &format!("{base}/files?path=d/e/f"),
        &auth,
        b"d".to_vec(),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    // Uploads are the sandbox user's, and the group's to write.
    let (out, _) = s
        .sh(&id, "stat -c '%U:%G %A' ~/d/e/f; cat ~/d/e/f; echo; echo x >> ~/d/e/f && echo appended; whoami")
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "user:user -rw-rw-r--", "{out}");
    assert_eq!(&lines[1..3], ["d", "appended"], "{out}");
    assert!(lines[3].starts_with("ctx"), "{out}");
    // The files API cannot reach what the user cannot: the agent's own /proc.
    let denied = send(
        &s.addr,
        "GET",
        &format!("{base}/files?path=/proc/1/environ"),
        &auth,
        vec![],
    )
    .await;
    assert_eq!(denied.status, 403, "{}", denied.text);

    // pip install --user from a context, imported in another one.
    let make_wheel = format!(
        "{}\nimport getpass\nprint(getpass.getuser())",
        registries::wheels_cell(
            &[TestPackage::new("lzshared", "1.0", "VALUE = 42\n")],
            "/home/user"
        )
    );
    let ex = run_in(&s, &id, &a, &make_wheel).await;
    assert!(stdout(&ex).trim().starts_with("ctx"), "{ex}");
    let ex = run_in(
        &s,
        &id,
        &a,
        "import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-index', '/home/user/lzshared-1.0-py3-none-any.whl'], capture_output=True, text=True)\nprint(r.returncode, r.stdout[-200:], r.stderr[-300:])",
    )
    .await;
    assert!(
        stdout(&ex).contains("Successfully installed lzshared"),
        "{ex}"
    );
    let c = context(&s, &id, "python").await;
    let ex = run_in(&s, &id, &c, "import lzshared; print(lzshared.VALUE)").await;
    assert_eq!(stdout(&ex).trim(), "42", "{ex}");
}

/// A context whose working directory the sandbox user cannot enter (`/root`) is a typed 400 that
/// says why and what to do (it was a 503 "cannot start the python kernel: Permission denied");
/// one it can enter starts there; one that does not exist is a 400 too.
#[tokio::test]
async fn a_cwd_the_user_cannot_enter_is_a_typed_400() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    let path = format!("/v1/sandboxes/{id}/contexts");
    let r = s.post(&path, json!({"cwd": "/root"})).await;
    r.expect_error(400, "invalid_request");
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.contains("\"/root\" is not accessible to the sandbox user"),
        "{message}"
    );
    let r = s.post(&path, json!({"cwd": "/nowhere"})).await;
    r.expect_error(400, "invalid_request");
    let r = s.post(&path, json!({"cwd": "/tmp"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let ctx = r.body["id"].as_str().unwrap().to_string();
    let ex = run_in(&s, &id, &ctx, "import os; os.getcwd()").await;
    assert_eq!(ex["results"][0]["data"]["text/plain"], "'/tmp'", "{ex}");
}
