//! Control groups for sandboxes: create one per sandbox with memory, pids and CPU limits, move
//! processes in, freeze and thaw, kill everything in it, read its accounting, remove it.
//!
//! cgroup v2 is used when the calling process's own v2 cgroup offers the `memory`, `pids` and `cpu`
//! controllers; otherwise cgroup v1, which needs the `memory`, `pids`, `cpu`, `cpuacct` and `freezer`
//! hierarchies. Sandbox cgroups are made *under the caller's own cgroup* in each hierarchy (as read
//! from `/proc/self/cgroup`), at `<mount>/<own path>/lizard/<name>`, never at a hierarchy's root.
//! A [`Cgroup`] is just its paths: serializable, so the server can store it and re-open it
//! ([`Cgroup::open`]) after a restart. [`Cgroup::child`] makes nested cgroups (per-context limits).
//!
//! Not here: which processes belong to a sandbox (the launcher moves its PID 1 in, and descendants
//! follow), or what the limits should be. On v2 the "no internal processes" rule applies: a cgroup
//! whose controllers are delegated to children may not itself hold processes, so the server must
//! run in a leaf of a delegated subtree (e.g. a systemd unit with `Delegate=yes`).

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long freezing, thawing, killing and removal may take before they report a timeout.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The name of the directory, under the caller's own cgroup, that holds every sandbox cgroup.
pub const PARENT_DIR: &str = "lizard";

/// CFS period used for CPU limits (v1 `cpu.cfs_period_us`, v2 second field of `cpu.max`).
const CPU_PERIOD_US: u64 = 100_000;

