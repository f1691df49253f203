//! Host side of persistent volumes: a volume is a sparse ext4 image file, loop-mounted by the
//! server (host root) at a directory of its own. This module creates the image (`mkfs.ext4`, root
//! directory owned by the sandbox user's host ids, mode 02775, no `lost+found`), mounts it
//! (`mount -o loop,nosuid,nodev,discard`), tells whether it is mounted, unmounts it, and reports how
//! many bytes are in use. The image file, `mkfs.ext4`, the loop mount and the mount check are
//! [`crate::ext4`]'s, with this module's options.
//!
//! The size limit is the image size: a write past it fails with `ENOSPC` inside the file system,
//! and `discard` gives the blocks of deleted files back to the host (the image stays sparse).
//!
//! Not here: which sandbox mounts which volume, names, projects (the server's); how a volume gets
//! into a sandbox (a [`crate::sandbox::Bind`] of the mount directory). Nothing here reads or walks
//! the *contents* of a volume, which sandboxes write: only the fresh file system's root is touched,
//! right after `mkfs`, before any sandbox has seen it.

use crate::ext4::{self, io_err, Ext4Error};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::ext4::is_mounted;

/// Smallest image `create_image` makes (ext4 with a journal needs a few MiB of metadata).
pub const MIN_SIZE_BYTES: u64 = 16 * 1024 * 1024;

/// Volume failures; each names the step and the path.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(transparent)]
    Io(#[from] crate::StepIo),
    #[error("{program} failed on {path}: {message}")]
    Tool {
        program: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("volume size {0} bytes is below the minimum of {MIN_SIZE_BYTES}")]
    TooSmall(u64),
}

impl From<Ext4Error> for VolumeError {
    fn from(e: Ext4Error) -> Self {
        match e {
            Ext4Error::Io(e) => VolumeError::Io(e),
            Ext4Error::Spawn {
                program, source, ..
            } => VolumeError::Io(crate::StepIo {
                step: "running a file system tool",
                path: program,
                source,
            }),
            Ext4Error::Failed {
                step,
                path,
                status,
                stderr,
            } => VolumeError::Tool {
                program: step,
                path,
                message: format!("{status}: {stderr}"),
            },
        }
    }
}

/// `mkfs.ext4` options (after `-q -F -m 0`): the label, the root directory owned by `owner`, lazy
/// inode table and journal initialisation, no discard of the fresh image.
fn mkfs_options(owner: (u32, u32)) -> [String; 4] {
    [
        "-L".into(),
        "lizard-volume".into(),
        "-E".into(),
        format!(
            "root_owner={}:{},lazy_itable_init=1,lazy_journal_init=1,nodiscard",
            owner.0, owner.1
        ),
    ]
}

/// Mount options (after `loop,`): `discard` gives deleted files' blocks back to the host.
const MOUNT_OPTIONS: &str = "nosuid,nodev,discard,noatime";

/// Create a sparse ext4 image of `size_bytes` at `image` (which must not exist) whose root
/// directory is owned by `owner` (host uid, gid) with mode 02775 (setgid, group-writable), and
/// mount it at `mountpoint` (created). On error nothing is left behind.
pub fn create_image(
    image: &Path,
    mountpoint: &Path,
    size_bytes: u64,
    owner: (u32, u32),
) -> Result<(), VolumeError> {
    if size_bytes < MIN_SIZE_BYTES {
        return Err(VolumeError::TooSmall(size_bytes));
    }
    let result = (|| -> Result<(), VolumeError> {
        ext4::create_sparse(image, size_bytes, Some(0o600))?;
        ext4::mkfs(image, mkfs_options(owner))?;
        mount(image, mountpoint)?;
        // The fresh file system has only `lost+found`; the sandbox user could not remove it.
        let lf = mountpoint.join("lost+found");
        match std::fs::remove_dir(&lf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing lost+found", &lf)(e).into()),
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

/// Loop-mount `image` at `mountpoint` (created if missing) with `nosuid,nodev,discard`.
/// Idempotent: an already mounted `mountpoint` is left as it is.
pub fn mount(image: &Path, mountpoint: &Path) -> Result<(), VolumeError> {
    match std::fs::create_dir(mountpoint) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("creating the volume mount point", mountpoint)(e).into()),
    }
    Ok(ext4::ensure_loop_mounted(image, mountpoint, MOUNT_OPTIONS)?)
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
        match ext4::run("umount", Command::new("umount").arg(mountpoint), mountpoint) {
            Ok(()) => return Ok(()),
            Err(_) if tries < 10 && is_mounted(mountpoint) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50 * tries));
            }
            Err(e) => return Err(e.into()),
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
        .map_err(|e| io_err("reading the volume image", image)(e).into())
}

/// Unmount, then remove the image and the mount point.
pub fn destroy(image: &Path, mountpoint: &Path) -> Result<(), VolumeError> {
    unmount(mountpoint)?;
    match std::fs::remove_dir(mountpoint) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("removing the volume mount point", mountpoint)(e).into()),
    }
    match std::fs::remove_file(image) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing the volume image", image)(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkfs_and_mount_arguments_are_the_volume_s() {
        let (img, mnt) = (Path::new("/v/a.img"), Path::new("/v/a"));
        let mkfs: Vec<String> = ext4::mkfs_args(mkfs_options((4242, 4243)), img)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            mkfs.join(" "),
            "-q -F -m 0 -L lizard-volume -E \
             root_owner=4242:4243,lazy_itable_init=1,lazy_journal_init=1,nodiscard /v/a.img"
        );
        let mount: Vec<String> = ext4::mount_args(img, mnt, MOUNT_OPTIONS)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            mount.join(" "),
            "-t ext4 -o loop,nosuid,nodev,discard,noatime /v/a.img /v/a"
        );
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
