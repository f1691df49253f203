//! Thin wrappers over the raw system calls the sandbox launcher needs and `nix` does not offer:
//! `clone` with namespace flags, `close_range`, the new mount API's `open_tree`, `mount_setattr`,
//! `fsopen`/`fsmount` (a detached tmpfs)
//! and `move_mount` (idmapped mounts), capability sets and securebits, signal dispositions,
//! bringing up loopback, `_exit`, and switching to an unprivileged user that keeps a few ambient
//! capabilities ([`become_user_with_ambient_caps`]). Each wrapper is one `unsafe` block with its
//! justification.
//!
//! Not here: the order in which they are used, or any policy (that is `sandbox`'s job; the one
//! fixed sequence here, [`become_user_with_ambient_caps`], exists because it must run as a whole
//! inside a `pre_exec` hook, and its ids and capabilities are `network`'s choice). Everything
//! returns `std::io::Error` from `errno`.

use nix::fcntl::{OFlag, ResolveFlag};
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

#[cfg(test)]
pub(crate) mod recorder;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `clone(flags | SIGCHLD)` with fork semantics (the child continues on a copy of the caller's
/// stack). Returns `Some(child pid)` in the parent and `None` in the child.
///
/// The caller must be single-threaded: the child has only the calling thread, so a lock (e.g. the
/// allocator's) held by another thread at the time of the call would stay locked forever in it.
/// This is the raw system call, so glibc's fork handlers do not run; the child must not rely on
/// them (it does not: it sets up the sandbox and execs, or `_exit`s).
pub(crate) fn clone_process(flags: libc::c_int) -> io::Result<Option<i32>> {
    // SAFETY: with a null stack pointer, clone(2) behaves like fork(2): the child gets a
    // copy-on-write copy of the address space, including the stack it continues on, so no memory is
    // shared between the two. The parent/child tid pointers and tls are unused (null/0 without
    // CLONE_*TID/CLONE_SETTLS). Single-threadedness, which makes the child's copy of every lock
    // consistent, is the caller's documented precondition (checked by `sandbox::launch`).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    let pid = check(ret)?;
    Ok((pid != 0).then_some(pid as i32))
}

/// Mark every fd from `first` up close-on-exec (`close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`).
pub(crate) fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes flags of the calling process's fds; it touches no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    check(ret).map(drop)
}

/// `dup2(from, to)`: `to` becomes a copy of `from` without close-on-exec (whatever `to` was is
/// closed). For fds the caller keeps no ownership of at `to` (the launcher's child, right before
/// exec).
pub(crate) fn dup2_raw(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 takes two fd numbers by value and touches no memory; the caller owns nothing at
    // `to` that it would still use (it execs right after).
    let ret = unsafe { libc::dup2(from, to) };
    check(ret as libc::c_long).map(drop)
}

/// Reset every signal's disposition to the default and unblock all signals, so the program does
/// not inherit the launcher's (Rust binaries ignore SIGPIPE, for one).
pub(crate) fn reset_signals() -> io::Result<()> {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL (no handler function) is always sound; the sigaction struct is
        // zero-initialised (empty mask, no flags) and outlives the call. Signal numbers the kernel
        // reserves (glibc's 32/33) fail with EINVAL, which is ignored.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    )
    .map_err(io::Error::from)
}

