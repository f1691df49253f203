//! The launcher's child: everything between `clone()` and `execve()` of the sandbox's program, in
//! order. It starts in fresh user, mount, pid, net, ipc and uts namespaces (the user namespace
//! owns the others), its mount table a locked copy of the launcher's staging one (overlay root and
//! binds, `rootfs::build_host`), and ends as an unprivileged user with no capabilities (or only
//! the kept ones), `no_new_privs` and the seccomp filter.
//!
//! 1. `setsid`, default signal dispositions, stdio (`/dev/null`, log, log), every other fd
//!    close-on-exec; wait until the parent has written our uid/gid maps (and sent the listening
//!    sockets).
//! 2. As root of the new user namespace: every port bindable (`ip_unprivileged_port_start` 0),
//!    `/proc`, `/dev`, `/tmp` and `pivot_root` (`rootfs::build_inside`), host name, loopback up;
//!    wait until the parent has moved us into the cgroup (meanwhile); new cgroup namespace.
//! 3. No supplementary groups, securebits locked, bounding and ambient sets emptied, the user's
//!    gid/uid, capability sets emptied (or, for the sandbox's root with `keep_caps`: bounding set
//!    = effective = permitted = `keep_caps`, surviving its exec), `no_new_privs`, `chdir(cwd)`, the inherited fds
//!    (`SandboxSpec::inherit_fds`) put at 3, 4, … without close-on-exec, seccomp, `execve` (or
//!    `execveat` of the program's file opened before the clone).
//!
//! Resource limits (`RLIMIT_NOFILE`, `RLIMIT_CORE` 0) are set by the parent before the clone and
//! inherited: raising a hard limit needs `CAP_SYS_RESOURCE` in the host's user namespace.
//!
//! A failing step is reported to the parent on the report pipe (step, detail, errno) and the child
//! exits with 127; a successful `execve` closes the (close-on-exec) pipe, which the parent reads as
//! success. Not here: what the parent does meanwhile (`sandbox::launch`).
//!
//! The child runs on a copy of a single-threaded parent, so it may allocate; it never returns into
//! the parent's code (it execs or `_exit`s, also on panic).

use super::rootfs;
use super::step::{SetupError, Step};
use crate::seccomp::Filter;
use crate::sys;
use nix::sched::CloneFlags;
use nix::sys::stat::{umask, Mode};
use std::convert::Infallible;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Everything the child needs, prepared by the parent before the clone.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// Read end of the parent's "go on" pipe (one byte per step; EOF = abort).
    pub go: OwnedFd,
    /// Write end of the report pipe (close-on-exec).
    pub report: OwnedFd,
    pub stdin: OwnedFd,
    pub log: OwnedFd,
    pub rootfs: rootfs::Plan,
    pub hostname: String,
    /// `RLIMIT_NOFILE`, set by the parent before the clone.
    pub nofile: Option<u64>,
    pub uid: u32,
    pub gid: u32,
    /// `SandboxSpec::keep_caps` as a mask (0: none; only with uid 0, validated).
    pub keep_caps: u64,
    pub cwd: CString,
    pub program: CString,
    /// The program's file, opened before the clone (`SandboxSpec::program_source`); executed by
    /// descriptor instead of `program`'s path. Close-on-exec.
    pub program_fd: Option<OwnedFd>,
    /// `SandboxSpec::inherit_fds`, opened (close-on-exec, numbered above `3 + inherit.len()`,
    /// like every other fd here): dup2'd onto 3, 4, … right before the exec. `None`: a listening
    /// socket, which arrives on `listeners` once the child exists.
    pub inherit: Vec<Option<OwnedFd>>,
    /// The child's end of the pair the parent sends the listening sockets on (bound in the
    /// sandbox's network namespace, so only after the clone), one message before the go.
    pub listeners: Option<OwnedFd>,
    /// The parent's end (the parent takes it before the child could use it).
    pub listeners_send: Option<OwnedFd>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub filter: Filter,
}

