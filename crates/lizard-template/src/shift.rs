//! Ownership of a built tree: giving a subtree to one owner (the venv to the sandbox user) and the
//! final **id shift** that moves every file's uid/gid by a base (default 100000), so that inside a
//! user namespace mapping 0..65536 to base..base+65536 the files have their ordinary owners.
//!
//! The walk never follows symlinks (`lchown`) and never crosses into another file system (a mount
//! under the tree is an error). Hard links are shifted once. The shift also:
//! - strips setuid/setgid bits from files (chown clears them anyway; sandboxes run with
//!   `no_new_privs`, so they could not work there): the mode is re-applied without them, so the
//!   result does not depend on the kernel's chown rules. Setgid on directories (group inheritance,
//!   no privilege) is kept. File capabilities (`security.capability`) are dropped by chown as well.
//! - removes device nodes: a template needs none (the sandbox mounts its own `/dev`), and a device
//!   node owned by the shifted root would be a way to the host's devices from outside a sandbox.
//!
//! It does not handle ACLs or other extended attributes.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, TemplateError};

/// The number of ids a sandbox's user namespace maps.
pub const ID_RANGE: u32 = 65536;

/// What [`shift_ownership`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShiftReport {
    /// Entries whose owner was changed.
    pub entries: u64,
    /// Files whose setuid/setgid bits were removed (paths relative to the root).
    pub stripped: Vec<PathBuf>,
    /// Device nodes removed (relative paths).
    pub removed_devices: Vec<PathBuf>,
    /// Disk usage of the tree (allocated blocks, hard links counted once).
    pub disk_bytes: u64,
}

/// Calls `f` for `root` and everything under it, parents before children, without following
/// symlinks. An entry on another device than `root` is an error (something is mounted there).
fn walk(
    step: &'static str,
    root: &Path,
    f: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<()>,
) -> Result<()> {
    let root_md = fs::symlink_metadata(root).at(step, "reading", root)?;
    let dev = root_md.dev();
    let mut stack = vec![(root.to_path_buf(), root_md)];
    while let Some((path, md)) = stack.pop() {
        if md.dev() != dev {
            return Err(TemplateError::Io {
                step,
                action: "walking".into(),
                path,
                source: std::io::Error::other("another file system is mounted here"),
            });
        }
        f(&path, &md)?;
        if md.is_dir() {
            for entry in fs::read_dir(&path).at(step, "listing", &path)? {
                let entry = entry.at(step, "listing", &path)?;
                let p = entry.path();
                let md = fs::symlink_metadata(&p).at(step, "reading", &p)?;
                stack.push((p, md));
            }
        }
    }
    Ok(())
}

/// Gives `root` and everything under it to `uid:gid` (symlinks themselves, not their targets).
pub fn chown_tree(step: &'static str, root: &Path, uid: u32, gid: u32) -> Result<()> {
    walk(step, root, &mut |path, md| {
        let setid = md.mode() & 0o6000;
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).at(
            step,
            "changing the owner of",
            path,
        )?;
        if setid != 0 && md.is_file() {
            // chown cleared them; keep the tree as it was (only the shift strips them).
            fs::set_permissions(path, fs::Permissions::from_mode(md.mode() & 0o7777)).at(
                step,
                "restoring the mode of",
                path,
            )?;
        }
        Ok(())
    })
}

/// Makes `root` and everything under it writable by its group (`g+w`, and `g+s` on directories,
/// so that new files get the directory's group); symlinks are left alone.
pub fn group_writable(step: &'static str, root: &Path) -> Result<()> {
    walk(step, root, &mut |path, md| {
        if md.file_type().is_symlink() {
            return Ok(());
        }
        let extra = if md.is_dir() { 0o2070 } else { 0o060 };
        let mode = (md.mode() & 0o7777) | extra;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).at(
            step,
            "setting the mode of",
            path,
        )
    })
}

