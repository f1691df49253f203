//! Importing a stopped sandbox's writable layer (an overlayfs upper directory, written by
//! untrusted code) as a template layer: a copy made by host root that never follows a symlink,
//! never opens anything but directories and regular files, is bounded in bytes, entries, depth and
//! name length, and keeps only what a read-only template layer needs.
//!
//! Kept: directories (with `trusted.overlay.opaque`), regular files (contents, permission bits
//! without setuid/setgid/sticky, times), symlinks (as symlinks: their targets are only ever
//! resolved later inside a sandbox's root) and overlay whiteouts (character devices 0:0).
//! Dropped, each named in [`ImportReport::dropped`]: other device nodes, fifos, sockets, setuid
//! and setgid bits, and every extended attribute but the opaque marker (so file capabilities and
//! ACLs go). Refused (the import fails): an owner outside the sandbox's id range, the overlay's
//! redirect or metacopy attributes (the layer would point into another one), and any limit.
//! Hard links are copied as independent files (each counts against the byte limit).
//!
//! Owners are moved from the sandbox's host range to the template's: `from.base + k` becomes
//! `to_base + k` for `k < count`.
//!
//! The source must be quiescent (every process of the sandbox gone): the walk checks every entry
//! on its open descriptor again, so a change under it is refused rather than followed, but it does
//! not promise a consistent snapshot of a tree that still changes.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, fstatat, mkdirat, mknodat, FileStat, Mode, SFlag};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchownat, Gid, Uid};

/// Bounds of one import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Total bytes of regular files.
    pub max_bytes: u64,
    /// Entries of every kind.
    pub max_entries: u64,
    /// Directory nesting below the layer's root.
    pub max_depth: usize,
    /// Bytes of one name.
    pub max_name_len: usize,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_bytes: 8 << 30,
            max_entries: 500_000,
            max_depth: 128,
            max_name_len: 255,
        }
    }
}

/// The owner shift: host ids `from_base..from_base + count` become `to_base..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdShift {
    pub from_base: u32,
    pub to_base: u32,
    pub count: u32,
}

impl IdShift {
    fn map(&self, id: u32) -> Option<u32> {
        let k = id.checked_sub(self.from_base)?;
        (k < self.count).then(|| self.to_base + k)
    }
}

/// What an import copied and dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub entries: u64,
    pub bytes: u64,
    /// What was left out, e.g. `"/tmp/fifo: a fifo"` (at most [`MAX_DROPPED_NOTES`]).
    pub dropped: Vec<String>,
    /// How many things were dropped in all.
    pub dropped_count: u64,
}

/// At most this many [`ImportReport::dropped`] notes are kept.
pub const MAX_DROPPED_NOTES: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("the layer is too big: {0}")]
    Limit(String),
    #[error("{path}: {reason}")]
    Refused { path: String, reason: String },
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

const OPAQUE: &CStr = c"trusted.overlay.opaque";

/// The POSIX ACL attributes (`linux/posix_acl_xattr.h`): the access ACL of any inode, the default
/// ACL of a directory.
const ACL_ACCESS: &CStr = c"system.posix_acl_access";
const ACL_DEFAULT: &CStr = c"system.posix_acl_default";
/// At most this many bytes of one ACL are read (the kernel's limit for one attribute value).
const MAX_ACL_BYTES: usize = 65536;
const ACL_VERSION: u32 = 2;
const ACL_USER: u16 = 0x02;
const ACL_GROUP: u16 = 0x08;

