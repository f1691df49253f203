//! Checkpoints of a sandbox's process tree with CRIU (checkpoint/restore in user space), run as a
//! host program: [`Criu::check`] (is this CRIU usable on this kernel?), [`Criu::dump`] (write
//! the tree's images into a host directory) and [`Criu::restore`] (run the tree again from them,
//! on a root file system the caller mounted). Every run has a deadline (the process group is killed
//! when it passes) and its log is read with a size limit: CRIU parses the state of processes that
//! are not trusted, so neither its run time nor its output may be unbounded.
//!
//! The images directory is the caller's: host-side, root-only, never inside anything a sandbox can
//! reach (see [`ImagesDir`]). Not here: when to checkpoint, what a failure means for hibernation
//! (the server's `sandboxes` module), installing CRIU (`scripts/criu.sh`).
//!
//! Options of a dump and why (see docs/ARCHITECTURE.md, "Hibernation"):
//! - `--tcp-established`: a TCP connection inside the sandbox (its own loopback) is part of it;
//! - `--ext-unix-sk`: the agent's listening socket at fd 3 is bound in a host directory;
//! - `--file-locks`: kernels may hold flock()s;
//! - `--network-lock skip`: the sandbox's network namespace is its own and is stopped with it (the
//!   default, iptables, fails here: the sandbox's netns has no xt_mark rules to load);
//! - `--manage-cgroups`: `soft` when [`DumpSpec::manage_cgroups`] (hibernation and snapshots: the
//!   restore puts every task back into its cgroup below the sandbox's, which CRIU runs in — the
//!   contexts' cgroups with their limits — and the sandbox's cgroup namespace), else `ignore` (old
//!   snapshots: every task in the clone's root cgroup). The restore maps the dumped sandbox
//!   cgroup onto [`RestoreSpec::cgroup`] with `--cgroup-root <controller>:<path>` (a clone's path
//!   names another sandbox than its source's).

use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The most of a CRIU log (or its output) that is read: its last 64 KiB.
pub const MAX_LOG_BYTES: u64 = 64 * 1024;

/// Errors of running CRIU.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("running {program}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("criu {action} did not finish within {deadline:?} (killed)")]
    Deadline {
        action: &'static str,
        deadline: Duration,
    },
    #[error("criu {action} failed ({status}): {detail}")]
    Failed {
        action: &'static str,
        status: String,
        /// CRIU's `Error` lines (the last few), else the end of its log.
        detail: String,
    },
    #[error("the images directory {path}: {reason}")]
    ImagesDir { path: PathBuf, reason: String },
    #[error(transparent)]
    Io(#[from] crate::StepIo),
}

/// A CRIU program: `target/criu/criu` of `scripts/criu.sh` (a wrapper that runs a Debian testing
/// root's criu through that root's loader), or any `criu` >= 4.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criu {
    pub program: PathBuf,
    /// A directory on a tmpfs of the caller's, root-only ([`mount_run_dir`]), that every run of
    /// this CRIU sees as `/run` (in a private mount namespace of its own, see [`Criu::command`]):
    /// CRIU keeps the facts it probes about the kernel (≈ 40 ms of every run: a dozen probes, a
    /// forked child, `iptables`) in `/run/criu.kdat` only when `/run` is a tmpfs, which it is not
    /// on every host (and a `.tmp` left by a killed run blocks that cache until a reboot).
    pub run_dir: Option<PathBuf>,
}

/// Make `dir` a small root-only tmpfs for [`Criu::run_dir`] (one per server: the cache it holds
/// is the same for every run; kept until [`unmount_run_dir`] or a reboot, whose kernel may differ).
/// An existing tmpfs mounted there (a previous server's) is kept.
pub fn mount_run_dir(dir: &Path) -> Result<(), CheckpointError> {
    use nix::mount::{mount, MsFlags};
    let io = |step: &'static str| {
        let path = dir.to_path_buf();
        move |source: io::Error| CheckpointError::Io(crate::StepIo { step, path, source })
    };
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating CRIU's run directory")(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io("reading CRIU's run directory"))?;
    if !meta.is_dir() {
        return Err(CheckpointError::ImagesDir {
            path: dir.to_path_buf(),
            reason: "CRIU's run directory is not a directory".into(),
        });
    }
    let fs = nix::sys::statfs::statfs(dir).map_err(|e| io("statfs")(e.into()))?;
    let above = std::fs::metadata(dir.parent().unwrap_or(Path::new("/")))
        .map_err(io("reading CRIU's run directory"))?;
    if fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC && meta.dev() != above.dev() {
        return Ok(());
    }
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700,nr_inodes=16,size=256k"),
    )
    .map_err(|e| io("mounting a tmpfs on CRIU's run directory")(e.into()))
}

/// Undo [`mount_run_dir`] (lazily: a CRIU still running keeps its view).
pub fn unmount_run_dir(dir: &Path) {
    let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
}

/// In the child of [`Criu::command`], before exec: a mount namespace of its own whose `/run` is
/// `run_dir`. Raw syscalls on strings made before the fork only (no allocation, no lock).
fn private_run(run_dir: &std::ffi::CStr) -> io::Result<()> {
    private_mounts(Some(run_dir), false)
}

/// In the child of [`Criu::command_with_own_proc`], before exec: a private mount namespace with a
/// new proc on `/proc` and `run_dir` on `/run`.
fn own_proc(run_dir: Option<&std::ffi::CStr>) -> io::Result<()> {
    private_mounts(run_dir, true)
}

/// A mount namespace of the calling (forked, single-threaded) child's own, with `run_dir` bound on
/// `/run` and, with `new_proc`, a new proc (of its pid namespace for children) on `/proc`.
fn private_mounts(run_dir: Option<&std::ffi::CStr>, new_proc: bool) -> io::Result<()> {
    let check = |r: libc::c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: unshare takes plain flags; the child is single-threaded (after fork).
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    // SAFETY: valid NUL-terminated strings and null pointers where mount(2) allows them; MS_SLAVE
    // first, so that the mounts below stay in this namespace (they would propagate to the
    // caller's through shared mounts otherwise) while the caller's mounts still show here.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    })?;
    if new_proc {
        // SAFETY: as above: a new proc instance (of this process's pid namespace) on /proc.
        check(unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        })?;
    }
    if let Some(dir) = run_dir {
        // SAFETY: as above; `dir` outlives the call.
        check(unsafe {
            libc::mount(
                dir.as_ptr(),
                c"/run".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        })?;
    }
    Ok(())
}

/// Run a CRIU `cmd` within `deadline`; a failure says CRIU's errors from `log`.
pub(crate) fn run_checked(
    cmd: Command,
    action: &'static str,
    deadline: Duration,
    log: &Path,
) -> Result<(), CheckpointError> {
    let status = run_with_deadline(cmd, action, deadline)?;
    if status.success() {
        return Ok(());
    }
    Err(CheckpointError::Failed {
        action,
        status: status.to_string(),
        detail: log_errors(log),
    })
}

