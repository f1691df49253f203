//! The sandbox's mount table, built in two halves. [`build_host`]: the launcher, as host root in a
//! staging mount namespace of its own (made just before the clone), mounts the overlay root and the
//! bind mounts (volumes, the agent's binds, the delegated cgroups, idmapped copies); the clone with
//! `CLONE_NEWUSER | CLONE_NEWNS` copies that table into the sandbox's mount namespace, owned by the
//! sandbox's user namespace, where the kernel **locks** every copied mount (it cannot be unmounted
//! to reveal what is under it, nor made writable, suid or exec again from inside). [`build_inside`]:
//! the child, root of its new user namespace (which owns the mount and pid namespaces), mounts a
//! fresh `/proc` with sensitive files masked, a minimal `/dev` (tmpfs + binds of the host's
//! `null`, `zero`, … device nodes + devpts + `/dev/shm`), a tmpfs `/tmp`, then `pivot_root`s into it
//! and detaches the old root. There is no `/sys` (it would show the host's devices and cgroups); with
//! `context_cgroups` the launcher adds binds of the sandbox's own delegated cgroup directories at
//! `/sys/fs/cgroup/<controller>` (see `crate::delegation`).
//!
//! Every path inside the new root is resolved with `openat2(RESOLVE_IN_ROOT)` and mounted on through
//! `/proc/self/fd/N`: the writable layer is the sandbox's own (and outlives it across pause/resume),
//! so a symlink planted there (say `/run/lizard -> /etc` or `/proc -> /host/path`) must not make the
//! launcher, still host root, mount onto or create files at a host path.
//!
//! With an id map (`Plan::idmap_userns`, see `sandbox::idmap`) the lower layer and `idmapped`
//! binds (volumes) are detached copies of their mounts (`open_tree`) with `MOUNT_ATTR_IDMAP` set,
//! the layer given to overlayfs as `/proc/self/fd/N` like the others, a bind attached with
//! `move_mount` onto its `openat2`-resolved target.
//!
//! Not here: namespaces, credentials, the network (see `sandbox::child`); the host-side directories,
//! which the caller creates.

