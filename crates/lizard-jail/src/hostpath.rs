//! Host paths the host may trust, and the agent's channel through one.
//!
//! Host-side code (the server, the launcher) runs as host root next to sandboxes whose files are in
//! the attacker's hands. A path that a sandbox can write (its disk image, its run dir) must never be
//! resolved by the host: a symlink planted there sends root anywhere (another sandbox's agent, a
//! host socket). The agent's Unix socket therefore lives in a directory only root can write
//! (`<data>/sandboxes/<id>/agent.sock`) and every step to it is checked:
//!
//! - [`TrustedDir::open`] walks a path from `/` one component at a time (`O_PATH|O_NOFOLLOW`, no
//!   symlink followed, no `..`) and checks that each directory is owned by root and writable by
//!   nobody else (an ancestor may be a sticky root-owned directory such as `/tmp`); later
//!   operations go through the open descriptor (`/proc/self/fd/<n>/<name>`), so renaming an
//!   ancestor afterwards changes nothing;
//! - [`bind_unix_listener`] (the launcher, for `SandboxSpec::inherit_fds`) makes the socket there:
//!   bound, mode 0600, *not* listening, so the program that calls `listen(2)` is what a client's
//!   `SO_PEERCRED` names;
//! - [`unix_socket_entry`] (the server, before connecting) checks that the entry is a socket owned
//!   by root and returns the path to connect to through the trusted directory;
//! - [`take_unix_listener`] (the agent) adopts such an inherited socket by fd number, checks that it
//!   is an `AF_UNIX` stream socket and listens on it.
//!
//! Not here: what travels over the socket, or which pid the peer must be (the server checks the
//! peer's credentials against the sandbox's PID 1).

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::socket::{AddressFamily, Backlog, SockFlag, SockType, SockaddrLike, UnixAddr};
use nix::sys::stat::{FileStat, Mode, SFlag};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

/// Why a host path cannot be trusted or used.
#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error("{path}: {reason}")]
    Untrusted { path: PathBuf, reason: String },
    #[error(transparent)]
    Io(#[from] crate::StepIo),
}

fn untrusted(path: &Path, reason: impl Into<String>) -> HostPathError {
    HostPathError::Untrusted {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> HostPathError + 'a {
    move |e| {
        HostPathError::Io(crate::StepIo {
            step,
            path: path.to_path_buf(),
            source: e.into(),
        })
    }
}

/// A directory reached from `/` without following any symlink, every component owned by root and
/// writable by root only (ancestors: or sticky), held open.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a directory on the way must look like: root's, not writable by group or others (the last
/// one), or else sticky (an ancestor like `/tmp`, where nobody can rename root's entries).
fn check_dir(st: &FileStat, path: &Path, last: bool) -> Result<(), HostPathError> {
    if SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT) != SFlag::S_IFDIR {
        return Err(untrusted(path, "not a directory"));
    }
    if st.st_uid != 0 {
        return Err(untrusted(
            path,
            format!("owned by uid {}, not root", st.st_uid),
        ));
    }
    let writable_by_others = st.st_mode & 0o022 != 0;
    let sticky = st.st_mode & libc::S_ISVTX != 0;
    if writable_by_others && (last || !sticky) {
        return Err(untrusted(
            path,
            format!("mode {:o} lets others write in it", st.st_mode & 0o7777),
        ));
    }
    Ok(())
}

