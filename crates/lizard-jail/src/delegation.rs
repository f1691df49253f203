//! Per-context cgroups: a sub-tree of a sandbox's cgroup delegated to the sandbox's PID 1 (in a
//! Lizard sandbox the agent, the sandbox's root — never the uid user code runs as), and the
//! sandbox's side of it (one child cgroup per context, with optional memory and CPU limits).
//!
//! **Launcher side** ([`delegate`], host root): in each of the sandbox cgroup's v1 `memory`, `cpu`
//! and `cpuacct` directories, a child `ctx/` whose limits equal the sandbox's (so the sandbox can
//! read its ceiling) and whose directory, `cgroup.procs` and `tasks` (nothing else) belong to
//! PID 1's host ids. The launcher bind-mounts each `ctx/` at
//! `/sys/fs/cgroup/<controller>` inside ([`MOUNT_DIR`]). PID 1 can create children there
//! (their files are owned by their creator, so it can set their limits) and move processes of its
//! own uid into them (cgroup v1 refuses a writer that is not the host's root any other uid's
//! process: a kernel joins while it is still root, then drops its ids); other uids can do none of
//! this. PID 1 cannot write the limit files of `ctx/` or of the sandbox cgroup
//! (root-owned), cannot reach a parent (the bind mount's root is `ctx/`), and v1 limits are
//! hierarchical (`memory.use_hierarchy` is always 1 since Linux 6.x; checked), so no child can use
//! more than the sandbox.
//!
//! **Sandbox side** ([`Delegation`], the agent, not the host's root): [`Delegation::open`] finds the
//! delegated directories, [`Delegation::ceiling`] reads the sandbox's limits from them,
//! [`Delegation::create`] makes one context's cgroup, and [`ContextCgroup`] opens its
//! `cgroup.procs` files (for [`crate::process::join_cgroups_on_exec`]), reads its memory use and
//! removes it.
//!
//! Not here: cgroup v2. On v2 the sandbox's PID 1 would have to live in a leaf of the delegated
//! sub-tree (the "no internal processes" rule and the common-ancestor rule for moves), which the
//! launcher does not arrange yet: [`delegate`] delegates nothing on v2, and the agent then refuses
//! per-context limits with a typed error. Not here either: which context gets which limits.

use crate::cgroup::check_name;
use crate::cgroup::{parse, read, write, Cgroup, CgroupError, CgroupLimits, CgroupPaths, V1Dirs};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the delegated directories are mounted inside a sandbox: `MOUNT_DIR/<controller>`.
pub const MOUNT_DIR: &str = "/sys/fs/cgroup";

/// Name of the delegated child of the sandbox cgroup in each hierarchy.
pub const DELEGATED_DIR: &str = "ctx";

/// CFS period of context CPU limits (v1 `cpu.cfs_period_us`).
const CPU_PERIOD_US: u64 = 100_000;

/// One delegated directory: the host path of `ctx/` and the controller it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegatedDir {
    pub controller: &'static str,
    pub host_path: PathBuf,
}

/// The v1 controllers whose hierarchies a sandbox's PID 1 gets a sub-tree of.
const DELEGATED_CONTROLLERS: [&str; 3] = ["memory", "cpu", "cpuacct"];