use super::step::{SetupError, Step};
use crate::sys::Syscall;
use nix::fcntl::{OFlag, ResolveFlag};
use nix::mount::MsFlags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// The mount table to build, computed by the parent before the clone.
#[derive(Debug)]
pub(crate) struct Plan {
    pub mountpoint: PathBuf,
    /// Host paths of the overlay's lower layers (top first), upper and work directories.
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub binds: Vec<BindPlan>,
    /// The user namespace whose id map the lower layer and `idmapped` binds are shown through
    /// (`sandbox::idmap`); `None`: they are mounted as they are on disk.
    pub idmap_userns: Option<OwnedFd>,
    /// Host ids of the sandbox's root user and group (owner of what the launcher creates).
    pub root_owner: Option<(u32, u32)>,
    pub dev_options: String,
    pub devpts_options: String,
    pub shm_options: String,
    pub tmp_options: String,
    /// Files of `/proc` replaced by the given contents (path relative to `/proc`): see
    /// [`mount_proc`].
    pub proc_files: Vec<(&'static str, Vec<u8>)>,
}

#[derive(Debug)]
pub(crate) struct BindPlan {
    pub source: PathBuf,
    /// Relative to the new root (no leading `/`, no `..`).
    pub target: PathBuf,
    pub readonly: bool,
    pub source_is_dir: bool,
    /// Resolve the target with `RESOLVE_NO_SYMLINKS` (fail rather than follow any symlink).
    pub no_symlinks: bool,
    /// Mount through `Plan::idmap_userns` (only set when there is one).
    pub idmapped: bool,
}

/// Files of `/proc` that show host-wide information or kernel internals: /dev/null is bound over
/// them (as Docker does).
pub(crate) const PROC_NULLED: &[&str] = &[
    "kcore",
    "keys",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "timer_stats",
    "kallsyms",
];
/// Directories and files of `/proc` that are made read-only (kernel tunables, magic SysRq).
const PROC_READONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// Directories of `/proc` hidden under an empty read-only tmpfs (host hardware).
const PROC_EMPTIED: &[&str] = &["acpi", "scsi", "asound"];

/// The device nodes of `/dev`: binds of the host's (all mode 0666). A tmpfs mounted in a user
/// namespace other than the host's cannot hold working device nodes, so they are not `mknod`ed.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// The source of a mount that has none but its file system's name (`tmpfs`, `proc`, ...).
fn named(fstype: &str) -> Option<&Path> {
    Some(Path::new(fstype))
}

pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// `fd_path` as a [`PathBuf`], for `Syscall::mount`'s target.
fn at(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(fd_path(fd))
}

/// Open `rel` (relative to the new root) as an `O_PATH` fd, resolving symlinks as if the new root
/// were `/`.
fn open_in_root(sys: &impl Syscall, root: BorrowedFd<'_>, rel: &Path) -> std::io::Result<OwnedFd> {
    open_in_root_with(sys, root, rel, ResolveFlag::empty())
}

/// [`open_in_root`] with extra resolve flags (e.g. `RESOLVE_NO_SYMLINKS`).
pub(crate) fn open_in_root_with(
    sys: &impl Syscall,
    root: BorrowedFd<'_>,
    rel: &Path,
    extra: ResolveFlag,
) -> std::io::Result<OwnedFd> {
    let resolve = ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS | extra;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    sys.openat2(root, rel, OFlag::O_PATH, resolve)
}

/// Open `rel` inside the root, creating missing directories (and, when `file`, a final empty file)
/// owned by `owner`. Creation happens one component at a time in directories opened with
/// `RESOLVE_IN_ROOT`, so nothing is ever created outside the root.
fn ensure(
    sys: &impl Syscall,
    root: BorrowedFd<'_>,
    rel: &Path,
    file: bool,
    owner: Option<(u32, u32)>,
) -> Result<OwnedFd, SetupError> {
    ensure_with(sys, root, rel, file, owner, ResolveFlag::empty())
}

fn is_enoent(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOENT)
}

/// [`ensure`] with extra resolve flags for every lookup.
fn ensure_with(
    sys: &impl Syscall,
    root: BorrowedFd<'_>,
    rel: &Path,
    file: bool,
    owner: Option<(u32, u32)>,
    extra: ResolveFlag,
) -> Result<OwnedFd, SetupError> {
    let open_in_root = |rel: &Path| open_in_root_with(sys, root, rel, extra);
    match open_in_root(rel) {
        Ok(fd) => return Ok(fd),
        Err(e) if is_enoent(&e) => {}
        Err(e) => return Err(e).step("open mount target", rel.display()),
    }
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let mut prefix = PathBuf::new();
    for (i, name) in names.iter().enumerate() {
        let parent = open_in_root(&prefix).step("open mount target", prefix.display())?;
        prefix.push(name);
        match open_in_root(&prefix) {
            Ok(_) => continue,
            Err(e) if is_enoent(&e) => {}
            Err(e) => return Err(e).step("open mount target", prefix.display()),
        }
        let name = Path::new(name);
        if i + 1 == names.len() && file {
            let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
            sys.openat(parent.as_fd(), name, flags, 0o644)
                .step("create mount target", prefix.display())?;
        } else {
            sys.mkdirat(parent.as_fd(), name, 0o755)
                .step("create mount target", prefix.display())?;
        }
        if let Some((uid, gid)) = owner {
            sys.fchownat(parent.as_fd(), name, uid, gid)
                .step("chown", name.display())?;
        }
    }
    open_in_root(rel).step("open mount target", rel.display())
}

