//! The host zygote's jail (#24, `docs/design/shared-zygote.md`): a template's pre-imported
//! interpreter that lives on the host, whose forks join new sandboxes.
//!
//! Unlike a sandbox it stays in the host's user and pid namespaces: a process holds capabilities
//! in a user namespace only as its owner or from an ancestor namespace, and `setns` into a pid
//! namespace needs it to be a descendant of the caller's, so a zygote in namespaces of its own
//! could never join a sandbox. Everything else is taken away:
//!
//! - its own mount, network (no interface but a down `lo`), IPC and UTS namespaces;
//! - a root made of the template's layers, read-only (`nosuid,nodev`), with a `tmpfs` `/tmp`
//!   of its own, a `/dev` of the sandbox's device nodes, and a `proc` with
//!   `hidepid=invisible,subset=pid` (it sees its own processes alone, and no `/proc/sys`);
//! - a uid and gid of its own, no supplementary group, every capability set and the bounding set
//!   empty, securebits locked, `no_new_privs`;
//! - the sandbox's seccomp profile with `setns` allowed ([`Filter::host_zygote`]).
//!
//! The single-threaded helper (`lizard-jail-init zygote`) is the zygote itself: [`init_main`]
//! reads a [`HostZygoteSpec`] on stdin, builds the jail around itself and executes the program,
//! which keeps the helper's pid. [`spawn`] runs it from any process: it moves the helper into the
//! zygote's cgroup before it reads its spec, so every step runs charged to that cgroup, and
//! returns once the program is executed (or with the helper's error).

use crate::cgroup::{Cgroup, CgroupError};
use crate::sandbox::{
    bind_mount, fd_path, make_private, mount_fs, open_in_root_with, pivot_into, SetupError, Step,
};
use crate::seccomp::Filter;
use crate::sys::{self, Syscall};
use nix::fcntl::{OFlag, ResolveFlag};
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The one fd a zygote inherits besides 0–2: the server's end of its control socket.
pub const CONTROL_FD: RawFd = 3;

/// The securebits a process that joined a sandbox takes (`"securebits"` of a join request): those of
/// the sandbox's root with kept capabilities, as the agent and its own zygote run.
pub const JOIN_SECUREBITS: u64 = sys::KEPT_CAPS_SECUREBITS;

/// The host's device nodes bound into the zygote's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "urandom", "random"];

/// What [`init_main`] makes and runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostZygoteSpec {
    /// The template's layers, top first (a template build's chain): one layer is bound, several
    /// are stacked as an overlay without an upper layer; either way read-only.
    pub layers: Vec<PathBuf>,
    /// An empty host directory, root's alone, where the root is put together before the zygote
    /// pivots into it (the mount is visible in the zygote's own mount namespace only).
    pub mountpoint: PathBuf,
    /// The zygote's host uid and gid: outside every sandbox's id range and every host account.
    pub uid: u32,
    pub gid: u32,
    pub hostname: String,
    /// Size of the `/tmp` tmpfs.
    pub tmp_bytes: u64,
    /// Where the program's stdout and stderr go (a host file, appended to; made 0600).
    pub log_path: PathBuf,
    /// Absolute path inside the root.
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The whole environment (nothing of the helper's is kept).
    pub env: BTreeMap<String, String>,
    /// Working directory inside the root.
    pub cwd: PathBuf,
    /// `RLIMIT_NOFILE` (soft and hard) of the zygote and so of every process that joins a
    /// sandbox from it: the sandboxes' own (`SandboxSpec::limits.nofile`). `RLIMIT_CORE` is 0.
    pub nofile: u64,
    /// The user namespace the zygote lives in, its sandboxes' parent ([`joinable_userns`]):
    /// where the helper opens it (`/proc/<pid>/fd/<n>` of the caller's descriptor). It enters it
    /// after building its root and before giving up its privileges. `None`: the host's; the
    /// zygote can then join no sandbox (owning a user namespace is worth nothing from outside
    /// its parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<PathBuf>,
}

/// The most id ranges [`joinable_userns`] maps besides the zygote's ids (the kernel takes 340
/// lines in all).
pub const MAX_JOINABLE_RANGES: usize = 256;

