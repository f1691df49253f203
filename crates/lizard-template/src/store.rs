//! The on-disk cache of built templates under a data directory, and the safety rules for changing it.
//!
//! ```text
//! <data_dir>/templates/
//!   .cache/debs/<suite>/      debootstrap's package cache (kept across builds)
//!   .cache/npm/               Node tarballs (`npm pack` output)
//!   <name>/.lock              flock held by the one build of <name> at a time
//!   <name>/.build-<key>-<pid>/  a build in progress (never accepted by `find`)
//!   <name>/<key>/rootfs/      the root file system
//!   <name>/<key>/template.json  metadata (`TemplateMeta`)
//!   <name>/<key>/complete     the completion marker, written last, before the rename
//! ```
//!
//! A build directory becomes `<key>/` by one rename after its marker is written, so `find` sees a
//! whole build or none. Nothing is deleted while something is mounted under it: mounts (from an
//! interrupted build) are detached first, and deletion is refused if any remain, so a bind mount can
//! never make a clean-up delete host files. It does not fsync the tree (a power loss right after a
//! build may need `--force`).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, TemplateError};
use crate::meta::TemplateMeta;
use crate::spec::BUILDER_VERSION;
use crate::Template;

/// Name of the completion marker file in a build directory.
pub const MARKER: &str = "complete";
/// Name of the metadata file in a build directory.
pub const META_FILE: &str = "template.json";
/// Prefix of in-progress build directories.
const BUILD_PREFIX: &str = ".build-";

/// `<data_dir>/templates`.
pub fn templates_root(data_dir: &Path) -> PathBuf {
    data_dir.join("templates")
}

/// `<data_dir>/templates/<name>`: every build of one template.
pub fn template_dir(data_dir: &Path, name: &str) -> PathBuf {
    templates_root(data_dir).join(name)
}

/// `<data_dir>/templates/.cache/<what>`: download caches shared by all builds.
pub fn cache_dir(data_dir: &Path, what: &str) -> PathBuf {
    templates_root(data_dir).join(".cache").join(what)
}

/// The build of `name` for `key`, if it is complete and made by this builder version.
pub fn read_build(data_dir: &Path, name: &str, key: &str) -> Option<Template> {
    let dir = template_dir(data_dir, name).join(key);
    let marker = fs::read_to_string(dir.join(MARKER)).ok()?;
    if marker.trim() != key {
        return None;
    }
    let meta: TemplateMeta = serde_json::from_slice(&fs::read(dir.join(META_FILE)).ok()?).ok()?;
    if meta.key != key || meta.name != name || meta.builder_version != BUILDER_VERSION {
        return None;
    }
    let rootfs = dir.join("rootfs");
    if !rootfs.is_dir() {
        return None;
    }
    Some(Template {
        name: name.to_owned(),
        key: key.to_owned(),
        dir,
        rootfs,
        meta,
    })
}

/// An exclusive `flock` on `<name>/.lock`, released on drop.
pub(crate) struct BuildLock {
    _lock: nix::fcntl::Flock<File>,
}

impl BuildLock {
    /// Takes the lock, calling `waiting` first if another process holds it.
    pub(crate) fn acquire(
        step: &'static str,
        dir: &Path,
        waiting: &mut dyn FnMut(),
    ) -> Result<Self> {
        use nix::fcntl::{Flock, FlockArg};
        let path = dir.join(".lock");
        let open = || File::create(&path).at(step, "opening lock file", &path);
        let lock = match Flock::lock(open()?, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((file, _)) => {
                waiting();
                Flock::lock(file, FlockArg::LockExclusive)
                    .map_err(|(_, e)| std::io::Error::from(e))
                    .at(step, "locking", &path)?
            }
        };
        Ok(BuildLock { _lock: lock })
    }

    /// Takes the lock if it is free.
    pub(crate) fn try_acquire(step: &'static str, dir: &Path) -> Result<Option<Self>> {
        use nix::fcntl::{Flock, FlockArg};
        let path = dir.join(".lock");
        let file = File::create(&path).at(step, "opening lock file", &path)?;
        Ok(Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .ok()
            .map(|l| BuildLock { _lock: l }))
    }
}

/// A new, empty in-progress build directory for `key`.
pub(crate) fn new_build_dir(step: &'static str, dir: &Path, key: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{BUILD_PREFIX}{key}-{}", std::process::id()));
    remove_tree(step, &path)?;
    fs::create_dir(&path).at(step, "creating", &path)?;
    Ok(path)
}

/// Removes leftovers of interrupted builds in `dir` (call with the build lock held): every mount
/// under one (an interrupted build's `/proc` in its chroot) is detached first, and nothing is
/// followed — a leftover symlink is unlinked, the trees are deleted without following the
/// symlinks in them.
pub(crate) fn remove_stale_builds(step: &'static str, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).at(step, "listing", dir)? {
        let path = entry.at(step, "listing", dir)?.path();
        let is_build = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(BUILD_PREFIX));
        if !is_build {
            continue;
        }
        // A leftover that is not a directory (a symlink above all) is unlinked, never followed.
        let is_dir = fs::symlink_metadata(&path)
            .at(step, "inspecting", &path)?
            .file_type()
            .is_dir();
        if is_dir {
            remove_tree(step, &path)?;
        } else {
            fs::remove_file(&path).at(step, "removing", &path)?;
        }
        removed.push(path);
    }
    Ok(removed)
}

