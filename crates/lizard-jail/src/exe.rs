//! A program a sandbox runs without seeing it: a sealed, executable in-memory copy of a host
//! binary (`memfd_create`), which the launcher executes by descriptor (`execveat(AT_EMPTY_PATH)`).
//!
//! Why: a program bind-mounted into the sandbox appears in the sandbox's `/proc/self/mountinfo`
//! with its host path (the bind's root), which discloses where the server is installed. Executed
//! from a memfd, the program needs no mount at all; inside, its `/proc/<pid>/exe` reads
//! `/memfd:<name> (deleted)`. The copy is sealed (no write, grow, shrink or further seals), so
//! nothing, not even the server, can change it after it is made, and one copy serves every
//! sandbox of the server (page-cache pages shared, like a file's).
//!
//! Only the part of the file the loader maps is copied (every program header's extent: the
//! loadable segments, `PT_INTERP`, `PT_DYNAMIC`, notes, unwind tables), and the section header
//! table is dropped from the copy's ELF header: debug info stays on the host (a debug build of
//! `lizard` is 166 MB, its mapped part 28 MB). Programs that are not 64-bit little-endian ELF are
//! copied whole.
//!
//! Not here: what the program is (the server copies its own binary to run the agent) or how the
//! launcher finds it (`SandboxSpec::program_source`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Errors of making the sealed copy; each names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum ExeError {
    #[error("{step} {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A sealed, executable in-memory copy of a program. Dropping it closes this process's
/// descriptor; programs already executed from it keep running.
#[derive(Debug)]
pub struct SealedExe {
    file: File,
    len: u64,
}

/// Detach the tmpfs [`SealedExe::install_in_tmpfs`] mounted at `dir` and remove the directory
/// (sandboxes that bound its file keep it). Best effort.
pub fn remove_tmpfs_copy(dir: &Path) {
    let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(dir);
}

impl SealedExe {
    /// Copy the mapped part of the program at `path` into a new memfd named `name` (shown
    /// inside as `/memfd:<name>`), make it mode 0555 and seal it.
    pub fn copy_of(path: &Path, name: &str) -> Result<SealedExe, ExeError> {
        let err = |step: &'static str| {
            let path = path.to_path_buf();
            move |source: io::Error| ExeError::Io { step, path, source }
        };
        let mut src = File::open(path).map_err(err("opening"))?;
        let total = src.metadata().map_err(err("reading the size of"))?.len();
        let mut head = vec![0u8; 64.min(total as usize)];
        src.read_exact(&mut head).map_err(err("reading"))?;
        let phdrs = elf_program_headers(&head, &mut src).map_err(err("reading"))?;
        let len = match &phdrs {
            Some(p) => mapped_extent(&head, p).min(total),
            None => total,
        };

