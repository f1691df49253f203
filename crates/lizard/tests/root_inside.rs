//! Root inside the sandbox: `sudo` (the agent's setuid-free one) and `user: "root"` give the
//! sandbox user its sandbox's own root — and that root still cannot cross the sandbox's boundary.
//! Each test states the promise it checks. Real server, real sandboxes (no network: packages are
//! built here with `dpkg-deb`).

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Poll `f` (every 100 ms, for at most `timeout`) until it gives `Some`.
async fn poll<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sandbox(s: &Server) -> String {
    s.create(&s.admin_key.clone(), json!({})).await
}

/// Run a command with `body` (aggregated, or `background`: its info); the result.
async fn command(s: &Server, id: &str, body: Value) -> Value {
    let want = if body["background"] == true { 201 } else { 200 };
    let r = s.post(&format!("/v1/sandboxes/{id}/commands"), body).await;
    assert_eq!(r.status, want, "{}", r.text);
    r.body
}

async fn sh(s: &Server, id: &str, cmd: &str) -> Value {
    command(s, id, json!({ "cmd": cmd })).await
}

async fn root_sh(s: &Server, id: &str, cmd: &str) -> Value {
    command(s, id, json!({ "cmd": cmd, "user": "root" })).await
}

fn out(r: &Value) -> &str {
    r["stdout"].as_str().unwrap_or_default()
}

fn err(r: &Value) -> &str {
    r["stderr"].as_str().unwrap_or_default()
}

