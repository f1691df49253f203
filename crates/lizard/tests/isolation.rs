//! Isolation probes: code inside a sandbox tries to see or reach what it must not. Each test states
//! the promise it checks. Real server, real sandboxes.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

async fn sandbox(s: &Server) -> String {
    s.create(&s.admin_key.clone(), json!({})).await
}

/// Context code runs as a uid of its own (2000 + a slot, group `user`), commands as the
/// unprivileged `user` (uid 1000); neither has any capability, and both have no_new_privs and
/// seccomp. The agent (PID 1) is the sandbox's root with only the kept capabilities.
#[tokio::test]
async fn runs_unprivileged_with_no_capabilities() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let probe = "id -u; id -g; id -G; echo $HOME; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status";
    let check = |out: &str, who: &str| {
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(&lines[1..4], ["1000", "1000", "/home/user"], "{who}: {out}");
        for l in &lines[4..] {
            let (k, v) = l.split_once(':').unwrap();
            let v = v.trim();
            match k {
                "NoNewPrivs" => assert_eq!(v, "1"),
                "Seccomp" => assert_eq!(v, "2"),
                // The sandbox's bounding set: the agent's kept capabilities (none held here).
                "CapBnd" => assert_eq!(v, "00000000000000fb", "{who}"),
                _ => assert_eq!(v, "0000000000000000", "{who}: {k}"),
            }
        }
        lines[0].parse::<u32>().unwrap()
    };
    let (out, _) = s.sh(&id, probe).await;
    let uid = check(&out, "context");
    assert!((2000..2064).contains(&uid), "a context runs as {uid}");
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"cmd": probe}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = r.body["stdout"].as_str().unwrap_or_default().to_string();
    assert_eq!(check(&out, "command"), 1000, "{out}");
    // PID 1: root inside, exactly the kept set.
    let (out, _) = s
        .sh(
            &id,
            "grep -E '^(Uid|CapEff|CapBnd):' /proc/1/status | tr -s '\t' ' '",
        )
        .await;
    assert_eq!(
        out, "Uid: 0 0 0 0\nCapEff: 00000000000000fb\nCapBnd: 00000000000000fb\n",
        "{out}"
    );
}

/// PID 1 is the agent, no host process is visible, the hostname is the sandbox id.
#[tokio::test]
async fn own_pid_and_uts_namespaces() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let (out, _) = s
        .sh(
            &id,
            "tr '\\0' ' ' < /proc/1/cmdline; echo; hostname; ls /proc | grep -E '^[0-9]+$' | wc -l",
        )
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("lizard agent"), "{out}");
    assert_eq!(lines[1], id);
    let n: usize = lines[2].trim().parse().unwrap();
    assert!(n < 20, "{n} processes visible: the host's leak in");
}

/// Only loopback networking: no other interface, no route to the host's services.
#[tokio::test]
async fn loopback_only_network() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let (out, _) = s
        .sh(&id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        .await;
    assert_eq!(out, "lo\n");
    // The server listens on the host's loopback; the sandbox's loopback is its own.
    let port = s.addr.rsplit(':').next().unwrap();
    let ex = s
        .run(&id, json!({"code": format!("import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('reached')\nexcept OSError as e:\n    print('refused', e.errno)"), "language": "python"}))
        .await;
    assert!(stdout(&ex).starts_with("refused"), "{ex}");
    // The agent's own port inside the sandbox is reachable (the seed's port 8080).
    let (out, _) = s
        .sh(&id, "exec 3<>/dev/tcp/127.0.0.1/8080 && echo open")
        .await;
    assert_eq!(out, "open\n");
}