        let file = memfd(name).map_err(err("making an in-memory copy of"))?;
        src.seek(SeekFrom::Start(0)).map_err(err("reading"))?;
        let copied = io::copy(&mut (&mut src).take(len), &mut &file).map_err(err("copying"))?;
        if copied != len {
            return Err(err("copying")(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("file shrank while copying ({copied} of {len} bytes)"),
            )));
        }
        if phdrs.is_some() && len < total {
            // No section header table in the copy: it was cut off with the debug info.
            let mut f = &file;
            f.seek(SeekFrom::Start(0x28)).map_err(err("copying"))?;
            f.write_all(&0u64.to_le_bytes()).map_err(err("copying"))?; // e_shoff
            f.seek(SeekFrom::Start(0x3c)).map_err(err("copying"))?;
            f.write_all(&[0u8; 4]).map_err(err("copying"))?; // e_shnum, e_shstrndx
        }
        file.set_permissions(std::fs::Permissions::from_mode(0o555))
            .map_err(err("making executable the copy of"))?;
        seal(&file).map_err(err("sealing the copy of"))?;
        Ok(SealedExe { file, len })
    }

    /// A path by which another process on this host with access to ours (the launcher, as root)
    /// opens the copy: `/proc/<our pid>/fd/<fd>`.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ))
    }

    /// Install a copy of this program as the regular file `<dir>/<name>` (mode 0555) on a tmpfs
    /// of its own mounted at `dir` (made `0700` if missing; a mount already there, e.g. of an
    /// earlier server, is detached first — sandboxes that bound its file keep it), then made
    /// read-only. For sandboxes that must run their program from a regular file (a CRIU restore
    /// cannot give a process a memfd executable back): bound from there, its mount shows inside
    /// as `/<name>` of a tmpfs, no host path. The caller must be host root.
    pub fn install_in_tmpfs(&self, dir: &Path, name: &str) -> Result<PathBuf, ExeError> {
        use nix::mount::{mount, umount2, MntFlags, MsFlags};
        use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
        let err = |step: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source: io::Error| ExeError::Io { step, path, source }
        };
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err("creating", dir)(e)),
        }
        let parent = dir.parent().unwrap_or(Path::new("/"));
        let here = std::fs::symlink_metadata(dir).map_err(err("reading", dir))?;
        let above = std::fs::metadata(parent).map_err(err("reading", parent))?;
        if !here.is_dir() {
            return Err(err("not a directory:", dir)(
                io::ErrorKind::InvalidInput.into(),
            ));
        }
        if here.dev() != above.dev() {
            umount2(dir, MntFlags::MNT_DETACH).map_err(|e| err("unmounting", dir)(e.into()))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(err("chmod of", dir))?;
        let size = format!("mode=0700,nr_inodes=16,size={}", self.len + (1 << 20));
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(size.as_str()),
        )
        .map_err(|e| err("mounting a tmpfs on", dir)(e.into()))?;
        let path = dir.join(name);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o555)
            .open(&path)
            .map_err(err("creating", &path))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < self.len {
            let n = self
                .file
                .read_at(&mut buf, at)
                .map_err(err("reading the copy for", &path))?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(err("writing", &path))?;
            at += n as u64;
        }
        drop(out);
        // A process another thread of ours forks meanwhile holds a copy of the (close-on-exec)
        // writable descriptor until it execs, and the remount fails with EBUSY while it does:
        // tried again for up to a second.
        let mut tries = 0;
        loop {
            match mount(
                None::<&str>,
                dir,
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                None::<&str>,
            ) {
                Ok(()) => break,
                Err(nix::errno::Errno::EBUSY) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(err("making read-only", dir)(e.into())),
            }
        }
        Ok(path)
    }

    /// Bytes copied.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was copied (an empty source).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A new close-on-exec, sealable, executable memfd.
