//! What a sandbox is made of: [`SandboxSpec`], the JSON document `lizard sandbox-init` reads on
//! stdin, and its validation.
//!
//! Not here: how the spec is carried out (`sandbox::launch`), or where its values come from (the
//! server: template paths, sandbox ids, default limits).

use crate::cgroup::CgroupLimits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Everything needed to start one program as PID 1 of a fresh sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// The sandbox id: the cgroup leaf name. 1-64 of `A-Z a-z 0-9 . _ -`.
    pub id: String,
    /// Host name inside the sandbox (usually the id). 1-64 bytes.
    pub hostname: String,
    /// The root filesystem: template (read-only) + writable layer.
    pub rootfs: RootfsSpec,
    /// Host paths bind-mounted into the sandbox (after the root, before `/proc` and `/dev`).
    #[serde(default)]
    pub binds: Vec<Bind>,
    /// uid and gid mapping of the sandbox's user namespace.
    pub id_map: IdMap,
    /// The host id that the template layer's files (and those of `idmapped` binds) use on disk
    /// for the sandbox's id 0 (`lizard template build` shifts them by the template's id shift).
    /// When set and different from `id_map.outside`, the lower layer and the `idmapped` binds are
    /// mounted idmapped (`layer_id_base + id_map.inside + k` on disk ↔ `id_map.outside + k` on
    /// the host), so a sandbox can have a host id range of its own while sharing the template and
    /// volumes with sandboxes of other ranges. `None`: the layers are used as they are on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_id_base: Option<u32>,
    /// Make the sandbox's user namespace inside another one, owned there by a host uid, so that a
    /// process of that uid in that namespace can `setns` into the sandbox with no capability at
    /// all: the shared zygote's way in (`docs/design/shared-zygote.md`). `None` (the default):
    /// the sandbox's user namespace is a child of the host's, root's. A restore ignores it (CRIU
    /// makes the namespaces as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns_parent: Option<UsernsParent>,
    /// Who the program runs as (ids inside the sandbox).
    pub user: UserSpec,
    /// Capabilities the program keeps (only with `user.uid` 0, the sandbox's root): they are the
    /// sandbox's whole bounding set, so no process in the sandbox can ever hold another one, and
    /// they survive the program's `execve` (and the execs of its children that stay root). Empty
    /// (the default): the program holds no capability at all, whoever it runs as. Capabilities
    /// here are the sandbox user namespace's, which owns none of the sandbox's other namespaces
    /// (see `sandbox::child`): they act on the sandbox's own processes and files only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_caps: Vec<Capability>,
    /// Working directory of the program (inside).
    pub cwd: PathBuf,
    /// The program to execute (absolute path inside); `argv[0]` is this path. With
    /// `program_source` it is only `argv[0]` and need not exist inside.
    pub program: PathBuf,
    /// Host path of the program's file, opened by the launcher (as host root, before it enters
    /// any namespace) and executed by descriptor (`execveat(AT_EMPTY_PATH)`): the sandbox's mount
    /// table then holds nothing of the program. Typically `/proc/<server pid>/fd/<n>` of a
    /// [`crate::exe::SealedExe`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_source: Option<PathBuf>,
    /// `argv[1..]`.
    #[serde(default)]
    pub args: Vec<String>,
    /// The program's complete environment: nothing is inherited from the host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Delegate a sub-tree of the sandbox's cgroup to `user` and bind it at
    /// `/sys/fs/cgroup/<controller>` inside, for per-context cgroups (see `crate::delegation`;
    /// cgroup v1 only, nothing is delegated on v2).
    #[serde(default)]
    pub context_cgroups: bool,
    /// Host file that receives the program's stdout and stderr (appended; created mode 0640),
    /// opened read-write and non-blocking: typically a FIFO whose other end the caller drains
    /// into a bounded log (the sandbox then cannot grow a host file), or a plain file. The
    /// program's stdin is `/dev/null`.
    pub log_path: PathBuf,
    /// Descriptors the launcher opens as host root before the clone (outside the sandbox's
    /// reach: nothing inside can name or replace what they refer to) and hands to the program at
    /// fds 3, 4, 5, … in this order. Only these are inherited (not close-on-exec); every other
    /// descriptor of the launcher is closed at exec. At most [`MAX_INHERIT_FDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_fds: Vec<InheritFd>,
    /// Instead of starting `program`, restore a CRIU checkpoint of a sandbox launched from this
    /// same spec (see [`RestoreFrom`], `sandbox::launch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreFrom>,
}

