//! Spawning helpers: extra fds at fixed numbers in the child, signals to process groups, and
//! subreaping (adopting and reaping orphaned descendants such as sandboxes whose launcher exited).
//!
//! Not here: what the child runs or how it is talked to; callers own the `Command`.

use nix::sys::signal::killpg;
pub use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

/// Errors of process-level operations.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("signal {signal:?} to process group {pgid}")]
    Signal {
        pgid: i32,
        signal: Signal,
        #[source]
        source: nix::Error,
    },
}

/// Arrange for each `(fd, number)` pair to be open in the child as fd `number` (not close-on-exec),
/// whatever number `fd` has in the parent. The parent's copies are closed when `cmd` is dropped.
///
/// Numbers must be ≥ 3 (0–2 are set through `Stdio`) and < 100.
pub fn map_fds(cmd: &mut std::process::Command, fds: Vec<(OwnedFd, RawFd)>) {
    assert!(
        fds.iter().all(|(_, n)| (3..100).contains(n)),
        "mapped fd numbers must be in 3..100"
    );
    let raw: Vec<(RawFd, RawFd)> = fds.iter().map(|(fd, n)| (fd.as_raw_fd(), *n)).collect();
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl(2) and dup2(2),
    // which are async-signal-safe; it allocates nothing (`raw` was built before the fork) and touches
    // no locks. The fds it duplicates stay open in the parent until `cmd` (which owns `fds`) is dropped,
    // which happens after spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            let _keep_alive = &fds;
            // First move every source above the target range (so a source that happens to sit on a
            // target number is not clobbered), then dup2 onto the targets, which clears CLOEXEC.
            let mut tmp = [0 as RawFd; 16];
            if raw.len() > tmp.len() {
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
            for (i, (src, _)) in raw.iter().enumerate() {
                let t = libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, 100);
                if t < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                tmp[i] = t;
            }
            for (i, (_, dst)) in raw.iter().enumerate() {
                if libc::dup2(tmp[i], *dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Move the child into cgroups before it executes: for each file (an open `cgroup.procs` of the
/// target cgroup, e.g. from [`crate::delegation::ContextCgroup::procs_files`]) the child writes
/// `0` ("myself"), so everything the program allocates is charged there from its first
/// instruction. A failed write fails the spawn. The parent's copies are closed when `cmd` is
/// dropped.
pub fn join_cgroups_on_exec(cmd: &mut std::process::Command, files: Vec<std::fs::File>) {
    let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure runs in the forked child before exec and only calls write(2), which is
    // async-signal-safe; it allocates nothing (`raw` was built before the fork) and takes no
    // locks. The fds stay open until `cmd`, which owns `files`, is dropped after the spawn.
    unsafe {
        cmd.pre_exec(move || {
            let _keep_alive = &files;
            for fd in &raw {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// A pipe whose both ends are close-on-exec: `(read end, write end)`. Hand an end to a child with
/// [`map_fds`] or `Stdio::from`.
pub fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// Send `signal` to every process in the process group `pgid`. A group that no longer exists is not
/// an error.
pub fn signal_group(pgid: i32, signal: Signal) -> Result<(), ProcessError> {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(nix::Error::ESRCH) => Ok(()),
        Err(source) => Err(ProcessError::Signal {
            pgid,
            signal,
            source,
        }),
    }
}

/// Make the calling process a child subreaper: orphaned descendants (e.g. a sandbox's PID 1 once
/// its launcher has exited) are re-parented to it instead of the host's init, so it can reap them
/// with [`try_reap`]. Affects the whole process.
pub fn set_child_subreaper() -> std::io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
}

/// Set whether the calling process is "dumpable". A non-dumpable process cannot be inspected
/// through `/proc/<pid>/mem`, `environ` and friends (nor ptraced) by other processes of the same
/// uid: a sandbox's agent runs as the same user as the code it executes, so it should make itself
/// non-dumpable. Reset to dumpable by `execve` of a readable binary.
pub fn set_dumpable(dumpable: bool) -> std::io::Result<()> {
    nix::sys::prctl::set_dumpable(dumpable).map_err(std::io::Error::from)
}

/// Set the calling thread's name (for the main thread: the process's `comm`, what `ps -o comm`
/// and `top` show; at most 15 bytes). A program executed from a memfd is otherwise called
/// `memfd:<name>`.
pub fn set_name(name: &std::ffi::CStr) -> std::io::Result<()> {
    nix::sys::prctl::set_name(name).map_err(std::io::Error::from)
}

/// How a reaped process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Reap `pid` if it has exited (non-blocking): `Ok(None)` while it runs. `pid` must be a child (or
/// an adopted orphan, see [`set_child_subreaper`]) of the calling process.
pub fn try_reap(pid: i32) -> std::io::Result<Option<Exit>> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Ok(Some(Exit::Code(code))),
        Ok(WaitStatus::Signaled(_, sig, _)) => Ok(Some(Exit::Signal(sig as i32))),
        Ok(_) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Reap the child `pid`, waiting up to `limit` for it to exit (e.g. after its cgroup was killed):
/// `Ok(None)` if it still runs then. Fails with `ECHILD` when it is not a child of the caller (or
/// was reaped already).
pub fn reap_within(pid: i32, limit: std::time::Duration) -> std::io::Result<Option<Exit>> {
    let deadline = std::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        if let Some(exit) = try_reap(pid)? {
            return Ok(Some(exit));
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}

/// Open a pidfd for `pid` (close-on-exec): a handle that keeps naming that very process even
/// after its pid is reused, becomes readable when it exits, and can be waited for with
/// [`crate::fdpass::reap_pidfd`] if it is a child of the caller.
/// `SIGKILL` to the process behind `pidfd` (`pidfd_send_signal`: never another process, even if
/// its pid has been reused).
pub fn pidfd_kill(pidfd: impl std::os::fd::AsFd) -> std::io::Result<()> {
    crate::sys::pidfd_signal(pidfd.as_fd(), libc::SIGKILL)
}

/// The pid of the process behind `pidfd` in the caller's pid namespace (`Pid:` of its
/// `/proc/self/fdinfo` entry), `None` once it has been reaped.
pub fn pidfd_pid(pidfd: impl std::os::fd::AsFd) -> std::io::Result<Option<i32>> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_fd().as_raw_fd()))?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i32>().ok());
    Ok(pid.filter(|p| *p > 0))
}

pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) takes a pid and flags by value and touches no memory of ours; it
    // returns a new fd (which we own from here on) or -1 with errno.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// This process's `RLIMIT_NOFILE`: (soft, hard).
pub fn nofile_limit() -> std::io::Result<(u64, u64)> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_err(std::io::Error::from)
}

/// Set this process's soft `RLIMIT_NOFILE` to `soft` (at most the hard limit), keeping the hard
/// one. Children started afterwards inherit it.
pub fn set_nofile_soft(soft: u64) -> std::io::Result<()> {
    let (_, hard) = nofile_limit()?;
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        soft.min(hard),
        hard,
    )
    .map_err(std::io::Error::from)
}

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit (a server should not live with
/// the inherited 1024); returns the new soft limit.
pub fn raise_nofile_to_hard() -> std::io::Result<u64> {
    let (_, hard) = nofile_limit()?;
    // An unlimited hard limit still stops at the kernel's per-process maximum.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    set_nofile_soft(hard.min(nr_open))?;
    Ok(nofile_limit()?.0)
}

/// Make a FIFO (named pipe) at `path` with `mode`, replacing whatever file was there. For a
/// sandbox's host-side logs: the launcher hands the write end to the sandbox and the server drains
/// the read end, so what the sandbox writes is bounded by the reader, not by the disk.
pub fn make_fifo(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(mode))
        .map_err(std::io::Error::from)
}

/// The end of a helper process (`lizard sandbox-init`, `lizard context-fork`): `reply` as one JSON
/// line on stdout, then exit 1 if it says a failure (`failed`), else 0.
pub fn reply_and_exit<T: serde::Serialize>(reply: &T, failed: bool) -> ! {
    use std::io::Write;
    let mut line = serde_json::to_string(reply)
        .unwrap_or_else(|_| r#"{"error":"cannot serialize the reply"}"#.to_string());
    line.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
    std::process::exit(i32::from(failed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::{Command, Stdio};

    #[test]
    fn mapped_fd_is_visible_at_its_number() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo mapped >&5"]).stdout(Stdio::null());
        map_fds(&mut cmd, vec![(w, 5)]);
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        assert_eq!(out, "mapped\n");
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn reap_within_waits_for_the_exit_and_no_longer() {
        let child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let pid = child.id() as i32;
        // Reaped below, by pid.
        std::mem::forget(child);
        assert_eq!(
            reap_within(pid, std::time::Duration::from_secs(30)).unwrap(),
            Some(Exit::Code(0))
        );
        assert!(reap_within(pid, std::time::Duration::from_secs(1)).is_err());
        let mut long = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = long.id() as i32;
        assert_eq!(
            reap_within(pid, std::time::Duration::from_millis(50)).unwrap(),
            None
        );
        long.kill().unwrap();
        long.wait().unwrap();
    }

    #[test]
    fn signalling_a_gone_group_is_ok() {
        let mut child = Command::new("true").process_group(0).spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        signal_group(pid, Signal::SIGTERM).unwrap();
    }
}
