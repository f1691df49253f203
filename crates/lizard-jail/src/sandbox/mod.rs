//! Launch a program as PID 1 of a fresh sandbox: own user, pid, mount, net, ipc, uts and cgroup
//! namespaces, an overlay root with a minimal `/dev` and a fresh `/proc`, a cgroup with limits, no
//! capabilities, `no_new_privs` and a seccomp filter. The sandbox outlives its launcher: the caller
//! gets back the host pid of PID 1 and the [`Cgroup`], which is all it needs to find, meter, freeze
//! and kill the sandbox later.
//!
//! **Single-threaded launcher.** [`launch`] `clone()`s, which is only sound in a single-threaded
//! process. A multi-threaded program (the server, a `cargo test` harness) runs a helper process
//! instead: `lizard sandbox-init` (or this crate's `lizard-jail-init` binary), whose `main` is
//! [`init_main`]: it reads a [`SandboxSpec`] as JSON on stdin, launches, prints one [`InitReply`]
//! JSON line on stdout and exits. [`launch_with_helper`] is the caller's side of that exchange.
//!
//! The sequence (parent = the launcher, child = the future PID 1):
//! 1. parent: validate the spec, compile the seccomp filter, open the log, `/dev/null` and the
//!    files to hand over (`inherit_fds`; every fd the child needs is numbered above the range 3..
//!    they will take), with `layer_id_base` make the user namespace of the idmapped mounts
//!    (`idmap`), give the writable layer the template root's owner (through that id map), create
//!    the cgroup with its limits and (with `context_cgroups`) its delegated sub-tree, bound at
//!    `/sys/fs/cgroup/<controller>` inside (see [`crate::delegation`]);
//! 2. parent, in a staging mount namespace of its own: the overlay root and every bind
//!    (`rootfs::build_host`), `chdir` into the root, the rlimits for the child to inherit;
//! 3. parent: `clone(NEWUSER|NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS)` — the user namespace owns the
//!    others, and the staging mount table arrives in the child's mount namespace locked; the
//!    parent returns to its own mount namespace, writes the child's uid/gid maps, makes the
//!    listening sockets of `inherit_fds` inside the child's network namespace and sends them over
//!    (`SCM_RIGHTS`), lets it go, moves it into the cgroup while it builds the rest of its mount
//!    table, and lets it go again;
//! 4. child: see `child` (`/proc`, `/dev`, `/tmp`, `pivot_root` as root of its user namespace,
//!    then drops everything, execs);
//! 5. parent: EOF on the close-on-exec report pipe = the program was executed. Any error (in the
//!    parent or reported by the child with its step and errno) kills the child and removes the
//!    cgroup, so a failed launch leaves nothing behind.
//!
//! With `SandboxSpec::restore`, steps 3–5 are a CRIU restore into the same host side instead
//! (`restore_into`).
//!
//! Not here: what the program is (the agent), where the layers live, HTTP, projects. Reaping: when
//! the launcher exits, the sandbox's PID 1 is re-parented (to the nearest subreaper, see
//! [`crate::process::set_child_subreaper`], else to the host's init), which must reap it.

mod child;
pub(crate) use child::drop_privileges;
mod idmap;
mod rootfs;
mod spec;
mod step;
pub(crate) use idmap::userns_with_maps;
pub(crate) use rootfs::{
    bind_mount, fd_path, make_private, mount_fs, open_in_root_with, pivot_into,
};
pub(crate) use step::{SetupError, Step};

pub use rootfs::DEVICES;
pub use spec::{
    Bind, Capability, IdMap, InheritFd, InvalidSpec, Limits, RestoreFrom, RootfsSpec, SandboxSpec,
    UserSpec, UsernsParent, AGENT_CAPS, MAX_INHERIT_FDS,
};

use crate::cgroup::{Cgroup, CgroupError};
use crate::seccomp::{Filter, SeccompError};
use crate::sys::Syscall;
use child::ChildPlan;
use nix::fcntl::{FcntlArg, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use step::ERROR_TAG;

/// Errors of launching a sandbox. Each names the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error(transparent)]
    InvalidSpec(#[from] InvalidSpec),
    #[error("the sandbox launcher must be single-threaded, this process has {threads} threads (run `lizard sandbox-init`)")]
    NotSingleThreaded { threads: usize },
    #[error(transparent)]
    Io(#[from] crate::StepIo),
    #[error("creating the sandbox's cgroup")]
    Cgroup(#[source] CgroupError),
    #[error("moving the sandbox into its cgroup")]
    CgroupJoin(#[source] CgroupError),
    #[error("preparing the seccomp filter")]
    Seccomp(#[source] SeccompError),
    #[error("{step}")]
    Sync {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sandbox setup failed at `{step}` ({detail})")]
    Setup {
        step: String,
        detail: String,
        #[source]
        source: io::Error,
    },
    #[error("the sandbox's first process died during setup ({status})")]
    ChildDied { status: String },
    #[error("running the sandbox launcher {program}")]
    HelperSpawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("the sandbox launcher failed: {message}")]
    Helper { message: String },
}

impl From<SetupError> for JailError {
    fn from(e: SetupError) -> Self {
        JailError::Setup {
            step: e.step,
            detail: e.detail,
            source: e.source,
        }
    }
}

/// PTYs a sandbox may hold at once when its spec does not say (`Limits::ptys_max`).
pub const DEFAULT_PTYS_MAX: u64 = 64;

/// The contents of the `/proc` files every sandbox sees instead of the host's (see
/// `rootfs::mount_proc`). `diskstats` and `partitions` would list every sandbox's loop device and
/// its I/O: empty (their header-less empty form is what a machine without block devices shows).
/// `loadavg` is the host's load (and its newest pid): a constant idle load, so
/// `os.getloadavg()` and `uptime` still parse it. `sys/kernel/random/boot_id` is the host's: a
/// random id per sandbox start, as if each were a machine of its own. `sys/kernel/pty/nr` and
/// `sys/fs/file-nr` count every PTY and open file on the host (other sandboxes' activity): "0",
/// and "0 0 <the host's file-max>" (the maximum is a constant of the host, which programs that
/// parse the file use to size themselves).
fn proc_files() -> Result<Vec<(&'static str, Vec<u8>)>, JailError> {
    let read = |path: &'static str| {
        std::fs::read_to_string(path).map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "reading a /proc value",
                path: PathBuf::from(path),
                source,
            })
        })
    };
    // Each read of this file is a fresh random (version 4) uuid.
    let boot_id = read("/proc/sys/kernel/random/uuid")?;
    let file_max = read("/proc/sys/fs/file-max")?;
    Ok(vec![
        ("diskstats", Vec::new()),
        ("partitions", Vec::new()),
        ("loadavg", b"0.00 0.00 0.00 1/1 1\n".to_vec()),
        (
            "sys/kernel/random/boot_id",
            format!("{}\n", boot_id.trim()).into_bytes(),
        ),
        ("sys/kernel/pty/nr", b"0\n".to_vec()),
        (
            "sys/fs/file-nr",
            format!("0\t0\t{}\n", file_max.trim()).into_bytes(),
        ),
    ])
}

/// Where the mounts of a sandbox launched from `spec` that are binds of host files come from, for
/// a checkpoint restore (`checkpoint::RestoreSpec::external_mounts`): `(mount point inside, host
/// path)` — its binds, the host's device nodes at `/dev/<name>`, `/dev/null` over the masked
/// `/proc` files, and the per-sandbox `/proc` files (see `proc_files`), written afresh into
/// `scratch` (a root-only host directory the caller made; files `proc-<i>`, mode 0444). Not the
/// delegated cgroup directories (the caller knows them).
pub fn mount_sources(
    spec: &SandboxSpec,
    scratch: &Path,
) -> Result<Vec<(PathBuf, PathBuf)>, JailError> {
    let mut out: Vec<(PathBuf, PathBuf)> = spec
        .binds
        .iter()
        .map(|b| {
            (
                Path::new("/").join(b.target.strip_prefix("/").unwrap_or(&b.target)),
                b.source.clone(),
            )
        })
        .collect();
    for name in DEVICES {
        let dev = PathBuf::from(format!("/dev/{name}"));
        out.push((dev.clone(), dev));
    }
    for name in rootfs::PROC_NULLED {
        out.push((
            PathBuf::from(format!("/proc/{name}")),
            PathBuf::from("/dev/null"),
        ));
    }
    for (i, (name, contents)) in proc_files()?.into_iter().enumerate() {
        let path = scratch.join(format!("proc-{i}"));
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut f| f.write_all(&contents))
            .map_err(|source| {
                JailError::Io(crate::StepIo {
                    step: "writing a /proc file for a restore",
                    path: path.clone(),
                    source,
                })
            })?;
        out.push((PathBuf::from(format!("/proc/{name}")), path));
    }
    Ok(out)
}