fn prctl(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl options used here (PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_SECUREBITS,
    // PR_SET_NO_NEW_PRIVS) take integer arguments only and affect only the calling thread's
    // credentials.
    let ret = unsafe { libc::prctl(option, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    check(ret as libc::c_long).map(drop)
}

/// Drop every capability not in `keep` (bit n = capability n) from the bounding set. Needs
/// CAP_SETPCAP.
pub(crate) fn drop_bounding_set_except(keep: u64) -> io::Result<()> {
    for cap in 0..=63u32 {
        if keep & (1 << cap) != 0 {
            continue;
        }
        match prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `linux/securebits.h`.
pub(crate) const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
pub(crate) const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
pub(crate) const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
pub(crate) const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
pub(crate) const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
/// The securebits of a process that keeps capabilities as the sandbox's root (the agent, its
/// zygotes): `SECBIT_NOROOT` locked off, so exec as root yields exactly the bounding set;
/// `SECBIT_NO_SETUID_FIXUP` locked off, so a change away from uid 0 clears every capability;
/// `SECBIT_KEEP_CAPS` locked off; no ambient capabilities, ever.
pub(crate) const KEPT_CAPS_SECUREBITS: libc::c_ulong = SECBIT_NOROOT_LOCKED
    | SECBIT_NO_SETUID_FIXUP_LOCKED
    | SECBIT_KEEP_CAPS_LOCKED
    | SECBIT_NO_CAP_AMBIENT_RAISE
    | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

/// Clear the ambient capability set.
pub(crate) fn clear_ambient() -> io::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )
}

/// Set the securebits (`PR_SET_SECUREBITS`). Needs CAP_SETPCAP.
pub(crate) fn set_securebits(bits: libc::c_ulong) -> io::Result<()> {
    prctl(libc::PR_SET_SECUREBITS, bits, 0)
}

/// Set the calling thread's effective, permitted and inheritable capability sets (bit n =
/// capability n). Async-signal-safe (one system call, no allocation).
pub(crate) fn set_capability_sets(
    effective: u64,
    permitted: u64,
    inheritable: u64,
) -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let word = |shift: u32| Data {
        effective: (effective >> shift) as u32,
        permitted: (permitted >> shift) as u32,
        inheritable: (inheritable >> shift) as u32,
    };
    let data = [word(0), word(32)];
    // SAFETY: capset(2) with a version-3 header (pid 0 = the calling thread) reads exactly two
    // `__user_cap_data_struct`s, which `data` provides with the kernel's layout; both live on the
    // stack for the duration of the call. The kernel refuses (EPERM) anything but a subset of the
    // sets the thread already has.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    check(ret).map(drop)
}

/// `linux/securebits.h`, the bits [`set_securebits`] sets that are not locks.
pub(crate) const SECBIT_NOROOT: libc::c_ulong = 1;
pub(crate) const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;

/// The system calls with which the jail builds a sandbox's (or the host zygote's) mount table,
/// enters its namespaces and gives up its privileges (`sandbox::rootfs`, `sandbox::child`,
/// `host_zygote`), behind a trait so that their order and arguments — the logic that decides what
/// a sandbox sees and keeps — are unit-tested without root, against a recorder
/// ([`recorder::Recorder`]); [`Linux`] makes them. youki's `Syscall` is the model.
///
/// Paths handed to `mount` are host paths or `/proc/self/fd/N` of descriptors the caller opened:
/// nothing here resolves a path on its own behalf.
pub(crate) trait Syscall {
    // Credentials.
    fn setgroups_empty(&self) -> io::Result<()>;
    fn setresgid(&self, gid: u32) -> io::Result<()>;
    fn setresuid(&self, uid: u32) -> io::Result<()>;
    fn set_securebits(&self, bits: libc::c_ulong) -> io::Result<()>;
    /// Drop from the bounding set every capability not in `keep`.
    fn drop_bounding_set_except(&self, keep: u64) -> io::Result<()>;
    fn clear_ambient(&self) -> io::Result<()>;
    fn set_capability_sets(
        &self,
        effective: u64,
        permitted: u64,
        inheritable: u64,
    ) -> io::Result<()>;
    fn set_no_new_privs(&self) -> io::Result<()>;

    /// `setresgid(-1, gid, -1)` and `setresuid(-1, uid, -1)`: the effective ids alone.
    fn set_effective_ids(&self, uid: u32, gid: u32) -> io::Result<()>;
    fn set_dumpable(&self, dumpable: bool) -> io::Result<()>;

    // Processes and namespaces.
    /// [`clone_process`]: `Some(child)` in the caller, `None` in the child.
    fn clone_process(&self, flags: libc::c_int) -> io::Result<Option<i32>>;
    /// `write(path, bytes)` of a whole file (`/proc/<pid>/uid_map` and the like).
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    fn kill(&self, pid: i32) -> io::Result<()>;
    /// Wait for the child `pid` to end (`waitpid`).
    fn reap(&self, pid: i32) -> io::Result<()>;
    fn setns(&self, ns: BorrowedFd<'_>, flags: CloneFlags) -> io::Result<()>;
    fn unshare(&self, flags: CloneFlags) -> io::Result<()>;
    fn sethostname(&self, name: &str) -> io::Result<()>;
    /// [`configure_sandbox_netns`].
    fn configure_sandbox_netns(&self) -> io::Result<()>;

    // Files the mount table is made of.
    /// `open(path, flags | O_CLOEXEC)`.
    fn open(&self, path: &Path, flags: OFlag) -> io::Result<OwnedFd>;
    /// `openat(dir, name, flags | O_CLOEXEC, mode)`.
    fn openat(
        &self,
        dir: BorrowedFd<'_>,
        name: &Path,
        flags: OFlag,
        mode: u32,
    ) -> io::Result<OwnedFd>;
    /// `openat2(dir, path, {flags | O_CLOEXEC, resolve})`.
    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlag,
        resolve: ResolveFlag,
    ) -> io::Result<OwnedFd>;
    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: u32) -> io::Result<()>;
    /// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
    fn fchownat(&self, dir: BorrowedFd<'_>, name: &Path, uid: u32, gid: u32) -> io::Result<()>;
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> io::Result<()>;
    fn write_all(&self, fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()>;

    // Mounts.
    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()>;
    /// `umount2(target, MNT_DETACH)`.
    fn umount_detach(&self, target: &Path) -> io::Result<()>;
    /// [`open_tree_clone`].
    fn open_tree_clone(&self, dir: Option<BorrowedFd<'_>>, path: &CStr) -> io::Result<OwnedFd>;
    /// [`open_tree_clone_cwd_recursive`].
    fn open_tree_clone_cwd_recursive(&self) -> io::Result<OwnedFd>;
    /// [`move_mount_onto`].
    fn move_mount_onto(&self, tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()>;
    /// [`mount_setattr`].
    fn mount_setattr(
        &self,
        tree: BorrowedFd<'_>,
        attr_set: u64,
        userns: Option<BorrowedFd<'_>>,
    ) -> io::Result<()>;
    /// [`detached_tmpfs`].
    fn detached_tmpfs(&self, options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd>;
    fn fchdir(&self, dir: BorrowedFd<'_>) -> io::Result<()>;
    fn chdir(&self, path: &Path) -> io::Result<()>;
    /// `pivot_root(".", ".")`: the current directory becomes the root, the old root stacked on
    /// top of it (to be detached with `umount_detach(".")`).
    fn pivot_root_here(&self) -> io::Result<()>;
}

/// The real system calls.
pub(crate) struct Linux;

impl Syscall for Linux {
    fn setgroups_empty(&self) -> io::Result<()> {
        nix::unistd::setgroups(&[]).map_err(io::Error::from)
    }
    fn setresgid(&self, gid: u32) -> io::Result<()> {
        let g = nix::unistd::Gid::from_raw(gid);
        nix::unistd::setresgid(g, g, g).map_err(io::Error::from)
    }
    fn setresuid(&self, uid: u32) -> io::Result<()> {
        let u = nix::unistd::Uid::from_raw(uid);
        nix::unistd::setresuid(u, u, u).map_err(io::Error::from)
    }
    fn set_securebits(&self, bits: libc::c_ulong) -> io::Result<()> {
        set_securebits(bits)
    }
    fn drop_bounding_set_except(&self, keep: u64) -> io::Result<()> {
        drop_bounding_set_except(keep)
    }
    fn clear_ambient(&self) -> io::Result<()> {
        clear_ambient()
    }
    fn set_capability_sets(
        &self,
        effective: u64,
        permitted: u64,
        inheritable: u64,
    ) -> io::Result<()> {
        set_capability_sets(effective, permitted, inheritable)
    }
    fn set_no_new_privs(&self) -> io::Result<()> {
        nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)
    }

    fn set_effective_ids(&self, uid: u32, gid: u32) -> io::Result<()> {
        use nix::unistd::{Gid, Uid};
        let same = u32::MAX;
        let (keep_g, keep_u) = (Gid::from_raw(same), Uid::from_raw(same));
        nix::unistd::setresgid(keep_g, Gid::from_raw(gid), keep_g).map_err(io::Error::from)?;
        nix::unistd::setresuid(keep_u, Uid::from_raw(uid), keep_u).map_err(io::Error::from)
    }
    fn set_dumpable(&self, dumpable: bool) -> io::Result<()> {
        nix::sys::prctl::set_dumpable(dumpable).map_err(io::Error::from)
    }

    fn clone_process(&self, flags: libc::c_int) -> io::Result<Option<i32>> {
        clone_process(flags)
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        std::fs::write(path, bytes)
    }
    fn kill(&self, pid: i32) -> io::Result<()> {
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).map_err(io::Error::from)
    }
    fn reap(&self, pid: i32) -> io::Result<()> {
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::wait::waitpid(pid, None)
            .map(drop)
            .map_err(io::Error::from)
    }
    fn setns(&self, ns: BorrowedFd<'_>, flags: CloneFlags) -> io::Result<()> {
        nix::sched::setns(ns, flags).map_err(io::Error::from)
    }
    fn unshare(&self, flags: CloneFlags) -> io::Result<()> {
        nix::sched::unshare(flags).map_err(io::Error::from)
    }
    fn sethostname(&self, name: &str) -> io::Result<()> {
        nix::unistd::sethostname(name).map_err(io::Error::from)
    }
    fn configure_sandbox_netns(&self) -> io::Result<()> {
        configure_sandbox_netns()
    }

    fn open(&self, path: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        nix::fcntl::open(path, flags | OFlag::O_CLOEXEC, Mode::empty()).map_err(io::Error::from)
    }
    fn openat(
        &self,
        dir: BorrowedFd<'_>,
        name: &Path,
        flags: OFlag,
        mode: u32,
    ) -> io::Result<OwnedFd> {
        let mode = Mode::from_bits_truncate(mode);
        nix::fcntl::openat(dir, name, flags | OFlag::O_CLOEXEC, mode).map_err(io::Error::from)
    }
    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlag,
        resolve: ResolveFlag,
    ) -> io::Result<OwnedFd> {
        let how = nix::fcntl::OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(resolve);
        nix::fcntl::openat2(dir, path, how).map_err(io::Error::from)
    }
    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: u32) -> io::Result<()> {
        nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode)).map_err(io::Error::from)
    }
    fn fchownat(&self, dir: BorrowedFd<'_>, name: &Path, uid: u32, gid: u32) -> io::Result<()> {
        nix::unistd::fchownat(
            dir,
            name,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io::Error::from)
    }
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
        nix::unistd::symlinkat(target, dir, name).map_err(io::Error::from)
    }
    fn write_all(&self, fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match nix::unistd::write(fd, rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(nix::Error::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()> {
        nix::mount::mount(source, target, fstype, flags, data).map_err(io::Error::from)
    }
    fn umount_detach(&self, target: &Path) -> io::Result<()> {
        nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from)
    }
    fn open_tree_clone(&self, dir: Option<BorrowedFd<'_>>, path: &CStr) -> io::Result<OwnedFd> {
        open_tree_clone(dir, path)
    }
    fn open_tree_clone_cwd_recursive(&self) -> io::Result<OwnedFd> {
        open_tree_clone_cwd_recursive()
    }
    fn move_mount_onto(&self, tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
        move_mount_onto(tree, target)
    }
    fn mount_setattr(
        &self,
        tree: BorrowedFd<'_>,
        attr_set: u64,
        userns: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        mount_setattr(tree, attr_set, userns)
    }
    fn detached_tmpfs(&self, options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
        detached_tmpfs(options, attrs)
    }
    fn fchdir(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        nix::unistd::fchdir(dir).map_err(io::Error::from)
    }
    fn chdir(&self, path: &Path) -> io::Result<()> {
        nix::unistd::chdir(path).map_err(io::Error::from)
    }
    fn pivot_root_here(&self) -> io::Result<()> {
        nix::unistd::pivot_root(".", ".").map_err(io::Error::from)
    }
}

/// `setgroups(0)`, `setresgid(gid ×3)`, `setresuid(uid ×3)`: the calling thread becomes
/// `uid`/`gid` with no supplementary groups. Raw system calls rather than glibc's wrappers, which
/// would broadcast the change to every thread through a signal handler (a forked child has one
/// thread). Async-signal-safe: no allocation, no locks.
pub(crate) fn set_ids(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: setgroups(2) with size 0 reads no memory (the null list is never dereferenced).
    check(unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            0 as libc::c_ulong,
            std::ptr::null::<libc::gid_t>(),
        )
    })?;
    // SAFETY: setresgid(2) takes integers only and changes the calling thread's credentials.
    check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) })?;
    // SAFETY: as above, for setresuid(2).
    check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) })?;
    Ok(())
}

