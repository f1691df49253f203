//! Exact fork of one process tree inside a running sandbox (a context's kernel, its threads, its
//! children, its sockets) with CRIU, into a **new pid namespace nested in the sandbox's**: the copy
//! keeps every pid it had (CRIU restores pids exactly), so it cannot live next to its source in
//! the sandbox's own pid namespace. Run by a single-threaded host helper (`lizard context-fork`,
//! [`fork_main`]): it enters namespaces, which a multi-threaded process cannot.
//!
//! The steps ([`fork_subtree`]):
//!
//! 1. **Dump** the tree with `--leave-running` from a CRIU whose active pid namespace is the
//!    sandbox's (CRIU refuses to dump a pid namespace without its init) and whose `/proc` is a fresh
//!    one of that namespace, in a private mount namespace. Every mount of the sandbox is external (the
//!    copy joins the sandbox's mounts, it never gets copies of them).
//! 2. **Align the images' root namespaces** with the tree's ([`criu_images::align_root_namespaces`]):
//!    the copy joins the sandbox's user, mount, ipc and uts namespaces (`--join-ns`) instead of
//!    getting new ones, and CRIU 4.2 creates (and then cannot join into) every namespace the
//!    images say differs from its own.
//! 3. **Make the copy's init** (`Z`, [`ForkInit`]): a process that entered the sandbox's
//!    namespaces and ids (its root, with no capability left), then a new pid namespace (owned by
//!    the sandbox's user namespace, so the copy can use it), a mount namespace of its own (a copy
//!    of the sandbox's mounts) and, when the tree has bound inet sockets, a network namespace of its
//!    own (a listening server cannot be bound twice in one namespace). Its parent becomes the
//!    sandbox's PID 1 (the agent); it reaps the copy's processes and exits when none is left.
//! 4. **A `/proc` of the new pid namespace** in Z's mount namespace, with the sandbox's masks over
//!    it (the same mounts, moved onto the new `/proc`): mounted by the host's root (a mount in a
//!    user namespace must not hide anything of an existing `/proc`, which the masks do).
//! 5. **Restore** with a CRIU whose active pid namespace is Z's, joining Z's namespaces
//!    (`--join-ns …:1`), in the fork's cgroup, with the agent's new pipes in place of the source's
//!    (`--inherit-fd`, taken from the agent with `pidfd_getfd`) — then Z is told to go on.
//!
//! Nothing of the sandbox is trusted: the pids, fds and cgroup names come from its agent. The
//! helper checks that the tree is a child of the sandbox's PID 1, that the agent's fds are pipes,
//! and resolves no path inside the sandbox (its `/proc` entries are the kernel's, read with size
//! limits; the fork's cgroup directories are the host's). Everything CRIU runs has a deadline. The
//! images (the kernel's memory) are in a root-only host directory and removed when done.

use crate::cgroup::{Cgroup, CgroupPaths};
use crate::checkpoint::{CheckpointError, Criu, ImagesDir};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most of one `/proc` file of the sandbox that is read.
const MAX_PROC_BYTES: u64 = 1024 * 1024;

/// The most processes of one tree that are looked at.
const MAX_TREE: usize = 1024;

/// How long the copy's init may take to be made.
const INIT_DEADLINE: Duration = Duration::from_secs(10);

/// What the helper is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtreeForkSpec {
    /// The CRIU program and its run directory (see [`Criu`]).
    pub criu: PathBuf,
    #[serde(default)]
    pub criu_run_dir: Option<PathBuf>,
    /// Host pid of the sandbox's PID 1 (its agent).
    pub sandbox_pid: i32,
    /// The tree's root (a context's kernel): its pid in the sandbox's pid namespace. Must be a child
    /// of the sandbox's PID 1.
    pub tree_pid: i32,
    /// The tree's pipes the copy gets anew: wherever the tree holds the pipe `pipe_inode`, the copy
    /// holds the pipe the agent has at `agent_fd` (whose other end the agent keeps).
    pub channels: Vec<Channel>,
    /// Where the copy's processes are accounted and limited (host paths).
    pub cgroup: CgroupPaths,
    /// A fresh images directory; its parent must be a root-only host directory.
    pub images: PathBuf,
    /// Deadline of the dump and of the restore, each.
    pub deadline_ms: u64,
}

/// One pipe of the copy: the tree's pipe `pipe_inode` becomes the one the agent holds at
/// `agent_fd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    pub pipe_inode: u64,
    pub agent_fd: RawFd,
}

/// What the helper did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtreeFork {
    /// The copy's init (Z), in the sandbox's pid namespace: a child of the sandbox's PID 1.
    pub init_pid: i32,
    /// The copy of the tree's root, in the sandbox's pid namespace.
    pub tree_pid: i32,
    /// Whether the copy has a network namespace of its own (its tree had bound inet sockets).
    pub own_netns: bool,
    pub dump_ms: u64,
    pub restore_ms: u64,
    pub image_bytes: u64,
}