/// Moves every owner in the tree up by `base` (see the module docs for setuid bits and devices).
/// Fails if an owner is already outside `0..65536` (for example a tree shifted twice).
pub fn shift_ownership(step: &'static str, root: &Path, base: u32) -> Result<ShiftReport> {
    let mut report = ShiftReport::default();
    let mut seen_links: HashSet<(u64, u64)> = HashSet::new();
    walk(step, root, &mut |path, md| {
        let rel = path.strip_prefix(root).unwrap_or(path).to_path_buf();
        let ft = md.file_type();
        if ft.is_char_device() || ft.is_block_device() {
            fs::remove_file(path).at(step, "removing device node", path)?;
            report.removed_devices.push(rel);
            return Ok(());
        }
        if !md.is_dir() && md.nlink() > 1 && !seen_links.insert((md.dev(), md.ino())) {
            return Ok(()); // another name of a file already shifted
        }
        report.disk_bytes += md.blocks() * 512;
        for id in [md.uid(), md.gid()] {
            if id >= ID_RANGE {
                return Err(TemplateError::IdOutOfRange {
                    step,
                    path: path.to_path_buf(),
                    id,
                    limit: ID_RANGE,
                });
            }
        }
        std::os::unix::fs::lchown(path, Some(md.uid() + base), Some(md.gid() + base)).at(
            step,
            "changing the owner of",
            path,
        )?;
        report.entries += 1;
        if md.is_file() && md.mode() & 0o6000 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(md.mode() & 0o1777)).at(
                step,
                "removing setuid/setgid from",
                path,
            )?;
            report.stripped.push(rel);
        }
        Ok(())
    })?;
    report.stripped.sort();
    report.removed_devices.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn owner(p: &Path) -> (u32, u32) {
        let md = fs::symlink_metadata(p).unwrap();
        (md.uid(), md.gid())
    }

    // These tests need root (chown, mknod), as the build itself does.

    /// Builds: a/ (dir), a/f (setuid file), a/l -> /etc/passwd (symlink), a/h (hard link of a/f),
    /// a/g (setgid dir), a/null (char device), owned by 1000:1000 except a/f.
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        fs::create_dir(&a).unwrap();
        fs::write(a.join("f"), b"x").unwrap();
        fs::hard_link(a.join("f"), a.join("h")).unwrap();
        symlink("/etc/passwd", a.join("l")).unwrap();
        fs::create_dir(a.join("g")).unwrap();
        fs::set_permissions(a.join("g"), fs::Permissions::from_mode(0o2775)).unwrap();
        nix::sys::stat::mknod(
            &a.join("null"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        chown_tree("t", &a, 1000, 1000).unwrap();
        fs::set_permissions(a.join("f"), fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::lchown(a.join("f"), Some(0), Some(0)).unwrap();
        fs::set_permissions(a.join("f"), fs::Permissions::from_mode(0o4755)).unwrap();
        t
    }

    #[test]
    fn chown_tree_does_not_follow_symlinks() {
        lizard_test_support::needs_root!();
        let passwd_before = owner(Path::new("/etc/passwd"));
        let t = tree();
        let a = t.path().join("a");
        assert_eq!(owner(&a.join("l")), (1000, 1000));
        assert_eq!(owner(&a.join("g")), (1000, 1000));
        assert_eq!(owner(Path::new("/etc/passwd")), passwd_before);
    }

    #[test]
    fn shift_moves_owners_strips_setid_and_removes_devices() {
        lizard_test_support::needs_root!();
        let passwd_before = owner(Path::new("/etc/passwd"));
        let t = tree();
        let a = t.path().join("a");
        let report = shift_ownership("shift", &a, 100000).unwrap();
        assert_eq!(owner(&a), (101000, 101000));
        assert_eq!(owner(&a.join("f")), (100000, 100000));
        assert_eq!(owner(&a.join("h")), (100000, 100000)); // hard link: shifted once
        assert_eq!(owner(&a.join("l")), (101000, 101000));
        assert_eq!(owner(Path::new("/etc/passwd")), passwd_before);
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&a.join("f")), 0o755);
        assert_eq!(mode(&a.join("g")), 0o2775, "setgid on directories is kept");
        assert!(!a.join("null").exists());
        assert_eq!(report.removed_devices, vec![PathBuf::from("null")]);
        // f and h are one inode: stripped once, under the name the walk met first (the
        // directory's order, which differs between file systems).
        assert!(
            report.stripped == [PathBuf::from("f")] || report.stripped == [PathBuf::from("h")],
            "{:?}",
            report.stripped
        );
        assert_eq!(report.entries, 4); // a, f (h is the same inode), l, g
        assert!(report.disk_bytes > 0);
        // Shifting again would push ids out of the namespace's range: refused.
        assert!(matches!(
            shift_ownership("shift", &a, 100000),
            Err(TemplateError::IdOutOfRange { .. })
        ));
    }
}