/// Configure the calling thread's network namespace as every sandbox's (a launch's, and a CRIU
/// restore's, see `checkpoint::setup_restored_netns`): every port may be bound by anyone in it,
/// as in a container — no process of the sandbox keeps `CAP_NET_BIND_SERVICE` — (net sysctls act
/// on the writer's network namespace, whichever `/proc` they are written through), and loopback
/// up. The caller needs `CAP_NET_ADMIN` over the namespace.
pub(crate) fn configure_sandbox_netns() -> io::Result<()> {
    std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("sysctl net.ipv4.ip_unprivileged_port_start=0: {e}"),
        )
    })?;
    loopback_up().map_err(|e| io::Error::new(e.kind(), format!("bringing up lo: {e}")))
}

/// Bring the loopback interface up (`SIOCSIFFLAGS` on "lo" with IFF_UP) in the calling process's
/// network namespace.
pub(crate) fn loopback_up() -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) has no memory arguments; the returned fd is owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero `ifreq` is a valid value (empty name, zero union).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes the flags into `req`, which is
    // a properly sized and aligned `ifreq` living for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after SIOCGIFFLAGS the `ifru_flags` member of the union is the initialised one.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// End the calling process now, without running exit handlers or destructors (which belong to
/// the parent's copy of the program state).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) never returns and has no preconditions.
    unsafe { libc::_exit(code) }
}