/// Errors of a subtree fork.
#[derive(Debug, thiserror::Error)]
pub enum SubtreeError {
    #[error("the tree to fork: {0}")]
    Tree(String),
    #[error("the agent's descriptor {fd}: {reason}")]
    Channel { fd: RawFd, reason: String },
    #[error("{step}")]
    Sys {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Criu(#[from] CheckpointError),
    #[error("the images: {0}")]
    Images(String),
    #[error("the copy's init: {0}")]
    Init(String),
}

fn sys(step: &'static str) -> impl FnOnce(io::Error) -> SubtreeError {
    move |source| SubtreeError::Sys { step, source }
}

fn nix_sys(step: &'static str) -> impl FnOnce(nix::Error) -> SubtreeError {
    move |e| SubtreeError::Sys {
        step,
        source: e.into(),
    }
}

/// The helper's reply on stdout (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtreeReply {
    Ok(SubtreeFork),
    Error(String),
}

/// `lizard context-fork`: read a [`SubtreeForkSpec`] from stdin, fork, print a [`SubtreeReply`].
pub fn fork_main() -> ! {
    let mut input = Vec::new();
    let spec = io::stdin()
        .take(1024 * 1024)
        .read_to_end(&mut input)
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_slice::<SubtreeForkSpec>(&input).map_err(|e| e.to_string()));
    let reply = match spec {
        Ok(spec) => match fork_subtree(&spec) {
            Ok(f) => SubtreeReply::Ok(f),
            Err(e) => SubtreeReply::Error(crate::error_chain(&e)),
        },
        Err(e) => SubtreeReply::Error(format!("invalid spec: {e}")),
    };
    let failed = matches!(reply, SubtreeReply::Error(_));
    crate::process::reply_and_exit(&reply, failed)
}

/// Read at most [`MAX_PROC_BYTES`] of a `/proc` file.
fn read_proc(path: &str) -> io::Result<String> {
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(MAX_PROC_BYTES)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// The pids of `pid` in each pid namespace from the host's down (`NSpid:` of its status).
fn ns_pids(host_pid: i32) -> io::Result<Vec<i32>> {
    let status = read_proc(&format!("/proc/{host_pid}/status"))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default())
}

/// The children of `host_pid` (host pids), from every thread's `children` file.
fn children(host_pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{host_pid}/task")) else {
        return out;
    };
    for t in tasks.flatten().take(MAX_TREE) {
        let path = format!(
            "/proc/{host_pid}/task/{}/children",
            t.file_name().to_string_lossy()
        );
        if let Ok(s) = read_proc(&path) {
            out.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
        }
        if out.len() >= MAX_TREE {
            break;
        }
    }
    out
}

/// The host pid of the child of `parent_host` whose pid one level below the host is `pid`.
fn child_with_ns_pid(parent_host: i32, pid: i32) -> Option<i32> {
    children(parent_host)
        .into_iter()
        .find(|c| ns_pids(*c).ok().and_then(|p| p.get(1).copied()) == Some(pid))
}

/// `root` and its descendants (host pids), at most [`MAX_TREE`].
fn tree_of(root: i32) -> Vec<i32> {
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() && all.len() < MAX_TREE {
        let kids = children(all[i]);
        all.extend(kids.into_iter().take(MAX_TREE - all.len()));
        i += 1;
    }
    all
}

/// The socket inodes open in `pids`.
fn socket_inodes(pids: &[i32]) -> Vec<u64> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten().take(65_536) {
            if let Ok(link) = std::fs::read_link(fd.path()) {
                let link = link.to_string_lossy();
                if let Some(ino) = link
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|n| n.parse().ok())
                {
                    out.push(ino);
                }
            }
        }
    }
    out
}

/// Whether any of `inodes` is a listening TCP socket or a bound UDP socket in the network
/// namespace of `host_pid` (its `/proc/<pid>/net` tables).
fn binds_inet(host_pid: i32, inodes: &[u64]) -> bool {
    if inodes.is_empty() {
        return false;
    }
    for (table, tcp) in [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ] {
        let Ok(text) = read_proc(&format!("/proc/{host_pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(state), Some(ino)) = (f.get(3), f.get(9).and_then(|i| i.parse::<u64>().ok()))
            else {
                continue;
            };
            // TCP state 0A is LISTEN; every UDP socket in the table is bound.
            if inodes.contains(&ino) && (!tcp || *state == "0A") {
                return true;
            }
        }
    }
    false
}

/// The inodes of the pipes open in `host_pid`.
fn pipe_inodes(host_pid: i32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{host_pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .take(65_536)
        .filter_map(|fd| crate::procfs::pipe_inode_of(&fd.path()))
        .collect()
}

/// The mounts of the sandbox (its PID 1's mount namespace), but its root: `(id, mount point)`.
fn sandbox_mounts(sandbox_pid: i32) -> Result<Vec<(u64, String)>, SubtreeError> {
    let text = read_proc(&format!("/proc/{sandbox_pid}/mountinfo"))
        .map_err(sys("reading the sandbox's mounts"))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(id), Some(point)) = (f.first().and_then(|i| i.parse().ok()), f.get(4)) else {
            continue;
        };
        if *point != "/" {
            out.push((id, (*point).to_string()));
        }
    }
    Ok(out)
}

