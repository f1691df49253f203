//! A sandbox's disk quota: its writable layer lives on a file system of its own, a sparse ext4
//! image loop-mounted on the host, so filling it gives ENOSPC inside the sandbox and nothing else.
//!
//! [`create`] makes the image (`mkfs.ext4`, no journal: the layer is thrown away with the sandbox;
//! one inode per 16 KiB, like ext4's default) and mounts it (`mount -o loop`, which sets the loop
//! device to detach itself on the last unmount) `nosuid,nodev,noinit_itable` (no background
//! zeroing of inode tables: the image stays sparse), both through [`crate::ext4`] with this
//! module's options. [`unmount`] lazily detaches it. Measured here: ≈ 4 ms for `mkfs.ext4` and
//! ≈ 3 ms for the mount of a 10 GiB image (≈ 200 KiB of it written); the server's warm pool does it
//! ahead of `create`.
//!
//! Not here: where the image lives or how big it is (the server decides), the overlay (see
//! `sandbox`).

use crate::ext4::{self, Ext4Error};
use std::io;
use std::path::{Path, PathBuf};

/// Failures of creating or mounting a disk image; each names the step.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error(transparent)]
    Io(#[from] crate::StepIo),
    #[error("{step} failed: {detail}")]
    Tool { step: &'static str, detail: String },
}

impl From<Ext4Error> for DiskError {
    fn from(e: Ext4Error) -> Self {
        match e {
            Ext4Error::Io(e) => DiskError::Io(e),
            Ext4Error::Spawn { step, source, .. } => DiskError::Tool {
                step,
                detail: source.to_string(),
            },
            Ext4Error::Failed {
                step,
                status,
                stderr,
                ..
            } => DiskError::Tool {
                step,
                detail: format!("{status}: {stderr}"),
            },
        }
    }
}

/// Smallest image: ext4 needs a few MiB of its own.
pub const MIN_BYTES: u64 = 16 * 1024 * 1024;

/// `mkfs.ext4` options (after `-q -F -m 0`): no journal (the layer dies with the sandbox) and no
/// reserved GDT blocks for online resizing (never resized): mkfs writes ≈ 200 KiB instead of
/// 4 MiB, 4 ms instead of 10. One inode per 16 KiB.
const MKFS_OPTIONS: [&str; 6] = [
    "-i",
    "16384",
    "-O",
    "^has_journal,^resize_inode",
    "-E",
    "nodiscard,lazy_itable_init=1",
];

/// Mount options (after `loop,`) of a fresh image: no background zeroing of inode tables.
const MOUNT_OPTIONS: &str = "nosuid,nodev,noatime,noinit_itable";

/// Mount options (after `loop,`) of an image mounted again by [`ensure_mounted`].
const REMOUNT_OPTIONS: &str = "nosuid,nodev,noatime";

/// Create a sparse ext4 image of `bytes` at `image` and mount it on `mountpoint` (created if
/// missing). On failure nothing stays mounted; the image file may remain (the caller removes its
/// directory).
pub fn create(image: &Path, mountpoint: &Path, bytes: u64) -> Result<(), DiskError> {
    ext4::create_sparse(image, bytes.max(MIN_BYTES), None)?;
    std::fs::create_dir_all(mountpoint)
        .map_err(ext4::io_err("creating the mountpoint", mountpoint))?;
    ext4::mkfs(image, MKFS_OPTIONS)?;
    Ok(ext4::mount_loop(image, mountpoint, MOUNT_OPTIONS)?)
}

/// Mount an existing image (made by [`create`]) on `mountpoint` again, unless something is mounted
/// there already (a hibernated sandbox's layer, after a server restart or a host reboot).
pub fn ensure_mounted(image: &Path, mountpoint: &Path) -> Result<(), DiskError> {
    std::fs::create_dir_all(mountpoint)
        .map_err(ext4::io_err("creating the mountpoint", mountpoint))?;
    Ok(ext4::ensure_loop_mounted(
        image,
        mountpoint,
        REMOUNT_OPTIONS,
    )?)
}

/// Lazily unmount what [`create`] mounted (the loop device goes with the last reference, e.g.
/// the sandbox's own mount namespace). Not mounted is fine.
pub fn unmount(mountpoint: &Path) -> Result<(), DiskError> {
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(DiskError::Io(crate::StepIo {
            step: "unmounting the disk image",
            path: mountpoint.to_path_buf(),
            source: e.into(),
        })),
    }
}