/// The sandbox cgroup's directories in the [`DELEGATED_CONTROLLERS`]' hierarchies, in that order;
/// none on v2.
fn delegated_parents(cg: &Cgroup) -> Option<[(&'static str, &PathBuf); 3]> {
    match cg.paths() {
        CgroupPaths::V1(V1Dirs {
            memory,
            cpu,
            cpuacct,
            ..
        }) => Some([("memory", memory), ("cpu", cpu), ("cpuacct", cpuacct)]),
        CgroupPaths::V2 { .. } => None,
    }
}

/// The host's view of the context cgroup `name` that a sandbox's PID 1 made in the delegated
/// sub-tree of the sandbox cgroup `cg` (`ctx/<name>` in the delegated hierarchies; the sandbox's
/// own directory in the others, pids and freezer). `name` is checked like any cgroup name; on v2
/// (nothing delegated) it is `cg` itself.
pub fn context_cgroup_paths(cg: &Cgroup, name: &str) -> Result<CgroupPaths, CgroupError> {
    check_name(name)?;
    Ok(cg.paths().map(|controller, dir| match controller {
        Some(c) if DELEGATED_CONTROLLERS.contains(&c) => dir.join(DELEGATED_DIR).join(name),
        _ => dir.to_path_buf(),
    }))
}

/// Make the delegated sub-tree of the sandbox cgroup `cg` for the host ids `uid`/`gid`, with
/// `limits` (the sandbox's own) copied onto it. Returns nothing on cgroup v2 (see the module docs).
pub fn delegate(
    cg: &Cgroup,
    limits: &CgroupLimits,
    uid: u32,
    gid: u32,
) -> Result<Vec<DelegatedDir>, CgroupError> {
    let Some(parents) = delegated_parents(cg) else {
        return Ok(Vec::new());
    };
    let [memory, cpu, cpuacct] = parents.map(|(_, dir)| dir);
    let hier = memory.join("memory.use_hierarchy");
    if read(&hier)?.trim() != "1" {
        write(&hier, "1")?;
    }
    let mut out = Vec::new();
    for (controller, parent) in parents {
        let dir = parent.join(DELEGATED_DIR);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // Co-mounted controllers (`cpu,cpuacct`) share one directory; a relaunch re-uses it.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(CgroupError::Create { path: dir, source }),
        }
        chown_all(
            [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")],
            uid,
            gid,
        )?;
        out.push(DelegatedDir {
            controller,
            host_path: dir,
        });
    }
    // The ceiling the sandbox reads: the sandbox's own limits, on the delegated directories.
    let ctx = ContextCgroup {
        memory: memory.join(DELEGATED_DIR),
        cpu: cpu.join(DELEGATED_DIR),
        cpuacct: cpuacct.join(DELEGATED_DIR),
    };
    ctx.set_limits(&ContextLimits {
        memory_bytes: limits.memory_bytes,
        cpu_millicores: limits.cpu_millicores,
    })?;
    Ok(out)
}

/// After a CRIU restore with the cgroups (`--manage-cgroups=soft`): CRIU made each context's
/// cgroup below `ctx/` again, with its limits, but gave it (and `ctx/`) the owners it had when
/// dumped — for a clone, its source's host ids. Give `ctx/` (its directory, `cgroup.procs`,
/// `tasks`) and each child of it (its directory and its files, as if PID 1 had made it) to
/// `uid`/`gid`, as [`delegate`] does. Symbolic links are not followed (cgroupfs has none); at most
/// [`MAX_REOWNED`] children per hierarchy.
pub fn reown(cg: &Cgroup, uid: u32, gid: u32) -> Result<(), CgroupError> {
    let Some(parents) = delegated_parents(cg) else {
        return Ok(());
    };
    // The restored agent runs already: a context's cgroup it removes meanwhile (a nursery it
    // left, a context deleted) is gone, not an error.
    let chown = |p: &Path| match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r.map_err(|source| CgroupError::Write {
            path: p.to_path_buf(),
            value: format!("owner {uid}:{gid}"),
            source,
        }),
    };
    let list = |dir: &Path| -> Result<Vec<fs::DirEntry>, CgroupError> {
        let rd = fs::read_dir(dir).map_err(|source| CgroupError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(rd.filter_map(Result::ok).take(MAX_REOWNED).collect())
    };
    let mut done: Vec<&PathBuf> = Vec::new();
    for (_, parent) in parents {
        if done.contains(&parent) {
            continue;
        }
        done.push(parent);
        let dir = parent.join(DELEGATED_DIR);
        for p in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
            chown(&p)?;
        }
        for child in list(&dir)? {
            if !child.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            chown(&child.path())?;
            let Ok(files) = list(&child.path()) else {
                continue; // removed since it was listed
            };
            for f in files {
                if f.file_type().is_ok_and(|t| t.is_file()) {
                    chown(&f.path())?;
                }
            }
        }
    }
    Ok(())
}