/// A running sandbox, as the launcher hands it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launched {
    /// Host pid of the sandbox's PID 1.
    pub pid: i32,
    /// The sandbox's cgroup.
    pub cgroup: Cgroup,
}

/// The one line `init_main` prints: `{"ok":{"pid":…,"cgroup":{…}}}` or `{"error":"…"}` (the error
/// and its causes, joined with ": ").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitReply {
    Ok(Launched),
    Error(String),
}

/// `main` of the launcher process (`lizard sandbox-init`): read a [`SandboxSpec`] as JSON on stdin,
/// [`launch`] it, print one [`InitReply`] line on stdout, exit (0 on success, 1 on failure). Call
/// it before starting any thread (no async runtime, no logging thread).
pub fn init_main() -> ! {
    let reply = match read_spec().and_then(|spec| launch(&spec)) {
        Ok(l) => InitReply::Ok(l),
        Err(e) => InitReply::Error(crate::error_chain(&e)),
    };
    let failed = matches!(reply, InitReply::Error(_));
    crate::process::reply_and_exit(&reply, failed)
}

fn read_spec() -> Result<SandboxSpec, JailError> {
    let mut input = Vec::new();
    io::stdin()
        .read_to_end(&mut input)
        .map_err(|source| JailError::Sync {
            step: "reading the sandbox spec from stdin",
            source,
        })?;
    serde_json::from_slice(&input).map_err(|e| {
        JailError::InvalidSpec(InvalidSpec {
            field: "(json)".into(),
            reason: e.to_string(),
        })
    })
}

/// Launch through a helper process: run `helper` (e.g. `lizard sandbox-init`) with the spec on
/// its stdin and parse its reply. Blocking (use `spawn_blocking` from async code); safe to call
/// from a multi-threaded process.
pub fn launch_with_helper(mut helper: Command, spec: &SandboxSpec) -> Result<Launched, JailError> {
    let program = helper.get_program().to_string_lossy().into_owned();
    let input = serde_json::to_vec(spec).map_err(|e| JailError::Helper {
        message: format!("serializing the spec: {e}"),
    })?;
    let mut child = helper
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| JailError::HelperSpawn {
            program: program.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that dies early closes the pipe; its output below says why.
        let _ = stdin.write_all(&input);
    }
    let out = child
        .wait_with_output()
        .map_err(|source| JailError::HelperSpawn { program, source })?;
    let text = String::from_utf8_lossy(&out.stdout);
    match serde_json::from_str::<InitReply>(text.lines().last().unwrap_or("")) {
        Ok(InitReply::Ok(l)) => Ok(l),
        Ok(InitReply::Error(message)) => Err(JailError::Helper { message }),
        Err(_) => Err(JailError::Helper {
            message: format!(
                "exited with {} and printed {:?}, stderr {:?}",
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }),
    }
}

/// Launch `spec.program` as PID 1 of a new sandbox and return once it has been executed (or the
/// setup failed, in which case nothing is left behind). The calling process must be
/// single-threaded (see the module docs); it is checked.
pub fn launch(spec: &SandboxSpec) -> Result<Launched, JailError> {
    spec.validate()?;
    let threads = thread_count()?;
    if threads != 1 {
        return Err(JailError::NotSingleThreaded { threads });
    }
    let filter = Filter::sandbox().map_err(JailError::Seccomp)?;
    // The inherited fds become 3..3+n in the child; everything the child uses sits above.
    let min = 3 + spec.inherit_fds.len() as i32;
    let (go_read, go_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    let go_read = above(go_read, min, "creating a sync pipe", Path::new("pipe"))?;
    let report_write = above(report_write, min, "creating a sync pipe", Path::new("pipe"))?;
    let mut plan = prepare(spec, filter, go_read, report_write, min)?;
    let cgroup = Cgroup::create(&spec.id, &spec.limits.cgroup()).map_err(JailError::Cgroup)?;
    if spec.context_cgroups {
        match delegate_contexts(spec, &cgroup) {
            Ok(binds) => plan.rootfs.binds.extend(binds),
            Err(e) => {
                let _ = cgroup.remove();
                return Err(JailError::Cgroup(e));
            }
        }
    }
    let started = match &spec.restore {
        Some(from) => restore_into(spec, from, plan, &cgroup),
        None => start(spec, plan, go_write, report_read, &cgroup),
    };
    // A restore with the cgroups made the contexts' cgroups with the owners they were dumped
    // with (a clone's source's ids): they are this sandbox's PID 1's.
    let started = started.and_then(|pid| match &spec.restore {
        Some(from) if from.dumped.manage_cgroups && spec.context_cgroups => {
            let uid = spec.id_map.to_outside(spec.user.uid).unwrap_or(u32::MAX);
            let gid = spec.id_map.to_outside(spec.user.gid).unwrap_or(u32::MAX);
            crate::delegation::reown(&cgroup, uid, gid)
                .map(|()| pid)
                .map_err(|e| {
                    let _ = cgroup.kill_all();
                    JailError::Cgroup(e)
                })
        }
        _ => Ok(pid),
    });
    match started {
        Ok(pid) => Ok(Launched { pid, cgroup }),
        Err(e) => {
            // The child is dead and reaped by now; its cgroup can go.
            let _ = cgroup.remove();
            Err(e)
        }
    }
}

/// The delegated cgroup sub-tree (see [`crate::delegation`]) and the binds that show it inside at
/// `/sys/fs/cgroup/<controller>`.
fn delegate_contexts(
    spec: &SandboxSpec,
    cgroup: &Cgroup,
) -> Result<Vec<rootfs::BindPlan>, CgroupError> {
    let uid = spec.id_map.to_outside(spec.user.uid).unwrap_or(u32::MAX);
    let gid = spec.id_map.to_outside(spec.user.gid).unwrap_or(u32::MAX);
    let dirs = crate::delegation::delegate(cgroup, &spec.limits.cgroup(), uid, gid)?;
    let mount_dir = crate::delegation::MOUNT_DIR.trim_start_matches('/');
    Ok(dirs
        .into_iter()
        .map(|d| rootfs::BindPlan {
            source: d.host_path,
            target: Path::new(mount_dir).join(d.controller),
            readonly: false,
            source_is_dir: true,
            no_symlinks: true,
            idmapped: false,
        })
        .collect())
}

pub(crate) fn thread_count() -> Result<usize, JailError> {
    let path = Path::new("/proc/self/status");
    let status = std::fs::read_to_string(path).map_err(|source| {
        JailError::Io(crate::StepIo {
            step: "counting threads",
            path: path.into(),
            source,
        })
    })?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), JailError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| JailError::Sync {
        step: "creating a sync pipe",
        source: e.into(),
    })
}

