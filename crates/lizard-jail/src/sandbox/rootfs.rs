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

use super::child::{SetupError, Step};
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{fchownat, Gid, Uid};
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

const NONE: Option<&str> = None;

pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Open `rel` (relative to the new root) as an `O_PATH` fd, resolving symlinks as if the new root
/// were `/`.
fn open_in_root(root: BorrowedFd<'_>, rel: &Path) -> nix::Result<OwnedFd> {
    open_in_root_with(root, rel, ResolveFlag::empty())
}

/// [`open_in_root`] with extra resolve flags (e.g. `RESOLVE_NO_SYMLINKS`).
pub(crate) fn open_in_root_with(
    root: BorrowedFd<'_>,
    rel: &Path,
    extra: ResolveFlag,
) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS | extra);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    openat2(root, rel, how)
}

fn chown_root(
    dir: BorrowedFd<'_>,
    name: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(), SetupError> {
    if let Some((uid, gid)) = owner {
        fchownat(
            dir,
            name,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .step("chown", name.display())?;
    }
    Ok(())
}

/// Open `rel` inside the root, creating missing directories (and, when `file`, a final empty file)
/// owned by `owner`. Creation happens one component at a time in directories opened with
/// `RESOLVE_IN_ROOT`, so nothing is ever created outside the root.
fn ensure(
    root: BorrowedFd<'_>,
    rel: &Path,
    file: bool,
    owner: Option<(u32, u32)>,
) -> Result<OwnedFd, SetupError> {
    ensure_with(root, rel, file, owner, ResolveFlag::empty())
}

/// [`ensure`] with extra resolve flags for every lookup.
fn ensure_with(
    root: BorrowedFd<'_>,
    rel: &Path,
    file: bool,
    owner: Option<(u32, u32)>,
    extra: ResolveFlag,
) -> Result<OwnedFd, SetupError> {
    let open_in_root = |root: BorrowedFd<'_>, rel: &Path| open_in_root_with(root, rel, extra);
    match open_in_root(root, rel) {
        Ok(fd) => return Ok(fd),
        Err(nix::Error::ENOENT) => {}
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
        let parent = open_in_root(root, &prefix).step("open mount target", prefix.display())?;
        prefix.push(name);
        match open_in_root(root, &prefix) {
            Ok(_) => continue,
            Err(nix::Error::ENOENT) => {}
            Err(e) => return Err(e).step("open mount target", prefix.display()),
        }
        let last = i + 1 == names.len();
        if last && file {
            openat(
                parent.as_fd(),
                *name,
                OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_WRONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
            .step("create mount target", prefix.display())?;
        } else {
            mkdirat(parent.as_fd(), *name, Mode::from_bits_truncate(0o755))
                .step("create mount target", prefix.display())?;
        }
        chown_root(parent.as_fd(), Path::new(name), owner)?;
    }
    open_in_root(root, rel).step("open mount target", rel.display())
}

/// Bind-mount `source` (a host path, or an fd path) recursively onto `target`.
pub(crate) fn bind_mount(
    source: &str,
    target: BorrowedFd<'_>,
    what: &str,
) -> Result<(), SetupError> {
    mount(
        Some(source),
        fd_path(target).as_str(),
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        NONE,
    )
    .step("bind mount", what)
}

/// Change the flags (`MS_RDONLY`, `MS_NOSUID`, ...) of the bind mount whose root `top` is. `top`
/// must be opened after the bind: an fd opened before still points at the directory underneath.
fn remount(top: BorrowedFd<'_>, flags: MsFlags, what: &str) -> Result<(), SetupError> {
    mount(
        NONE,
        fd_path(top).as_str(),
        NONE,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | flags,
        NONE,
    )
    .step("remount", what)
}

/// A detached copy of the mount at the host path `source` (not recursive), shown through the id
/// map of `userns`, with the extra `MOUNT_ATTR_*` flags `attrs`.
pub(crate) fn idmapped_tree(
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
    let tree = crate::sys::open_tree_clone(None, &path).step("open_tree", source.display())?;
    crate::sys::mount_setattr(tree.as_fd(), libc::MOUNT_ATTR_IDMAP | attrs, Some(userns))
        .step("idmap mount", source.display())?;
    Ok(tree)
}

/// An `O_PATH` descriptor of an overlay layer directory (a host path the caller made).
fn open_layer(layer: &Path) -> Result<OwnedFd, SetupError> {
    nix::fcntl::open(
        layer,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .step("open overlay layer", layer.display())
}

/// The host-root half: in the launcher's staging mount namespace (a private copy of the host's),
/// mount the overlay at `plan.mountpoint` and the bind mounts into it.
pub(crate) fn build_host(plan: &Plan) -> Result<(), SetupError> {
    mount_root(plan)?;
    bind_all(plan)
}

/// Only the overlay root of [`build_host`] (for a checkpoint restore: CRIU makes the binds).
pub(crate) fn mount_root(plan: &Plan) -> Result<(), SetupError> {
    // Nothing we mount may propagate back to the host's mount namespace.
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .step("make / private", "/")?;
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
            Some(userns) => idmapped_tree(layer, 0, userns.as_fd())?,
            None => open_layer(layer)?,
        };
        lower_fds.push(fd);
    }
    let upper = open_layer(&plan.upper)?;
    let work = open_layer(&plan.work)?;
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
    mount(
        Some("overlay"),
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
fn bind_all(plan: &Plan) -> Result<(), SetupError> {
    let root = nix::fcntl::open(
        &plan.mountpoint,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .step("open new root", plan.mountpoint.display())?;
    let root = root.as_fd();

    for b in &plan.binds {
        let what = format!("{} on /{}", b.source.display(), b.target.display());
        // Volume targets follow no symlink at all: a mount point is a plain directory path.
        let extra = if b.no_symlinks {
            ResolveFlag::RESOLVE_NO_SYMLINKS
        } else {
            ResolveFlag::empty()
        };
        let target = ensure_with(root, &b.target, !b.source_is_dir, plan.root_owner, extra)?;
        if let (true, Some(userns)) = (b.idmapped, &plan.idmap_userns) {
            // A detached idmapped copy, its flags set before it is attached: no remount needed.
            let mut attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
            if b.readonly {
                attrs |= libc::MOUNT_ATTR_RDONLY;
            }
            let tree = idmapped_tree(&b.source, attrs, userns.as_fd())?;
            crate::sys::move_mount_onto(tree.as_fd(), target.as_fd())
                .step("attach idmapped mount", &what)?;
            continue;
        }
        bind_mount(&b.source.to_string_lossy(), target.as_fd(), &what)?;
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if b.readonly {
            flags |= MsFlags::MS_RDONLY;
        }
        let top = open_in_root_with(root, &b.target, extra)
            .step("open mount target", b.target.display())?;
        remount(top.as_fd(), flags, &what)?;
    }
    Ok(())
}

/// The child's half, as root of the sandbox's user namespace in its own mount namespace (a copy of
/// the staging one, every mount of it locked): `/proc`, `/dev`, `/tmp`, then `pivot_root`. What is
/// created here is owned by the sandbox's root without any `chown` (the creator's ids).
pub(crate) fn build_inside(plan: &Plan) -> Result<(), SetupError> {
    // Copies of shared mounts came in as slaves; make them private too.
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .step("make / private", "/")?;
    // Our current directory is the overlay root (the parent's, translated by the clone into our
    // copy of it): the host directories above it are root's, which we may not traverse.
    // `pivot_root` refuses a new root that is itself locked (it would reveal what it covers, the
    // host's directory): pivot into a recursive copy of it made here and attached onto it (the
    // binds in it come along, still locked to it); its fd is the new root from here on.
    let tree = crate::sys::open_tree_clone_cwd_recursive().step("open_tree", "the root")?;
    let cwd = nix::fcntl::open(
        ".",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .step("open new root", plan.mountpoint.display())?;
    crate::sys::move_mount_onto(tree.as_fd(), cwd.as_fd()).step("attach the root", "")?;
    drop(cwd);
    let root = tree.as_fd();
    mount_proc(root, plan)?;
    mount_dev(root, plan)?;

    let tmp = ensure(root, Path::new("tmp"), false, None)?;
    mount(
        Some("tmpfs"),
        fd_path(tmp.as_fd()).as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(plan.tmp_options.as_str()),
    )
    .step("mount /tmp", &plan.tmp_options)?;

    // pivot_root(".", ".") stacks the old root on top of the new one at "/"; detaching it leaves
    // only the new root. (No directory for the old root is needed in the template.)
    nix::unistd::fchdir(root).step("enter new root", plan.mountpoint.display())?;
    nix::unistd::pivot_root(".", ".").step("pivot_root", plan.mountpoint.display())?;
    umount2(".", MntFlags::MNT_DETACH).step("detach old root", "/")?;
    nix::unistd::chdir("/").step("chdir", "/")?;
    Ok(())
}

fn mount_proc(root: BorrowedFd<'_>, plan: &Plan) -> Result<(), SetupError> {
    let target = ensure(root, Path::new("proc"), false, None)?;
    mount(
        Some("proc"),
        fd_path(target.as_fd()).as_str(),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        NONE,
    )
    .step("mount /proc", "proc")?;
    // The fresh proc is kernel-made: no planted symlinks below this point.
    let proc_dir = open_in_root(root, Path::new("proc")).step("open /proc", "proc")?;
    let open_entry = |name: &str| -> Result<Option<OwnedFd>, SetupError> {
        match openat(
            proc_dir.as_fd(),
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(nix::Error::ENOENT) => Ok(None),
            Err(e) => Err(e).step("open /proc entry", name),
        }
    };
    for name in PROC_NULLED {
        if let Some(fd) = open_entry(name)? {
            bind_mount(
                "/dev/null",
                fd.as_fd(),
                &format!("/dev/null on /proc/{name}"),
            )?;
        }
    }
    for name in PROC_READONLY {
        if let Some(fd) = open_entry(name)? {
            let what = format!("read-only /proc/{name}");
            bind_mount(&fd_path(fd.as_fd()), fd.as_fd(), &what)?;
            if let Some(top) = open_entry(name)? {
                let flags = MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                remount(top.as_fd(), flags, &what)?;
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
        let fs = crate::sys::detached_tmpfs(
            &[
                (c"size", c"65536"),
                (c"nr_inodes", c"64"),
                (c"mode", c"0555"),
            ],
            attrs,
        )
        .step("make tmpfs", "for /proc files")?;
        for (i, (name, contents)) in plan.proc_files.iter().enumerate() {
            let file = openat(
                fs.as_fd(),
                format!("{i}").as_str(),
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o444),
            )
            .step("create /proc file", name)?;
            nix::unistd::write(&file, contents).step("write /proc file", name)?;
        }
        crate::sys::mount_setattr(fs.as_fd(), libc::MOUNT_ATTR_RDONLY, None)
            .step("read-only tmpfs", "for /proc files")?;
        for (i, (name, _)) in plan.proc_files.iter().enumerate() {
            let Some(target) = open_entry(name)? else {
                continue;
            };
            let index = std::ffi::CString::new(format!("{i}")).expect("no NUL in a number");
            let tree = crate::sys::open_tree_clone(Some(fs.as_fd()), &index)
                .step("open_tree", format!("/proc/{name}"))?;
            crate::sys::move_mount_onto(tree.as_fd(), target.as_fd())
                .step("mask /proc entry", name)?;
        }
    }
    for name in PROC_EMPTIED {
        if let Some(fd) = open_entry(name)? {
            mount(
                Some("tmpfs"),
                fd_path(fd.as_fd()).as_str(),
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=0,mode=555"),
            )
            .step("hide /proc entry", name)?;
        }
    }
    Ok(())
}

fn mount_dev(root: BorrowedFd<'_>, plan: &Plan) -> Result<(), SetupError> {
    let target = ensure(root, Path::new("dev"), false, None)?;
    mount(
        Some("tmpfs"),
        fd_path(target.as_fd()).as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(plan.dev_options.as_str()),
    )
    .step("mount /dev", &plan.dev_options)?;
    // A tmpfs we just made: nothing in it yet but what we create.
    let dev = open_in_root(root, Path::new("dev")).step("open /dev", "dev")?;
    let dev = dev.as_fd();
    for name in DEVICES {
        // An empty file of our fresh tmpfs, then the host's node bound onto it (the host's `/dev`
        // is still visible: we have not pivoted yet). The bind is a copy of a locked mount, so
        // its flags stay locked too.
        let file = openat(
            dev,
            *name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
        .step("create /dev node", format!("/dev/{name}"))?;
        drop(file);
        let target = openat(
            dev,
            *name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .step("open /dev node", format!("/dev/{name}"))?;
        bind_mount(
            &format!("/dev/{name}"),
            target.as_fd(),
            &format!("/dev/{name}"),
        )?;
    }
    for (name, to) in DEV_LINKS {
        nix::unistd::symlinkat(*to, dev, *name).step("symlink", format!("/dev/{name}"))?;
    }
    for (name, mode) in [("pts", 0o755), ("shm", 0o1777)] {
        mkdirat(dev, name, Mode::from_bits_truncate(mode)).step("mkdir", format!("/dev/{name}"))?;
    }
    let pts = open_in_root(root, Path::new("dev/pts")).step("open /dev/pts", "dev/pts")?;
    mount(
        Some("devpts"),
        fd_path(pts.as_fd()).as_str(),
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(plan.devpts_options.as_str()),
    )
    .step("mount /dev/pts", &plan.devpts_options)?;
    let shm = open_in_root(root, Path::new("dev/shm")).step("open /dev/shm", "dev/shm")?;
    mount(
        Some("tmpfs"),
        fd_path(shm.as_fd()).as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(plan.shm_options.as_str()),
    )
    .step("mount /dev/shm", &plan.shm_options)?;
    // Nobody inside may add device nodes or files to /dev itself.
    let top = open_in_root(root, Path::new("dev")).step("open /dev", "dev")?;
    mount(
        NONE,
        fd_path(top.as_fd()).as_str(),
        NONE,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NOEXEC,
        NONE,
    )
    .step("remount /dev read-only", "dev")?;
    Ok(())
}
