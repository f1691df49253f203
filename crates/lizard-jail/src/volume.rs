//! Host side of persistent volumes: a volume is a sparse ext4 image file, loop-mounted by the
//! server (host root) at a directory of its own. This module creates the image (`mkfs.ext4`, root
//! directory owned by the sandbox user's host ids, mode 02775, no `lost+found`), mounts it
//! (`mount -o loop,nosuid,nodev,discard`), tells whether it is mounted, unmounts it, and reports how
//! many bytes are in use.
//!
//! The size limit is the image size: a write past it fails with `ENOSPC` inside the file system,
//! and `discard` gives the blocks of deleted files back to the host (the image stays sparse).
//!
//! Not here: which sandbox mounts which volume, names, projects (the server's); how a volume gets
//! into a sandbox (a [`crate::sandbox::Bind`] of the mount directory). Nothing here reads or walks
//! the *contents* of a volume, which sandboxes write: only the fresh file system's root is touched,
//! right after `mkfs`, before any sandbox has seen it.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Smallest image `create_image` makes (ext4 with a journal needs a few MiB of metadata).
pub const MIN_SIZE_BYTES: u64 = 16 * 1024 * 1024;

/// Volume failures; each names the step and the path.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{step}: {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{program} failed on {path}: {message}")]
    Tool {
        program: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("volume size {0} bytes is below the minimum of {MIN_SIZE_BYTES}")]
    TooSmall(u64),
}

fn io_err(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let path = path.to_path_buf();
    move |source| VolumeError::Io { step, path, source }
}