/// `acl`, a POSIX ACL attribute (little-endian: version 2, then entries of tag u16, permissions
/// u16, id u32), with the ids of its named-user and named-group entries moved by `ids` (those in
/// the range; the others stay), each kind kept sorted by id as the kernel keeps them. `None` when
/// no id is in the range. Refused: a malformed attribute, or two entries that would name the
/// same user (group).
fn shift_acl(acl: &[u8], ids: IdShift) -> Result<Option<Vec<u8>>, String> {
    if acl.len() < 4 || !(acl.len() - 4).is_multiple_of(8) {
        return Err(format!("a POSIX ACL of {} bytes", acl.len()));
    }
    let version = u32::from_le_bytes([acl[0], acl[1], acl[2], acl[3]]);
    if version != ACL_VERSION {
        return Err(format!("a POSIX ACL of version {version}"));
    }
    let mut entries: Vec<(u16, u16, u32)> = acl[4..]
        .chunks_exact(8)
        .map(|e| {
            (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
                u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            )
        })
        .collect();
    let mut changed = false;
    for e in entries.iter_mut() {
        if e.0 == ACL_USER || e.0 == ACL_GROUP {
            if let Some(id) = ids.map(e.2) {
                e.2 = id;
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    // Tags in the kernel's order are grouped (user objects, users, group objects, groups, ...):
    // a stable sort by (tag, id) of each named group only reorders ids.
    for tag in [ACL_USER, ACL_GROUP] {
        let idx: Vec<usize> = (0..entries.len())
            .filter(|i| entries[*i].0 == tag)
            .collect();
        let mut named: Vec<(u16, u16, u32)> = idx.iter().map(|i| entries[*i]).collect();
        named.sort_by_key(|e| e.2);
        if named.windows(2).any(|w| w[0].2 == w[1].2) {
            return Err("a POSIX ACL that would name one id twice".into());
        }
        for (i, e) in idx.into_iter().zip(named) {
            entries[i] = e;
        }
    }
    let mut out = Vec::with_capacity(acl.len());
    out.extend_from_slice(&ACL_VERSION.to_le_bytes());
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(Some(out))
}

struct Walk {
    limits: ImportLimits,
    ids: IdShift,
    report: ImportReport,
}

fn show(path: &Path) -> String {
    format!("/{}", path.display())
}

fn io<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> ImportError + 'a {
    move |e| ImportError::Io {
        step,
        path: show(path),
        source: e.into(),
    }
}

fn ioe<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ImportError + 'a {
    move |source| ImportError::Io {
        step,
        path: show(path),
        source,
    }
}

/// Copy the upper directory `src` (a host path the sandbox cannot redirect: its parents are the
/// host's) into the new, empty directory `dst` (the host's), with the rules of the module docs.
pub fn import_layer(
    src: &Path,
    dst: &Path,
    ids: IdShift,
    limits: ImportLimits,
) -> Result<ImportReport, ImportError> {
    let root = Path::new("");
    let s = open_dir(AT_FDCWD, src.as_os_str()).map_err(io("opening", root))?;
    let d = open_dir(AT_FDCWD, dst.as_os_str()).map_err(io("opening", root))?;
    let mut w = Walk::new(limits, ids);
    let st = fstat(&s).map_err(io("stat", root))?;
    w.copy_dir(s.as_fd(), d.as_fd(), root, 0)?;
    w.finish_dir(d.as_fd(), &st, root)?;
    Ok(w.report)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT)
}

impl Walk {
    fn new(limits: ImportLimits, ids: IdShift) -> Walk {
        Walk {
            limits,
            ids,
            report: ImportReport::default(),
        }
    }

    fn drop_note(&mut self, path: &Path, what: &str) {
        self.report.dropped_count += 1;
        if self.report.dropped.len() < MAX_DROPPED_NOTES {
            self.report.dropped.push(format!("{}: {what}", show(path)));
        }
    }

    fn owner(&self, st: &FileStat, path: &Path) -> Result<(u32, u32), ImportError> {
        match (self.ids.map(st.st_uid), self.ids.map(st.st_gid)) {
            (Some(u), Some(g)) => Ok((u, g)),
            _ => Err(ImportError::Refused {
                path: show(path),
                reason: format!(
                    "owned by host ids {}:{}, outside the sandbox's range",
                    st.st_uid, st.st_gid
                ),
            }),
        }
    }

    fn count(&mut self, name: &OsStr, path: &Path) -> Result<(), ImportError> {
        self.report.entries += 1;
        if self.report.entries > self.limits.max_entries {
            return Err(ImportError::Limit(format!(
                "more than {} entries",
                self.limits.max_entries
            )));
        }
        if name.len() > self.limits.max_name_len {
            return Err(ImportError::Limit(format!(
                "{}: a name longer than {} bytes",
                show(path),
                self.limits.max_name_len
            )));
        }
        Ok(())
    }

    /// Refuse the overlay attributes that make an entry point elsewhere; note the others (dropped).
    fn check_xattrs(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        dir: bool,
    ) -> Result<bool, ImportError> {
        let names = crate::sys::list_xattrs(fd).map_err(ioe("listing xattrs of", path))?;
        let mut opaque = false;
        for n in names {
            if n == OPAQUE.to_bytes() && dir {
                opaque = crate::sys::get_xattr(fd, OPAQUE)
                    .map_err(ioe("reading xattr of", path))?
                    .is_some_and(|v| v == b"y");
                continue;
            }
            // Redirects and metacopy make an entry point into another layer: refused. The
            // overlay's other bookkeeping (origin, impure, uuid, nlink, …) means nothing in a
            // copy: dropped without a note.
            if n == b"trusted.overlay.redirect" || n == b"trusted.overlay.metacopy" {
                return Err(ImportError::Refused {
                    path: show(path),
                    reason: format!(
                        "overlay attribute {} (the layer would refer to another one)",
                        String::from_utf8_lossy(&n)
                    ),
                });
            }
            if n.starts_with(b"trusted.overlay.") {
                continue;
            }
            let what = format!("extended attribute {}", String::from_utf8_lossy(&n));
            self.drop_note(path, &what);
        }
        Ok(opaque)
    }