/// A CRIU checkpoint to restore in place of a launch: the same host side as a launch (cgroup with
/// its limits and delegated tree, the overlay root, the log, the listening sockets), then `criu
/// restore` into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreFrom {
    /// The CRIU program (`checkpoint::Criu`).
    pub criu: PathBuf,
    /// Its `/run` (`checkpoint::Criu::run_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub criu_run_dir: Option<PathBuf>,
    /// For a dump with `empty_netns`: the command (program and arguments, host paths) that
    /// CRIU's action script execs to configure the restored network namespace
    /// (`checkpoint::setup_restored_netns`; the server's: `lizard sandbox-netns-setup`). Such a
    /// restore without it is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub netns_setup: Vec<String>,
    /// The images directory (host-side, root-only parent, see `checkpoint::ImagesDir`).
    pub images: PathBuf,
    /// What the dump was told was external (mounts, host files, the listening sockets'
    /// inodes, in `inherit_fds` order).
    pub dumped: crate::checkpoint::DumpSpec,
    /// Deadline of the restore, in milliseconds.
    pub deadline_ms: u64,
}

/// At most this many lower layers in [`RootfsSpec::lower`] (a template chain's depth).
pub const MAX_LOWER_LAYERS: usize = 16;

/// At most this many [`SandboxSpec::inherit_fds`].
pub const MAX_INHERIT_FDS: usize = 16;

/// One descriptor handed to the sandbox's program (see [`SandboxSpec::inherit_fds`]). Paths are
/// host paths, resolved by the launcher as host root: they must be the host's own, never a path a
/// sandbox can write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum InheritFd {
    /// An `AF_UNIX SOCK_STREAM` socket bound at `path` (mode 0600; an old entry there is removed
    /// first) but **not listening**: the program calls `listen(2)`, so a client's `SO_PEERCRED`
    /// names the program. `path`'s directory must be root's and writable by root only, and so
    /// must every directory above it (or be sticky, like `/tmp`), reached without following a
    /// symlink (see `crate::hostpath`); the launcher refuses otherwise. The sandbox never sees
    /// the path: only the descriptor.
    UnixListener { path: PathBuf },
    /// A file opened read-only (symlinks followed: e.g. `/proc/<pid>/fd/<n>` of a sealed
    /// executable).
    ReadOnlyFile { path: PathBuf },
}

/// The overlay root: `lower` is the template's layers, top first (read-only, shared: a template
/// built on another one is its own layer over its base's; a template from scratch is one layer),
/// `upper`/`work` the sandbox's own writable layer, `mountpoint` where the overlay is assembled
/// (inside the sandbox's mount namespace only). Every lower layer is shown through the same id map
/// (see [`SandboxSpec::layer_id_base`]). The caller creates the directories; the launcher gives
/// `upper` the owner and mode of the top lower layer's root so that `/` inside looks like the
/// template's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootfsSpec {
    /// 1 to [`MAX_LOWER_LAYERS`] host directories, top first.
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub mountpoint: PathBuf,
}