/// Removes every build of the template in `dir` except `keep` (other keys are out of date).
pub(crate) fn remove_other_keys(
    step: &'static str,
    dir: &Path,
    keep: &str,
) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).at(step, "listing", dir)? {
        let entry = entry.at(step, "listing", dir)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == keep || !entry.path().is_dir() {
            continue;
        }
        // Sandboxes (running, paused or hibernated) still use it as their lower layer.
        if in_use(&entry.path()) {
            continue;
        }
        remove_tree(step, &entry.path())?;
        removed.push(entry.path());
    }
    Ok(removed)
}

/// The directory of a build's users: one empty file per sandbox that uses the build as its lower
/// layer, so that a newer build of the template does not remove it from under them.
const USERS: &str = ".users";

/// Record that sandbox `user` uses the build in `build_dir` (see [`unpin`]).
pub fn pin(build_dir: &Path, user: &str) -> std::io::Result<()> {
    let users = build_dir.join(USERS);
    fs::create_dir_all(&users)?;
    fs::File::create(users.join(user)).map(|_| ())
}

/// Sandbox `user` no longer uses the build in `build_dir`. Never fails: a missing record is fine.
pub fn unpin(build_dir: &Path, user: &str) {
    let _ = fs::remove_file(build_dir.join(USERS).join(user));
}