/// Free bytes (for an unprivileged user: without the blocks reserved for root) and total bytes of
/// the file system that holds `path`.
pub fn fs_space(path: &Path) -> io::Result<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    // fsblkcnt_t / c_ulong are u64 here but not on every target.
    #[allow(clippy::unnecessary_cast)]
    let frsize = st.fragment_size() as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok((
        st.blocks_available() as u64 * frsize,
        st.blocks() as u64 * frsize,
    ))
}

/// `FIFREEZE` / `FITHAW` (`_IOWR('X', 119, int)` / `_IOWR('X', 120, int)`, linux/fs.h).
const FIFREEZE: libc::c_ulong = 0xC004_5877;
const FITHAW: libc::c_ulong = 0xC004_5878;
/// `FICLONE` (`_IOW(0x94, 9, int)`): a reflink copy where the file system shares extents.
const FICLONE: libc::c_ulong = 0x4004_9409;

/// A mounted disk image's file system frozen (`FIFREEZE`: its dirty data written out, new writes
/// held until thawed), so the image file is a consistent, clean file system while it is copied.
/// Thawed when dropped.
#[derive(Debug)]
pub struct FrozenFs {
    dir: std::fs::File,
    thawed: bool,
}

impl FrozenFs {
    /// Freeze the file system mounted at `mountpoint` (the root of the mount: a host path the
    /// caller trusts, opened without following a symlink).
    pub fn freeze(mountpoint: &Path) -> Result<FrozenFs, DiskError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(mountpoint)
            .map_err(|source| {
                DiskError::Io(crate::StepIo {
                    step: "opening the mounted disk",
                    path: mountpoint.to_path_buf(),
                    source,
                })
            })?;
        // SAFETY: `dir` is an open descriptor owned here; FIFREEZE takes no pointer (its int
        // argument is unused), so no memory is shared with the kernel.
        let ret = unsafe { libc::ioctl(dir.as_raw_fd(), FIFREEZE as _, 0) };
        if ret != 0 {
            return Err(DiskError::Io(crate::StepIo {
                step: "freezing the disk's file system (FIFREEZE)",
                path: mountpoint.to_path_buf(),
                source: io::Error::last_os_error(),
            }));
        }
        Ok(FrozenFs { dir, thawed: false })
    }
}

impl FrozenFs {
    fn thaw_fd(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: as in `freeze`: an owned open descriptor, an ioctl without a pointer.
        let ret = unsafe { libc::ioctl(self.dir.as_raw_fd(), FITHAW as _, 0) };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Thaw it now, and say whether that worked (dropping it thaws too, silently).
    pub fn thaw(mut self) -> Result<(), DiskError> {
        let r = self.thaw_fd();
        self.thawed = true;
        r.map_err(|source| {
            DiskError::Io(crate::StepIo {
                step: "thawing the disk's file system (FITHAW)",
                path: PathBuf::new(),
                source,
            })
        })
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        if !self.thawed {
            let _ = self.thaw_fd();
        }
    }
}

/// How [`copy_image`] copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMethod {
    /// `FICLONE`: the copy shares the source's extents (btrfs, XFS with reflink).
    Reflink,
    /// Only the allocated ranges (`SEEK_DATA`/`SEEK_HOLE`), each with `copy_file_range`: holes
    /// stay holes.
    Sparse,
}

impl CopyMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            CopyMethod::Reflink => "reflink",
            CopyMethod::Sparse => "sparse copy_file_range",
        }
    }
}

/// The most a sparse copy moves between two looks at its deadline.
pub const COPY_CHUNK: u64 = 64 << 20;

