//! Thin wrappers over the raw system calls the sandbox launcher needs and `nix` does not offer:
//! `clone` with namespace flags, `close_range`, capability sets and securebits, signal dispositions,
//! bringing up loopback, `_exit`. Each wrapper is one `unsafe` block with its justification.
//!
//! Not here: the order in which they are used, or any policy (that is `sandbox`'s job). Everything
//! returns `std::io::Error` from `errno`.

use std::io;

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
    // SAFETY: the prctl options used here (PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_SECUREBITS)
    // take integer arguments only and affect only the calling thread's credentials.
    let ret = unsafe { libc::prctl(option, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    check(ret as libc::c_long).map(drop)
}

/// Drop every capability (0..=the kernel's last) from the bounding set. Needs CAP_SETPCAP.
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..=63 {
        match prctl(libc::PR_CAPBSET_DROP, cap, 0) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

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

/// Empty the effective, permitted and inheritable capability sets of the calling thread.
pub(crate) fn clear_capabilities() -> io::Result<()> {
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
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset(2) with a version-3 header (pid 0 = the calling thread) reads exactly two
    // `__user_cap_data_struct`s, which `data` provides with the kernel's layout; both live on the
    // stack for the duration of the call. Lowering capabilities is always permitted.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    check(ret).map(drop)
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
