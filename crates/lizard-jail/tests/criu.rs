//! `checkpoint::Criu` against the real CRIU of `scripts/criu.sh` (`target/criu/criu`): dump and
//! restore of a process tree laid out like a sandbox whose namespaces all belong to its own user
//! namespace (pid, mount, net, ipc, uts), on an overlay root with a tmpfs `/tmp`, a tmpfs `/dev`
//! with binds of host devices and a `devpts` newinstance, and a fresh `/proc` with `/dev/null`
//! bound over `/proc/keys` and a file of a detached tmpfs over `/proc/loadavg` (as the launcher
//! masks them; CRIU cannot dump the latter — "doesn't have a proper root mount" — so it is an
//! external mount, given again from a host file at restore). A Bash loop counts in a shell variable and writes it to
//! `/tmp/n`: after the restore it goes on from where it was (memory and tmpfs restored), not from 1.
//! Skipped (with a message) when CRIU is not installed; `scripts/test.sh` installs it.
//!
//! The first two trees are made with `unshare`; `a_lizard_sandbox_is_dumped_and_restored` dumps a
//! tree made by Lizard's own launcher and restores it through the launcher (`SandboxSpec::restore`).

use common::{criu, gone};
use lizard_jail::checkpoint::{DumpSpec, ImagesDir, RestoreSpec};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEVICES: [&str; 3] = ["null", "zero", "urandom"];

/// A tree in its own user, pid, mount, net, ipc and uts namespaces (the user namespace first, so it
/// owns the others), PID 1 a Bash loop counting into `/tmp/n`.
struct Tree {
    base: tempfile::TempDir,
    pid: i32,
}

fn lower() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/criu/root")
}