    fn copy_dir(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        rel: &Path,
        depth: usize,
    ) -> Result<(), ImportError> {
        self.check_depth(rel, depth)?;
        if self.check_xattrs(src, rel, true)? {
            crate::sys::set_xattr(dst, OPAQUE, b"y").map_err(ioe("marking opaque", rel))?;
        }
        let names = self.names(src, rel)?;
        for name in names {
            let path = rel.join(&name);
            self.count(&name, &path)?;
            self.copy_entry(Entry(src, dst, &name, &path), depth)?;
        }
        Ok(())
    }

    fn copy_entry(&mut self, e: Entry<'_>, depth: usize) -> Result<(), ImportError> {
        let Entry(src, dst, name, path) = e;
        let st = fstatat(src, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io("stat", path))?;
        match kind(&st) {
            SFlag::S_IFDIR => {
                let fd = open_dir(src, name).map_err(io("opening", path))?;
                same_inode(&fd, &st, path)?;
                mkdirat(dst, name, Mode::from_bits_truncate(0o700)).map_err(io("mkdir", path))?;
                let d = open_dir(dst, name).map_err(io("opening copy of", path))?;
                self.copy_dir(fd.as_fd(), d.as_fd(), path, depth + 1)?;
                self.finish_dir(d.as_fd(), &st, path)
            }
            SFlag::S_IFREG => self.copy_file(e, &st),
            SFlag::S_IFLNK => {
                let (uid, gid) = self.owner(&st, path)?;
                // The kernel bounds a link's target (PATH_MAX).
                let target = nix::fcntl::readlinkat(src, name).map_err(io("readlink", path))?;
                nix::unistd::symlinkat(target.as_os_str(), dst, name)
                    .map_err(io("symlink", path))?;
                chown_entry(dst, name, (uid, gid)).map_err(io("chown", path))?;
                let (a, m) = times(&st);
                nix::sys::stat::utimensat(
                    dst,
                    name,
                    &a,
                    &m,
                    nix::sys::stat::UtimensatFlags::NoFollowSymlink,
                )
                .map_err(io("setting times of", path))
            }
            SFlag::S_IFCHR if st.st_rdev == 0 => {
                // An overlay whiteout: the layer hides its base's entry of this name.
                let (uid, gid) = self.owner(&st, path)?;
                mknodat(dst, name, SFlag::S_IFCHR, Mode::empty(), 0).map_err(io("mknod", path))?;
                chown_entry(dst, name, (uid, gid)).map_err(io("chown", path))
            }
            other => {
                let what = match other {
                    SFlag::S_IFCHR => "a device node",
                    SFlag::S_IFBLK => "a block device",
                    SFlag::S_IFIFO => "a fifo",
                    SFlag::S_IFSOCK => "a socket",
                    _ => "an unknown file type",
                };
                self.drop_note(path, what);
                Ok(())
            }
        }
    }

    fn copy_file(&mut self, e: Entry<'_>, st: &FileStat) -> Result<(), ImportError> {
        let Entry(src, dst, name, path) = e;
        // O_NONBLOCK: should the entry have become a fifo since the stat, opening it does not
        // wait (and the inode check below refuses it).
        let fd = openat(
            src,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io("opening", path))?;
        let st = same_inode(&fd, st, path)?;
        let (uid, gid) = self.owner(&st, path)?;
        self.check_xattrs(fd.as_fd(), path, false)?;
        let left = self.limits.max_bytes.saturating_sub(self.report.bytes);
        if st.st_size as u64 > left {
            return Err(ImportError::Limit(format!(
                "more than {} bytes of files (at {})",
                self.limits.max_bytes,
                show(path)
            )));
        }
        if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            self.drop_note(path, "its setuid/setgid bit");
        }
        let out = openat(
            dst,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io("creating copy of", path))?;
        let mut input = File::from(fd).take(left + 1);
        let mut output = File::from(out);
        let n = std::io::copy(&mut input, &mut output).map_err(ioe("copying", path))?;
        if n > left {
            return Err(ImportError::Limit(format!(
                "more than {} bytes of files (at {})",
                self.limits.max_bytes,
                show(path)
            )));
        }
        self.report.bytes += n;
        output.flush().map_err(ioe("copying", path))?;
        nix::unistd::fchown(
            output.as_fd(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
        )
        .map_err(io("chown", path))?;
        // After the chown (which would clear setuid bits anyway): permission bits only.
        nix::sys::stat::fchmod(output.as_fd(), Mode::from_bits_truncate(st.st_mode & 0o777))
            .map_err(io("chmod", path))?;
        let (a, m) = times(&st);
        nix::sys::stat::futimens(output.as_fd(), &a, &m).map_err(io("setting times of", path))
    }