/// Copy the image file `src` (the server's own file, never a sandbox's path) to the new file
/// `dst` (created, mode 0600; it must not exist): a reflink where the host file system allows,
/// else a sparse copy. `max_bytes` bounds the data copied (the image's size limit); a sparse copy
/// still going at `deadline` stops there (checked between chunks of [`COPY_CHUNK`] bytes: a copy
/// made while a sandbox is frozen must not keep it frozen without end). On failure `dst` is
/// removed. Returns the method and the bytes of data copied.
pub fn copy_image(
    src: &Path,
    dst: &Path,
    max_bytes: u64,
    deadline: Option<std::time::Instant>,
) -> Result<(CopyMethod, u64), DiskError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let io_err = |step: &'static str, path: &Path| {
        let f = ext4::io_err(step, path);
        move |source| DiskError::from(f(source))
    };
    let input = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(src)
        .map_err(io_err("opening the disk image", src))?;
    let meta = input
        .metadata()
        .map_err(io_err("checking the disk image", src))?;
    if !meta.file_type().is_file() {
        return Err(DiskError::Tool {
            step: "copying the disk image",
            detail: format!("{} is not a regular file", src.display()),
        });
    }
    let size = meta.len();
    let output = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dst)
        .map_err(io_err("creating the copy", dst))?;
    let copied = (|| {
        // SAFETY: both descriptors are open and owned here; FICLONE takes the source descriptor
        // as its integer argument, no pointer.
        let ret = unsafe { libc::ioctl(output.as_raw_fd(), FICLONE as _, input.as_raw_fd()) };
        if ret == 0 {
            return Ok((CopyMethod::Reflink, size));
        }
        let mut data = 0u64;
        let mut pos: i64 = 0;
        let end = size as i64;
        while pos < end {
            let start = match nix::unistd::lseek(&input, pos, nix::unistd::Whence::SeekData) {
                Ok(s) => s,
                // No data after `pos`: the rest is a hole.
                Err(nix::errno::Errno::ENXIO) => break,
                Err(e) => return Err(io_err("finding data in the image", src)(e.into())),
            };
            let stop = nix::unistd::lseek(&input, start, nix::unistd::Whence::SeekHole)
                .map_err(|e| io_err("finding a hole in the image", src)(e.into()))?
                .min(end);
            let (mut off_in, mut off_out) = (start, start);
            while off_in < stop {
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Err(DiskError::Tool {
                        step: "copying the disk image",
                        detail: format!("not done by its deadline ({data} bytes copied)"),
                    });
                }
                let want = ((stop - off_in) as u64).min(COPY_CHUNK) as usize;
                let n = nix::fcntl::copy_file_range(
                    &input,
                    Some(&mut off_in),
                    &output,
                    Some(&mut off_out),
                    want,
                )
                .map_err(|e| io_err("copying the image", dst)(e.into()))?;
                if n == 0 {
                    break;
                }
                data += n as u64;
                if data > max_bytes {
                    return Err(DiskError::Tool {
                        step: "copying the disk image",
                        detail: format!("more than {max_bytes} bytes of data"),
                    });
                }
            }
            pos = stop;
        }
        output
            .set_len(size)
            .map_err(io_err("sizing the copy", dst))?;
        output.sync_all().map_err(io_err("syncing the copy", dst))?;
        Ok((CopyMethod::Sparse, data))
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    copied
}