/// Host files with secrets are not visible: no /work, /root contents, host home dirs, the server's
/// data dir, or the host's /etc/shadow. Of `/sys` only the sandbox's own delegated cgroup
/// directories exist (no devices, no host or other-sandbox cgroups).
#[tokio::test]
async fn host_files_are_not_visible() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let data_dir = s.data_dir.path().display().to_string();
    let (out, _) = s
        .sh(&id, &format!(
            "for p in /work /root/.cargo /root/.pyenv {data_dir} /sys/class /sys/devices /sys/kernel /sys/fs/cgroup/pids /sys/fs/cgroup/freezer /sys/fs/cgroup/memory/lizard /dev/kvm /dev/mem /dev/vda; do [ -e $p ] && echo \"visible $p\"; done; \
             echo sys: $(ls /sys) $(ls /sys/fs) $(ls /sys/fs/cgroup); find /sys/fs/cgroup -mindepth 2 -type d | grep -v '/ctx-' | sed 's/^/visible /'; \
             cat /etc/shadow 2>&1 | head -c 60; echo; ls /home; ls {data_dir} 2>&1 | head -1; true"
        ))
        .await;
    assert!(!out.contains("visible"), "{out}");
    assert!(out.contains("sys: fs cgroup cpu cpuacct memory\n"), "{out}");
    assert!(
        out.contains("Permission denied") || !out.contains("root:"),
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"user"), "{out}");
    assert!(
        out.contains("No such file or directory"),
        "host data dir reachable: {out}"
    );
}

/// Privileged operations fail: mount, unshare of a user namespace, ptrace, raw sockets, /sys writes,
/// kernel modules, writing to cgroup files.
#[tokio::test]
async fn privileged_operations_fail() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let code = r#"
import ctypes, os, socket, errno
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        r = f()
        print(name, "ALLOWED" if r == 0 or r is None else "failed", flush=True)
    except OSError as e:
        print(name, "failed", e.errno, flush=True)
attempt("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
attempt("unshare-user", lambda: libc.unshare(0x10000000))
attempt("unshare-net", lambda: libc.unshare(0x40000000))
attempt("ptrace-1", lambda: libc.ptrace(16, 1, None, None))
attempt("raw-socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt("packet-socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
attempt("mptcp-4", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).close())
attempt("mptcp-6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, 262).close())
attempt("udplite-4", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136).close())
attempt("udplite-6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, 136).close())
def secret():
    fd = libc.syscall(447, 0)
    if fd >= 0:
        return 0
    raise OSError(ctypes.get_errno(), "memfd_secret")
attempt("memfd_secret", secret)
# What must keep working: TCP and UDP by their numbers, and by default.
for proto in (0, 6):
    socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto).close()
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto).close()
socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 17).close()
print("tcp-udp works", flush=True)
attempt("sysrq", lambda: open("/proc/sysrq-trigger", "w").write("h"))
attempt("kexec", lambda: libc.syscall(246, 0, 0, 0, 0))
attempt("init_module", lambda: libc.syscall(175, 0, 0, b""))
attempt("bpf", lambda: libc.syscall(321, 0, 0, 0))
attempt("keyctl", lambda: libc.syscall(250, 0, 0, 0, 0, 0))
attempt("perf_event_open", lambda: libc.syscall(298, 0, 0, -1, -1, 0))
attempt("chroot", lambda: libc.chroot(b"/tmp"))
attempt("sethostname", lambda: libc.sethostname(b"x", 1))
"#;
    let ex = s.run(&id, json!({"code": code})).await;
    let out = stdout(&ex);
    assert!(!out.contains("ALLOWED"), "{out}\n{ex}");
    assert_eq!(out.lines().count(), 20, "{out}\n{ex}");
    assert!(out.contains("memfd_secret failed 38"), "ENOSYS: {out}");
    assert!(out.contains("tcp-udp works"), "{out}");
}

/// The root filesystem is the template plus a private writable layer: writes persist for the
/// sandbox's life, never reach the template or another sandbox.
#[tokio::test]
async fn writable_layer_is_private() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = sandbox(&s).await;
    let b = sandbox(&s).await;
    let (out, _) = s
        .sh(&a, "echo data > ~/file.txt; mkdir -p ~/.local/x && echo ok > ~/.local/x/y; cat ~/file.txt; touch /usr/bin/evil 2>&1 | grep -c denied")
        .await;
    assert_eq!(out, "data\n1\n");
    let (out, _) = s.sh(&a, "cat ~/file.txt ~/.local/x/y").await;
    assert_eq!(out, "data\nok\n");
    let (out, _) = s.sh(&b, "ls ~/file.txt 2>&1 | grep -c 'No such'").await;
    assert_eq!(out, "1\n");
}