    /// Owner, mode (no setuid/setgid: a directory's setgid would hand its group to files made
    /// in it later; sticky is kept) and times of a copied directory, after its contents.
    fn finish_dir(
        &mut self,
        d: BorrowedFd<'_>,
        st: &FileStat,
        path: &Path,
    ) -> Result<(), ImportError> {
        let (uid, gid) = self.owner(st, path)?;
        nix::unistd::fchown(d, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(io("chown", path))?;
        if st.st_mode & libc::S_ISGID != 0 {
            self.drop_note(path, "its setgid bit");
        }
        let mode = st.st_mode & (0o777 | libc::S_ISVTX);
        // fchmod needs a real descriptor, which `d` is (O_RDONLY, not O_PATH).
        nix::sys::stat::fchmod(d, Mode::from_bits_truncate(mode)).map_err(io("chmod", path))?;
        let (a, m) = times(st);
        nix::sys::stat::futimens(d, &a, &m).map_err(io("setting times of", path))
    }
}

fn times(st: &FileStat) -> (TimeSpec, TimeSpec) {
    (
        TimeSpec::new(st.st_atime, st.st_atime_nsec),
        TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
    )
}

/// The open descriptor is still the entry that was stat'ed (same inode, same type): else the tree
/// changed under the walk, which is refused.
/// Move the owners of every entry under the directory `root` (a host path the caller trusts: a
/// copied disk image's file system, mounted where no sandbox sees it) from one host id range to
/// another: an owner `ids.from_base + k` becomes `ids.to_base + k` (`k < ids.count`); owners outside
/// the range (host root's own directories) stay. Never follows a symlink (`fchownat` with
/// `AT_SYMLINK_NOFOLLOW`, directories opened `O_NOFOLLOW` and checked to be what was listed),
/// never opens anything but directories and regular files with set-id bits (whose mode the chown
/// clears and which is set again on the opened file), bounded in entries, depth and name length
/// (`limits.max_bytes` is not used). The named users and groups of POSIX ACLs (access ACLs of
/// every entry, default ACLs of directories) are shifted the same way, read at most
/// [`MAX_ACL_BYTES`] each, through the directory's descriptor without following a symlink
/// (`lgetxattr`/`lsetxattr` on `/proc/self/fd/<dir>/<name>`; nothing is opened for it). File
/// capabilities are not (a chown drops them). Returns the entries seen.
pub fn shift_owners(root: &Path, ids: IdShift, limits: ImportLimits) -> Result<u64, ImportError> {
    let rel = Path::new("");
    let fd = open_dir(AT_FDCWD, root.as_os_str()).map_err(io("opening", rel))?;
    let mut w = Walk::new(limits, ids);
    let st = fstat(&fd).map_err(io("stat", rel))?;
    w.shift_dir(fd.as_fd(), rel, 0)?;
    w.chown_fd(fd.as_fd(), &st, rel)?;
    w.shift_acls(fd.as_fd(), OsStr::new("."), true, rel)?;
    Ok(w.report.entries)
}

impl Walk {
    /// Refuse a directory deeper than the limit.
    fn check_depth(&self, rel: &Path, depth: usize) -> Result<(), ImportError> {
        if depth > self.limits.max_depth {
            return Err(ImportError::Limit(format!(
                "{}: deeper than {} directories",
                show(rel),
                self.limits.max_depth
            )));
        }
        Ok(())
    }

    /// The names in directory `dir` (without `.` and `..`), refused once the walk's entries
    /// would pass the limit.
    fn names(&self, dir: BorrowedFd<'_>, rel: &Path) -> Result<Vec<OsString>, ImportError> {
        let dup = nix::unistd::dup(dir).map_err(io("dup", rel))?;
        let mut d = nix::dir::Dir::from_fd(dup).map_err(io("listing", rel))?;
        let mut names: Vec<OsString> = Vec::new();
        for entry in d.iter() {
            let entry = entry.map_err(io("listing", rel))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            names.push(name.to_owned());
            if names.len() as u64 + self.report.entries > self.limits.max_entries {
                return Err(ImportError::Limit(format!(
                    "more than {} entries",
                    self.limits.max_entries
                )));
            }
        }
        Ok(names)
    }