/// What `criu check` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    /// `criu --version`'s `Version:` (None: it did not run or said nothing parseable).
    pub version: Option<String>,
    /// `criu check` exited 0 ("Looks good.") and the version is >= 4.1.
    pub ok: bool,
    /// One line for logs and reports: the version and `check`'s last line, or why it failed.
    pub detail: String,
}

/// What a dump wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpStats {
    /// Wall time of the `criu dump` run.
    pub duration: Duration,
    /// Bytes of the images written.
    pub image_bytes: u64,
}

/// A fresh host directory for one checkpoint's images: made by root, mode 0700, not a symlink;
/// `path`'s parent must already be a directory only root can write (the sandbox's host-side
/// directory, never its disk). Removed with [`ImagesDir::remove`].
#[derive(Debug)]
pub struct ImagesDir {
    pub path: PathBuf,
}

impl ImagesDir {
    /// Make the images readable by the restored tasks, for a restore: CRIU's restored tasks, already
    /// in the sandbox's user namespace and with their own ids, open some images themselves
    /// (through CRIU's descriptor of the directory). The directory becomes `0711` and its files
    /// (but those with other links) `0644`, owned by host uid and gid `id` (the sandbox's root); the parent stays root-only
    /// `0700`, so nothing can reach them by path. Regular files only are changed (no link is
    /// followed); the images are removed after the restore.
    pub fn open_to_restored_tasks(&self, id: u32) -> io::Result<()> {
        use std::os::unix::fs::lchown;
        for entry in std::fs::read_dir(&self.path)?.take(100_000) {
            let entry = entry?;
            // A file with other links (a snapshot's memory pages, linked into a clone's images)
            // stays as it is, root's: changing it would change the snapshot's. CRIU reads those
            // itself, as host root.
            if entry.file_type()?.is_file() && entry.metadata()?.nlink() == 1 {
                lchown(entry.path(), Some(id), Some(id))?;
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))?;
            }
        }
        lchown(&self.path, Some(id), Some(id))?;
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o711))
    }

    /// Make `path` afresh (whatever was there is removed: it is host-side data of ours).
    pub fn create(path: &Path) -> Result<ImagesDir, CheckpointError> {
        let bad = |reason: String| CheckpointError::ImagesDir {
            path: path.to_path_buf(),
            reason,
        };
        let parent = path.parent().ok_or_else(|| bad("has no parent".into()))?;
        let meta = std::fs::symlink_metadata(parent).map_err(|e| bad(format!("parent: {e}")))?;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(bad(
                "its parent must be a directory owned and only writable by root".into(),
            ));
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
        .map_err(|source| {
            CheckpointError::Io(crate::StepIo {
                step: "removing an old images directory",
                path: path.to_path_buf(),
                source,
            })
        })?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(path)
            .map_err(|source| {
                CheckpointError::Io(crate::StepIo {
                    step: "creating the images directory",
                    path: path.to_path_buf(),
                    source,
                })
            })?;
        // The umask may have taken bits away, never added: make sure of 0700 anyway.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| {
                CheckpointError::Io(crate::StepIo {
                    step: "chmod of the images directory",
                    path: path.to_path_buf(),
                    source,
                })
            },
        )?;
        Ok(ImagesDir {
            path: path.to_path_buf(),
        })
    }

    /// Bytes of the regular files directly in it (CRIU writes no sub-directories).
    pub fn bytes(&self) -> u64 {
        std::fs::read_dir(&self.path)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    pub fn remove(self) -> io::Result<()> {
        std::fs::remove_dir_all(&self.path)
    }
}

impl Criu {
    pub fn new(program: impl Into<PathBuf>) -> Criu {
        Criu {
            program: program.into(),
            run_dir: None,
        }
    }

    /// This CRIU with [`Criu::run_dir`] `dir`.
    pub fn with_run_dir(mut self, dir: Option<PathBuf>) -> Criu {
        self.run_dir = dir;
        self
    }

    /// A command running this CRIU (with its own `/run`, see [`Criu::run_dir`]).
    fn command(&self) -> Command {
        use std::os::unix::ffi::OsStrExt;
        let mut cmd = Command::new(&self.program);
        if let Some(dir) = &self.run_dir {
            if let Ok(dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) {
                // SAFETY: the closure runs in the forked child before exec and makes only raw
                // syscalls (unshare, mount) on a string made before the fork: async-signal-safe.
                unsafe { cmd.pre_exec(move || private_run(&dir)) };
            }
        }
        cmd
    }