/// A memory bomb gets the kernel OOM-killed (reported as a kernel death); the server and other
/// sandboxes keep working.
#[tokio::test]
async fn memory_bomb_is_contained() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let small = s
        .create(&s.admin_key.clone(), json!({"limits": {"memory_mb": 200}}))
        .await;
    let other = sandbox(&s).await;
    let ex = s
        .run(
            &small,
            json!({"code": "x = []\nwhile True: x.append(bytearray(16 * 1024 * 1024))"}),
        )
        .await;
    assert_eq!(ex["status"], "kernel_died", "{ex}");
    assert_eq!(ex["error"]["name"], "KernelDied");
    // The sandbox itself is still usable, and so is another one.
    let ex = s.run(&small, json!({"code": "print('alive')"})).await;
    assert_eq!(stdout(&ex), "alive\n");
    let (out, _) = s.sh(&other, "echo fine").await;
    assert_eq!(out, "fine\n");
}

/// A fork bomb hits the pids limit; the sandbox can still be killed and others are unaffected.
#[tokio::test]
async fn fork_bomb_is_contained() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let bomb = s
        .create(&s.admin_key.clone(), json!({"limits": {"pids": 64}}))
        .await;
    let other = sandbox(&s).await;
    let ex = s
        .run(&bomb, json!({"code": "b() { b | b & }; b; sleep 2; echo survived", "language": "bash", "timeout_ms": 10000}))
        .await;
    assert!(ex["status"].is_string(), "{ex}");
    let (out, _) = s.sh(&other, "echo fine").await;
    assert_eq!(out, "fine\n");
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{bomb}"), None)
        .await;
    assert_eq!(r.status, 204);
    let gone = eventually(Duration::from_secs(10), || async {
        s.admin("GET", &format!("/v1/sandboxes/{bomb}"), None)
            .await
            .status
            == 404
    })
    .await;
    assert!(gone);
}

/// Sandboxes cannot see each other's processes or files.
#[tokio::test]
async fn sandboxes_cannot_see_each_other() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = sandbox(&s).await;
    let b = sandbox(&s).await;
    let (_, _) = s.sh(&a, "sleep 300 & echo started").await;
    let (out, _) = s
        .sh(&b, "ps -eo args | grep -c 'sleep 300'; ls /run/lizard")
        .await;
    assert!(out.starts_with("0\n") || out.starts_with("1\n"), "{out}");
    assert!(!out.contains(&a));
}