/// Errors of cgroup operations; each names the file or directory involved.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no usable cgroup hierarchy: {0}")]
    NoHierarchy(String),
    #[error("invalid cgroup name {0:?} (allowed: 1-128 of A-Z a-z 0-9 . _ -, not . or ..)")]
    InvalidName(String),
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {value:?} to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("creating cgroup {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("removing cgroup {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cgroup {path} does not exist")]
    Missing { path: PathBuf },
    #[error("setting favordynmods on the cgroup2 hierarchy mounted at {path}")]
    Reconfigure {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unexpected contents of {path}: {content:?}")]
    Parse { path: PathBuf, content: String },
    #[error("limit not supported: {0}")]
    Unsupported(String),
    #[error("{what} of cgroup {path} did not finish within {timeout:?}")]
    Timeout {
        what: &'static str,
        path: PathBuf,
        timeout: Duration,
    },
    #[error("killing pid {pid} of cgroup {path}")]
    Kill {
        pid: i32,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

/// Resource limits of a cgroup. `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupLimits {
    /// Memory limit in bytes (swap is limited to zero on top where the kernel accounts it).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Maximum number of tasks (processes and threads).
    #[serde(default)]
    pub pids_max: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU (1000 = one full CPU); at least 10.
    #[serde(default)]
    pub cpu_millicores: Option<u64>,
}

/// A directory in each cgroup v1 hierarchy Lizard uses (two are equal where controllers are
/// co-mounted, e.g. `cpu,cpuacct`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct V1Dirs {
    pub memory: PathBuf,
    pub pids: PathBuf,
    pub cpu: PathBuf,
    pub cpuacct: PathBuf,
    pub freezer: PathBuf,
}

impl V1Dirs {
    /// Each directory with its controller, in the fields' order.
    pub fn each(&self) -> [(&'static str, &PathBuf); 5] {
        [
            ("memory", &self.memory),
            ("pids", &self.pids),
            ("cpu", &self.cpu),
            ("cpuacct", &self.cpuacct),
            ("freezer", &self.freezer),
        ]
    }

    /// These directories with `f(controller, directory)` in place of each.
    pub fn map(&self, f: impl Fn(&'static str, &Path) -> PathBuf) -> V1Dirs {
        let [memory, pids, cpu, cpuacct, freezer] = self.each().map(|(c, d)| f(c, d));
        V1Dirs {
            memory,
            pids,
            cpu,
            cpuacct,
            freezer,
        }
    }
}

/// Where sandbox cgroups are created: the caller's own cgroup in each hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v1: the caller's own cgroup directory in each needed hierarchy (two fields are equal
    /// when controllers are co-mounted, e.g. `cpu,cpuacct`).
    V1(V1Dirs),
    /// cgroup v2: the caller's own cgroup directory.
    V2 { own: PathBuf },
}

/// The directories of one cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "lowercase", deny_unknown_fields)]
pub enum CgroupPaths {
    V1(V1Dirs),
    V2 { path: PathBuf },
}

impl CgroupPaths {
    /// Each directory with its controller (v1), or the one directory (v2, no controller named).
    pub fn dirs(&self) -> Vec<(Option<&'static str>, &PathBuf)> {
        match self {
            CgroupPaths::V1(d) => d.each().map(|(c, d)| (Some(c), d)).to_vec(),
            CgroupPaths::V2 { path } => vec![(None, path)],
        }
    }

    /// These paths with `f(controller, directory)` in place of each directory (v2: `None` for the
    /// controller).
    pub fn map(&self, f: impl Fn(Option<&'static str>, &Path) -> PathBuf) -> CgroupPaths {
        match self {
            CgroupPaths::V1(d) => CgroupPaths::V1(d.map(|c, d| f(Some(c), d))),
            CgroupPaths::V2 { path } => CgroupPaths::V2 {
                path: f(None, path),
            },
        }
    }
}

/// A cgroup (v1: one directory per hierarchy; v2: one directory). Cheap to clone; holds no fds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cgroup {
    paths: CgroupPaths,
}

impl Hierarchy {
    /// Find the hierarchies of this machine and the calling process's own cgroups in them, from
    /// `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn detect() -> Result<Hierarchy, CgroupError> {
        let mountinfo = read("/proc/self/mountinfo")?;
        let own = read("/proc/self/cgroup")?;
        Self::from_tables(&mountinfo, &own, |p| {
            fs::read_to_string(p.join("cgroup.controllers")).ok()
        })
    }

    /// A v2 hierarchy rooted at `own` (e.g. for tests, or a server that manages its own delegated
    /// subtree). Controllers are enabled as far as `own` offers them.
    pub fn v2_at(own: impl Into<PathBuf>) -> Hierarchy {
        Hierarchy::V2 { own: own.into() }
    }

    fn from_tables(
        mountinfo: &str,
        own: &str,
        controllers_of: impl Fn(&Path) -> Option<String>,
    ) -> Result<Hierarchy, CgroupError> {
        let mounts = parse_mountinfo(mountinfo);
        // v2, when our own cgroup there offers every controller we need.
        if let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") {
            if let Some(path) = own_path(own, None) {
                let dir = join_cgroup(&m.mountpoint, &m.root, &path);
                if let Some(list) = controllers_of(&dir) {
                    let have: Vec<&str> = list.split_whitespace().collect();
                    if ["memory", "pids", "cpu"].iter().all(|c| have.contains(c)) {
                        return Ok(Hierarchy::V2 { own: dir });
                    }
                }
            }
        }
        let find = |controller: &str| -> Result<PathBuf, CgroupError> {
            let m = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.super_opts.split(',').any(|o| o == controller))
                .ok_or_else(|| {
                    CgroupError::NoHierarchy(format!(
                        "no cgroup v2 with memory, pids and cpu, and no cgroup v1 `{controller}` hierarchy mounted"
                    ))
                })?;
            let path = own_path(own, Some(controller)).ok_or_else(|| {
                CgroupError::NoHierarchy(format!("no `{controller}` line in /proc/self/cgroup"))
            })?;
            Ok(join_cgroup(&m.mountpoint, &m.root, &path))
        };
        Ok(Hierarchy::V1(V1Dirs {
            memory: find("memory")?,
            pids: find("pids")?,
            cpu: find("cpu")?,
            cpuacct: find("cpuacct")?,
            freezer: find("freezer")?,
        }))
    }

    /// The directories of the cgroup `<own>/lizard/<name>` (nothing is created).
    fn paths_of(&self, name: &str) -> Result<CgroupPaths, CgroupError> {
        check_name(name)?;
        Ok(match self {
            Hierarchy::V1(own) => CgroupPaths::V1(own.map(|_, p| p.join(PARENT_DIR).join(name))),
            Hierarchy::V2 { own } => CgroupPaths::V2 {
                path: own.join(PARENT_DIR).join(name),
            },
        })
    }

    /// The cgroup `<own>/lizard/<name>` that [`Hierarchy::create`] makes, if any of its
    /// directories exists; nothing is created. For a caller cleaning up after a launch cut short
    /// (its processes, if any, are there).
    pub fn existing(&self, name: &str) -> Result<Option<Cgroup>, CgroupError> {
        let cg = Cgroup {
            paths: self.paths_of(name)?,
        };
        Ok((!cg.remaining_dirs().is_empty()).then_some(cg))
    }

    /// Create (or re-use, if it exists) the cgroup `<own>/lizard/<name>` with `limits`.
    pub fn create(&self, name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        let cg = Cgroup {
            paths: self.paths_of(name)?,
        };
        match self {
            Hierarchy::V1(_) => {
                for dir in cg.dirs() {
                    mkdir_p(&dir)?;
                }
            }
            Hierarchy::V2 { own } => {
                let parent = own.join(PARENT_DIR);
                enable_v2_controllers(own)?;
                mkdir_p(&parent)?;
                enable_v2_controllers(&parent)?;
                mkdir_p(&parent.join(name))?;
            }
        }
        cg.set_limits(limits)?;
        Ok(cg)
    }
}

impl Cgroup {
    /// Create the cgroup `name` under the caller's own cgroups (see [`Hierarchy::detect`]).
    pub fn create(name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        Hierarchy::detect()?.create(name, limits)
    }

    /// Re-open a cgroup from its stored paths; fails if a directory is gone.
    pub fn open(paths: CgroupPaths) -> Result<Cgroup, CgroupError> {
        let cg = Cgroup { paths };
        for dir in cg.dirs() {
            if !dir.is_dir() {
                return Err(CgroupError::Missing { path: dir });
            }
        }
        Ok(cg)
    }