/// `open_tree(dirfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)`: a detached copy of the mount
/// at `path` (a bind mount not attached anywhere yet), whose attributes (an id map) can still be
/// set before it is used or attached. `dirfd` `None` = the current directory.
pub(crate) fn open_tree_clone(dirfd: Option<BorrowedFd<'_>>, path: &CStr) -> io::Result<OwnedFd> {
    let dirfd = dirfd.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
    // SAFETY: `path` is a NUL-terminated string that outlives the call; the flags ask for a new
    // close-on-exec fd, which is returned to the caller's ownership below and nowhere else.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dirfd,
            path.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    };
    let fd = check(ret)?;
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)`: a detached
/// copy of the mount tree at the current directory, every mount below it included.
pub(crate) fn open_tree_clone_cwd_recursive() -> io::Result<OwnedFd> {
    // SAFETY: the path is a NUL-terminated static string; the flags ask for a new close-on-exec
    // fd, which is returned to the caller's ownership below and nowhere else.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c".".as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    let fd = check(ret)?;
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH, {attr_set, userns_fd})` on a detached mount: with
/// `MOUNT_ATTR_IDMAP` in `attr_set`, `userns` is the user namespace whose id map the mount shows
/// its files' owners through.
pub(crate) fn mount_setattr(
    tree: BorrowedFd<'_>,
    attr_set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    // SAFETY: `attr` is a fully initialised `struct mount_attr` that outlives the call and whose
    // size is passed; the empty path with AT_EMPTY_PATH makes the call act on `tree` itself. It
    // changes mount attributes only, no memory of this process.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    check(ret).map(drop)
}