    /// A command running this CRIU in a private mount namespace whose `/proc` is a new one, of the
    /// caller's pid namespace for children (see `crate::subtree`: CRIU then sees the pids of the
    /// namespace it was started in), its `/run` [`Criu::run_dir`], and, with `cgroup`, in that
    /// cgroup (what it restores is born there).
    pub(crate) fn command_with_own_proc(&self, cgroup: Option<crate::cgroup::Cgroup>) -> Command {
        use std::os::unix::ffi::OsStrExt;
        let mut cmd = Command::new(&self.program);
        let run_dir = self
            .run_dir
            .as_ref()
            .and_then(|d| std::ffi::CString::new(d.as_os_str().as_bytes()).ok());
        // SAFETY: runs in the forked child before exec. The callers are single-threaded (the
        // `context-fork` helper), so allocating here is sound; it makes mount system calls and
        // writes its pid into the cgroup's files.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(cg) = &cgroup {
                    cg.add_pid(std::process::id() as i32)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                }
                own_proc(run_dir.as_deref())
            })
        };
        cmd
    }

    /// `criu --version` and `criu check`, each within `deadline`.
    pub fn check(&self, deadline: Duration) -> CheckOutcome {
        let version = match self.run_capture("--version", &["--version"], deadline) {
            Ok((status, out)) if status.success() => parse_version(&out),
            Ok((status, out)) => {
                return CheckOutcome {
                    version: None,
                    ok: false,
                    detail: format!("criu --version failed ({status}): {}", last_line(&out)),
                }
            }
            Err(e) => {
                return CheckOutcome {
                    version: None,
                    ok: false,
                    detail: crate::error_chain(&e),
                }
            }
        };
        let Some(v) = version.clone() else {
            return CheckOutcome {
                version: None,
                ok: false,
                detail: "criu --version printed no version".into(),
            };
        };
        if !version_at_least(&v, (4, 1)) {
            return CheckOutcome {
                version,
                ok: false,
                detail: format!("CRIU {v} is older than 4.1 (it cannot checkpoint on this kernel)"),
            };
        }
        match self.run_capture("check", &["check"], deadline) {
            Ok((status, out)) => CheckOutcome {
                version,
                ok: status.success(),
                detail: format!("CRIU {v}: criu check: {}", last_line(&out)),
            },
            Err(e) => CheckOutcome {
                version,
                ok: false,
                detail: format!("CRIU {v}: {}", crate::error_chain(&e)),
            },
        }
    }

    /// Dump the process tree of `pid` (a sandbox's PID 1, host pid) into `images`; with
    /// `leave_running` the tree runs on afterwards (it is stopped only while CRIU works), else
    /// CRIU kills it once dumped. With `freeze_cgroup` (the tree's freezer cgroup directory, which
    /// the caller may have frozen already) CRIU stops the tree through that cgroup's freezer
    /// and, when it was frozen before, leaves it frozen. The log is `images/dump.log`.
    pub fn dump(
        &self,
        pid: i32,
        images: &ImagesDir,
        spec: &DumpSpec,
        leave_running: bool,
        freeze_cgroup: Option<&Path>,
        deadline: Duration,
    ) -> Result<DumpStats, CheckpointError> {
        let mut cmd = self.command();
        cmd.arg("dump")
            .arg("--tree")
            .arg(pid.to_string())
            .arg("--images-dir")
            .arg(&images.path)
            .args(["--log-file", "dump.log", "-v4"])
            .args(DUMP_OPTIONS)
            .arg(cgroup_mode(spec.manage_cgroups));
        if spec.empty_netns {
            cmd.args(["--empty-ns", "net"]);
        }
        for (mountpoint, key) in &spec.external_mounts {
            cmd.arg("--external")
                .arg(format!("mnt[{}]:{key}", mountpoint.display()));
        }
        for f in &spec.external_files {
            cmd.arg("--external").arg(f.resource());
        }
        for inode in &spec.external_unix {
            cmd.arg("--external").arg(format!("unix[{inode}]"));
        }
        if leave_running {
            cmd.arg("--leave-running");
        }
        if let Some(cg) = freeze_cgroup {
            cmd.arg("--freeze-cgroup").arg(cg);
        }
        let started = Instant::now();
        let status = run_with_deadline(cmd, "dump", deadline)?;
        let duration = started.elapsed();
        if !status.success() {
            return Err(CheckpointError::Failed {
                action: "dump",
                status: status.to_string(),
                detail: log_errors(&images.path.join("dump.log")),
            });
        }
        Ok(DumpStats {
            duration,
            image_bytes: images.bytes(),
        })
    }

    /// Restore the tree dumped in `images` (see [`RestoreSpec`]), detached: CRIU exits once the
    /// tree runs, and the tree's first process is re-parented to the nearest child subreaper (the
    /// server). Returns its host pid, read from the pid file CRIU writes into `images`. The log is
    /// `images/restore.log`.
    pub fn restore(
        &self,
        images: &ImagesDir,
        spec: &RestoreSpec,
        deadline: Duration,
    ) -> Result<i32, CheckpointError> {
        let pidfile = images.path.join("restore.pid");
        let _ = std::fs::remove_file(&pidfile);
        let mut cmd = self.command();
        cmd.arg("restore")
            .arg("--images-dir")
            .arg(&images.path)
            .args(["--log-file", "restore.log", "-v4", "--restore-detached"])
            .arg("--pidfile")
            .arg(&pidfile)
            .arg("--root")
            .arg(&spec.root)
            .args(RESTORE_OPTIONS)
            .arg(cgroup_mode(spec.manage_cgroups));
        if let Some(script) = &spec.netns_setup {
            cmd.args(["--empty-ns", "net", "--action-script"])
                .arg(script);
        }
        if spec.manage_cgroups {
            if let Some(cg) = &spec.cgroup {
                for arg in cgroup_root_args(cg)? {
                    cmd.arg("--cgroup-root").arg(arg);
                }
            }
        }
        for (key, path) in &spec.external_mounts {
            cmd.arg("--external")
                .arg(format!("mnt[{key}]:{}", path.display()));
        }
        let mut mapped = Vec::new();
        for (i, (fd, resource)) in spec.inherit_fds.iter().take(90).enumerate() {
            let n = 10 + i as i32;
            let dup = fd.try_clone().map_err(|source| {
                CheckpointError::Io(crate::StepIo {
                    step: "duplicating an inherited descriptor",
                    path: PathBuf::from(resource),
                    source,
                })
            })?;
            mapped.push((dup, n));
            cmd.arg("--inherit-fd").arg(format!("fd[{n}]:{resource}"));
        }
        crate::process::map_fds(&mut cmd, mapped);
        if let Some(cg) = spec.cgroup.clone() {
            use std::os::unix::process::CommandExt;
            // SAFETY: runs in the forked child before exec; the callers of a restore with a
            // cgroup are single-threaded (the launcher), so allocating here is sound. It only
            // writes our pid into the cgroup's files.
            unsafe {
                cmd.pre_exec(move || {
                    cg.add_pid(std::process::id() as i32)
                        .map_err(|e| io::Error::other(e.to_string()))
                });
            }
        }
        let status = run_with_deadline(cmd, "restore", deadline)?;
        if !status.success() {
            return Err(CheckpointError::Failed {
                action: "restore",
                status: status.to_string(),
                detail: log_errors(&images.path.join("restore.log")),
            });
        }
        let text = std::fs::File::open(&pidfile)
            .map(|f| read_tail(f, 64))
            .map_err(|source| {
                CheckpointError::Io(crate::StepIo {
                    step: "reading the restored tree's pid",
                    path: pidfile.clone(),
                    source,
                })
            })?;
        text.trim()
            .parse::<i32>()
            .ok()
            .filter(|p| *p > 1)
            .ok_or_else(|| CheckpointError::Failed {
                action: "restore",
                status: "no pid".into(),
                detail: format!("the pid file says {:?}", cut(text.trim(), 40)),
            })
    }

    /// Run with stdout and stderr into one bounded capture (a temporary file, last
    /// [`MAX_LOG_BYTES`] read).
    fn run_capture(
        &self,
        action: &'static str,
        args: &[&str],
        deadline: Duration,
    ) -> Result<(ExitStatus, String), CheckpointError> {
        let out = tempfile_in_tmp()?;
        let err = out.try_clone().map_err(|source| {
            CheckpointError::Io(crate::StepIo {
                step: "duplicating the capture file",
                path: PathBuf::from("(anonymous)"),
                source,
            })
        })?;
        let mut cmd = self.command();
        cmd.args(args)
            .stdout(Stdio::from(out.try_clone().map_err(|source| {
                CheckpointError::Io(crate::StepIo {
                    step: "duplicating the capture file",
                    path: PathBuf::from("(anonymous)"),
                    source,
                })
            })?))
            .stderr(Stdio::from(err));
        let status = run_with_deadline(cmd, action, deadline)?;
        Ok((status, read_tail(out, MAX_LOG_BYTES)))
    }
}