/// The user namespace a host zygote lives in and its sandboxes are made in
/// (`SandboxSpec::userns_parent`), as a descriptor: made and so owned by the host's root, which
/// thereby keeps every capability over those sandboxes (CRIU needs them: root here may lack some,
/// such as `CAP_SYS_RESOURCE`), and mapping each of `uid`, `gid` and the host id ranges
/// `(start, count)` of `sandboxes` to itself, nothing else — not 0. Its processes (the zygote)
/// hold no capability outside it. Safe from a multi-threaded process; needs host root.
pub fn joinable_userns(
    uid: u32,
    gid: u32,
    sandboxes: &[(u32, u32)],
) -> Result<OwnedFd, crate::sandbox::JailError> {
    let invalid = |reason: String| {
        crate::sandbox::JailError::InvalidSpec(crate::sandbox::InvalidSpec {
            field: "sandboxes".into(),
            reason,
        })
    };
    if sandboxes.is_empty() || sandboxes.len() > MAX_JOINABLE_RANGES {
        return Err(invalid(format!("1 to {MAX_JOINABLE_RANGES} id ranges")));
    }
    let mut ranges: Vec<(u64, u64)> = sandboxes
        .iter()
        .map(|&(start, count)| (start as u64, start as u64 + count as u64))
        .collect();
    ranges.sort();
    let overlapping = ranges.windows(2).any(|w| w[0].1 > w[1].0);
    let holds = |id: u32| ranges.iter().any(|&(a, b)| (a..b).contains(&(id as u64)));
    if overlapping
        || ranges
            .iter()
            .any(|&(a, b)| a == b || a == 0 || b > u32::MAX as u64)
        || [uid, gid]
            .iter()
            .any(|&id| id == 0 || id == u32::MAX || holds(id))
    {
        return Err(invalid(
            "non-empty, disjoint ranges without 0, -1, the uid or the gid".into(),
        ));
    }
    let lines: String = ranges
        .iter()
        .map(|&(a, b)| format!("{a} {a} {}\n", b - a))
        .collect();
    crate::sandbox::userns_with_maps(
        &format!("{uid} {uid} 1\n{lines}"),
        &format!("{gid} {gid} 1\n{lines}"),
        "a host zygote",
    )
}