/// `move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`: attach
/// the detached mount `tree` on the directory (or file) `target` (an `O_PATH` fd is fine).
pub(crate) fn move_mount_onto(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both paths are empty NUL-terminated static strings; with the *_EMPTY_PATH flags the
    // call acts on the two fds, which are valid for its duration. No memory is written.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(ret).map(drop)
}

/// A new tmpfs that is mounted nowhere: `fsopen("tmpfs")`, one `fsconfig(FSCONFIG_SET_STRING)`
/// per option, `FSCONFIG_CMD_CREATE`, then `fsmount` with the `MOUNT_ATTR_*` flags `attrs`. The
/// returned fd is the detached mount's root: files can be made in it with `openat`, and
/// [`open_tree_clone`] of a file in it gives a bind of that file to attach anywhere.
pub(crate) fn detached_tmpfs(options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
    detached_fs(c"tmpfs", options, attrs)
}

/// A new proc file system mounted nowhere (see [`detached_tmpfs`]): it shows the processes of the
/// calling process's active pid namespace.
pub(crate) fn detached_proc(attrs: u64) -> io::Result<OwnedFd> {
    detached_fs(c"proc", &[], attrs)
}

fn detached_fs(fstype: &CStr, options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: the name is a NUL-terminated string that outlives the call; the call returns a new
    // close-on-exec fd.
    let ret = unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) };
    // SAFETY: fsopen returned a new fd that nothing else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(check(ret)? as RawFd) };
    for (key, value) in options {
        fsconfig(fs.as_fd(), FsConfig::SetString(key, value))?;
    }
    fsconfig(fs.as_fd(), FsConfig::Create)?;
    // SAFETY: integers only; the call returns a new close-on-exec fd.
    let ret = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) };
    // SAFETY: fsmount returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(check(ret)? as RawFd) })
}