/// Fork the tree (see the module docs). Must run in a single-threaded process as the host's root.
pub fn fork_subtree(spec: &SubtreeForkSpec) -> Result<SubtreeFork, SubtreeError> {
    if crate::sandbox::thread_count().unwrap_or(1) != 1 {
        return Err(SubtreeError::Init(
            "the helper must be single-threaded".into(),
        ));
    }
    if spec.tree_pid <= 1 {
        return Err(SubtreeError::Tree(format!(
            "pid {} is not a kernel",
            spec.tree_pid
        )));
    }
    let agent = crate::process::pidfd_open(spec.sandbox_pid).map_err(sys("opening the agent"))?;
    let ns = |name: &str| -> Result<std::fs::File, SubtreeError> {
        std::fs::File::open(format!("/proc/{}/ns/{name}", spec.sandbox_pid)).map_err(|source| {
            SubtreeError::Sys {
                step: "opening a namespace of the sandbox",
                source,
            }
        })
    };
    let (mnt_ns, user_ns, ipc_ns, uts_ns, net_ns, cgroup_ns) = (
        ns("mnt")?,
        ns("user")?,
        ns("ipc")?,
        ns("uts")?,
        ns("net")?,
        ns("cgroup")?,
    );
    // The namespaces are the sandbox's only if its PID 1 is still the one the pidfd names.
    crate::sys::pidfd_signal(agent.as_fd(), 0).map_err(sys("checking the agent is alive"))?;
    let root_id = read_proc(&format!("/proc/{}/status", spec.sandbox_pid))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| {
                    v.split_whitespace()
                        .nth(1)
                        .and_then(|u| u.parse::<u32>().ok())
                })
        })
        .ok_or_else(|| SubtreeError::Tree("the sandbox's root has no uid".into()))?;

    let tree_host = child_with_ns_pid(spec.sandbox_pid, spec.tree_pid).ok_or_else(|| {
        SubtreeError::Tree(format!(
            "pid {} is no child of the sandbox's PID 1",
            spec.tree_pid
        ))
    })?;
    let mut inherit: Vec<(OwnedFd, u64)> = Vec::new();
    let held = pipe_inodes(tree_host);
    for ch in &spec.channels {
        let ino = ch.pipe_inode;
        if !held.contains(&ino) {
            return Err(SubtreeError::Tree(format!("it holds no pipe {ino}")));
        }
        let fd = crate::sys::pidfd_getfd(agent.as_fd(), ch.agent_fd).map_err(|e| {
            SubtreeError::Channel {
                fd: ch.agent_fd,
                reason: e.to_string(),
            }
        })?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| SubtreeError::Channel {
            fd: ch.agent_fd,
            reason: e.to_string(),
        })?;
        if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return Err(SubtreeError::Channel {
                fd: ch.agent_fd,
                reason: "not a pipe".into(),
            });
        }
        inherit.push((fd, ino));
    }
    let own_netns = binds_inet(tree_host, &socket_inodes(&tree_of(tree_host)));
    let mounts = sandbox_mounts(spec.sandbox_pid)?;
    let cgroup = Cgroup::open(spec.cgroup.clone()).map_err(|e| {
        SubtreeError::Init(format!("the fork's cgroup: {}", crate::error_chain(&e)))
    })?;
    let images = ImagesDir::create(&spec.images)?;
    let deadline = Duration::from_millis(spec.deadline_ms);
    let criu = Criu::new(&spec.criu).with_run_dir(spec.criu_run_dir.clone());

    // CRIU sees the tree's cgroups as the sandbox does.
    nix::sched::setns(&cgroup_ns, nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .map_err(nix_sys("entering the sandbox's cgroup namespace"))?;

    // 1. Dump, from the sandbox's pid namespace.
    nix::sched::setns(&agent, nix::sched::CloneFlags::CLONE_NEWPID)
        .map_err(nix_sys("entering the sandbox's pid namespace"))?;
    let started = Instant::now();
    let mut dump = criu.command_with_own_proc(None);
    dump.arg("dump")
        .arg("--tree")
        .arg(spec.tree_pid.to_string())
        .arg("--images-dir")
        .arg(&images.path)
        .args([
            "--log-file",
            "dump.log",
            "-v4",
            "--leave-running",
            "--shell-job",
        ])
        .args(["--manage-cgroups=ignore", "--ext-unix-sk", "--file-locks"])
        .args(["--network-lock", "skip"]);
    if own_netns {
        dump.arg("--tcp-established");
    }
    for (id, point) in &mounts {
        dump.arg("--external").arg(format!("mnt[{point}]:m{id}"));
    }
    let result =
        crate::checkpoint::run_checked(dump, "dump", deadline, &images.path.join("dump.log"));
    let dump_ms = started.elapsed().as_millis() as u64;
    if let Err(e) = result {
        let _ = images.remove();
        return Err(e.into());
    }
    let image_bytes = images.bytes();
    let restored = (|| {
        criu_images::align_root_namespaces(&images.path, spec.tree_pid)
            .map_err(|e| SubtreeError::Images(e.to_string()))?;
        images
            .open_to_restored_tasks(root_id)
            .map_err(sys("opening the images to the restored tasks"))?;
        // 3. The copy's init.
        let mut init = ForkInit::make(
            &agent,
            SandboxNs {
                mnt: &mnt_ns,
                user: &user_ns,
                ipc: &ipc_ns,
                uts: &uts_ns,
                net: &net_ns,
            },
            &cgroup,
            own_netns,
        )?;
        // 4. Its /proc.
        init.mount_proc()?;
        // 5. Restore.
        nix::sched::setns(&init.pidfd, nix::sched::CloneFlags::CLONE_NEWPID)
            .map_err(nix_sys("entering the copy's pid namespace"))?;
        let started = Instant::now();
        let mut restore = criu.command_with_own_proc(Some(cgroup.clone()));
        restore
            .arg("restore")
            .arg("--images-dir")
            .arg(&images.path)
            .args(["--log-file", "restore.log", "-v4", "--restore-detached"])
            .args(["--shell-job", "--manage-cgroups=ignore", "--ext-unix-sk"])
            // Sockets' buffer sizes as an unprivileged process may set them: the restored tasks
            // are in the sandbox's user namespace when their sockets are made.
            .args(["--file-locks", "--unprivileged"]);
        if own_netns {
            restore.arg("--tcp-established");
        }
        for ns in ["user", "mnt", "ipc", "uts", "net"] {
            restore.arg("--join-ns").arg(format!("{ns}:1"));
        }
        let mut mapped = Vec::new();
        for (i, (fd, ino)) in inherit.into_iter().enumerate() {
            let n = 10 + i as RawFd;
            mapped.push((fd, n));
            restore
                .arg("--inherit-fd")
                .arg(format!("fd[{n}]:pipe:[{ino}]"));
        }
        crate::process::map_fds(&mut restore, mapped);
        let r = crate::checkpoint::run_checked(
            restore,
            "restore",
            deadline,
            &images.path.join("restore.log"),
        );
        let restore_ms = started.elapsed().as_millis() as u64;
        if let Err(e) = r {
            init.kill();
            return Err(e.into());
        }
        let tree_pid = match init.go() {
            Ok(p) => p,
            Err(e) => {
                init.kill();
                return Err(e);
            }
        };
        Ok(SubtreeFork {
            init_pid: init.pid,
            tree_pid,
            own_netns,
            dump_ms,
            restore_ms,
            image_bytes,
        })
    })();
    let _ = images.remove();
    restored
}