/// Errors of starting a host zygote.
#[derive(Debug, thiserror::Error)]
pub enum HostZygoteError {
    #[error("invalid host zygote spec: {0}")]
    InvalidSpec(String),
    #[error("{step} ({detail})")]
    Step {
        step: String,
        detail: String,
        #[source]
        source: io::Error,
    },
    #[error("running {program}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("moving the host zygote into its cgroup")]
    Cgroup(#[source] CgroupError),
    #[error("the host zygote's helper: {message}")]
    Helper { message: String },
    #[error("seccomp")]
    Seccomp(#[from] crate::seccomp::SeccompError),
}

impl From<SetupError> for HostZygoteError {
    fn from(e: SetupError) -> Self {
        HostZygoteError::Step {
            step: e.step,
            detail: e.detail,
            source: e.source,
        }
    }
}

impl HostZygoteSpec {
    /// Refuse what the jail cannot keep: root ids (the zygote would keep a host root's files), no
    /// layer, relative paths.
    pub fn validate(&self) -> Result<(), HostZygoteError> {
        let bad = |m: &str| Err(HostZygoteError::InvalidSpec(m.to_string()));
        if self.uid == 0 || self.gid == 0 || self.uid == u32::MAX || self.gid == u32::MAX {
            return bad("uid and gid must be a host id of the zygote's own, not 0 or -1");
        }
        if self.layers.is_empty() {
            return bad("no template layer");
        }
        let absolute = self
            .layers
            .iter()
            .chain([&self.mountpoint, &self.log_path, &self.program, &self.cwd])
            .chain(&self.userns);
        if absolute.clone().any(|p| !p.is_absolute()) {
            return bad("paths must be absolute");
        }
        if self.tmp_bytes == 0 {
            return bad("tmp_bytes must be > 0");
        }
        if self.nofile < 16 || self.nofile > 1 << 20 {
            return bad("nofile must be 16 to 1048576");
        }
        Ok(())
    }
}

/// Run the helper `helper` (`lizard-jail-init zygote` or the product's counterpart) as a host
/// zygote: `control` becomes its fd [`CONTROL_FD`], it joins `cgroup` before it reads `spec`, and
/// this returns once it has executed the program. Blocking; safe from a multi-threaded process.
pub fn spawn(
    mut helper: Command,
    spec: &HostZygoteSpec,
    control: Option<OwnedFd>,
    cgroup: Option<&Cgroup>,
) -> Result<Child, HostZygoteError> {
    spec.validate()?;
    let program = helper.get_program().to_string_lossy().into_owned();
    let input =
        serde_json::to_vec(spec).map_err(|e| HostZygoteError::InvalidSpec(e.to_string()))?;
    helper
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(fd) = control {
        crate::process::map_fds(&mut helper, vec![(fd, CONTROL_FD)]);
    }
    let mut child = helper.spawn().map_err(|source| HostZygoteError::Spawn {
        program: program.clone(),
        source,
    })?;
    let fail = |child: &mut Child, e: HostZygoteError| {
        let _ = child.kill();
        let _ = child.wait();
        Err(e)
    };
    if let Some(cg) = cgroup {
        if let Err(e) = cg.add_pid(child.id() as i32) {
            return fail(&mut child, HostZygoteError::Cgroup(e));
        }
    }
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that died early closed the pipe; its report below says why.
        let _ = stdin.write_all(&input);
    }
    // The helper's report: nothing when the program was executed (the pipe is close-on-exec),
    // else one line. Bounded in size and time: the helper is ours, but nothing may hang a caller.
    let report = match child.stdout.take() {
        Some(out) => read_report(out, REPORT_DEADLINE),
        None => Ok(Vec::new()),
    };
    match report {
        Ok(r) if r.is_empty() => Ok(child),
        Ok(r) => {
            let message = String::from_utf8_lossy(&r).trim().to_string();
            fail(&mut child, HostZygoteError::Helper { message })
        }
        Err(e) => fail(&mut child, e),
    }
}

/// How long the helper may take to set the jail up and execute the program.
const REPORT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Read `out` to EOF, at most 64 KiB, within `deadline`.
fn read_report(
    out: std::process::ChildStdout,
    deadline: std::time::Duration,
) -> Result<Vec<u8>, HostZygoteError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = std::time::Instant::now() + deadline;
    let mut out = std::fs::File::from(OwnedFd::from(out));
    let mut report = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, ms).step("waiting for the helper's report", "poll")?;
        if ready == 0 {
            return Err(HostZygoteError::Helper {
                message: format!("no report within {} s", deadline.as_secs()),
            });
        }
        let n = out
            .read(&mut chunk)
            .step("reading the helper's report", "read")?;
        if n == 0 || report.len() >= 64 * 1024 {
            return Ok(report);
        }
        report.extend_from_slice(&chunk[..n]);
    }
}

/// `main` of the helper: read a [`HostZygoteSpec`] on stdin, enter the jail and execute the
/// program; on failure print the error on stdout and exit 1. Call it before any thread starts.
pub fn init_main() -> ! {
    // The report goes to the spawner's pipe through a close-on-exec copy of stdout (stdout itself
    // becomes the log): the spawner reads EOF and nothing else once the program runs.
    let report = nix::fcntl::fcntl(io::stdout(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10));
    let error = match report {
        Ok(_) => match enter_and_exec() {
            Ok(never) => match never {},
            Err(e) => crate::error_chain(&e),
        },
        Err(e) => format!("keeping the report pipe: {e}"),
    };
    let line = format!("{error}\n");
    let _ = match report {
        Ok(fd) => {
            // SAFETY: F_DUPFD_CLOEXEC returned this new fd, which nothing else owns or closed.
            let report = unsafe { OwnedFd::from_raw_fd(fd) };
            std::fs::File::from(report).write_all(line.as_bytes())
        }
        Err(_) => io::stdout().write_all(line.as_bytes()),
    };
    std::process::exit(1)
}