    /// The directories of this cgroup.
    pub fn paths(&self) -> &CgroupPaths {
        &self.paths
    }

    /// Whether this is a cgroup v2 cgroup.
    pub fn is_v2(&self) -> bool {
        matches!(self.paths, CgroupPaths::V2 { .. })
    }

    /// A nested cgroup `name` inside this one (e.g. per context), with its own `limits` (which
    /// can only be tighter in effect than this cgroup's). On v2 this cgroup must hold no processes
    /// itself for the controllers to be delegated.
    pub fn child(&self, name: &str, limits: &CgroupLimits) -> Result<Cgroup, CgroupError> {
        check_name(name)?;
        if let CgroupPaths::V2 { path } = &self.paths {
            enable_v2_controllers(path)?;
        }
        let cg = Cgroup {
            paths: self.paths.map(|_, dir| dir.join(name)),
        };
        for dir in cg.dirs() {
            mkdir_p(&dir)?;
        }
        cg.set_limits(limits)?;
        Ok(cg)
    }

    /// Every distinct directory of this cgroup (co-mounted v1 controllers share one).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for (_, p) in self.paths.dirs() {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// Where this cgroup is inside each of its hierarchies (the path a process in it shows in the
    /// host's `/proc/<pid>/cgroup`), from the mount table: `(Some(controller), path)` per v1
    /// controller, `(None, path)` on v2 — e.g. for `criu restore --cgroup-root`.
    pub fn hierarchy_paths(&self) -> Result<Vec<(Option<&'static str>, String)>, CgroupError> {
        self.hierarchy_paths_in(&read("/proc/self/mountinfo")?)
    }

    fn hierarchy_paths_in(
        &self,
        mountinfo: &str,
    ) -> Result<Vec<(Option<&'static str>, String)>, CgroupError> {
        let mounts = parse_mountinfo(mountinfo);
        let inside = |dir: &Path, fstype: &str, controller: Option<&str>| {
            mounts
                .iter()
                .filter(|m| {
                    m.fstype == fstype
                        && controller.is_none_or(|c| m.super_opts.split(',').any(|o| o == c))
                })
                .find_map(|m| {
                    let rel = dir.strip_prefix(&m.mountpoint).ok()?;
                    let path = Path::new("/")
                        .join(m.root.trim_start_matches('/'))
                        .join(rel);
                    path.to_str().map(|p| p.trim_end_matches('/').to_string())
                })
                .map(|p| if p.is_empty() { "/".to_string() } else { p })
                .ok_or_else(|| CgroupError::Missing {
                    path: dir.to_path_buf(),
                })
        };
        self.paths
            .dirs()
            .into_iter()
            .map(|(c, dir)| {
                let fstype = if c.is_some() { "cgroup" } else { "cgroup2" };
                Ok((c, inside(dir, fstype, c)?))
            })
            .collect()
    }

    /// The directory whose freezer stops the processes (v1: the freezer controller's; v2: the
    /// cgroup's own, `cgroup.freeze`), e.g. for `criu dump --freeze-cgroup`.
    pub fn freezer_dir(&self) -> &Path {
        self.procs_dir()
    }