    fn shifted(&self, st: &FileStat) -> Option<(Option<Uid>, Option<Gid>)> {
        let u = self.ids.map(st.st_uid).map(Uid::from_raw);
        let g = self.ids.map(st.st_gid).map(Gid::from_raw);
        (u.is_some() || g.is_some()).then_some((u, g))
    }

    /// Shift an open directory's (or file's) owner, keeping its mode.
    fn chown_fd(&self, fd: BorrowedFd<'_>, st: &FileStat, path: &Path) -> Result<(), ImportError> {
        let Some((u, g)) = self.shifted(st) else {
            return Ok(());
        };
        nix::unistd::fchown(fd, u, g).map_err(io("chown", path))?;
        if st.st_mode & 0o6000 != 0 {
            nix::sys::stat::fchmod(fd, Mode::from_bits_truncate(st.st_mode & 0o7777))
                .map_err(io("chmod", path))?;
        }
        Ok(())
    }

    /// Shift the ids in the ACLs of entry `name` of `dir` (see [`shift_acl`]).
    fn shift_acls(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        is_dir: bool,
        path: &Path,
    ) -> Result<(), ImportError> {
        let kinds: &[&CStr] = if is_dir {
            &[ACL_ACCESS, ACL_DEFAULT]
        } else {
            &[ACL_ACCESS]
        };
        for attr in kinds {
            let Some(acl) = crate::sys::get_xattr_at(dir, name, attr, MAX_ACL_BYTES)
                .map_err(ioe("reading the ACL of", path))?
            else {
                continue;
            };
            let shifted = shift_acl(&acl, self.ids).map_err(|reason| ImportError::Refused {
                path: show(path),
                reason,
            })?;
            if let Some(new) = shifted {
                crate::sys::set_xattr_at(dir, name, attr, &new)
                    .map_err(ioe("writing the ACL of", path))?;
            }
        }
        Ok(())
    }

    fn shift_dir(
        &mut self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        depth: usize,
    ) -> Result<(), ImportError> {
        self.check_depth(rel, depth)?;
        let names = self.names(dir, rel)?;
        for name in names {
            let path = rel.join(&name);
            self.count(&name, &path)?;
            let st = fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(io("stat", &path))?;
            match kind(&st) {
                SFlag::S_IFDIR => {
                    let fd = open_dir(dir, &name).map_err(io("opening", &path))?;
                    same_inode(&fd, &st, &path)?;
                    self.shift_dir(fd.as_fd(), &path, depth + 1)?;
                    self.chown_fd(fd.as_fd(), &st, &path)?;
                }
                SFlag::S_IFREG if st.st_mode & 0o6000 != 0 && self.shifted(&st).is_some() => {
                    // O_NONBLOCK | O_NOCTTY: nothing but a regular file is used (checked on the
                    // descriptor), and opening one has no effect.
                    let fd = openat(
                        dir,
                        name.as_os_str(),
                        OFlag::O_RDONLY
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_NONBLOCK
                            | OFlag::O_NOCTTY
                            | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(io("opening", &path))?;
                    same_inode(&fd, &st, &path)?;
                    self.chown_fd(fd.as_fd(), &st, &path)?;
                }
                _ => {
                    if let Some((u, g)) = self.shifted(&st) {
                        fchownat(dir, name.as_os_str(), u, g, AtFlags::AT_SYMLINK_NOFOLLOW)
                            .map_err(io("chown", &path))?;
                    }
                }
            }
            // Symlinks keep no ACL (and `lgetxattr` reads the link's own attributes).
            if kind(&st) != SFlag::S_IFLNK {
                self.shift_acls(dir, name.as_os_str(), kind(&st) == SFlag::S_IFDIR, &path)?;
            }
        }
        Ok(())
    }
}

/// One directory entry to copy: its parent directory in the layer and in the copy, its name, and
/// its path in the layer (for messages).
#[derive(Clone, Copy)]
struct Entry<'a>(BorrowedFd<'a>, BorrowedFd<'a>, &'a OsStr, &'a Path);

/// Open the directory `name` in `at`, not following a link.
fn open_dir(at: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        at,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Give the entry `name` in `at` (not following a link) the owner `(uid, gid)`.
fn chown_entry(at: BorrowedFd<'_>, name: &OsStr, (uid, gid): (u32, u32)) -> nix::Result<()> {
    fchownat(
        at,
        name,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
}

fn same_inode(fd: &OwnedFd, before: &FileStat, path: &Path) -> Result<FileStat, ImportError> {
    let now = fstat(fd).map_err(io("stat", path))?;
    if now.st_ino != before.st_ino || now.st_dev != before.st_dev || kind(&now) != kind(before) {
        return Err(ImportError::Refused {
            path: show(path),
            reason: "changed during the import".into(),
        });
    }
    let _ = fd.as_raw_fd();
    Ok(now)
}

/// Total bytes and entries under `dir` (not following symlinks): a layer's size.
pub fn tree_size(dir: &Path) -> (u64, u64) {
    fn walk(p: &Path, acc: &mut (u64, u64)) {
        let Ok(rd) = std::fs::read_dir(p) else {
            return;
        };
        for e in rd.flatten() {
            acc.1 += 1;
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                walk(&e.path(), acc);
            } else if m.is_file() {
                acc.0 += m.len();
            }
        }
    }
    let mut acc = (0, 0);
    walk(dir, &mut acc);
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    const FROM: u32 = 300_000;
    const TO: u32 = 100_000;

    fn ids() -> IdShift {
        IdShift {
            from_base: FROM,
            to_base: TO,
            count: 65536,
        }
    }

    /// A temporary directory with an `upper` path to fill (not made yet) and an empty `layer`.
    fn upper_and_layer() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("upper"), t.path().join("layer"));
        std::fs::create_dir(&dst).unwrap();
        (t, src, dst)
    }