/// The options of every dump (see the module docs).
pub const DUMP_OPTIONS: &[&str] = &[
    "--tcp-established",
    "--ext-unix-sk",
    "--file-locks",
    "--network-lock",
    "skip",
];

/// `--manage-cgroups=soft|ignore` (see the module docs).
fn cgroup_mode(manage: bool) -> &'static str {
    if manage {
        "--manage-cgroups=soft"
    } else {
        "--manage-cgroups=ignore"
    }
}

/// `--cgroup-root` values that map the dumped tree's cgroup (its PID 1's, the root of its cgroup
/// namespace) onto `cg` in each of `cg`'s hierarchies (per v1 controller, so the hierarchies that
/// are not the sandbox's stay as they were): a clone's tasks land below the clone's cgroup, not
/// the source's, each in its context's cgroup again.
fn cgroup_root_args(cg: &crate::cgroup::Cgroup) -> Result<Vec<String>, CheckpointError> {
    let paths = cg.hierarchy_paths().map_err(|e| CheckpointError::Failed {
        action: "restore",
        status: "not started".into(),
        detail: format!("where the restore's cgroup is: {}", crate::error_chain(&e)),
    })?;
    Ok(paths
        .into_iter()
        .map(|(controller, path)| match controller {
            Some(c) => format!("{c}:{path}"),
            None => path,
        })
        .collect())
}

/// Options of every restore (the dump's that apply to a restore).
pub const RESTORE_OPTIONS: &[&str] = &["--tcp-established", "--ext-unix-sk", "--file-locks"];

/// The CRIU action of [`RestoreSpec::netns_setup`], run as CRIU's `--action-script` (host root,
/// CRIU's child; the stage in `CRTOOLS_SCRIPT_ACTION`, the restored tree's root task in
/// `CRTOOLS_INIT_PID`): at `setup-namespaces` it enters that task's network namespace — new and
/// empty, made by CRIU a moment ago, nothing of the sandbox running in it yet — and configures it
/// as the launcher configures a sandbox's ([`crate::sandbox`]: every port bindable, loopback
/// up), which is all a sandbox's network namespace holds (its processes have no
/// `CAP_NET_ADMIN`: they cannot change it). Every other stage: nothing. Saves CRIU's own netns
/// dump and restore, a dozen `ip`/`iptables` runs (≈ 75 ms at dump, ≈ 95 ms at restore).
pub fn setup_restored_netns() -> Result<(), CheckpointError> {
    if std::env::var("CRTOOLS_SCRIPT_ACTION").as_deref() != Ok("setup-namespaces") {
        return Ok(());
    }
    let bad = |reason: &str| CheckpointError::ImagesDir {
        path: PathBuf::from("/proc"),
        reason: format!("setting up the restored network namespace: {reason}"),
    };
    let pid: i32 = std::env::var("CRTOOLS_INIT_PID")
        .ok()
        .and_then(|p| p.parse().ok())
        .filter(|p| *p > 1)
        .ok_or_else(|| bad("no CRTOOLS_INIT_PID"))?;
    // Through a pidfd: the namespace of that very task, not of whatever reuses its pid.
    let pidfd = crate::process::pidfd_open(pid).map_err(|e| bad(&e.to_string()))?;
    nix::sched::setns(&pidfd, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| bad(&format!("setns: {e}")))?;
    crate::sys::configure_sandbox_netns().map_err(|e| bad(&e.to_string()))
}

/// What a restore needs from the host besides the images: the tree's root file system, mounted by
/// the caller (host-side, e.g. the overlay of the template and the writable layer), and the host
/// paths of the mounts that were dumped as external (`--external mnt[<mountpoint>]:<key>` at dump,
/// see [`DumpSpec`]).
#[derive(Debug, Clone, Default)]
pub struct RestoreSpec {
    pub root: PathBuf,
    /// `(key, host path)`: the key given at dump, the host file or directory bound there now.
    pub external_mounts: Vec<(String, PathBuf)>,
    /// `(fd, resource)`: descriptors the restored tree gets in place of what was external at dump
    /// (`file[<mnt_id hex>:<inode hex>]` for [`DumpSpec::external_files`], `socket[<inode>]` for
    /// [`DumpSpec::external_unix`]); `--inherit-fd fd[N]:<resource>`. At most 90.
    pub inherit_fds: Vec<(std::sync::Arc<std::os::fd::OwnedFd>, String)>,
    /// The cgroup CRIU runs in, so that the restored tree lands there (below it, with
    /// `manage_cgroups`).
    pub cgroup: Option<crate::cgroup::Cgroup>,
    /// As the dump's [`DumpSpec::manage_cgroups`].
    pub manage_cgroups: bool,
    /// For a dump with [`DumpSpec::empty_netns`]: the program CRIU runs (`--action-script`) at
    /// each stage of the restore, which at `setup-namespaces` — the tree's namespaces made,
    /// nothing restored in them yet — configures the new network namespace as a launch does
    /// (see [`setup_restored_netns`]). A host file only root can write.
    pub netns_setup: Option<PathBuf>,
}

impl PartialEq for RestoreSpec {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
            && self.external_mounts == other.external_mounts
            && self.inherit_fds.len() == other.inherit_fds.len()
    }
}
impl Eq for RestoreSpec {}

/// Mounts of the tree that are binds of host files or directories (CRIU does not dump what is
/// outside the tree): `(mount point inside, key)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DumpSpec {
    pub external_mounts: Vec<(PathBuf, String)>,
    /// Files open in the tree that live on no mount of it (the log FIFO the launcher opened on
    /// the host): `(mount id, inode)`, `--external file[<mnt_id hex>:<inode hex>]`.
    pub external_files: Vec<ExternalFile>,
    /// Unix sockets of the tree whose other side or name is the host's (the agent's listening
    /// socket at a host path): their inodes, `--external unix[<inode>]`.
    pub external_unix: Vec<u64>,
    /// Dump and restore the tree's cgroups (`--manage-cgroups=soft`, see the module docs).
    #[serde(default)]
    pub manage_cgroups: bool,
    /// Leave the network namespace's configuration out (`--empty-ns net`): the restore makes it
    /// as the launcher does ([`RestoreSpec::netns_setup`]). False in images of older servers,
    /// which hold it.
    #[serde(default)]
    pub empty_netns: bool,
}

/// A file open in the tree that lives on no mount of it (see [`DumpSpec::external_files`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExternalFile {
    /// The descriptor of PID 1 it was first seen at.
    pub fd: i32,
    pub mnt_id: u64,
    pub inode: u64,
}