async fn upload(s: &Server, id: &str, path: &str, bytes: Vec<u8>) {
    let r = send(
        &s.addr,
        "PUT",
        &format!("/v1/sandboxes/{id}/files?path={path}"),
        &[("authorization", format!("Bearer {}", s.admin_key))],
        bytes,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// `sudo` from a command and from a terminal runs as uid 0 with the kept capabilities (no more);
/// `-u user` as the sandbox user; sudo's environment rules; exit statuses pass through;
/// written files are root's; the common flags work and an unknown one is a clear error.
#[tokio::test]
async fn sudo_runs_commands_as_the_sandboxs_root() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let r = sh(
        &s,
        &id,
        "sudo id -u; sudo -u user id -u; sudo -n -E id -u; \
         echo hi | sudo tee /etc/lizard-x >/dev/null; cat /etc/lizard-x; stat -c '%U %a' /etc/lizard-x; \
         sudo sh -c 'exit 7'; echo status=$?; \
         sudo grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '; \
         sudo -v; sudo -k; echo noop=$?; command -v sudo",
    )
    .await;
    assert_eq!(
        out(&r),
        "0\n1000\n0\nhi\nroot 644\nstatus=7\nCapEff: 00000000000000fb\nCapBnd: 00000000000000fb\n\
         NoNewPrivs: 1\nSeccomp: 2\nnoop=0\n/usr/local/bin/sudo\n",
        "{r}"
    );
    // env_reset with secure_path (the template's PATH, not the caller's), HOME and the SUDO_*s.
    let r = command(
        &s,
        &id,
        json!({"cmd": "sudo env", "env": {"SECRET": "s", "PATH": "/evil:/usr/local/bin:/usr/bin:/bin"}}),
    )
    .await;
    let env: Vec<&str> = out(&r).lines().collect();
    for want in [
        "HOME=/root",
        "USER=root",
        "LOGNAME=root",
        "SUDO_USER=user",
        "SUDO_UID=1000",
        "SUDO_GID=1000",
        "SUDO_COMMAND=/usr/bin/env",
    ] {
        assert!(env.contains(&want), "{want}: {r}");
    }
    assert!(!env.iter().any(|l| l.starts_with("SECRET=")), "{r}");
    assert!(
        env.iter()
            .any(|l| l.starts_with("PATH=") && !l.contains("/evil")),
        "{r}"
    );
    let r = command(
        &s,
        &id,
        json!({"cmd": "sudo -E printenv SECRET; sudo -i pwd; sudo -s echo \"$HOME\"; sudo -l", "env": {"SECRET": "kept"}}),
    )
    .await;
    assert!(
        out(&r)
            .starts_with("kept\n/root\n/home/user\nUser user may run the following commands on "),
        "{r}"
    );
    assert!(out(&r).contains("(ALL : ALL) NOPASSWD: ALL"), "{r}");
    let r = sh(&s, &id, "sudo -b true; echo status=$?; sudo -u nobody true").await;
    assert_eq!(out(&r), "status=1\n", "{r}");
    assert!(err(&r).contains("option -b is not supported"), "{r}");
    assert!(err(&r).contains("unknown user nobody"), "{r}");

    // From a terminal.
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/pty"),
            json!({"cmd": "sudo id -u; sudo -u user id -un", "cols": 80, "rows": 24}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["stdout"], "0\r\nuser\r\n", "{}", r.text);
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// A command with `user: "root"` runs as the sandbox's root in `/root` (0700, root's) with
/// `HOME=/root`, and can write outside the home directory; the files API acts as root with
/// `user=root`; any other user is a 400.
#[tokio::test]
async fn commands_and_files_as_root() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let r = root_sh(
        &s,
        &id,
        "id -u; pwd; echo $HOME $USER; umask; stat -c '%U %a' /root; \
         echo x > /usr/local/lizard-x && stat -c %U /usr/local/lizard-x",
    )
    .await;
    assert_eq!(
        out(&r),
        "0\n/root\n/root root\n0022\nroot 700\nroot\n",
        "{r}"
    );
    // The sandbox user cannot write there, and cannot read /root.
    let r = sh(&s, &id, "touch /usr/local/y; ls /root").await;
    assert!(err(&r).contains("Permission denied"), "{r}");
    // A relative cwd is relative to /root.
    let r = command(
        &s,
        &id,
        json!({"cmd": "mkdir -p d && cd d && pwd", "user": "root"}),
    )
    .await;
    assert_eq!(out(&r), "/root/d\n", "{r}");
    let r = command(&s, &id, json!({"cmd": "pwd", "user": "root", "cwd": "d"})).await;
    assert_eq!(out(&r), "/root/d\n", "{r}");
    let r = s
        .post(
            &format!("/v1/sandboxes/{id}/commands"),
            json!({"cmd": "id", "user": "nobody"}),
        )
        .await;
    r.expect_error(400, "invalid_request");

    // Files: as the user a write to /etc is refused; as root it works and the file is root's.
    let put = |path: &str| {
        let addr = s.addr.clone();
        let key = s.admin_key.clone();
        let path = format!("/v1/sandboxes/{id}/files?{path}");
        async move {
            send(
                &addr,
                "PUT",
                &path,
                &[("authorization", format!("Bearer {key}"))],
                b"root file".to_vec(),
            )
            .await
        }
    };
    let r = put("path=/etc/lizard-file").await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = put("path=/etc/lizard-file&user=root").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["owner"], "root", "{}", r.text);
    let r = put("path=note&user=root").await;
    assert_eq!(r.body["path"], "/root/note", "{}", r.text);
    let r = s
        .admin(
            "GET",
            &format!("/v1/sandboxes/{id}/files/list?path=/root&user=root"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("/root/note"), "{}", r.text);
    let r = s
        .admin(
            "GET",
            &format!("/v1/sandboxes/{id}/files/list?path=/root"),
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// Build a tiny package on the host: `/usr/bin/lizard-probe` (prints `probe-ok`), a set-group-id
/// `/usr/bin/lizard-probe-sg` of group 42 (`shadow`: a group root is not in, so only
/// `CAP_FSETID` keeps the bit), and a postinst that writes a marker.
fn build_deb(dir: &std::path::Path) -> Vec<u8> {
    use std::os::unix::fs::PermissionsExt;
    let root = dir.join("pkg");
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: lizard-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: Lizard <t@t>\n\
         Description: a probe\n",
    )
    .unwrap();
    let script = |p: &str, body: &str, mode: u32| {
        let p = root.join(p);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    script(
        "DEBIAN/postinst",
        "#!/bin/sh\nset -e\necho postinst-ran > /var/lib/lizard-probe-postinst\n",
        0o755,
    );
    script("usr/bin/lizard-probe", "#!/bin/sh\necho probe-ok\n", 0o755);
    script("usr/bin/lizard-probe-sg", "#!/bin/sh\ntrue\n", 0o755);
    let sg = root.join("usr/bin/lizard-probe-sg");
    std::os::unix::fs::chown(&sg, Some(0), Some(42)).unwrap();
    std::fs::set_permissions(&sg, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let deb = dir.join("probe.deb");
    let st = std::process::Command::new("dpkg-deb")
        .args(["--build"])
        .arg(&root)
        .arg(&deb)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("dpkg-deb (package dpkg) is needed to build the test's package");
    assert!(st.success());
    std::fs::read(&deb).unwrap()
}

/// `sudo dpkg -i` and `sudo apt-get install ./pkg.deb` of a local package work (files in
/// `/usr/bin`, a set-group-id file keeps its bit, the postinst runs); `dpkg -r` removes it.
#[tokio::test]
async fn sudo_installs_packages() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let tmp = tempfile::tempdir().unwrap();
    upload(&s, &id, "/home/user/probe.deb", build_deb(tmp.path())).await;
    let r = sh(
        &s,
        &id,
        "sudo dpkg -i probe.deb >/dev/null && lizard-probe && cat /var/lib/lizard-probe-postinst && \
         stat -c '%a %G' /usr/bin/lizard-probe-sg && sudo dpkg -r lizard-probe >/dev/null && \
         test ! -e /usr/bin/lizard-probe && echo removed",
    )
    .await;
    assert_eq!(
        out(&r),
        "probe-ok\npostinst-ran\n2755 shadow\nremoved\n",
        "{r}"
    );
    let r = sh(
        &s,
        &id,
        "sudo rm /var/lib/lizard-probe-postinst && \
         sudo DEBIAN_FRONTEND=noninteractive apt-get install -y ./probe.deb >/dev/null 2>&1; \
         echo status=$?; lizard-probe; cat /var/lib/lizard-probe-postinst",
    )
    .await;
    assert_eq!(out(&r), "status=0\nprobe-ok\npostinst-ran\n", "{r}");
    // apt's download sandbox: root inside can drop to `_apt` (uid 42, group nogroup) as apt does.
    let r = sh(
        &s,
        &id,
        "sudo python3 -c 'import os; os.setgroups([65534]); os.setresgid(65534, 65534, 65534); \
         os.setresuid(42, 42, 42); print(os.getresuid(), os.getgroups())'",
    )
    .await;
    assert_eq!(out(&r), "(42, 42, 42) [65534]\n", "{r}");
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// The pids of root's `sleep 100` processes in the sandbox.
async fn root_sleeps(s: &Server, id: &str) -> String {
    let r = sh(
        s,
        id,
        "ps -eo uid=,args= | awk '$1 == 0 && $2 == \"sleep\" && $3 == \"100\"'",
    )
    .await;
    out(&r).to_string()
}

async fn end_of(s: &Server, id: &str, pid: u64) -> Value {
    poll(Duration::from_secs(30), || async {
        let r = s
            .admin("GET", &format!("/v1/sandboxes/{id}/commands/{pid}"), None)
            .await;
        let end = r.body["end"].clone();
        (!end.is_null()).then_some(end)
    })
    .await
    .unwrap_or_else(|| panic!("command {pid} did not end"))
}

/// Signals reach sudo's command (SIGTERM to the command → the root child gets it; exit 143), and
/// killing the command that ran sudo (SIGKILL, which the client cannot relay) kills its root
/// child too: no root process is left behind.
#[tokio::test]
async fn sudo_relays_signals_and_dies_with_its_caller() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    for (signal, code) in [("SIGTERM", Some(143)), ("SIGKILL", None)] {
        let r = command(
            &s,
            &id,
            json!({"cmd": "sudo sleep 100", "background": true}),
        )
        .await;
        let pid = r["pid"].as_u64().unwrap();
        let started = poll(Duration::from_secs(30), || async {
            let found = root_sleeps(&s, &id).await;
            (!found.is_empty()).then_some(())
        })
        .await;
        assert!(started.is_some(), "no root sleep started");
        let r = s
            .post(
                &format!("/v1/sandboxes/{id}/commands/{pid}/signal"),
                json!({ "signal": signal }),
            )
            .await;
        assert_eq!(r.status, 204, "{}", r.text);
        let end = end_of(&s, &id, pid).await;
        match code {
            Some(c) => assert_eq!(end["exit_code"], c, "{signal}: {end}"),
            None => assert_eq!(end["signal"], "SIGKILL", "{end}"),
        }
        assert!(
            eventually(Duration::from_secs(30), || async {
                root_sleeps(&s, &id).await.is_empty()
            })
            .await,
            "{signal}: a root sleep outlived its sudo: {}",
            root_sleeps(&s, &id).await
        );
    }
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// A context's kernel (its own uid, for isolation between contexts) is refused sudo with a
/// message that says why and how to run as root instead.
#[tokio::test]
async fn a_contexts_kernel_is_refused_sudo() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    let (o, ex) = s.sh(&id, "sudo id -u; echo status=$?").await;
    assert_eq!(o, "status=1\n", "{ex}");
    let e = stderr(&ex);
    assert!(e.contains("not available to a context's code"), "{e}");
    assert!(e.contains("\"user\": \"root\""), "{e}");
    let ex = s
        .run(&id, json!({"code": "!sudo id -u", "language": "python"}))
        .await;
    assert!(
        format!("{}{}", stdout(&ex), stderr(&ex)).contains("isolated from each other"),
        "{ex}"
    );
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// What root inside tries, and the errno it gets. Run as the sandbox's root.
const PROBE: &str = r#"
import ctypes, errno, fcntl, os, resource, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def rc(name, r):
    print(name, "OK" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?"))
def call(name, f):
    try:
        f(); print(name, "OK")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, "?"))
    except ValueError as e:  # setrlimit's EPERM
        print(name, "EPERM" if "not allowed" in str(e) else repr(e))
rc("mount", libc.mount(b"x", b"/mnt", b"tmpfs", 0, None))
rc("unshare_mount", libc.unshare(0x00020000))
rc("unshare_user", libc.unshare(0x10000000))
rc("unshare_net", libc.unshare(0x40000000))
rc("setns", libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
call("set_mtu", lambda: fcntl.ioctl(s, 0x8922, struct.pack("16si", b"lo", 1280) + bytes(20)))
call("link_down", lambda: fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", 0) + bytes(22)))
call("sysctl", lambda: open("/proc/sys/net/ipv4/ip_forward", "w").write("1"))
rc("sethostname", libc.sethostname(b"x", 1))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
call("raise_rlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1)))
call("cgroup_limit", lambda: open("/sys/fs/cgroup/memory/memory.limit_in_bytes", "w").write("99999999999"))
rc("init_module", libc.syscall(175, None, 0, b""))
rc("ptrace_agent", libc.ptrace(16, 1, None, None))
pid = os.fork()
if pid == 0:
    import time; time.sleep(30); os._exit(0)
rc("ptrace_child", libc.ptrace(16, pid, None, None))
os.kill(pid, 9); os.waitpid(pid, 0)
rc("chroot", libc.chroot(b"/"))
open("/tmp/capfile", "w").close()
rc("set_file_cap", libc.setxattr(b"/tmp/capfile", b"security.capability", b"\x00\x00\x00\x02" + bytes(16), 20, 0))
call("mknod", lambda: os.mknod("/tmp/nullx", 0o20666, os.makedev(1, 3)))
call("setuid_outside_range", lambda: os.setresuid(70000, 70000, 70000))
rc("settime", libc.clock_settime(0, ctypes.c_char_p(bytes(16))))
rc("bpf", libc.syscall(321, 0, None, 0))
call("host_file", lambda: open(sys.argv[1]).read())
call("agent_environ", lambda: open("/proc/1/environ").read())
print("caps", open("/proc/self/status").read().split("CapEff:")[1].split()[0])
"#;

/// Root inside still cannot cross the boundary: no mount, namespace, network configuration,
/// sysctl, limit raise, cgroup limit change, module load, ptrace, chroot, file capability, device
/// node, id outside its range, clock change, bpf, host file or the agent's environment — each
/// with its specific errno. Low ports bind inside; the host's port setting is untouched. `kill -9 1` leaves the agent (PID 1) running. Files root writes are
/// owned on the host by the sandbox's own id range, never by host root.
#[tokio::test]
async fn root_inside_cannot_cross_the_boundary() {
    lizard_test_support::needs_root!();
    let host_ports = || std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start");
    let before = host_ports().unwrap();
    let s = Server::start();
    let id = sandbox(&s).await;
    // Low ports are bindable inside (the sandbox's own network namespace), by root and by the
    // user; the host's setting is untouched.
    let bind80 = "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 80)); print(\"bound\")'";
    assert_eq!(out(&sh(&s, &id, bind80).await), "bound\n");
    assert_eq!(out(&root_sh(&s, &id, bind80).await), "bound\n");
    assert_eq!(host_ports().unwrap(), before);
    upload(&s, &id, "/tmp/probe.py", PROBE.as_bytes().to_vec()).await;
    let host_file = s.data_dir.path().join("admin-key");
    let r = command(
        &s,
        &id,
        json!({"argv": ["sudo", "python3", "/tmp/probe.py", host_file.display().to_string()]}),
    )
    .await;
    let got: std::collections::BTreeMap<&str, &str> =
        out(&r).lines().filter_map(|l| l.split_once(' ')).collect();
    let want = [
        ("mount", "EPERM"),
        ("unshare_mount", "EPERM"),
        ("unshare_user", "EPERM"),
        ("unshare_net", "EPERM"),
        ("setns", "EPERM"),
        ("set_mtu", "EPERM"),
        ("link_down", "EPERM"),
        ("sysctl", "EROFS"),
        ("sethostname", "EPERM"),
        ("raise_rlimit", "EPERM"),
        // The limit files are the host's root's (unmapped): no capability of root inside counts.
        ("cgroup_limit", "EACCES"),
        ("init_module", "EPERM"),
        ("ptrace_agent", "EPERM"),
        ("ptrace_child", "EPERM"),
        ("chroot", "EPERM"),
        ("set_file_cap", "EPERM"),
        ("mknod", "EPERM"),
        ("setuid_outside_range", "EINVAL"),
        ("settime", "EPERM"),
        ("bpf", "EPERM"),
        ("host_file", "ENOENT"),
        // The agent is not dumpable: not even root inside reads its memory or environment.
        ("agent_environ", "EACCES"),
        ("caps", "00000000000000fb"),
    ];
    for (probe, errno) in want {
        assert_eq!(got.get(probe).copied(), Some(errno), "{probe}: {r}");
    }

    // `kill -9 1`: the kernel drops signals to a pid namespace's init from inside it; the agent
    // keeps serving.
    let r = sh(&s, &id, "sudo kill -9 1; echo status=$?").await;
    assert_eq!(out(&r), "status=0\n", "{r}");
    let r = sh(&s, &id, "cat /proc/1/comm; sudo id -u").await;
    assert_eq!(out(&r), "lizard-agent\n0\n", "{r}");

    // What root inside writes is owned on the host by the sandbox's range, as PID 1 is.
    let r = root_sh(&s, &id, "echo x > /usr/local/owned-by-root && sync").await;
    assert_eq!(r["exit_code"], 0, "{r}");
    let rt = runtime_json(&s, &id);
    let agent = rt["pid"].as_u64().unwrap() as u32;
    let (agent_uid, agent_gid) = (host_ids(agent, "Uid")[0], host_ids(agent, "Gid")[0]);
    assert_ne!(agent_uid, 0, "PID 1 is host root");
    let upper =
        std::path::Path::new(rt["disk"].as_str().unwrap()).join("upper/usr/local/owned-by-root");
    let meta = std::fs::metadata(&upper).unwrap_or_else(|e| panic!("{}: {e}", upper.display()));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.gid()),
        (agent_uid, agent_gid),
        "{}",
        upper.display()
    );
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// A flood of sudo connections that never send a request does not hold the agent up: each is
/// dropped at its deadline or refused beyond the session limit, and sudo and the agent's other
/// work go on meanwhile.
#[tokio::test]
async fn a_flood_of_idle_sudo_connections_does_not_block_the_agent() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let id = sandbox(&s).await;
    // 200 connections that send nothing, held open in the background (the limit is 64).
    let flood = "python3 -c '\nimport socket, time\nss = []\nfor _ in range(200):\n    \
                 c = socket.socket(socket.AF_UNIX); c.connect(\"/run/lizard/sudo.sock\"); ss.append(c)\n\
                 print(\"open\", flush=True)\ntime.sleep(60)\n'";
    let r = command(&s, &id, json!({"cmd": flood, "background": true})).await;
    let flood_pid = r["pid"].as_u64().unwrap();
    // The agent answers meanwhile: code runs, and sudo works again once the idle ones time out
    // (5 s) — or at once, if a slot is free.
    let (o, ex) = s.sh(&id, "echo still-here").await;
    assert_eq!(o, "still-here\n", "{ex}");
    let recovered = poll(Duration::from_secs(60), || async {
        let r = sh(&s, &id, "sudo id -u").await;
        (out(&r) == "0\n").then_some(())
    })
    .await;
    assert!(recovered.is_some(), "sudo never recovered");
    let _ = s
        .post(
            &format!("/v1/sandboxes/{id}/commands/{flood_pid}/signal"),
            json!({"signal": "SIGKILL"}),
        )
        .await;
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}
