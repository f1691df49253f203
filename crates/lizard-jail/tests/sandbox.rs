//! Sandboxes for real: namespaces, overlay root, /proc, /dev, cgroups, capabilities and seccomp,
//! probed from inside with bash scripts whose output lands in the sandbox's log. Needs root (as CI
//! has). Launches go through the single-threaded `lizard-jail-init` helper, since the test harness
//! is multi-threaded.

mod common;

use common::*;
use lizard_jail::cgroup::{CgroupPaths, Hierarchy, V1Dirs};
use lizard_jail::process::Exit;
use lizard_jail::sandbox::Bind;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{lchown, symlink, MetadataExt};
use std::path::Path;
use std::time::Duration;

const PROBE: &str = r#"
echo "uid=$(id -u)"
echo "gid=$(id -g)"
echo "groups=$(id -G)"
echo "pid=$$"
echo "ppid=$PPID"
echo "hostname=$(hostname)"
echo "cwd=$PWD"
devs=""
{ read -r; read -r; while IFS=: read -r name rest; do devs="$devs ${name// /}"; done; } < /proc/net/dev
echo "netdevs=${devs# }"
echo "lo=$( (exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | grep -o 'refused\|unreachable' | head -n 1)"
procs=""
for d in /proc/[0-9]*; do read -r c < "$d/comm" && procs="$procs ${d#/proc/}:$c"; done
echo "procs=${procs# }"
for p in /work /root /etc/shadow /sys /home/user /opt/lizard/bin/lizard; do
  if [ -e "$p" ]; then echo "exists:$p=yes"; else echo "exists:$p=no"; fi
done
while read -r k v; do
  case $k in CapEff:|CapPrm:|CapInh:|CapBnd:|CapAmb:|NoNewPrivs:|Seccomp:) echo "${k%:}=$v";; esac
done < /proc/self/status
while read -r id parent dev root mp opts rest; do
  case $mp in /|/proc|/proc/sys|/proc/kcore|/dev|/dev/pts|/dev/shm|/tmp|/run/lizard|/opt/lizard/bin/lizard)
    echo "mnt:$mp=$opts ${rest#*- }";;
  esac
done < /proc/self/mountinfo
echo "uid_map=$(cat /proc/self/uid_map | tr -s ' ')"
echo "cgroup_paths=$(cut_paths=""; while IFS=: read -r h c p; do cut_paths="$cut_paths $p"; done < /proc/self/cgroup; echo $cut_paths)"
echo "dev=$(ls /dev | tr '\n' ' ')"
echo "urandom=$(head -c 16 /dev/urandom | wc -c)"
masked=""
for p in /proc/kcore /proc/keys /proc/timer_list /proc/kallsyms; do [ -e $p ] && masked="$masked $(stat -c %F $p | tr ' ' _)"; done
echo "masked=${masked# }"
echo "proc_acpi=$(ls -A /proc/acpi 2>&1 | wc -l)"
echo "note" > /home/user/note.txt && echo "write_home=ok"
(echo x > /etc/evil) 2>/dev/null && echo "write_etc=ok" || echo "write_etc=denied"
(echo x > /opt/lizard/bin/lizard) 2>/dev/null && echo "write_ro_bind=ok" || echo "write_ro_bind=denied"
echo "hi" > /run/lizard/from-sandbox && echo "write_rw_bind=ok"
echo "tmp_write=$(echo t > /tmp/t && cat /tmp/t)"
echo "unshare_user=$(unshare -U true 2>&1)"
echo "unshare_mount=$(unshare -m true 2>&1)"
echo "mount_syscall=$(perl -e 'syscall(165, 0, 0, 0, 0, 0) == -1 and print "$!"')"
echo "ptrace_syscall=$(perl -e 'syscall(101, 16, 1, 0, 0) == -1 and print "$!"')"
echo "sethostname=$(perl -e 'my $h = "x"; syscall(170, $h, 1) == -1 and print "$!"')"
echo "env=$(env | grep -v '^_=' | sort | tr '\n' ' ')"
mps=""
while read -r id parent dev root mp rest; do mps="$mps $mp"; done < /proc/self/mountinfo
echo "mountpoints=${mps# }"
echo "done=yes"
"#;