/// A bind mount of the host path `source` onto `target` inside the sandbox (always `nosuid,nodev`,
/// and read-only when `readonly`). A missing target is created (a directory, or an empty file when
/// `source` is a file) in the writable layer, owned by the sandbox's root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    pub source: PathBuf,
    pub target: PathBuf,
    #[serde(default)]
    pub readonly: bool,
    /// Fail instead of following any symlink on the way to `target` (volumes: a mount point is
    /// a plain path, never redirected, not even inside the root).
    #[serde(default)]
    pub no_symlinks: bool,
    /// Shared data owned on disk by the template's range (volumes): mounted through the same id
    /// map as the template layer (see [`SandboxSpec::layer_id_base`]), so its files stay
    /// `layer_id_base + id` on disk whichever sandbox writes them. A plain bind without an id map.
    #[serde(default)]
    pub idmapped: bool,
}

/// The user namespace a sandbox's own is made in ([`SandboxSpec::userns_parent`]): one that the
/// host's root owns (so root keeps every capability over the sandbox: CRIU needs them) and that
/// maps `uid`, `gid` and the sandbox's host ids each to itself. `crate::host_zygote::joinable_userns`
/// makes one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsernsParent {
    /// Where the launcher opens it: `/proc/<pid>/fd/<n>` of a descriptor the caller holds.
    pub path: PathBuf,
    /// The host uid and gid that own the sandbox's user namespace.
    pub uid: u32,
    pub gid: u32,
}

/// ids `inside..inside+count` of the sandbox are ids `outside..outside+count` of the host (the
/// same map for uids and gids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdMap {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

impl IdMap {
    /// The host id shown for the on-disk id `id` of a layer whose sandbox id 0 is `layer_base`
    /// on disk (see [`SandboxSpec::layer_id_base`]); ids outside the layer's range are unchanged.
    pub fn layer_to_outside(&self, layer_base: u32, id: u32) -> u32 {
        id.checked_sub(layer_base)
            .and_then(|inside| self.to_outside(inside))
            .unwrap_or(id)
    }

    /// The host id of the sandbox id `id`, if mapped.
    pub fn to_outside(&self, id: u32) -> Option<u32> {
        let off = id.checked_sub(self.inside)?;
        (off < self.count).then(|| self.outside + off)
    }

    /// Whether the host id `id` is one of the sandbox's.
    pub fn holds_outside(&self, id: u32) -> bool {
        id.checked_sub(self.outside)
            .is_some_and(|off| off < self.count)
    }
}

/// The user the program runs as, as ids inside the sandbox (no supplementary groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub uid: u32,
    pub gid: u32,
}

/// A capability PID 1 may keep ([`SandboxSpec::keep_caps`]): those an agent that manages user
/// processes of other uids needs, nothing that reaches a namespace or the kernel (no
/// `CAP_SYS_ADMIN`, `CAP_NET_ADMIN`, `CAP_SYS_PTRACE`, `CAP_SETPCAP`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Change its own file-system ids (`setfsuid`) and give children other ids.
    Setuid,
    /// The same for groups (and `setgroups([])` in children).
    Setgid,
    /// Signal processes of other uids (kernels, commands).
    Kill,
    /// Give files to other uids (a context's saved state).
    Chown,
    /// Act on files of other uids as their owner (modes, removal in sticky directories).
    Fowner,
    /// Read and write files of other uids (saved state, `/proc/<pid>/oom_score_adj`).
    DacOverride,
    /// Keep the set-user/group-id bits of files it writes or gives away, and set the set-group-id
    /// bit on files of groups it is not in (the sandbox's root installing packages: `dpkg`
    /// unpacks setgid programs such as `chage`, `ssh-agent`). Acts on its own sandbox's files only
    /// (ids mapped in its user namespace), and the bits grant nothing inside (`no_new_privs`).
    Fsetid,
}

/// The capabilities a sandbox's agent keeps (the sandbox's whole bounding set): changing ids to run
/// user code as the sandbox user and the context uids (and `setfsuid` for the files API),
/// signalling those processes, and giving saved state to, and reading it from, the context that
/// owns it; and for the sandbox's root (`sudo`, commands with `user: "root"`, which run with this
/// same set) keeping set-id bits of the files it installs (`CAP_FSETID`: `dpkg`). Nothing that
/// reaches a namespace, the kernel or the host (see SECURITY.md, "Root inside the sandbox").
pub const AGENT_CAPS: [Capability; 7] = [
    Capability::Setuid,
    Capability::Setgid,
    Capability::Kill,
    Capability::Chown,
    Capability::Fowner,
    Capability::DacOverride,
    Capability::Fsetid,
];