impl TrustedDir {
    /// Open the absolute directory `path` (see the module docs for the checks).
    pub fn open(path: &Path) -> Result<TrustedDir, HostPathError> {
        if !path.is_absolute() {
            return Err(untrusted(path, "not an absolute path"));
        }
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut fd =
            nix::fcntl::open("/", flags, Mode::empty()).map_err(io_err("opening", path))?;
        let names: Vec<&OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(Ok(n)),
                Component::RootDir | Component::CurDir => None,
                Component::ParentDir | Component::Prefix(_) => Some(Err(())),
            })
            .collect::<Result<_, ()>>()
            .map_err(|()| untrusted(path, "contains .."))?;
        let st = nix::sys::stat::fstat(&fd).map_err(io_err("stat", Path::new("/")))?;
        check_dir(&st, Path::new("/"), names.is_empty())?;
        let mut walked = PathBuf::from("/");
        for (i, name) in names.iter().enumerate() {
            walked.push(name);
            // O_NOFOLLOW with O_PATH opens a symlink itself: the type check below refuses it.
            fd = nix::fcntl::openat(&fd, *name, flags, Mode::empty())
                .map_err(io_err("opening", &walked))?;
            let st = nix::sys::stat::fstat(&fd).map_err(io_err("stat", &walked))?;
            check_dir(&st, &walked, i + 1 == names.len())?;
        }
        Ok(TrustedDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory's path as given to [`TrustedDir::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path naming `name` in this very directory (through `/proc/self/fd`), whatever happens to
    /// the directory's ancestors meanwhile. Valid while `self` lives.
    pub fn entry_path(&self, name: &OsStr) -> PathBuf {
        Path::new(&format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name)
    }

    /// `lstat` of the entry `name` (a symlink is not followed).
    pub fn stat_entry(&self, name: &OsStr) -> Result<FileStat, HostPathError> {
        nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(io_err("stat", &self.path.join(name)))
    }

    /// Remove the entry `name` (not a directory) if it exists.
    pub fn remove_entry(&self, name: &OsStr) -> Result<(), HostPathError> {
        match nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
            Err(e) => Err(io_err("removing", &self.path.join(name))(e)),
        }
    }

    /// Make sure the entry `name` is a directory (created when missing) owned by `uid:gid` with
    /// `mode`, changed through a descriptor opened without following a symlink: a symlink or
    /// anything else but a directory at `name` is refused, never followed.
    pub fn own_subdir(
        &self,
        name: &OsStr,
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> Result<(), HostPathError> {
        let path = self.path.join(name);
        match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(io_err("creating", &path)(e)),
        }
        let fd = nix::fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err("opening", &path))?;
        nix::unistd::fchown(
            &fd,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .map_err(io_err("chown", &path))?;
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(io_err("chmod", &path))
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Split `path` into its trusted parent directory and its file name.
fn parent_and_name(path: &Path) -> Result<(TrustedDir, &OsStr), HostPathError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(untrusted(path, "has no parent directory or no file name"));
    };
    Ok((TrustedDir::open(parent)?, name))
}

/// Longest file name [`bind_unix_listener`] accepts (the bound path, `/proc/self/fd/<n>/<name>`,
/// must fit in `sun_path`).
pub const MAX_SOCKET_NAME: usize = 64;

/// Create an `AF_UNIX SOCK_STREAM` socket (close-on-exec) bound at `path`, mode 0600, not
/// listening. `path`'s parent must be a [`TrustedDir`]; an old entry there is removed first.
pub fn bind_unix_listener(path: &Path) -> Result<OwnedFd, HostPathError> {
    let (dir, name) = parent_and_name(path)?;
    if name.len() > MAX_SOCKET_NAME {
        return Err(untrusted(path, "file name too long for a socket"));
    }
    dir.remove_entry(name)?;
    let sock = nix::sys::socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io_err("creating a socket", path))?;
    let addr = UnixAddr::new(&dir.entry_path(name)).map_err(io_err("socket address", path))?;
    nix::sys::socket::bind(sock.as_raw_fd(), &addr).map_err(io_err("binding", path))?;
    // The directory is root's alone: nobody can have swapped the entry since the bind.
    nix::sys::stat::fchmodat(
        &dir.fd,
        name,
        Mode::from_bits_truncate(0o600),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(io_err("chmod", path))?;
    Ok(sock)
}

/// [`bind_unix_listener`], with the socket made in the network namespace of the process behind
/// `pidfd` (a sandbox's PID 1: a socket belongs to the namespace it is made in, and a CRIU
/// checkpoint of the sandbox must find it there; a pidfd, unlike a pid, cannot come to name
/// another process). A short-lived thread of its own enters that namespace (`setns` on the pidfd)
/// for the `socket()` call and ends (network namespaces are per thread: no other thread is
/// affected, and none is left in the sandbox's; host root may enter any). The path is resolved in
/// the caller's own mount namespace (threads share it).
pub fn bind_unix_listener_in_netns_of(
    pidfd: OwnedFd,
    path: &Path,
) -> Result<OwnedFd, HostPathError> {
    let owned = path.to_path_buf();
    std::thread::spawn(move || {
        nix::sched::setns(&pidfd, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(io_err("entering the sandbox's network namespace", &owned))?;
        bind_unix_listener(&owned)
    })
    .join()
    .unwrap_or_else(|_| Err(untrusted(path, "the socket thread panicked")))
}

/// Put the not-yet-listening socket `sock` (from [`bind_unix_listener_in_netns_of`], received by
/// the agent) at fd number `at` (whatever was there is closed first: the caller has dropped its
/// old listener there) and take it as a listener there ([`take_unix_listener`]: checked, `listen`
/// called by the caller, so its clients' `SO_PEERCRED` names the caller).
pub fn unix_listener_onto(
    sock: OwnedFd,
    at: RawFd,
) -> io::Result<std::os::unix::net::UnixListener> {
    if at < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an inherited descriptor number (must be >= 3)",
        ));
    }
    if sock.as_raw_fd() != at {
        // SAFETY: `at` is a descriptor number the caller owns and has closed (or that is unused);
        // dup2 makes it a copy of `sock`, which we then close, so `at` is the only one left and
        // `take_unix_listener` takes ownership of it.
        let r = unsafe { libc::dup2(sock.as_raw_fd(), at) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        drop(sock);
    } else {
        // Already there: ownership passes to the listener below.
        std::mem::forget(sock);
    }
    take_unix_listener(at)
}