/// The most children of `ctx/` (and files of each) [`reown`] handles.
pub const MAX_REOWNED: usize = 4096;

/// Limits of one context's cgroup; `None` = only the sandbox's limit applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextLimits {
    pub memory_bytes: Option<u64>,
    /// Thousandths of a CPU; at least 10.
    pub cpu_millicores: Option<u64>,
}

/// The delegated sub-tree as the sandbox sees it (directories under [`MOUNT_DIR`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    memory: PathBuf,
    cpu: PathBuf,
    cpuacct: PathBuf,
}

impl Delegation {
    /// Find the delegated directories under `root` (normally [`MOUNT_DIR`]): `memory`, `cpu` and
    /// `cpuacct`, each a cgroup directory whose `cgroup.procs` belongs to the calling user.
    pub fn open(root: &Path) -> Result<Delegation, CgroupError> {
        let me = nix::unistd::geteuid().as_raw();
        let dir = |c: &str| -> Result<PathBuf, CgroupError> {
            let d = root.join(c);
            let procs = d.join("cgroup.procs");
            let meta = fs::metadata(&procs).map_err(|source| CgroupError::Read {
                path: procs.clone(),
                source,
            })?;
            if meta.uid() != me {
                return Err(CgroupError::NoHierarchy(format!(
                    "{} is not delegated to uid {me}",
                    d.display()
                )));
            }
            Ok(d)
        };
        Ok(Delegation {
            memory: dir("memory")?,
            cpu: dir("cpu")?,
            cpuacct: dir("cpuacct")?,
        })
    }

    /// The limits of the delegated directories: the sandbox's own, which no context may exceed.
    pub fn ceiling(&self) -> Result<ContextLimits, CgroupError> {
        let memory = parse::<i64>(&self.memory.join("memory.limit_in_bytes"))?;
        let quota = parse::<i64>(&self.cpu.join("cpu.cfs_quota_us"))?;
        let period = parse::<i64>(&self.cpu.join("cpu.cfs_period_us"))?;
        // v1 reports "no limit" as a huge page-aligned number (memory) or -1 (quota).
        Ok(ContextLimits {
            memory_bytes: (memory > 0 && memory < i64::MAX / 2).then_some(memory as u64),
            cpu_millicores: (quota > 0 && period > 0).then(|| (quota * 1000 / period) as u64),
        })
    }

    /// Create (or re-use) the cgroup `name` for one context, with `limits`.
    pub fn create(&self, name: &str, limits: &ContextLimits) -> Result<ContextCgroup, CgroupError> {
        check_name(name)?;
        let cg = ContextCgroup {
            memory: self.memory.join(name),
            cpu: self.cpu.join(name),
            cpuacct: self.cpuacct.join(name),
        };
        for d in cg.dirs() {
            match fs::create_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    let _ = cg.remove();
                    return Err(CgroupError::Create { path: d, source });
                }
            }
        }
        if let Err(e) = cg.set_limits(limits) {
            let _ = cg.remove();
            return Err(e);
        }
        Ok(cg)
    }
}

/// Whether the id list `text` (a `cgroup.procs` or `tasks`, one id a line) has `id`.
fn lists(text: &str, id: i32) -> bool {
    text.lines()
        .any(|l| l.trim().parse::<i32>().ok() == Some(id))
}

/// One context's cgroup (v1: its directories in the memory, cpu and cpuacct hierarchies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextCgroup {
    memory: PathBuf,
    cpu: PathBuf,
    cpuacct: PathBuf,
}