/// The cgroup sub-tree delegated for per-context limits (`/sys/fs/cgroup/{memory,cpu,cpuacct}`
/// inside) is the agent's alone: user code (a context, uid 2000+, or a command, uid 1000) can
/// neither create a cgroup in it, nor write any limit (the sandbox's ceiling or a context's), nor
/// move a process (itself out of its context, into another context, or another sandbox's in);
/// no parent is reachable and cgroupfs cannot be mounted. (Before: the tree was the sandbox
/// user's — 2,000 cgroups from one sandbox, nesting past PATH_MAX, raising any context's limit.)
#[tokio::test]
async fn delegated_cgroups_cannot_raise_the_sandboxs_limits() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = sandbox(&s).await;
    let b = sandbox(&s).await;
    s.sh(&b, "sleep 300 &").await;
    // A second context in a, with a limit: its cgroup is a target.
    let r = s
        .post(
            &format!("/v1/sandboxes/{a}/contexts"),
            json!({"language": "python", "limits": {"memory_mb": 256}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let other = r.body["id"].as_str().unwrap().to_string();
    let b_freezer = host_cgroup("/sys/fs/cgroup/freezer", &b).expect("b's freezer cgroup");
    let mut b_pids = Vec::new();
    fn collect(dir: &std::path::Path, out: &mut Vec<String>) {
        if let Ok(t) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(t.lines().map(str::to_string));
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect(&e.path(), out);
            }
        }
    }
    collect(&b_freezer, &mut b_pids);
    assert!(!b_pids.is_empty());
    let script = format!(
        r#"M=/sys/fs/cgroup/memory; C=/sys/fs/cgroup/cpu; O=$M/ctx-{other}
[ -d $O ] && echo other-exists
try() {{ if ( eval "$2" ) 2>/dev/null; then echo "ALLOWED $1"; else echo "denied $1"; fi; }}
try own-memory-limit "echo 99999999999 > $M/memory.limit_in_bytes"
try own-memsw-limit "echo 99999999999 > $M/memory.memsw.limit_in_bytes"
try own-cpu-quota "echo -1 > $C/cpu.cfs_quota_us"
try parent-procs "echo $$ > $M/../cgroup.procs"
try parent-tasks "echo $$ > $M/../tasks"
try mkdir-outside "mkdir /sys/fs/cgroup/pids"
try mkdir-above "mkdir $M/../../probe"
try mkdir-child "mkdir $M/probe"
try mkdir-in-context "mkdir $O/probe"
try other-context-limit "echo 99999999999 > $O/memory.limit_in_bytes"
try other-context-join "echo $$ > $O/cgroup.procs"
try leave-own-context "echo $$ > $M/cgroup.procs"
try mount-cgroupfs "mkdir -p /tmp/cg && mount -t cgroup -o memory none /tmp/cg"
for p in {pids}; do try other-sandbox-pid "echo $p > $M/cgroup.procs"; done
grep ':memory:' /proc/self/cgroup
"#,
        pids = b_pids.join(" ")
    );
    let (out, ex) = s.sh(&a, &script).await;
    assert!(out.contains("other-exists"), "{out}\n{ex}");
    assert!(!out.contains("ALLOWED"), "{out}\n{ex}");
    for probe in [
        "own-memory-limit",
        "own-cpu-quota",
        "parent-procs",
        "parent-tasks",
        "mkdir-outside",
        "mkdir-above",
        "mkdir-child",
        "mkdir-in-context",
        "other-context-limit",
        "other-context-join",
        "leave-own-context",
        "mount-cgroupfs",
        "other-sandbox-pid",
    ] {
        assert!(out.contains(&format!("denied {probe}")), "{probe}: {out}");
    }
    // The script ran in its own context's cgroup, and stayed there.
    assert!(out.contains(":memory:/ctx/ctx-"), "{out}");
    // The same from a command (the sandbox user).
    let r = s
        .post(&format!("/v1/sandboxes/{a}/commands"), json!({"cmd": "mkdir /sys/fs/cgroup/memory/x 2>&1; echo $$ > /sys/fs/cgroup/memory/ctx-{other}/cgroup.procs 2>&1; echo end".replace("{other}", &other)}))
        .await;
    let text = format!(
        "{}{}",
        r.body["stdout"].as_str().unwrap_or_default(),
        r.body["stderr"].as_str().unwrap_or_default()
    );
    assert_eq!(text.matches("Permission denied").count(), 2, "{}", r.text);
    // Seen from the host: a's limits are unchanged, b's processes are still b's.
    let a_mem = host_cgroup("/sys/fs/cgroup/memory", &a).unwrap();
    let limit = std::fs::read_to_string(a_mem.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (1024u64 << 20).to_string());
    let other_limit =
        std::fs::read_to_string(a_mem.join(format!("ctx/ctx-{other}/memory.limit_in_bytes")))
            .unwrap();
    assert_eq!(other_limit.trim(), (256u64 << 20).to_string());
    let mut still = Vec::new();
    collect(&b_freezer, &mut still);
    for p in &b_pids {
        if std::path::Path::new(&format!("/proc/{p}")).exists() {
            assert!(still.contains(p), "{p} left b's cgroup");
        }
    }
}

/// No process of a sandbox that its code can inspect (every one but the non-dumpable agent) holds
/// a descriptor of a host file: the agent's log lives on the host, and a kernel, the Python
/// zygote, the spare JavaScript kernel or a command holding it would show its host path in
/// `/proc/<pid>/fd` (and could write to it past the sandbox's disk quota).
#[tokio::test]
async fn sandbox_processes_hold_no_host_files() {
    lizard_test_support::needs_root!();
    let (s, id) = Server::with_sandbox().await;
    // The default Python context (forked from the zygote), a JavaScript one (and its spare), a
    // Bash one: every kind of process the agent starts.
    for (language, code) in [
        ("python", "1 + 1"),
        ("javascript", "1 + 1"),
        ("bash", "echo $((1 + 1))"),
    ] {
        let ex = s
            .run(&id, json!({"code": code, "language": language}))
            .await;
        assert!(ex["error"].is_null(), "{language}: {ex}");
    }
    // Read from the host: inside, no process can look into another's fds any more (contexts
    // run as uids of their own and are not dumpable).
    let agent = runtime_json(&s, &id)["pid"].as_u64().unwrap() as u32;
    let mut out = String::new();
    let mut pids = std::collections::BTreeSet::new();
    for pid in sandbox_pids(&s, &id).into_iter().filter(|p| *p != agent) {
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(t) = std::fs::read_link(fd.path()) {
                pids.insert(pid);
                out.push_str(&format!("{} {}\n", fd.path().display(), t.display()));
            }
        }
    }
    let data_dir = s.data_dir.path().display().to_string();
    assert!(pids.len() >= 4, "too few processes inspected: {out}");
    for line in out.lines() {
        assert!(
            !line.contains(&data_dir) && !line.contains("agent.log"),
            "a sandbox process holds a host file: {line}"
        );
    }
}