/// Whether some sandbox still uses the build in `build_dir`.
pub fn in_use(build_dir: &Path) -> bool {
    fs::read_dir(build_dir.join(USERS))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Detaches every mount at or under the directory `path` (deepest first, through descriptors
/// reached without following a symlink: `lizard_jail::mounts`); errors if any remain. A path that
/// is missing or not a directory has nothing to detach.
pub(crate) fn unmount_all(path: &Path) -> Result<()> {
    if !fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir()) {
        return Ok(());
    }
    lizard_jail::mounts::detach_all_under(path).map_err(|e| match e {
        lizard_jail::mounts::MountError::StillMounted { mount, .. } => {
            TemplateError::StillMounted {
                path: path.to_owned(),
                mount,
            }
        }
        lizard_jail::mounts::MountError::BadDir { .. } => TemplateError::StillMounted {
            path: path.to_owned(),
            mount: path.to_owned(),
        },
    })
}

/// Deletes `path` and everything under it (not following symlinks), after detaching any mount
/// under it; refuses if a mount cannot be detached.
pub(crate) fn remove_tree(step: &'static str, path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    unmount_all(path)?;
    fs::remove_dir_all(path).at(step, "removing", path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn an_interrupted_builds_proc_is_detached_and_nothing_is_followed() {
        lizard_test_support::needs_root!();
        // What a host-side build killed by SIGKILL leaves: `.build-*` with /proc mounted in its
        // chroot (and a tmpfs under that chroot), plus a leftover `.build-*` symlink to a
        // directory with a mount of its own: both must survive (the code before followed it
        // and detached that mount).
        let t = tempfile::tempdir().unwrap();
        let tdir = t.path().join("templates/t");
        let stale = tdir.join(format!("{BUILD_PREFIX}k-1"));
        fs::create_dir_all(stale.join("rootfs/proc")).unwrap();
        fs::create_dir_all(stale.join("rootfs/tmp")).unwrap();
        for (args, at) in [
            (["-t", "proc", "proc"], "rootfs/proc"),
            (["-t", "tmpfs", "tmpfs"], "rootfs/tmp"),
        ] {
            let ok = Command::new("mount")
                .args(args)
                .arg(stale.join(at))
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "mount {args:?} {at}");
        }
        let precious = t.path().join("precious");
        fs::create_dir(&precious).unwrap();
        fs::write(precious.join("keep"), "x").unwrap();
        let link = tdir.join(format!("{BUILD_PREFIX}k-2"));
        std::os::unix::fs::symlink(&precious, &link).unwrap();
        let real = fs::canonicalize(&stale).unwrap();
        assert_eq!(lizard_jail::mounts::mounts_under(&real).len(), 2);

        fs::create_dir(precious.join("m")).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(precious.join("m"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -t tmpfs precious/m");
        let outside = fs::canonicalize(&precious).unwrap();

        let removed = remove_stale_builds("test", &tdir);
        let outside_mounts = lizard_jail::mounts::mounts_under(&outside).len();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(precious.join("m"))
            .status();
        let mut removed = removed.unwrap();
        removed.sort();
        assert_eq!(removed, vec![stale.clone(), link.clone()]);
        assert!(lizard_jail::mounts::mounts_under(&real).is_empty());
        assert!(!stale.exists() && fs::symlink_metadata(&link).is_err());
        assert!(
            precious.join("keep").exists(),
            "the symlink was not followed"
        );
        assert_eq!(outside_mounts, 1, "a mount behind the symlink was detached");
    }

    fn fake_build(data: &Path, name: &str, key: &str, marker: bool) -> PathBuf {
        let dir = template_dir(data, name).join(key);
        fs::create_dir_all(dir.join("rootfs")).unwrap();
        let meta = crate::meta::test_meta(name, key);
        fs::write(dir.join(META_FILE), serde_json::to_vec(&meta).unwrap()).unwrap();
        if marker {
            fs::write(dir.join(MARKER), format!("{key}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn a_users_template_is_found_by_name() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path();
        assert!(crate::find_built(d, "mine").is_none());
        fake_build(d, "mine", "k1", true);
        fake_build(d, "mine", "k2", false); // incomplete: never used
        assert_eq!(crate::find_built(d, "mine").unwrap().key, "k1");
        assert!(crate::find_built(d, "../mine").is_none());
        assert!(crate::find_built(d, "").is_none());
    }

    #[test]
    fn only_complete_current_builds_are_found() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path();
        assert!(read_build(d, "t", "aaaa").is_none());
        fake_build(d, "t", "aaaa", false);
        assert!(
            read_build(d, "t", "aaaa").is_none(),
            "no marker: not complete"
        );
        let dir = fake_build(d, "t", "aaaa", true);
        let t = read_build(d, "t", "aaaa").unwrap();
        assert_eq!(t.rootfs, dir.join("rootfs"));
        assert_eq!(t.meta.id_shift, 100000);
        assert!(read_build(d, "t", "bbbb").is_none(), "other key");
        assert!(read_build(d, "u", "aaaa").is_none(), "other name");
        fs::write(dir.join(MARKER), "bbbb\n").unwrap();
        assert!(
            read_build(d, "t", "aaaa").is_none(),
            "marker for another key"
        );
        fs::write(dir.join(MARKER), "aaaa\n").unwrap();
        fs::write(dir.join(META_FILE), "{").unwrap();
        assert!(read_build(d, "t", "aaaa").is_none(), "broken metadata");
    }

    #[test]
    fn builds_in_use_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let tdir = tmp.path();
        for k in ["old", "used", "new"] {
            fs::create_dir(tdir.join(k)).unwrap();
        }
        pin(&tdir.join("used"), "sbx1").unwrap();
        let removed = remove_other_keys("test", tdir, "new").unwrap();
        assert_eq!(removed, vec![tdir.join("old")]);
        assert!(tdir.join("used").is_dir() && in_use(&tdir.join("used")));
        unpin(&tdir.join("used"), "sbx1");
        assert!(!in_use(&tdir.join("used")));
        assert_eq!(
            remove_other_keys("test", tdir, "new").unwrap(),
            vec![tdir.join("used")]
        );
    }

    #[test]
    fn stale_builds_and_old_keys_are_removed() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path();
        fake_build(d, "t", "old", true);
        fake_build(d, "t", "new", true);
        let tdir = template_dir(d, "t");
        let b = new_build_dir("test", &tdir, "new").unwrap();
        fs::write(b.join("partial"), "x").unwrap();
        fs::write(tdir.join(".lock"), "").unwrap();
        assert_eq!(remove_stale_builds("test", &tdir).unwrap(), vec![b.clone()]);
        assert!(!b.exists());
        assert_eq!(
            remove_other_keys("test", &tdir, "new").unwrap(),
            vec![tdir.join("old")]
        );
        assert!(read_build(d, "t", "new").is_some());
        assert!(tdir.join(".lock").exists());
    }

    #[test]
    fn removal_refuses_to_descend_into_a_mount() {
        lizard_test_support::needs_root!();
        // A bind mount of a directory holding a precious file under a tree being removed: the
        // mount is detached first, so the precious file survives.
        let t = tempfile::tempdir().unwrap();
        let precious = t.path().join("precious");
        fs::create_dir(&precious).unwrap();
        fs::write(precious.join("keep"), "x").unwrap();
        let victim = t.path().join("victim");
        fs::create_dir_all(victim.join("mnt")).unwrap();
        let ok = Command::new("mount")
            .args(["--bind"])
            .arg(&precious)
            .arg(victim.join("mnt"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount --bind (the build runs as root)");
        remove_tree("test", &victim).unwrap();
        assert!(!victim.exists());
        assert!(precious.join("keep").exists());
    }

    #[test]
    fn lock_is_exclusive() {
        let t = tempfile::tempdir().unwrap();
        let first = BuildLock::acquire("test", t.path(), &mut || panic!("free lock")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = t.path().to_owned();
        let h = std::thread::spawn(move || {
            let mut waited = false;
            let _l = BuildLock::acquire("test", &p, &mut || waited = true).unwrap();
            tx.send(waited).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            rx.try_recv().is_err(),
            "second lock granted while the first is held"
        );
        drop(first);
        assert!(rx.recv().unwrap(), "the second waited");
        h.join().unwrap();
    }
}