impl ContextCgroup {
    /// Distinct directories (co-mounted hierarchies share one).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        let mut seen: Vec<(u64, u64)> = Vec::new();
        for p in [&self.memory, &self.cpu, &self.cpuacct] {
            // Two bind mounts of one directory are one directory: compare by inode.
            let key = fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
            if let Some(k) = key {
                if seen.contains(&k) {
                    continue;
                }
                seen.push(k);
            }
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// Set (or lift, with `None`) the memory and CPU limits.
    pub fn set_limits(&self, limits: &ContextLimits) -> Result<(), CgroupError> {
        if let Some(m) = limits.cpu_millicores {
            if m < 10 {
                return Err(CgroupError::Unsupported(format!(
                    "cpu_millicores {m} is below the minimum of 10"
                )));
            }
        }
        let mem = limits
            .memory_bytes
            .map_or_else(|| "-1".to_string(), |b| b.to_string());
        write(&self.memory.join("memory.limit_in_bytes"), &mem)?;
        // memory+swap (when the kernel accounts swap) is left to the sandbox's limit, which has
        // swap limited to zero on top: a context cannot swap more than the sandbox.
        write(
            &self.cpu.join("cpu.cfs_period_us"),
            &CPU_PERIOD_US.to_string(),
        )?;
        let quota = limits.cpu_millicores.map_or_else(
            || "-1".to_string(),
            |m| (m * CPU_PERIOD_US / 1000).to_string(),
        );
        write(&self.cpu.join("cpu.cfs_quota_us"), &quota)
    }

    /// Open every `cgroup.procs` of this cgroup for writing, for
    /// [`crate::process::join_cgroups_on_exec`].
    pub fn procs_files(&self) -> Result<Vec<fs::File>, CgroupError> {
        self.dirs()
            .into_iter()
            .map(|d| {
                let p = d.join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|source| CgroupError::Write {
                        path: p,
                        value: "(open)".into(),
                        source,
                    })
            })
            .collect()
    }

    /// Give every `tasks` file of this cgroup to `uid`/`gid` (the agent's own ids again to take
    /// it back). A fork of a live kernel runs as its context's uid already, and cgroup v1 lets
    /// the agent (not the host's root) move only processes of its own uid: the forked kernel
    /// joins its new cgroup itself, through these files, while they are its uid's (the agent
    /// takes them back right after, and checks with [`ContextCgroup::holds_all_threads_of`]).
    ///
    /// `tasks`, not `cgroup.procs`: the new kernel is single-threaded when it joins (a fork keeps
    /// only the calling thread), and writing `0` into `tasks` moves the calling thread without
    /// the global lock a process move takes, whose first taker after a quiet while waits for an
    /// RCU grace period (7–15 ms measured, 0.1–0.3 ms for the thread move).
    pub fn set_tasks_owner(&self, uid: u32, gid: u32) -> Result<(), CgroupError> {
        chown_all(self.tasks_paths(), uid, gid)
    }