/// Move an fd to a number >= `min` (close-on-exec): >= 3 so that dup2 onto 0/1/2 in the child
/// never hits itself, and above the numbers the inherited fds take (3..3+n), so that their dup2s
/// in the child clobber nothing the child still uses.
fn above(fd: OwnedFd, min: i32, what: &'static str, path: &Path) -> Result<OwnedFd, JailError> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if fd.as_raw_fd() >= min {
        return Ok(fd);
    }
    let raw = nix::fcntl::fcntl(fd.as_fd(), FcntlArg::F_DUPFD_CLOEXEC(min)).map_err(|e| {
        JailError::Io(crate::StepIo {
            step: what,
            path: path.into(),
            source: e.into(),
        })
    })?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Open the files of `spec.inherit_fds`, in order (close-on-exec until the child hands them
/// over). A `UnixListener` slot stays `None`: its socket must be made in the sandbox's network
/// namespace, after the clone ([`bind_listeners`]).
fn open_inherited(spec: &SandboxSpec, min: i32) -> Result<Vec<Option<OwnedFd>>, JailError> {
    let mut out = Vec::new();
    for fd in &spec.inherit_fds {
        match fd {
            InheritFd::UnixListener { .. } => out.push(None),
            InheritFd::ReadOnlyFile { path } => {
                let what = "opening the inherited file";
                let opened = nix::fcntl::open(
                    path.as_path(),
                    OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| {
                    JailError::Io(crate::StepIo {
                        step: what,
                        path: path.clone(),
                        source: e.into(),
                    })
                })?;
                out.push(Some(above(opened, min, what, path)?));
            }
        }
    }
    Ok(out)
}

/// The listening sockets of `spec.inherit_fds`, bound at their (root-only host) paths but created
/// in the network namespace of the sandbox's PID 1 `pid` (a socket belongs to the namespace it is
/// made in: the sandbox's own, so that a checkpoint of the sandbox holds it), in order. We enter
/// that namespace for the `socket()` calls and return to ours.
fn bind_listeners(spec: &SandboxSpec, pid: i32) -> Result<Vec<OwnedFd>, JailError> {
    let paths = spec.unix_listener_paths();
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let sys = crate::sys::Linux;
    let open_ns = |path: PathBuf| {
        sys.open(&path, OFlag::O_RDONLY | OFlag::O_CLOEXEC)
            .map_err(|source| {
                JailError::Io(crate::StepIo {
                    step: "opening a network namespace",
                    path,
                    source,
                })
            })
    };
    let ours = open_ns("/proc/self/ns/net".into())?;
    let theirs = open_ns(format!("/proc/{pid}/ns/net").into())?;
    let net = nix::sched::CloneFlags::CLONE_NEWNET;
    sys.setns(theirs.as_fd(), net)
        .map_err(|source| JailError::Sync {
            step: "entering the sandbox's network namespace",
            source,
        })?;
    let bound: Result<Vec<OwnedFd>, JailError> = paths
        .iter()
        .map(|path| {
            crate::hostpath::bind_unix_listener(path).map_err(|e| {
                JailError::Io(crate::StepIo {
                    step: "binding the inherited socket",
                    path: (*path).clone(),
                    source: io::Error::other(crate::error_chain(&e)),
                })
            })
        })
        .collect();
    sys.setns(ours.as_fd(), net)
        .map_err(|source| JailError::Sync {
            step: "returning to the launcher's network namespace",
            source,
        })?;
    bound
}

fn cstring(field: &str, s: &[u8]) -> Result<CString, JailError> {
    CString::new(s).map_err(|_| {
        JailError::InvalidSpec(InvalidSpec {
            field: field.to_string(),
            reason: "contains NUL".into(),
        })
    })
}

/// Everything that can be computed or opened before the clone.
fn prepare(
    spec: &SandboxSpec,
    filter: Filter,
    go: OwnedFd,
    report: OwnedFd,
    min: i32,
) -> Result<ChildPlan, JailError> {
    let io_err = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| JailError::Io(crate::StepIo { step, path, source })
    };
    // Read-write and non-blocking: when `log_path` is a FIFO that the server drains (see
    // `SandboxSpec::log_path`), the program never blocks on a full pipe (a line that does not fit
    // is dropped) and never gets EPIPE while no reader is there (a server restart).
    let log = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NONBLOCK)
        .open(&spec.log_path)
        .map_err(io_err("opening the log file", &spec.log_path))?;
    let log = above(log.into(), min, "opening the log file", &spec.log_path)?;
    let devnull = Path::new("/dev/null");
    let stdin = nix::fcntl::open(devnull, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| io_err("opening /dev/null", devnull)(e.into()))?;
    let stdin = above(stdin, min, "opening /dev/null", devnull)?;
    let inherit = open_inherited(spec, min)?;
    // The sockets made after the clone travel to the child over this pair (`SCM_RIGHTS`).
    let (listeners_send, listeners_recv) = match inherit.iter().any(Option::is_none) {
        true => {
            let (a, b) = crate::fdpass::seqpacket_pair().map_err(|source| JailError::Sync {
                step: "creating the socket pair for the inherited sockets",
                source,
            })?;
            let what = "creating the socket pair for the inherited sockets";
            let pair = Path::new("socketpair");
            (
                Some(above(a, min, what, pair)?),
                Some(above(b, min, what, pair)?),
            )
        }
        false => (None, None),
    };

    // The template layer and `idmapped` binds are shown through an id map when their on-disk
    // range is not the sandbox's own.
    let layer_base = spec
        .layer_id_base
        .filter(|b| b.checked_add(spec.id_map.inside) != Some(spec.id_map.outside));
    let idmap_userns = match layer_base {
        Some(base) => Some(idmap::userns(
            base + spec.id_map.inside,
            spec.id_map.outside,
            spec.id_map.count,
        )?),
        None => None,
    };
    // `/` inside is the overlay's root, whose owner and mode come from the upper layer's root:
    // make them the template's (as the sandbox sees it, through the id map).
    let top = &spec.rootfs.lower[0];
    let lower = std::fs::metadata(top).map_err(io_err("reading the template root", top))?;
    let upper = std::fs::metadata(&spec.rootfs.upper)
        .map_err(io_err("reading the writable layer", &spec.rootfs.upper))?;
    let lower_owner = match layer_base {
        Some(base) => (
            spec.id_map.layer_to_outside(base, lower.uid()),
            spec.id_map.layer_to_outside(base, lower.gid()),
        ),
        None => (lower.uid(), lower.gid()),
    };
    if (upper.uid(), upper.gid()) != lower_owner {
        std::os::unix::fs::chown(&spec.rootfs.upper, Some(lower_owner.0), Some(lower_owner.1))
            .map_err(io_err("chown of the writable layer", &spec.rootfs.upper))?;
    }
    if upper.mode() & 0o7777 != lower.mode() & 0o7777 {
        std::fs::set_permissions(
            &spec.rootfs.upper,
            std::fs::Permissions::from_mode(lower.mode() & 0o7777),
        )
        .map_err(io_err("chmod of the writable layer", &spec.rootfs.upper))?;
    }

    let mut binds = Vec::new();
    for b in &spec.binds {
        let meta = std::fs::metadata(&b.source).map_err(io_err("bind source", &b.source))?;
        binds.push(rootfs::BindPlan {
            source: b.source.clone(),
            target: b
                .target
                .strip_prefix("/")
                .unwrap_or(&b.target)
                .to_path_buf(),
            readonly: b.readonly,
            source_is_dir: meta.is_dir(),
            no_symlinks: b.no_symlinks,
            idmapped: b.idmapped && idmap_userns.is_some(),
        });
    }
    // uids and gids share one map, so the sandbox's root user and group have the same host id.
    // (Owner of what the launcher creates as host root: the targets of the binds.)
    let root_owner = spec.id_map.to_outside(0).map(|id| (id, id));
    let size = |n: Option<u64>| n.map(|n| format!(",size={n}")).unwrap_or_default();
    // The tmpfs and devpts mounts are made by the sandbox's root in its own user namespace: their
    // owner is that root without options, and ids in options are the sandbox's own.
    let owner_opts = String::new();
    // The tty group (gid 5 inside) owns pty slaves, as on a normal system.
    let tty_gid = spec
        .id_map
        .to_outside(5)
        .map(|_| ",gid=5".to_string())
        .unwrap_or_default();
    let plan = rootfs::Plan {
        mountpoint: spec.rootfs.mountpoint.clone(),
        lower: spec.rootfs.lower.clone(),
        upper: spec.rootfs.upper.clone(),
        work: spec.rootfs.work.clone(),
        binds,
        idmap_userns,
        root_owner,
        dev_options: format!("mode=755,size=65536,nr_inodes=64{owner_opts}"),
        // An instance of its own with at most `ptys_max` PTYs: the host's pool
        // (`kernel.pty.max`) is shared by every devpts instance.
        devpts_options: format!(
            "newinstance,ptmxmode=0666,mode=0620,max={}{tty_gid}",
            spec.limits.ptys_max.unwrap_or(DEFAULT_PTYS_MAX)
        ),
        shm_options: format!("mode=1777{}{owner_opts}", size(spec.limits.tmp_bytes)),
        tmp_options: format!("mode=1777{}{owner_opts}", size(spec.limits.tmp_bytes)),
        proc_files: proc_files()?,
    };

    let program = cstring("program", spec.program.as_os_str().as_bytes())?;
    let program_fd = match &spec.program_source {
        Some(src) => {
            let fd = nix::fcntl::open(
                src.as_path(),
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io_err("opening the program", src)(e.into()))?;
            Some(above(fd, min, "opening the program", src)?)
        }
        None => None,
    };
    let mut argv = vec![program.clone()];
    for a in &spec.args {
        argv.push(cstring("args", a.as_bytes())?);
    }
    let mut envp = Vec::new();
    for (k, v) in &spec.env {
        envp.push(cstring("env", format!("{k}={v}").as_bytes())?);
    }
    Ok(ChildPlan {
        go,
        report,
        stdin,
        log,
        rootfs: plan,
        hostname: spec.hostname.clone(),
        nofile: spec.limits.nofile,
        uid: spec.user.uid,
        gid: spec.user.gid,
        keep_caps: Capability::mask(&spec.keep_caps),
        cwd: cstring("cwd", spec.cwd.as_os_str().as_bytes())?,
        program,
        program_fd,
        inherit,
        listeners: listeners_recv,
        listeners_send,
        argv,
        envp,
        filter,
    })
}

