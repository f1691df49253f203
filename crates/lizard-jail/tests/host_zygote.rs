//! The host zygote's jail for real (`lizard_jail::host_zygote`), probed from inside with bash
//! scripts as the sandbox tests do: what it sees of the host, what it may do, and that it joins a
//! sandbox whose user namespace its uid owns — and no other. Needs root (as CI has).

mod common;

use common::*;
use lizard_jail::fdpass::{recv_with_fds, send_with_fds, seqpacket_pair};
use lizard_jail::host_zygote::{spawn, HostZygoteError, HostZygoteSpec, JOIN_SECUREBITS};
use lizard_jail::process::pidfd_open;
use lizard_jail::sandbox::{Capability, UserSpec, AGENT_CAPS};
use lizard_jail::zygote_entry::SHARED_OBJECT;
use serde_json::json;
use std::collections::BTreeMap;
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// This tree's Python runner, which the host zygote runs in its host mode.
const RUNNER: &str = include_str!("../../../kernels/python/runner.py");
/// The agent's side of an adopted zygote, as a stand-in (see the file).
const FAKE_AGENT: &str = include_str!("host_zygote/fake_agent.py");

/// The zygote's host uid: outside the test sandboxes' id range (from `SHIFT`).
const ZYGOTE_UID: u32 = SHIFT - 20_000;

const PROBE: &str = r#"
echo "uid=$(id -u)"
echo "gid=$(id -g)"
echo "groups=$(id -G)"
echo "hostname=$(hostname)"
while read -r k v; do
  case $k in CapEff:|CapPrm:|CapInh:|CapBnd:|CapAmb:|NoNewPrivs:|Seccomp:) echo "${k%:}=$v";; esac
done < /proc/self/status
devs=""
{ read -r; read -r; while IFS=: read -r name rest; do devs="$devs ${name// /}"; done; } < /proc/self/net/dev
echo "netdevs=${devs# }"
sleep 30 &
uids=""
for d in /proc/[0-9]*; do while read -r k v rest; do [ "$k" = Uid: ] && uids="$uids $v"; done < $d/status; done
echo "uids=$(echo $uids | tr ' ' '\n' | sort -u | tr '\n' ' ')"
echo "sleep_seen=$( [ -e /proc/$! ] && echo yes)"
kill %1
for p in /proc/1 /proc/sys /proc/kcore /work /root /etc/passwd; do
  if [ -e "$p" ]; then echo "exists:$p=yes"; else echo "exists:$p=no"; fi
done
echo "dev=$(ls /dev | tr '\n' ' ')"
echo "write_usr=$( (echo x > /usr/evil) 2>&1 | grep -o 'Read-only file system')"
echo "tmp_write=$(echo t > /tmp/t && cat /tmp/t)"
echo "unshare_user=$(unshare -U true 2>&1 | grep -o 'Operation not permitted')"
echo "ptrace_syscall=$(perl -e 'syscall(101, 16, 1, 0, 0) == -1 and print "$!"')"
echo "mountpoints=$(while read -r id parent dev root mp rest; do printf '%s ' "$mp"; done < /proc/self/mountinfo)"
echo "done=yes"
"#;

/// setns(fd 3 — a pidfd of a sandbox's PID 1, USER|MNT|PID|UTS|IPC|NET), then the host name it
/// sees there, or the error.
const JOIN: &str = r#"
for p in $OWNED $OTHER; do [ -e /proc/$p/status ] && echo "seen:$p=yes" || echo "seen:$p=no"; done
echo "join=$(perl -e 'syscall(308, 3, 0x10000000|0x20000|0x20000000|0x4000000|0x8000000|0x40000000) == 0 or die "$!\n"; exec "hostname"' 2>&1)"
"#;

fn spec(t: &TestDir, script: &str) -> HostZygoteSpec {
    let mountpoint = t.path().join("zygote-root");
    let _ = fs::create_dir(&mountpoint);
    HostZygoteSpec {
        layers: vec![t.template()],
        mountpoint,
        uid: ZYGOTE_UID,
        gid: ZYGOTE_UID,
        hostname: "zygote".into(),
        tmp_bytes: 1 << 20,
        log_path: t.path().join("zygote.log"),
        program: "/bin/bash".into(),
        args: vec!["-c".into(), script.into()],
        env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
        cwd: "/".into(),
        userns: None,
        nofile: 4096,
    }
}

/// The user namespace the zygote lives in and its sandboxes are made in (mapping the zygote's
/// ids and the test sandboxes' range), and its path for the helpers.
struct Parent {
    ns: OwnedFd,
}

