//! Pseudo-terminals: open a master/slave pair, set its window size, and make the slave the
//! controlling terminal of a child (new session + `TIOCSCTTY`).
//!
//! Both ends are opened close-on-exec (so a concurrently spawned process never inherits a terminal
//! it does not own) and the master is non-blocking (ready for an async reactor). Not here: reading,
//! writing, or what runs on the terminal.

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;

/// A new terminal pair. Give `slave` (or clones of it) to the child as stdin/stdout/stderr and keep
/// `master`: what the child writes is read from it, what is written to it is the child's input.
#[derive(Debug)]
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Open a pseudo-terminal of `cols` × `rows` cells.
pub fn open(cols: u16, rows: u16) -> io::Result<Pty> {
    let master =
        posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let master = OwnedFd::from(master);
    set_window_size(std::os::fd::AsFd::as_fd(&master), cols, rows)?;
    Ok(Pty { master, slave })
}

/// Set the terminal's size (`TIOCSWINSZ`); the foreground process group gets `SIGWINCH`.
pub fn set_window_size(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `struct winsize` from the pointer, which points to a properly
    // initialised local that lives for the duration of the call; `fd` is a valid borrowed fd.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The terminal's size (`TIOCGWINSZ`) as `(cols, rows)`.
pub fn window_size(fd: BorrowedFd<'_>) -> io::Result<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `struct winsize` through the pointer, which points to a local
    // of exactly that type living for the duration of the call; `fd` is a valid borrowed fd.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((size.ws_col, size.ws_row))
}

/// Make the child start a new session and take its stdin (which must be the terminal's slave, set
/// through `Stdio`) as its controlling terminal. The child is then the leader of its own session and
/// process group (pgid = pid), so do not also set `process_group` on `cmd` (`setsid` would fail).
pub fn make_controlling_terminal(cmd: &mut std::process::Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only setsid(2) and
    // ioctl(2), which are async-signal-safe; it allocates nothing and touches no locks. The ioctl
    // argument is an integer (0: do not steal a terminal that is another session's).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The terminal on stdin, in raw mode (no echo, no line editing, no signals from keys) until
/// dropped, when its previous settings come back. For a CLI that forwards keystrokes to a remote
/// terminal.
pub struct RawMode {
    saved: nix::sys::termios::Termios,
}

impl RawMode {
    /// Put stdin's terminal in raw mode; an error when stdin is not a terminal.
    pub fn stdin() -> io::Result<RawMode> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let saved = tcgetattr(std::io::stdin()).map_err(io::Error::from)?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(std::io::stdin(), SetArg::TCSANOW, &raw).map_err(io::Error::from)?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.saved,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::process::{Command, Stdio};

    #[test]
    fn child_sees_a_terminal_of_the_given_size() {
        let pty = open(100, 30).unwrap();
        assert_eq!(window_size(pty.master.as_fd()).unwrap(), (100, 30));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "stty size; test -t 0 && echo tty; echo done"])
            .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave.try_clone().unwrap()));
        make_controlling_terminal(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        drop(pty.slave);
        assert!(child.wait().unwrap().success());
        // Blocking read is fine: the child is gone; EIO marks the end.
        let mut master = std::fs::File::from(pty.master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match master.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        let out = String::from_utf8_lossy(&out);
        assert!(out.contains("30 100"), "{out:?}");
        assert!(out.contains("tty"), "{out:?}");
        assert!(out.contains("done"), "{out:?}");
    }
}