/// The hidden subcommand of the `lizard` program that runs
/// [`crate::checkpoint::setup_restored_netns`] (see [`RestoreFrom::netns_setup`]).
pub const NETNS_SETUP_COMMAND: &str = "sandbox-netns-setup";

/// Write the action script of a restore whose dump left the network namespace out, next to the
/// images (their parent: host-side, root-only, see `checkpoint::ImagesDir`): it execs `command`
/// (each word quoted for `sh`). Returns its path.
fn netns_setup_script(images: &Path, command: &[String]) -> Result<PathBuf, JailError> {
    use std::os::unix::fs::OpenOptionsExt;
    if command.is_empty() {
        return Err(JailError::InvalidSpec(InvalidSpec {
            field: "restore.netns_setup".into(),
            reason: "the checkpoint left its network namespace out, and no command makes it".into(),
        }));
    }
    let dir = images.parent().unwrap_or(Path::new("/"));
    let path = dir.join("criu-netns-setup");
    let _ = std::fs::remove_file(&path);
    let words: Vec<String> = command
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect();
    let script = format!("#!/bin/sh\nexec {}\n", words.join(" "));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .and_then(|mut f| f.write_all(script.as_bytes()))
        .map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "writing the restore's network namespace action",
                path: path.clone(),
                source,
            })
        })?;
    Ok(path)
}

/// Where restores stage their mount sources: `/var/lib/lizard-restore`, root's and not writable
/// by anyone else (made 0711 if missing), so that the restored user namespace can always traverse
/// to it whatever the server's `TMPDIR` is (not below `/run`: CRIU runs with a `/run` of its own,
/// `checkpoint::private_run`); the server's temporary directory only where that place cannot be
/// used. A fresh, empty directory `<launcher pid>-<nanoseconds>` is made in it
/// each time; the empty ones left by launchers that died mid-restore are removed first.
fn restore_staging_dir() -> Result<PathBuf, JailError> {
    const BASE: &str = "/var/lib/lizard-restore";
    let base = Path::new(BASE);
    let _ =
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o711).create(base);
    let usable = std::fs::symlink_metadata(base)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0);
    let base = if usable {
        sweep_restore_staging(base);
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let staging = base.join(format!(
        "{}{}-{}",
        if usable { "" } else { ".lizard-restore-" },
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o711)
        .create(&staging)
        .map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "making the restore's staging directory",
                path: staging.clone(),
                source,
            })
        })?;
    Ok(staging)
}

