//! Passing file descriptors between processes: a `SOCK_SEQPACKET` Unix socket pair and messages
//! that carry fds as `SCM_RIGHTS`, plus waiting on a process through its pidfd.
//!
//! The agent uses these to talk to the Python zygote (`kernels/PROTOCOL.md`): it sends a kernel's
//! protocol pipes with each fork request and gets back the new kernel's pidfd. Not here: what the
//! messages mean, or any async plumbing (callers wrap the non-blocking end in their runtime).

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

/// At most this many fds travel with one message.
pub const MAX_FDS: usize = 8;

/// A connected `SOCK_SEQPACKET` pair, both ends close-on-exec: `(ours, theirs)`. `ours` is
/// non-blocking (for an async runtime); `theirs` is blocking (hand it to a child with
/// [`crate::map_fds`]).
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let flags = nix::fcntl::fcntl(&a, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&a, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok((a, b))
}

/// A `SOCK_SEQPACKET` socket listening at `path` (close-on-exec, non-blocking, backlog 4), for a
/// process that is to connect and then talk as over [`seqpacket_pair`]. The caller makes and
/// guards the directory; a file already at `path` is an error.
pub fn seqpacket_listener(path: &std::path::Path) -> io::Result<OwnedFd> {
    use nix::sys::socket::{bind, listen, socket, Backlog, UnixAddr};
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(io::Error::from)?;
    let addr = UnixAddr::new(path).map_err(io::Error::from)?;
    bind(sock.as_raw_fd(), &addr).map_err(io::Error::from)?;
    listen(&sock, Backlog::new(4).map_err(io::Error::from)?).map_err(io::Error::from)?;
    Ok(sock)
}

/// The next connection on a [`seqpacket_listener`] (close-on-exec, non-blocking; `WouldBlock`
/// when there is none yet).
pub fn accept(listener: impl AsFd) -> io::Result<OwnedFd> {
    let raw = nix::sys::socket::accept4(
        listener.as_fd().as_raw_fd(),
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )
    .map_err(io::Error::from)?;
    // SAFETY: accept4 returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// [`recv_with_fds`], waiting at most `limit` for a message (`TimedOut` after that): for a peer
/// that must not be able to hang the caller.
pub fn recv_within(
    sock: impl AsFd,
    buf: &mut [u8],
    limit: std::time::Duration,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = std::time::Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match recv_with_fds(&sock, buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// Who is at the other end of a connected Unix socket, as the kernel saw it when it connected:
/// its uid and a pidfd of it (`SO_PEERCRED`, `SO_PEERPIDFD`: the pidfd names that very process,
/// whatever happens to its pid later).
pub fn peer(sock: impl AsFd) -> io::Result<(u32, OwnedFd)> {
    use nix::sys::socket::{getsockopt, sockopt};
    let creds = getsockopt(&sock, sockopt::PeerCredentials).map_err(io::Error::from)?;
    let pidfd = getsockopt(&sock, sockopt::PeerPidfd).map_err(io::Error::from)?;
    Ok((creds.uid(), pidfd))
}

/// Send one message with `fds` attached (without blocking: `WouldBlock` when the socket is full).
/// The fds stay open here; the receiver gets its own copies.
pub fn send_with_fds(sock: impl AsFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many fds for one message",
        ));
    }
    let iov = [IoSlice::new(data)];
    let cmsgs = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsgs };
    let n = sendmsg::<()>(
        sock.as_fd().as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    if n != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "message sent in part",
        ));
    }
    Ok(())
}

/// Receive one message (at most `buf.len()` bytes) and the fds that came with it (close-on-exec,
/// owned by the caller), without blocking. `Ok((0, []))` means the peer closed its end.
pub fn recv_with_fds(sock: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(
        sock.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut fds = Vec::new();
    let truncated =
        msg.flags.contains(MsgFlags::MSG_CTRUNC) || msg.flags.contains(MsgFlags::MSG_TRUNC);
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed `fd` in this process for this message
                // (SCM_RIGHTS); nothing else refers to it, so taking ownership is sound.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    let n = msg.bytes;
    if truncated {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message or its fds truncated",
        ));
    }
    Ok((n, fds))
}

/// The first byte waiting on stream socket `sock`, without taking it and without blocking
/// (`WouldBlock` when none is there yet; `Ok(None)` when the peer closed its end). Descriptors that
/// came with it are not taken (their peeked copies are closed).
pub fn peek_first_byte(sock: impl AsFd) -> io::Result<Option<u8>> {
    let mut b = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut b)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(
        sock.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed `fd` (a peeked copy) for this call; nothing
                // else refers to it: closing it is sound.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    let n = msg.bytes;
    Ok((n > 0).then_some(b[0]))
}

/// How a process waited for through its pidfd ended.
pub use crate::process::Exit;

/// Reap the process behind `pidfd` if it has exited (non-blocking): `Ok(None)` while it runs.
/// Fails with `ECHILD` when it is not a child of the calling process (then only the pidfd's
/// readability tells that it ended). A pidfd becomes readable when its process exits.
pub fn reap_pidfd(pidfd: impl AsFd) -> io::Result<Option<Exit>> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    match waitid(
        Id::PIDFd(pidfd.as_fd()),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG,
    ) {
        Ok(WaitStatus::Exited(_, code)) => Ok(Some(Exit::Code(code))),
        Ok(WaitStatus::Signaled(_, sig, _)) => Ok(Some(Exit::Signal(sig as i32))),
        Ok(_) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn fds_travel_with_a_message() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = crate::cloexec_pipe().unwrap();
        send_with_fds(&b, b"hello", &[w.as_raw_fd()]).unwrap();
        drop(w);
        let mut buf = [0u8; 64];
        let (n, fds) = recv_with_fds(&a, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        f.write_all(b"via the passed fd").unwrap();
        drop(f);
        let mut s = String::new();
        std::fs::File::from(r).read_to_string(&mut s).unwrap();
        assert_eq!(s, "via the passed fd");
        // Empty socket: WouldBlock, not a hang; closed peer: zero bytes.
        let e = recv_with_fds(&a, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(b);
        // Another test forking meanwhile may hold a copy of `b` until its child execs (the fd is
        // close-on-exec): wait for the last copy to go.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match recv_with_fds(&a, &mut buf) {
                Ok((n, _)) => {
                    assert_eq!(n, 0);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the peer never closed"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn pidfd_reaps_a_child_with_its_status() {
        // Reaped through the pidfd below, not through `Child::wait`.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        let pidfd = crate::process::pidfd_open(child.id() as i32).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match reap_pidfd(&pidfd).unwrap() {
                Some(exit) => {
                    assert_eq!(exit, Exit::Code(7));
                    break;
                }
                None => {
                    assert!(std::time::Instant::now() < deadline, "child never exited");
                    std::thread::yield_now();
                }
            }
        }
    }
}