impl Capability {
    /// The capability's number (`linux/capability.h`).
    pub fn number(self) -> u32 {
        match self {
            Capability::Chown => 0,
            Capability::DacOverride => 1,
            Capability::Fowner => 3,
            Capability::Fsetid => 4,
            Capability::Kill => 5,
            Capability::Setgid => 6,
            Capability::Setuid => 7,
        }
    }

    /// The set of `caps` as a mask (bit n = capability n).
    pub fn mask(caps: &[Capability]) -> u64 {
        caps.iter().fold(0, |m, c| m | 1u64 << c.number())
    }
}

/// Resource limits of a sandbox; `None` is unlimited (tmpfs: the kernel's default size, half of
/// RAM, still charged to the memory limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory (and memory+swap) limit of the sandbox's cgroup.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Maximum number of tasks (processes and threads) in the sandbox.
    #[serde(default)]
    pub pids_max: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU (1000 = one CPU); at least 10.
    #[serde(default)]
    pub cpu_millicores: Option<u64>,
    /// Size of the `/tmp` tmpfs (and of `/dev/shm`).
    #[serde(default)]
    pub tmp_bytes: Option<u64>,
    /// `RLIMIT_NOFILE` (soft and hard) of the program; cannot exceed the launcher's hard limit
    /// unless it has CAP_SYS_RESOURCE.
    #[serde(default)]
    pub nofile: Option<u64>,
    /// PTYs the sandbox's own devpts instance holds at most (its `max=`); default
    /// `DEFAULT_PTYS_MAX` (64). The host's pool (`kernel.pty.max`) is shared by every instance.
    #[serde(default)]
    pub ptys_max: Option<u64>,
}

impl Limits {
    /// The cgroup part of the limits.
    pub fn cgroup(&self) -> CgroupLimits {
        CgroupLimits {
            memory_bytes: self.memory_bytes,
            pids_max: self.pids_max,
            cpu_millicores: self.cpu_millicores,
        }
    }
}

impl SandboxSpec {
    /// The paths of its `inherit_fds` that are Unix listeners, in order.
    pub fn unix_listener_paths(&self) -> Vec<&PathBuf> {
        self.inherit_fds
            .iter()
            .filter_map(|f| match f {
                InheritFd::UnixListener { path } => Some(path),
                InheritFd::ReadOnlyFile { .. } => None,
            })
            .collect()
    }