/// Remove the staging directories in `base` whose launcher is gone (`rmdir`: only empty ones;
/// their tmpfs was in the launcher's own mount namespace, gone with it).
fn sweep_restore_staging(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten().take(4096) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(p, _)| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        if kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Restore `from` (a CRIU checkpoint of a sandbox launched from this spec) instead of starting
/// the program: in a staging mount namespace the overlay root is mounted as for a launch, the
/// listening sockets are bound anew at their paths, and CRIU restores the tree with that root,
/// the host sources of its external mounts (`mount_sources` and the delegated cgroup
/// directories), the log and `/dev/null` for its host files and the new sockets for the old ones,
/// inside the sandbox's cgroup. Returns the restored PID 1's host pid.
fn restore_into(
    spec: &SandboxSpec,
    from: &RestoreFrom,
    plan: ChildPlan,
    cgroup: &Cgroup,
) -> Result<i32, JailError> {
    use crate::checkpoint::{Criu, ImagesDir, RestoreSpec};
    use std::sync::Arc;
    let images = ImagesDir {
        path: from.images.clone(),
    };
    let io_err = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| JailError::Io(crate::StepIo { step, path, source })
    };
    // Host sources of the external mounts.
    let mut sources = mount_sources(spec, &from.images)?;
    sources.extend(
        plan.rootfs
            .binds
            .iter()
            .map(|b| (Path::new("/").join(&b.target), b.source.clone())),
    );
    let mut external_mounts: Vec<(String, PathBuf)> = Vec::new();
    // Per external mount: the `MOUNT_ATTR_*` flags of an idmapped bind (a volume), whose staged
    // source must be idmapped as a launch's is (a bind of an idmapped mount keeps its id map).
    let mut idmapped: Vec<Option<u64>> = Vec::new();
    for (mountpoint, key) in &from.dumped.external_mounts {
        let Some((_, host)) = sources
            .iter()
            .rev()
            .find(|(inside, _)| inside == mountpoint)
        else {
            return Err(JailError::Io(crate::StepIo {
                step: "finding the host source of a checkpointed mount",
                path: mountpoint.clone(),
                source: io::Error::from(io::ErrorKind::NotFound),
            }));
        };
        external_mounts.push((key.clone(), host.clone()));
        idmapped.push(
            plan.rootfs
                .binds
                .iter()
                .rev()
                .find(|b| Path::new("/").join(&b.target) == *mountpoint)
                .filter(|b| b.idmapped && plan.rootfs.idmap_userns.is_some())
                .map(|b| {
                    let ro = if b.readonly {
                        libc::MOUNT_ATTR_RDONLY
                    } else {
                        0
                    };
                    libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | ro
                }),
        );
    }
    // CRIU reopens an inherited file through /proc/self/fd as the restored task (the sandbox's
    // root, in its user namespace): the log becomes that root's (its mode stays, CRIU checks it).
    // It is still reachable by no path from inside (see docs/SECURITY.md, "CRIU checkpoints").
    let root_id = spec.id_map.to_outside(0).unwrap_or(u32::MAX);
    nix::unistd::fchown(
        &plan.log,
        Some(nix::unistd::Uid::from_raw(root_id)),
        Some(nix::unistd::Gid::from_raw(root_id)),
    )
    .map_err(|e| io_err("giving the log to the sandbox's root", &spec.log_path)(e.into()))?;
    // Its host files: stdin was /dev/null, everything else the log.
    let mut inherit_fds: Vec<(Arc<OwnedFd>, String)> = Vec::new();
    let log = Arc::new(plan.log);
    let stdin = Arc::new(plan.stdin);
    for f in &from.dumped.external_files {
        let fd = if f.fd == 0 {
            stdin.clone()
        } else {
            log.clone()
        };
        inherit_fds.push((fd, f.resource()));
    }
    let listeners = spec.unix_listener_paths();
    for (path, inode) in listeners.iter().zip(&from.dumped.external_unix) {
        let sock = crate::hostpath::bind_unix_listener(path).map_err(|e| {
            JailError::Io(crate::StepIo {
                step: "binding the inherited socket",
                path: (*path).clone(),
                source: io::Error::other(crate::error_chain(&e)),
            })
        })?;
        // The restored program listened on it long ago: it must be listening already.
        nix::sys::socket::listen(
            &sock,
            nix::sys::socket::Backlog::new(128).unwrap_or(nix::sys::socket::Backlog::MAXCONN),
        )
        .map_err(|e| io_err("listening on the inherited socket", path)(e.into()))?;
        // Non-blocking, as the agent had made its own (a file status flag, of this open file,
        // which CRIU hands over as it is): a blocking accept would hold one of its threads.
        nix::fcntl::fcntl(&sock, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .map_err(|e| io_err("making the inherited socket non-blocking", path)(e.into()))?;
        inherit_fds.push((Arc::new(sock), format!("socket:[{inode}]")));
    }
    // The images are read by the restored tasks themselves (their ids, through CRIU's fd).
    images.open_to_restored_tasks(root_id).map_err(io_err(
        "opening the images to the restored tasks",
        &from.images,
    ))?;

    let sys = crate::sys::Linux;
    let ns = Path::new("/proc/self/ns/mnt");
    let host_mntns = sys
        .open(ns, OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .map_err(io_err("opening the launcher's mount namespace", ns))?;
    // Where the mount sources are staged: a directory made afresh for this restore (a tmpfs
    // over it in the staging namespace only), so that it hides nothing the restore needs — a
    // fixed place such as `/mnt` would hide a data dir or a CRIU below it.
    let staging = restore_staging_dir()?;
    let remove_staging = |staging: &Path| {
        let _ = std::fs::remove_dir(staging);
    };
    if let Err(source) = sys.unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
        remove_staging(&staging);
        return Err(JailError::Sync {
            step: "unshare (staging mount namespace)",
            source,
        });
    }
    // CRIU's action at `setup-namespaces` configures the restored network namespace (when the
    // dump left it out): `from.netns_setup`, through a script in the root-only directory above
    // the images.
    let netns_setup = match from.dumped.empty_netns {
        false => None,
        true => Some(netns_setup_script(&from.images, &from.netns_setup)?),
    };
    let restored = rootfs::mount_root(&sys, &plan.rootfs)
        .map_err(JailError::from)
        .and_then(|()| {
            stage_sources(
                &sys,
                &mut external_mounts,
                &idmapped,
                plan.rootfs.idmap_userns.as_ref().map(|u| u.as_fd()),
                &from.images,
                &staging,
            )
        })
        .and_then(|()| {
            let restore = RestoreSpec {
                root: plan.rootfs.mountpoint.clone(),
                external_mounts,
                inherit_fds,
                cgroup: Some(cgroup.clone()),
                manage_cgroups: from.dumped.manage_cgroups,
                netns_setup: netns_setup.clone(),
            };
            Criu::new(from.criu.clone())
                .with_run_dir(from.criu_run_dir.clone())
                .restore(
                    &images,
                    &restore,
                    std::time::Duration::from_millis(from.deadline_ms),
                )
                .map_err(|e| JailError::Helper {
                    message: format!("criu restore: {}", crate::error_chain(&e)),
                })
        });
    let home = sys.setns(host_mntns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS);
    if home.is_ok() {
        // An empty directory here: its tmpfs was the staging namespace's only.
        remove_staging(&staging);
    }
    if let Some(script) = &netns_setup {
        let _ = std::fs::remove_file(script);
    }
    let pid = restored?;
    home.map_err(|source| JailError::Sync {
        step: "returning to the launcher's mount namespace",
        source,
    })?;
    Ok(pid)
}

/// The most of a `/proc` file [`stage_sources`] copies.
const MAX_COPIED_SOURCE_BYTES: u64 = 1024 * 1024;

/// CRIU opens the sources of external mounts from inside the restored user namespace, which may
/// not traverse the root-only host directories they live in: in the staging mount namespace (a
/// private copy, seen by nobody else), a small tmpfs over `staging` (a directory made for this
/// restore in the temporary directory, mode 0711) gets a bind of each source (`<staging>/e<i>`),
/// and CRIU is given those. The `/proc` files written under `copied`
/// are copied there instead: a restored sandbox sees them, as a launched one does, as files of a
/// tmpfs named `none`, not of the host's disk.
fn stage_sources(
    sys: &impl Syscall,
    external_mounts: &mut [(String, PathBuf)],
    idmapped: &[Option<u64>],
    userns: Option<std::os::fd::BorrowedFd<'_>>,
    copied: &Path,
    staging: &Path,
) -> Result<(), JailError> {
    use nix::mount::MsFlags;
    let sync = |step: &'static str| move |source: io::Error| JailError::Sync { step, source };
    // Every source is opened (and every copied file read) before the tmpfs is mounted: a
    // source is then used by its descriptor, whatever the tmpfs covers.
    enum Source {
        Copied(Vec<u8>),
        Opened(OwnedFd, bool),
    }
    let mut sources = Vec::with_capacity(external_mounts.len());
    for (_, host) in external_mounts.iter() {
        if host.starts_with(copied) {
            let mut bytes = Vec::new();
            std::fs::File::open(host)
                .and_then(|f| {
                    use std::io::Read;
                    f.take(MAX_COPIED_SOURCE_BYTES).read_to_end(&mut bytes)
                })
                .map_err(|source| {
                    JailError::Io(crate::StepIo {
                        step: "reading a /proc file of the restore",
                        path: host.clone(),
                        source,
                    })
                })?;
            sources.push(Source::Copied(bytes));
            continue;
        }
        let fd = sys
            .open(host, OFlag::O_PATH | OFlag::O_CLOEXEC)
            .map_err(|source| {
                JailError::Io(crate::StepIo {
                    step: "a mount source of the restore",
                    path: host.clone(),
                    source,
                })
            })?;
        let is_dir = nix::sys::stat::fstat(&fd)
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map_err(|e| {
                JailError::Io(crate::StepIo {
                    step: "a mount source of the restore",
                    path: host.clone(),
                    source: e.into(),
                })
            })?;
        sources.push(Source::Opened(fd, is_dir));
    }
    sys.mount(
        Some(Path::new("none")),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0711,size=65536,nr_inodes=1024"),
    )
    .map_err(sync(
        "mounting the staging tmpfs for the restore's mount sources",
    ))?;
    for (i, ((_, host), source)) in external_mounts.iter_mut().zip(sources).enumerate() {
        let staged = staging.join(format!("e{i}"));
        let (fd, is_dir) = match source {
            Source::Copied(bytes) => {
                std::fs::write(&staged, bytes).map_err(|source| {
                    JailError::Io(crate::StepIo {
                        step: "staging a /proc file of the restore",
                        path: staged.clone(),
                        source,
                    })
                })?;
                *host = staged;
                continue;
            }
            Source::Opened(fd, is_dir) => (fd, is_dir),
        };
        // The opened source, by its descriptor (the path may be under the tmpfs now).
        let by_fd = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ));
        let made = if is_dir {
            std::fs::create_dir(&staged)
        } else {
            std::fs::File::create(&staged).map(drop)
        };
        made.map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "staging a mount source of the restore",
                path: staged.clone(),
                source,
            })
        })?;
        if let (Some(Some(attrs)), Some(userns)) = (idmapped.get(i), userns) {
            // A volume: shown through the sandbox's id map, as at launch.
            let tree = rootfs::idmapped_tree(sys, &by_fd, *attrs, userns)?;
            let at = sys
                .open(&staged, OFlag::O_PATH | OFlag::O_CLOEXEC)
                .map_err(|source| {
                    JailError::Io(crate::StepIo {
                        step: "opening a staged mount source of the restore",
                        path: staged.clone(),
                        source,
                    })
                })?;
            sys.move_mount_onto(tree.as_fd(), at.as_fd())
                .map_err(|source| {
                    JailError::Io(crate::StepIo {
                        step: "attaching an idmapped mount source of the restore",
                        path: staged.clone(),
                        source,
                    })
                })?;
            *host = staged;
            continue;
        }
        sys.mount(
            Some(by_fd.as_path()),
            &staged,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )
        .map_err(sync("binding a mount source of the restore"))?;
        *host = staged;
    }
    Ok(())
}