/// Bind-mount `source` (a host path, or an fd path) recursively onto `target`.
pub(crate) fn bind_mount(
    sys: &impl Syscall,
    source: &Path,
    target: BorrowedFd<'_>,
    what: &str,
) -> Result<(), SetupError> {
    let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
    sys.mount(Some(source), &at(target), None, flags, None)
        .step("bind mount", what)
}

/// Change the flags (`MS_RDONLY`, `MS_NOSUID`, ...) of the bind mount whose root `top` is. `top`
/// must be opened after the bind: an fd opened before still points at the directory underneath.
fn remount(
    sys: &impl Syscall,
    top: BorrowedFd<'_>,
    flags: MsFlags,
    what: &str,
) -> Result<(), SetupError> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags;
    sys.mount(None, &at(top), None, flags, None)
        .step("remount", what)
}

/// Mount a new file system of type `fstype` (its source named the same) on `target`.
pub(crate) fn mount_fs(
    sys: &impl Syscall,
    fstype: &str,
    target: BorrowedFd<'_>,
    flags: MsFlags,
    options: Option<&str>,
) -> std::io::Result<()> {
    sys.mount(named(fstype), &at(target), Some(fstype), flags, options)
}

/// A detached copy of the mount at the host path `source` (not recursive), shown through the id
/// map of `userns`, with the extra `MOUNT_ATTR_*` flags `attrs`.
pub(crate) fn idmapped_tree(
    sys: &impl Syscall,
    source: &Path,
    attrs: u64,
    userns: BorrowedFd<'_>,
) -> Result<OwnedFd, SetupError> {
    let path = std::ffi::CString::new(source.as_os_str().as_encoded_bytes()).map_err(|_| {
        SetupError::new(
            "open_tree",
            &source.display(),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        )
    })?;
    let tree = sys
        .open_tree_clone(None, &path)
        .step("open_tree", source.display())?;
    sys.mount_setattr(tree.as_fd(), libc::MOUNT_ATTR_IDMAP | attrs, Some(userns))
        .step("idmap mount", source.display())?;
    Ok(tree)
}

/// An `O_PATH` descriptor of a host directory (an overlay layer or the mount point: paths the
/// caller made).
fn open_host_dir(sys: &impl Syscall, dir: &Path, step: &str) -> Result<OwnedFd, SetupError> {
    sys.open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY)
        .step(step, dir.display())
}

/// The host-root half: in the launcher's staging mount namespace (a private copy of the host's),
/// mount the overlay at `plan.mountpoint` and the bind mounts into it.
pub(crate) fn build_host(sys: &impl Syscall, plan: &Plan) -> Result<(), SetupError> {
    mount_root(sys, plan)?;
    bind_all(sys, plan)
}

/// Make every mount of our mount namespace private: nothing mounted from here on propagates to
/// the namespace it was copied from (copies of shared mounts come in as slaves).
pub(crate) fn make_private(sys: &impl Syscall, step: &str) -> Result<(), SetupError> {
    let flags = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    sys.mount(None, Path::new("/"), None, flags, None)
        .step(step, "/")
}