/// Run the child's side of the launch. Never returns: execs the program or exits with 127.
pub(crate) fn run(plan: &ChildPlan) -> ! {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| setup_and_exec(plan)));
    let err = match outcome {
        Ok(Ok(never)) => match never {},
        Ok(Err(e)) => e,
        Err(_) => SetupError::new(
            "sandbox setup",
            &"panicked",
            io::Error::from_raw_os_error(libc::EIO),
        ),
    };
    let _ = nix::unistd::write(&plan.report, &err.encode());
    sys::exit_now(127)
}

fn wait_for_parent(go: &OwnedFd, what: &str) -> Result<(), SetupError> {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(go, &mut byte) {
            Ok(1) => return Ok(()),
            Ok(_) => {
                return Err(SetupError::new(
                    what,
                    &"the launcher went away",
                    io::Error::from_raw_os_error(libc::EPIPE),
                ))
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e).step(what, "reading the sync pipe"),
        }
    }
}

/// The listening sockets the parent sent before the go (see `ChildPlan::listeners`), each moved
/// above the numbers the inherited fds take (`3 + inherit.len()`), close-on-exec.
fn receive_listeners(p: &ChildPlan) -> Result<Vec<OwnedFd>, SetupError> {
    let Some(chan) = &p.listeners else {
        return Ok(Vec::new());
    };
    let mut buf = [0u8; 8];
    let (_, fds) =
        crate::fdpass::recv_with_fds(chan, &mut buf).step("receive inherited sockets", "")?;
    let min = 3 + p.inherit.len() as i32;
    fds.into_iter()
        .map(|fd| {
            let raw = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(min))
                .step("dup", "inherited socket")?;
            // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nothing else owns.
            Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
        })
        .collect()
}

fn setup_and_exec(p: &ChildPlan) -> Result<Infallible, SetupError> {
    // Own session and process group: a terminal's ^C to the server's group must not reach us.
    nix::unistd::setsid().step("setsid", "")?;
    sys::reset_signals().step("reset signal dispositions", "")?;
    nix::unistd::dup2_stdin(&p.stdin).step("dup2", "stdin")?;
    nix::unistd::dup2_stdout(&p.log).step("dup2", "stdout")?;
    nix::unistd::dup2_stderr(&p.log).step("dup2", "stderr")?;
    // Whatever else the launcher inherited must not reach the program.
    sys::cloexec_from(3).step("close_range", "3..")?;
    umask(Mode::empty());

    // The parent writes our uid/gid maps meanwhile; until then we are nobody in our user
    // namespace.
    wait_for_parent(&p.go, "wait for the id maps")?;
    // Kept open until the exec (close-on-exec: only their dup2 copies survive it).
    let received = receive_listeners(p)?;
    let mut next = received.iter();
    let inherit: Vec<std::os::fd::RawFd> = p
        .inherit
        .iter()
        .map(|fd| match fd {
            Some(fd) => Ok(fd.as_raw_fd()),
            None => next.next().map(|fd| fd.as_raw_fd()).ok_or_else(|| {
                SetupError::new(
                    "receive inherited sockets",
                    &"too few",
                    io::Error::from_raw_os_error(libc::EPROTO),
                )
            }),
        })
        .collect::<Result<_, _>>()?;
    enter_sandbox(&sys::Linux, &p.rootfs, &p.hostname, || {
        wait_for_parent(&p.go, "wait for the cgroup")
    })?;
    // Use the capabilities of the user namespace to give everything up.
    drop_privileges(&sys::Linux, p.uid, p.gid, p.keep_caps)?;
    nix::unistd::chdir(p.cwd.as_c_str()).step("chdir", p.cwd.to_string_lossy())?;
    umask(Mode::from_bits_truncate(0o022));
    // The handed-over fds at 3, 4, …: dup2 clears close-on-exec on the copy. Every fd the child
    // still uses (report pipe, program) is numbered above these (see `sandbox::above`).
    for (i, fd) in inherit.iter().enumerate() {
        let target = 3 + i as i32;
        sys::dup2_raw(*fd, target).step("dup2", format!("inherited fd {target}"))?;
    }
    p.filter
        .install()
        .map_err(|e| SetupError::new("seccomp", &e, io::Error::from_raw_os_error(libc::EINVAL)))?;
    match &p.program_fd {
        Some(fd) => nix::unistd::execveat(
            fd,
            c"",
            &p.argv,
            &p.envp,
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )
        .step("execveat", p.program.to_string_lossy()),
        None => nix::unistd::execve(&p.program, &p.argv, &p.envp)
            .step("execve", p.program.to_string_lossy()),
    }
}