/// With [`SandboxSpec::userns_parent`]: the clone of the sandbox's first process (`flags`, the
/// user namespace first), made by a helper inside the parent user namespace so that the new one
/// is that namespace's child, owned by `owner.uid`. The launcher cannot enter it itself: it needs
/// the host's capabilities afterwards and can never `setns` back to an ancestor user namespace.
///
/// The helper (a fork of this single-threaded launcher) enters `parent` as root, takes the
/// owner's uid and gid as its effective ids keeping its capabilities there
/// (`SECBIT_NO_SETUID_FIXUP`: the parent does not map 0, so the kernel would not clear them
/// anyway; nothing of it runs after the clone but the map writes), is dumpable (else the child's
/// `/proc` files would belong to the host's root, whom the parent does not map), clones the
/// child, writes its uid and gid maps `map` from the parent (the kernel takes them from there
/// alone), reports the child's pid and exits. The child, orphaned, is reparented to the launcher,
/// a child subreaper from here on. As `clone_process`: `Some(pid)` in the launcher, `None` in
/// the child.
fn clone_inside(
    parent: BorrowedFd<'_>,
    owner: &UsernsParent,
    flags: libc::c_int,
    map: &str,
) -> Result<Option<i32>, JailError> {
    crate::process::set_child_subreaper().map_err(|source| JailError::Sync {
        step: "becoming a child subreaper",
        source,
    })?;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| JailError::Sync {
        step: "creating the user namespace helper's pipe",
        source: e.into(),
    })?;
    let helper = match crate::sys::clone_process(0) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            drop(read);
            let report = match clone_from_parent(&crate::sys::Linux, parent, owner, flags, map) {
                Ok(None) => {
                    // The sandbox's first process: the launcher reads the helper's report to EOF.
                    drop(write);
                    return Ok(None);
                }
                Ok(Some(pid)) => [&b"P"[..], &pid.to_le_bytes()].concat(),
                Err((step, errno)) => [&b"E"[..], &errno.to_le_bytes(), step.as_bytes()].concat(),
            };
            let _ = nix::unistd::write(&write, &report);
            crate::sys::exit_now(0)
        }
        Err(source) => {
            return Err(JailError::Sync {
                step: "cloning the user namespace helper",
                source,
            })
        }
    };
    drop(write);
    let mut report = Vec::new();
    // EOF once the helper has exited (the child closed its copy first thing).
    let read = std::fs::File::from(read).take(256).read_to_end(&mut report);
    let _ = waitpid(Pid::from_raw(helper), None);
    read.map_err(|source| JailError::Sync {
        step: "reading the user namespace helper's report",
        source,
    })?;
    let word = |b: &[u8]| {
        b.get(..4)
            .and_then(|w| w.try_into().ok())
            .map(i32::from_le_bytes)
    };
    match report.split_first() {
        Some((b'P', rest)) if rest.len() == 4 => Ok(word(rest)),
        Some((b'E', rest)) => Err(JailError::Setup {
            step: String::from_utf8_lossy(rest.get(4..).unwrap_or_default()).into_owned(),
            detail: "in the sandbox's parent user namespace".into(),
            source: io::Error::from_raw_os_error(word(rest).unwrap_or(libc::EIO)),
        }),
        _ => Err(JailError::Sync {
            step: "the user namespace helper ended without a report",
            source: io::Error::from_raw_os_error(libc::EPROTO),
        }),
    }
}

/// The helper's part of [`clone_inside`]: `Ok(None)` in the child, `Ok(Some(child's pid))` in the
/// helper once the maps are written, or the failed step and its errno (the child, if any, killed).
fn clone_from_parent(
    sys: &impl crate::sys::Syscall,
    parent: BorrowedFd<'_>,
    owner: &UsernsParent,
    flags: libc::c_int,
    map: &str,
) -> Result<Option<i32>, (&'static str, i32)> {
    let errno =
        |step: &'static str| move |e: io::Error| (step, e.raw_os_error().unwrap_or(libc::EIO));
    sys.setns(parent, nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(errno("entering the parent user namespace"))?;
    sys.set_securebits(crate::sys::SECBIT_NO_SETUID_FIXUP)
        .map_err(errno("keeping capabilities across the change of ids"))?;
    sys.set_effective_ids(owner.uid, owner.gid)
        .map_err(errno("taking the owner's ids"))?;
    sys.set_dumpable(true).map_err(errno("becoming dumpable"))?;
    let pid = match sys.clone_process(flags) {
        Ok(None) => return Ok(None),
        Ok(Some(pid)) => pid,
        Err(e) => return Err(errno("clone")(e)),
    };
    for (file, step) in [
        ("uid_map", "writing the sandbox's uid_map"),
        ("gid_map", "writing the sandbox's gid_map"),
    ] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        if let Err(e) = sys.write_file(&path, map.as_bytes()) {
            let _ = sys.kill(pid);
            return Err(errno(step)(e));
        }
    }
    Ok(Some(pid))
}

/// A [`UsernsParent`]'s namespace, opened and checked: a user namespace that root owns.
fn open_userns_parent(p: &UsernsParent) -> Result<OwnedFd, JailError> {
    let io_err = |source: io::Error| {
        JailError::Io(crate::StepIo {
            step: "opening the sandbox's parent user namespace",
            path: p.path.clone(),
            source,
        })
    };
    let ns = nix::fcntl::open(&p.path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| io_err(e.into()))?;
    match crate::sys::user_namespace_owner(ns.as_fd()).map_err(io_err)? {
        Some(0) => Ok(ns),
        other => Err(JailError::InvalidSpec(InvalidSpec {
            field: "userns_parent.path".into(),
            reason: match other {
                None => "not a user namespace".into(),
                Some(uid) => format!("a user namespace owned by uid {uid}, not root"),
            },
        })),
    }
}

/// Clone the child and walk it through the sync protocol. Returns the child's host pid.
fn start(
    spec: &SandboxSpec,
    mut plan: ChildPlan,
    go: OwnedFd,
    report: OwnedFd,
    cgroup: &Cgroup,
) -> Result<i32, JailError> {
    // With `userns_parent`, the sandbox's user namespace is made inside that one.
    let parent = match &spec.userns_parent {
        Some(p) => Some((open_userns_parent(p)?, p)),
        None => None,
    };
    // The user namespace first, in the same clone as the others: it owns the sandbox's mount, pid,
    // net, ipc and uts namespaces (and the cgroup namespace the child makes), as with runc or
    // podman's user namespaces. The sandbox's root still never holds CAP_SYS_ADMIN, NET_ADMIN or
    // NET_RAW (bounding set) and seccomp refuses mount, unshare, setns (see docs/SECURITY.md).
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    let sys = crate::sys::Linux;
    let cloned = staged_clone(&sys, &plan.rootfs, || {
        // Raising a hard limit needs CAP_SYS_RESOURCE in the host's user namespace, which the
        // child never has: set the limits here, the child inherits them, ours are put back after
        // the clone.
        let limits_before = set_child_limits(plan.nofile)?;
        let cloned = match &parent {
            None => sys.clone_process(flags).map_err(|source| JailError::Sync {
                step: "clone",
                source,
            }),
            Some((ns, owner)) => clone_inside(ns.as_fd(), owner, flags, &id_map_line(spec)),
        };
        if !matches!(cloned, Ok(None)) {
            restore_limits(limits_before);
        }
        cloned
    });
    let pid = match cloned {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            // In the child. Our copies of the parent's pipe ends must go, or EOF never comes.
            drop(go);
            drop(report);
            child::run(&plan)
        }
        Err(e) => return Err(e),
    };
    // The child's ends; dropping ours is what lets EOF through.
    let listeners_send = plan.listeners_send.take();
    drop(plan);
    let mut go = std::fs::File::from(go);
    let mut report = std::fs::File::from(report);
    let result = parent_side(
        spec,
        listeners_send.as_ref(),
        pid,
        &mut go,
        &mut report,
        cgroup,
    );
    if let Err(e) = result {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        let status = waitpid(Pid::from_raw(pid), None);
        // A child that failed first explains the parent's error (e.g. a closed pipe): prefer its
        // report, which the dead child's closed pipe now ends.
        if let Ok(Report::Failed(child_error)) = read_report(&mut report) {
            return Err(child_error.into());
        }
        return Err(match e {
            JailError::ChildDied { .. } => JailError::ChildDied {
                status: format!("{status:?}"),
            },
            e => e,
        });
    }
    Ok(pid)
}