/// The sandbox's mountinfo does not disclose the server's data dir (nor the sandbox's own path in
/// it) or where the server is installed: the agent's socket dir is bound from the sandbox's own
/// disk image, whose paths are relative to that image, and the agent runs either from a sealed
/// in-memory copy of the server's binary (no mount; `--criu none` here; `lizard-jail`'s sandbox
/// tests check what `exe` shows) or, with CRIU (the default where it is installed), from a
/// read-only bind of a copy on a server-wide tmpfs, whose mount shows `/lizard` of a tmpfs and no
/// host path (see docs/SECURITY.md, "CRIU checkpoints").
#[tokio::test]
async fn mountinfo_does_not_reveal_host_paths() {
    lizard_test_support::needs_root!();
    for extra in [&["--criu", "none"][..], &[][..]] {
        let s = Server::start_in(tempfile::tempdir().unwrap(), extra);
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        let (out, ex) = s.sh(&id, "cat /proc/self/mountinfo").await;
        assert!(out.contains(" /run/lizard "), "{ex}");
        let data_dir = s.data_dir.path().display().to_string();
        assert!(!out.contains(&data_dir), "{out}");
        assert!(!out.contains(&id), "{out}");
        let bin = std::fs::canonicalize(env!("CARGO_BIN_EXE_lizard")).unwrap();
        let bin_dir = bin.parent().unwrap().display().to_string();
        assert!(!out.contains(&bin_dir), "{out}");
        for line in out.lines().filter(|l| l.contains("/opt/lizard/bin")) {
            // Only the agent's file bind, read-only, of a tmpfs, rooted at `/lizard`.
            assert!(extra.is_empty(), "--criu none: {line}");
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-").unwrap();
            assert_eq!(
                (f[3], f[4], f[sep + 1]),
                ("/lizard", "/opt/lizard/bin/lizard", "tmpfs"),
                "{line}"
            );
            assert!(f[5].split(',').any(|o| o == "ro"), "{line}");
        }
        // What `ps` and `top` call the agent.
        let (comm, ex) = s.sh(&id, "cat /proc/1/comm").await;
        assert_eq!(comm.trim(), "lizard-agent", "{ex}");
        // And it cannot be written, even by the sandbox's root (with CRIU, neither through the
        // bind; without, the path is the template's own placeholder, not the agent).
        let cmd = if extra.is_empty() {
            "for f in /proc/1/exe /opt/lizard/bin/lizard; do echo x >> $f 2>/dev/null || echo refused; done"
        } else {
            "echo x >> /proc/1/exe 2>/dev/null || echo refused; echo refused"
        };
        let out = s.root_cmd(&id, cmd).await;
        assert_eq!(out["stdout"], "refused\nrefused\n", "{out}");
        s.kill_all().await;
    }
}

/// The template's shared on-disk range (`lizard template build` shifts by 100000): no sandbox's
/// process runs in it any more.
const TEMPLATE_RANGE: std::ops::Range<u32> = 100_000..165_536;

/// The host uids and gids of every process in sandbox `id` (agent, kernels, commands), with
/// their names; asserts there is at least one process besides the agent.
fn host_ids_of(s: &Server, id: &str) -> Procs {
    let agent = runtime_json(s, id)["pid"].as_u64().unwrap() as u32;
    let procs: Vec<_> = sandbox_pids(s, id)
        .into_iter()
        .map(|pid| (pid, comm(pid), host_ids(pid, "Uid"), host_ids(pid, "Gid")))
        .filter(|(_, _, u, g)| !u.is_empty() && !g.is_empty())
        .collect();
    assert!(procs.len() >= 3, "agent and kernels of {id}: {procs:?}");
    assert!(
        procs.iter().any(|p| p.0 == agent),
        "agent {agent} of {id}: {procs:?}"
    );
    Procs { agent, procs }
}

