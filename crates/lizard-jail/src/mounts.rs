//! Detaching every mount under a host directory without following a symlink: what the removal of
//! a leftover build directory (`lizard_template::store`, an interrupted host-side template build
//! with `/proc` still mounted in its chroot) does before it deletes anything.
//!
//! The mount points come from `/proc/self/mountinfo` (field 5, octal escapes undone), deepest
//! first. Each one is reached from the directory one component at a time with
//! `openat(O_PATH | O_NOFOLLOW | O_DIRECTORY)` — a component that is a symlink (a chroot process
//! may have renamed a directory and planted one) is not followed, and that mount stays, which is
//! an error — and detached through its descriptor (`umount2("/proc/self/fd/<n>", MNT_DETACH)`:
//! the magic link is the mount's root the walk reached, never a path resolved again).
//!
//! Not here: deleting the tree (the caller's, `std::fs::remove_dir_all`, which follows no
//! symlink either).

use nix::fcntl::OFlag;
use nix::mount::MntFlags;
use nix::sys::stat::Mode;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// A mount that could not be detached.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{mount} under {dir} is still mounted: {reason}")]
    StillMounted {
        dir: PathBuf,
        mount: PathBuf,
        reason: String,
    },
    #[error("{dir}: {reason}")]
    BadDir { dir: PathBuf, reason: String },
}

/// At most this many passes over the mount table (stacked mounts on one point need one each).
const MAX_PASSES: usize = 64;

/// The mount points listed in a mountinfo text (field 5, with octal escapes undone).
pub fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_octal(m)))
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space, …) decoded.
pub(crate) fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points at or under `path` (as mountinfo spells them: real paths), deepest first.
pub fn mounts_under(path: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = parse_mountinfo(&info)
        .into_iter()
        .filter(|m| m.starts_with(path))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

fn open_path(dir: Option<&OwnedFd>, name: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    match dir {
        Some(d) => nix::fcntl::openat(d, name, flags, Mode::empty()),
        None => nix::fcntl::open(name, flags, Mode::empty()),
    }
}

/// Detach the mount at `mount` (under `dir`, whose descriptor is `root`), reached without
/// following a symlink below `dir`.
fn detach_one(root: &OwnedFd, dir: &Path, mount: &Path) -> Result<(), String> {
    let rel = mount
        .strip_prefix(dir)
        .map_err(|_| "not under the directory".to_string())?;
    let mut fd = None::<OwnedFd>;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(format!("unexpected path component {c:?}"));
        };
        let next = open_path(Some(fd.as_ref().unwrap_or(root)), Path::new(name))
            .map_err(|e| format!("reaching {name:?} without following a symlink: {e}"))?;
        fd = Some(next);
    }
    let target = fd.as_ref().unwrap_or(root);
    let magic = format!("/proc/self/fd/{}", target.as_raw_fd());
    nix::mount::umount2(magic.as_str(), MntFlags::MNT_DETACH).map_err(|e| e.to_string())
}

/// Detach every mount at or under the directory `dir` (see the module docs). `dir` itself must be
/// a directory (a symlink is refused, not followed); its parent is the caller's own and is
/// resolved to the real path mountinfo uses. Errors if a mount remains.
pub fn detach_all_under(dir: &Path) -> Result<(), MountError> {
    let bad = |reason: String| MountError::BadDir {
        dir: dir.to_path_buf(),
        reason,
    };
    let meta = std::fs::symlink_metadata(dir).map_err(|e| bad(e.to_string()))?;
    if !meta.file_type().is_dir() {
        return Err(bad("not a directory (a symlink is not followed)".into()));
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(bad("no parent directory".into()));
    };
    let parent = std::fs::canonicalize(parent).map_err(|e| bad(e.to_string()))?;
    let real = parent.join(name);
    let mut last_error = String::new();
    for _ in 0..MAX_PASSES {
        let mounts = mounts_under(&real);
        if mounts.is_empty() {
            return Ok(());
        }
        let root = open_path(None, &real).map_err(|e| bad(e.to_string()))?;
        let mut progress = false;
        for m in &mounts {
            match detach_one(&root, &real, m) {
                Ok(()) => progress = true,
                Err(e) => last_error = format!("{}: {e}", m.display()),
            }
        }
        if !progress {
            break;
        }
    }
    match mounts_under(&real).into_iter().next() {
        None => Ok(()),
        Some(mount) => Err(MountError::StillMounted {
            dir: dir.to_path_buf(),
            mount,
            reason: last_error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn mountinfo_fields_and_escapes() {
        let text = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 22 0:5 / /data/templates/x/.build-k-1/rootfs/proc rw - proc proc rw
36 22 0:6 / /mnt/with\\040space rw - tmpfs tmpfs rw
";
        assert_eq!(
            parse_mountinfo(text),
            vec![
                PathBuf::from("/"),
                PathBuf::from("/data/templates/x/.build-k-1/rootfs/proc"),
                PathBuf::from("/mnt/with space"),
            ]
        );
        assert!(mounts_under(Path::new("/proc")).contains(&PathBuf::from("/proc")));
        assert!(mounts_under(Path::new("/nonexistent-lizard-dir")).is_empty());
    }

    fn is_root() -> bool {
        if nix::unistd::geteuid().is_root() {
            return true;
        }
        eprintln!("skipped: mounting needs root");
        false
    }

    fn mount_tmpfs(at: &Path) {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -t tmpfs {}", at.display());
    }

    #[test]
    fn nested_and_stacked_mounts_are_detached_and_symlinks_are_not_followed() {
        if !is_root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("victim");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        mount_tmpfs(&dir.join("a"));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        mount_tmpfs(&dir.join("a/b"));
        mount_tmpfs(&dir.join("a/b"));
        // A symlink to the directory is refused, not followed.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(matches!(
            detach_all_under(&link),
            Err(MountError::BadDir { .. })
        ));
        let real = std::fs::canonicalize(&dir).unwrap();
        let listed = |real: &Path| {
            let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
            parse_mountinfo(&info)
                .iter()
                .filter(|m| m.starts_with(real))
                .count()
        };
        assert_eq!(listed(&real), 3, "a, and b twice");
        let r = detach_all_under(&dir);
        let left = listed(&real);
        if left > 0 {
            // Do not leave mounts behind in /tmp when the assertion fails.
            let _ = Command::new("umount").arg("-l").arg(dir.join("a")).status();
        }
        r.unwrap();
        assert_eq!(left, 0);
        assert!(mounts_under(&std::fs::canonicalize(&dir).unwrap()).is_empty());
    }

    #[test]
    fn a_mount_behind_a_planted_symlink_is_not_reached_through_it() {
        if !is_root() {
            return;
        }
        // `victim/d/m` is mounted, then `d` is renamed and replaced by a symlink to a directory
        // that holds a mount of its own: mountinfo names `victim/e/m` (the rename moved it), which
        // is reached and detached; the outside mount is never touched.
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("m")).unwrap();
        mount_tmpfs(&outside.join("m"));
        let dir = t.path().join("victim");
        std::fs::create_dir_all(dir.join("d/m")).unwrap();
        mount_tmpfs(&dir.join("d/m"));
        std::fs::rename(dir.join("d"), dir.join("e")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("d")).unwrap();
        detach_all_under(&dir).unwrap();
        let out = std::fs::canonicalize(&outside).unwrap();
        assert_eq!(mounts_under(&out).len(), 1, "the outside mount stays");
        detach_all_under(&outside).unwrap();
    }
}