/// The launcher's side of the clone of a sandbox's first process (`clone`: `Some(pid)` here,
/// `None` in the child), in a staging mount namespace: a private copy of the launcher's own, made
/// by `unshare`, in which it builds the host-root half of the sandbox's mount table (`rootfs`).
/// The clone copies that namespace into the sandbox's, where the kernel locks every mount of it.
/// The child starts in the overlay root (its copy of the launcher's current directory): it could
/// not reach it by path through the root-only host directories above. The launcher then goes back
/// to its directory and its own namespace (`setns`), and the staging one, with no process left,
/// goes away; the child stays in it and returns at once. Whatever fails, the launcher is back
/// home when this returns, or the error says it could not get there (the child, if any, killed).
fn staged_clone(
    sys: &impl Syscall,
    rootfs: &rootfs::Plan,
    clone: impl FnOnce() -> Result<Option<i32>, JailError>,
) -> Result<Option<i32>, JailError> {
    let ns = Path::new("/proc/self/ns/mnt");
    let home = sys
        .open(ns, OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "opening the launcher's mount namespace",
                path: ns.into(),
                source,
            })
        })?;
    let back_home = || {
        sys.setns(home.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS)
            .map_err(|source| JailError::Sync {
                step: "returning to the launcher's mount namespace",
                source,
            })
    };
    sys.unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|source| JailError::Sync {
            step: "unshare (staging mount namespace)",
            source,
        })?;
    let staged = rootfs::build_host(sys, rootfs)
        .map_err(JailError::from)
        .and_then(|()| enter_dir(sys, &rootfs.mountpoint));
    let cwd_before = match staged {
        Ok(cwd) => cwd,
        Err(e) => {
            back_home()?;
            return Err(e);
        }
    };
    let cloned = clone();
    if let Ok(None) = cloned {
        return Ok(None);
    }
    let _ = sys.fchdir(cwd_before.as_fd());
    let home = back_home();
    match (cloned, home) {
        (Ok(Some(pid)), Err(e)) => {
            let _ = sys.kill(pid);
            let _ = sys.reap(pid);
            Err(e)
        }
        (cloned, _) => cloned,
    }
}

/// `chdir(dir)`, returning an fd of the directory we were in.
fn enter_dir(sys: &impl Syscall, dir: &Path) -> Result<OwnedFd, JailError> {
    let io_err = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| JailError::Io(crate::StepIo { step, path, source })
    };
    let here = Path::new(".");
    let before = sys
        .open(here, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .map_err(io_err("opening the current directory", here))?;
    sys.chdir(dir)
        .map_err(io_err("entering the new root", dir))?;
    Ok(before)
}

type Rlimits = [(nix::sys::resource::Resource, (u64, u64)); 2];

/// Set `RLIMIT_NOFILE` (when given) and `RLIMIT_CORE` 0 on ourselves, for the child to inherit;
/// returns the previous values.
fn set_child_limits(nofile: Option<u64>) -> Result<Rlimits, JailError> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let get = |r| {
        getrlimit(r).map_err(|e| JailError::Sync {
            step: "getrlimit",
            source: e.into(),
        })
    };
    let before = [
        (Resource::RLIMIT_NOFILE, get(Resource::RLIMIT_NOFILE)?),
        (Resource::RLIMIT_CORE, get(Resource::RLIMIT_CORE)?),
    ];
    let set = |r, n: u64, what: &'static str| {
        setrlimit(r, n, n).map_err(|e| JailError::Sync {
            step: what,
            source: e.into(),
        })
    };
    if let Some(n) = nofile {
        set(Resource::RLIMIT_NOFILE, n, "setrlimit RLIMIT_NOFILE")?;
    }
    if let Err(e) = set(Resource::RLIMIT_CORE, 0, "setrlimit RLIMIT_CORE=0") {
        restore_limits(before);
        return Err(e);
    }
    Ok(before)
}

fn restore_limits(before: Rlimits) {
    for (r, (soft, hard)) in before {
        let _ = nix::sys::resource::setrlimit(r, soft, hard);
    }
}

enum Report {
    Failed(SetupError),
    Eof,
}

fn read_report(report: &mut std::fs::File) -> Result<Report, JailError> {
    let mut tag = [0u8; 1];
    let n = loop {
        match report.read(&mut tag) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(JailError::Sync {
                    step: "reading the child's report",
                    source,
                })
            }
        }
    };
    if n == 0 {
        return Ok(Report::Eof);
    }
    match tag[0] {
        ERROR_TAG => {
            let mut rest = Vec::new();
            report
                .read_to_end(&mut rest)
                .map_err(|source| JailError::Sync {
                    step: "reading the child's report",
                    source,
                })?;
            Ok(Report::Failed(SetupError::decode(&rest)))
        }
        other => Err(JailError::Sync {
            step: "reading the child's report",
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected byte {other}"),
            ),
        }),
    }
}

/// The sandbox's uid and gid map (one line, the same for both).
fn id_map_line(spec: &SandboxSpec) -> String {
    let m = spec.id_map;
    format!("{} {} {}\n", m.inside, m.outside, m.count)
}