impl ExternalFile {
    /// `file[<mnt_id hex>:<inode hex>]`, as CRIU names it at dump and in `--inherit-fd`.
    pub fn resource(&self) -> String {
        format!("file[{:x}:{:x}]", self.mnt_id, self.inode)
    }
}

impl DumpSpec {
    /// The external mounts of the tree whose PID 1 is host pid `pid`, from its
    /// `/proc/<pid>/mountinfo` (written by the kernel; read up to 1 MiB): every bind of a part of
    /// a file system (root other than `/`: the host's device nodes, the `/proc` masks, volumes,
    /// the agent's binds) and every mount of a file system CRIU does not remake itself (anything
    /// but `overlay`, `proc`, `tmpfs`, `devpts`); binds of `/proc` itself (its read-only parts)
    /// are not external. Keys are `m0`, `m1`, … in mount order.
    pub fn of_sandbox(pid: i32) -> io::Result<DumpSpec> {
        let mut text = String::new();
        std::fs::File::open(format!("/proc/{pid}/mountinfo"))?
            .take(1 << 20)
            .read_to_string(&mut text)?;
        let own: std::collections::BTreeSet<u64> = text
            .lines()
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        // PID 1's descriptors on files of mounts that are not the tree's (the kernel's fdinfo).
        let mut external_files = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.take(4096) {
            let Ok(entry) = entry else { continue };
            // Only files with a path (not sockets, pipes, anonymous inodes: internal mounts).
            let link = std::fs::read_link(format!(
                "/proc/{pid}/fd/{}",
                entry.file_name().to_string_lossy()
            ));
            if !link.is_ok_and(|l| l.is_absolute()) {
                continue;
            }
            let mut info = String::new();
            let Ok(f) = std::fs::File::open(entry.path()) else {
                continue;
            };
            if f.take(64 * 1024).read_to_string(&mut info).is_err() {
                continue;
            }
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            let (Some(mnt_id), Some(ino)) = (field("mnt_id:"), field("ino:")) else {
                continue;
            };
            let fd = entry.file_name().to_string_lossy().parse().unwrap_or(-1);
            if !own.contains(&mnt_id) && seen.insert((mnt_id, ino)) {
                external_files.push(ExternalFile {
                    fd,
                    mnt_id,
                    inode: ino,
                });
            }
        }
        Ok(DumpSpec {
            external_mounts: external_mounts(&text)
                .into_iter()
                .enumerate()
                .map(|(i, mp)| (mp, format!("m{i}")))
                .collect(),
            external_files,
            external_unix: Vec::new(),
            manage_cgroups: false,
            empty_netns: false,
        })
    }
}

/// See [`DumpSpec::of_sandbox`].
fn external_mounts(mountinfo: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(root), Some(mp), Some(fstype)) =
            (fields.get(3), fields.get(4), fields.get(sep + 1))
        else {
            continue;
        };
        let remade = matches!(*fstype, "overlay" | "proc" | "tmpfs" | "devpts");
        let part = *root != "/";
        if (part && *fstype != "proc") || !remade {
            // mountinfo escapes space, tab, newline and backslash as octal.
            out.push(PathBuf::from(crate::mounts::unescape_octal(mp)));
        }
    }
    out
}

/// The most of one image file [`rewrite_userns`] and [`rewrite_uts`] read.
const MAX_NS_IMAGE_BYTES: u64 = 64 * 1024;

/// Move the id maps of the user namespace in `images` (every `userns-*.img`, written by CRIU)
/// from host ids `from_base..+count` to `to_base..+count`, so that a restore makes the tree's user
/// namespace with another host id range (a clone's). An extent outside the range is an error.
/// The images are CRIU's: an 8-byte magic, then entries of a little-endian `u32` length and a
/// protobuf `UsernsEntry { repeated UidGidExtent uid_map = 1; repeated UidGidExtent gid_map = 2 }`,
/// `UidGidExtent { uint32 first = 1; uint32 lower_first = 2; uint32 count = 3 }`.
pub fn rewrite_userns(
    images: &Path,
    from_base: u32,
    to_base: u32,
    count: u32,
) -> Result<usize, CheckpointError> {
    rewrite_images(images, "userns-", MAX_NS_IMAGE_BYTES, |entry| {
        let mut out = Vec::new();
        for (field, value) in pb::fields(entry)? {
            let pb::Value::Bytes(extent) = value else {
                return Err("a user namespace entry has a field that is not an extent".into());
            };
            if field != 1 && field != 2 {
                return Err(format!("unknown user namespace field {field}"));
            }
            let mut ext = Vec::new();
            for (f, v) in pb::fields(extent)? {
                let pb::Value::Varint(mut v) = v else {
                    return Err("an extent field is not a number".into());
                };
                if f == 2 {
                    let lower = u32::try_from(v).map_err(|_| "an extent is out of range")?;
                    let offset = lower
                        .checked_sub(from_base)
                        .filter(|o| *o < count)
                        .ok_or_else(|| {
                            format!("extent at host id {lower} is outside {from_base}..+{count}")
                        })?;
                    v = u64::from(to_base + offset);
                }
                pb::put_varint_field(&mut ext, f, v);
            }
            pb::put_bytes_field(&mut out, field, &ext);
        }
        Ok(out)
    })
}

/// Set the host name in the uts namespace images of `images` (every `utsns-*.img`:
/// `UtsnsEntry { string nodename = 1; string domainname = 2 }`), for a restore under a new name.
pub fn rewrite_uts(images: &Path, hostname: &str) -> Result<usize, CheckpointError> {
    rewrite_images(images, "utsns-", MAX_NS_IMAGE_BYTES, |entry| {
        let mut out = Vec::new();
        for (field, value) in pb::fields(entry)? {
            match (field, value) {
                (1, pb::Value::Bytes(_)) => pb::put_bytes_field(&mut out, 1, hostname.as_bytes()),
                (f, pb::Value::Bytes(b)) => pb::put_bytes_field(&mut out, f, b),
                (f, pb::Value::Varint(v)) => pb::put_varint_field(&mut out, f, v),
            }
        }
        Ok(out)
    })
}

/// The most of one `mm-*.img` [`mark_mergeable`] reads: a process at the kernel's default
/// `vm.max_map_count` (65,530 mappings) writes about 3 MiB.
const MAX_MM_IMAGE_BYTES: u64 = 16 * 1024 * 1024;

/// `MADV_MERGEABLE`: the bit of a VMA's `madv` bitmap in CRIU's images (CRIU's restorer calls
/// `madvise(start, len, bit)` for every bit set).
const MADV_MERGEABLE_BIT: u64 = 1 << 12;