/// Step 2: become root of the sandbox's user namespace, which owns our mount, pid, net, ipc and
/// uts namespaces, with every capability in it (none in the host's), and make the sandbox's
/// world: network, mount table and root, host name; then, once `wait_for_cgroup` says the parent
/// has moved us into the sandbox's cgroup, a cgroup namespace rooted there.
fn enter_sandbox(
    sys: &impl sys::Syscall,
    rootfs: &rootfs::Plan,
    hostname: &str,
    wait_for_cgroup: impl FnOnce() -> Result<(), SetupError>,
) -> Result<(), SetupError> {
    become_namespace_root(sys)?;
    // The sandbox's own (loopback-only) network namespace, as a CRIU restore makes it too: every
    // port bindable by anyone, loopback up. The sysctl is written through the host's `/proc` (we
    // have not pivoted yet): net sysctls act on the writer's network namespace, which is ours,
    // and its root (we) may write them.
    sys.configure_sandbox_netns()
        .step("configure the network namespace", "lo")?;
    rootfs::build_inside(sys, rootfs)?;
    sys.sethostname(hostname).step("sethostname", hostname)?;
    // Meanwhile the parent has moved us into the sandbox's cgroup (on cgroup v1 a move can wait
    // for an RCU grace period, milliseconds, which the mount work above overlaps). Nothing above
    // forks.
    wait_for_cgroup()?;
    // The sandbox's cgroup becomes the root of our cgroup namespace, owned by our user namespace
    // like the others.
    sys.unshare(CloneFlags::CLONE_NEWCGROUP)
        .step("unshare", "cgroup namespace")
}

/// Become root of the sandbox's user namespace (whose maps the parent has written): no
/// supplementary groups, gid and uid 0.
fn become_namespace_root(sys: &impl sys::Syscall) -> Result<(), SetupError> {
    sys.setgroups_empty().step("setgroups", "[]")?;
    sys.setresgid(0).step("setresgid", 0)?;
    sys.setresuid(0).step("setresuid", 0)?;
    Ok(())
}