    /// The directory whose `cgroup.procs` lists the processes (v1: the freezer's).
    fn procs_dir(&self) -> &Path {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { freezer, .. }) => freezer,
            CgroupPaths::V2 { path } => path,
        }
    }

    /// Set (or change) the limits; `None` lifts a limit.
    pub fn set_limits(&self, limits: &CgroupLimits) -> Result<(), CgroupError> {
        if let Some(m) = limits.cpu_millicores {
            if m < 10 {
                return Err(CgroupError::Unsupported(format!(
                    "cpu_millicores {m} is below the minimum of 10"
                )));
            }
        }
        let quota = limits.cpu_millicores.map(|m| m * CPU_PERIOD_US / 1000);
        match &self.paths {
            CgroupPaths::V1(V1Dirs {
                memory, pids, cpu, ..
            }) => {
                set_v1_memory(memory, limits.memory_bytes)?;
                write(&pids.join("pids.max"), &max_or(limits.pids_max))?;
                write(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                let q = quota.map_or("-1".to_string(), |q| q.to_string());
                write(&cpu.join("cpu.cfs_quota_us"), &q)?;
            }
            CgroupPaths::V2 { path } => {
                let wants = [
                    ("memory.max", limits.memory_bytes.map(|_| ())),
                    ("pids.max", limits.pids_max.map(|_| ())),
                    ("cpu.max", limits.cpu_millicores.map(|_| ())),
                ];
                for (file, wanted) in wants {
                    let p = path.join(file);
                    if !p.exists() {
                        if wanted.is_some() {
                            return Err(CgroupError::Unsupported(format!(
                                "{} does not exist (controller not enabled)",
                                p.display()
                            )));
                        }
                        continue;
                    }
                    let value = match file {
                        "memory.max" => max_or(limits.memory_bytes),
                        "pids.max" => max_or(limits.pids_max),
                        _ => format!("{} {CPU_PERIOD_US}", max_or(quota)),
                    };
                    write(&p, &value)?;
                }
                let swap = path.join("memory.swap.max");
                if swap.exists() {
                    let v = if limits.memory_bytes.is_some() {
                        "0"
                    } else {
                        "max"
                    };
                    write(&swap, v)?;
                }
            }
        }
        Ok(())
    }

    /// Move the process `pid` (all its threads) into this cgroup.
    pub fn add_pid(&self, pid: i32) -> Result<(), CgroupError> {
        for dir in self.dirs() {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Freeze every process in the cgroup (and its children), waiting until they are frozen.
    pub fn freeze(&self) -> Result<(), CgroupError> {
        self.set_frozen(true)
    }

    /// Thaw a frozen cgroup, waiting until it runs again.
    pub fn thaw(&self) -> Result<(), CgroupError> {
        self.set_frozen(false)
    }

    /// Whether the cgroup is (completely) frozen.
    pub fn is_frozen(&self) -> Result<bool, CgroupError> {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { freezer, .. }) => {
                Ok(read(freezer.join("freezer.state"))?.trim() == "FROZEN")
            }
            CgroupPaths::V2 { path } => Ok(keyed(&path.join("cgroup.events"), "frozen")? == 1),
        }
    }

    fn set_frozen(&self, frozen: bool) -> Result<(), CgroupError> {
        let what = if frozen { "freezing" } else { "thawing" };
        match &self.paths {
            CgroupPaths::V1(V1Dirs { freezer, .. }) => {
                let state = freezer.join("freezer.state");
                let target = if frozen { "FROZEN" } else { "THAWED" };
                write(&state, target)?;
                poll(what, freezer, || Ok(read(&state)?.trim() == target))
            }
            CgroupPaths::V2 { path } => {
                write(&path.join("cgroup.freeze"), if frozen { "1" } else { "0" })?;
                let events = path.join("cgroup.events");
                poll(
                    what,
                    path,
                    || Ok((keyed(&events, "frozen")? == 1) == frozen),
                )
            }
        }
    }

    /// SIGKILL every process in the cgroup and its children, and wait until they are gone.
    /// v2 uses `cgroup.kill` (atomic, Linux 5.14+); v1 (and older v2) freezes the cgroup first so
    /// that nothing can fork while the processes are listed and killed, then thaws so the kills
    /// are delivered.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        let dir = self.procs_dir().to_path_buf();
        if !dir.exists() {
            return Ok(());
        }
        let kill_file = dir.join("cgroup.kill");
        if self.is_v2() && kill_file.exists() {
            write(&kill_file, "1")?;
        } else {
            // A freeze that does not complete (a task stuck in the kernel) still stops most of
            // the cgroup; killing, then thawing (so the kills are delivered) works regardless,
            // and the wait below reports what is left.
            let _ = self.freeze();
            self.kill_listed()?;
            self.thaw()?;
        }
        poll("killing every process", &dir, || {
            // Re-kill anything that slipped through (e.g. created while a v1 freeze was in progress).
            let left = self.pids()?;
            if !left.is_empty() && !self.is_v2() {
                self.kill_listed()?;
            }
            Ok(left.is_empty())
        })
    }

    fn kill_listed(&self) -> Result<(), CgroupError> {
        for pid in self.pids()? {
            match nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            ) {
                Ok(()) | Err(nix::Error::ESRCH) => {}
                Err(source) => {
                    return Err(CgroupError::Kill {
                        pid,
                        path: self.procs_dir().to_path_buf(),
                        source,
                    })
                }
            }
        }
        Ok(())
    }

    /// Host pids of every process in the cgroup and its children.
    pub fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        let mut out = Vec::new();
        collect_pids(self.procs_dir(), &mut out)?;
        Ok(out)
    }

    /// CPU time used by the cgroup's processes (children included) since it was created, in ns.
    pub fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { cpuacct, .. }) => parse_u64(&cpuacct.join("cpuacct.usage")),
            CgroupPaths::V2 { path } => Ok(keyed(&path.join("cpu.stat"), "usage_usec")? * 1000),
        }
    }

    /// Memory currently charged to the cgroup, in bytes.
    pub fn memory_bytes(&self) -> Result<u64, CgroupError> {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { memory, .. }) => {
                parse_u64(&memory.join("memory.usage_in_bytes"))
            }
            CgroupPaths::V2 { path } => parse_u64(&path.join("memory.current")),
        }
    }

    /// Highest memory charge since the cgroup was created, in bytes.
    pub fn memory_peak_bytes(&self) -> Result<u64, CgroupError> {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { memory, .. }) => {
                parse_u64(&memory.join("memory.max_usage_in_bytes"))
            }
            CgroupPaths::V2 { path } => parse_u64(&path.join("memory.peak")),
        }
    }

    /// How many processes of the cgroup (children included) the OOM killer has killed.
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        match &self.paths {
            CgroupPaths::V1(V1Dirs { memory, .. }) => {
                keyed(&memory.join("memory.oom_control"), "oom_kill")
            }
            CgroupPaths::V2 { path } => keyed(&path.join("memory.events"), "oom_kill"),
        }
    }

    /// Remove the cgroup and its children. Its processes must be gone (see [`Cgroup::kill_all`]);
    /// removal is retried for a while because the kernel releases an emptied cgroup
    /// asynchronously. A cgroup that no longer exists is not an error.
    pub fn remove(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + OPERATION_TIMEOUT;
        for dir in self.dirs() {
            remove_tree(&dir, deadline)?;
        }
        Ok(())
    }
}