/// Reconfigure the superblock of the file system mounted at `mountpoint` (`fspick`) with exactly
/// these flag options set (`fsconfig(FSCONFIG_SET_FLAG)`, then `FSCONFIG_CMD_RECONFIGURE`).
pub(crate) fn reconfigure_with_flags(mountpoint: &CStr, flags: &[&CStr]) -> io::Result<()> {
    const FSPICK_CLOEXEC: libc::c_uint = 1;
    // SAFETY: the path is a NUL-terminated string that outlives the call; the call returns a new
    // close-on-exec fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_fspick,
            libc::AT_FDCWD,
            mountpoint.as_ptr(),
            FSPICK_CLOEXEC,
        )
    };
    // SAFETY: fspick returned a new fd that nothing else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(check(ret)? as RawFd) };
    for flag in flags {
        fsconfig(fs.as_fd(), FsConfig::SetFlag(flag))?;
    }
    fsconfig(fs.as_fd(), FsConfig::Reconfigure)
}

/// One `fsconfig(2)` command.
enum FsConfig<'a> {
    SetFlag(&'a CStr),
    SetString(&'a CStr, &'a CStr),
    Create,
    Reconfigure,
}

fn fsconfig(fs: BorrowedFd<'_>, what: FsConfig<'_>) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    let (cmd, key, value): (libc::c_uint, *const libc::c_char, *const libc::c_char) = match what {
        FsConfig::SetFlag(key) => (0, key.as_ptr(), null),
        FsConfig::SetString(key, value) => (1, key.as_ptr(), value.as_ptr()),
        FsConfig::Create => (6, null, null),
        FsConfig::Reconfigure => (7, null, null),
    };
    // SAFETY: `key` and `value` are null (where the command takes none, as documented) or
    // NUL-terminated strings borrowed for the call; the kernel only reads them.
    let ret = unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, key, value, 0) };
    check(ret).map(drop)
}

/// The names of the extended attributes of the open file `fd` (`flistxattr`), at most 64 KiB of
/// them (the kernel's own limit for one list).
pub(crate) fn list_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 65536];
    // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes for the call's duration; the
    // kernel writes at most that many bytes and returns how many.
    let ret = unsafe {
        libc::flistxattr(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
        )
    };
    let n = check(ret as libc::c_long)? as usize;
    buf.truncate(n);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// The value of extended attribute `name` of the open file `fd` (`fgetxattr`), at most 4 KiB
/// (more: `E2BIG`); `None` when it has none of that name.
pub(crate) fn get_xattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<Vec<u8>>> {
    xattr_value(4096, |buf| {
        // SAFETY: `name` is a NUL-terminated string and `buf` a valid, writable buffer of
        // `buf.len()` bytes, both live for the call's duration.
        unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        }
    })
}