/// Step 3's credentials: with the user namespace's capabilities, give up everything — securebits
/// locked, bounding and ambient sets emptied, `uid`/`gid`, capability sets emptied — or, for the
/// sandbox's root with `keep_caps` (validated: uid 0), everything but `keep_caps`; then
/// `no_new_privs`. The first failing call ends it: nothing after it runs.
pub(crate) fn drop_privileges(
    sys: &impl sys::Syscall,
    uid: u32,
    gid: u32,
    keep_caps: u64,
) -> Result<(), SetupError> {
    if keep_caps != 0 {
        // SECBIT_NOROOT stays off (and is locked off) so that exec as root yields exactly the
        // bounding set, which is `keep_caps` for every process of the sandbox from here on;
        // SECBIT_NO_SETUID_FIXUP locked off, so a change away from uid 0 clears every capability;
        // SECBIT_KEEP_CAPS locked off (nothing can keep capabilities across that change);
        // SECBIT_NO_CAP_AMBIENT_RAISE | _LOCKED (no ambient capabilities, ever).
        sys.set_securebits(sys::KEPT_CAPS_SECUREBITS)
            .step("prctl", "PR_SET_SECUREBITS")?;
        sys.drop_bounding_set_except(keep_caps)
            .step("prctl", "PR_CAPBSET_DROP")?;
        sys.clear_ambient()
            .step("prctl", "PR_CAP_AMBIENT_CLEAR_ALL")?;
        sys.setresgid(gid).step("setresgid", gid)?;
        sys.setresuid(uid).step("setresuid", uid)?;
        // Effective and permitted = the kept set, inheritable empty: exec as root gives
        // permitted = bounding set = the kept set (no more, `no_new_privs` below forbids growth).
        sys.set_capability_sets(keep_caps, keep_caps, 0)
            .step("capset", "the kept set")?;
    } else {
        // SECBIT_NOROOT | _LOCKED, SECBIT_KEEP_CAPS_LOCKED (off), SECBIT_NO_CAP_AMBIENT_RAISE |
        // _LOCKED: uid 0 never regains capabilities through exec, and nothing can re-enable
        // capability keeping.
        sys.set_securebits(
            sys::SECBIT_NOROOT
                | sys::SECBIT_NOROOT_LOCKED
                | sys::SECBIT_KEEP_CAPS_LOCKED
                | sys::SECBIT_NO_CAP_AMBIENT_RAISE
                | sys::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
        )
        .step("prctl", "PR_SET_SECUREBITS")?;
        sys.drop_bounding_set_except(0)
            .step("prctl", "PR_CAPBSET_DROP")?;
        sys.clear_ambient()
            .step("prctl", "PR_CAP_AMBIENT_CLEAR_ALL")?;
        sys.setresgid(gid).step("setresgid", gid)?;
        sys.setresuid(uid).step("setresuid", uid)?;
        sys.set_capability_sets(0, 0, 0)
            .step("capset", "all sets empty")?;
    }
    sys.set_no_new_privs()
        .step("prctl", "PR_SET_NO_NEW_PRIVS")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sys::recorder::Recorder;

    /// Without kept capabilities: every set emptied, root can never regain any through exec,
    /// the uid changes only after the bounding set is gone, and no_new_privs comes last.
    #[test]
    fn a_sandbox_user_gives_up_every_capability_in_order() {
        let r = Recorder::default();
        drop_privileges(&r, 1000, 1000, 0).unwrap();
        let bits = sys::SECBIT_NOROOT
            | sys::SECBIT_NOROOT_LOCKED
            | sys::SECBIT_KEEP_CAPS_LOCKED
            | sys::SECBIT_NO_CAP_AMBIENT_RAISE
            | sys::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        assert_eq!(
            r.calls(),
            [
                format!("securebits {bits:#x}"),
                "bounding_keep 0x0".into(),
                "clear_ambient".into(),
                "setresgid 1000".into(),
                "setresuid 1000".into(),
                "capset 0x0,0x0,0x0".into(),
                "no_new_privs".into(),
            ]
        );
        // The bits of the old literal (0x01 | 0x02 | 0x20 | 0x40 | 0x80), and never
        // NO_SETUID_FIXUP: leaving uid 0 must clear capabilities.
        assert_eq!(bits, 0xe3);
        assert_eq!(bits & sys::SECBIT_NO_SETUID_FIXUP, 0);
    }

    /// The sandbox's root with `keep_caps`: the bounding set and the effective and permitted sets
    /// are exactly the kept set, inheritable stays empty, NOROOT is locked off so exec as root
    /// yields the bounding set, and setuid fixups stay on.
    #[test]
    fn the_sandbox_root_keeps_exactly_its_kept_set() {
        let keep = (1 << 0) | (1 << 12); // CAP_CHOWN, CAP_NET_ADMIN
        let r = Recorder::default();
        drop_privileges(&r, 0, 0, keep).unwrap();
        let calls = r.calls();
        let bits: libc::c_ulong = calls[0]
            .strip_prefix("securebits 0x")
            .and_then(|s| libc::c_ulong::from_str_radix(s, 16).ok())
            .unwrap();
        assert_eq!(
            bits & sys::SECBIT_NOROOT,
            0,
            "exec as root yields the bounding set"
        );
        assert_ne!(
            bits & sys::SECBIT_NOROOT_LOCKED,
            0,
            "and that cannot be changed"
        );
        assert_eq!(bits & sys::SECBIT_NO_SETUID_FIXUP, 0);
        assert_eq!(
            calls[1..],
            [
                format!("bounding_keep {keep:#x}"),
                "clear_ambient".into(),
                "setresgid 0".into(),
                "setresuid 0".into(),
                format!("capset {keep:#x},{keep:#x},0x0"),
                "no_new_privs".into(),
            ]
        );
    }

    /// A failing call ends the drop: nothing after it runs (above all not the exec that follows),
    /// and the error names the step.
    #[test]
    fn a_failed_drop_stops_at_the_failing_step() {
        for (fail, step) in [
            ("securebits", "prctl"),
            ("bounding_keep", "prctl"),
            ("setresuid", "setresuid"),
            ("capset", "capset"),
            ("no_new_privs", "prctl"),
        ] {
            let r = Recorder::failing(fail);
            let e = drop_privileges(&r, 1000, 1000, 0).unwrap_err();
            assert_eq!(e.step, step, "{fail}");
            assert_eq!(e.source.raw_os_error(), Some(libc::EPERM));
            let calls = r.calls();
            assert!(calls.last().unwrap().starts_with(fail), "{fail}: {calls:?}");
        }
    }

    #[test]
    fn the_child_first_becomes_root_of_its_user_namespace() {
        let r = Recorder::default();
        become_namespace_root(&r).unwrap();
        assert_eq!(r.calls(), ["setgroups []", "setresgid 0", "setresuid 0"]);
    }

    /// Step 2 in order: root of the user namespace before anything else, the whole mount table
    /// and the pivot before the host name, and the cgroup namespace only once the parent says
    /// the cgroup move is done (else its root would be the launcher's cgroup).
    #[test]
    fn the_child_makes_its_world_then_its_cgroup_namespace() {
        let r = Recorder::default();
        let plan = rootfs::Plan {
            mountpoint: "/s/root".into(),
            lower: vec!["/t/layer".into()],
            upper: "/s/upper".into(),
            work: "/s/work".into(),
            binds: vec![],
            idmap_userns: None,
            root_owner: None,
            dev_options: String::new(),
            devpts_options: String::new(),
            shm_options: String::new(),
            tmp_options: String::new(),
            proc_files: vec![],
        };
        let waited_at = std::cell::Cell::new(None);
        enter_sandbox(&r, &plan, "sbx", || {
            waited_at.set(Some(r.calls().len()));
            Ok(())
        })
        .unwrap();
        let calls = r.calls();
        assert_eq!(
            calls[..4],
            [
                "setgroups []",
                "setresgid 0",
                "setresuid 0",
                "configure_netns"
            ]
        );
        let n = calls.len();
        assert_eq!(
            calls[n - 3..],
            ["chdir /", "sethostname sbx", "unshare CLONE_NEWCGROUP"]
        );
        assert_eq!(
            waited_at.get(),
            Some(n - 1),
            "the wait comes right before the unshare"
        );

        let r = Recorder::default();
        let e = enter_sandbox(&r, &plan, "sbx", || {
            Err(SetupError::new(
                "wait for the cgroup",
                &"",
                io::ErrorKind::UnexpectedEof.into(),
            ))
        })
        .unwrap_err();
        assert_eq!(e.step, "wait for the cgroup");
        assert!(r.matching("unshare").is_empty());
    }
}