#[test]
fn isolation_seen_from_inside() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let id = unique_id("probe");
    let mut sb = launch(&t.spec(&id, PROBE)).unwrap();
    assert_eq!(
        sb.wait(Duration::from_secs(10)),
        Exit::Code(0),
        "{}",
        t.log()
    );
    let log = t.log();
    if std::env::var_os("LIZARD_SHOW_PROBE").is_some() {
        eprintln!("{log}");
    }
    let f = facts(&log);
    let fact = |k: &str| {
        f.get(k)
            .unwrap_or_else(|| panic!("no {k} in the probe's output:\n{log}"))
            .as_str()
    };
    // User namespace: the unprivileged user, mapped to SHIFT + 1000 on the host.
    assert_eq!(fact("uid"), "1000");
    assert_eq!(fact("gid"), "1000");
    assert_eq!(fact("groups"), "1000");
    assert_eq!(fact("uid_map"), "0 100000 65536");
    // PID namespace: the program is PID 1 and alone.
    assert_eq!(fact("pid"), "1");
    assert_eq!(fact("ppid"), "0");
    assert_eq!(fact("procs"), "1:bash");
    // UTS and net namespaces.
    assert_eq!(fact("hostname"), id);
    assert_eq!(fact("netdevs"), "lo");
    assert_eq!(fact("lo"), "refused", "loopback is up (nothing listens)");
    // Cgroup namespace rooted at the sandbox's cgroup.
    assert!(
        fact("cgroup_paths").split(' ').all(|p| p == "/"),
        "{}",
        fact("cgroup_paths")
    );
    // Nothing of the host.
    for p in ["/work", "/root", "/etc/shadow", "/sys"] {
        assert_eq!(fact(&format!("exists:{p}")), "no", "{p} is visible");
    }
    assert_eq!(fact("exists:/home/user"), "yes");
    assert_eq!(fact("cwd"), "/home/user");
    // The environment is exactly the spec's (bash adds PWD, SHLVL).
    assert_eq!(
        fact("env"),
        "HOME=/home/user LIZARD_TEST=1 PATH=/usr/bin:/bin PWD=/home/user SHLVL=1"
    );
    // No capabilities, no_new_privs, seccomp filter mode.
    for k in ["CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"] {
        assert_eq!(fact(k), "0000000000000000", "{k}");
    }
    assert_eq!(fact("NoNewPrivs"), "1");
    assert_eq!(fact("Seccomp"), "2");
    let eperm = "Operation not permitted";
    for k in ["unshare_user", "unshare_mount"] {
        assert_eq!(fact(k), format!("unshare: unshare failed: {eperm}"), "{k}");
    }
    for k in ["mount_syscall", "ptrace_syscall", "sethostname"] {
        assert_eq!(fact(k), eperm, "{k}");
    }
    // Mounts: overlay root, fresh proc with masks, minimal dev, tmpfs tmp, binds.
    assert!(fact("mnt:/").contains("overlay overlay"), "{log}");
    assert!(fact("mnt:/").starts_with("rw,nosuid,nodev"), "{log}");
    // The layers' host paths do not show (overlayfs was given /proc/self/fd/N).
    assert!(
        !fact("mnt:/").contains(&*t.path().to_string_lossy()),
        "{log}"
    );
    assert!(fact("mnt:/proc").contains("proc proc"), "{log}");
    assert!(fact("mnt:/proc/sys").starts_with("ro,"), "{log}");
    // /dev/null over the host-information files of /proc (which of them exist depends on the kernel).
    let masked: Vec<&str> = fact("masked").split(' ').collect();
    assert!(
        !masked.is_empty() && masked.iter().all(|m| m.starts_with("character")),
        "{log}"
    );
    assert_eq!(fact("proc_acpi"), "0");
    assert!(fact("mnt:/dev").contains("tmpfs"), "{log}");
    assert!(fact("mnt:/dev").starts_with("ro,nosuid"), "{log}");
    assert!(fact("mnt:/dev/pts").contains("devpts"), "{log}");
    assert!(fact("mnt:/dev/shm").contains("tmpfs"), "{log}");
    assert!(fact("mnt:/tmp").contains("tmpfs"), "{log}");
    assert!(
        fact("mnt:/opt/lizard/bin/lizard").starts_with("ro,nosuid,nodev"),
        "{log}"
    );
    assert!(
        fact("mnt:/run/lizard").starts_with("rw,nosuid,nodev"),
        "{log}"
    );
    assert_eq!(
        fact("dev"),
        "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero"
    );
    assert_eq!(fact("urandom"), "16");
    // Writes: the home dir lands in the writable layer, owned by the shifted user; the template's
    // root-owned dirs and read-only binds refuse; the rw bind reaches the host.
    for (k, want) in [("write_home", "ok"), ("write_etc", "denied")] {
        assert_eq!(fact(k), want, "{k}");
    }
    for (k, want) in [("write_ro_bind", "denied"), ("write_rw_bind", "ok")] {
        assert_eq!(fact(k), want, "{k}");
    }
    assert_eq!(fact("tmp_write"), "t");
    let note = t.upper().join("home/user/note.txt");
    assert_eq!(fs::read_to_string(&note).unwrap(), "note\n");
    assert_eq!(fs::metadata(&note).unwrap().uid(), SHIFT + USER);
    assert!(!t.template().join("home/user/note.txt").exists());
    assert_eq!(
        fs::read_to_string(t.path().join("run/from-sandbox")).unwrap(),
        "hi\n"
    );
    // No other mount (nothing of the host's mount table survived pivot_root).
    let allowed = [
        "/",
        "/opt/lizard/bin/lizard",
        "/run/lizard",
        "/proc",
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sched_debug",
        "/proc/latency_stats",
        "/proc/timer_stats",
        "/proc/kallsyms",
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/irq",
        "/proc/bus",
        "/proc/fs",
        "/proc/acpi",
        "/proc/scsi",
        "/proc/asound",
        // Per-sandbox contents (a detached tmpfs's files, bound read-only).
        "/proc/diskstats",
        "/proc/partitions",
        "/proc/loadavg",
        "/proc/sys/kernel/random/boot_id",
        "/proc/sys/kernel/pty/nr",
        "/proc/sys/fs/file-nr",
        "/dev",
        // Binds of the host's device nodes (a tmpfs of the sandbox's user namespace cannot hold
        // working ones).
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
        "/tmp",
    ];
    for mp in fact("mountpoints").split(' ') {
        assert!(
            allowed.contains(&mp),
            "unexpected mount {mp} in the sandbox:\n{log}"
        );
    }
    assert_eq!(fact("done"), "yes");
}

#[test]
fn limits_apply_and_kill_all_leaves_nothing() {
    lizard_test_support::needs_root!();
    let mountinfo_before = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let t = TestDir::new();
    let mut spec = t.spec(
        &unique_id("limits"),
        r#"
        echo "nofile=$(ulimit -n)"
        echo "core=$(ulimit -c)"
        while read -r id parent dev root mp opts rest; do
          [ "$mp" = /tmp ] && echo "tmp=${rest#*- }"
        done < /proc/self/mountinfo
        sleep 100 & sleep 100 &
        echo started=yes
        wait
        "#,
    );
    spec.limits.memory_bytes = Some(64 << 20);
    spec.limits.pids_max = Some(16);
    spec.limits.cpu_millicores = Some(500);
    spec.limits.tmp_bytes = Some(8 << 20);
    spec.limits.nofile = Some(256);
    let mut sb = launch(&spec).unwrap();
    poll(Duration::from_secs(5), "the script to start", || {
        t.log().contains("started=yes").then_some(())
    });
    let f = facts(&t.log());
    assert_eq!(f["nofile"], "256");
    assert_eq!(f["core"], "0");
    assert!(f["tmp"].contains("size=8192k"), "{}", f["tmp"]);

    let cg = sb.cgroup().clone();
    let read = |p: &Path| fs::read_to_string(p).unwrap().trim().to_string();
    match cg.paths() {
        CgroupPaths::V1(V1Dirs {
            memory,
            pids,
            cpu,
            freezer,
            ..
        }) => {
            assert_eq!(read(&memory.join("memory.limit_in_bytes")), "67108864");
            if memory.join("memory.memsw.limit_in_bytes").exists() {
                assert_eq!(
                    read(&memory.join("memory.memsw.limit_in_bytes")),
                    "67108864"
                );
            }
            assert_eq!(read(&pids.join("pids.max")), "16");
            assert_eq!(read(&cpu.join("cpu.cfs_quota_us")), "50000");
            assert_eq!(read(&cpu.join("cpu.cfs_period_us")), "100000");
            // Made under our own cgroup, in a `lizard` directory.
            let own = fs::read_to_string("/proc/self/cgroup").unwrap();
            let own_mem = own
                .lines()
                .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
                .unwrap();
            assert!(
                memory.to_string_lossy().ends_with(&format!(
                    "{}/lizard/{}",
                    own_mem.trim_end_matches('/'),
                    spec.id
                )),
                "{}",
                memory.display()
            );
            assert!(freezer.is_dir());
        }
        CgroupPaths::V2 { path } => {
            assert_eq!(read(&path.join("memory.max")), "67108864");
            assert_eq!(read(&path.join("pids.max")), "16");
            assert_eq!(read(&path.join("cpu.max")), "50000 100000");
        }
    }

    // Accounting and the process list (PID 1 bash and two sleeps).
    let pids = poll(Duration::from_secs(5), "three processes", || {
        let p = cg.pids().unwrap();
        (p.len() == 3).then_some(p)
    });
    assert!(pids.contains(&sb.pid()));
    assert!(cg.memory_bytes().unwrap() > 0);
    assert!(cg.memory_peak_bytes().unwrap() >= cg.memory_bytes().unwrap() / 2);
    assert!(cg.cpu_usage_ns().unwrap() > 0);
    assert_eq!(cg.oom_kills().unwrap(), 0);

    // Freeze and thaw.
    cg.freeze().unwrap();
    assert!(cg.is_frozen().unwrap());
    cg.thaw().unwrap();
    assert!(!cg.is_frozen().unwrap());

    // Kill everything; PID 1 dies by SIGKILL; the cgroup goes; no host mount changed.
    cg.kill_all().unwrap();
    assert!(cg.pids().unwrap().is_empty());
    assert_eq!(sb.wait(Duration::from_secs(5)), Exit::Signal(libc::SIGKILL));
    for p in &pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "pid {p} left");
    }
    cg.remove().unwrap();
    for (_, d) in cg.paths().dirs() {
        assert!(!d.exists(), "{} left", d.display());
    }
    // Only the mounts that name this test's directory count: the machine is shared, and other
    // tests (or other servers) mount and unmount their own disks meanwhile.
    let ours = |info: &str| -> Vec<String> {
        let root = t.path().to_string_lossy().into_owned();
        info.lines()
            .filter(|l| l.contains(&root))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        ours(&fs::read_to_string("/proc/self/mountinfo").unwrap()),
        ours(&mountinfo_before),
        "host mounts changed"
    );
}