    fn own(p: &Path, id: u32) {
        std::os::unix::fs::lchown(p, Some(id), Some(id)).unwrap();
    }

    #[test]
    fn owners_are_shifted_without_following_links() {
        lizard_test_support::needs_root!();
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("disk");
        std::fs::create_dir_all(root.join("upper/home/d")).unwrap();
        std::fs::write(root.join("upper/home/d/f"), "x").unwrap();
        std::fs::write(root.join("upper/suid"), "x").unwrap();
        // A file outside the tree that a link points at: its owner must not change.
        let outside = t.path().join("outside");
        std::fs::write(&outside, "secret").unwrap();
        symlink(&outside, root.join("upper/link")).unwrap();
        for p in [
            "upper/home",
            "upper/home/d",
            "upper/home/d/f",
            "upper/suid",
            "upper/link",
        ] {
            own(&root.join(p), FROM + 1000);
        }
        std::fs::set_permissions(
            root.join("upper/suid"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        own(&root.join("upper/suid"), FROM + 1000);
        std::fs::set_permissions(
            root.join("upper/suid"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        let n = shift_owners(&root, ids(), ImportLimits::default()).unwrap();
        assert_eq!(n, 6);
        for p in [
            "upper/home",
            "upper/home/d",
            "upper/home/d/f",
            "upper/suid",
            "upper/link",
        ] {
            let m = std::fs::symlink_metadata(root.join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), (TO + 1000, TO + 1000), "{p}");
        }
        // Host root's own directories (outside the range) stay; the link's target is untouched.
        assert_eq!(std::fs::metadata(root.join("upper")).unwrap().uid(), 0);
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
        let mode = std::fs::metadata(root.join("upper/suid")).unwrap().mode();
        assert_eq!(mode & 0o7777, 0o4755);
        // Bounds hold.
        let tight = ImportLimits {
            max_entries: 3,
            ..Default::default()
        };
        assert!(matches!(
            shift_owners(&root, ids(), tight),
            Err(ImportError::Limit(_))
        ));
    }

    const USER_OBJ: u16 = 0x01;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = ACL_VERSION.to_le_bytes().to_vec();
        for (tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    fn acl_of(users: &[u32], groups: &[u32]) -> Vec<u8> {
        let mut e = vec![(USER_OBJ, 7, u32::MAX)];
        e.extend(users.iter().map(|u| (ACL_USER, 6, *u)));
        e.push((GROUP_OBJ, 5, u32::MAX));
        e.extend(groups.iter().map(|g| (ACL_GROUP, 4, *g)));
        e.push((MASK, 7, u32::MAX));
        e.push((OTHER, 0, u32::MAX));
        acl(&e)
    }

    #[test]
    fn acl_ids_in_the_range_are_shifted_and_kept_in_order() {
        // Named users and groups in the range move; others (and the owner entries) stay.
        let got = shift_acl(&acl_of(&[5, FROM + 1000], &[FROM + 1001]), ids()).unwrap();
        assert_eq!(got, Some(acl_of(&[5, TO + 1000], &[TO + 1001])));
        // Sorted again: 200 000 stays, 300 001 becomes 100 001 and goes first.
        let got = shift_acl(&acl_of(&[200_000, FROM + 1], &[]), ids()).unwrap();
        assert_eq!(got, Some(acl_of(&[TO + 1, 200_000], &[])));
        // Nothing in the range: nothing to write.
        assert_eq!(shift_acl(&acl_of(&[5], &[6]), ids()).unwrap(), None);
        // A shifted id meeting one that was already there is refused, not merged.
        assert!(shift_acl(&acl_of(&[TO + 1, FROM + 1], &[]), ids()).is_err());
        // Malformed: short, ragged, another version.
        assert!(shift_acl(&[2, 0], ids()).is_err());
        assert!(shift_acl(&acl_of(&[FROM], &[])[..15], ids()).is_err());
        let mut v3 = acl_of(&[FROM], &[]);
        v3[0] = 3;
        assert!(shift_acl(&v3, ids()).is_err());
    }

    #[test]
    fn acls_are_shifted_without_following_links() {
        lizard_test_support::needs_root!();
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("disk");
        std::fs::create_dir_all(root.join("upper/d")).unwrap();
        std::fs::write(root.join("upper/f"), "x").unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, "secret").unwrap();
        symlink(&outside, root.join("upper/link")).unwrap();
        let open = |p: &Path| std::fs::File::open(p).unwrap();
        let set = |p: &Path, attr: &CStr, v: &[u8]| crate::sys::set_xattr(open(p).as_fd(), attr, v);
        let before = acl_of(&[5, FROM + 1000], &[FROM + 1001]);
        if let Err(e) = set(&root.join("upper/f"), ACL_ACCESS, &before) {
            eprintln!("skipped: no POSIX ACLs on the temporary directory's file system: {e}");
            return;
        }
        set(&root.join("upper/d"), ACL_ACCESS, &before).unwrap();
        set(
            &root.join("upper/d"),
            ACL_DEFAULT,
            &acl_of(&[FROM + 7], &[]),
        )
        .unwrap();
        set(&root, ACL_ACCESS, &acl_of(&[FROM + 2], &[])).unwrap();
        set(&outside, ACL_ACCESS, &before).unwrap();
        shift_owners(&root, ids(), ImportLimits::default()).unwrap();
        let get = |p: &Path, attr: &CStr| crate::sys::get_xattr(open(p).as_fd(), attr).unwrap();
        let after = acl_of(&[5, TO + 1000], &[TO + 1001]);
        assert_eq!(get(&root.join("upper/f"), ACL_ACCESS), Some(after.clone()));
        assert_eq!(get(&root.join("upper/d"), ACL_ACCESS), Some(after));
        assert_eq!(
            get(&root.join("upper/d"), ACL_DEFAULT),
            Some(acl_of(&[TO + 7], &[]))
        );
        assert_eq!(get(&root, ACL_ACCESS), Some(acl_of(&[TO + 2], &[])));
        // The link's target is not the tree's: its ACL is untouched.
        assert_eq!(get(&outside, ACL_ACCESS), Some(before));
        // A second shift finds nothing left in the old range.
        shift_owners(&root, ids(), ImportLimits::default()).unwrap();
        assert_eq!(
            get(&root.join("upper/d"), ACL_DEFAULT),
            Some(acl_of(&[TO + 7], &[]))
        );
    }

    #[test]
    fn hostile_entries_are_copied_safely_or_dropped() {
        lizard_test_support::needs_root!();
        let (_t, src, dst) = upper_and_layer();
        std::fs::create_dir_all(src.join("etc")).unwrap();
        std::fs::write(src.join("etc/file"), "hello").unwrap();
        std::fs::write(src.join("suid"), "x").unwrap();
        symlink("/etc/shadow", src.join("shadow")).unwrap();
        std::fs::hard_link(src.join("etc/file"), src.join("hard")).unwrap();
        nix::unistd::mkfifo(&src.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        mknodat(
            nix::fcntl::AT_FDCWD,
            &src.join("whiteout"),
            SFlag::S_IFCHR,
            Mode::empty(),
            0,
        )
        .unwrap();
        mknodat(
            nix::fcntl::AT_FDCWD,
            &src.join("null"),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        for p in [
            "", "etc", "etc/file", "suid", "shadow", "fifo", "whiteout", "null",
        ] {
            own(&src.join(p), FROM + 1000);
        }
        own(&src, FROM);
        // After the chown, which clears it.
        std::fs::set_permissions(src.join("suid"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        let r = import_layer(&src, &dst, ids(), ImportLimits::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dst.join("etc/file")).unwrap(),
            "hello"
        );
        assert_eq!(std::fs::read_to_string(dst.join("hard")).unwrap(), "hello");
        let m = std::fs::symlink_metadata(dst.join("shadow")).unwrap();
        assert!(m.file_type().is_symlink());
        assert_eq!(
            std::fs::read_link(dst.join("shadow")).unwrap(),
            Path::new("/etc/shadow")
        );
        assert_eq!((m.uid(), m.gid()), (TO + 1000, TO + 1000));
        let m = std::fs::metadata(dst.join("suid")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "setuid dropped");
        assert!(!dst.join("fifo").exists() && !dst.join("null").exists());
        let w = std::fs::symlink_metadata(dst.join("whiteout")).unwrap();
        assert_eq!(w.rdev(), 0);
        assert_eq!(std::fs::metadata(&dst).unwrap().uid(), TO);
        assert!(r.dropped.iter().any(|d| d.contains("/fifo")), "{r:?}");
        assert!(r.dropped.iter().any(|d| d.contains("/null")), "{r:?}");
        assert!(r.dropped.iter().any(|d| d.contains("/suid")), "{r:?}");
    }

    #[test]
    fn foreign_owners_and_limits_are_refused() {
        lizard_test_support::needs_root!();
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("upper");
        std::fs::create_dir(&src).unwrap();
        own(&src, FROM);
        std::fs::write(src.join("f"), "0123456789").unwrap();
        own(&src.join("f"), 0);
        let fresh = |n: &str| {
            let d = t.path().join(n);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let e = import_layer(&src, &fresh("a"), ids(), ImportLimits::default()).unwrap_err();
        assert!(e.to_string().contains("outside the sandbox's range"), "{e}");
        own(&src.join("f"), FROM);
        let small = ImportLimits {
            max_bytes: 5,
            ..Default::default()
        };
        let e = import_layer(&src, &fresh("b"), ids(), small).unwrap_err();
        assert!(matches!(e, ImportError::Limit(_)), "{e}");
        let few = ImportLimits {
            max_entries: 0,
            ..Default::default()
        };
        assert!(matches!(
            import_layer(&src, &fresh("c"), ids(), few),
            Err(ImportError::Limit(_))
        ));
        let mut deep = src.clone();
        for _ in 0..4 {
            deep.push("d");
            std::fs::create_dir(&deep).unwrap();
            own(&deep, FROM);
        }
        let shallow = ImportLimits {
            max_depth: 2,
            ..Default::default()
        };
        assert!(matches!(
            import_layer(&src, &fresh("d"), ids(), shallow),
            Err(ImportError::Limit(_))
        ));
        let r = import_layer(&src, &fresh("e"), ids(), ImportLimits::default()).unwrap();
        assert_eq!(r.bytes, 10);
    }

    #[test]
    fn the_opaque_marker_is_kept_and_capabilities_dropped() {
        lizard_test_support::needs_root!();
        let (_t, src, dst) = upper_and_layer();
        std::fs::create_dir_all(src.join("opaque")).unwrap();
        std::fs::write(src.join("capped"), "x").unwrap();
        // Owners first: a chown clears file capabilities.
        for p in ["", "opaque", "capped"] {
            own(&src.join(p), FROM);
        }
        let d = nix::fcntl::open(&src.join("opaque"), OFlag::O_RDONLY, Mode::empty()).unwrap();
        crate::sys::set_xattr(d.as_fd(), OPAQUE, b"y").unwrap();
        let f = nix::fcntl::open(&src.join("capped"), OFlag::O_RDONLY, Mode::empty()).unwrap();
        // A VFS_CAP_REVISION_2 capability set (cap_net_raw, effective).
        let mut cap = vec![0u8; 20];
        cap[0..4].copy_from_slice(&0x0200_0001u32.to_le_bytes());
        cap[4..8].copy_from_slice(&(1u32 << 13).to_le_bytes());
        crate::sys::set_xattr(f.as_fd(), c"security.capability", &cap).unwrap();
        let r = import_layer(&src, &dst, ids(), ImportLimits::default()).unwrap();
        let d = nix::fcntl::open(&dst.join("opaque"), OFlag::O_RDONLY, Mode::empty()).unwrap();
        assert_eq!(
            crate::sys::get_xattr(d.as_fd(), OPAQUE).unwrap().as_deref(),
            Some(&b"y"[..])
        );
        let f = nix::fcntl::open(&dst.join("capped"), OFlag::O_RDONLY, Mode::empty()).unwrap();
        assert!(crate::sys::list_xattrs(f.as_fd()).unwrap().is_empty());
        assert!(
            r.dropped.iter().any(|d| d.contains("security.capability")),
            "{r:?}"
        );
    }
}