fn enter_and_exec() -> Result<Infallible, HostZygoteError> {
    if crate::sandbox::thread_count().unwrap_or(0) != 1 {
        return Err(HostZygoteError::InvalidSpec(
            "the helper must be single-threaded".into(),
        ));
    }
    let mut input = Vec::new();
    io::stdin()
        .take(1 << 20)
        .read_to_end(&mut input)
        .step("reading the spec", "stdin")?;
    let spec: HostZygoteSpec =
        serde_json::from_slice(&input).map_err(|e| HostZygoteError::InvalidSpec(e.to_string()))?;
    spec.validate()?;
    let filter = Filter::host_zygote()?;
    let log = nix::fcntl::open(
        &spec.log_path,
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .step("opening the log", spec.log_path.display())?;
    let linux = sys::Linux;
    enter(&linux, &spec)?;
    // The sandboxes' limits, not the spawner's: the forks that join sandboxes keep them (root may
    // lower a hard limit; nothing after the drop can raise it again).
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_NOFILE, spec.nofile, spec.nofile)
        .step("setrlimit", "RLIMIT_NOFILE")?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).step("setrlimit", "RLIMIT_CORE")?;
    let null = nix::fcntl::open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
        .step("opening", "/dev/null")?;
    sys::dup2_raw(null.as_raw_fd(), 0).step("dup2", "stdin")?;
    sys::dup2_raw(log.as_raw_fd(), 1).step("dup2", "stdout")?;
    sys::dup2_raw(log.as_raw_fd(), 2).step("dup2", "stderr")?;
    sys::cloexec_from(CONTROL_FD as u32 + 1).step("close_range", "fds above the control socket")?;
    if let Some(path) = &spec.userns {
        enter_userns(path)?;
    }
    linux.setgroups_empty().step("setgroups", "[]")?;
    crate::sandbox::drop_privileges(&linux, spec.uid, spec.gid, 0)?;
    filter.install()?;
    nix::unistd::chdir(&spec.cwd).step("chdir", spec.cwd.display())?;
    let program = cstring(spec.program.as_os_str().as_bytes())?;
    let mut args = vec![program.clone()];
    for a in &spec.args {
        args.push(cstring(a.as_bytes())?);
    }
    let env = spec
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let err = nix::unistd::execve(&program, &args, &env).unwrap_err();
    Err(SetupError::new("execve", &spec.program.display(), err.into()).into())
}

/// Enter the user namespace at `path`, which root must own (it is checked): from here on the
/// process holds capabilities there alone, which the credential drop that follows takes away.
fn enter_userns(path: &Path) -> Result<(), HostZygoteError> {
    let ns = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .step("opening the user namespace", path.display())?;
    match sys::user_namespace_owner(ns.as_fd())
        .step("checking the user namespace", path.display())?
    {
        Some(0) => {}
        _ => {
            return Err(HostZygoteError::InvalidSpec(format!(
                "{} is not a user namespace that root owns",
                path.display()
            )))
        }
    }
    nix::sched::setns(&ns, CloneFlags::CLONE_NEWUSER)
        .step("entering the user namespace", path.display())?;
    Ok(())
}

fn cstring(b: &[u8]) -> Result<CString, HostZygoteError> {
    CString::new(b).map_err(|_| HostZygoteError::InvalidSpec("a NUL byte in a string".into()))
}

/// Our own mount, network, IPC and UTS namespaces, the root built in the first ([`build_root`]),
/// the host name in the last.
fn enter(sys: &impl Syscall, spec: &HostZygoteSpec) -> Result<(), HostZygoteError> {
    let namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    sys.unshare(namespaces)
        .step("unshare", "mount, network, IPC and UTS namespaces")?;
    build_root(sys, spec)?;
    sys.sethostname(&spec.hostname)
        .step("sethostname", &spec.hostname)?;
    Ok(())
}