/// A program executed from a sealed in-memory copy needs no mount: nothing in the sandbox's
/// mount table or its `/proc/<pid>/exe` names the host file it came from, and the copy cannot be
/// written.
#[test]
fn a_program_run_by_descriptor_leaves_no_host_path_inside() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let exe =
        lizard_jail::exe::SealedExe::copy_of(Path::new("/bin/bash"), "sandbox-agent").unwrap();
    let mut spec = t.spec(
        &unique_id("memfd"),
        r#"echo "exe=$(readlink /proc/$$/exe)"
echo "argv0=$0"
echo "mountinfo=$(cut -d' ' -f4,5 /proc/self/mountinfo | tr '\n' ';')"
(echo x > /proc/$$/exe) 2>/dev/null && echo "write_exe=ok" || echo "write_exe=denied"
"#,
    );
    spec.binds
        .retain(|b| b.target != Path::new("/opt/lizard/bin/lizard"));
    spec.program = "/opt/lizard/bin/agent".into(); // argv[0] only: no such file inside
    spec.program_source = Some(exe.proc_path());
    let f = probe_facts(&t, &spec, 10);
    assert_eq!(f["exe"], "/memfd:sandbox-agent (deleted)", "{}", t.log());
    assert!(!f["mountinfo"].contains("bash"), "{}", t.log());
    assert!(!f["mountinfo"].contains("/opt/lizard"), "{}", t.log());
    assert_eq!(f["write_exe"], "denied", "{}", t.log());
}