/// The copy's init (Z): see the module docs.
struct ForkInit {
    /// In the sandbox's pid namespace.
    pid: i32,
    host_pid: i32,
    pidfd: OwnedFd,
    /// Its mount namespace.
    mnt: std::fs::File,
    /// Writing a byte tells it the copy is in place; closing without one, to exit.
    go: Option<OwnedFd>,
}

impl ForkInit {
    /// Make Z through two intermediate processes (X enters the namespaces; Y, already in the
    /// sandbox's pid namespace, makes the new one; Z is its first process). X and Y exit, so Z is
    /// re-parented to the sandbox's PID 1.
    fn make(
        agent: &OwnedFd,
        ns: SandboxNs<'_>,
        cgroup: &Cgroup,
        own_netns: bool,
    ) -> Result<ForkInit, SubtreeError> {
        let (report_r, report_w) = crate::process::cloexec_pipe().map_err(sys("pipe"))?;
        let (go_r, go_w) = crate::process::cloexec_pipe().map_err(sys("pipe"))?;
        let (ready_r, ready_w) = crate::process::cloexec_pipe().map_err(sys("pipe"))?;
        // SAFETY (of the forks below): this process is single-threaded (checked by
        // `fork_subtree`); the children only make system calls and `_exit`.
        match crate::sys::clone_process(0).map_err(sys("fork"))? {
            Some(x) => {
                drop(report_w);
                drop(go_r);
                drop(ready_w);
                let status = crate::process::reap_within(x, INIT_DEADLINE);
                let mut buf = [0u8; 64];
                let n = read_within(report_r.as_fd(), &mut buf, INIT_DEADLINE);
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                let pid: i32 = text.trim().parse().map_err(|_| {
                    SubtreeError::Init(format!(
                        "it did not say its pid ({:?}, {status:?})",
                        text.trim()
                    ))
                })?;
                // Z's namespaces are its own only once it says so: opened before, its mount
                // namespace would still be the sandbox's (and the copy's /proc would be mounted
                // over the sandbox's own).
                let mut b = [0u8; 1];
                if read_within(ready_r.as_fd(), &mut b, INIT_DEADLINE) != 1 {
                    return Err(SubtreeError::Init(
                        "it did not make its namespaces in time".into(),
                    ));
                }
                let parent = children_host_of_ns_pid(agent, pid)?;
                let pidfd =
                    crate::process::pidfd_open(parent).map_err(sys("opening the copy's init"))?;
                let mnt = std::fs::File::open(format!("/proc/{parent}/ns/mnt"))
                    .map_err(sys("opening the copy's mount namespace"))?;
                // Its /proc is mounted there: never in the sandbox's own mount namespace.
                if same_namespace(&mnt, ns.mnt) {
                    return Err(SubtreeError::Init(
                        "its mount namespace is the sandbox's".into(),
                    ));
                }
                Ok(ForkInit {
                    pid,
                    host_pid: parent,
                    pidfd,
                    mnt,
                    go: Some(go_w),
                })
            }
            None => {
                drop(report_r);
                drop(go_w);
                drop(ready_r);
                let pipes = InitPipes {
                    report: report_w,
                    ready: ready_w,
                    go: go_r,
                };
                let code = match x_main(agent, ns, cgroup, own_netns, pipes) {
                    Ok(()) => 0,
                    Err(_) => 1,
                };
                crate::sys::exit_now(code)
            }
        }
    }