/// Bytes the file at `path` occupies on its file system (its blocks; 0 unless a regular file;
/// never followed).
pub fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => m.blocks() * 512,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(args: Vec<std::ffi::OsString>) -> String {
        let args: Vec<String> = args.into_iter().map(|a| a.into_string().unwrap()).collect();
        args.join(" ")
    }

    #[test]
    fn mkfs_and_mount_arguments_are_the_disk_s() {
        let (img, mnt) = (Path::new("/s/disk.img"), Path::new("/s/disk"));
        assert_eq!(
            joined(ext4::mkfs_args(MKFS_OPTIONS, img)),
            "-q -F -m 0 -i 16384 -O ^has_journal,^resize_inode -E nodiscard,lazy_itable_init=1 \
             /s/disk.img"
        );
        assert_eq!(
            joined(ext4::mount_args(img, mnt, MOUNT_OPTIONS)),
            "-t ext4 -o loop,nosuid,nodev,noatime,noinit_itable /s/disk.img /s/disk"
        );
        assert_eq!(
            joined(ext4::mount_args(img, mnt, REMOUNT_OPTIONS)),
            "-t ext4 -o loop,nosuid,nodev,noatime /s/disk.img /s/disk"
        );
    }

    /// Needs root (loop devices); skipped otherwise.
    #[test]
    fn a_full_disk_is_enospc_and_unmounts() {
        lizard_test_support::needs_root!();
        let dir = tempfile::tempdir().unwrap();
        let (img, mnt) = (dir.path().join("disk.img"), dir.path().join("disk"));
        create(&img, &mnt, MIN_BYTES).unwrap();
        let big = vec![7u8; 1024 * 1024];
        let mut f = std::fs::File::create(mnt.join("fill")).unwrap();
        let err = loop {
            use std::io::Write;
            if let Err(e) = f.write_all(&big) {
                break e;
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        drop(f);
        // Mounted already: left as it is (no second mount stacked on it).
        ensure_mounted(&img, &mnt).unwrap();
        let mounts_at = |p: &Path| {
            let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
            let real = std::fs::canonicalize(p).unwrap();
            crate::mounts::parse_mountinfo(&info)
                .into_iter()
                .filter(|m| *m == real)
                .count()
        };
        assert_eq!(mounts_at(&mnt), 1);
        unmount(&mnt).unwrap();
        assert!(!mnt.join("fill").exists());
        // The restart path: not mounted any more, so mounted again, with its files.
        ensure_mounted(&img, &mnt).unwrap();
        assert!(mnt.join("fill").exists());
        assert_eq!(mounts_at(&mnt), 1);
        unmount(&mnt).unwrap();
        assert!(!mnt.join("fill").exists());
        // A missing image is an error naming it.
        let e = ensure_mounted(&dir.path().join("gone.img"), &mnt).unwrap_err();
        assert!(e.to_string().contains("gone.img"), "{e}");
        // The image stays sparse-ish: far less than its size on disk after removal of the mount.
        unmount(&mnt).unwrap();
    }

    /// Needs root (loop devices); skipped otherwise.
    #[test]
    fn a_frozen_image_copies_sparsely_and_mounts() {
        lizard_test_support::needs_root!();
        let dir = tempfile::tempdir().unwrap();
        let (img, mnt) = (dir.path().join("disk.img"), dir.path().join("disk"));
        create(&img, &mnt, 64 * 1024 * 1024).unwrap();
        std::fs::write(mnt.join("hello"), vec![5u8; 300_000]).unwrap();
        let copy = dir.path().join("copy.img");
        let (method, data) = {
            let _frozen = FrozenFs::freeze(&mnt).unwrap();
            copy_image(&img, &copy, 64 * 1024 * 1024, None).unwrap()
        };
        // Thawed again: writable.
        std::fs::write(mnt.join("after"), "x").unwrap();
        assert!(data < 16 * 1024 * 1024, "{method:?} {data}");
        assert_eq!(std::fs::metadata(&copy).unwrap().len(), 64 * 1024 * 1024);
        assert!(allocated_bytes(&copy) < 16 * 1024 * 1024);
        // An existing destination is never overwritten; a bound too small fails and leaves nothing.
        assert!(copy_image(&img, &copy, u64::MAX, None).is_err());
        let small = dir.path().join("small.img");
        if method == CopyMethod::Sparse {
            assert!(copy_image(&img, &small, 1024, None).is_err());
            assert!(!small.exists());
            // A copy past its deadline stops and leaves nothing.
            let late = copy_image(&img, &small, u64::MAX, Some(std::time::Instant::now()));
            let e = late.unwrap_err().to_string();
            assert!(e.contains("deadline"), "{e}");
            assert!(!small.exists());
        }
        let m2 = dir.path().join("m2");
        ensure_mounted(&copy, &m2).unwrap();
        assert_eq!(std::fs::read(m2.join("hello")).unwrap(), vec![5u8; 300_000]);
        assert!(!m2.join("after").exists());
        unmount(&m2).unwrap();
        unmount(&mnt).unwrap();
    }
}