fn run(program: &'static str, cmd: &mut Command, path: &Path) -> Result<(), VolumeError> {
    let out = cmd
        .env("LC_ALL", "C")
        .output()
        .map_err(io_err("running a file system tool", Path::new(program)))?;
    if out.status.success() {
        return Ok(());
    }
    Err(VolumeError::Tool {
        program,
        path: path.to_path_buf(),
        message: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

/// Create a sparse ext4 image of `size_bytes` at `image` (which must not exist) whose root
/// directory is owned by `owner` (host uid, gid) with mode 02775 (setgid, group-writable), and mount it at `mountpoint`
/// (created). On error nothing is left behind.
pub fn create_image(
    image: &Path,
    mountpoint: &Path,
    size_bytes: u64,
    owner: (u32, u32),
) -> Result<(), VolumeError> {
    if size_bytes < MIN_SIZE_BYTES {
        return Err(VolumeError::TooSmall(size_bytes));
    }
    let result = (|| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(image)
            .map_err(io_err("creating the volume image", image))?;
        f.set_len(size_bytes)
            .map_err(io_err("sizing the volume image", image))?;
        drop(f);
        std::fs::set_permissions(image, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod of the volume image", image))?;
        run(
            "mkfs.ext4",
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-m", "0", "-L", "lizard-volume", "-E"])
                .arg(format!(
                    "root_owner={}:{},lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                    owner.0, owner.1
                ))
                .arg(image),
            image,
        )?;
        mount(image, mountpoint)?;
        // The fresh file system has only `lost+found`; the sandbox user could not remove it.
        let lf = mountpoint.join("lost+found");
        match std::fs::remove_dir(&lf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing lost+found", &lf)(e)),
        }
        // Setgid and group-writable, like the sandbox user's home: contexts run as uids of their
        // own in the user's group and share files through it.
        std::fs::set_permissions(mountpoint, std::fs::Permissions::from_mode(0o2775))
            .map_err(io_err("chmod of the volume root", mountpoint))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = unmount(mountpoint);
        let _ = std::fs::remove_dir(mountpoint);
        let _ = std::fs::remove_file(image);
    }
    result
}

/// Whether a file system is mounted at `dir` (its device differs from its parent's, or it is
/// listed in `/proc/self/mountinfo`).
pub fn is_mounted(dir: &Path) -> bool {
    let (Ok(me), Some(Ok(parent))) = (
        std::fs::symlink_metadata(dir),
        dir.parent().map(std::fs::metadata),
    ) else {
        return false;
    };
    if me.dev() != parent.dev() {
        return true;
    }
    // A bind of the same device would not show in st_dev; mountinfo is authoritative.
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|p| unescape_mountinfo(p) == want)
}

fn unescape_mountinfo(s: &str) -> String {
    // Spaces, tabs, newlines and backslashes are octal escapes (`\040`) in mountinfo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && s.is_char_boundary(i + 4) {
            if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(n);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Loop-mount `image` at `mountpoint` (created if missing) with `nosuid,nodev,discard`.
/// Idempotent: an already mounted `mountpoint` is left as it is.
pub fn mount(image: &Path, mountpoint: &Path) -> Result<(), VolumeError> {
    match std::fs::create_dir(mountpoint) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("creating the volume mount point", mountpoint)(e)),
    }
    if is_mounted(mountpoint) {
        return Ok(());
    }
    run(
        "mount",
        Command::new("mount")
            .args(["-t", "ext4", "-o", "loop,nosuid,nodev,discard,noatime"])
            .arg(image)
            .arg(mountpoint),
        image,
    )
}

/// Unmount the volume at `mountpoint` if mounted (its loop device is released with the last
/// mount of the file system). Sandboxes that still have it mounted keep their own mounts, so the
/// caller must know that none does before it mounts the image again.
pub fn unmount(mountpoint: &Path) -> Result<(), VolumeError> {
    if !is_mounted(mountpoint) {
        return Ok(());
    }
    // A process forked elsewhere in this program can hold a descriptor of the volume between its
    // fork and exec (EBUSY for that moment): a few tries, then the error.
    let mut tries = 0;
    loop {
        match run("umount", Command::new("umount").arg(mountpoint), mountpoint) {
            Ok(()) => return Ok(()),
            Err(_) if tries < 10 && is_mounted(mountpoint) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50 * tries));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Bytes in use in the volume: from the mounted file system when it is mounted at `mountpoint`
/// (data and metadata in use, what `df` shows as used, including writes not yet flushed), else
/// the blocks the (sparse) image occupies on the host disk.
pub fn used_bytes(image: &Path, mountpoint: &Path) -> Result<u64, VolumeError> {
    if is_mounted(mountpoint) {
        if let Ok(st) = nix::sys::statvfs::statvfs(mountpoint) {
            // fsblkcnt_t / c_ulong are u64 here but not on every target.
            #[allow(clippy::unnecessary_cast)]
            let used = (st.blocks() as u64).saturating_sub(st.blocks_free() as u64);
            #[allow(clippy::unnecessary_cast)]
            let frsize = st.fragment_size() as u64;
            return Ok(used * frsize);
        }
    }
    disk_usage(image)
}

/// Bytes of host disk the image occupies (allocated blocks: data written plus file system
/// metadata; the image is sparse).
pub fn disk_usage(image: &Path) -> Result<u64, VolumeError> {
    std::fs::metadata(image)
        .map(|m| m.blocks() * 512)
        .map_err(io_err("reading the volume image", image))
}

/// Unmount, then remove the image and the mount point.
pub fn destroy(image: &Path, mountpoint: &Path) -> Result<(), VolumeError> {
    unmount(mountpoint)?;
    match std::fs::remove_dir(mountpoint) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("removing the volume mount point", mountpoint)(e)),
    }
    match std::fs::remove_file(image) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing the volume image", image)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/x\\"), "/x\\");
    }

    #[test]
    fn too_small_is_refused_before_touching_disk() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("v.img");
        assert!(matches!(
            create_image(&img, &d.path().join("v"), 1024, (0, 0)),
            Err(VolumeError::TooSmall(1024))
        ));
        assert!(!img.exists());
    }

    /// Needs root (mount); skipped otherwise.
    #[test]
    fn create_mount_limit_unmount() {
        if !nix::unistd::Uid::effective().is_root() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (img, mnt) = (d.path().join("v.img"), d.path().join("v"));
        create_image(&img, &mnt, MIN_SIZE_BYTES, (4242, 4243)).unwrap();
        assert!(is_mounted(&mnt));
        let m = std::fs::metadata(&mnt).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (4242, 4243, 0o2775));
        assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
        // Idempotent mount.
        mount(&img, &mnt).unwrap();
        // The size limit is the image size: 32 MiB cannot fit in 16.
        let big = vec![7u8; 1024 * 1024];
        let mut f = std::fs::File::create(mnt.join("big")).unwrap();
        let err = (0..32)
            .try_for_each(|_| std::io::Write::write_all(&mut f, &big).and_then(|_| f.sync_all()))
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        drop(f);
        assert!(disk_usage(&img).unwrap() > 4 * 1024 * 1024);
        assert!(used_bytes(&img, &mnt).unwrap() > 8 * 1024 * 1024);
        destroy(&img, &mnt).unwrap();
        assert!(!img.exists() && !mnt.exists());
    }
}