    /// The `tasks` file of each distinct directory of this cgroup.
    pub fn tasks_paths(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("tasks")).collect()
    }

    /// The `cgroup.procs` file of each distinct directory of this cgroup.
    pub fn procs_paths(&self) -> Vec<PathBuf> {
        self.dirs()
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// Whether process `pid` is in this cgroup (in every hierarchy of it).
    pub fn contains(&self, pid: i32) -> Result<bool, CgroupError> {
        for p in self.procs_paths() {
            if !lists(&read(&p)?, pid) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether every thread of process `pid` is in this cgroup (in every hierarchy of it): a
    /// process that joined thread by thread (`tasks`) could have left one behind. No thread can
    /// change cgroup once the `tasks` files are the caller's again, and new threads start in
    /// their creator's cgroup, so a true answer stays true.
    pub fn holds_all_threads_of(&self, pid: i32) -> Result<bool, CgroupError> {
        let dir = PathBuf::from(format!("/proc/{pid}/task"));
        let mut tids = Vec::new();
        for e in fs::read_dir(&dir).map_err(|source| CgroupError::Read {
            path: dir.clone(),
            source,
        })? {
            let e = e.map_err(|source| CgroupError::Read {
                path: dir.clone(),
                source,
            })?;
            if let Some(t) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                tids.push(t);
            }
        }
        self.holds_threads(&tids)
    }

    /// Whether every thread of `tids` (none: false) is in this cgroup's `tasks`, in every
    /// hierarchy.
    fn holds_threads(&self, tids: &[i32]) -> Result<bool, CgroupError> {
        if tids.is_empty() {
            return Ok(false);
        }
        for p in self.tasks_paths() {
            let text = read(&p)?;
            if !tids.iter().all(|t| lists(&text, *t)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Make `spare`'s directories this cgroup's: this (new, empty) cgroup's limits are read, its
    /// directories removed, and `spare`'s renamed to their names, with the limits written again.
    /// Processes in `spare` end up in this cgroup without moving (renaming a cgroup does not
    /// migrate tasks; migrating a big process between v1 memory cgroups is slow).
    pub fn take_over(&self, spare: &ContextCgroup) -> Result<(), CgroupError> {
        let memory = read(self.memory.join("memory.limit_in_bytes"))?;
        let quota = read(self.cpu.join("cpu.cfs_quota_us"))?;
        let period = read(self.cpu.join("cpu.cfs_period_us"))?;
        let pairs = [
            (&self.memory, &spare.memory),
            (&self.cpu, &spare.cpu),
            (&self.cpuacct, &spare.cpuacct),
        ];
        let mut done: Vec<&PathBuf> = Vec::new();
        for (mine, theirs) in pairs {
            // Co-mounted hierarchies (cpu,cpuacct) are one directory under two names.
            if done.iter().any(|d| same_dir(d, mine)) {
                continue;
            }
            fs::remove_dir(mine).map_err(|source| CgroupError::Remove {
                path: mine.clone(),
                source,
            })?;
            fs::rename(theirs, mine).map_err(|source| CgroupError::Create {
                path: mine.clone(),
                source,
            })?;
            done.push(mine);
        }
        write(&self.memory.join("memory.limit_in_bytes"), memory.trim())?;
        write(&self.cpu.join("cpu.cfs_period_us"), period.trim())?;
        write(&self.cpu.join("cpu.cfs_quota_us"), quota.trim())
    }

    /// Move process `pid` (and, in v1, only that thread group) into this cgroup.
    pub fn add_pid(&self, pid: i32) -> Result<(), CgroupError> {
        for d in self.dirs() {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// SIGKILL every process in this cgroup (as its `cgroup.procs` lists them now). The caller
    /// needs the right to signal them (the agent has CAP_KILL in the sandbox).
    pub fn kill_all(&self) {
        let Ok(text) = read(self.memory.join("cgroup.procs")) else {
            return;
        };
        for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if pid > 0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }

    /// Memory currently charged to the context's processes, in bytes.
    pub fn memory_bytes(&self) -> Result<u64, CgroupError> {
        parse::<i64>(&self.memory.join("memory.usage_in_bytes")).map(|v| v.max(0) as u64)
    }

    /// CPU time used by the context's processes since the cgroup was made, in ns.
    pub fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        parse::<i64>(&self.cpuacct.join("cpuacct.usage")).map(|v| v.max(0) as u64)
    }

    /// How many processes of the context the OOM killer has killed.
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        let path = self.memory.join("memory.oom_control");
        let text = read(&path)?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .ok_or(CgroupError::Parse {
                path,
                content: text,
            })
    }

    /// Remove the cgroup. Its processes must be gone or going: removal is retried for up to
    /// `wait` while the kernel still counts them. A cgroup that does not exist is not an error.
    pub fn remove_within(&self, wait: Duration) -> Result<(), CgroupError> {
        let deadline = Instant::now() + wait;
        for d in self.dirs() {
            let mut pause = Duration::from_millis(1);
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Err(source) => return Err(CgroupError::Remove { path: d, source }),
                }
            }
        }
        Ok(())
    }

    /// [`ContextCgroup::remove_within`] without waiting.
    pub fn remove(&self) -> Result<(), CgroupError> {
        self.remove_within(Duration::ZERO)
    }
}

/// Whether two paths name one directory (bind mounts of one cgroup directory do).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => a == b,
    }
}