impl Parent {
    fn new() -> Parent {
        let ns =
            lizard_jail::host_zygote::joinable_userns(ZYGOTE_UID, ZYGOTE_UID, &[(SHIFT, 65536)])
                .unwrap();
        Parent { ns }
    }
    fn path(&self) -> PathBuf {
        format!("/proc/{}/fd/{}", std::process::id(), self.ns.as_raw_fd()).into()
    }
    /// `spec` made inside it, owned there by the zygote's uid.
    fn adopt(&self, spec: &mut lizard_jail::sandbox::SandboxSpec) {
        spec.userns_parent = Some(lizard_jail::sandbox::UsernsParent {
            path: self.path(),
            uid: ZYGOTE_UID,
            gid: ZYGOTE_UID,
        });
    }
}

fn zygote_helper() -> Command {
    let mut c = helper();
    c.arg("zygote");
    c
}

/// Run `script` as a host zygote in `parent` (with `control` as its fd 3) until it exits; its
/// facts.
fn run(
    t: &TestDir,
    parent: &Parent,
    script: &str,
    control: Option<OwnedFd>,
) -> BTreeMap<String, String> {
    let mut s = spec(t, script);
    s.userns = Some(parent.path());
    let mut child = spawn(zygote_helper(), &s, control, None).unwrap();
    let log = || fs::read_to_string(&s.log_path).unwrap_or_default();
    let status = poll(
        Duration::from_secs(30),
        "the zygote's probe to exit",
        || child.try_wait().unwrap(),
    );
    assert!(status.success(), "{status}: {}", log());
    facts(&log())
}

#[test]
fn the_host_zygote_sees_the_template_alone_and_holds_nothing() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let f = run(&t, &Parent::new(), PROBE, None);
    assert_eq!(f.get("done").map(String::as_str), Some("yes"), "{f:?}");
    for (k, v) in [
        ("uid", ZYGOTE_UID.to_string()),
        ("gid", ZYGOTE_UID.to_string()),
        ("groups", ZYGOTE_UID.to_string()),
        ("hostname", "zygote".into()),
        ("CapEff", "0000000000000000".into()),
        ("CapPrm", "0000000000000000".into()),
        ("CapBnd", "0000000000000000".into()),
        ("CapAmb", "0000000000000000".into()),
        ("NoNewPrivs", "1".into()),
        ("Seccomp", "2".into()),
        // A network namespace of its own: a loopback, and nothing else.
        ("netdevs", "lo".into()),
        ("sleep_seen", "yes".into()),
        ("exists:/proc/1", "no".into()),
        ("exists:/proc/sys", "no".into()),
        ("exists:/proc/kcore", "no".into()),
        ("exists:/work", "no".into()),
        ("exists:/root", "no".into()),
        ("exists:/etc/passwd", "yes".into()),
        ("dev", "null random urandom zero".into()),
        ("write_usr", "Read-only file system".into()),
        ("tmp_write", "t".into()),
        ("unshare_user", "Operation not permitted".into()),
        ("ptrace_syscall", "Operation not permitted".into()),
        (
            "mountpoints",
            "/ /proc /tmp /dev /dev/null /dev/zero /dev/urandom /dev/random".into(),
        ),
    ] {
        assert_eq!(f.get(k), Some(&v), "{k}: {f:?}");
    }
    // Processes of its own uid, and those of sandboxes its uid owns (the other test's, when they
    // run at once: see below); never the host's.
    let uids: Vec<&str> = f["uids"].split_whitespace().collect();
    assert!(uids.contains(&ZYGOTE_UID.to_string().as_str()), "{uids:?}");
    assert!(
        uids.iter().all(|u| u.parse::<u32>().unwrap() >= ZYGOTE_UID),
        "{uids:?}"
    );
}

#[test]
fn the_host_zygote_joins_the_sandboxes_its_uid_owns_and_no_other() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let parent = Parent::new();
    let owned_id = unique_id("zygote-owned");
    let mut owned = t.spec(&owned_id, "sleep 100");
    parent.adopt(&mut owned);
    let owned = launch(&owned).unwrap();
    let other_dir = TestDir::new();
    let other = launch(&other_dir.spec(&unique_id("zygote-other"), "sleep 100")).unwrap();
    let script = format!("OWNED={} OTHER={}\n{JOIN}", owned.pid(), other.pid());
    let control = || Some(pidfd_open(owned.pid()).unwrap());
    let joined = run(&t, &parent, &script, control());
    assert_eq!(joined["join"], owned_id, "{joined:?}");
    let refused = run(&t, &parent, &script, Some(pidfd_open(other.pid()).unwrap()));
    assert_eq!(refused["join"], "Operation not permitted", "{refused:?}");
    // The same uid in another parent namespace (another template's zygote) is refused.
    let outside = run(&t, &Parent::new(), &script, control());
    assert_eq!(outside["join"], "Operation not permitted", "{outside:?}");
    // Owning a user namespace gives its owner's uid every capability in it, ptrace's read access
    // to its processes included, so `hidepid` shows it the sandboxes it owns; no other.
    assert_eq!(
        joined[&format!("seen:{}", owned.pid())],
        "yes",
        "{joined:?}"
    );
    assert_eq!(joined[&format!("seen:{}", other.pid())], "no", "{joined:?}");
}