/// The value `get` (a `getxattr` call into the buffer it is given) reads, in a buffer grown up to
/// `max` bytes while the value does not fit (larger: `E2BIG`). `None` when there is no such
/// attribute, or the file system keeps none.
fn xattr_value(
    max: usize,
    mut get: impl FnMut(&mut [u8]) -> libc::ssize_t,
) -> io::Result<Option<Vec<u8>>> {
    let mut len = 4096.min(max);
    loop {
        let mut buf = vec![0u8; len];
        match check(get(&mut buf) as libc::c_long) {
            Ok(n) => {
                buf.truncate(n as usize);
                return Ok(Some(buf));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => {
                return Ok(None)
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) && len < max => {
                len = (len * 4).min(max);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
                return Err(io::Error::from_raw_os_error(libc::E2BIG))
            }
            Err(e) => return Err(e),
        }
    }
}

/// The path `/proc/self/fd/<dir>/<name>`: entry `name` of the directory `dir` holds, whatever
/// happened to that directory's own path since it was opened.
fn path_at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    p.extend_from_slice(name.as_bytes());
    std::ffi::CString::new(p).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The value of extended attribute `attr` of entry `name` (a single name, or `.`) of directory
/// `dir`, never following a symlink there (`lgetxattr` on [`path_at`]), at most `max` bytes
/// (more: `E2BIG`). `None` when it has none, or its file system keeps no such attribute.
pub(crate) fn get_xattr_at(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    attr: &CStr,
    max: usize,
) -> io::Result<Option<Vec<u8>>> {
    let path = path_at(dir, name)?;
    xattr_value(max, |buf| {
        // SAFETY: `path` and `attr` are NUL-terminated strings and `buf` a valid, writable
        // buffer of `buf.len()` bytes, all live for the call's duration.
        unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                attr.as_ptr(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        }
    })
}

/// Set extended attribute `attr` of entry `name` of directory `dir` to `value`, never following
/// a symlink there (`lsetxattr` on [`path_at`]).
pub(crate) fn set_xattr_at(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    attr: &CStr,
    value: &[u8],
) -> io::Result<()> {
    let path = path_at(dir, name)?;
    // SAFETY: `path` and `attr` are NUL-terminated and `value` a valid buffer of `value.len()`
    // bytes, all live for the call's duration; the kernel only reads them.
    let ret = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            attr.as_ptr(),
            value.as_ptr().cast::<libc::c_void>(),
            value.len(),
            0,
        )
    };
    check(ret as libc::c_long).map(|_| ())
}

/// Set extended attribute `name` of the open file `fd` to `value` (`fsetxattr`).
pub(crate) fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and `value` a valid buffer of `value.len()` bytes, both
    // live for the call's duration; the kernel only reads them.
    let ret = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast::<libc::c_void>(),
            value.len(),
            0,
        )
    };
    check(ret as libc::c_long).map(|_| ())
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate (close-on-exec) of the open file `fd` of the process
/// `pidfd` refers to. Needs ptrace access to that process (the host's root has it).
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: integers only; the call returns a new close-on-exec fd or -1 with errno.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    let fd = check(ret)?;
    // SAFETY: pidfd_getfd returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(pidfd, signal, NULL, 0)`: signal the process `pidfd` refers to (never a
/// later process that reused its pid).
pub(crate) fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a null siginfo is documented (the kernel fills one in as for kill(2)); integers
    // otherwise.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    check(ret).map(drop)
}

/// Set `PR_SET_NO_NEW_PRIVS`: no exec from here on can gain privileges.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)
}

/// `ioctl(ns, NS_GET_NSTYPE)` and `ioctl(ns, NS_GET_OWNER_UID)` of a user namespace descriptor:
/// `Some(owner)` when `ns` is a user namespace, `None` when it is another kind.
pub(crate) fn user_namespace_owner(ns: BorrowedFd<'_>) -> io::Result<Option<u32>> {
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
    const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the CLONE_NEW* type of the namespace
    // behind a valid fd (an error for any other fd).
    let kind = check(unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_NSTYPE) } as libc::c_long)?;
    if kind != libc::CLONE_NEWUSER as libc::c_long {
        return Ok(None);
    }
    let mut uid: libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one `uid_t` through the pointer, which points at `uid`,
    // alive and properly aligned for the call.
    check(unsafe {
        libc::ioctl(
            ns.as_raw_fd(),
            NS_GET_OWNER_UID,
            &mut uid as *mut libc::uid_t,
        )
    } as libc::c_long)?;
    Ok(Some(uid))
}
