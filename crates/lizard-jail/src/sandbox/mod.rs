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
//!    descriptors to hand over (`inherit_fds`: e.g. the agent's socket, bound in a root-only host
//!    directory; every fd the child needs is numbered above the range 3.. they will take), with
//!    `layer_id_base` make the user namespace of the idmapped mounts (`idmap`), give the writable
//!    layer the template root's owner (through that id map), create the cgroup with its limits
//!    and (with `context_cgroups`) its delegated sub-tree, bound at `/sys/fs/cgroup/<controller>`
//!    inside (see [`crate::delegation`]);
//! 2. parent: `clone(NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS)`; moves the child into the cgroup while
//!    the child builds its mount table;
//! 3. child: see `child` (mounts as host root, then waits for the cgroup move, then a user
//!    namespace, then drops everything, execs); the parent writes the child's uid/gid maps when
//!    asked;
//! 4. parent: EOF on the close-on-exec report pipe = the program was executed. Any error (in the
//!    parent or reported by the child with its step and errno) kills the child and removes the
//!    cgroup, so a failed launch leaves nothing behind.
//!
//! Not here: what the program is (the agent), where the layers live, HTTP, projects. Reaping: when
//! the launcher exits, the sandbox's PID 1 is re-parented (to the nearest subreaper, see
//! [`crate::process::set_child_subreaper`], else to the host's init), which must reap it.

mod child;
mod idmap;
mod rootfs;
mod spec;

pub use spec::{
    Bind, Capability, IdMap, InheritFd, InvalidSpec, Limits, RootfsSpec, SandboxSpec, UserSpec,
    MAX_INHERIT_FDS,
};

use crate::cgroup::{Cgroup, CgroupError};
use crate::seccomp::{Filter, SeccompError};
use child::{ChildPlan, SetupError, ERROR_TAG, USERNS_READY};
use nix::fcntl::{FcntlArg, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Errors of launching a sandbox. Each names the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error(transparent)]
    InvalidSpec(#[from] InvalidSpec),
    #[error("the sandbox launcher must be single-threaded, this process has {threads} threads (run `lizard sandbox-init`)")]
    NotSingleThreaded { threads: usize },
    #[error("{step}: {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
        std::fs::read_to_string(path).map_err(|source| JailError::Io {
            step: "reading a /proc value",
            path: PathBuf::from(path),
            source,
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
        Err(e) => InitReply::Error(error_chain(&e)),
    };
    let code = i32::from(matches!(reply, InitReply::Error(_)));
    let mut line = serde_json::to_string(&reply)
        .unwrap_or_else(|_| r#"{"error":"cannot serialize the reply"}"#.to_string());
    line.push('\n');
    let mut out = io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
    std::process::exit(code)
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

/// `error: cause: cause`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
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
    match start(spec, plan, go_write, report_read, &cgroup) {
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

fn thread_count() -> Result<usize, JailError> {
    let path = Path::new("/proc/self/status");
    let status = std::fs::read_to_string(path).map_err(|source| JailError::Io {
        step: "counting threads",
        path: path.into(),
        source,
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
        JailError::Io {
            step: what,
            path: path.into(),
            source: e.into(),
        }
    })?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Open the descriptors of `spec.inherit_fds`, in order (close-on-exec until the child hands
/// them over).
fn open_inherited(spec: &SandboxSpec, min: i32) -> Result<Vec<OwnedFd>, JailError> {
    let mut out = Vec::new();
    for fd in &spec.inherit_fds {
        let (what, path, opened) = match fd {
            InheritFd::UnixListener { path } => (
                "binding the inherited socket",
                path,
                crate::hostpath::bind_unix_listener(path).map_err(|e| JailError::Io {
                    step: "binding the inherited socket",
                    path: path.clone(),
                    source: io::Error::other(error_chain(&e)),
                }),
            ),
            InheritFd::ReadOnlyFile { path } => (
                "opening the inherited file",
                path,
                nix::fcntl::open(
                    path.as_path(),
                    OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| JailError::Io {
                    step: "opening the inherited file",
                    path: path.clone(),
                    source: e.into(),
                }),
            ),
        };
        out.push(above(opened?, min, what, path)?);
    }
    Ok(out)
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
        move |source: io::Error| JailError::Io { step, path, source }
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
    let root_owner = spec.id_map.to_outside(0).map(|id| (id, id));
    let size = |n: Option<u64>| n.map(|n| format!(",size={n}")).unwrap_or_default();
    let owner_opts = root_owner
        .map(|(u, g)| format!(",uid={u},gid={g}"))
        .unwrap_or_default();
    // The tty group (gid 5 inside) owns pty slaves, as on a normal system.
    let tty_gid = spec
        .id_map
        .to_outside(5)
        .map(|g| format!(",gid={g}"))
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
        argv,
        envp,
        filter,
    })
}

/// Clone the child and walk it through the sync protocol. Returns the child's host pid.
fn start(
    spec: &SandboxSpec,
    plan: ChildPlan,
    go: OwnedFd,
    report: OwnedFd,
    cgroup: &Cgroup,
) -> Result<i32, JailError> {
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    let pid = match crate::sys::clone_process(flags) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            // In the child. Our copies of the parent's pipe ends must go, or EOF never comes.
            drop(go);
            drop(report);
            child::run(&plan)
        }
        Err(source) => {
            return Err(JailError::Sync {
                step: "clone",
                source,
            })
        }
    };
    // The child's ends; dropping ours is what lets EOF through.
    drop(plan);
    let mut go = std::fs::File::from(go);
    let mut report = std::fs::File::from(report);
    let result = parent_side(spec, pid, &mut go, &mut report, cgroup);
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

enum Report {
    UserNsReady,
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
        USERNS_READY => Ok(Report::UserNsReady),
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

fn parent_side(
    spec: &SandboxSpec,
    pid: i32,
    go: &mut std::fs::File,
    report: &mut std::fs::File,
    cgroup: &Cgroup,
) -> Result<(), JailError> {
    let proceed = |go: &mut std::fs::File, step: &'static str| {
        go.write_all(b"g")
            .map_err(|source| JailError::Sync { step, source })
    };
    // The child builds its mount table meanwhile; it waits for this before anything else.
    cgroup.add_pid(pid).map_err(JailError::CgroupJoin)?;
    let sent = proceed(go, "letting the child continue");
    match read_report(report)? {
        Report::UserNsReady => sent?,
        Report::Failed(e) => return Err(e.into()),
        Report::Eof => {
            return Err(JailError::ChildDied {
                status: String::new(),
            })
        }
    }
    let map = format!(
        "{} {} {}\n",
        spec.id_map.inside, spec.id_map.outside, spec.id_map.count
    );
    for file in ["uid_map", "gid_map"] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, &map).map_err(|source| JailError::Io {
            step: "writing the id map",
            path,
            source,
        })?;
    }
    proceed(go, "letting the child continue")?;
    match read_report(report)? {
        Report::Eof => Ok(()),
        Report::Failed(e) => Err(e.into()),
        Report::UserNsReady => Err(JailError::Sync {
            step: "reading the child's report",
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                "duplicate user-namespace message",
            ),
        }),
    }
}