fn parent_side(
    spec: &SandboxSpec,
    listeners_send: Option<&OwnedFd>,
    pid: i32,
    go: &mut std::fs::File,
    report: &mut std::fs::File,
    cgroup: &Cgroup,
) -> Result<(), JailError> {
    // The child waits for a first byte (by then it has its id maps and, in a message before it,
    // its listening sockets), builds its mount table while we move it into the cgroup, then
    // waits for a second byte before its cgroup namespace.
    if let Some(send) = listeners_send {
        let socks = bind_listeners(spec, pid)?;
        let raw: Vec<std::os::fd::RawFd> =
            socks.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
        crate::fdpass::send_with_fds(send, b"l", &raw).map_err(|source| JailError::Sync {
            step: "handing the inherited sockets to the child",
            source,
        })?;
    }
    // With `userns_parent` the helper that made the user namespace wrote them (`clone_inside`).
    if spec.userns_parent.is_none() {
        let map = id_map_line(spec);
        for file in ["uid_map", "gid_map"] {
            let path = PathBuf::from(format!("/proc/{pid}/{file}"));
            std::fs::write(&path, &map).map_err(|source| {
                JailError::Io(crate::StepIo {
                    step: "writing the id map",
                    path,
                    source,
                })
            })?;
        }
    }
    let proceed = |go: &mut std::fs::File| {
        go.write_all(b"g").map_err(|source| JailError::Sync {
            step: "letting the child continue",
            source,
        })
    };
    proceed(go)?;
    // On an error here the caller kills the child and prefers its report, if it wrote one.
    cgroup.add_pid(pid).map_err(JailError::CgroupJoin)?;
    proceed(go)?;
    match read_report(report)? {
        Report::Eof => Ok(()),
        Report::Failed(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The helper of `userns_parent`: into the parent first, then the owner's ids as its
    /// effective ones (capabilities kept), dumpable, the clone, and the maps written from there;
    /// a failed map write kills the child, and a failed step stops everything after it.
    #[test]
    fn the_clone_helper_makes_the_namespace_in_the_parent_as_its_owner() {
        use crate::sys::recorder::Recorder;
        let owner = UsernsParent {
            path: "/proc/1/fd/3".into(),
            uid: 90_000,
            gid: 90_001,
        };
        let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        let map = "0 100000 65536\n";
        let r = Recorder::default();
        let z = r.named_fd("Z");
        let pid = clone_from_parent(&r, z.as_fd(), &owner, flags, map).unwrap();
        assert_eq!(pid, Some(4242));
        let fixup = crate::sys::SECBIT_NO_SETUID_FIXUP;
        assert_eq!(
            r.calls(),
            [
                "setns Z CLONE_NEWUSER".to_string(),
                format!("securebits {fixup:#x}"),
                "set_effective_ids 90000:90001".into(),
                "set_dumpable true".into(),
                format!("clone {flags:#x}"),
                "write_file /proc/4242/uid_map \"0 100000 65536\\n\"".into(),
                "write_file /proc/4242/gid_map \"0 100000 65536\\n\"".into(),
            ]
        );

        let r = Recorder::failing("write_file");
        let z = r.named_fd("Z");
        let e = clone_from_parent(&r, z.as_fd(), &owner, flags, map).unwrap_err();
        assert_eq!(e, ("writing the sandbox's uid_map", libc::EPERM));
        assert_eq!(r.calls().last().unwrap(), "kill 4242");

        let r = Recorder::failing("setns");
        let z = r.named_fd("Z");
        let e = clone_from_parent(&r, z.as_fd(), &owner, flags, map).unwrap_err();
        assert_eq!(e.0, "entering the parent user namespace");
        assert_eq!(r.calls().len(), 1);
    }

    fn root_plan() -> rootfs::Plan {
        rootfs::Plan {
            mountpoint: "/s/root".into(),
            lower: vec!["/t/layer".into()],
            upper: "/s/upper".into(),
            work: "/s/work".into(),
            binds: Vec::new(),
            idmap_userns: None,
            root_owner: Some((100000, 100000)),
            dev_options: String::new(),
            devpts_options: String::new(),
            shm_options: String::new(),
            tmp_options: String::new(),
            proc_files: Vec::new(),
        }
    }

    /// The launcher's side of a launch: a staging mount namespace of its own, the host half of
    /// the mount table built there, the clone made from inside the new root, then back to its
    /// directory and its own namespace. The child stays where it was cloned.
    #[test]
    fn the_clone_is_made_in_a_staging_namespace_the_launcher_leaves() {
        use crate::sys::recorder::Recorder;
        let r = Recorder::default();
        let pid = staged_clone(&r, &root_plan(), || {
            r.clone_process(0).map_err(|source| JailError::Sync {
                step: "clone",
                source,
            })
        })
        .unwrap();
        assert_eq!(pid, Some(4242));
        let calls = r.calls();
        assert_eq!(calls[0], "open /proc/self/ns/mnt O_CLOEXEC");
        assert_eq!(calls[1], "unshare CLONE_NEWNS");
        let overlay = r.position("mount overlay /s/root").unwrap();
        let chdir = r.position("chdir /s/root").unwrap();
        let clone = r.position("clone").unwrap();
        assert!(overlay < chdir && chdir < clone, "{calls:#?}");
        assert_eq!(
            calls[clone + 1..],
            ["fchdir .", "setns /proc/self/ns/mnt CLONE_NEWNS"],
            "{calls:#?}"
        );

        // In the child: nothing after the clone.
        let r = Recorder::default();
        let pid = staged_clone(&r, &root_plan(), || Ok(None)).unwrap();
        assert_eq!(pid, None);
        assert!(r.calls().last().unwrap().starts_with("chdir /s/root"));
    }

    /// Whatever fails, the launcher is back in its own namespace, or says it could not get
    /// there and kills the child it made.
    #[test]
    fn a_failed_launch_step_still_returns_the_launcher_home() {
        use crate::sys::recorder::Recorder;
        let home = "setns /proc/self/ns/mnt CLONE_NEWNS";
        // The mount table fails: no clone, and home.
        let r = Recorder::failing("mount");
        let mut cloned = false;
        let e = staged_clone(&r, &root_plan(), || {
            cloned = true;
            Ok(Some(1))
        })
        .unwrap_err();
        assert!(!cloned);
        assert!(
            matches!(&e, JailError::Setup { step, .. } if step == "make / private"),
            "{e:?}"
        );
        assert_eq!(r.calls().last().unwrap(), home);
        // The clone fails: home.
        let r = Recorder::default();
        let e = staged_clone(&r, &root_plan(), || {
            Err(JailError::Sync {
                step: "clone",
                source: io::Error::from_raw_os_error(libc::EAGAIN),
            })
        })
        .unwrap_err();
        assert!(matches!(e, JailError::Sync { step: "clone", .. }), "{e:?}");
        assert_eq!(r.calls().last().unwrap(), home);
        // Home fails: the child is killed and reaped.
        let r = Recorder::failing("setns");
        let e = staged_clone(&r, &root_plan(), || Ok(Some(4242))).unwrap_err();
        assert!(
            matches!(e, JailError::Sync { step, .. } if step.contains("returning")),
            "{e:?}"
        );
        let calls = r.calls();
        assert_eq!(calls[calls.len() - 2..], ["kill 4242", "reap 4242"]);
        // The namespace cannot be made: nothing else is done.
        let r = Recorder::failing("unshare");
        assert!(staged_clone(&r, &root_plan(), || Ok(Some(1))).is_err());
        assert_eq!(r.calls().len(), 2);
    }

    /// A restore's mount sources: every source opened (a copied `/proc` file read) before the
    /// staging tmpfs covers anything; then each bound by its descriptor (a volume idmapped
    /// first), a copied one written as a file, and CRIU given the staged places.
    #[test]
    fn a_restores_mount_sources_are_staged_by_descriptor_under_a_fresh_tmpfs() {
        use crate::sys::recorder::Recorder;
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        let copied = dir.path().join("images");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::create_dir_all(&copied).unwrap();
        std::fs::write(copied.join("loadavg"), "0.00 0.00 0.00 1/1 1\n").unwrap();
        let mut mounts = vec![
            ("m0".to_string(), PathBuf::from("/h/agent.sock")),
            ("m1".to_string(), copied.join("loadavg")),
            ("m2".to_string(), PathBuf::from("/v/data")),
        ];
        let idmapped = [None, None, Some(libc::MOUNT_ATTR_NOSUID)];
        let r = Recorder::default();
        let userns = r.named_fd("userns");
        stage_sources(
            &r,
            &mut mounts,
            &idmapped,
            Some(userns.as_fd()),
            &copied,
            &staging,
        )
        .unwrap();
        let st = staging.display();
        let calls = r.calls();
        let tmpfs = r.position(&format!("mount none {st} tmpfs")).unwrap();
        assert!(
            r.position("open /h/agent.sock").unwrap() < tmpfs
                && r.position("open /v/data").unwrap() < tmpfs,
            "{calls:#?}"
        );
        assert!(r.position(&format!("open {}", copied.display())).is_none());
        let bind = r
            .position(&format!(
                "mount {{/h/agent.sock}} {st}/e0 - MS_BIND | MS_REC -"
            ))
            .unwrap();
        let tree = r.position("open_tree {/v/data}").unwrap();
        let moved = r.position("move_mount").unwrap();
        assert!(tmpfs < bind && tmpfs < tree && tree < moved, "{calls:#?}");
        assert!(calls[moved].ends_with(&format!("{st}/e2")), "{calls:#?}");
        assert_eq!(r.matching("mount ").len(), 2, "{calls:#?}");
        assert_eq!(
            std::fs::read_to_string(staging.join("e1")).unwrap(),
            "0.00 0.00 0.00 1/1 1\n"
        );
        let staged: Vec<_> = mounts.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(
            staged,
            [staging.join("e0"), staging.join("e1"), staging.join("e2")]
        );
    }

    #[test]
    fn stale_restore_staging_dirs_of_dead_launchers_are_swept() {
        let base = tempfile::tempdir().unwrap();
        // Above any pid_max: no such process.
        let dead = base.path().join("999999999-1");
        let live = base.path().join(format!("{}-2", std::process::id()));
        let full = base.path().join("999999998-3");
        let other = base.path().join("notes");
        for d in [&dead, &live, &full, &other] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(full.join("f"), "x").unwrap();
        sweep_restore_staging(base.path());
        assert!(!dead.exists());
        assert!(live.exists(), "a live launcher's directory stays");
        assert!(full.exists(), "only empty directories are removed");
        assert!(other.exists());
    }

    #[test]
    fn the_netns_action_script_execs_its_command_quoted_and_is_refused_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let images = dir.path().join("criu");
        let e = netns_setup_script(&images, &[]).unwrap_err();
        assert!(
            crate::error_chain(&e).contains("no command"),
            "{}",
            crate::error_chain(&e)
        );
        let cmd = vec![
            "/opt/it's here/lizard".to_string(),
            NETNS_SETUP_COMMAND.into(),
        ];
        let path = netns_setup_script(&images, &cmd).unwrap();
        assert_eq!(path, dir.path().join("criu-netns-setup"));
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sed 's/^exec /printf \"%s|\" /' {} | sh",
                path.display()
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/opt/it's here/lizard|sandbox-netns-setup|"
        );
    }
}