/// Only the overlay root of [`build_host`] (for a checkpoint restore: CRIU makes the binds).
pub(crate) fn mount_root(sys: &impl Syscall, plan: &Plan) -> Result<(), SetupError> {
    // Nothing we mount may propagate back to the host's mount namespace.
    make_private(sys, "make / private")?;
    // The layers are given to overlayfs as /proc/self/fd/N of O_PATH fds: overlayfs resolves them
    // at mount time and shows only these strings in /proc/self/mountinfo, so the sandbox does not
    // learn the host paths of the template or of its own layer. (They must be opened here, in the
    // new mount namespace: overlayfs refuses layers on mounts of another namespace.)
    let detail = format!(
        "lower {}, upper {}, work {}",
        plan.lower
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
        plan.upper.display(),
        plan.work.display()
    );
    let mut lower_fds = Vec::new();
    for layer in &plan.lower {
        let fd = match &plan.idmap_userns {
            // Every lower layer through the same id map: a detached idmapped copy of its mount,
            // which overlayfs takes as a layer like any other path.
            Some(userns) => idmapped_tree(sys, layer, 0, userns.as_fd())?,
            None => open_host_dir(sys, layer, "open overlay layer")?,
        };
        lower_fds.push(fd);
    }
    let upper = open_host_dir(sys, &plan.upper, "open overlay layer")?;
    let work = open_host_dir(sys, &plan.work, "open overlay layer")?;
    // `/proc/self/fd/N` holds no ':' (the separator of lower layers), ',' or '\\'.
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower_fds
            .iter()
            .map(|fd| fd_path(fd.as_fd()))
            .collect::<Vec<_>>()
            .join(":"),
        fd_path(upper.as_fd()),
        fd_path(work.as_fd())
    );
    sys.mount(
        named("overlay"),
        &plan.mountpoint,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .step("mount overlay", &detail)?;
    drop((lower_fds, upper, work));
    Ok(())
}

/// The bind mounts of [`build_host`], into the overlay at `plan.mountpoint`.
fn bind_all(sys: &impl Syscall, plan: &Plan) -> Result<(), SetupError> {
    let root = open_host_dir(sys, &plan.mountpoint, "open new root")?;
    let root = root.as_fd();

    for b in &plan.binds {
        let what = format!("{} on /{}", b.source.display(), b.target.display());
        // Volume targets follow no symlink at all: a mount point is a plain directory path.
        let extra = if b.no_symlinks {
            ResolveFlag::RESOLVE_NO_SYMLINKS
        } else {
            ResolveFlag::empty()
        };
        let target = ensure_with(
            sys,
            root,
            &b.target,
            !b.source_is_dir,
            plan.root_owner,
            extra,
        )?;
        if let (true, Some(userns)) = (b.idmapped, &plan.idmap_userns) {
            // A detached idmapped copy, its flags set before it is attached: no remount needed.
            let mut attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
            if b.readonly {
                attrs |= libc::MOUNT_ATTR_RDONLY;
            }
            let tree = idmapped_tree(sys, &b.source, attrs, userns.as_fd())?;
            sys.move_mount_onto(tree.as_fd(), target.as_fd())
                .step("attach idmapped mount", &what)?;
            continue;
        }
        bind_mount(sys, &b.source, target.as_fd(), &what)?;
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if b.readonly {
            flags |= MsFlags::MS_RDONLY;
        }
        let top = open_in_root_with(sys, root, &b.target, extra)
            .step("open mount target", b.target.display())?;
        remount(sys, top.as_fd(), flags, &what)?;
    }
    Ok(())
}

/// The child's half, as root of the sandbox's user namespace in its own mount namespace (a copy of
/// the staging one, every mount of it locked): `/proc`, `/dev`, `/tmp`, then `pivot_root`. What is
/// created here is owned by the sandbox's root without any `chown` (the creator's ids).
pub(crate) fn build_inside(sys: &impl Syscall, plan: &Plan) -> Result<(), SetupError> {
    // Copies of shared mounts came in as slaves; make them private too.
    make_private(sys, "make / private")?;
    // Our current directory is the overlay root (the parent's, translated by the clone into our
    // copy of it): the host directories above it are root's, which we may not traverse.
    // `pivot_root` refuses a new root that is itself locked (it would reveal what it covers, the
    // host's directory): pivot into a recursive copy of it made here and attached onto it (the
    // binds in it come along, still locked to it); its fd is the new root from here on.
    let tree = sys
        .open_tree_clone_cwd_recursive()
        .step("open_tree", "the root")?;
    let cwd = open_host_dir(sys, Path::new("."), "open new root")?;
    sys.move_mount_onto(tree.as_fd(), cwd.as_fd())
        .step("attach the root", "")?;
    drop(cwd);
    let root = tree.as_fd();
    mount_proc(sys, root, plan)?;
    mount_dev(sys, root, plan)?;

    let tmp = ensure(sys, root, Path::new("tmp"), false, None)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_fs(sys, "tmpfs", tmp.as_fd(), flags, Some(&plan.tmp_options))
        .step("mount /tmp", &plan.tmp_options)?;
    pivot_into(sys, root, &plan.mountpoint.display().to_string())
}