impl Tree {
    fn start() -> Tree {
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir(base.path().join(d)).unwrap();
        }
        let binds: String = DEVICES
            .iter()
            .map(|n| format!("touch dev/{n}; mount --bind /dev/{n} dev/{n}\n"))
            .collect();
        let script = format!(
            "set -e\n\
             mount --make-rprivate /\n\
             mount -t overlay overlay -o lowerdir={lower},upperdir={b}/upper,workdir={b}/work {b}/merged\n\
             cd {b}/merged\n\
             mkdir -p {b}/mask\n\
             mount -t tmpfs -o size=64k none {b}/mask\n\
             echo '0.00 0.00 0.00 1/1 1' > {b}/mask/loadavg\n\
             mount -t proc proc proc\n\
             mount --bind {b}/mask/loadavg proc/loadavg\n\
             mount --bind /dev/null proc/keys\n\
             umount -l {b}/mask\n\
             mount -t tmpfs -o mode=755,size=65536 tmpfs dev\n\
             {binds}\
             mkdir -p dev/pts\n\
             mount -t devpts -o newinstance,ptmxmode=0666 devpts dev/pts\n\
             mount -t tmpfs tmpfs tmp\n\
             mkdir -p .old; pivot_root . .old; umount -l /.old; rmdir /.old\n\
             cd /\n\
             exec </dev/null >/dev/null 2>&1\n\
             exec /usr/bin/setsid /bin/bash -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done'\n",
            lower = lower().display(),
            b = base.path().display(),
        );
        let mut child = Command::new("unshare")
            .args([
                "--user",
                "--map-root-user",
                "--pid",
                "--mount",
                "--net",
                "--ipc",
                "--uts",
                "--fork",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("unshare");
        // PID 1 of the tree: the only child of `unshare`.
        let unshare_pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(20);
        let pid = loop {
            let children =
                std::fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children"))
                    .unwrap_or_default();
            if let Some(p) = children.split_whitespace().next() {
                let p: i32 = p.parse().unwrap();
                if count(p).is_some() {
                    break p;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the tree did not start: unshare exited with {status}");
            }
            assert!(Instant::now() < deadline, "the tree did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        // `unshare` waits for the tree; reap it in the background when the tree goes.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Tree { base, pid }
    }

    fn merged(&self) -> PathBuf {
        self.base.path().join("merged")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = nix::mount::umount2(&self.merged(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The tree's counter, read through its root from the host.
fn count(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/root/tmp/n"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn wait_count_above(pid: i32, above: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(n) = count(pid) {
            if n > above {
                return n;
            }
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid}: counter never passed {above} (now {:?})",
            count(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dump_spec() -> DumpSpec {
    let mut external_mounts: Vec<(PathBuf, String)> = DEVICES
        .iter()
        .map(|n| (PathBuf::from(format!("/dev/{n}")), n.to_string()))
        .collect();
    external_mounts.push(("/proc/keys".into(), "keys".into()));
    // A file of a detached tmpfs: CRIU cannot dump it ("doesn't have a proper root mount"), so it
    // is external, given again from a host file at restore.
    external_mounts.push(("/proc/loadavg".into(), "loadavg".into()));
    DumpSpec {
        external_mounts,
        external_files: Vec::new(),
        external_unix: Vec::new(),
        manage_cgroups: false,
        empty_netns: false,
    }
}

fn images_in(base: &Path) -> ImagesDir {
    ImagesDir::create(&base.join("images")).unwrap()
}

#[test]
fn a_dumped_tree_is_restored_and_goes_on_counting() {
    lizard_test_support::needs_root!();
    let Some(criu) = criu() else { return };
    let check = criu.check(Duration::from_secs(30));
    assert!(check.ok, "{check:?}");
    let tree = Tree::start();
    let before = wait_count_above(tree.pid, 3);
    let images = images_in(tree.base.path());
    let stats = criu
        .dump(
            tree.pid,
            &images,
            &dump_spec(),
            false,
            None,
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("dump: {}", lizard_jail::error_chain(&e)));
    assert!(stats.image_bytes > 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(tree.pid) {
        assert!(Instant::now() < deadline, "the dumped tree still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dumped_at = before.max(count(tree.pid).unwrap_or(0));
    // Marked mergeable as a clone's images are (`lizard serve --share-clone-memory`): CRIU's
    // restorer madvises every marked mapping, and one it could not would fail the restore.
    let marked = lizard_jail::checkpoint::mark_mergeable(&tree.base.path().join("images"))
        .unwrap_or_else(|e| panic!("marking: {}", lizard_jail::error_chain(&e)));
    assert!(marked.images >= 1 && marked.mappings >= 1, "{marked:?}");

    // The root file system, mounted host-side as the launcher would.
    let b = tree.base.path();
    let status = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(format!(
            "lowerdir={},upperdir={}/upper,workdir={}/work",
            lower().display(),
            b.display(),
            b.display()
        ))
        .arg(tree.merged())
        .status()
        .unwrap();
    assert!(status.success());
    let spec = RestoreSpec {
        root: tree.merged(),
        external_mounts: DEVICES
            .iter()
            .map(|n| (n.to_string(), PathBuf::from(format!("/dev/{n}"))))
            .chain([
                ("keys".to_string(), PathBuf::from("/dev/null")),
                ("loadavg".to_string(), b.join("loadavg")),
            ])
            .collect(),
        inherit_fds: Vec::new(),
        cgroup: None,
        manage_cgroups: false,
        netns_setup: None,
    };
    std::fs::write(b.join("loadavg"), "0.00 0.00 0.00 1/1 1\n").unwrap();
    let pid = criu
        .restore(&images, &spec, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("restore: {}", lizard_jail::error_chain(&e)));
    let restored = Tree {
        base: tempfile::tempdir().unwrap(),
        pid,
    };
    // Right after the restore the counter is where the dump left it (tmpfs restored), then it
    // goes on from there (the shell's variable restored), never from 1 again.
    let first = count(pid).expect("the restored tree has its /tmp/n");
    assert!(
        first >= dumped_at.saturating_sub(1),
        "{first} < {dumped_at}"
    );
    let later = wait_count_above(pid, first + 3);
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/root/proc/loadavg")).unwrap(),
        "0.00 0.00 0.00 1/1 1\n"
    );
    assert!(later > dumped_at);
    // The restored processes' private memory is mergeable (KSM's `mg` flag), the rest is not.
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let flags: Vec<&str> = smaps
        .lines()
        .filter_map(|l| l.strip_prefix("VmFlags:"))
        .collect();
    assert!(
        flags
            .iter()
            .any(|f| f.split_whitespace().any(|x| x == "mg")),
        "no mergeable mapping after the restore: {flags:?}"
    );
    assert!(
        flags
            .iter()
            .any(|f| !f.split_whitespace().any(|x| x == "mg")),
        "every mapping mergeable (special ones too): {flags:?}"
    );
    drop(restored);
    drop(tree);
}

#[test]
fn a_dump_that_leaves_the_tree_running_does_not_stop_it() {
    lizard_test_support::needs_root!();
    let Some(criu) = criu() else { return };
    let tree = Tree::start();
    let before = wait_count_above(tree.pid, 3);
    let images = images_in(tree.base.path());
    criu.dump(
        tree.pid,
        &images,
        &dump_spec(),
        true,
        None,
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("dump: {}", lizard_jail::error_chain(&e)));
    assert!(!gone(tree.pid));
    wait_count_above(tree.pid, before + 3);
    images.remove().unwrap();
}

#[test]
fn a_restore_without_images_fails_with_criu_s_reason() {
    lizard_test_support::needs_root!();
    let Some(criu) = criu() else { return };
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let images = images_in(base.path());
    let spec = RestoreSpec {
        root: base.path().to_path_buf(),
        external_mounts: Vec::new(),
        inherit_fds: Vec::new(),
        cgroup: None,
        manage_cgroups: false,
        netns_setup: None,
    };
    let e = criu
        .restore(&images, &spec, Duration::from_secs(30))
        .unwrap_err();
    let text = lizard_jail::error_chain(&e);
    assert!(text.contains("restore failed"), "{text}");
}

mod common;

/// A sandbox made by Lizard's own launcher (user namespace first; overlay root and binds made by
/// host root in a staging mount namespace; `/proc` masks, `/dev` binds of host nodes, devpts,
/// `/tmp`; the log file and a listening socket handed over as descriptors) is dumped and restored:
/// its shell variable goes on counting from where it was, the `/proc` masks are back, the log
/// descriptor still writes to the host's log file. The host side a restore needs
/// (`sandbox::mount_sources`, `DumpSpec::of_sandbox`) is what the server will use.
#[test]
fn a_lizard_sandbox_is_dumped_and_restored() {
    lizard_test_support::needs_root!();
    let Some(criu) = criu() else { return };
    let t = common::TestDir::new();
    let sock_dir = t.path().join("sock");
    std::fs::create_dir(&sock_dir).unwrap();
    std::fs::set_permissions(&sock_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = sock_dir.join("agent.sock");
    let mut spec = t.spec(
        &common::unique_id("criu"),
        "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; echo tick-$i; sleep 0.05; done",
    );
    spec.inherit_fds = vec![lizard_jail::sandbox::InheritFd::UnixListener { path: sock.clone() }];
    let running = common::launch(&spec).unwrap();
    let pid = running.pid();
    let before = wait_count_above(pid, 3);

    let listener_ino: u64 = std::fs::read_link(format!("/proc/{pid}/fd/3"))
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("socket:[")
        .trim_end_matches(']')
        .parse()
        .unwrap();
    let mut dump = DumpSpec::of_sandbox(pid).unwrap();
    dump.external_unix.push(listener_ino);
    assert!(!dump.external_files.is_empty(), "the log file is external");
    let images = ImagesDir::create(&t.path().join("images")).unwrap();
    // With a /run of its own (a tmpfs here), where CRIU keeps what it probed of the kernel.
    let run_dir = t.path().join("criu-run");
    lizard_jail::checkpoint::mount_run_dir(&run_dir).unwrap();
    let criu = criu.with_run_dir(Some(run_dir.clone()));
    criu.dump(pid, &images, &dump, false, None, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("dump: {}", lizard_jail::error_chain(&e)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "the dumped tree still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dumped_at = before;

    // The launcher's restore path: the same spec, with the checkpoint to restore.
    drop(running);
    assert!(run_dir.join("criu.kdat").is_file(), "no kernel-facts cache");
    spec.restore = Some(common::restore_from(&images, &run_dir, dump));
    let started = Instant::now();
    let again = common::launch(&spec)
        .unwrap_or_else(|e| panic!("restore: {}", lizard_jail::error_chain(&e)));
    eprintln!("restored in {} ms", started.elapsed().as_millis());
    let restored = again.pid();
    let _ = sock;
    let first = count(restored).expect("the restored tree has its /tmp/n");
    assert!(first + 1 >= dumped_at, "{first} < {dumped_at}");
    let later = wait_count_above(restored, first + 3);
    assert!(later > before);
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{restored}/root/proc/loadavg")).unwrap(),
        "0.00 0.00 0.00 1/1 1\n"
    );
    // The restored tree's stdout is still the host's log file.
    let marker = format!("tick-{later}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !t.log().contains(&marker) {
        assert!(Instant::now() < deadline, "the log file got no {marker}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // It is in the sandbox's cgroup again.
    assert!(again.cgroup().pids().unwrap().contains(&restored));
    drop(again);
    lizard_jail::checkpoint::unmount_run_dir(&run_dir);
}
