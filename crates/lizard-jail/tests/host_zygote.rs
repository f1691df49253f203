//! The host zygote's jail for real (`lizard_jail::host_zygote`), probed from inside with bash
//! scripts as the sandbox tests do: what it sees of the host, what it may do, and that it joins a
//! sandbox whose user namespace its uid owns — and no other. Needs root (as CI has).

mod common;

use common::*;
use lizard_jail::host_zygote::{spawn, HostZygoteError, HostZygoteSpec};
use lizard_jail::process::pidfd_open;
use std::collections::BTreeMap;
use std::fs;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::Duration;

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
    }
}

fn zygote_helper() -> Command {
    let mut c = helper();
    c.arg("zygote");
    c
}

/// Run `script` as a host zygote (with `control` as its fd 3) until it exits; its facts.
fn run(t: &TestDir, script: &str, control: Option<OwnedFd>) -> BTreeMap<String, String> {
    let s = spec(t, script);
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
    let f = run(&t, PROBE, None);
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
    let owned_id = unique_id("zygote-owned");
    let mut owned = t.spec(&owned_id, "sleep 100");
    owned.userns_owner = Some(ZYGOTE_UID);
    let owned = launch(&owned).unwrap();
    let other_dir = TestDir::new();
    let other = launch(&other_dir.spec(&unique_id("zygote-other"), "sleep 100")).unwrap();
    let script = format!("OWNED={} OTHER={}\n{JOIN}", owned.pid(), other.pid());
    let joined = run(&t, &script, Some(pidfd_open(owned.pid()).unwrap()));
    assert_eq!(joined["join"], owned_id, "{joined:?}");
    let refused = run(&t, &script, Some(pidfd_open(other.pid()).unwrap()));
    assert_eq!(refused["join"], "Operation not permitted", "{refused:?}");
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