/// Check that `path` is a socket owned by root in a [`TrustedDir`] and return that directory and
/// the path to connect to through it (valid while the directory is held).
pub fn unix_socket_entry(path: &Path) -> Result<(TrustedDir, PathBuf), HostPathError> {
    let (dir, name) = parent_and_name(path)?;
    let st = dir.stat_entry(name)?;
    if SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT) != SFlag::S_IFSOCK {
        return Err(untrusted(path, "not a socket"));
    }
    if st.st_uid != 0 {
        return Err(untrusted(path, format!("owned by uid {}", st.st_uid)));
    }
    let target = dir.entry_path(name);
    Ok((dir, target))
}

/// Take the inherited socket at fd number `fd` (e.g. 3, handed over through
/// `SandboxSpec::inherit_fds`), check that it is an `AF_UNIX` stream socket, mark it
/// close-on-exec and `listen` on it. Call once per fd: the returned listener owns it.
pub fn take_unix_listener(fd: RawFd) -> io::Result<std::os::unix::net::UnixListener> {
    let invalid =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("fd {fd}: {why}"));
    if fd < 3 {
        return Err(invalid("not an inherited descriptor (must be >= 3)"));
    }
    // Is it open at all? (F_GETFD fails with EBADF otherwise.)
    // SAFETY: the fd is only borrowed for this call; fcntl(F_GETFD) reads its flags.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    nix::fcntl::fcntl(borrowed, nix::fcntl::FcntlArg::F_GETFD).map_err(io::Error::from)?;
    let st = nix::sys::stat::fstat(borrowed).map_err(io::Error::from)?;
    if SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT) != SFlag::S_IFSOCK {
        return Err(invalid("not a socket"));
    }
    let ty = nix::sys::socket::getsockopt(&borrowed, nix::sys::socket::sockopt::SockType)
        .map_err(io::Error::from)?;
    if ty != SockType::Stream {
        return Err(invalid("not a stream socket"));
    }
    let local: nix::sys::socket::SockaddrStorage =
        nix::sys::socket::getsockname(fd).map_err(io::Error::from)?;
    if local.family() != Some(AddressFamily::Unix) {
        return Err(invalid("not an AF_UNIX socket"));
    }
    // SAFETY: the fd was inherited from the launcher at this number, is open (checked above) and is
    // a socket; by this function's contract nothing else in the process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(io::Error::from)?;
    nix::sys::socket::listen(&owned, Backlog::new(1024).unwrap_or(Backlog::MAXCONN))
        .map_err(io::Error::from)?;
    Ok(std::os::unix::net::UnixListener::from(owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_socket_is_made_in_the_netns_of_a_pidfd() {
        lizard_test_support::needs_root!();
        // A process in a network namespace of its own (`unshare -n`).
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["-n", "sleep", "60"])
            .spawn()
        else {
            return;
        };
        let pid = child.id() as i32;
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // `unshare` has execed `sleep` in the new namespace once its netns differs.
        while std::fs::read_link(format!("/proc/{pid}/ns/net"))
            .ok()
            .as_ref()
            == Some(&own)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "unshare -n did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let pidfd = crate::process::pidfd_open(pid).unwrap();
        let t = root_dir();
        let path = t.path().join("agent.sock.new");
        let sock = bind_unix_listener_in_netns_of(pidfd, &path).unwrap();
        // Listed among the Unix sockets of the child's namespace, not among ours.
        let name = "/agent.sock.new";
        let theirs = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap();
        let ours = std::fs::read_to_string("/proc/self/net/unix").unwrap();
        assert!(theirs.lines().any(|l| l.ends_with(name)), "{theirs}");
        assert!(!ours.lines().any(|l| l.ends_with(name)), "{ours}");
        // Bound at the host path, reachable once listening (a Unix path is not per namespace).
        let fd = nix::fcntl::fcntl(&sock, nix::fcntl::FcntlArg::F_DUPFD(10)).unwrap();
        drop(sock);
        let listener = take_unix_listener(fd).unwrap();
        let (_dir, target) = unix_socket_entry(&path).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&target).unwrap();
        let _ = listener.accept().unwrap();
        // The calling thread stayed in its own namespace.
        assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), own);
        let _ = child.kill();
        let _ = child.wait();
    }

    fn root_dir() -> tempfile::TempDir {
        // tempfile makes 0700 directories; under /tmp (root's, sticky) when run as root.
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn trusted_dirs_refuse_symlinks_and_writable_components() {
        lizard_test_support::needs_root!();
        let t = root_dir();
        let good = t.path().join("good");
        std::fs::create_dir(&good).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
        TrustedDir::open(&good).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(TrustedDir::open(&link).is_err());
        assert!(TrustedDir::open(&link.join("x")).is_err());
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(TrustedDir::open(&open).is_err());
        // Sticky and world-writable is fine on the way (like /tmp), not as the last one.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(TrustedDir::open(&open).is_err());
        let inner = open.join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o700)).unwrap();
        TrustedDir::open(&inner).unwrap();
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(1000), None).unwrap();
        assert!(TrustedDir::open(&theirs).is_err());
        assert!(TrustedDir::open(Path::new("relative")).is_err());
        assert!(TrustedDir::open(&good.join("..").join("good")).is_err());
    }

    #[test]
    fn a_bound_listener_is_a_private_socket_that_accepts_once_listening() {
        lizard_test_support::needs_root!();
        let t = root_dir();
        let path = t.path().join("agent.sock");
        std::fs::write(&path, "old").unwrap();
        let sock = bind_unix_listener(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Not listening yet: a connect is refused.
        let (_dir, target) = unix_socket_entry(&path).unwrap();
        assert!(std::os::unix::net::UnixStream::connect(&target).is_err());
        // Listening (as the program does with its inherited fd): connects.
        let fd = nix::fcntl::fcntl(&sock, nix::fcntl::FcntlArg::F_DUPFD(10)).unwrap();
        drop(sock);
        let listener = take_unix_listener(fd).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&target).unwrap();
        let (_conn, _) = listener.accept().unwrap();
        // A symlink in its place is not a socket entry.
        let link = t.path().join("link.sock");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(unix_socket_entry(&link).is_err());
    }

    #[test]
    fn owned_subdirs_never_follow_a_symlink() {
        lizard_test_support::needs_root!();
        let t = root_dir();
        let dir = TrustedDir::open(t.path()).unwrap();
        dir.own_subdir(OsStr::new("run"), 1000, 1001, 0o755)
            .unwrap();
        let meta = std::fs::metadata(t.path().join("run")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (1000, 1001, 0o755)
        );
        // Again (it exists): fine.
        dir.own_subdir(OsStr::new("run"), 1000, 1000, 0o755)
            .unwrap();
        let target = t.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let before = std::fs::metadata(&target).unwrap().mode();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        assert!(dir
            .own_subdir(OsStr::new("link"), 1000, 1000, 0o777)
            .is_err());
        let meta = std::fs::metadata(&target).unwrap();
        assert_eq!((meta.uid(), meta.mode()), (0, before));
    }

    #[test]
    fn only_unix_stream_sockets_are_taken() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let fd = nix::fcntl::fcntl(&r, nix::fcntl::FcntlArg::F_DUPFD(20)).unwrap();
        assert!(take_unix_listener(fd).is_err());
        let _ = nix::unistd::close(fd);
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = nix::fcntl::fcntl(&udp, nix::fcntl::FcntlArg::F_DUPFD(20)).unwrap();
        assert!(take_unix_listener(fd).is_err());
        let _ = nix::unistd::close(fd);
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = nix::fcntl::fcntl(&tcp, nix::fcntl::FcntlArg::F_DUPFD(20)).unwrap();
        assert!(take_unix_listener(fd).is_err());
        let _ = nix::unistd::close(fd);
        assert!(take_unix_listener(2).is_err());
    }
}