/// The processes of a sandbox: host pid, name, uids, gids; and which one is the agent.
#[derive(Debug)]
struct Procs {
    agent: u32,
    procs: Vec<(u32, String, Vec<u32>, Vec<u32>)>,
}

/// The first host id of the 65536-id range that holds every id of `procs` (the agent is the
/// sandbox's root, uid 0 inside, so its range starts at its host uid); asserts they all lie in
/// one range outside the template's.
fn own_range(p: &Procs) -> std::ops::Range<u32> {
    let agent_uid = host_ids(p.agent, "Uid")[0];
    let base = agent_uid;
    let range = base..base + 65536;
    let procs = &p.procs;
    for (_, c, u, g) in procs {
        for id in u.iter().chain(g) {
            assert!(range.contains(id), "{c}: {id} outside {range:?}: {procs:?}");
            assert!(
                !TEMPLATE_RANGE.contains(id),
                "{c} runs as {id}, in the shared range"
            );
        }
    }
    range
}

/// Every sandbox has a host uid/gid range of its own: two sandboxes' agents and kernels run as
/// different host ids, neither in the other's range nor in the template's shared one, while
/// inside the template looks as always (root-owned system files, a home owned by 1000, code
/// context code running as a uid of its own in group 1000, new files its own). A server restart and a hibernation keep a
/// sandbox's range; a sandbox created after the restart gets another one.
#[tokio::test]
async fn each_sandbox_has_its_own_host_id_range() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = sandbox(&s).await;
    let b = sandbox(&s).await;
    let inside = "stat -c %u:%g /etc/passwd /usr/bin/python3 /home/user; id -u; id -g; \
                  touch ~/new; stat -c %u:%g ~/new";
    let mut ctx_uids = Vec::new();
    for id in [&a, &b] {
        // A JavaScript kernel too, so that every kind of process is in the sandbox.
        let ex = s
            .run(id, json!({"code": "1 + 1", "language": "javascript"}))
            .await;
        assert_eq!(ex["status"], "ok", "{ex}");
        let (out, _) = s.sh(id, inside).await;
        // A context runs as a uid of its own in the user's group; what it makes is that uid's.
        let uid = out.lines().nth(3).unwrap_or_default().to_string();
        ctx_uids.push(uid.clone());
        assert_eq!(
            out,
            format!("0:0\n0:0\n1000:1000\n{uid}\n1000\n{uid}:1000\n"),
            "{id}"
        );
        assert!(uid.starts_with("20"), "{out}");
    }
    let ctx_uid: u32 = ctx_uids[0].parse().unwrap();
    let ra = own_range(&host_ids_of(&s, &a));
    let rb = own_range(&host_ids_of(&s, &b));
    assert!(
        ra.end <= rb.start || rb.end <= ra.start,
        "overlapping ranges {ra:?} {rb:?}"
    );
    // On the host, the writable layer's new file belongs to the sandbox's own range.
    use std::os::unix::fs::MetadataExt;
    let new = s
        .data_dir
        .path()
        .join("sandboxes")
        .join(&a)
        .join("disk/upper/home/user/new");
    assert_eq!(std::fs::metadata(&new).unwrap().uid(), ra.start + ctx_uid);

    // A restart adopts both with their ranges; a new sandbox does not get either.
    let dir = s.stop("-KILL");
    let s = Server::start_in(dir, &[]);
    let c = sandbox(&s).await;
    s.run(&c, json!({"code": "1 + 1", "language": "javascript"}))
        .await;
    let rc = own_range(&host_ids_of(&s, &c));
    assert!(rc != ra && rc != rb, "{rc:?} reused ({ra:?} {rb:?})");
    assert_eq!(own_range(&host_ids_of(&s, &a)), ra);

    // Hibernation and wake: the same range, the writable layer's files still the user's.
    let h = s.act(&a, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    let r = s.act(&a, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (out, _) = s
        .sh(
            &a,
            "stat -c %u:%g ~/new /etc/passwd; echo more >> ~/new && echo ok",
        )
        .await;
    assert_eq!(out, format!("{ctx_uid}:1000\n0:0\nok\n"));
    s.run(&a, json!({"code": "1 + 1", "language": "javascript"}))
        .await;
    assert_eq!(own_range(&host_ids_of(&s, &a)), ra);
}

/// `/proc` tells a sandbox nothing about the others or the host's activity: no block devices
/// (every sandbox's loop device and its I/O were in `diskstats`/`partitions`), a constant idle
/// `loadavg` that still parses, a boot id of its own (two sandboxes and the host differ), no host
/// PTY or open-file counts. The masks are read-only.
#[tokio::test]
async fn proc_does_not_reveal_other_sandboxes_or_the_host() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let a = sandbox(&s).await;
    let b = sandbox(&s).await;
    let code = r#"
import os
def read(p):
    with open(p) as f:
        return f.read()
print("diskstats", repr(read("/proc/diskstats")))
print("partitions", repr(read("/proc/partitions")))
print("loop", any("loop" in read(p) for p in ("/proc/diskstats", "/proc/partitions")))
print("loadavg", read("/proc/loadavg").strip())
print("getloadavg", len(os.getloadavg()))
print("boot_id", read("/proc/sys/kernel/random/boot_id").strip())
print("pty_nr", read("/proc/sys/kernel/pty/nr").strip())
print("file_nr", len(read("/proc/sys/fs/file-nr").split()), read("/proc/sys/fs/file-nr").split()[:2])
for p in ("/proc/loadavg", "/proc/diskstats", "/proc/sys/kernel/random/boot_id"):
    try:
        open(p, "w").write("x")
        print("WRITABLE", p)
    except OSError:
        pass
"#;
    let mut boot_ids = Vec::new();
    for id in [&a, &b] {
        let ex = s.run(id, json!({ "code": code })).await;
        let out = stdout(&ex);
        let line = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} ")))
                .unwrap_or_else(|| panic!("no {k} in {out}\n{ex}"))
                .to_string()
        };
        assert_eq!(line("diskstats"), "''", "{out}");
        assert_eq!(line("partitions"), "''", "{out}");
        assert_eq!(line("loop"), "False", "{out}");
        assert_eq!(line("loadavg"), "0.00 0.00 0.00 1/1 1", "{out}");
        // glibc's getloadavg() asks sysinfo(2), which is the host's (SECURITY.md): it works.
        assert_eq!(line("getloadavg"), "3", "{out}");
        assert_eq!(line("pty_nr"), "0", "{out}");
        assert_eq!(line("file_nr"), "3 ['0', '0']", "{out}");
        assert!(!out.contains("WRITABLE"), "{out}");
        let boot_id = line("boot_id");
        assert_eq!(boot_id.len(), 36, "a uuid: {boot_id}");
        boot_ids.push(boot_id);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_ne!(boot_ids[0], boot_ids[1], "two sandboxes share a boot id");
    assert!(
        !boot_ids.contains(&host.trim().to_string()),
        "the host's boot id"
    );
}