impl Cgroup {
    /// The directories of this cgroup that still exist (after [`Cgroup::remove`]: none). For a
    /// caller that must know the host holds nothing of a sandbox any more.
    pub fn remaining_dirs(&self) -> Vec<PathBuf> {
        self.dirs()
            .into_iter()
            .filter(|d| fs::symlink_metadata(d).is_ok())
            .collect()
    }
}

/// A cgroup directory name Lizard makes: 1–128 of `[A-Za-z0-9._-]`, never `.` or `..`.
pub(crate) fn check_name(name: &str) -> Result<(), CgroupError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName(name.to_string()))
    }
}

fn max_or(v: Option<u64>) -> String {
    v.map_or_else(|| "max".to_string(), |v| v.to_string())
}

fn set_v1_memory(dir: &Path, bytes: Option<u64>) -> Result<(), CgroupError> {
    let value = bytes.map_or_else(|| "-1".to_string(), |b| b.to_string());
    let limit = dir.join("memory.limit_in_bytes");
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if !memsw.exists() {
        return write(&limit, &value);
    }
    // memory+swap must stay >= memory at every step: lower memory first, raise memsw first.
    match write(&limit, &value) {
        Ok(()) => write(&memsw, &value),
        Err(CgroupError::Write { ref source, .. })
            if source.raw_os_error() == Some(libc::EINVAL) =>
        {
            write(&memsw, &value)?;
            write(&limit, &value)
        }
        Err(e) => Err(e),
    }
}

/// Delegate `memory`, `pids` and `cpu` (those offered) from `dir` to its children.
fn enable_v2_controllers(dir: &Path) -> Result<(), CgroupError> {
    let offered = read(dir.join("cgroup.controllers"))?;
    let enabled = read(dir.join("cgroup.subtree_control"))?;
    let missing: Vec<String> = ["memory", "pids", "cpu"]
        .iter()
        .filter(|c| offered.split_whitespace().any(|o| o == **c))
        .filter(|c| !enabled.split_whitespace().any(|o| o == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let path = dir.join("cgroup.subtree_control");
    let value = missing.join(" ");
    fs::write(&path, &value).map_err(|source| {
        let hint = if source.raw_os_error() == Some(libc::EBUSY) {
            " (the cgroup holds processes: run the server in a leaf cgroup of a delegated subtree)"
        } else {
            ""
        };
        CgroupError::Write {
            path: path.clone(),
            value: format!("{value}{hint}"),
            source,
        }
    })
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>) -> Result<(), CgroupError> {
    let procs = dir.join("cgroup.procs");
    let text = match fs::read_to_string(&procs) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Read {
                path: procs,
                source,
            })
        }
    };
    for line in text.lines() {
        let pid = line.trim().parse().map_err(|_| CgroupError::Parse {
            path: procs.clone(),
            content: line.to_string(),
        })?;
        out.push(pid);
    }
    for sub in subdirs(dir)? {
        collect_pids(&sub, out)?;
    }
    Ok(())
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CgroupError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// At most this many cgroups are removed under one directory (each is one `rmdir`): more than a
/// sandbox could ever hold (cgroup ids are a host-wide resource of ≈ 65k per controller), so a
/// walk that gets this far is looping, not removing.
pub const MAX_REMOVE_COUNT: usize = 1 << 20;
/// At most this many levels below the removed directory: far deeper than `PATH_MAX` allows a path
/// to go, which the walk below does not care about (it never builds a path).
pub const MAX_REMOVE_DEPTH: usize = 1 << 16;