#[test]
fn inherited_descriptors_arrive_at_3_and_up_and_nothing_else() {
    lizard_test_support::needs_root!();
    use lizard_jail::sandbox::InheritFd;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let t = TestDir::new();
    let chan = t.path().join("chan");
    fs::create_dir(&chan).unwrap();
    fs::set_permissions(&chan, fs::Permissions::from_mode(0o700)).unwrap();
    let sock = chan.join("agent.sock");
    fs::write(&sock, "an old file").unwrap();
    let file = t.path().join("sealed");
    fs::write(&file, "read-only content").unwrap();
    let mut spec = t.spec(
        &unique_id("inherit"),
        r#"l=$(readlink /proc/self/fd/3); echo "fd3=${l%%:*}"
echo "fd4=$(cat <&4)"
(echo x >&4) 2>/dev/null && echo "write4=ok" || echo "write4=denied"
[ -e /proc/self/fd/5 ] && echo "fd5=open" || echo "fd5=closed"
found=no; for f in /run/lizard/* /tmp/*; do [ -S "$f" ] && found=$f; done; echo "socket_inside=$found"
echo "chan_inside=$(grep -c chan /proc/self/mountinfo)"
"#,
    );
    spec.inherit_fds = vec![
        InheritFd::UnixListener { path: sock.clone() },
        InheritFd::ReadOnlyFile { path: file },
    ];
    let f = probe_facts(&t, &spec, 10);
    assert_eq!(f["fd3"], "socket", "{}", t.log());
    assert_eq!(f["fd4"], "read-only content", "{}", t.log());
    assert_eq!(f["write4"], "denied", "{}", t.log());
    assert_eq!(f["fd5"], "closed", "{}", t.log());
    assert_eq!(f["socket_inside"], "no", "{}", t.log());
    assert_eq!(f["chan_inside"], "0", "{}", t.log());
    // The old file made way for a private socket, bound on the host.
    let meta = fs::symlink_metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600);

    // A directory the sandbox's user (or anyone but root) could write is refused.
    let theirs = t.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    lchown(&theirs, Some(SHIFT + USER), None).unwrap();
    let mut spec = t.spec(&unique_id("inherit-bad"), "");
    spec.inherit_fds = vec![InheritFd::UnixListener {
        path: theirs.join("agent.sock"),
    }];
    let msg = launch(&spec).err().expect("refused").to_string();
    assert!(msg.contains("binding the inherited socket"), "{msg}");
    assert!(msg.contains("not root"), "{msg}");
    for d in cgroup_would_be(&spec.id) {
        assert!(!d.exists(), "{} left behind", d.display());
    }
    // And so is a symlink on the way.
    let link = t.path().join("link");
    symlink(&chan, &link).unwrap();
    let mut spec = t.spec(&unique_id("inherit-link"), "");
    spec.inherit_fds = vec![InheritFd::UnixListener {
        path: link.join("agent.sock"),
    }];
    assert!(launch(&spec).is_err());
}

#[test]
fn memory_bomb_is_oom_killed_and_counted() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let mut spec = t.spec(
        &unique_id("oom"),
        r#"perl -e '$x = "a" x (256 * 1024 * 1024); print "survived\n"'; echo "perl_status=$?""#,
    );
    spec.limits.memory_bytes = Some(32 << 20);
    let mut sb = launch(&spec).unwrap();
    assert_eq!(
        sb.wait(Duration::from_secs(20)),
        Exit::Code(0),
        "{}",
        t.log()
    );
    let f = facts(&t.log());
    assert_eq!(f["perl_status"], "137", "{}", t.log());
    assert!(!t.log().lines().any(|l| l == "survived"), "{}", t.log());
    assert!(sb.cgroup().oom_kills().unwrap() >= 1);
    assert!(sb.cgroup().memory_peak_bytes().unwrap() <= 32 << 20);
}

#[test]
fn fork_bomb_hits_the_pids_limit() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let mut spec = t.spec(
        &unique_id("pids"),
        r#"perl -e '
            my @kids;
            for (1..100) {
                my $p = fork();
                if (!defined $p) { print "forked=", scalar(@kids), "\nerror=$!\n"; last }
                if ($p == 0) { sleep 30; exit 0 }
                push @kids, $p;
            }
            kill "KILL", @kids; waitpid($_, 0) for @kids;'
        "#,
    );
    spec.limits.pids_max = Some(10);
    let f = probe_facts(&t, &spec, 10);
    // bash (PID 1) + perl + 8 children = 10.
    assert_eq!(
        f.get("forked").map(String::as_str),
        Some("8"),
        "{}",
        t.log()
    );
    assert_eq!(f["error"], "Resource temporarily unavailable");
}

/// The cgroup directories a sandbox with this id would have (v1 here).
fn cgroup_would_be(id: &str) -> Vec<std::path::PathBuf> {
    match Hierarchy::detect().unwrap() {
        Hierarchy::V1(V1Dirs { memory, pids, .. }) => {
            vec![memory.join("lizard").join(id), pids.join("lizard").join(id)]
        }
        Hierarchy::V2 { own } => vec![own.join("lizard").join(id)],
    }
}

#[test]
fn setup_failures_name_the_step_and_leave_nothing() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let mut spec = t.spec(&unique_id("noexec"), "");
    spec.program = "/nope".into();
    let err = launch(&spec).err().expect("a missing program fails");
    let msg = err.to_string();
    assert!(msg.contains("`execve` (/nope)"), "{msg}");
    assert!(msg.contains("No such file or directory"), "{msg}");
    for d in cgroup_would_be(&spec.id) {
        assert!(!d.exists(), "{} left behind", d.display());
    }

    let mut spec = t.spec(&unique_id("nocwd"), "");
    spec.cwd = "/does/not/exist".into();
    let msg = launch(&spec).err().unwrap().to_string();
    assert!(msg.contains("`chdir` (/does/not/exist)"), "{msg}");

    let mut spec = t.spec(&unique_id("badid"), "");
    spec.id = "../x".into();
    let msg = launch(&spec).err().unwrap().to_string();
    assert!(msg.contains("invalid sandbox spec: id"), "{msg}");

    let mut spec = t.spec(&unique_id("nolower"), "");
    spec.rootfs.lower = vec![t.path().join("missing")];
    let msg = launch(&spec).err().unwrap().to_string();
    assert!(msg.contains("reading the template root"), "{msg}");
}

#[test]
fn planted_symlinks_cannot_redirect_mounts_to_the_host() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    // A previous life of the sandbox left `/opt` pointing at a host directory (absolute link).
    let host_dir = t.path().join("host-secret");
    fs::create_dir(&host_dir).unwrap();
    symlink(&host_dir, t.upper().join("opt")).unwrap();
    let spec = t.spec(&unique_id("symlink"), "true");
    let err = launch(&spec).err().expect("the bind target cannot be made");
    assert!(err.to_string().contains("create mount target"), "{err}");
    // Nothing was created on the host side of the link.
    assert_eq!(fs::read_dir(&host_dir).unwrap().count(), 0);

    // Inside-relative links are followed inside the root: /run/lizard -> /home/user/run works and
    // the bind lands in the sandbox's own /home/user/run.
    let t = TestDir::new();
    fs::create_dir_all(t.upper().join("run")).unwrap();
    fs::create_dir_all(t.upper().join("home/user/run")).unwrap();
    std::os::unix::fs::lchown(
        t.upper().join("home/user/run"),
        Some(SHIFT + USER),
        Some(SHIFT + USER),
    )
    .unwrap();
    symlink("/home/user/run", t.upper().join("run/lizard")).unwrap();
    let mut sb = launch(&t.spec(
        &unique_id("symlink2"),
        "echo hi > /home/user/run/x && echo ok=yes",
    ))
    .unwrap();
    assert_eq!(
        sb.wait(Duration::from_secs(5)),
        Exit::Code(0),
        "{}",
        t.log()
    );
    assert_eq!(fs::read_to_string(t.path().join("run/x")).unwrap(), "hi\n");
}

/// Volume binds (`no_symlinks`) follow no symlink at all, not even one that stays inside the root;
/// a plain path is created and bound, read-only when asked.
#[test]
fn no_symlink_binds_refuse_any_link() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let vol = t.path().join("volume");
    fs::create_dir(&vol).unwrap();
    fs::create_dir_all(t.upper().join("home/user")).unwrap();
    symlink("/tmp", t.upper().join("home/user/data")).unwrap();
    let mut spec = t.spec(&unique_id("nosym"), "true");
    spec.binds.push(lizard_jail::sandbox::Bind {
        source: vol.clone(),
        target: "/home/user/data/x".into(),
        readonly: false,
        no_symlinks: true,
        ..Default::default()
    });
    let err = launch(&spec)
        .err()
        .expect("a symlink on the way is refused");
    assert!(err.to_string().contains("mount target"), "{err}");

    let t = TestDir::new();
    let vol = t.path().join("volume");
    fs::create_dir(&vol).unwrap();
    fs::write(vol.join("f"), "v\n").unwrap();
    let mut spec = t.spec(
        &unique_id("nosym2"),
        "cat /data/vol/f && if echo x > /data/vol/g 2>/dev/null; then echo rw=yes; else echo rw=no; fi",
    );
    spec.binds.push(lizard_jail::sandbox::Bind {
        source: vol.clone(),
        target: "/data/vol".into(),
        readonly: true,
        no_symlinks: true,
        ..Default::default()
    });
    let mut sb = launch(&spec).unwrap();
    assert_eq!(
        sb.wait(Duration::from_secs(5)),
        Exit::Code(0),
        "{}",
        t.log()
    );
    let log = t.log();
    assert!(log.starts_with("v\n") && log.contains("rw=no"), "{log}");
    assert!(!vol.join("g").exists());
}

/// A sandbox with a host id range of its own: the template layer (owned on disk by the shared
/// range SHIFT..) and an `idmapped` bind look unchanged inside, the sandbox's processes and the
/// files it creates in its writable layer are its own range on the host, and what it writes to
/// the idmapped bind stays in the shared range on disk (so sandboxes of other ranges share it).
#[test]
fn an_own_id_range_keeps_the_template_and_shared_binds_unchanged() {
    lizard_test_support::needs_root!();
    let own = SHIFT + 65536 * 7;
    let t = TestDir::new();
    lchown(t.path().join("run"), Some(own + USER), Some(own + USER)).unwrap();
    let vol = t.path().join("volume");
    fs::create_dir(&vol).unwrap();
    fs::write(vol.join("f"), "shared\n").unwrap();
    for p in [vol.clone(), vol.join("f")] {
        lchown(&p, Some(SHIFT + USER), Some(SHIFT + USER)).unwrap();
    }
    let ro = t.path().join("readonly");
    fs::create_dir(&ro).unwrap();
    lchown(&ro, Some(SHIFT + USER), Some(SHIFT + USER)).unwrap();
    let script = r#"
echo "root=$(stat -c %u:%g /)"
echo "passwd=$(stat -c %u:%g /etc/passwd)"
echo "home=$(stat -c %u:%g /home/user)"
echo "id=$(id -u):$(id -g)"
echo "vol=$(stat -c %u:%g /data/vol/f)"
echo "read=$(cat /data/vol/f)"
echo mine > /data/vol/g && echo "vol_written=$(stat -c %u /data/vol/g)"
touch /home/user/new && echo "layer_written=$(stat -c %u /home/user/new)"
if touch /data/ro/x 2>/dev/null; then echo ro=writable; else echo ro=refused; fi
echo done=yes
exec sleep 60
"#;
    let mut spec = t.spec(&unique_id("ownrange"), script);
    spec.id_map.outside = own;
    spec.layer_id_base = Some(SHIFT);
    spec.binds.push(Bind {
        source: vol.clone(),
        target: "/data/vol".into(),
        no_symlinks: true,
        idmapped: true,
        ..Default::default()
    });
    spec.binds.push(Bind {
        source: ro.clone(),
        target: "/data/ro".into(),
        readonly: true,
        no_symlinks: true,
        idmapped: true,
    });
    let sb = launch(&spec).unwrap();
    poll(Duration::from_secs(20), "the probe's output", || {
        t.log().contains("done=yes").then_some(())
    });
    let log = t.log();
    let f = facts(&log);
    let fact = |k: &str| f.get(k).map(String::as_str).unwrap_or("(missing)");
    // Inside: the template as always.
    assert_eq!(fact("root"), "0:0", "{log}");
    assert_eq!(fact("passwd"), "0:0", "{log}");
    assert_eq!(fact("home"), "1000:1000", "{log}");
    assert_eq!(fact("id"), "1000:1000", "{log}");
    assert_eq!(fact("vol"), "1000:1000", "{log}");
    assert_eq!(fact("read"), "shared", "{log}");
    assert_eq!(fact("vol_written"), "1000", "{log}");
    assert_eq!(fact("layer_written"), "1000", "{log}");
    assert_eq!(fact("ro"), "refused", "{log}");
    // On the host: the process is the sandbox's own range, not the shared one.
    let status = fs::read_to_string(format!("/proc/{}/status", sb.pid())).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let want = (own + USER).to_string();
    assert!(uids.split_whitespace().skip(1).all(|u| u == want), "{uids}");
    // The writable layer's new file is the own range; the shared bind's stays in SHIFT.. on disk.
    let layer = fs::metadata(t.upper().join("home/user/new")).unwrap();
    assert_eq!((layer.uid(), layer.gid()), (own + USER, own + USER));
    let shared = fs::metadata(vol.join("g")).unwrap();
    assert_eq!((shared.uid(), shared.gid()), (SHIFT + USER, SHIFT + USER));
    let root = fs::metadata(t.upper()).unwrap();
    assert_eq!((root.uid(), root.gid()), (own, own), "the layer's root");
    assert!(!ro.join("x").exists());
}

/// The v2 code paths (freeze via cgroup.freeze, kill via cgroup.kill, cpu.stat) on this machine's
/// controller-less cgroup2 mount, with a plain host process (no limits: no controllers there).
#[test]
fn cgroup_v2_core_freeze_and_kill() {
    lizard_test_support::needs_root!();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let Some(mount) = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split(' ').nth(4).unwrap().to_string())
    }) else {
        eprintln!("no cgroup2 mount; skipped");
        return;
    };
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .trim_start_matches('/')
        .to_string();
    let root = Path::new(&mount).join(own);
    if !root.join("cgroup.freeze").exists() && !root.join("cgroup.procs").exists() {
        eprintln!("cgroup2 without freeze; skipped");
        return;
    }
    let cg = Hierarchy::v2_at(&root)
        .create(&unique_id("v2"), &Default::default())
        .unwrap();
    assert!(cg.is_v2());
    let mut child = std::process::Command::new("sleep")
        .arg("100")
        .spawn()
        .unwrap();
    cg.add_pid(child.id() as i32).unwrap();
    assert_eq!(cg.pids().unwrap(), vec![child.id() as i32]);
    cg.freeze().unwrap();
    assert!(cg.is_frozen().unwrap());
    cg.thaw().unwrap();
    assert!(!cg.is_frozen().unwrap());
    let _ = cg.cpu_usage_ns();
    cg.kill_all().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    cg.remove().unwrap();
    assert!(!matches!(cg.paths(), CgroupPaths::V2 { path } if path.exists()));
    // This test's parent directory at the top of the cgroup2 mount (empty now, unless another run
    // is using it).
    let _ = fs::remove_dir(root.join("lizard"));
}

/// `context_cgroups`: the sandbox sees its delegated `ctx/` directories at
/// `/sys/fs/cgroup/{memory,cpu,cpuacct}` with the sandbox's limits as their ceiling, can make a
/// child there, limit it and move its own process in (a bomb in the child is OOM-killed inside
/// it), but cannot write `ctx/`'s limits. On the host `ctx/` belongs to the sandbox user and goes
/// with the sandbox's cgroup.
#[test]
fn delegated_context_cgroups() {
    lizard_test_support::needs_root!();
    let t = TestDir::new();
    let mut spec = t.spec(
        &unique_id("deleg"),
        r#"
        C=/sys/fs/cgroup
        echo "ctrls=$(ls $C | tr '\n' ' ')"
        echo "ceiling=$(cat $C/memory/memory.limit_in_bytes)"
        echo "quota=$(cat $C/cpu/cpu.cfs_quota_us)"
        echo 999999999999 > $C/memory/memory.limit_in_bytes 2>/dev/null || echo own_limit=denied
        mkdir $C/memory/c1 && echo 33554432 > $C/memory/c1/memory.limit_in_bytes && echo made=yes
        ( echo $BASHPID > $C/memory/c1/cgroup.procs && exec perl -e '$x = "a" x (128 * 1024 * 1024); print "survived\n"' )
        echo "bomb_status=$?"
        while read -r k v; do [ "$k" = oom_kill ] && echo "c1_oom=$v"; done < $C/memory/c1/memory.oom_control
        sleep 100 & echo started=yes; wait
        "#,
    );
    spec.limits.memory_bytes = Some(256 << 20);
    spec.limits.cpu_millicores = Some(500);
    spec.context_cgroups = true;
    let sb = launch(&spec).unwrap();
    poll(Duration::from_secs(20), "the script to finish", || {
        t.log().contains("started=yes").then_some(())
    });
    let f = facts(&t.log());
    assert_eq!(f["ctrls"], "cpu cpuacct memory", "{}", t.log());
    assert_eq!(f["ceiling"], (256u64 << 20).to_string());
    assert_eq!(f["quota"], "50000");
    assert_eq!(f["own_limit"], "denied");
    assert_eq!(f["made"], "yes");
    assert_eq!(f["bomb_status"], "137", "{}", t.log());
    assert_eq!(f["c1_oom"], "1", "{}", t.log());
    assert!(!t.log().lines().any(|l| l == "survived"));
    let CgroupPaths::V1(V1Dirs { memory, .. }) = sb.cgroup().paths().clone() else {
        return; // v2: nothing is delegated (see `delegation`)
    };
    let ctx = memory.join("ctx");
    let owner = fs::metadata(&ctx).unwrap();
    assert_eq!((owner.uid(), owner.gid()), (SHIFT + USER, SHIFT + USER));
    let limit = fs::metadata(ctx.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.uid(), 0, "ctx/'s own limits stay root's");
    drop(sb);
    assert!(!memory.exists(), "{} left behind", memory.display());
}

/// PID 1 as the sandbox's root with `keep_caps`: uid 0 inside, exactly the kept capabilities in
/// its bounding, effective and permitted sets (and after an exec as root), no ambient ones,
/// `no_new_privs`; a process that changes to another uid has none left and cannot signal PID 1
/// (EPERM), nor make, enter or write anything in the delegated cgroups, which are root's; the
/// capabilities give nothing over the sandbox's namespaces (no mount, no new user namespace).
#[test]
fn pid1_is_the_sandboxs_root_with_only_the_kept_capabilities() {
    lizard_test_support::needs_root!();
    use lizard_jail::sandbox::{Capability, UserSpec};
    let t = TestDir::new();
    let mut spec = t.spec(
        &unique_id("rootcaps"),
        r#"
        C=/sys/fs/cgroup
        while read -r k v; do
          case $k in Uid:|CapEff:|CapPrm:|CapInh:|CapBnd:|CapAmb:|NoNewPrivs:) echo "pid1_${k%:}=$v";; esac
        done < /proc/self/status
        echo "child_eff=$(bash -c 'grep CapEff /proc/self/status | tr -d "[:space:]"')"
        mkdir $C/memory/c1 && echo "root_mkdir=yes"
        echo "unshare_user=$(unshare -U true 2>&1 | head -c 60)"
        echo "mount_syscall=$(perl -e 'syscall(165, 0, 0, 0, 0, 0) == -1 and print "$!"')"
        perl -e '

          $( = $) = "1000 1000"; $< = $> = 1000;
          open(my $s, "<", "/proc/self/status"); while (<$s>) { print "user_$1=$2\n" if /^(CapEff|CapPrm|Uid):\s+(.*)$/ }
          print "kill1=", (kill("TERM", 1) ? "sent" : "$!"), "\n";
          print "mkdir=", (mkdir("/sys/fs/cgroup/memory/x") ? "made" : "$!"), "\n";
          print "limit=", (open(my $l, ">", "/sys/fs/cgroup/memory/c1/memory.limit_in_bytes") ? "opened" : "$!"), "\n";
          print "procs=", (open(my $p, ">", "/sys/fs/cgroup/memory/c1/cgroup.procs") ? "opened" : "$!"), "\n";
        '
        sleep 100 & echo started=yes; wait
        "#,
    );
    spec.user = UserSpec { uid: 0, gid: 0 };
    spec.keep_caps = {
        use Capability::*;
        vec![Setuid, Setgid, Kill, Chown, Fowner, DacOverride]
    };
    spec.context_cgroups = true;
    let sb = launch(&spec).unwrap();
    poll(Duration::from_secs(20), "the script to finish", || {
        t.log().contains("started=yes").then_some(())
    });
    let f = facts(&t.log());
    let mask = format!("{:016x}", Capability::mask(&spec.keep_caps));
    assert_eq!(mask, "00000000000000eb");
    assert_eq!(
        f["pid1_Uid"].split_whitespace().collect::<Vec<_>>(),
        ["0"; 4],
        "{}",
        t.log()
    );
    for k in ["pid1_CapEff", "pid1_CapPrm", "pid1_CapBnd"] {
        assert_eq!(f[k], mask, "{k}: {}", t.log());
    }
    assert_eq!(f["pid1_CapInh"], "0000000000000000");
    assert_eq!(f["pid1_CapAmb"], "0000000000000000");
    assert_eq!(f["pid1_NoNewPrivs"], "1");
    assert_eq!(f["child_eff"], format!("CapEff:{mask}"), "{}", t.log());
    assert_eq!(f["root_mkdir"], "yes", "{}", t.log());
    assert!(!f["unshare_user"].is_empty(), "{}", t.log());
    assert_eq!(f["mount_syscall"], "Operation not permitted");
    assert_eq!(
        f["user_Uid"].split_whitespace().collect::<Vec<_>>(),
        ["1000"; 4],
        "{}",
        t.log()
    );
    assert_eq!(f["user_CapEff"], "0000000000000000");
    assert_eq!(f["user_CapPrm"], "0000000000000000");
    assert_eq!(f["kill1"], "Operation not permitted", "{}", t.log());
    assert_eq!(f["mkdir"], "Permission denied", "{}", t.log());
    assert_eq!(f["limit"], "Permission denied", "{}", t.log());
    assert_eq!(f["procs"], "Permission denied", "{}", t.log());
    let CgroupPaths::V1(V1Dirs { memory, .. }) = sb.cgroup().paths().clone() else {
        return;
    };
    let owner = fs::metadata(memory.join("ctx")).unwrap();
    assert_eq!(
        (owner.uid(), owner.gid()),
        (SHIFT, SHIFT),
        "ctx/ is the sandbox root's"
    );
    drop(sb);
    assert!(!memory.exists(), "{} left behind", memory.display());
}

/// A cgroup tree nested deeper than `PATH_MAX` (made with `mkdirat`, as no path can name its
/// bottom) is removed with its cgroup, bottom-up, by descriptor.
#[test]
fn a_cgroup_tree_deeper_than_path_max_is_removed() {
    lizard_test_support::needs_root!();
    use lizard_jail::cgroup::{Cgroup, CgroupLimits};
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let cg = Cgroup::create(&unique_id("deep"), &CgroupLimits::default()).unwrap();
    let top = match cg.paths().clone() {
        CgroupPaths::V1(V1Dirs { memory, .. }) => memory,
        CgroupPaths::V2 { path } => path,
    };
    let name = "d".repeat(200);
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut fd = nix::fcntl::open(&top, flags, Mode::empty()).unwrap();
    let levels = 30; // 30 × 201 bytes: past PATH_MAX (4096)
    for _ in 0..levels {
        nix::sys::stat::mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(&fd, name.as_str(), flags, Mode::empty()).unwrap();
    }
    // A few siblings on the way, so the walk goes up and down again.
    nix::sys::stat::mkdirat(&fd, "leaf", Mode::from_bits_truncate(0o755)).unwrap();
    drop(fd);
    let deep = top.join(
        std::iter::repeat_n(name.as_str(), levels)
            .collect::<Vec<_>>()
            .join("/"),
    );
    assert!(deep.as_os_str().len() > 4096);
    cg.remove().unwrap();
    assert!(cg.remaining_dirs().is_empty(), "{:?}", cg.remaining_dirs());
    assert!(!top.exists());
}

/// A template that is a layer over its base: two lower layers, top first, both through the same
/// id map. The top layer adds a file, hides one of the base's (an overlay whiteout, char 0:0) and
/// replaces a directory (the `trusted.overlay.opaque` xattr); what it does not touch is the base's.
#[test]
fn several_lower_layers_stack_top_first_through_one_id_map() {
    lizard_test_support::needs_root!();
    let own = SHIFT + 65536 * 9;
    let t = TestDir::new();
    lchown(t.path().join("run"), Some(own + USER), Some(own + USER)).unwrap();
    let base = t.template();
    fs::write(base.join("etc/base-only"), "base\n").unwrap();
    fs::write(base.join("etc/hidden"), "hidden\n").unwrap();
    fs::create_dir_all(base.join("opt/replaced")).unwrap();
    fs::write(base.join("opt/replaced/old"), "old\n").unwrap();
    let layer = t.path().join("layer");
    fs::create_dir_all(layer.join("etc")).unwrap();
    fs::create_dir_all(layer.join("opt/replaced")).unwrap();
    fs::write(layer.join("etc/layer-file"), "layer\n").unwrap();
    fs::write(layer.join("opt/replaced/new"), "new\n").unwrap();
    nix::sys::stat::mknod(
        &layer.join("etc/hidden"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::empty(),
        0,
    )
    .unwrap();
    xattr_set(&layer.join("opt/replaced"), "trusted.overlay.opaque", b"y");
    for p in [
        "",
        "etc",
        "opt",
        "opt/replaced",
        "etc/layer-file",
        "opt/replaced/new",
    ] {
        lchown(layer.join(p), Some(SHIFT), Some(SHIFT)).unwrap();
    }
    lchown(layer.join("etc/hidden"), Some(SHIFT), Some(SHIFT)).unwrap();
    let script = r#"
echo "base=$(cat /etc/base-only)"
echo "layer=$(cat /etc/layer-file) $(stat -c %u:%g /etc/layer-file)"
if [ -e /etc/hidden ]; then echo hidden=visible; else echo hidden=gone; fi
echo "replaced=$(ls /opt/replaced | tr '\n' ' ')"
echo "root=$(stat -c %u:%g /)"
echo done=yes
"#;
    let mut spec = t.spec(&unique_id("layers"), script);
    spec.rootfs.lower = vec![layer.clone(), base.clone()];
    spec.id_map.outside = own;
    spec.layer_id_base = Some(SHIFT);
    let mut sb = launch(&spec).unwrap();
    poll(Duration::from_secs(20), "the probe's output", || {
        t.log().contains("done=yes").then_some(())
    });
    sb.wait(Duration::from_secs(20));
    let log = t.log();
    let f = facts(&log);
    let fact = |k: &str| f.get(k).map(String::as_str).unwrap_or("(missing)");
    assert_eq!(fact("base"), "base", "{log}");
    assert_eq!(fact("layer"), "layer 0:0", "{log}");
    assert_eq!(fact("hidden"), "gone", "{log}");
    assert_eq!(fact("replaced"), "new", "{log}");
    assert_eq!(fact("root"), "0:0", "{log}");
    // The layers are untouched.
    assert!(base.join("opt/replaced/old").exists());
    assert!(!t.upper().join("etc/layer-file").exists());
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("import os, sys; os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())")
        .arg(path)
        .arg(name)
        .arg(String::from_utf8_lossy(value).as_ref())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "setxattr {name} on {}", path.display());
}

/// `userns_parent`: the sandbox's user namespace is made inside a namespace root owns
/// (`host_zygote::joinable_userns`) and belongs there to a host uid, so that a process of that
/// uid *inside the parent* holding no capability at all joins all the sandbox's namespaces
/// through its PID 1's pidfd (the shared zygote's way in, `docs/design/shared-zygote.md`); the
/// same uid outside the parent cannot, and root keeps every capability over the sandbox (CRIU's
/// `prlimit` works without `CAP_SYS_RESOURCE`). The sandbox itself runs as without a parent.
#[test]
fn only_the_owner_inside_the_parent_joins_the_sandbox_without_capabilities() {
    lizard_test_support::needs_root!();
    let owner = SHIFT - 10_000;
    let parent =
        lizard_jail::host_zygote::joinable_userns(owner, owner, &[(SHIFT, 65536)]).unwrap();
    let parent_path = format!("/proc/{}/fd/{}", std::process::id(), parent.as_raw_fd());
    let t = TestDir::new();
    let id = unique_id("owner");
    let mut spec = t.spec(&id, "echo uid=$(id -u); sleep 100 & echo started=yes; wait");
    spec.userns_parent = Some(lizard_jail::sandbox::UsernsParent {
        path: parent_path.clone().into(),
        uid: owner,
        gid: owner,
    });
    let sb = launch(&spec).unwrap();
    poll(Duration::from_secs(20), "the script to start", || {
        t.log().contains("started=yes").then_some(())
    });
    assert_eq!(facts(&t.log())["uid"], USER.to_string(), "{}", t.log());
    let r = lizard_test_support::json_within(
        std::process::Command::new("python3")
            .arg("-c")
            .arg(JOIN_PROBE)
            .arg(sb.pid().to_string())
            .arg(&parent_path)
            .arg(format!("{owner}:in"))
            .arg(format!("{owner}:out")),
        Duration::from_secs(30),
    );
    assert_eq!(r["owner"], owner, "{r}");
    assert_eq!(r["parent_is_given"], true, "{r}");
    assert_eq!(r["root_prlimit"], "ok", "{r}");
    assert_eq!(
        r["join"][format!("{owner}:in")],
        format!("0000000000000000 joined {id}"),
        "{r}"
    );
    assert_eq!(
        r["join"][format!("{owner}:out")],
        "0000000000000000 Operation not permitted",
        "{r}"
    );
}

/// A parent that is not a user namespace root owns, or that does not map the sandbox's ids, is a
/// clear error of the launch, and nothing is left running.
#[test]
fn a_parent_user_namespace_that_cannot_hold_the_sandbox_is_refused() {
    lizard_test_support::needs_root!();
    let owner = SHIFT - 10_000;
    let t = TestDir::new();
    let mut spec = t.spec(&unique_id("bad-parent"), "sleep 100");
    let parent = |path: String| lizard_jail::sandbox::UsernsParent {
        path: path.into(),
        uid: owner,
        gid: owner,
    };
    spec.userns_parent = Some(parent("/proc/self/ns/net".into()));
    let e = lizard_jail::error_chain(&launch(&spec).err().expect("a refused launch"));
    assert!(e.contains("not a user namespace"), "{e}");

    let elsewhere =
        lizard_jail::host_zygote::joinable_userns(owner, owner, &[(SHIFT + 1_000_000, 10)])
            .unwrap();
    let path = format!("/proc/{}/fd/{}", std::process::id(), elsewhere.as_raw_fd());
    spec.userns_parent = Some(parent(path));
    let e = lizard_jail::error_chain(&launch(&spec).err().expect("a refused launch"));
    assert!(e.contains("writing the sandbox's uid_map"), "{e}");
    assert!(!t.log().contains("started"), "{}", t.log());
}

/// argv: PID 1's host pid, the parent user namespace's path, then `uid:in` or `uid:out`. Prints
/// the user namespace's owner (`NS_GET_OWNER_UID`), whether its parent (`NS_GET_PARENT`) is the
/// given one, whether host root `prlimit`s PID 1, and for each entry what a process of that uid
/// with no capability (its `CapEff` first), inside the parent or not, got from
/// `setns(pidfd, USER|MNT|PID|UTS|IPC|NET)`: the host name it then sees, or the error.
const JOIN_PROBE: &str = r#"
import ctypes, fcntl, json, os, resource, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, parent, entries = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
ns = os.open(f'/proc/{pid}/ns/user', os.O_RDONLY)
out = {'owner': struct.unpack('I', fcntl.ioctl(ns, 0xb704, bytes(4)))[0], 'join': {}}
up = fcntl.ioctl(ns, 0xb702)
out['parent_is_given'] = os.fstat(up).st_ino == os.stat(parent).st_ino
try:
    resource.prlimit(pid, resource.RLIMIT_NOFILE)
    out['root_prlimit'] = 'ok'
except OSError as e:
    out['root_prlimit'] = str(e)
for entry in entries:
    uid, where = entry.split(':')
    uid = int(uid)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            if where == 'in' and libc.setns(os.open(parent, os.O_RDONLY), 0x10000000):
                raise OSError(ctypes.get_errno(), 'setns parent')
            os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
            # Entering a namespace root does not map leaves its capabilities: drop them all.
            hdr = (ctypes.c_uint32 * 2)(0x20080522, 0); data = (ctypes.c_uint32 * 6)()
            if libc.syscall(126, hdr, data):
                raise OSError(ctypes.get_errno(), 'capset')
            caps = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff'))
            pidfd = libc.syscall(434, pid, 0)
            if libc.setns(pidfd, 0x10000000 | 0x20000 | 0x20000000 | 0x4000000 | 0x8000000 | 0x40000000):
                msg = caps + ' ' + os.strerror(ctypes.get_errno())
            else:
                msg = caps + ' joined ' + socket.gethostname()
        except BaseException as e:
            msg = repr(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    out['join'][entry] = os.read(r, 4096).decode()
    os.waitpid(child, 0)
print(json.dumps(out))
"#;

/// `cgroup::favor_dynamic_moves`: where the kernel has `favordynmods` and a cgroup2 hierarchy is
/// mounted (CI's machines), the hierarchy ends up with it and keeps every option it had; a second
/// call finds it on. (A host-wide setting: once on, it stays on.)
#[test]
fn cgroup_moves_are_made_cheap_host_wide() {
    lizard_test_support::needs_root!();
    use lizard_jail::cgroup::{favor_dynamic_moves, FavorDynmods};
    let cgroup2_options = || {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .find_map(|l| {
                let (_, right) = l.split_once(" - ")?;
                let mut r = right.split(' ');
                (r.next()? == "cgroup2").then(|| r.nth(1).unwrap_or("").to_string())
            })
    };
    let features = fs::read_to_string("/sys/kernel/cgroup/features").unwrap_or_default();
    let before = cgroup2_options();
    let first = favor_dynamic_moves().unwrap();
    let Some(before) = before.filter(|_| features.lines().any(|l| l == "favordynmods")) else {
        assert!(matches!(first, FavorDynmods::Unavailable(_)), "{first:?}");
        return;
    };
    assert!(!matches!(first, FavorDynmods::Unavailable(_)), "{first:?}");
    assert!(
        matches!(favor_dynamic_moves().unwrap(), FavorDynmods::AlreadyOn(_)),
        "a second call"
    );
    let after = cgroup2_options().unwrap();
    let after: Vec<&str> = after.split(',').collect();
    assert!(after.contains(&"favordynmods"), "{after:?}");
    for kept in before.split(',') {
        assert!(after.contains(&kept), "{kept} lost: {before} → {after:?}");
    }
}