    /// Mount a `/proc` of the copy's pid namespace in its mount namespace, the sandbox's masks moved
    /// onto it (from a child whose active pid namespace is the copy's).
    fn mount_proc(&self) -> Result<(), SubtreeError> {
        match crate::sys::clone_process(0).map_err(sys("fork"))? {
            Some(child) => {
                let st = crate::process::reap_within(child, INIT_DEADLINE)
                    .map_err(sys("waiting for the /proc mount"))?;
                match st {
                    Some(crate::process::Exit::Code(0)) => Ok(()),
                    other => Err(SubtreeError::Init(format!(
                        "mounting its /proc failed ({other:?})"
                    ))),
                }
            }
            None => {
                let ok = nix::sched::setns(&self.pidfd, nix::sched::CloneFlags::CLONE_NEWPID)
                    .is_ok()
                    && match crate::sys::clone_process(0) {
                        Ok(Some(grandchild)) => matches!(
                            crate::process::reap_within(grandchild, INIT_DEADLINE),
                            Ok(Some(crate::process::Exit::Code(0)))
                        ),
                        Ok(None) => {
                            crate::sys::exit_now(i32::from(proc_in_copy(self.mnt.as_fd()).is_err()))
                        }
                        Err(_) => false,
                    };
                crate::sys::exit_now(i32::from(!ok))
            }
        }
    }

    /// Tell Z the copy is in place; returns the copy's root (Z's one child) in the sandbox's pid
    /// namespace.
    fn go(&mut self) -> Result<i32, SubtreeError> {
        let kids = children(self.host_pid);
        let [kid] = kids[..] else {
            return Err(SubtreeError::Init(format!(
                "it has {} children, not the one restored",
                kids.len()
            )));
        };
        let pid = ns_pids(kid)
            .ok()
            .and_then(|p| p.get(1).copied())
            .ok_or_else(|| SubtreeError::Init("the restored tree has no pid".into()))?;
        if let Some(go) = self.go.take() {
            nix::unistd::write(&go, b"g").map_err(nix_sys("telling the copy's init"))?;
        }
        Ok(pid)
    }

    /// Kill Z, and with it every process of its pid namespace.
    fn kill(&self) {
        let _ = crate::sys::pidfd_signal(self.pidfd.as_fd(), libc::SIGKILL);
    }
}

/// Whether two `/proc/*/ns/*` files are the same namespace.
fn same_namespace(a: &std::fs::File, b: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        // Unknown: taken as the same (the fork fails rather than touch the sandbox's mounts).
        _ => true,
    }
}

/// The host pid of the child of the sandbox's PID 1 whose pid there is `pid`.
fn children_host_of_ns_pid(agent: &OwnedFd, pid: i32) -> Result<i32, SubtreeError> {
    // The agent's host pid, from its pidfd's fdinfo.
    let info = read_proc(&format!("/proc/self/fdinfo/{}", agent.as_raw_fd()))
        .map_err(sys("reading the agent's pidfd"))?;
    let host: i32 = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| SubtreeError::Init("the agent's pid is unknown".into()))?;
    child_with_ns_pid(host, pid)
        .ok_or_else(|| SubtreeError::Init(format!("pid {pid} is no child of the agent")))
}

/// Read what arrives on `fd` within `limit` (until end of file or `buf` is full).
fn read_within(fd: BorrowedFd<'_>, buf: &mut [u8], limit: Duration) -> usize {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let end = Instant::now() + limit;
    let mut n = 0;
    while n < buf.len() {
        let left = end.saturating_duration_since(Instant::now());
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) | Err(_) => break,
            Ok(_) => match nix::unistd::read(fd, &mut buf[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            },
        }
    }
    n
}

