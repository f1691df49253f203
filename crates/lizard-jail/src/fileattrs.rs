//! Extended attributes and file-system types of a sandbox's own files, for the agent's files API
//! (E2B's file metadata is `user.e2b.*` attributes; envd tells network file systems by `statfs`).
//! Call these on a thread that acts on files as the request's user (`creds::FsUser`): the kernel
//! then checks that user's permissions (a `user.*` attribute is read with read permission on the
//! file and written with write permission).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Size probes before giving up on a list or value that keeps growing between probe and read.
const TRIES: usize = 4;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The bytes a `*listxattr`/`*getxattr` call `f(buf, len)` returns: its size first (`buf` null,
/// `len` 0), then the bytes themselves (again if they grew meanwhile).
fn sized(mut f: impl FnMut(*mut libc::c_void, usize) -> libc::ssize_t) -> io::Result<Vec<u8>> {
    for _ in 0..TRIES {
        let n = f(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; n as usize];
        let got = f(buf.as_mut_ptr().cast(), buf.len());
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ERANGE))
}

fn split(list: &[u8]) -> Vec<Vec<u8>> {
    list.split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The names of the extended attributes of the file at `path`, a symlink followed
/// (`listxattr`). A file system without extended attributes answers `ENOTSUP`.
pub fn names(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let c = cpath(path)?;
    let list = sized(|buf, len| {
        // SAFETY: `c` is NUL-terminated and `buf` is null (with `len` 0) or a writable buffer of
        // `len` bytes; both live for the call's duration and the kernel writes at most `len`.
        unsafe { libc::listxattr(c.as_ptr(), buf.cast::<libc::c_char>(), len) }
    })?;
    Ok(split(&list))
}

/// The value of extended attribute `name` of the file at `path`, a symlink followed
/// (`getxattr`); `None` when it has none of that name.
pub fn value(path: &Path, name: &CStr) -> io::Result<Option<Vec<u8>>> {
    let c = cpath(path)?;
    let got = sized(|buf, len| {
        // SAFETY: `c` and `name` are NUL-terminated and `buf` is null (with `len` 0) or a
        // writable buffer of `len` bytes, all live for the call; the kernel writes at most `len`.
        unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), buf, len) }
    });
    match got {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The names of the extended attributes of the open file `fd` (`flistxattr`).
pub fn fd_names(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let list = sized(|buf, len| {
        // SAFETY: `fd` is open for the call and `buf` is null (with `len` 0) or a writable buffer
        // of `len` bytes; the kernel writes at most `len`.
        unsafe { libc::flistxattr(fd.as_raw_fd(), buf.cast::<libc::c_char>(), len) }
    })?;
    Ok(split(&list))
}

/// Set extended attribute `name` of the open file `fd` to `value` (`fsetxattr`).
pub fn fd_set(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    crate::sys::set_xattr(fd, name, value)
}

/// Remove extended attribute `name` of the open file `fd` (`fremovexattr`); one it does not have
/// is already removed.
pub fn fd_remove(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: `fd` is open and `name` NUL-terminated for the call's duration.
    let ret = unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENODATA) {
            return Err(e);
        }
    }
    Ok(())
}

/// The magic number of the file system `path` is on (`statfs(2)`'s `f_type`, a symlink followed).
pub fn fs_magic(path: &Path) -> io::Result<u32> {
    let st = nix::sys::statfs::statfs(path).map_err(io::Error::from)?;
    // The magic numbers are 32-bit; `f_type` is a (signed) word.
    Ok(st.filesystem_type().0 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn set_list_get_remove_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        let name = c"user.lizard.test";
        match fd_set(f.as_fd(), name, b"value") {
            Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return, // no xattrs here
            r => r.unwrap(),
        }
        assert!(names(&p).unwrap().contains(&b"user.lizard.test".to_vec()));
        assert!(fd_names(f.as_fd())
            .unwrap()
            .contains(&b"user.lizard.test".to_vec()));
        assert_eq!(value(&p, name).unwrap(), Some(b"value".to_vec()));
        // Through a symlink: the target's.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("f", &link).unwrap();
        assert_eq!(value(&link, name).unwrap(), Some(b"value".to_vec()));
        // A big value comes back whole (the size is probed first).
        let big = vec![b'v'; 3000];
        fd_set(f.as_fd(), name, &big).unwrap();
        assert_eq!(value(&p, name).unwrap(), Some(big));
        fd_remove(f.as_fd(), name).unwrap();
        fd_remove(f.as_fd(), name).unwrap(); // already gone
        assert_eq!(value(&p, name).unwrap(), None);
        assert!(!names(&p).unwrap().contains(&b"user.lizard.test".to_vec()));
        assert_eq!(
            names(&dir.path().join("missing"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_ne!(fs_magic(dir.path()).unwrap(), 0);
    }
}