/// Mount the root at `spec.mountpoint` in our own mount namespace, fill it, and pivot into it.
/// Mount points inside the template are opened without following a symlink (`RESOLVE_IN_ROOT |
/// RESOLVE_NO_SYMLINKS`), so a template's links cannot send a mount elsewhere.
fn build_root(sys: &impl Syscall, spec: &HostZygoteSpec) -> Result<(), HostZygoteError> {
    make_private(sys, "making mounts private")?;
    let target = &spec.mountpoint;
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if let [layer] = spec.layers.as_slice() {
        sys.mount(Some(layer), target, None, MsFlags::MS_BIND, None)
            .step("binding the template", layer.display())?;
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | ro;
        sys.mount(None, target, None, flags, None)
            .step("making the template read-only", layer.display())?;
    } else {
        // Without an upper layer an overlay is read-only. The options cannot escape `:` or `,`;
        // template layer paths are the server's own.
        let lower: Vec<String> = spec
            .layers
            .iter()
            .map(|l| l.display().to_string())
            .collect();
        if lower.iter().any(|l| l.contains([':', ',', '\\'])) {
            return Err(HostZygoteError::InvalidSpec(
                "a layer path with ':', ',' or '\\'".into(),
            ));
        }
        let options = format!("lowerdir={}", lower.join(":"));
        let source = Some(Path::new("overlay"));
        sys.mount(source, target, Some("overlay"), ro, Some(options.as_str()))
            .step("mounting the template's layers", &options)?;
    }
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    let root = sys
        .open(target, flags)
        .step("opening the new root", target.display())?;
    let inside = |rel: &str| -> Result<OwnedFd, HostZygoteError> {
        let no_links = ResolveFlag::RESOLVE_NO_SYMLINKS;
        Ok(
            open_in_root_with(sys, root.as_fd(), Path::new(rel), no_links)
                .step("opening a mount point", format!("/{rel}"))?,
        )
    };
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let proc = "hidepid=invisible,subset=pid";
    mount_fs(sys, "proc", inside("proc")?.as_fd(), no_exec, Some(proc))
        .step("mounting /proc", proc)?;
    let tmp = format!(
        "size={},mode=0700,uid={},gid={}",
        spec.tmp_bytes, spec.uid, spec.gid
    );
    let no_dev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_fs(sys, "tmpfs", inside("tmp")?.as_fd(), no_dev, Some(&tmp))
        .step("mounting /tmp", &tmp)?;
    let dev_options = "size=65536,nr_inodes=16,mode=0755";
    mount_fs(
        sys,
        "tmpfs",
        inside("dev")?.as_fd(),
        no_exec,
        Some(dev_options),
    )
    .step("mounting /dev", dev_options)?;
    // Our fresh tmpfs (opened anew: the path walk now crosses the mount): nothing in it but
    // what we make.
    let dev = inside("dev")?;
    for name in DEVICES {
        let host = format!("/dev/{name}");
        let create = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY;
        drop(
            sys.openat(dev.as_fd(), Path::new(name), create, 0o666)
                .step("creating", &host)?,
        );
        let node = sys
            .openat(dev.as_fd(), Path::new(name), OFlag::O_PATH, 0)
            .step("opening", &host)?;
        bind_mount(sys, Path::new(&host), node.as_fd(), &host)?;
    }
    let remount = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | no_exec;
    let at = Path::new(&fd_path(dev.as_fd())).to_path_buf();
    sys.mount(None, &at, None, remount, Some(dev_options))
        .step("making /dev read-only", "")?;
    Ok(pivot_into(
        sys,
        root.as_fd(),
        &target.display().to_string(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> HostZygoteSpec {
        HostZygoteSpec {
            layers: vec!["/t/layer".into()],
            mountpoint: "/t/root".into(),
            uid: 190_000,
            gid: 190_000,
            hostname: "zygote".into(),
            tmp_bytes: 1 << 20,
            log_path: "/t/log".into(),
            program: "/usr/bin/python3".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: "/".into(),
            userns: Some("/proc/1/fd/3".into()),
            nofile: 4096,
        }
    }

    /// The zygote's user namespace maps its ids and whole, disjoint sandbox ranges, never 0 or
    /// -1: anything else is refused before a namespace is made.
    #[test]
    fn a_joinable_namespace_maps_no_root_and_no_overlap() {
        let z = 90_000;
        for (what, uid, ranges) in [
            ("no range", z, vec![]),
            ("uid 0", 0, vec![(100_000, 65_536)]),
            ("an empty range", z, vec![(100_000, 0)]),
            ("a range with 0", z, vec![(0, 10)]),
            ("the uid in a range", z, vec![(89_000, 2_000)]),
            ("overlap", z, vec![(100_000, 65_536), (165_535, 10)]),
            ("past u32", z, vec![(u32::MAX - 5, 10)]),
            (
                "too many",
                z,
                (1..=300).map(|i| (i * 100_000, 10)).collect(),
            ),
        ] {
            let r = joinable_userns(uid, z, &ranges);
            assert!(
                matches!(r, Err(crate::sandbox::JailError::InvalidSpec(_))),
                "{what}: {r:?}"
            );
        }
    }

    #[test]
    fn specs_that_would_leave_the_zygote_root_or_unbounded_are_refused() {
        assert!(spec().validate().is_ok());
        type Change = fn(&mut HostZygoteSpec);
        let cases: [(&str, Change); 9] = [
            ("uid 0", |s| s.uid = 0),
            ("gid 0", |s| s.gid = 0),
            ("uid -1", |s| s.uid = u32::MAX),
            ("no layer", |s| s.layers.clear()),
            ("relative program", |s| s.program = "python3".into()),
            ("no /tmp size", |s| s.tmp_bytes = 0),
            ("relative user namespace", |s| {
                s.userns = Some("fd/3".into())
            }),
            ("no file descriptors", |s| s.nofile = 0),
            ("unbounded file descriptors", |s| s.nofile = u64::MAX),
        ];
        for (what, change) in cases {
            let mut s = spec();
            change(&mut s);
            assert!(
                matches!(s.validate(), Err(HostZygoteError::InvalidSpec(_))),
                "{what}"
            );
        }
    }

    use crate::sys::recorder::Recorder;

    fn calls_of(spec: &HostZygoteSpec) -> (Recorder, Result<(), HostZygoteError>) {
        let r = Recorder::default();
        let out = enter(&r, spec);
        (r, out)
    }

    /// The zygote's own mount, network, IPC and UTS namespaces — not user or pid, whose
    /// sandboxes' its forks must join — a read-only template root, its mount points opened
    /// without following a link, `/proc` showing no other user's process, `/dev` read-only after
    /// its nodes, and the pivot before the host name.
    #[test]
    fn the_zygote_enters_a_read_only_root_of_its_own() {
        let (r, out) = calls_of(&spec());
        out.unwrap();
        let calls = r.calls();
        assert_eq!(
            calls[..2],
            [
                "unshare CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET",
                "mount - / - MS_REC | MS_PRIVATE -",
            ]
        );
        let template = spec().layers[0].display().to_string();
        let root = spec().mountpoint.display().to_string();
        assert_eq!(
            calls[2..4],
            [
                format!("mount {template} {root} - MS_BIND -"),
                format!(
                    "mount - {root} - MS_RDONLY | MS_NOSUID | MS_NODEV | MS_REMOUNT | MS_BIND -"
                ),
            ]
        );
        for c in r.matching("openat2") {
            assert!(
                c.contains("RESOLVE_IN_ROOT") && c.contains("RESOLVE_NO_SYMLINKS"),
                "{c}"
            );
        }
        let proc = format!(
            "mount proc {{{root}/proc}} proc MS_NOSUID | MS_NODEV | MS_NOEXEC hidepid=invisible,subset=pid"
        );
        assert!(calls.contains(&proc), "{calls:#?}");
        let dev_ro = r
            .position(&format!("mount - {{{root}/dev}} - MS_RDONLY"))
            .unwrap();
        let last_node = calls
            .iter()
            .rposition(|c| c.starts_with("mount /dev/"))
            .unwrap();
        assert!(last_node < dev_ro);
        let n = calls.len();
        assert_eq!(
            calls[n - 5..],
            [
                format!("fchdir {root}"),
                "pivot_root .".into(),
                "umount_detach .".into(),
                "chdir /".into(),
                format!("sethostname {}", spec().hostname),
            ]
        );
    }

    /// Several layers: one read-only overlay; a layer path that would split its options is
    /// refused before anything is mounted.
    #[test]
    fn layers_are_one_read_only_overlay() {
        let mut s = spec();
        s.layers = vec!["/t/top".into(), "/t/base".into()];
        let (r, out) = calls_of(&s);
        out.unwrap();
        let overlay = r.matching("mount overlay");
        assert_eq!(
            overlay,
            [format!(
                "mount overlay {} overlay MS_RDONLY | MS_NOSUID | MS_NODEV lowerdir=/t/top:/t/base",
                s.mountpoint.display()
            )]
        );
        s.layers = vec!["/t/a,upperdir=/x".into(), "/t/base".into()];
        let (r, out) = calls_of(&s);
        assert!(matches!(out, Err(HostZygoteError::InvalidSpec(_))));
        assert!(r.matching("mount overlay").is_empty());
    }
}