/// Remove `dir` and every cgroup below it, bottom-up, by descriptor: the walk goes down with
/// `openat(name)` and back up with `openat("..")`, removing each emptied child with
/// `unlinkat(parent, name, AT_REMOVEDIR)`. It never builds a path, so a tree nested deeper than
/// `PATH_MAX` (which a sandbox that could create cgroups might make) is removed like any other,
/// and it holds two descriptors at a time whatever the depth. Symlinks are never followed
/// (`O_NOFOLLOW`; cgroupfs has none). Bounded by [`MAX_REMOVE_DEPTH`] and [`MAX_REMOVE_COUNT`];
/// a child still busy (its last process leaving) is retried until `deadline`.
fn remove_tree(dir: &Path, deadline: Instant) -> Result<(), CgroupError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    use std::ffi::OsString;
    use std::os::fd::OwnedFd;

    let failed = |source: io::Error| CgroupError::Remove {
        path: dir.to_path_buf(),
        source,
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut cur: OwnedFd = match nix::fcntl::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::Error::ENOENT) => return Ok(()),
        Err(e) => return Err(failed(e.into())),
    };
    // The names from `dir` down to `cur` (memory only: no descriptor per level).
    let mut names: Vec<OsString> = Vec::new();
    let mut removed = 0usize;
    loop {
        if let Some(child) = first_subdir(&cur).map_err(|e| failed(e.into()))? {
            if names.len() >= MAX_REMOVE_DEPTH {
                return Err(failed(io::Error::other(format!(
                    "more than {MAX_REMOVE_DEPTH} levels of cgroups"
                ))));
            }
            match openat(&cur, child.as_os_str(), flags, Mode::empty()) {
                Ok(fd) => {
                    cur = fd;
                    names.push(child);
                }
                // Removed meanwhile: look again.
                Err(nix::Error::ENOENT) => {}
                Err(e) => return Err(failed(e.into())),
            }
            continue;
        }
        // `cur` has no children left: remove it from its parent, then go on with the parent.
        let Some(name) = names.pop() else { break };
        let parent = openat(&cur, "..", flags, Mode::empty()).map_err(|e| failed(e.into()))?;
        cur = parent;
        rmdir_at(&cur, &name, deadline).map_err(failed)?;
        removed += 1;
        if removed >= MAX_REMOVE_COUNT {
            return Err(failed(io::Error::other(format!(
                "more than {MAX_REMOVE_COUNT} cgroups"
            ))));
        }
    }
    drop(cur);
    let mut pause = Duration::from_micros(200);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(source) => return Err(failed(source)),
        }
    }
}

/// The name of one subdirectory of the directory `fd` (not `.` or `..`), if it has any.
fn first_subdir(fd: &std::os::fd::OwnedFd) -> nix::Result<Option<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    // A fresh descriptor of the same directory: `Dir` takes ownership and reads from offset 0.
    let dup = nix::fcntl::openat(
        fd,
        ".",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let mut dir = nix::dir::Dir::from_fd(dup)?;
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if entry.file_type() == Some(nix::dir::Type::Directory) {
            return Ok(Some(std::ffi::OsStr::from_bytes(name).to_os_string()));
        }
    }
    Ok(None)
}