/// `root` becomes `/`: pivot_root(".", ".") stacks the old root on top of the new one at "/";
/// detaching it leaves only the new root. (No directory for the old root is needed in it.)
pub(crate) fn pivot_into(
    sys: &impl Syscall,
    root: BorrowedFd<'_>,
    what: &str,
) -> Result<(), SetupError> {
    sys.fchdir(root).step("enter new root", what)?;
    sys.pivot_root_here().step("pivot_root", what)?;
    sys.umount_detach(Path::new("."))
        .step("detach old root", "/")?;
    sys.chdir(Path::new("/")).step("chdir", "/")
}

fn mount_proc(sys: &impl Syscall, root: BorrowedFd<'_>, plan: &Plan) -> Result<(), SetupError> {
    let target = ensure(sys, root, Path::new("proc"), false, None)?;
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs(sys, "proc", target.as_fd(), no_exec, None).step("mount /proc", "proc")?;
    // The fresh proc is kernel-made: no planted symlinks below this point.
    let proc_dir = open_in_root(sys, root, Path::new("proc")).step("open /proc", "proc")?;
    let open_entry = |name: &str| -> Result<Option<OwnedFd>, SetupError> {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW;
        match sys.openat(proc_dir.as_fd(), Path::new(name), flags, 0) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if is_enoent(&e) => Ok(None),
            Err(e) => Err(e).step("open /proc entry", name),
        }
    };
    for name in PROC_NULLED {
        if let Some(fd) = open_entry(name)? {
            let what = format!("/dev/null on /proc/{name}");
            bind_mount(sys, Path::new("/dev/null"), fd.as_fd(), &what)?;
        }
    }
    for name in PROC_READONLY {
        if let Some(fd) = open_entry(name)? {
            let what = format!("read-only /proc/{name}");
            bind_mount(sys, &at(fd.as_fd()), fd.as_fd(), &what)?;
            if let Some(top) = open_entry(name)? {
                remount(sys, top.as_fd(), MsFlags::MS_RDONLY | no_exec, &what)?;
            }
        }
    }
    // Files that tell one sandbox about the others or the host (the loop devices and I/O of every
    // sandbox, the host's load, PTY and open-file counts, its boot id) get contents of the
    // sandbox's own: read-only binds of files in a small tmpfs that is mounted nowhere (made with
    // fsopen/fsmount, filled, made read-only, then each file cloned with open_tree and attached),
    // so they come from no host path and not from the sandbox's writable layer. After the
    // read-only binds above: binding `sys` onto itself would otherwise cover these.
    if !plan.proc_files.is_empty() {
        let attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;
        let fs = sys
            .detached_tmpfs(
                &[
                    (c"size", c"65536"),
                    (c"nr_inodes", c"64"),
                    (c"mode", c"0555"),
                ],
                attrs,
            )
            .step("make tmpfs", "for /proc files")?;
        for (i, (name, contents)) in plan.proc_files.iter().enumerate() {
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
            let file = sys
                .openat(fs.as_fd(), Path::new(&format!("{i}")), flags, 0o444)
                .step("create /proc file", name)?;
            sys.write_all(file.as_fd(), contents)
                .step("write /proc file", name)?;
        }
        sys.mount_setattr(fs.as_fd(), libc::MOUNT_ATTR_RDONLY, None)
            .step("read-only tmpfs", "for /proc files")?;
        for (i, (name, _)) in plan.proc_files.iter().enumerate() {
            let Some(target) = open_entry(name)? else {
                continue;
            };
            let index = std::ffi::CString::new(format!("{i}")).expect("no NUL in a number");
            let tree = sys
                .open_tree_clone(Some(fs.as_fd()), &index)
                .step("open_tree", format!("/proc/{name}"))?;
            sys.move_mount_onto(tree.as_fd(), target.as_fd())
                .step("mask /proc entry", name)?;
        }
    }
    for name in PROC_EMPTIED {
        if let Some(fd) = open_entry(name)? {
            let flags = MsFlags::MS_RDONLY | no_exec;
            mount_fs(sys, "tmpfs", fd.as_fd(), flags, Some("size=0,mode=555"))
                .step("hide /proc entry", name)?;
        }
    }
    Ok(())
}