/// Each sandbox has a devpts instance of its own with at most 64 PTYs: opening more fails inside
/// (ENOSPC) while the host's PTY count grows by no more than that; the PTY API still works.
#[tokio::test]
async fn ptys_are_bounded_per_sandbox() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let host_nr = || -> u64 {
        std::fs::read_to_string("/proc/sys/kernel/pty/nr")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = host_nr();
    // The PTYs stay open (a global of the context) while the host counts.
    let code = r#"
import os
ptys, err = [], None
while len(ptys) < 600:
    try:
        ptys.append(os.openpty())
    except OSError as e:
        err = e.errno
        break
print(len(ptys), err)
"#;
    let ex = s.run(&id, json!({ "code": code })).await;
    let out = stdout(&ex);
    let during = host_nr();
    assert_eq!(out.trim(), "64 28", "64 PTYs, then ENOSPC: {out}\n{ex}");
    // Other tests of this binary may hold a few PTYs meanwhile: generous slack, far below 600.
    assert!(during <= before + 64 + 64, "host PTYs {before} → {during}");
    let ex = s
        .run(
            &id,
            json!({ "code": "for m, t in ptys:\n    os.close(m); os.close(t)\nptys = []" }),
        )
        .await;
    assert_eq!(ex["status"], "ok", "{ex}");
    let r = send(
        &s.addr,
        "POST",
        &format!("/v1/sandboxes/{id}/pty"),
        &[
            ("authorization", format!("Bearer {}", s.admin_key)),
            ("content-type", "application/json".into()),
        ],
        serde_json::to_vec(&json!({"cols": 80, "rows": 24, "cmd": "echo pty-ok"})).unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.text.contains("pty-ok") || r.text.contains("cHR5LW9r"),
        "{}",
        r.text
    );
}