/// The sandbox's namespaces the copy's init enters.
#[derive(Clone, Copy)]
struct SandboxNs<'a> {
    mnt: &'a std::fs::File,
    user: &'a std::fs::File,
    ipc: &'a std::fs::File,
    uts: &'a std::fs::File,
    net: &'a std::fs::File,
}

/// The write ends X, Y and Z report on, and the read end Z waits for the go on.
struct InitPipes {
    /// Y writes Z's pid (in the sandbox's pid namespace).
    report: OwnedFd,
    /// Z writes a byte once its namespaces are its own.
    ready: OwnedFd,
    go: OwnedFd,
}

/// X: in the fork's cgroup, enter the sandbox's namespaces and become its root; Y (its child)
/// makes the new pid namespace and Z; Y reports Z's pid, Z says when it is ready.
fn x_main(
    agent: &OwnedFd,
    ns: SandboxNs<'_>,
    cgroup: &Cgroup,
    own_netns: bool,
    pipes: InitPipes,
) -> io::Result<()> {
    use nix::sched::{setns, unshare, CloneFlags};
    cgroup
        .add_pid(std::process::id() as i32)
        .map_err(|e| io::Error::other(e.to_string()))?;
    setns(agent, CloneFlags::CLONE_NEWPID)?;
    setns(ns.mnt, CloneFlags::CLONE_NEWNS)?;
    setns(ns.ipc, CloneFlags::CLONE_NEWIPC)?;
    setns(ns.uts, CloneFlags::CLONE_NEWUTS)?;
    setns(ns.net, CloneFlags::CLONE_NEWNET)?;
    setns(ns.user, CloneFlags::CLONE_NEWUSER)?;
    crate::sys::set_ids(0, 0)?;
    match crate::sys::clone_process(0)? {
        // X: wait for Y, which reports.
        Some(y) => {
            drop(pipes);
            let _ = crate::process::reap_within(y, INIT_DEADLINE);
            Ok(())
        }
        None => {
            // Y, in the sandbox's pid namespace.
            unshare(CloneFlags::CLONE_NEWPID)?;
            let InitPipes { report, ready, go } = pipes;
            match crate::sys::clone_process(0)? {
                Some(z) => {
                    drop((go, ready));
                    nix::unistd::write(&report, z.to_string().as_bytes())?;
                    crate::sys::exit_now(0)
                }
                None => {
                    drop(report);
                    let code = i32::from(z_main(own_netns, ready, go).is_err());
                    crate::sys::exit_now(code)
                }
            }
        }
    }
}

/// Z: its own network (if asked) and mount namespaces, no privilege left; says it is ready, waits
/// for the go, then reaps until no process of its namespace is left.
fn z_main(own_netns: bool, ready: OwnedFd, go: OwnedFd) -> io::Result<()> {
    use nix::sched::{unshare, CloneFlags};
    if own_netns {
        unshare(CloneFlags::CLONE_NEWNET)?;
        crate::sys::loopback_up()?;
    }
    unshare(CloneFlags::CLONE_NEWNS)?;
    crate::process::set_dumpable(false)?;
    let _ = std::env::set_current_dir("/");
    // Nothing of the helper's stays open but the go and ready pipes.
    let go = go.into_raw_fd();
    for fd in 0..1024 {
        if fd != go && fd != ready.as_raw_fd() {
            // SAFETY: closing descriptors of this (single-threaded) process; none is used again.
            unsafe { libc::close(fd) };
        }
    }
    crate::sys::drop_bounding_set_except(0)?;
    crate::sys::set_no_new_privs()?;
    crate::sys::set_capability_sets(0, 0, 0)?;
    nix::unistd::write(&ready, b"r")?;
    drop(ready);
    let mut b = [0u8; 1];
    // SAFETY: `go` is this process's open descriptor (kept above) and `b` a valid buffer.
    let n = unsafe { libc::read(go, b.as_mut_ptr().cast(), 1) };
    if n != 1 {
        return Err(io::Error::other("no go"));
    }
    // SAFETY: as above; the pipe is not needed any more.
    unsafe { libc::close(go) };
    loop {
        match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::__WALL)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return Ok(()),
        }
    }
}