/// CRIU's `vma_entry.status` bits (criu/include/image.h) that [`mark_mergeable`] reads: private
/// memory it may mark, and the special mappings it never touches (a failed `madvise` would fail
/// the restore; KSM itself skips a mapping it cannot merge).
mod vma_status {
    pub const REGULAR: u64 = 1 << 0;
    pub const FILE_PRIVATE: u64 = 1 << 6;
    pub const ANON_PRIVATE: u64 = 1 << 9;
    /// VSYSCALL, VDSO, SYSVIPC, SOCKET, VVAR, AIORING, SHSTK, GUARD, UPROBES, UNSUPP.
    pub const SPECIAL: u64 = (1 << 2)
        | (1 << 3)
        | (1 << 10)
        | (1 << 11)
        | (1 << 12)
        | (1 << 13)
        | (1 << 15)
        | (1 << 16)
        | (1 << 17)
        | (1 << 31);
}

/// What [`mark_mergeable`] marked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mergeable {
    /// `mm-*.img` files rewritten (one per process).
    pub images: usize,
    /// Private mappings marked.
    pub mappings: usize,
    /// Their size in bytes (address space, not resident memory).
    pub bytes: u64,
}

/// Mark the private memory of every process in `images` (each `mm-*.img`, written by CRIU)
/// `MADV_MERGEABLE`, so that the restored tree's pages can be merged by the kernel's same-page
/// merging (KSM) with identical pages of other mergeable processes — the other clones of one
/// snapshot, which hold the same bytes. The images are CRIU's `MmEntry { …; repeated VmaEntry vmas
/// = 14; … }` with `VmaEntry { uint64 start = 1; uint64 end = 2; …; uint32 status = 7; …; uint64
/// madv = 9; … }`; every other field is kept as it is.
pub fn mark_mergeable(images: &Path) -> Result<Mergeable, CheckpointError> {
    let (mut mappings, mut bytes) = (0usize, 0u64);
    let files = rewrite_images(images, "mm-", MAX_MM_IMAGE_BYTES, |entry| {
        let mut out = Vec::new();
        for (field, value) in pb::fields(entry)? {
            match (field, value) {
                (14, pb::Value::Bytes(vma)) => {
                    let (new, size) = mark_vma_mergeable(vma)?;
                    if let Some(size) = size {
                        mappings += 1;
                        bytes = bytes.saturating_add(size);
                    }
                    pb::put_bytes_field(&mut out, 14, &new);
                }
                (f, pb::Value::Bytes(b)) => pb::put_bytes_field(&mut out, f, b),
                (f, pb::Value::Varint(v)) => pb::put_varint_field(&mut out, f, v),
            }
        }
        Ok(out)
    })?;
    Ok(Mergeable {
        images: files,
        mappings,
        bytes,
    })
}

/// One `VmaEntry` with `MADV_MERGEABLE` added when it is private memory of a regular mapping, and
/// that mapping's size (`None`: left as it was).
fn mark_vma_mergeable(vma: &[u8]) -> Result<(Vec<u8>, Option<u64>), String> {
    let fields = pb::fields(vma)?;
    let varint = |want: u64| {
        fields.iter().find_map(|(f, v)| match v {
            pb::Value::Varint(v) if *f == want => Some(*v),
            _ => None,
        })
    };
    let (Some(start), Some(end), Some(status)) = (varint(1), varint(2), varint(7)) else {
        return Err("a memory mapping without start, end or status".into());
    };
    let private = status & (vma_status::ANON_PRIVATE | vma_status::FILE_PRIVATE) != 0;
    let eligible = status & vma_status::REGULAR != 0
        && private
        && status & vma_status::SPECIAL == 0
        && end > start;
    let mut out = Vec::with_capacity(vma.len() + 4);
    let mut had_madv = false;
    for (f, v) in fields {
        match v {
            pb::Value::Varint(v) if f == 9 && eligible => {
                had_madv = true;
                pb::put_varint_field(&mut out, 9, v | MADV_MERGEABLE_BIT);
            }
            pb::Value::Varint(v) => pb::put_varint_field(&mut out, f, v),
            pb::Value::Bytes(b) => pb::put_bytes_field(&mut out, f, b),
        }
    }
    if eligible && !had_madv {
        pb::put_varint_field(&mut out, 9, MADV_MERGEABLE_BIT);
    }
    Ok((out, eligible.then_some(end - start)))
}

/// Rewrite every entry of the images named `<prefix>*.img` in `images` (each at most `max_bytes`);
/// returns how many files.
fn rewrite_images(
    images: &Path,
    prefix: &str,
    max_bytes: u64,
    mut f: impl FnMut(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<usize, CheckpointError> {
    let io = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| CheckpointError::Io(crate::StepIo { step, path, source })
    };
    let mut n = 0;
    for entry in std::fs::read_dir(images)
        .map_err(io("listing the images", images))?
        .take(100_000)
    {
        let entry = entry.map_err(io("listing the images", images))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(prefix) || !name.ends_with(".img") {
            continue;
        }
        let path = entry.path();
        if !entry.file_type().map_err(io("an image", &path))?.is_file() {
            continue;
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .map_err(io("reading an image", &path))?
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(io("reading an image", &path))?;
        let bad = |reason: String| CheckpointError::ImagesDir {
            path: path.clone(),
            reason,
        };
        if bytes.len() as u64 > max_bytes || bytes.len() < 8 {
            return Err(bad(format!(
                "not an image of a sane size (<= {max_bytes} bytes)"
            )));
        }
        let mut out = bytes[..8].to_vec();
        let mut rest = &bytes[8..];
        while !rest.is_empty() {
            let len = rest
                .get(..4)
                .map(|l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
                .ok_or_else(|| bad("a cut entry".into()))?;
            let body = rest
                .get(4..4 + len)
                .ok_or_else(|| bad("a cut entry".into()))?;
            let new = f(body).map_err(bad)?;
            out.extend_from_slice(&(new.len() as u32).to_le_bytes());
            out.extend_from_slice(&new);
            rest = &rest[4 + len..];
        }
        // Written beside and renamed over: a failure leaves the old image whole.
        let tmp = images.join(format!(".{name}.new"));
        std::fs::write(&tmp, &out).map_err(io("writing an image", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("replacing an image", &path))?;
        n += 1;
    }
    Ok(n)
}

/// The few protobuf wire-format pieces the namespace images need (varints and length-delimited
/// fields; anything else is refused).
mod pb {
    pub enum Value<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*at).ok_or("a cut varint")?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint too long".into())
    }

    pub fn fields(b: &[u8]) -> Result<Vec<(u64, Value<'_>)>, String> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < b.len() {
            let key = varint(b, &mut at)?;
            let (field, wire) = (key >> 3, key & 7);
            match wire {
                0 => out.push((field, Value::Varint(varint(b, &mut at)?))),
                2 => {
                    let len = usize::try_from(varint(b, &mut at)?).map_err(|_| "too long")?;
                    let end = at.checked_add(len).filter(|e| *e <= b.len());
                    let end = end.ok_or("a cut field")?;
                    out.push((field, Value::Bytes(&b[at..end])));
                    at = end;
                }
                w => return Err(format!("unexpected wire type {w}")),
            }
        }
        Ok(out)
    }

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub fn put_varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
        put_varint(out, field << 3);
        put_varint(out, v);
    }

    pub fn put_bytes_field(out: &mut Vec<u8>, field: u64, b: &[u8]) {
        put_varint(out, (field << 3) | 2);
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
}

/// An unnamed temporary file (`O_TMPFILE` in the temporary directory: no name anyone could race).
fn tempfile_in_tmp() -> Result<std::fs::File, CheckpointError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(&dir)
        .map_err(|source| {
            CheckpointError::Io(crate::StepIo {
                step: "creating a capture file",
                path: dir,
                source,
            })
        })
}