fn mount_dev(sys: &impl Syscall, root: BorrowedFd<'_>, plan: &Plan) -> Result<(), SetupError> {
    let target = ensure(sys, root, Path::new("dev"), false, None)?;
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount_fs(
        sys,
        "tmpfs",
        target.as_fd(),
        no_exec,
        Some(&plan.dev_options),
    )
    .step("mount /dev", &plan.dev_options)?;
    // A tmpfs we just made: nothing in it yet but what we create.
    let dev = open_in_root(sys, root, Path::new("dev")).step("open /dev", "dev")?;
    let dev = dev.as_fd();
    for name in DEVICES {
        // An empty file of our fresh tmpfs, then the host's node bound onto it (the host's `/dev`
        // is still visible: we have not pivoted yet). The bind is a copy of a locked mount, so
        // its flags stay locked too.
        let node = format!("/dev/{name}");
        let create = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
        drop(
            sys.openat(dev, Path::new(name), create, 0o666)
                .step("create /dev node", &node)?,
        );
        let target = sys
            .openat(dev, Path::new(name), OFlag::O_PATH | OFlag::O_NOFOLLOW, 0)
            .step("open /dev node", &node)?;
        bind_mount(sys, Path::new(&node), target.as_fd(), &node)?;
    }
    for (name, to) in DEV_LINKS {
        sys.symlinkat(to, dev, name)
            .step("symlink", format!("/dev/{name}"))?;
    }
    for (name, mode) in [("pts", 0o755), ("shm", 0o1777)] {
        sys.mkdirat(dev, Path::new(name), mode)
            .step("mkdir", format!("/dev/{name}"))?;
    }
    let pts = open_in_root(sys, root, Path::new("dev/pts")).step("open /dev/pts", "dev/pts")?;
    mount_fs(
        sys,
        "devpts",
        pts.as_fd(),
        no_exec,
        Some(&plan.devpts_options),
    )
    .step("mount /dev/pts", &plan.devpts_options)?;
    let shm = open_in_root(sys, root, Path::new("dev/shm")).step("open /dev/shm", "dev/shm")?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs(sys, "tmpfs", shm.as_fd(), flags, Some(&plan.shm_options))
        .step("mount /dev/shm", &plan.shm_options)?;
    // Nobody inside may add device nodes or files to /dev itself.
    let top = open_in_root(sys, root, Path::new("dev")).step("open /dev", "dev")?;
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | no_exec;
    sys.mount(None, &at(top.as_fd()), None, flags, None)
        .step("remount /dev read-only", "dev")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::recorder::Recorder;

    fn bind(source: &str, target: &str) -> BindPlan {
        BindPlan {
            source: source.into(),
            target: target.into(),
            readonly: false,
            source_is_dir: true,
            no_symlinks: false,
            idmapped: false,
        }
    }

    fn plan() -> Plan {
        Plan {
            mountpoint: "/s/root".into(),
            lower: vec!["/t/layer".into()],
            upper: "/s/upper".into(),
            work: "/s/work".into(),
            binds: vec![
                BindPlan {
                    readonly: true,
                    source_is_dir: false,
                    ..bind("/h/agent.sock", "run/lizard/agent.sock")
                },
                BindPlan {
                    no_symlinks: true,
                    ..bind("/v/data", "home/user/data")
                },
            ],
            idmap_userns: None,
            root_owner: Some((100000, 100000)),
            dev_options: "size=65536".into(),
            devpts_options: "newinstance".into(),
            shm_options: "size=64m".into(),
            tmp_options: "size=1g".into(),
            proc_files: vec![("loadavg", b"0.00 0.00 0.00 1/1 1\n".to_vec())],
        }
    }

    fn index(r: &Recorder, line: &str) -> usize {
        let calls = r.calls();
        calls
            .iter()
            .position(|c| c == line)
            .unwrap_or_else(|| panic!("no {line:?} in {calls:#?}"))
    }

    /// The overlay is given its layers as descriptors, never as host paths the sandbox could
    /// learn; nothing mounted propagates back to the host.
    #[test]
    fn the_overlay_takes_its_layers_by_descriptor() {
        let r = Recorder::default();
        build_host(&r, &plan()).unwrap();
        let calls = r.calls();
        assert_eq!(calls[0], "mount - / - MS_REC | MS_PRIVATE -");
        let overlay = r.matching("mount overlay");
        assert_eq!(
            overlay,
            ["mount overlay /s/root overlay MS_NOSUID | MS_NODEV \
              lowerdir={/t/layer},upperdir={/s/upper},workdir={/s/work}"]
        );
    }

    /// Each bind's target is resolved inside the new root (a planted symlink cannot point it at
    /// a host path), a volume's without following any symlink; its flags are set on the bind
    /// itself, opened again after the bind (the fd from before points underneath).
    #[test]
    fn binds_land_inside_the_root_and_are_remounted_nosuid() {
        let r = Recorder::default();
        build_host(&r, &plan()).unwrap();
        let in_root = "O_PATH RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS";
        let agent = "/s/root/run/lizard/agent.sock";
        let open = index(&r, &format!("openat2 {agent} {in_root}"));
        let bound = index(
            &r,
            &format!("mount /h/agent.sock {{{agent}}} - MS_BIND | MS_REC -"),
        );
        let remount = index(
            &r,
            &format!(
                "mount - {{{agent}}} - MS_RDONLY | MS_NOSUID | MS_NODEV | MS_REMOUNT | MS_BIND -"
            ),
        );
        assert!(open < bound && bound < remount);
        let reopened = r.calls()[bound + 1..remount]
            .iter()
            .any(|c| c.starts_with(&format!("openat2 {agent}")));
        assert!(reopened, "the remount acts on a fd opened after the bind");

        let volume = "/s/root/home/user/data";
        let no_links = "O_PATH RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS";
        index(&r, &format!("openat2 {volume} {no_links}"));
        index(
            &r,
            &format!("mount - {{{volume}}} - MS_NOSUID | MS_NODEV | MS_REMOUNT | MS_BIND -"),
        );
        for c in r.matching("openat2") {
            assert!(c.contains("RESOLVE_IN_ROOT"), "{c}");
        }
    }

    /// A missing target is made one component at a time, each in a directory opened inside the
    /// root, each given to the sandbox's root; a file target is created exclusively, without
    /// following a link.
    #[test]
    fn missing_targets_are_made_one_component_at_a_time() {
        let r = Recorder::default()
            .missing("/s/root/run/lizard")
            .missing("/s/root/run/lizard/agent.sock");
        build_host(&r, &plan()).unwrap();
        let made = index(&r, "mkdirat /s/root/run/lizard 755");
        let owned = index(&r, "fchownat /s/root/run/lizard 100000:100000");
        let file = index(
            &r,
            "openat /s/root/run/lizard/agent.sock O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY 644",
        );
        let file_owned = index(&r, "fchownat /s/root/run/lizard/agent.sock 100000:100000");
        assert!(made < owned && owned < file && file < file_owned);
        assert!(
            r.matching("mkdirat /s/root/run ").is_empty(),
            "/run existed"
        );
    }

    /// With an id map, layers and `idmapped` binds are detached copies shown through it, their
    /// flags set before they are attached: no bind of the host path, no remount.
    #[test]
    fn idmapped_binds_are_attached_with_their_flags_already_set() {
        let r = Recorder::default();
        let mut plan = plan();
        plan.idmap_userns = Some(r.named_fd("userns"));
        plan.binds[1].idmapped = true;
        build_host(&r, &plan).unwrap();
        let idmap = libc::MOUNT_ATTR_IDMAP;
        index(&r, "open_tree /t/layer");
        index(
            &r,
            &format!("mount_setattr tree(/t/layer) {idmap:#x} userns"),
        );
        let flags = idmap | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
        let set = index(
            &r,
            &format!("mount_setattr tree(/v/data) {flags:#x} userns"),
        );
        let attach = index(&r, "move_mount tree(/v/data) /s/root/home/user/data");
        assert!(set < attach);
        assert!(r.matching("mount /v/data").is_empty());
        assert!(r.matching("mount - {/s/root/home/user/data}").is_empty());
    }

    /// Inside: everything is mounted before `pivot_root`, after which the old root is only
    /// detached; `/dev` is made read-only after everything in it; the sandbox's own `/proc`
    /// files are written and made read-only before they are attached.
    #[test]
    fn the_inside_is_finished_before_the_pivot() {
        let r = Recorder::default();
        build_inside(&r, &plan()).unwrap();
        let calls = r.calls();
        assert_eq!(calls[0], "mount - / - MS_REC | MS_PRIVATE -");
        let pivot = index(&r, "pivot_root .");
        assert_eq!(
            calls[pivot - 1..],
            [
                "fchdir tree(.)",
                "pivot_root .",
                "umount_detach .",
                "chdir /"
            ]
        );
        let last_mount = calls.iter().rposition(|c| c.starts_with("mount ")).unwrap();
        assert!(last_mount < pivot);
        index(
            &r,
            "mount proc {tree(.)/proc} proc MS_NOSUID | MS_NODEV | MS_NOEXEC -",
        );
        for name in PROC_NULLED {
            let line = format!("mount /dev/null {{tree(.)/proc/{name}}} - MS_BIND | MS_REC -");
            assert!(index(&r, &line) < pivot);
        }
        let dev_ro = index(
            &r,
            "mount - {tree(.)/dev} - MS_RDONLY | MS_NOSUID | MS_NOEXEC | MS_REMOUNT | MS_BIND -",
        );
        for c in &calls[dev_ro + 1..] {
            assert!(
                !c.contains("tree(.)/dev/"),
                "after /dev went read-only: {c}"
            );
        }
        let written = index(&r, "write tmpfs/0 \"0.00 0.00 0.00 1/1 1\\n\"");
        let sealed = index(
            &r,
            &format!("mount_setattr tmpfs {:#x} -", libc::MOUNT_ATTR_RDONLY),
        );
        let attached = index(&r, "move_mount tree(tmpfs/0) tree(.)/proc/loadavg");
        assert!(written < sealed && sealed < attached);
    }

    /// A failing call ends the build: nothing after it runs, and the error names the step.
    #[test]
    fn a_failed_step_stops_the_build() {
        for (fail, step) in [
            ("mount", "make / private"),
            ("open_tree_recursive", "open_tree"),
            ("fsmount", "make tmpfs"),
            ("move_mount", "attach the root"),
            ("symlinkat", "symlink"),
            ("pivot_root", "pivot_root"),
        ] {
            let r = Recorder::failing(fail);
            let e = build_inside(&r, &plan()).unwrap_err();
            assert_eq!(e.step, step, "{fail}");
            let calls = r.calls();
            assert!(calls.last().unwrap().starts_with(fail), "{fail}: {calls:?}");
        }
    }
}