/// `unlinkat(parent, name, AT_REMOVEDIR)`, retried while the cgroup is busy (until `deadline`); a
/// cgroup already gone is removed.
fn rmdir_at(
    parent: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    deadline: Instant,
) -> io::Result<()> {
    let mut pause = Duration::from_micros(200);
    loop {
        match nix::unistd::unlinkat(parent, name, nix::unistd::UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(nix::Error::ENOENT) => return Ok(()),
            Err(nix::Error::EBUSY) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn mkdir_p(dir: &Path) -> Result<(), CgroupError> {
    fs::create_dir_all(dir).map_err(|source| CgroupError::Create {
        path: dir.to_path_buf(),
        source,
    })
}

/// Poll `done` with a growing pause until it is true or [`OPERATION_TIMEOUT`] passes.
fn poll(
    what: &'static str,
    path: &Path,
    mut done: impl FnMut() -> Result<bool, CgroupError>,
) -> Result<(), CgroupError> {
    let deadline = Instant::now() + OPERATION_TIMEOUT;
    let mut pause = Duration::from_micros(100);
    loop {
        if done()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CgroupError::Timeout {
                what,
                path: path.to_path_buf(),
                timeout: OPERATION_TIMEOUT,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Read a cgroup file (shared with `crate::delegation`).
pub(crate) fn read(path: impl AsRef<Path>) -> Result<String, CgroupError> {
    let path = path.as_ref();
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Write a cgroup file (shared with `crate::delegation`).
pub(crate) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

fn parse_u64(path: &Path) -> Result<u64, CgroupError> {
    parse(path)
}

/// A cgroup file holding one number (shared with `crate::delegation`).
pub(crate) fn parse<T: std::str::FromStr>(path: &Path) -> Result<T, CgroupError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| CgroupError::Parse {
        path: path.to_path_buf(),
        content: text,
    })
}

/// The value of `key` in a flat keyed file (`key value` per line).
fn keyed(path: &Path, key: &str) -> Result<u64, CgroupError> {
    let text = read(path)?;
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
        })
        .ok_or_else(|| CgroupError::Parse {
            path: path.to_path_buf(),
            content: format!("no `{key}` in {text:?}"),
        })
}

/// What [`favor_dynamic_moves`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FavorDynmods {
    /// The cgroup2 hierarchy mounted there had `favordynmods` already.
    AlreadyOn(PathBuf),
    /// It has it now.
    TurnedOn(PathBuf),
    /// Nothing done, and why (no cgroup2 mount, a kernel without the option).
    Unavailable(String),
}

/// Make moving processes between cgroups cheap, host-wide, by setting `favordynmods` on the
/// cgroup2 hierarchy (its other options kept).
///
/// Every move of a process into a cgroup (`cgroup.procs`, v1 or v2) takes the kernel's global
/// `cgroup_threadgroup_rwsem` for writing, which by default waits for an RCU grace period:
/// 8–24 ms each on this 2-core machine, on the path of every sandbox launch and context start.
/// `favordynmods` keeps that lock in the mode whose writers do not wait (0.2 ms a move, measured),
/// at the price the kernel documents: forks and exits take a slower read path. The lock is
/// shared by all hierarchies, so the cgroup2 mount's option serves a host whose controllers are
/// on cgroup v1 too. The option stays set after the caller exits (like a sysctl); the kernel
/// must list it in `/sys/kernel/cgroup/features`.
pub fn favor_dynamic_moves() -> Result<FavorDynmods, CgroupError> {
    let features = std::fs::read_to_string("/sys/kernel/cgroup/features").unwrap_or_default();
    if !features.lines().any(|l| l.trim() == "favordynmods") {
        return Ok(FavorDynmods::Unavailable(
            "the kernel has no favordynmods (/sys/kernel/cgroup/features)".into(),
        ));
    }
    let mountinfo = read("/proc/self/mountinfo")?;
    let Some(m) = parse_mountinfo(&mountinfo)
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
    else {
        return Ok(FavorDynmods::Unavailable("no cgroup2 mount".into()));
    };
    let Some(flags) = favordynmods_flags(&m.super_opts) else {
        return Ok(FavorDynmods::AlreadyOn(m.mountpoint));
    };
    let c = |s: &str| {
        std::ffi::CString::new(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let at = c(&m.mountpoint.to_string_lossy()).map_err(|source| CgroupError::Reconfigure {
        path: m.mountpoint.clone(),
        source,
    })?;
    let flags = flags
        .iter()
        .map(|f| c(f))
        .collect::<io::Result<Vec<_>>>()
        .and_then(|flags| {
            let refs: Vec<&std::ffi::CStr> = flags.iter().map(|f| f.as_c_str()).collect();
            crate::sys::reconfigure_with_flags(&at, &refs)
        });
    flags.map_err(|source| CgroupError::Reconfigure {
        path: m.mountpoint.clone(),
        source,
    })?;
    Ok(FavorDynmods::TurnedOn(m.mountpoint))
}

/// The flag options a cgroup2 superblock with options `super_opts` (mountinfo's last field) is
/// reconfigured with to gain `favordynmods`, keeping the others; `None` when it has it.
fn favordynmods_flags(super_opts: &str) -> Option<Vec<String>> {
    let mut flags: Vec<String> = super_opts
        .split(',')
        .filter(|o| !o.is_empty() && *o != "rw" && *o != "ro")
        .map(str::to_string)
        .collect();
    if flags.iter().any(|f| f == "favordynmods") {
        return None;
    }
    flags.push("favordynmods".into());
    Some(flags)
}

struct Mount {
    root: String,
    mountpoint: PathBuf,
    fstype: String,
    super_opts: String,
}

fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                root: unescape(l.get(3)?),
                mountpoint: PathBuf::from(unescape(l.get(4)?)),
                fstype: r.first()?.to_string(),
                super_opts: r.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// Undo mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = |j: usize| b.get(j).is_some_and(|c| (b'0'..=b'7').contains(c));
        let value = (b[i] == b'\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)).then(|| {
            let d = |j: usize| u32::from(b[j] - b'0');
            d(i + 1) * 64 + d(i + 2) * 8 + d(i + 3)
        });
        if let Some(v) = value.and_then(|v| u8::try_from(v).ok()) {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The caller's cgroup path in the v1 hierarchy holding `controller`, or in v2 (`None`).
fn own_path(table: &str, controller: Option<&str>) -> Option<String> {
    table.lines().find_map(|line| {
        let mut it = line.splitn(3, ':');
        let id = it.next()?;
        let controllers = it.next()?;
        let path = it.next()?;
        let hit = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        hit.then(|| path.to_string())
    })
}

/// `<mountpoint>/<cgroup path relative to the mount's root>`.
fn join_cgroup(mountpoint: &Path, mount_root: &str, path: &str) -> PathBuf {
    let root = mount_root.trim_end_matches('/');
    let rel = match path.strip_prefix(root) {
        Some(rest) if !root.is_empty() && (rest.is_empty() || rest.starts_with('/')) => rest,
        _ => path,
    };
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mountpoint.to_path_buf()
    } else {
        mountpoint.join(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn favordynmods_keeps_the_other_cgroup2_options() {
        assert_eq!(
            favordynmods_flags("rw"),
            Some(vec!["favordynmods".to_string()])
        );
        assert_eq!(
            favordynmods_flags("rw,nsdelegate,memory_recursiveprot"),
            Some(vec![
                "nsdelegate".to_string(),
                "memory_recursiveprot".to_string(),
                "favordynmods".to_string()
            ])
        );
        assert_eq!(favordynmods_flags("rw,nsdelegate,favordynmods"), None);
    }

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const OWN: &str = "\
8:pids:/
6:freezer:/
4:memory:/process_api/0df9
2:cpuacct:/
1:cpu:/
0::/
";

    #[test]
    fn hierarchy_paths_are_the_paths_inside_each_hierarchy() {
        let at = |c: &str| PathBuf::from(format!("/sys/fs/cgroup/{c}/srv/lizard/sb1"));
        let cg = Cgroup {
            paths: CgroupPaths::V1(V1Dirs {
                memory: at("memory"),
                pids: at("pids"),
                cpu: at("cpu"),
                cpuacct: at("cpuacct"),
                freezer: at("freezer"),
            }),
        };
        let got = cg.hierarchy_paths_in(MOUNTINFO).unwrap();
        assert_eq!(got.len(), 5);
        for (c, p) in &got {
            assert!(c.is_some());
            assert_eq!(p, "/srv/lizard/sb1");
        }
        let v2 = Cgroup {
            paths: CgroupPaths::V2 {
                path: "/sys/fs/cgroup/unified/a/lizard/x".into(),
            },
        };
        assert_eq!(
            v2.hierarchy_paths_in(MOUNTINFO).unwrap(),
            vec![(None, "/a/lizard/x".to_string())]
        );
        // Not below any mount of its hierarchy: an error, not a guess.
        let lost = Cgroup {
            paths: CgroupPaths::V2 {
                path: "/elsewhere/x".into(),
            },
        };
        assert!(lost.hierarchy_paths_in(MOUNTINFO).is_err());
    }

    #[test]
    fn v1_under_own_cgroup_when_v2_has_no_controllers() {
        let h = Hierarchy::from_tables(MOUNTINFO, OWN, |_| Some(String::new())).unwrap();
        assert_eq!(
            h,
            Hierarchy::V1(V1Dirs {
                memory: "/sys/fs/cgroup/memory/process_api/0df9".into(),
                pids: "/sys/fs/cgroup/pids".into(),
                cpu: "/sys/fs/cgroup/cpu".into(),
                cpuacct: "/sys/fs/cgroup/cpuacct".into(),
                freezer: "/sys/fs/cgroup/freezer".into(),
            })
        );
    }

    #[test]
    fn v2_when_it_offers_the_controllers() {
        let own = "0::/system.slice/lizard.service\n";
        let mi = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let h = Hierarchy::from_tables(mi, own, |p| {
            assert_eq!(p, Path::new("/sys/fs/cgroup/system.slice/lizard.service"));
            Some("cpuset cpu io memory pids\n".into())
        })
        .unwrap();
        assert_eq!(
            h,
            Hierarchy::V2 {
                own: "/sys/fs/cgroup/system.slice/lizard.service".into()
            }
        );
    }

    #[test]
    fn co_mounted_controllers_and_escapes() {
        let mi = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                  33 31 0:30 / /cg\\040x/memory rw - cgroup cgroup rw,memory\n\
                  34 31 0:31 /ns /cg/pids rw - cgroup cgroup rw,pids\n\
                  35 31 0:32 / /cg/freezer rw - cgroup cgroup rw,freezer\n";
        let own = "5:cpu,cpuacct:/a\n4:memory:/b\n3:pids:/ns/c\n2:freezer:/\n";
        let h = Hierarchy::from_tables(mi, own, |_| None).unwrap();
        let Hierarchy::V1(V1Dirs {
            memory,
            pids,
            cpu,
            cpuacct,
            freezer,
        }) = h
        else {
            panic!("v1 expected")
        };
        assert_eq!(cpu, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/a"));
        assert_eq!(cpu, cpuacct);
        assert_eq!(memory, PathBuf::from("/cg x/memory/b"));
        assert_eq!(pids, PathBuf::from("/cg/pids/c"));
        assert_eq!(freezer, PathBuf::from("/cg/freezer"));
    }

    #[test]
    fn missing_hierarchy_is_an_error() {
        let err = Hierarchy::from_tables("", OWN, |_| None).unwrap_err();
        assert!(matches!(err, CgroupError::NoHierarchy(_)), "{err}");
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(129)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("sbx-01.a_b").unwrap();
    }

    #[test]
    fn serializes_as_tagged_paths() {
        let cg = Cgroup {
            paths: CgroupPaths::V2 {
                path: "/sys/fs/cgroup/x".into(),
            },
        };
        let json = serde_json::to_string(&cg).unwrap();
        assert_eq!(json, r#"{"version":"v2","path":"/sys/fs/cgroup/x"}"#);
        let back: Cgroup = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cg);
        // v1: the directories beside the tag, as sandboxes launched by earlier releases have them.
        let v1 = r#"{"version":"v1","memory":"/m","pids":"/p","cpu":"/c","cpuacct":"/c","freezer":"/f"}"#;
        let cg: Cgroup = serde_json::from_str(v1).unwrap();
        assert_eq!(serde_json::to_string(&cg).unwrap(), v1);
        assert_eq!(
            cg.paths().dirs()[4],
            (Some("freezer"), &PathBuf::from("/f"))
        );
        let unknown = v1.replace(r#""pids""#, r#""pidz""#);
        assert!(serde_json::from_str::<Cgroup>(&unknown).is_err());
    }
}