/// Run `cmd` in a process group of its own; past `deadline` the whole group is killed.
fn run_with_deadline(
    mut cmd: Command,
    action: &'static str,
    deadline: Duration,
) -> Result<ExitStatus, CheckpointError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null()).process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|source| CheckpointError::Spawn { program, source })?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if started.elapsed() >= deadline => {
                let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(CheckpointError::Deadline { action, deadline });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CheckpointError::Spawn {
                    program: format!("waiting for criu {action}"),
                    source,
                });
            }
        }
    }
}

/// The last `max` bytes of a file (lossy UTF-8).
fn read_tail(mut f: std::fs::File, max: u64) -> String {
    let len = f.seek(SeekFrom::End(0)).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.take(max).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// CRIU's `Error` lines from the end of a log (at most the last 4, each cut to 300 bytes), else
/// its last line.
fn log_errors(path: &Path) -> String {
    match std::fs::File::open(path) {
        Ok(f) => errors_of(&read_tail(f, MAX_LOG_BYTES)),
        Err(e) => format!("no log ({e})"),
    }
}

fn errors_of(log: &str) -> String {
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Error (") && !l.contains("rlimit: Can't setup RLIMIT_NOFILE"))
        .map(|l| l.trim())
        .collect();
    let pick: Vec<String> = if errors.is_empty() {
        vec![last_line(log)]
    } else {
        errors[errors.len().saturating_sub(4)..]
            .iter()
            .map(|l| cut(l, 300))
            .collect()
    };
    pick.join("; ")
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn last_line(s: &str) -> String {
    cut(
        s.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim(),
        300,
    )
}

fn parse_version(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `major.minor[.patch]` >= `min`.
pub fn version_at_least(v: &str, min: (u32, u32)) -> bool {
    let mut it = v.split('.');
    let major = it.next().and_then(|x| x.parse::<u32>().ok());
    let minor = it.next().and_then(|x| x.parse::<u32>().ok()).unwrap_or(0);
    major.is_some_and(|m| (m, minor) >= min)
}

#[cfg(test)]
mod tests {
    #[test]
    fn external_mounts_are_binds_of_parts_and_foreign_file_systems() {
        let info = "\
1 0 0:50 / / rw - overlay overlay rw
2 1 0:51 / /proc rw - proc proc rw
3 2 0:5 /null /proc/keys rw - devtmpfs udev rw
4 2 0:51 /sys /proc/sys ro - proc proc rw
5 2 0:52 /0 /proc/loadavg ro - tmpfs none ro
6 2 0:53 / /proc/acpi ro - tmpfs tmpfs ro
7 1 0:54 / /dev ro - tmpfs tmpfs ro
8 7 0:5 /null /dev/null rw - devtmpfs udev rw
9 7 0:55 / /dev/pts rw - devpts devpts rw
10 1 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw
11 1 8:1 /srv/vol /data/my\\040vol rw - ext4 /dev/sda1 rw
";
        let got: Vec<String> = external_mounts(info)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            got,
            [
                "/proc/keys",
                "/proc/loadavg",
                "/dev/null",
                "/sys/fs/cgroup/memory",
                "/data/my vol"
            ]
        );
    }

    use super::*;

    #[test]
    fn userns_and_uts_images_are_rewritten() {
        let d = tempfile::tempdir().unwrap();
        // A real image of CRIU 4.2.1: uid and gid maps `0 200000 65536`.
        let userns: &[u8] = &[
            0x19, 0x43, 0x56, 0x54, 0x06, 0x49, 0x47, 0x55, 0x18, 0, 0, 0, 0x0a, 0x0a, 0x08, 0x00,
            0x10, 0xc0, 0x9a, 0x0c, 0x18, 0x80, 0x80, 0x04, 0x12, 0x0a, 0x08, 0x00, 0x10, 0xc0,
            0x9a, 0x0c, 0x18, 0x80, 0x80, 0x04,
        ];
        std::fs::write(d.path().join("userns-13.img"), userns).unwrap();
        assert_eq!(
            rewrite_userns(d.path(), 200_000, 300_000, 65536).unwrap(),
            1
        );
        let got = std::fs::read(d.path().join("userns-13.img")).unwrap();
        assert_eq!(&got[..8], &userns[..8]);
        let entry = &got[12..];
        let maps = pb::fields(entry).unwrap();
        assert_eq!(maps.len(), 2);
        for (_, v) in maps {
            let pb::Value::Bytes(ext) = v else { panic!() };
            let nums: Vec<u64> = pb::fields(ext)
                .unwrap()
                .into_iter()
                .map(|(_, v)| match v {
                    pb::Value::Varint(n) => n,
                    pb::Value::Bytes(_) => panic!(),
                })
                .collect();
            assert_eq!(nums, [0, 300_000, 65536]);
        }
        // Back again: the same bytes.
        rewrite_userns(d.path(), 300_000, 200_000, 65536).unwrap();
        assert_eq!(
            std::fs::read(d.path().join("userns-13.img")).unwrap(),
            userns
        );
        // An extent outside the range is refused, the image left whole.
        assert!(rewrite_userns(d.path(), 100_000, 300_000, 65536).is_err());
        assert_eq!(
            std::fs::read(d.path().join("userns-13.img")).unwrap(),
            userns
        );
        // The host name.
        let mut uts = userns[..8].to_vec();
        let mut body = Vec::new();
        pb::put_bytes_field(&mut body, 1, b"old-name");
        pb::put_bytes_field(&mut body, 2, b"(none)");
        uts.extend_from_slice(&(body.len() as u32).to_le_bytes());
        uts.extend_from_slice(&body);
        std::fs::write(d.path().join("utsns-12.img"), &uts).unwrap();
        assert_eq!(rewrite_uts(d.path(), "new-name").unwrap(), 1);
        let got = std::fs::read(d.path().join("utsns-12.img")).unwrap();
        let f = pb::fields(&got[12..]).unwrap();
        assert!(matches!(f[0], (1, pb::Value::Bytes(b"new-name"))));
        assert!(matches!(f[1], (2, pb::Value::Bytes(b"(none)"))));
        // A cut image is refused.
        std::fs::write(d.path().join("utsns-12.img"), &uts[..uts.len() - 2]).unwrap();
        assert!(rewrite_uts(d.path(), "x").is_err());
    }

    #[test]
    fn private_mappings_are_marked_mergeable_and_the_rest_kept() {
        let d = tempfile::tempdir().unwrap();
        let vma = |start: u64, end: u64, status: u64, madv: Option<u64>| {
            let mut v = Vec::new();
            pb::put_varint_field(&mut v, 1, start);
            pb::put_varint_field(&mut v, 2, end);
            pb::put_varint_field(&mut v, 4, u64::MAX); // shmid -1 as CRIU writes it
            pb::put_varint_field(&mut v, 7, status);
            pb::put_varint_field(&mut v, 8, 1); // fd -1, zigzag
            if let Some(m) = madv {
                pb::put_varint_field(&mut v, 9, m);
            }
            v
        };
        let anon = vma_status::REGULAR | vma_status::ANON_PRIVATE;
        let file = vma_status::REGULAR | vma_status::FILE_PRIVATE;
        let vdso = vma_status::REGULAR | (1 << 3) | vma_status::ANON_PRIVATE;
        let shared = vma_status::REGULAR | (1 << 8);
        let mut entry = Vec::new();
        pb::put_varint_field(&mut entry, 1, 0x40_0000);
        pb::put_varint_field(&mut entry, 13, 33); // an auxv word
        let vmas = [
            vma(0x1000, 0x3000, anon, None),
            vma(0x3000, 0x4000, file, Some(1 << 14)), // MADV_HUGEPAGE kept
            vma(0x4000, 0x5000, vdso, None),
            vma(0x5000, 0x6000, shared, None),
        ];
        for v in &vmas {
            pb::put_bytes_field(&mut entry, 14, v);
        }
        pb::put_varint_field(&mut entry, 15, 1);
        let mut img = vec![0x19, 0x43, 0x56, 0x54, 0x1a, 0x2b, 0x3c, 0x4d];
        img.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        img.extend_from_slice(&entry);
        std::fs::write(d.path().join("mm-7.img"), &img).unwrap();
        std::fs::write(d.path().join("pagemap-7.img"), b"not touched").unwrap();
        let m = mark_mergeable(d.path()).unwrap();
        assert_eq!(
            m,
            Mergeable {
                images: 1,
                mappings: 2,
                bytes: 0x3000
            }
        );
        let got = std::fs::read(d.path().join("mm-7.img")).unwrap();
        assert_eq!(&got[..8], &img[..8]);
        let fields = pb::fields(&got[12..]).unwrap();
        let madv: Vec<Option<u64>> = fields
            .iter()
            .filter_map(|(f, v)| match v {
                pb::Value::Bytes(b) if *f == 14 => Some(b),
                _ => None,
            })
            .map(|b| {
                pb::fields(b)
                    .unwrap()
                    .into_iter()
                    .find_map(|(f, v)| match v {
                        pb::Value::Varint(m) if f == 9 => Some(m),
                        _ => None,
                    })
            })
            .collect();
        assert_eq!(
            madv,
            [
                Some(MADV_MERGEABLE_BIT),
                Some(MADV_MERGEABLE_BIT | (1 << 14)),
                None,
                None
            ]
        );
        // Everything else is as it was, in order.
        let others: Vec<u64> = fields
            .iter()
            .filter(|(f, _)| *f != 14)
            .map(|(f, _)| *f)
            .collect();
        assert_eq!(others, [1, 13, 15]);
        assert_eq!(
            std::fs::read(d.path().join("pagemap-7.img")).unwrap(),
            b"not touched"
        );
        // Marking again changes nothing more.
        mark_mergeable(d.path()).unwrap();
        assert_eq!(std::fs::read(d.path().join("mm-7.img")).unwrap(), got);
        // A cut image is refused and left whole.
        std::fs::write(d.path().join("mm-7.img"), &img[..img.len() - 3]).unwrap();
        assert!(mark_mergeable(d.path()).is_err());
        assert_eq!(
            std::fs::read(d.path().join("mm-7.img")).unwrap(),
            &img[..img.len() - 3]
        );
    }

    #[test]
    fn versions() {
        assert_eq!(
            parse_version("Version: 4.2.1\nGitID: x\n").as_deref(),
            Some("4.2.1")
        );
        assert_eq!(parse_version("garbage"), None);
        assert!(version_at_least("4.2.1", (4, 1)));
        assert!(version_at_least("4.1", (4, 1)));
        assert!(!version_at_least("3.17.1", (4, 1)));
        assert!(!version_at_least("x", (4, 1)));
    }

    #[test]
    fn errors_are_picked_from_the_log_end() {
        let log = "(00.1) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self\n\
                   (00.2) info\n\
                   (00.3) Error (criu/namespaces.c:997): One or more namespaces doesn't belong\n\
                   (00.4) Error (criu/cr-dump.c:1975): Dumping FAILED.\n";
        let e = errors_of(log);
        assert!(e.contains("namespaces.c:997"), "{e}");
        assert!(e.contains("Dumping FAILED"), "{e}");
        assert!(!e.contains("RLIMIT_NOFILE"), "{e}");
        assert_eq!(errors_of("a\nlast words\n\n"), "last words");
    }

    #[test]
    fn a_run_past_its_deadline_is_killed() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30"]);
        let started = Instant::now();
        let r = run_with_deadline(cmd, "dump", Duration::from_millis(100));
        assert!(matches!(r, Err(CheckpointError::Deadline { .. })), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_missing_program_is_not_usable() {
        let c = Criu::new("/nonexistent/criu").check(Duration::from_secs(5));
        assert!(!c.ok);
        assert!(c.version.is_none());
    }

    #[test]
    fn images_dir_is_root_only_and_refuses_a_writable_parent() {
        lizard_test_support::needs_root!();
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = ImagesDir::create(&base.path().join("criu")).unwrap();
        let m = std::fs::metadata(&d.path).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        std::fs::write(d.path.join("x.img"), b"1234").unwrap();
        assert_eq!(d.bytes(), 4);
        // Made afresh over an old one, and over a symlink (which is removed, not followed).
        let target = tempfile::tempdir().unwrap();
        std::fs::remove_dir_all(&d.path).unwrap();
        std::os::unix::fs::symlink(target.path(), &d.path).unwrap();
        let d = ImagesDir::create(&d.path).unwrap();
        assert!(std::fs::symlink_metadata(&d.path).unwrap().is_dir());
        assert!(target.path().exists());
        d.remove().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ImagesDir::create(&base.path().join("criu")).is_err());
    }
}