fn memfd(name: &str) -> io::Result<File> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd name contains NUL"))?;
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // MFD_EXEC (Linux 6.3+) says explicitly that the copy is meant to be executed (under
    // `vm.memfd_noexec=1` a memfd is otherwise created non-executable); older kernels reject the
    // flag with EINVAL, and their memfds are always executable.
    for flags in [base | libc::MFD_EXEC, base] {
        // SAFETY: `cname` is a valid NUL-terminated string that outlives the call; the flags are
        // plain bits; the returned fd (if any) is owned by nothing else.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by memfd_create and is owned by nothing else.
            return Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// No more writes, size changes, mode changes (where the kernel knows `F_SEAL_EXEC`) or seals.
fn seal(file: &File) -> io::Result<()> {
    // `F_SEAL_WRITE` fails with EBUSY while a page of the copy is still pinned (the kernel waits
    // a moment, then gives up): the copy's own `splice` under `io::copy` can leave pins that go a
    // moment later, on a busy machine. Retried a few times, 50 ms apart.
    let mut tries = 0;
    loop {
        match seal_once(file) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 10 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

fn seal_once(file: &File) -> io::Result<()> {
    let base = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK;
    for seals in [base | libc::F_SEAL_EXEC, base] {
        // SAFETY: F_ADD_SEALS on an fd we own; takes an int argument, no pointers.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        if r == 0 {
            // Last: nothing can be added or removed any more.
            // SAFETY: as above.
            let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SEAL) };
            return if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            };
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// One program header: where its bytes are in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    offset: u64,
    filesz: u64,
}

/// The program headers of a 64-bit little-endian ELF file (`head` = its first 64 bytes), or
/// `None` for anything else.
fn elf_program_headers(head: &[u8], file: &mut File) -> io::Result<Option<Vec<Extent>>> {
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Ok(None);
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let phoff = u64_at(head, 0x20);
    let phentsize = u16_at(0x36);
    let phnum = u16_at(0x38);
    if phentsize < 56 || phnum == 0 {
        return Ok(None);
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    file.seek(SeekFrom::Start(phoff))?;
    if file.read_exact(&mut table).is_err() {
        return Ok(None);
    }
    Ok(Some(
        table
            .chunks_exact(phentsize as usize)
            .map(|ph| Extent {
                offset: u64_at(ph, 0x08),
                filesz: u64_at(ph, 0x20),
            })
            .collect(),
    ))
}

/// Bytes of the file the loader can touch: the ELF header, the program header table and every
/// segment's file extent.
fn mapped_extent(head: &[u8], phdrs: &[Extent]) -> u64 {
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().unwrap_or([0; 8]));
    let phentsize = u16::from_le_bytes([head[0x36], head[0x37]]) as u64;
    let table_end = phoff.saturating_add(phentsize * phdrs.len() as u64);
    phdrs
        .iter()
        .map(|p| p.offset.saturating_add(p.filesz))
        .fold(table_end.max(64), u64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_sealed_copy_runs_and_cannot_be_changed() {
        lizard_test_support::needs_root!();
        let exe = SealedExe::copy_of(Path::new("/bin/sh"), "test-sh").unwrap();
        assert!(!exe.is_empty());
        let out = Command::new(exe.proc_path())
            .args(["-c", "echo from-memfd"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "from-memfd\n");

        // Not writable through any path: the seals refuse even root.
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(exe.proc_path())
            .map(Some)
            .or_else(|e| {
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                Ok::<_, io::Error>(None)
            })
            .unwrap();
        if let Some(w) = w.as_mut() {
            assert!(w.write_all(b"x").is_err());
        }
        assert!(exe.file.set_len(1).is_err());
        // SAFETY: F_GET_SEALS on an fd the test owns; no pointers.
        let seals = unsafe { libc::fcntl(exe.file.as_raw_fd(), libc::F_GET_SEALS) };
        assert_ne!(seals & libc::F_SEAL_SEAL, 0);
        assert_ne!(seals & libc::F_SEAL_WRITE, 0);
    }

    #[test]
    fn only_the_mapped_part_of_a_binary_is_copied() {
        // This test binary carries debug info that the loader never maps.
        let me = std::env::current_exe().unwrap();
        let total = std::fs::metadata(&me).unwrap().len();
        let exe = SealedExe::copy_of(&me, "test-self").unwrap();
        assert!(exe.len() < total, "{} of {total}", exe.len());
        // The truncated copy still runs: list this test by name.
        let out = Command::new(exe.proc_path())
            .args(["--list", "exe::tests::only_the_mapped_part"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("only_the_mapped_part"));
    }

    #[test]
    fn non_elf_files_are_copied_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("script");
        std::fs::write(&p, "#!/bin/sh\necho script-ran\n").unwrap();
        let exe = SealedExe::copy_of(&p, "test-script").unwrap();
        assert_eq!(exe.len(), std::fs::metadata(&p).unwrap().len());
        let mut back = String::new();
        File::open(exe.proc_path())
            .unwrap()
            .read_to_string(&mut back)
            .unwrap();
        assert!(back.contains("script-ran"));
    }

    #[test]
    fn a_missing_program_is_a_named_error() {
        let e = SealedExe::copy_of(Path::new("/nonexistent/lizard"), "x").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/lizard"), "{e}");
    }
}