#[test]
fn a_spec_the_jail_cannot_keep_is_refused_before_anything_runs() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let mut s = spec(&t, "echo ran > /tmp/x");
    s.uid = 0;
    let r = spawn(zygote_helper(), &s, None, None);
    assert!(matches!(r, Err(HostZygoteError::InvalidSpec(_))), "{r:?}");
    // A spec the helper itself refuses (a program that is not there) comes back as its error.
    let mut s = spec(&t, "");
    s.program = "/usr/bin/no-such-program".into();
    match spawn(zygote_helper(), &s, None, None) {
        Err(HostZygoteError::Helper { message }) => {
            assert!(message.contains("execve"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// The newest complete build of the built-in template (`LIZARD_TEMPLATES_FROM`, which
/// `scripts/test.sh` sets): its root file system and its Python.
fn real_template() -> Option<(PathBuf, String)> {
    let from = std::env::var_os("LIZARD_TEMPLATES_FROM")?;
    let dir = Path::new(&from).join("templates/code-interpreter-v1");
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| {
            let p = e.ok()?.path();
            let done = fs::metadata(p.join("complete")).ok()?.modified().ok()?;
            Some((done, p))
        })
        .collect();
    builds.sort();
    let build = builds.pop()?.1;
    let meta: serde_json::Value =
        serde_json::from_slice(&fs::read(build.join("template.json")).ok()?).ok()?;
    Some((build.join("rootfs"), meta["python"].as_str()?.to_string()))
}

/// Send `msg` with `fds` to the host zygote and read its one answer.
fn ask(sock: &OwnedFd, msg: serde_json::Value, fds: &[RawFd]) -> serde_json::Value {
    send_with_fds(sock, msg.to_string().as_bytes(), fds).unwrap();
    let mut buf = vec![0u8; 65536];
    let n = poll(
        Duration::from_secs(120),
        "the host zygote's answer",
        || match recv_with_fds(sock, &mut buf) {
            Ok((n, _)) => Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("{e}"),
        },
    );
    serde_json::from_slice(&buf[..n]).unwrap_or_else(|_| panic!("{:?}", &buf[..n]))
}

/// The whole join with the real template and this tree's runner: a host zygote (the runner in its
/// host mode, in its jail) forks a process that joins a sandbox whose user namespace its uid owns,
/// remaps its files onto the sandbox's, takes the agent's credentials and connects to the agent's
/// root-only socket (a stand-in agent here, `host_zygote/fake_agent.py`, PID 1 as root with the
/// agent's capabilities); it then forks a kernel for the agent that runs a cell as the sandbox
/// user, with the environment the agent gave.
#[test]
fn a_joined_fork_serves_the_sandbox_as_its_zygote() {
    lizard_test_support::needs_root!();
    let Some((rootfs, python)) = real_template() else {
        assert!(
            std::env::var_os("LIZARD_TEMPLATES_FROM").is_none(),
            "LIZARD_TEMPLATES_FROM has no complete build of code-interpreter-v1"
        );
        eprintln!("SKIPPED: no built template (LIZARD_TEMPLATES_FROM)");
        return;
    };
    let Some(criu) = criu() else { return };
    let t = TestDir::new();
    let parent = Parent::new();
    let mut spec = t.spec(&unique_id("joined"), "");
    spec.rootfs.lower = vec![rootfs.clone()];
    parent.adopt(&mut spec);
    spec.user = UserSpec { uid: 0, gid: 0 };
    spec.keep_caps = AGENT_CAPS.to_vec();
    spec.program = PathBuf::from(&python);
    spec.args = vec!["-s".into(), "-c".into(), FAKE_AGENT.into()];
    spec.cwd = "/".into();
    let sandbox = launch(&spec).unwrap();
    poll(
        Duration::from_secs(30),
        "the stand-in agent to listen",
        || t.log().contains("listening=yes").then_some(()),
    );

    let (ours, theirs) = seqpacket_pair().unwrap();
    let mut z = self::spec(&t, "");
    z.layers = vec![rootfs];
    z.program = PathBuf::from(&python);
    z.args = vec!["-s".into(), "-c".into(), RUNNER.into()];
    z.tmp_bytes = 64 << 20;
    z.userns = Some(parent.path());
    z.env = BTreeMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("HOME".to_string(), "/tmp".to_string()),
        ("LIZARD_ZYGOTE_FD".to_string(), "3".to_string()),
        ("LIZARD_HOST_ZYGOTE".to_string(), "1".to_string()),
    ]);
    let mut zygote = spawn(zygote_helper(), &z, Some(theirs), None).unwrap();
    let zlog = || fs::read_to_string(&z.log_path).unwrap_or_default();
    let so = t.path().join("entry.so");
    fs::write(&so, SHARED_OBJECT).unwrap();
    let so = fs::File::open(&so).unwrap();
    let ready = ask(&ours, json!({"op": "entry"}), &[so.as_raw_fd()]);
    assert_eq!(ready, json!({"ev": "ready"}), "{}", zlog());

    let pidfd = pidfd_open(sandbox.pid()).unwrap();
    let procs: Vec<fs::File> = sandbox
        .cgroup()
        .paths()
        .dirs()
        .iter()
        .map(|(_, d)| {
            fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .unwrap()
        })
        .collect();
    let mut fds = vec![pidfd.as_raw_fd()];
    fds.extend(procs.iter().map(|f| f.as_raw_fd()));
    let join = json!({
        "op": "join",
        "socket": "/run/lizard/z/zygote.sock",
        "caps": Capability::mask(&AGENT_CAPS),
        "securebits": JOIN_SECUREBITS,
    });
    let joined = ask(&ours, join, &fds);
    assert!(joined["pid"].as_i64().is_some(), "{joined}: {}", zlog());
    poll(
        Duration::from_secs(60),
        "the cell in the joined zygote's kernel",
        || t.log().contains("done=yes").then_some(()),
    );
    let f = facts(&t.log());
    for (k, v) in [
        ("peer_uid", "0"),
        ("zygote_says", r#"{"ev":"ready"}"#),
        // The agent's child, as its own zygote is (the middle process of the double fork into
        // the pid namespace exited); so are the kernels it forks.
        ("zygote_ppid", "1"),
        (
            "zygote_caps",
            &format!("{:016x}", Capability::mask(&AGENT_CAPS)),
        ),
        ("zygote_namespaces_ours", "True"),
        ("kernel_says", "ready"),
        ("kernel_ppid", "1"),
        ("kernel_uid", "1000"),
        ("result", "(42, 'joined')"),
    ] {
        assert_eq!(
            f.get(k).map(String::as_str),
            Some(v),
            "{k}: {}\n{}",
            t.log(),
            zlog()
        );
    }
    // Its program is the sandbox's file now, not the zygote's (whose mount the sandbox lacks).
    assert!(f["zygote_exe"].starts_with("/usr/bin/python3"), "{f:?}");

    // Each `go-N`: the first kernel computes `x + N`, and the zygote forks another that says N.
    let again = |n: u32| {
        fs::write(t.path().join(format!("run/go-{n}")), "").unwrap();
        let key = format!("forked-{n}");
        poll(Duration::from_secs(60), &key, || {
            facts(&t.log()).get(&key).cloned()
        });
        (
            facts(&t.log())[&format!("again-{n}")].clone(),
            facts(&t.log())[&key].clone(),
        )
    };
    assert_eq!(again(1), ("43".into(), "1".into()), "{}", t.log());

    // The sandbox — the joined zygote and the kernels it forked included — is checkpointed by
    // CRIU as host root (who owns the parent namespace, so keeps every capability over the
    // sandbox) and restored: the kernel's state is intact and the zygote forks again.
    let pid = sandbox.pid();
    let dump = lizard_jail::checkpoint::DumpSpec::of_sandbox(pid).unwrap();
    let images = lizard_jail::checkpoint::ImagesDir::create(&t.path().join("images")).unwrap();
    let run_dir = t.path().join("criu-run");
    lizard_jail::checkpoint::mount_run_dir(&run_dir).unwrap();
    let criu = criu.with_run_dir(Some(run_dir.clone()));
    criu.dump(pid, &images, &dump, false, None, Duration::from_secs(60))
        .unwrap_or_else(|e| {
            let log = fs::read_to_string(images.path.join("dump.log")).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(6000)..];
            panic!("dump: {}\n{tail}", lizard_jail::error_chain(&e))
        });
    poll(Duration::from_secs(10), "the dumped sandbox to end", || {
        gone(pid).then_some(())
    });
    drop(sandbox);
    spec.restore = Some(common::restore_from(&images, &run_dir, dump));
    let restored = launch(&spec).unwrap_or_else(|e| {
        let log = fs::read_to_string(images.path.join("restore.log")).unwrap_or_default();
        let tail = &log[log.len().saturating_sub(6000)..];
        panic!("restore: {}\n{tail}", lizard_jail::error_chain(&e))
    });
    assert_eq!(again(2), ("44".into(), "2".into()), "{}", t.log());
    drop(restored);
    lizard_jail::checkpoint::unmount_run_dir(&run_dir);
    let _ = zygote.kill();
    let _ = zygote.wait();
}
