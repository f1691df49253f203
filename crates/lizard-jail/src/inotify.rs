//! Filesystem change notification (inotify): a non-blocking, close-on-exec instance, watches on
//! paths, and decoding of the events it delivers.
//!
//! The caller reads the instance's fd however it likes (e.g. asynchronously through a dup of
//! [`Inotify::fd`]) and decodes what it read with [`parse`]; [`Inotify::read`] does both for
//! synchronous callers. Not here: recursion over directory trees, mapping watches back to paths, or
//! event semantics (the agent's `files` module does that).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// A read buffer this large always holds at least one event (header + `NAME_MAX` + NUL).
pub const MIN_READ_BUFFER: usize = 16 + 256;

/// One inotify instance. Its fd is readable (for `poll`/`epoll`) when events are waiting.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

/// A watch on one path, as returned by [`Inotify::watch`] and named in [`Event::watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Watch(pub i32);

/// What happened, as flags (an event can carry several, e.g. `create` and `is_dir`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mask {
    pub create: bool,
    pub modify: bool,
    pub attrib: bool,
    pub delete: bool,
    pub delete_self: bool,
    pub moved_from: bool,
    pub moved_to: bool,
    pub move_self: bool,
    pub is_dir: bool,
    /// The kernel's queue overflowed: events were lost.
    pub overflow: bool,
    /// The watch was removed (its path was deleted or unmounted).
    pub ignored: bool,
}

impl Mask {
    fn from_bits(m: u32) -> Mask {
        let has = |bit: u32| m & bit != 0;
        Mask {
            create: has(libc::IN_CREATE),
            modify: has(libc::IN_MODIFY),
            attrib: has(libc::IN_ATTRIB),
            delete: has(libc::IN_DELETE),
            delete_self: has(libc::IN_DELETE_SELF),
            moved_from: has(libc::IN_MOVED_FROM),
            moved_to: has(libc::IN_MOVED_TO),
            move_self: has(libc::IN_MOVE_SELF),
            is_dir: has(libc::IN_ISDIR),
            overflow: has(libc::IN_Q_OVERFLOW),
            ignored: has(libc::IN_IGNORED),
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub watch: Watch,
    pub mask: Mask,
    /// Pairs a `moved_from` with its `moved_to`.
    pub cookie: u32,
    /// The entry inside a watched directory; `None` for the watched path itself.
    pub name: Option<OsString>,
}

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: inotify_init1 takes only flags and returns a new fd (or -1), which is owned
        // right away.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Inotify { fd })
    }

    /// The instance's fd (non-blocking), to read events from.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Watch `path` (a directory: changes to its entries; a file: changes to it) for creation,
    /// modification, attribute changes, deletion and renames. Watching a path twice returns the
    /// same watch.
    pub fn watch(&self, path: &Path) -> io::Result<Watch> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mask = libc::IN_CREATE
            | libc::IN_MODIFY
            | libc::IN_ATTRIB
            | libc::IN_DELETE
            | libc::IN_DELETE_SELF
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_MOVE_SELF
            | libc::IN_EXCL_UNLINK;
        // SAFETY: `c` is a NUL-terminated string that outlives the call; the fd is ours.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Watch(wd))
    }

    /// Stop watching (an already removed watch is not an error).
    pub fn unwatch(&self, w: Watch) {
        // SAFETY: integer arguments only; an unknown watch fails with EINVAL, which is ignored.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), w.0) };
    }

    /// The events waiting now; `WouldBlock` when there are none.
    pub fn read(&self) -> io::Result<Vec<Event>> {
        let mut buf = vec![0u8; 64 * 1024];
        let n = nix::unistd::read(&self.fd, &mut buf)?;
        Ok(parse(&buf[..n]))
    }
}

/// Decode what one `read(2)` of an inotify fd returned (the kernel returns whole events only).
pub fn parse(mut buf: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while buf.len() >= 16 {
        let wd = word(buf, 0) as i32;
        let mask = word(buf, 4);
        let cookie = word(buf, 8);
        let len = word(buf, 12) as usize;
        let Some(name) = buf.get(16..16 + len) else {
            break;
        };
        let name = name.split(|b| *b == 0).next().unwrap_or_default();
        out.push(Event {
            watch: Watch(wd),
            mask: Mask::from_bits(mask),
            cookie,
            name: (!name.is_empty()).then(|| OsString::from_vec(name.to_vec())),
        });
        buf = &buf[16 + len..];
    }
    out
}

// `parse` relies on the kernel's header layout: wd, mask, cookie, len (4 bytes each), then the name.
const _: () = assert!(std::mem::size_of::<libc::inotify_event>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_create_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let ino = Inotify::new().unwrap();
        let w = ino.watch(dir.path()).unwrap();
        assert_eq!(
            ino.read().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "nothing yet"
        );
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::remove_file(dir.path().join("a")).unwrap();
        let evs = ino.read().unwrap();
        assert!(evs
            .iter()
            .any(|e| e.watch == w && e.mask.create && e.name.as_deref() == Some("a".as_ref())));
        assert!(evs.iter().any(|e| e.mask.create && e.mask.is_dir));
        assert!(evs.iter().any(|e| e.mask.delete));
        ino.unwatch(w);
    }
}