    /// Check everything that can be checked before launching; the error names the field.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let bad = |field: &str, reason: String| {
            Err(InvalidSpec {
                field: field.to_string(),
                reason,
            })
        };
        let id_ok = !self.id.is_empty()
            && self.id.len() <= 64
            && !self.id.starts_with('.')
            && self
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !id_ok {
            return bad(
                "id",
                "1-64 of A-Z a-z 0-9 . _ - not starting with '.'".into(),
            );
        }
        if self.hostname.is_empty() || self.hostname.len() > 64 || self.hostname.contains('\0') {
            return bad("hostname", "1-64 bytes without NUL".into());
        }
        if let Some(p) = &self.userns_parent {
            for (field, id) in [("userns_parent.uid", p.uid), ("userns_parent.gid", p.gid)] {
                if id == 0 || id == u32::MAX || self.id_map.holds_outside(id) {
                    return bad(
                        field,
                        "a host id other than root and the sandbox's own ids".into(),
                    );
                }
            }
            absolute("userns_parent.path", &p.path)?;
        }
        if self.rootfs.lower.is_empty() || self.rootfs.lower.len() > MAX_LOWER_LAYERS {
            return bad("rootfs.lower", format!("1 to {MAX_LOWER_LAYERS} layers"));
        }
        for (i, l) in self.rootfs.lower.iter().enumerate() {
            absolute(&format!("rootfs.lower[{i}]"), l)?;
            // overlayfs separates lower layers with ':' (and takes '\\' and ',' as escapes and
            // option separators): a layer path holds none of them.
            if l.as_os_str()
                .as_encoded_bytes()
                .iter()
                .any(|b| matches!(b, b':' | b',' | b'\\'))
            {
                return bad(
                    &format!("rootfs.lower[{i}]"),
                    "no ':', ',' or '\\' in a layer path".into(),
                );
            }
            if self.rootfs.lower[..i].contains(l) {
                return bad(
                    &format!("rootfs.lower[{i}]"),
                    "a layer is listed twice".into(),
                );
            }
        }
        absolute("rootfs.upper", &self.rootfs.upper)?;
        absolute("rootfs.work", &self.rootfs.work)?;
        absolute("rootfs.mountpoint", &self.rootfs.mountpoint)?;
        absolute("log_path", &self.log_path)?;
        for (i, b) in self.binds.iter().enumerate() {
            absolute(&format!("binds[{i}].source"), &b.source)?;
            inside_path(&format!("binds[{i}].target"), &b.target)?;
        }
        inside_path("cwd", &self.cwd)?;
        inside_path("program", &self.program)?;
        if let Some(p) = &self.program_source {
            absolute("program_source", p)?;
        }
        if self.inherit_fds.len() > MAX_INHERIT_FDS {
            return bad(
                "inherit_fds",
                format!("at most {MAX_INHERIT_FDS} descriptors"),
            );
        }
        for (i, fd) in self.inherit_fds.iter().enumerate() {
            let field = format!("inherit_fds[{i}].path");
            match fd {
                InheritFd::UnixListener { path } => {
                    inside_path(&field, path)?;
                    let name_ok = path
                        .file_name()
                        .is_some_and(|n| n.len() <= crate::hostpath::MAX_SOCKET_NAME)
                        && path.parent().is_some_and(|p| p != Path::new("/"));
                    if !name_ok {
                        return bad(
                            &field,
                            format!(
                                "a file name of at most {} bytes in a directory other than /",
                                crate::hostpath::MAX_SOCKET_NAME
                            ),
                        );
                    }
                }
                InheritFd::ReadOnlyFile { path } => absolute(&field, path)?,
            }
        }
        if self.id_map.count == 0
            || self.id_map.inside.checked_add(self.id_map.count).is_none()
            || self.id_map.outside.checked_add(self.id_map.count).is_none()
        {
            return bad(
                "id_map",
                "count must be > 0 and the ranges must fit in u32".into(),
            );
        }
        if let Some(base) = self.layer_id_base {
            let fits = base
                .checked_add(self.id_map.inside)
                .and_then(|b| b.checked_add(self.id_map.count))
                .is_some();
            if !fits {
                return bad(
                    "layer_id_base",
                    "layer_id_base + id_map.inside + id_map.count must fit in u32".into(),
                );
            }
        }
        if self.id_map.to_outside(self.user.uid).is_none() {
            return bad("user.uid", "not mapped by id_map".into());
        }
        if self.id_map.to_outside(self.user.gid).is_none() {
            return bad("user.gid", "not mapped by id_map".into());
        }
        if !self.keep_caps.is_empty() && self.user.uid != 0 {
            return bad(
                "keep_caps",
                "only a program running as the sandbox's root (user.uid 0) keeps capabilities"
                    .into(),
            );
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
                return bad("env", format!("invalid variable {k:?}"));
            }
        }
        if self.args.iter().any(|a| a.contains('\0')) {
            return bad("args", "an argument contains NUL".into());
        }
        if let Some(m) = self.limits.cpu_millicores {
            if m < 10 {
                return bad("limits.cpu_millicores", "at least 10".into());
            }
        }
        if self.limits.tmp_bytes == Some(0)
            || self.limits.nofile == Some(0)
            || self.limits.ptys_max == Some(0)
        {
            return bad(
                "limits",
                "tmp_bytes, nofile and ptys_max must not be 0".into(),
            );
        }
        Ok(())
    }
}

