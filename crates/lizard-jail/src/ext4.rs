//! What a sparse ext4 image loop-mounted on the host takes, for the two kinds of image the server
//! makes: a sandbox's writable-layer disk ([`crate::disk`]) and a persistent volume
//! ([`crate::volume`]). Here: the sparse image file ([`create_sparse`]), `mkfs.ext4` with the
//! caller's options ([`mkfs`]), `mount -t ext4 -o loop,…` with the caller's options
//! ([`mount_loop`], [`ensure_loop_mounted`]), whether a directory is a mount point
//! ([`is_mounted`]), and the tool runner ([`run`]) whose failures name the step and carry the
//! tool's stderr.
//!
//! Not here: which options (each caller's), ownership and `lost+found` (the volume's), unmounting
//! (the disk detaches lazily, the volume retries `umount`), cleanup on error, sizes.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Failures of making or mounting an image; each names the step. [`crate::disk::DiskError`] and
/// [`crate::volume::VolumeError`] are made from it.
#[derive(Debug, thiserror::Error)]
pub enum Ext4Error {
    #[error(transparent)]
    Io(#[from] crate::StepIo),
    /// The tool could not be started (not installed, not executable).
    #[error("{step}: cannot run {}", program.display())]
    Spawn {
        step: &'static str,
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The tool ran and failed.
    #[error("{step} failed on {}: {status}: {stderr}", path.display())]
    Failed {
        step: &'static str,
        /// The file or directory the tool worked on.
        path: PathBuf,
        status: ExitStatus,
        /// Its stderr, trimmed.
        stderr: String,
    },
}

/// `source` as an [`Ext4Error::Io`] of `step` on `path`, for `map_err` (`?` turns it into the
/// caller's error).
pub fn io_err(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Ext4Error {
    let path = path.to_path_buf();
    move |source| Ext4Error::Io(crate::StepIo { step, path, source })
}

/// Run `cmd` (a file system tool working on `path`) to its end: no stdin, stdout dropped, stderr
/// kept for the error, messages in the C locale.
pub fn run(step: &'static str, cmd: &mut Command, path: &Path) -> Result<(), Ext4Error> {
    let out = cmd
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| Ext4Error::Spawn {
            step,
            program: PathBuf::from(cmd.get_program()),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(Ext4Error::Failed {
        step,
        path: path.to_path_buf(),
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Create the sparse file `image` (which must not exist) of `bytes`; with `mode`, created with
/// that mode and then set to it exactly (whatever the umask).
pub fn create_sparse(image: &Path, bytes: u64, mode: Option<u32>) -> Result<(), Ext4Error> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    if let Some(m) = mode {
        opts.mode(m);
    }
    let file = opts
        .open(image)
        .map_err(io_err("creating the image file", image))?;
    file.set_len(bytes)
        .map_err(io_err("sizing the image file", image))?;
    drop(file);
    if let Some(m) = mode {
        std::fs::set_permissions(image, std::fs::Permissions::from_mode(m))
            .map_err(io_err("setting the image file's mode", image))?;
    }
    Ok(())
}

/// The arguments of `mkfs.ext4` for `image` with the caller's `options`: always quiet, forced (a
/// file, not a block device) and with no blocks reserved for root (`-q -F -m 0`).
pub fn mkfs_args<I, S>(options: I, image: &Path) -> Vec<OsString>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut args: Vec<OsString> = ["-q", "-F", "-m", "0"].map(OsString::from).into();
    args.extend(options.into_iter().map(|o| o.as_ref().to_os_string()));
    args.push(image.as_os_str().to_os_string());
    args
}

/// Make an ext4 file system in `image` (`mkfs.ext4 -q -F -m 0 <options> <image>`).
pub fn mkfs<I, S>(image: &Path, options: I) -> Result<(), Ext4Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(
        "mkfs.ext4",
        Command::new("mkfs.ext4").args(mkfs_args(options, image)),
        image,
    )
}

/// The arguments of `mount` for `image` on `mountpoint`: `-t ext4 -o loop,<options>` (`loop`
/// makes the loop device detach itself on the last unmount).
pub fn mount_args(image: &Path, mountpoint: &Path, options: &str) -> Vec<OsString> {
    vec![
        "-t".into(),
        "ext4".into(),
        "-o".into(),
        format!("loop,{options}").into(),
        image.as_os_str().to_os_string(),
        mountpoint.as_os_str().to_os_string(),
    ]
}

/// Loop-mount `image` on the existing directory `mountpoint` with `options` (see
/// [`mount_args`]), whatever is mounted there already.
pub fn mount_loop(image: &Path, mountpoint: &Path, options: &str) -> Result<(), Ext4Error> {
    run(
        "mount -o loop",
        Command::new("mount").args(mount_args(image, mountpoint, options)),
        image,
    )
}

/// [`mount_loop`] unless a file system is mounted at `mountpoint` already ([`is_mounted`]); a
/// missing `image` is an [`Ext4Error::Io`] of its own.
pub fn ensure_loop_mounted(
    image: &Path,
    mountpoint: &Path,
    options: &str,
) -> Result<(), Ext4Error> {
    if is_mounted(mountpoint) {
        return Ok(());
    }
    std::fs::metadata(image).map_err(io_err("finding the image file", image))?;
    mount_loop(image, mountpoint, options)
}

/// Whether a file system is mounted at `dir` (not followed if a symlink): its device differs from
/// its parent's, or `/proc/self/mountinfo` lists it (authoritative: a bind of the parent's own
/// device has the same `st_dev`). `dir` is compared with mountinfo's real paths through its
/// parent's canonical path, so a relative or symlinked parent is found too.
pub fn is_mounted(dir: &Path) -> bool {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return false;
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let (Ok(me), Ok(above)) = (std::fs::symlink_metadata(dir), std::fs::metadata(parent)) else {
        return false;
    };
    if me.dev() != above.dev() {
        return true;
    }
    let (Ok(real), Ok(info)) = (
        std::fs::canonicalize(parent),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return false;
    };
    crate::mounts::parse_mountinfo(&info).contains(&real.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_tool_names_the_step_and_keeps_its_stderr() {
        let d = tempfile::tempdir().unwrap();
        let err = run(
            "listing",
            Command::new("sh").args(["-c", "echo out; echo '  no such thing  ' >&2; exit 3"]),
            d.path(),
        )
        .unwrap_err();
        match &err {
            Ext4Error::Failed {
                step,
                path,
                status,
                stderr,
            } => {
                assert_eq!(*step, "listing");
                assert_eq!(path, d.path());
                assert_eq!(status.code(), Some(3));
                assert_eq!(stderr, "no such thing");
            }
            e => panic!("not Failed: {e:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!(
                "listing failed on {}: exit status: 3: no such thing",
                d.path().display()
            )
        );
        // A tool that succeeds is Ok, whatever it writes.
        run(
            "ok",
            Command::new("sh").args(["-c", "echo out; echo err >&2"]),
            d.path(),
        )
        .unwrap();
    }

    #[test]
    fn a_missing_tool_is_a_spawn_error_naming_it() {
        let err = run(
            "mkfs",
            &mut Command::new("/nonexistent/lizard-no-such-tool"),
            Path::new("/x.img"),
        )
        .unwrap_err();
        match &err {
            Ext4Error::Spawn {
                step,
                program,
                source,
            } => {
                assert_eq!(*step, "mkfs");
                assert_eq!(program, Path::new("/nonexistent/lizard-no-such-tool"));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            e => panic!("not Spawn: {e:?}"),
        }
        assert_eq!(
            err.to_string(),
            "mkfs: cannot run /nonexistent/lizard-no-such-tool"
        );
    }

    #[test]
    fn tool_arguments_are_assembled_in_order() {
        let img = Path::new("/d/disk.img");
        assert_eq!(
            mkfs_args(["-L", "x"], img),
            ["-q", "-F", "-m", "0", "-L", "x", "/d/disk.img"].map(OsString::from)
        );
        assert_eq!(
            mkfs_args(Vec::<String>::new(), img),
            ["-q", "-F", "-m", "0", "/d/disk.img"].map(OsString::from)
        );
        assert_eq!(
            mount_args(img, Path::new("/d/disk"), "nosuid,nodev"),
            [
                "-t",
                "ext4",
                "-o",
                "loop,nosuid,nodev",
                "/d/disk.img",
                "/d/disk"
            ]
            .map(OsString::from)
        );
    }

    #[test]
    fn a_sparse_image_has_its_size_and_mode_and_is_never_reused() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("a.img");
        create_sparse(&img, 64 << 20, Some(0o600)).unwrap();
        let m = std::fs::metadata(&img).unwrap();
        assert_eq!((m.len(), m.mode() & 0o7777), (64 << 20, 0o600));
        assert!(
            m.blocks() * 512 < 1 << 20,
            "not sparse: {} blocks",
            m.blocks()
        );
        match create_sparse(&img, 1, None) {
            Err(Ext4Error::Io(crate::StepIo { step, source, .. })) => {
                assert_eq!(step, "creating the image file");
                assert_eq!(source.kind(), io::ErrorKind::AlreadyExists);
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    }

    #[test]
    fn mount_points_are_told_apart_from_plain_directories() {
        assert!(is_mounted(Path::new("/proc")));
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert!(!is_mounted(&plain));
        assert!(!is_mounted(&d.path().join("missing")));
    }

    /// Needs root (a bind mount of the parent's own device, which `st_dev` cannot tell); skipped
    /// otherwise.
    #[test]
    fn a_same_device_bind_is_found_through_mountinfo() {
        lizard_test_support::needs_root!();
        let d = tempfile::tempdir().unwrap();
        let (src, at) = (d.path().join("src"), d.path().join("at"));
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&at).unwrap();
        nix::mount::mount(
            Some(&src),
            &at,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let found = is_mounted(&at);
        // Through a symlinked parent as well.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        let found_through_link = is_mounted(&link.join("at"));
        nix::mount::umount2(&at, nix::mount::MntFlags::MNT_DETACH).unwrap();
        assert!(found && found_through_link);
        assert!(!is_mounted(&at));
    }
}