/// In a process whose active pid namespace is the copy's: a new proc mounted on `/proc` of the
/// copy's mount namespace `mnt`, and every mount the sandbox has below its `/proc` (the masks)
/// moved onto the new one.
fn proc_in_copy(mnt: BorrowedFd<'_>) -> io::Result<()> {
    use nix::sched::{setns, unshare, CloneFlags};
    // A private mount namespace of the host's: a proc made here is not checked against the
    // copy's (whose masks would refuse it to a user namespace).
    unshare(CloneFlags::CLONE_NEWNS)?;
    let attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;
    let proc_ = crate::sys::detached_proc(attrs)?;
    setns(mnt, CloneFlags::CLONE_NEWNS)?;
    std::env::set_current_dir("/")?;
    // The masks: mounts below /proc, parents first (mountinfo lists a mount after its parent).
    let info = read_proc("/proc/self/mountinfo")?;
    let mut masks: Vec<(String, OwnedFd)> = Vec::new();
    for line in info.lines() {
        let Some(point) = line.split_whitespace().nth(4) else {
            continue;
        };
        if let Some(rest) = point.strip_prefix("/proc/") {
            if rest.contains("..") || point.contains('\\') {
                continue;
            }
            let path = CString::new(point).map_err(io::Error::other)?;
            masks.push((point.to_string(), crate::sys::open_tree_clone(None, &path)?));
        }
    }
    let target = open_path(Path::new("/proc"))?;
    crate::sys::move_mount_onto(proc_.as_fd(), target.as_fd())?;
    for (point, tree) in masks {
        let target = open_path(Path::new(&point))?;
        crate::sys::move_mount_onto(tree.as_fd(), target.as_fd())?;
    }
    Ok(())
}

/// An `O_PATH` descriptor of `path` (no symbolic link followed: the paths are in a proc file
/// system).
fn open_path(path: &Path) -> io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok(fd)
}

/// Just enough of CRIU's image format (a magic, then length-prefixed protobuf messages) to align the
/// root namespaces of a dump with its tree's.
pub mod criu_images {
    use std::io;
    use std::path::Path;

    /// `TaskKobjIdsEntry` fields: net, ipc, uts, mnt, user, cgroup and time namespace ids.
    const NS_ID_FIELDS: [u64; 7] = [6, 7, 8, 9, 10, 11, 12];
    /// `InventoryEntry.root_ids`.
    const ROOT_IDS: u64 = 3;

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Value {
        Varint(u64),
        Bytes(Vec<u8>),
        Fixed32([u8; 4]),
        Fixed64([u8; 8]),
    }