/// A spec field that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("invalid sandbox spec: {field}: {reason}")]
pub struct InvalidSpec {
    pub field: String,
    pub reason: String,
}

fn absolute(field: &str, p: &Path) -> Result<(), InvalidSpec> {
    if p.is_absolute() && !p.to_string_lossy().contains('\0') {
        Ok(())
    } else {
        Err(InvalidSpec {
            field: field.to_string(),
            reason: format!("{} is not an absolute path", p.display()),
        })
    }
}

/// An absolute path inside the sandbox without `..` (so it cannot point above the root).
fn inside_path(field: &str, p: &Path) -> Result<(), InvalidSpec> {
    absolute(field, p)?;
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(InvalidSpec {
            field: field.to_string(),
            reason: format!("{} contains ..", p.display()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn example() -> SandboxSpec {
        serde_json::from_str(
            r#"{
            "id": "sbx1", "hostname": "sbx1",
            "rootfs": {"lower": ["/t/root"], "upper": "/s/upper", "work": "/s/work", "mountpoint": "/s/root"},
            "binds": [{"source": "/s/run", "target": "/run/lizard", "readonly": false}],
            "id_map": {"inside": 0, "outside": 100000, "count": 65536},
            "user": {"uid": 1000, "gid": 1000},
            "cwd": "/home/user", "program": "/bin/sh", "args": ["-c", "true"],
            "env": {"PATH": "/bin"},
            "limits": {"memory_bytes": 1000000, "pids_max": 10},
            "log_path": "/s/log",
            "inherit_fds": [{"kind": "unix_listener", "path": "/s/agent.sock"},
                            {"kind": "read_only_file", "path": "/proc/1/fd/3"}]
        }"#,
        )
        .unwrap()
    }

    fn parent(id: u32) -> UsernsParent {
        UsernsParent {
            path: "/proc/1/fd/3".into(),
            uid: id,
            gid: id,
        }
    }

    #[test]
    fn a_good_spec_validates() {
        example().validate().unwrap();
        let mut owned = example();
        owned.userns_parent = Some(parent(99_999));
        owned.validate().unwrap();
        owned.userns_parent = Some(parent(165_536));
        owned.validate().unwrap();
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let mut v: serde_json::Value = serde_json::to_value(example()).unwrap();
        v["limits"]["swap"] = 1.into();
        assert!(serde_json::from_value::<SandboxSpec>(v).is_err());
    }

    #[test]
    fn bad_fields_are_named() {
        type Change = Box<dyn Fn(&mut SandboxSpec)>;
        let cases: Vec<(&str, Change)> = vec![
            ("id", Box::new(|s| s.id = "a/b".into())),
            ("rootfs.upper", Box::new(|s| s.rootfs.upper = "a/b".into())),
            ("rootfs.lower", Box::new(|s| s.rootfs.lower.clear())),
            (
                "rootfs.lower",
                Box::new(|s| s.rootfs.lower = vec!["/l".into(); MAX_LOWER_LAYERS + 1]),
            ),
            (
                "rootfs.lower[1]",
                Box::new(|s| s.rootfs.lower.push("t/layer".into())),
            ),
            (
                "rootfs.lower[1]",
                Box::new(|s| s.rootfs.lower.push("/t/a:b".into())),
            ),
            (
                "rootfs.lower[1]",
                Box::new(|s| s.rootfs.lower.push("/t/root".into())),
            ),
            (
                "binds[0].target",
                Box::new(|s| s.binds[0].target = "/run/../..".into()),
            ),
            ("user.uid", Box::new(|s| s.user.uid = 70000)),
            (
                "userns_parent.uid",
                Box::new(|s| s.userns_parent = Some(parent(0))),
            ),
            (
                "userns_parent.uid",
                Box::new(|s| s.userns_parent = Some(parent(u32::MAX))),
            ),
            (
                "userns_parent.uid",
                Box::new(|s| s.userns_parent = Some(parent(100_000))),
            ),
            (
                "userns_parent.gid",
                Box::new(|s| {
                    s.userns_parent = Some(UsernsParent {
                        gid: 165_535,
                        ..parent(99_999)
                    })
                }),
            ),
            (
                "userns_parent.path",
                Box::new(|s| {
                    s.userns_parent = Some(UsernsParent {
                        path: "fd/3".into(),
                        ..parent(99_999)
                    })
                }),
            ),
            (
                "layer_id_base",
                Box::new(|s| s.layer_id_base = Some(u32::MAX - 100)),
            ),
            ("program", Box::new(|s| s.program = "sh".into())),
            (
                "program_source",
                Box::new(|s| s.program_source = Some("fd/3".into())),
            ),
            (
                "env",
                Box::new(|s| {
                    s.env.insert("A=B".into(), "x".into());
                }),
            ),
            (
                "inherit_fds[0].path",
                Box::new(|s| {
                    s.inherit_fds[0] = InheritFd::UnixListener {
                        path: "run/agent.sock".into(),
                    }
                }),
            ),
            (
                "inherit_fds[0].path",
                Box::new(|s| {
                    s.inherit_fds[0] = InheritFd::UnixListener {
                        path: "/s/../etc/agent.sock".into(),
                    }
                }),
            ),
            (
                "inherit_fds[0].path",
                Box::new(|s| {
                    s.inherit_fds[0] = InheritFd::UnixListener {
                        path: format!("/s/{}", "x".repeat(100)).into(),
                    }
                }),
            ),
            (
                "inherit_fds[0].path",
                Box::new(|s| {
                    s.inherit_fds[0] = InheritFd::UnixListener {
                        path: "/agent.sock".into(),
                    }
                }),
            ),
            (
                "inherit_fds[1].path",
                Box::new(|s| s.inherit_fds[1] = InheritFd::ReadOnlyFile { path: "exe".into() }),
            ),
            (
                "inherit_fds",
                Box::new(|s| {
                    s.inherit_fds = vec![
                        InheritFd::ReadOnlyFile {
                            path: "/proc/1/exe".into()
                        };
                        MAX_INHERIT_FDS + 1
                    ]
                }),
            ),
        ];
        for (field, change) in cases {
            let mut s = example();
            change(&mut s);
            assert_eq!(s.validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn inherited_fds_are_tagged_by_kind() {
        let v = serde_json::to_value(&example().inherit_fds).unwrap();
        assert_eq!(v[0]["kind"], "unix_listener");
        assert_eq!(v[1]["kind"], "read_only_file");
        let mut v: serde_json::Value = serde_json::to_value(example()).unwrap();
        v["inherit_fds"][0]["mode"] = 0o666.into();
        assert!(serde_json::from_value::<SandboxSpec>(v.clone()).is_err());
        v["inherit_fds"][0] = serde_json::json!({"kind": "tcp_listener", "path": "/s/x"});
        assert!(serde_json::from_value::<SandboxSpec>(v).is_err());
    }

    #[test]
    fn id_map_translates() {
        let m = IdMap {
            inside: 0,
            outside: 100000,
            count: 65536,
        };
        assert_eq!(m.to_outside(0), Some(100000));
        assert_eq!(m.to_outside(1000), Some(101000));
        assert_eq!(m.to_outside(65536), None);
        let own = IdMap {
            outside: 165536,
            ..m
        };
        assert_eq!(own.layer_to_outside(100000, 100000), 165536);
        assert_eq!(own.layer_to_outside(100000, 101000), 166536);
        assert_eq!(own.layer_to_outside(100000, 0), 0);
        assert_eq!(own.layer_to_outside(100000, 165536), 165536);
    }
}