/// Give each of `paths` to `uid`/`gid` (a cgroup file or directory the host made).
fn chown_all(
    paths: impl IntoIterator<Item = PathBuf>,
    uid: u32,
    gid: u32,
) -> Result<(), CgroupError> {
    for path in paths {
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(|source| {
            CgroupError::Write {
                path: path.clone(),
                value: format!("owner {uid}:{gid}"),
                source,
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let d = Delegation {
            memory: "/nonexistent/m".into(),
            cpu: "/nonexistent/c".into(),
            cpuacct: "/nonexistent/a".into(),
        };
        for bad in ["", "..", "a/b"] {
            assert!(matches!(
                d.create(bad, &ContextLimits::default()),
                Err(CgroupError::InvalidName(_))
            ));
        }
    }

    #[test]
    fn a_forks_join_files_are_lent_checked_and_taken_back() {
        // Plain directories standing in for the cgroup's: cpu and cpuacct co-mounted (one dir).
        let base = std::env::temp_dir().join(format!("lizard-deleg-fork-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let (mem, cpu) = (base.join("memory"), base.join("cpu,cpuacct"));
        for d in [&mem, &cpu] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(mem.join("cgroup.procs"), "12\n34\n").unwrap();
        fs::write(cpu.join("cgroup.procs"), "34\n").unwrap();
        fs::write(mem.join("tasks"), "12\n34\n35\n").unwrap();
        fs::write(cpu.join("tasks"), "34\n12\n").unwrap();
        let cg = ContextCgroup {
            memory: mem.clone(),
            cpu: cpu.clone(),
            cpuacct: cpu.clone(),
        };
        assert_eq!(
            cg.procs_paths(),
            vec![mem.join("cgroup.procs"), cpu.join("cgroup.procs")]
        );
        assert!(cg.contains(34).unwrap());
        assert!(!cg.contains(12).unwrap(), "in every hierarchy, not one");
        assert!(!cg.contains(3).unwrap());
        assert_eq!(cg.tasks_paths(), vec![mem.join("tasks"), cpu.join("tasks")]);
        assert!(cg.holds_threads(&[34]).unwrap());
        assert!(cg.holds_threads(&[12, 34]).unwrap());
        assert!(
            !cg.holds_threads(&[34, 35]).unwrap(),
            "a thread left behind in one hierarchy"
        );
        assert!(!cg.holds_threads(&[]).unwrap());
        assert!(cg.holds_all_threads_of(i32::MAX).is_err());
        let me = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        if me.0 == 0 {
            cg.set_tasks_owner(54321, 54321).unwrap();
            for p in cg.tasks_paths() {
                assert_eq!(fs::metadata(&p).unwrap().uid(), 54321);
            }
            for p in cg.procs_paths() {
                assert_eq!(
                    fs::metadata(&p).unwrap().uid(),
                    0,
                    "cgroup.procs is not lent"
                );
            }
        }
        cg.set_tasks_owner(me.0, me.1).unwrap();
        for p in cg.tasks_paths() {
            assert_eq!(fs::metadata(&p).unwrap().uid(), me.0);
        }
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn open_without_delegation_is_an_error() {
        let dir = std::env::temp_dir().join(format!("lizard-deleg-{}", std::process::id()));
        let err = Delegation::open(&dir).unwrap_err();
        assert!(matches!(err, CgroupError::Read { .. }), "{err}");
    }
}