    fn bad(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, what.to_string())
    }

    fn varint(b: &[u8], i: &mut usize) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let c = *b.get(*i).ok_or_else(|| bad("truncated varint"))?;
            *i += 1;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Ok(v);
            }
        }
        Err(bad("varint too long"))
    }

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let c = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(c);
                return;
            }
            out.push(c | 0x80);
        }
    }

    pub(crate) fn fields(b: &[u8]) -> io::Result<Vec<(u64, Value)>> {
        let mut i = 0;
        let mut out = Vec::new();
        while i < b.len() {
            let key = varint(b, &mut i)?;
            let v = match key & 7 {
                0 => Value::Varint(varint(b, &mut i)?),
                2 => {
                    let n = varint(b, &mut i)? as usize;
                    let s = b.get(i..i + n).ok_or_else(|| bad("truncated field"))?;
                    i += n;
                    Value::Bytes(s.to_vec())
                }
                5 => {
                    let s = b.get(i..i + 4).ok_or_else(|| bad("truncated field"))?;
                    i += 4;
                    Value::Fixed32(s.try_into().map_err(|_| bad("fixed32"))?)
                }
                1 => {
                    let s = b.get(i..i + 8).ok_or_else(|| bad("truncated field"))?;
                    i += 8;
                    Value::Fixed64(s.try_into().map_err(|_| bad("fixed64"))?)
                }
                _ => return Err(bad("unknown wire type")),
            };
            out.push((key >> 3, v));
        }
        Ok(out)
    }

    pub(crate) fn encode(fields: &[(u64, Value)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in fields {
            let wt = match v {
                Value::Varint(_) => 0,
                Value::Bytes(_) => 2,
                Value::Fixed32(_) => 5,
                Value::Fixed64(_) => 1,
            };
            put_varint(&mut out, n << 3 | wt);
            match v {
                Value::Varint(x) => put_varint(&mut out, *x),
                Value::Bytes(b) => {
                    put_varint(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
                Value::Fixed32(b) => out.extend_from_slice(b),
                Value::Fixed64(b) => out.extend_from_slice(b),
            }
        }
        out
    }

    /// The first message of an image whose header is `magic_len` bytes, and the header.
    fn first_message(path: &Path, magic_len: usize) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let b = std::fs::read(path)?;
        let head = b
            .get(..magic_len)
            .ok_or_else(|| bad("short image"))?
            .to_vec();
        let len = b
            .get(magic_len..magic_len + 4)
            .ok_or_else(|| bad("short image"))?;
        let len = u32::from_le_bytes(len.try_into().map_err(|_| bad("length"))?) as usize;
        let msg = b
            .get(magic_len + 4..magic_len + 4 + len)
            .ok_or_else(|| bad("truncated message"))?
            .to_vec();
        Ok((head, msg))
    }

    /// Make the inventory's root namespaces (those CRIU compares the tree's with) the tree's own,
    /// read from `ids-<pid>.img`: CRIU then creates no namespace and the tree joins the ones
    /// `--join-ns` names.
    pub fn align_root_namespaces(images: &Path, pid: i32) -> io::Result<()> {
        // `ids-*.img` has two magics (the common one and its own), `inventory.img` one.
        let (_, ids) = first_message(&images.join(format!("ids-{pid}.img")), 8)?;
        let task = fields(&ids)?;
        let inv_path = images.join("inventory.img");
        let (head, inv) = first_message(&inv_path, 4)?;
        let mut inv = fields(&inv)?;
        let mut found = false;
        for (n, v) in inv.iter_mut() {
            if *n != ROOT_IDS {
                continue;
            }
            let Value::Bytes(b) = v else {
                return Err(bad("root_ids is not a message"));
            };
            let mut root = fields(b)?;
            for (rn, rv) in root.iter_mut() {
                if NS_ID_FIELDS.contains(rn) {
                    if let Some((_, tv)) = task.iter().find(|(tn, _)| tn == rn) {
                        *rv = tv.clone();
                    }
                }
            }
            *b = encode(&root);
            found = true;
        }
        if !found {
            return Err(bad("the inventory has no root_ids"));
        }
        let msg = encode(&inv);
        let mut out = head;
        out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        out.extend_from_slice(&msg);
        let tmp = inv_path.with_extension("img.new");
        std::fs::write(&tmp, &out)?;
        std::fs::rename(&tmp, &inv_path)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn fields_round_trip() {
            let f = vec![
                (1, Value::Varint(2)),
                (3, Value::Bytes(vec![8, 1, 16, 300u16 as u8])),
                (5, Value::Fixed32([1, 2, 3, 4])),
                (7, Value::Varint(u64::MAX)),
            ];
            assert_eq!(fields(&encode(&f)).unwrap(), f);
        }

        #[test]
        fn truncated_input_is_an_error_not_a_panic() {
            assert!(fields(&[0x1a, 0x10, 1]).is_err());
            assert!(fields(&[0x08, 0x80]).is_err());
        }

        #[test]
        fn root_namespaces_become_the_tasks() {
            let dir = tempfile::tempdir().unwrap();
            let root = encode(&[
                (1, Value::Varint(1)),
                (5, Value::Varint(1)),
                (6, Value::Varint(2)),
                (9, Value::Varint(6)),
                (10, Value::Varint(7)),
            ]);
            let inv = encode(&[
                (1, Value::Varint(2)),
                (ROOT_IDS, Value::Bytes(root)),
                (13, Value::Bytes(b"run id".to_vec())),
            ]);
            let mut img = b"MAGI".to_vec();
            img.extend_from_slice(&(inv.len() as u32).to_le_bytes());
            img.extend_from_slice(&inv);
            std::fs::write(dir.path().join("inventory.img"), &img).unwrap();
            let task = encode(&[
                (1, Value::Varint(2)),
                (5, Value::Varint(1)),
                (6, Value::Varint(9)),
                (9, Value::Varint(12)),
                (10, Value::Varint(13)),
            ]);
            let mut ids = b"COMMMAGI".to_vec();
            ids.extend_from_slice(&(task.len() as u32).to_le_bytes());
            ids.extend_from_slice(&task);
            std::fs::write(dir.path().join("ids-6.img"), &ids).unwrap();

            align_root_namespaces(dir.path(), 6).unwrap();
            let (head, msg) = first_message(&dir.path().join("inventory.img"), 4).unwrap();
            assert_eq!(head, b"MAGI");
            let inv = fields(&msg).unwrap();
            assert_eq!(inv[0], (1, Value::Varint(2)));
            assert_eq!(inv[2], (13, Value::Bytes(b"run id".to_vec())));
            let Value::Bytes(root) = &inv[1].1 else {
                panic!("root_ids")
            };
            let root = fields(root).unwrap();
            // The pid namespace and the other ids stay; net, mnt and user are the task's.
            assert_eq!(
                root,
                vec![
                    (1, Value::Varint(1)),
                    (5, Value::Varint(1)),
                    (6, Value::Varint(9)),
                    (9, Value::Varint(12)),
                    (10, Value::Varint(13)),
                ]
            );
        }

        #[test]
        fn an_inventory_without_root_ids_is_refused() {
            let dir = tempfile::tempdir().unwrap();
            let inv = encode(&[(1, Value::Varint(2))]);
            let mut img = b"MAGI".to_vec();
            img.extend_from_slice(&(inv.len() as u32).to_le_bytes());
            img.extend_from_slice(&inv);
            std::fs::write(dir.path().join("inventory.img"), &img).unwrap();
            let mut ids = b"COMMMAGI".to_vec();
            ids.extend_from_slice(&0u32.to_le_bytes());
            std::fs::write(dir.path().join("ids-6.img"), &ids).unwrap();
            assert!(align_root_namespaces(dir.path(), 6).is_err());
        }
    }
}
