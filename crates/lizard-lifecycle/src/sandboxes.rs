//! Sandbox lifecycle: create, find, list, extend, kill; pause, resume and hibernation to disk;
//! timeouts; re-adoption after a restart.
//!
//! A sandbox is launched by running `lizard sandbox-init` (a single-threaded helper that sets up the
//! namespaces, rootfs, cgroup and seccomp through `lizard-jail`, then execs the agent as the sandbox's
//! PID 1) and is ready when its agent answers on its Unix socket. Nothing about a running sandbox
//! lives only in memory: the store row has its pid, cgroup and paths.
//!
//! **The host never resolves a path the sandbox can write.** The agent's socket is made by the
//! launcher in the sandbox's root-only directory (`<sandbox dir>/agent.sock`, the directory 0700,
//! never visible inside) and handed to the agent as fd 3 (`--socket-fd 3`); the server connects
//! through checked, root-owned directories and accepts only the sandbox's PID 1 as the peer (see
//! `crate::agent_client`). What lives on the sandbox's disk image (`disk/upper`, `disk/run`) is
//! touched by the host only on a fresh file system or through descriptors opened without
//! following links; the agent removes its own saved hibernation state. See docs/SECURITY.md, "The
//! host never follows a path the sandbox can write".
//!
//! PID 1 is watched (a pidfd): when it exits (the agent crashed, or was killed somehow) the
//! sandbox is cleaned up like a kill and marked `killed`. `lizard serve` is a child subreaper, so
//! the PID 1s it launched are its children, reaped here.
//!
//! Hibernation: the agent saves every context's state into `/run/lizard/hibernate` (on its disk
//! image; the host never opens it), then the sandbox's processes are killed and its cgroup removed;
//! its directory (writable layer, saved state) stays and the store row says `hibernated`. A resume
//! relaunches the sandbox with the same id and writable layer and has the agent restore the
//! contexts (see `lizard_agent::hibernate`).
//!
//! This file holds the types (`Sandboxes`, `Sandbox`, `Runtime`, `SandboxConfig`, `SandboxError`)
//! and the registry; the work is in its children, one job each: `create` (limits, volumes, pool or
//! launch), `pool` (the warm pool), `launch` (directories, disk, spec, `sandbox-init`, fresh or
//! restored), `network` (the mirror, egress and injection served on the host), `lifecycle` (kill,
//! pause/resume, hibernate/wake, teardown), `timeouts` (timeouts and the PID 1 watch), `adopt`
//! (after a restart), `criu` (exact checkpoints), `snapshot` (snapshots, clones, forks),
//! `metering` (usage) and `agent_exe` (the agent binaries checkpoints name).
//!
//! Not here: HTTP (see `crate::api`), forwarding to the agent (see `crate::proxy`).

mod adopt;
pub mod agent_exe;
mod context_fork;
mod create;
mod criu;
mod launch;
mod lifecycle;
pub mod metering;
mod network;
mod pool;
pub mod snapshot;
mod timeouts;
pub mod zygote;

use self::{criu::*, launch::*, lifecycle::*, timeouts::*};

use crate::agent_client::AgentClient;
use crate::store::{now_ms, SandboxRow, Store, StoreError, StoredState, VolumeRow};
use crate::volumes::{VolumeError, Volumes};
use lizard_jail::cgroup::Cgroup;
use lizard_jail::sandbox::{Bind, IdMap, InheritFd, Limits, RootfsSpec, SandboxSpec, UserSpec};
use lizard_proto::{
    HibernationReport, LimitsRequest, NetworkRequest, SandboxLimits, SandboxVolume, TimeoutAction,
    VolumeMountRequest,
};
use lizard_template::layer::Chain;
use lizard_template::Template;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// Lifecycle failures.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox {0} not found")]
    NotFound(String),
    #[error("template {0:?} is not built (run `lizard template build {0}`)")]
    UnknownTemplate(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("cannot launch the sandbox: {0}")]
    Launch(String),
    #[error("the sandbox's agent did not become ready within {0} ms")]
    NotReady(u64),
    #[error("sandbox I/O on {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error(transparent)]
    NoSpace(#[from] crate::storage::Insufficient),
    #[error("{0}")]
    Conflict(String),
    #[error("snapshot {0:?} not found")]
    SnapshotNotFound(String),
    /// The sandbox's memory state could not be captured (its agent failed, hung or lied).
    #[error("the snapshot failed: {0}")]
    Capture(String),
    /// The sandbox's agent answered with this error (passed on as it is: the sandbox's own
    /// answer about its contexts).
    #[error("{}", .0.message)]
    Agent(lizard_proto::ErrorBody),
}

/// Environment variable names a sandbox's creator may not set: the agent's settings.
pub const RESERVED_ENV_PREFIX: &str = "LIZARD_";

/// Bounds of a create's string map (metadata or environment): at most `entries` keys of at most
/// `key_bytes` (and at least one) each, values of at most `value_bytes`, `total_bytes` in all
/// (keys and values). Checked before anything is launched (a 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapBounds {
    pub entries: usize,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub total_bytes: usize,
}

/// Metadata: labels to find sandboxes by, stored and returned with every answer about one.
pub const METADATA_BOUNDS: MapBounds = MapBounds {
    entries: 64,
    key_bytes: 128,
    value_bytes: 1024,
    total_bytes: 16 * 1024,
};

/// The environment of the sandbox's processes (values such as a certificate may be longer).
pub const ENV_BOUNDS: MapBounds = MapBounds {
    entries: 64,
    key_bytes: 128,
    value_bytes: 8 * 1024,
    total_bytes: 32 * 1024,
};

/// Check `map` (called `what` in the message) against `b`.
pub fn check_bounds(
    what: &str,
    map: &BTreeMap<String, String>,
    b: MapBounds,
) -> Result<(), SandboxError> {
    let bad = |why: String| Err(SandboxError::Invalid(format!("{what}: {why}")));
    if map.len() > b.entries {
        return bad(format!("{} keys, at most {}", map.len(), b.entries));
    }
    let mut total = 0;
    for (k, v) in map {
        if k.is_empty() || k.len() > b.key_bytes {
            return bad(format!(
                "keys are 1 to {} bytes ({} bytes: {:?}…)",
                b.key_bytes,
                k.len(),
                k.chars().take(32).collect::<String>()
            ));
        }
        if v.len() > b.value_bytes {
            return bad(format!(
                "the value of {:?} is {} bytes, at most {}",
                k.chars().take(32).collect::<String>(),
                v.len(),
                b.value_bytes
            ));
        }
        total += k.len() + v.len();
    }
    if total > b.total_bytes {
        return bad(format!(
            "{total} bytes of keys and values, at most {}",
            b.total_bytes
        ));
    }
    Ok(())
}

/// Server-wide settings for sandboxes.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub data_dir: PathBuf,
    /// The data dir whose `templates/` holds the built templates (usually `data_dir`).
    pub templates_data_dir: PathBuf,
    /// The `lizard` binary: runs `sandbox-init`.
    pub lizard_bin: PathBuf,
    /// The sealed in-memory copy of `lizard_bin` that sandboxes run as their agent (executed by
    /// descriptor: no mount inside shows where the server is installed).
    pub agent_exe: Arc<lizard_jail::exe::SealedExe>,
    /// Tests of hostile agents only (`lizard serve --agent-wrapper`): a sealed copy of a program
    /// that every sandbox runs as PID 1 instead of the agent, with the agent's command line and
    /// descriptors and the agent's own sealed executable at fd 4 (see `lizard-hostile-agent`).
    pub agent_wrapper: Option<Arc<lizard_jail::exe::SealedExe>>,
    /// With a usable CRIU: a regular-file copy of the agent on a server-wide tmpfs
    /// (`SealedExe::install_in_tmpfs`), bound read-only into every sandbox and run from there
    /// instead of the memfd, so that a CRIU restore can give the agent its executable back.
    pub agent_exe_file: Option<PathBuf>,
    pub default_template: String,
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub default_limits: SandboxLimits,
    /// First uid/gid on the host that sandbox ids map to (inside 0 → this).
    pub id_shift: u32,
    pub ready_timeout: Duration,
    /// Ready sandboxes (default template, Python kernel started) kept for fast creates; 0 = none.
    pub pool_size: usize,
    /// The most ready sandboxes the pool grows to when bursts of creates ask for more than
    /// `pool_size` (see `pool::Demand`); at most `pool_size` means a fixed pool.
    pub pool_max: usize,
    /// The most pool launches at once (at least one).
    pub pool_refills: usize,
    /// Host uid and gid of the sandbox user: owner of a new volume's root directory.
    pub volume_owner: (u32, u32),
    /// Sandboxes' egress: the relay and DNS responder served in each egress sandbox's network
    /// namespace (`crate::egress`).
    pub egress: Arc<crate::egress::EgressService>,
    /// The data dir's key that seals the projects' secrets at rest (`crate::secrets`).
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// Hibernate sandboxes that stayed paused this long; `None` = never.
    pub hibernate_after: Option<Duration>,
    /// Environment the operator gives every sandbox's agent (and so its kernels), after the
    /// user's: e.g. `LIZARD_JAVASCRIPT_ZYGOTE=false` (`lizard serve --agent-env`, `lizard
    /// bench --agent-env`). Users cannot set `LIZARD_*` names themselves.
    pub agent_env: BTreeMap<String, String>,
    /// Under memory pressure (the host's MemAvailable below this many MiB) hibernate paused
    /// sandboxes, longest-paused first, one per second; `None` = never.
    pub hibernate_below_mb: Option<u64>,
    /// Deadlines and body caps of the server's own calls to agents (production defaults:
    /// `AgentLimits::default()`; tests of hostile agents shorten them).
    pub agent_limits: crate::agent_client::AgentLimits,
    /// How long the last look at the execution log before a kill or a pause may take (then it is
    /// skipped: the kill goes on whatever the agent does).
    pub final_sample_deadline: Duration,
    /// How long and how many execution records (the `executions` table) are kept: pruned at
    /// start-up and hourly by age, after every sample by count (`lizard serve
    /// --executions-retention`, `--executions-max-rows`).
    pub executions_retention: crate::store::Retention,
    /// How many times the data dir's free space (minus a reserve) sandbox disks and volumes may
    /// promise (`lizard serve --disk-overcommit`, default 1.0 = strict; see `crate::storage`).
    pub disk_overcommit: f64,
    /// The checkpoint tool hibernation tries first (see [`CheckpointTool`]).
    pub checkpoint: CheckpointTool,
    /// The package registries' mirror every sandbox reaches at `lizard_packages::LISTEN_ADDR`
    /// (`lizard serve --package-registry`); `None`: none (`--package-registry none`).
    pub packages: Option<lizard_packages::PackageProxy>,
    /// Run one shared Python zygote on the host for the default template, whose forks join its
    /// sandboxes (`crate::host_zygotes`; `lizard serve --host-zygotes`).
    pub host_zygotes: bool,
}

/// What the server remembers about a running sandbox's processes (stored as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Runtime {
    pub pid: i32,
    pub cgroup: Cgroup,
    pub dir: PathBuf,
    pub socket: PathBuf,
    /// CPU time (ms) the sandbox used in earlier lives (before hibernations): its cgroup's counter
    /// starts again at zero when it is relaunched.
    #[serde(default)]
    pub cpu_base_ms: u64,
    /// Where the writable layer's disk image is mounted (unmounted when the sandbox goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<PathBuf>,
    /// The template build that is the sandbox's lower layer (pinned there, so a newer build of
    /// the template does not remove it while the sandbox lives; a hibernated sandbox wakes on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_dir: Option<PathBuf>,
    /// The builds below `template_dir` when the template is a layer over others (each pinned
    /// like `template_dir`), top first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_bases: Vec<PathBuf>,
    /// First host uid/gid of the sandbox's own id range (`crate::id_ranges`): its ids 0..65535
    /// are these on the host, and its writable layer's files are owned by them, so a relaunch
    /// (wake) and an adoption keep it. `None`: a sandbox from before per-sandbox ranges, which
    /// keeps the shared range `id_shift..` (no idmapped mounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_base: Option<u32>,
    /// The process that called `listen` on the agent's socket when it is not PID 1: the
    /// launcher of a CRIU restore, which made the socket anew for the restored agent (see
    /// docs/SECURITY.md, "CRIU checkpoints"). The server's `SO_PEERCRED` check expects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_peer: Option<i32>,
    /// Its processes were restored by CRIU (a resume or a clone) rather than launched: its agent
    /// is not dumpable and its memory belongs to the host's user namespace, so only a CRIU with
    /// scripts/criu-patches checkpoints it again (see `criu_dump_failed`); a relaunch clears it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub criu_restored: bool,
    /// The digest of the agent binary it runs (`agent_exe::AgentExes`; `None` without CRIU or
    /// from before digests): the current one after a launch, the checkpoint's after a restore
    /// (a sandbox restored from a checkpoint older than the server keeps the older binary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_exe: Option<String>,
}

impl Runtime {
    /// The pid the agent's socket must answer from (`SO_PEERCRED`): PID 1, or `agent_peer`.
    pub fn agent_peer(&self) -> i32 {
        self.agent_peer.unwrap_or(self.pid)
    }
}

/// A sandbox the server manages.
pub struct Sandbox {
    pub id: String,
    pub project: String,
    pub template: String,
    pub created_at_ms: u64,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    pub limits: SandboxLimits,
    pub on_timeout: TimeoutAction,
    /// Its network (changed live by `PATCH /v1/sandboxes/{id}/network`: see
    /// [`Sandboxes::set_network`]).
    network: Mutex<NetworkRequest>,
    pub runtime: Runtime,
    /// Volumes mounted in the sandbox (fixed at create).
    pub volumes: Vec<SandboxVolume>,
    timeout_at_ms: AtomicU64,
    /// The sandbox's lifetime, as last set (create or set_timeout).
    timeout_ms: AtomicU64,
    /// While paused: how much of the timeout was left when the sandbox was paused.
    paused_remaining_ms: AtomicU64,
    state: Mutex<StoredState>,
    /// While paused: when it was paused (for `hibernate_after`; reset by a server restart).
    paused_at_ms: AtomicU64,
    /// Set while its contexts are being saved: new agent requests are refused (409).
    hibernating: std::sync::atomic::AtomicBool,
    /// Serializes pause, resume, hibernate and kill of this sandbox; shared with the `Sandbox` that
    /// replaces this one when it is relaunched from hibernation.
    lifecycle: Arc<tokio::sync::Mutex<()>>,
    /// Serializes its usage samples (each reads its usage row and the agent's execution log from
    /// the row's position, then writes the row back): two at once, e.g. the sampler's and a
    /// kill's final one, would both take the same runs, the second would drop them as
    /// impossible (the first had matched them) and its write would undo the first's. Shared like
    /// `lifecycle`.
    pub(crate) sampling: Arc<tokio::sync::Mutex<()>>,
    pub agent: AgentClient,
    /// The usage sampler's recent samples (for E2B's `getMetrics`), oldest first.
    pub metrics: crate::sandboxes::metering::Series,
    /// The package registries' mirror serving its listener in the sandbox's network namespace
    /// (`Sandboxes::serve_packages`); dropped (the listener closed) when the sandbox's processes
    /// go: a kill, a hibernation, its PID 1's exit.
    packages: Mutex<Option<lizard_packages::ServeHandle>>,
    /// Its egress relay and DNS responder, served in its network namespace while its processes
    /// run (a sandbox with egress; see `Sandboxes::serve_egress`).
    egress: Mutex<Option<crate::egress::EgressHandle>>,
    /// The mirror's counters (served bytes, requests) of `packages` already in the usage row:
    /// metered as deltas, so that each life's handle (its counters start at zero) adds to it.
    mirror_metered: Mutex<(u64, u64)>,
    /// The same for `egress` (bytes out, bytes in, refusals).
    egress_metered: Mutex<(u64, u64, u64)>,
}

impl Sandbox {
    /// A live sandbox: what its stored `row` says (with its `limits` and `network`, which the row
    /// holds as JSON), its processes' `runtime`, its `agent` client and its `egress` (if served).
    /// A paused one counts its pause from now (the pause time is not stored).
    pub(crate) fn new(
        row: &SandboxRow,
        limits: SandboxLimits,
        network: NetworkRequest,
        runtime: Runtime,
        agent: AgentClient,
        egress: Option<crate::egress::EgressHandle>,
    ) -> Sandbox {
        let paused_at = match row.state {
            StoredState::Paused => now_ms(),
            _ => 0,
        };
        Sandbox {
            id: row.id.clone(),
            project: row.project.clone(),
            template: row.template.clone(),
            created_at_ms: row.created_at_ms,
            metadata: row.metadata.clone(),
            envs: row.envs.clone(),
            limits,
            on_timeout: row.on_timeout,
            network: Mutex::new(network),
            runtime,
            volumes: row.volumes.clone(),
            timeout_at_ms: AtomicU64::new(row.timeout_at_ms),
            timeout_ms: AtomicU64::new(row.timeout_ms),
            paused_remaining_ms: AtomicU64::new(row.paused_remaining_ms),
            state: Mutex::new(row.state),
            paused_at_ms: AtomicU64::new(paused_at),
            hibernating: Default::default(),
            lifecycle: Arc::new(tokio::sync::Mutex::new(())),
            sampling: Default::default(),
            agent,
            metrics: Default::default(),
            packages: Default::default(),
            egress: Mutex::new(egress),
            mirror_metered: Default::default(),
            egress_metered: Default::default(),
        }
    }

    pub fn state(&self) -> StoredState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn timeout_at_ms(&self) -> u64 {
        self.timeout_at_ms.load(Ordering::SeqCst)
    }
    /// Whether its contexts are being saved for hibernation right now.
    /// Its network request (egress rules) now.
    pub fn network(&self) -> NetworkRequest {
        self.network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Whether its network has secret injection rules (without copying the rules).
    pub fn injects_secrets(&self) -> bool {
        !self
            .network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .inject
            .is_empty()
    }
    pub fn is_hibernating(&self) -> bool {
        self.hibernating.load(Ordering::SeqCst)
    }
    /// The same sandbox with a new runtime (after a relaunch from hibernation).
    fn relaunched(&self, runtime: Runtime, state: StoredState, timeout_at_ms: u64) -> Sandbox {
        Sandbox {
            id: self.id.clone(),
            project: self.project.clone(),
            template: self.template.clone(),
            created_at_ms: self.created_at_ms,
            metadata: self.metadata.clone(),
            envs: self.envs.clone(),
            limits: self.limits,
            on_timeout: self.on_timeout,
            volumes: self.volumes.clone(),
            network: Mutex::new(self.network()),
            agent: AgentClient::with_limits(
                runtime.socket.clone(),
                runtime.agent_peer(),
                *self.agent.limits(),
            ),
            runtime,
            timeout_at_ms: AtomicU64::new(timeout_at_ms),
            timeout_ms: AtomicU64::new(self.timeout_ms.load(Ordering::SeqCst)),
            paused_remaining_ms: AtomicU64::new(0),
            state: Mutex::new(state),
            paused_at_ms: AtomicU64::new(0),
            hibernating: Default::default(),
            lifecycle: self.lifecycle.clone(),
            sampling: self.sampling.clone(),
            // A relaunched sandbox has a new cgroup, whose CPU counter starts again at zero.
            metrics: Default::default(),
            packages: Default::default(),
            egress: Default::default(),
            mirror_metered: Default::default(),
            egress_metered: Default::default(),
        }
    }
    fn set_state(&self, s: StoredState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }
    /// Its traffic through the package registries' mirror since its processes last started.
    pub fn network_log(&self) -> lizard_proto::NetworkLog {
        let mut log = self.mirror_log();
        let egress = self.egress.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = egress.as_ref() {
            let p = h.policy();
            let t = p.traffic();
            log.egress = lizard_proto::EgressTraffic {
                connections: t.connections,
                bytes_out: t.bytes_out,
                bytes_in: t.bytes_in,
                refused: t.refused,
            };
            log.refused.extend(p.refusals().into_iter().map(|r| {
                let dns = r.reason.starts_with("DNS");
                lizard_proto::RefusedRequest {
                    at_ms: r
                        .at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0),
                    method: if dns { "dns" } else { "connect" }.into(),
                    destination: r.destination,
                    reason: Some(r.reason),
                }
            }));
        }
        log
    }
    /// [`Self::network_log`]'s mirror part.
    fn mirror_log(&self) -> lizard_proto::NetworkLog {
        let guard = self.packages.lock().unwrap_or_else(|e| e.into_inner());
        let Some(h) = guard.as_ref() else {
            return lizard_proto::NetworkLog {
                sandbox_id: self.id.clone(),
                ..Default::default()
            };
        };
        let t = h.stats();
        lizard_proto::NetworkLog {
            sandbox_id: self.id.clone(),
            egress: Default::default(),
            mirror: lizard_proto::MirrorTraffic {
                requests: t.requests,
                cache_hits: t.cache_hits,
                cache_misses: t.cache_misses,
                refused: t.refused,
                upstream_bytes: t.upstream_bytes,
                served_bytes: t.served_bytes,
                rejected_connections: t.rejected_connections,
            },
            refused: h
                .refusals()
                .into_iter()
                .map(|r| lizard_proto::RefusedRequest {
                    at_ms: r
                        .at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0),
                    method: r.method,
                    destination: r.destination,
                    reason: None,
                })
                .collect(),
        }
    }
    /// The mirror traffic of its current handle not metered yet (served bytes, requests), now
    /// counted as metered.
    pub fn mirror_delta(&self) -> (u64, u64) {
        let now = match self
            .packages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(h) => {
                let t = h.stats();
                (t.served_bytes, t.requests)
            }
            None => return (0, 0),
        };
        let mut seen = self
            .mirror_metered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let delta = (now.0.saturating_sub(seen.0), now.1.saturating_sub(seen.1));
        *seen = now;
        delta
    }
    /// Its egress counters (bytes out, bytes in, refusals) of the current handle not metered yet,
    /// now counted as metered.
    pub fn egress_delta(&self) -> (u64, u64, u64) {
        let now = match self
            .egress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(h) => {
                let t = h.policy().traffic();
                (t.bytes_out, t.bytes_in, t.refused)
            }
            None => return (0, 0, 0),
        };
        let mut seen = self
            .egress_metered
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let delta = (
            now.0.saturating_sub(seen.0),
            now.1.saturating_sub(seen.1),
            now.2.saturating_sub(seen.2),
        );
        *seen = now;
        delta
    }
    /// Stop serving the package mirror and its egress in its network namespace (its processes
    /// are going).
    fn stop_packages(&self) {
        self.packages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.egress.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// What the timeout loop does to a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimedAction {
    Kill,
    Pause,
    Hibernate,
    /// A timeout's hibernation: paused first, so that the timeout it resumes with is a whole one
    /// (as a timeout's pause).
    TimeoutHibernate,
}

/// A launched sandbox whose agent answers, not (yet) owned by any project.
struct LaunchedSandbox {
    id: String,
    runtime: Runtime,
    agent: AgentClient,
    /// Once pooled: set by its PID 1 watch when it fired (see `Sandboxes::watch`).
    exited: Option<Arc<AtomicBool>>,
    /// Its egress, served since before its agent was waited for (a sandbox with egress).
    egress: Option<crate::egress::EgressHandle>,
}

/// Under memory pressure, how long one sandbox's hibernation may hold the next one back (see
/// `Sandboxes::run_timeouts`): longer than an honest snapshot of an idle sandbox takes, far
/// shorter than the hibernate deadline a hostile agent can use up.
const PRESSURE_STALL: Duration = Duration::from_secs(10);

/// How long a PID 1 that exited may stay unwaitable (held by a tracer: CRIU after a dump) before
/// its watch stops trying to reap it.
const REAP_TRACED_WITHIN: Duration = Duration::from_secs(30);

/// Name of the file in a sandbox's directory that records its [`Runtime`] from the moment it is
/// launched (so sandboxes that never reached the store can be cleaned up after a crash).
const RUNTIME_FILE: &str = "runtime.json";

/// Name of the agent's socket in a sandbox's (root-only) directory.
const AGENT_SOCKET: &str = "agent.sock";

/// Whether `rt`'s agent socket is the one this server makes (`<dir>/agent.sock`, outside the
/// sandbox's reach). Sandboxes launched by older servers had it on their own disk
/// (`disk/run/agent.sock`, writable from inside): those are never connected to.
fn socket_is_trusted_layout(rt: &Runtime) -> bool {
    rt.socket == rt.dir.join(AGENT_SOCKET)
}

/// A create request, validated by the API layer (project resolved).
#[derive(Debug, Clone, Default)]
pub struct CreateSandbox {
    pub project: String,
    pub template: Option<String>,
    pub timeout_ms: Option<u64>,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    pub limits: LimitsRequest,
    pub on_timeout: TimeoutAction,
    pub volumes: Vec<VolumeMountRequest>,
    pub network: NetworkRequest,
}

pub struct Sandboxes {
    pub cfg: SandboxConfig,
    pub store: Arc<Store>,
    pub volumes: Volumes,
    /// Which sandbox holds which host id range.
    pub id_ranges: crate::id_ranges::IdRanges,
    /// The audit log's `secret.use` events, coalesced (written by [`SecretUses::run`]), and the
    /// execute requests in flight per sandbox that they name.
    ///
    /// [`SecretUses::run`]: crate::secret_uses::SecretUses::run
    pub secret_uses: Arc<crate::secret_uses::SecretUses>,
    live: RwLock<HashMap<String, Arc<Sandbox>>>,
    /// Kills under way (see [`Sandboxes::finish_kills`]).
    kills: InFlight,
    timeouts_changed: Notify,
    pool: Mutex<Vec<LaunchedSandbox>>,
    /// The recent pool-eligible creates, which size the pool between `pool_size` and `pool_max`.
    pool_demand: Mutex<pool::Demand>,
    pool_wanted: Notify,
    /// Held by the pool filler while it launches one sandbox; taken by `drain_pool` to close.
    pool_filling: tokio::sync::Mutex<bool>,
    /// The running host zygotes, by the directory of the template build they were made from
    /// (`crate::host_zygotes`).
    zygotes: std::sync::RwLock<HashMap<PathBuf, Arc<crate::host_zygotes::HostZygote>>>,
    /// False while the host zygotes start (`Sandboxes::start_host_zygotes`), true otherwise.
    zygotes_started: tokio::sync::watch::Sender<bool>,
    /// Itself, for the PID 1 watches (which outlive the calls that start them).
    me: std::sync::Weak<Sandboxes>,
}

/// Operations under way that the server's shutdown must let finish: a kill takes its sandbox out
/// of the API first (its id answers 404 from then on), then takes the final usage sample and
/// destroys it; a server that exited in between would leave running a sandbox it had reported
/// gone (until the next server's adoption).
#[derive(Default)]
pub(crate) struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    done: Notify,
}

/// One operation of an [`InFlight`], counted until dropped.
pub(crate) struct InFlightGuard<'a>(&'a InFlight);

impl InFlight {
    pub(crate) fn start(&self) -> InFlightGuard<'_> {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self)
    }

    /// Wait until none is under way, at most `limit`; whether none is.
    async fn finished(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return self.count.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.done.notify_waiters();
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub use crate::ids::new_sandbox_id;

/// The host's MemAvailable in MiB (`None` if /proc/meminfo cannot be read).
pub(crate) fn mem_available_mb() -> Option<u64> {
    meminfo_mb("MemAvailable")
}

/// A field of the host's /proc/meminfo (`MemTotal`, `MemAvailable`, …) in MiB.
pub fn meminfo_mb(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_mb(&text, field)
}

fn parse_meminfo_mb(meminfo: &str, field: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

pub use pool::{default_pool_size, pool_size_for};

/// Freeze (`true`) or thaw a sandbox's cgroup, off the runtime's threads.
pub(crate) async fn freezer(cg: &Cgroup, freeze: bool) -> Result<(), SandboxError> {
    let cg = cg.clone();
    tokio::task::spawn_blocking(move || if freeze { cg.freeze() } else { cg.thaw() })
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))?
        .map_err(|e| {
            let what = if freeze { "freezing" } else { "thawing" };
            SandboxError::Launch(format!("{what} the sandbox: {e}"))
        })
}

pub fn to_api_state(s: StoredState) -> lizard_proto::SandboxState {
    match s {
        StoredState::Running => lizard_proto::SandboxState::Running,
        StoredState::Paused => lizard_proto::SandboxState::Paused,
        StoredState::Hibernated => lizard_proto::SandboxState::Hibernated,
        StoredState::Killed => lizard_proto::SandboxState::Killed,
    }
}

pub fn info(sb: &Sandbox) -> lizard_proto::SandboxInfo {
    lizard_proto::SandboxInfo {
        sandbox_id: sb.id.clone(),
        project: sb.project.clone(),
        template: sb.template.clone(),
        state: to_api_state(sb.state()),
        created_at_ms: sb.created_at_ms,
        timeout_at_ms: sb.timeout_at_ms(),
        metadata: sb.metadata.clone(),
        limits: sb.limits,
        on_timeout: sb.on_timeout,
        volumes: sb.volumes.clone(),
        hibernation: None,
        restore: None,
        network: sb.network(),
    }
}

impl From<crate::egress::InvalidNetwork> for SandboxError {
    fn from(e: crate::egress::InvalidNetwork) -> Self {
        SandboxError::Invalid(e.0)
    }
}

impl Sandboxes {
    pub fn new(cfg: SandboxConfig, store: Arc<Store>) -> Arc<Sandboxes> {
        Arc::new_cyclic(|me| Sandboxes {
            me: me.clone(),
            volumes: Volumes::new(
                &cfg.data_dir,
                cfg.volume_owner,
                store.clone(),
                cfg.disk_overcommit,
            ),
            id_ranges: crate::id_ranges::IdRanges::new(cfg.id_shift),
            secret_uses: Arc::default(),
            cfg,
            store,
            live: RwLock::new(HashMap::new()),
            kills: InFlight::default(),
            timeouts_changed: Notify::new(),
            pool: Mutex::new(Vec::new()),
            pool_demand: Mutex::default(),
            pool_wanted: Notify::new(),
            pool_filling: tokio::sync::Mutex::new(false),
            zygotes: Default::default(),
            zygotes_started: tokio::sync::watch::channel(true).0,
        })
    }

    /// Wait (at most `limit`) for the kills under way to finish — for the server's shutdown, so
    /// that no sandbox it reported killed outlives it. Whether all did.
    pub async fn finish_kills(&self, limit: Duration) -> bool {
        self.kills.finished(limit).await
    }

    fn sandboxes_dir(&self) -> PathBuf {
        self.cfg.data_dir.join("sandboxes")
    }

    /// A live sandbox by id.
    pub fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.live.read().ok().and_then(|m| m.get(id).cloned())
    }

    /// All live sandboxes.
    pub fn all(&self) -> Vec<Arc<Sandbox>> {
        self.live
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The sandbox `id` with its lifecycle lock held: the current `Sandbox` (a relaunch from
    /// hibernation replaces it while the lock is held, so it is looked up again after locking).
    async fn locked(
        &self,
        id: &str,
    ) -> Result<(Arc<Sandbox>, tokio::sync::OwnedMutexGuard<()>), SandboxError> {
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        let guard = sb.lifecycle.clone().lock_owned().await;
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        Ok((sb, guard))
    }
}

#[cfg(feature = "stand-in")]
impl Sandboxes {
    /// Router-level tests only (feature `stand-in`, never in a build of the server): a running
    /// sandbox `id` of `project` with `network`, no process, disk or cgroup of its own (`dir`, an
    /// empty directory of the test's, stands for its directory and cgroup), whose agent is
    /// whatever this process serves on the Unix socket `socket` — a stand-in that speaks the
    /// agent's protocol. Only calls that reach the agent through the server make sense on it: it
    /// cannot be killed, paused or checkpointed.
    pub fn insert_stand_in(
        &self,
        id: &str,
        project: &str,
        network: NetworkRequest,
        dir: &Path,
        socket: PathBuf,
    ) -> Arc<Sandbox> {
        let own = std::process::id() as i32;
        let cgroup = Cgroup::open(lizard_jail::cgroup::CgroupPaths::V2 {
            path: dir.to_path_buf(),
        })
        .expect("the stand-in's directory exists");
        let row = SandboxRow {
            id: id.to_string(),
            project: project.to_string(),
            template: self.cfg.default_template.clone(),
            state: StoredState::Running,
            created_at_ms: now_ms(),
            timeout_at_ms: u64::MAX,
            ended_at_ms: None,
            metadata: Default::default(),
            envs: Default::default(),
            runtime: serde_json::Value::Null,
            limits: serde_json::Value::Null,
            paused_remaining_ms: 0,
            on_timeout: Default::default(),
            timeout_ms: u64::MAX,
            volumes: Vec::new(),
            network: serde_json::Value::Null,
        };
        let runtime = Runtime {
            pid: own,
            cgroup,
            dir: dir.to_path_buf(),
            socket: socket.clone(),
            cpu_base_ms: 0,
            disk: None,
            template_dir: None,
            template_bases: Vec::new(),
            id_base: None,
            agent_peer: Some(own),
            criu_restored: false,
            agent_exe: None,
        };
        let agent = AgentClient::with_limits(socket, own, self.cfg.agent_limits);
        let sb = Arc::new(Sandbox::new(
            &row,
            Default::default(),
            network,
            runtime,
            agent,
            None,
        ));
        if let Ok(mut m) = self.live.write() {
            m.insert(id.to_string(), sb.clone());
        }
        sb
    }
}

/// A stored sandbox as adoption found it: its row, its runtime (if it parses), whether it is
/// alive, and a pidfd of its PID 1 (running or paused ones).
type Checked = (
    SandboxRow,
    Option<Runtime>,
    bool,
    Option<std::os::fd::OwnedFd>,
);

/// What `lizard sandbox-init` prints.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum InitReply {
    Ok(Launched),
    Error(String),
}

#[derive(Debug, Deserialize)]
struct Launched {
    pid: i32,
    cgroup: Cgroup,
    /// The launcher process's pid (not in its reply: filled in here).
    #[serde(skip)]
    helper_pid: i32,
}

/// Where the agent saves the contexts' state at hibernation (inside the sandbox; the host side is
/// `<sandbox dir>/disk/run/hibernate`, on the disk image with the writable layer).
const HIBERNATE_DIR: &str = "/run/lizard/hibernate";

/// The checkpoint tool of this server: CRIU when `lizard serve --criu` found one that passed
/// `criu check`, with what the check said (kept for the hibernation reports).
#[derive(Debug, Clone, Default)]
pub struct CheckpointTool {
    /// Usable CRIU (its check passed); `None`: hibernation is per-language only.
    pub criu: Option<lizard_jail::checkpoint::Criu>,
    /// What was found: `criu check`'s verdict, or why there is no CRIU.
    pub detail: String,
    /// Set by the first dump that CRIU refused because of the sandboxes' namespace layout (the
    /// same for every sandbox of this server): later hibernations give that reason without
    /// another attempt (a refused dump still costs a few hundred ms on a 200 MB sandbox).
    pub layout_refused: Arc<std::sync::OnceLock<String>>,
    /// The agents run from a regular file (`SandboxConfig::agent_exe_file`), so a CRIU restore can
    /// give them their executable back: checkpoints are taken with CRIU (see docs/ARCHITECTURE.md,
    /// "Hibernation", Method). False (the file copy could not be made, or a test's agent wrapper
    /// runs as PID 1): per-language only, and the reason says so.
    pub exact_restore: bool,
    /// With `exact_restore`: the agent binaries checkpoints were taken with (the current one and
    /// the kept copies, see [`agent_exe`]).
    pub agent_exes: Option<Arc<agent_exe::AgentExes>>,
    /// Clones' (and forks') CRIU images are marked mergeable before their restore, for the
    /// kernel's same-page merging (`lizard serve --share-clone-memory`, which turned it on).
    pub share_clone_memory: bool,
}

/// What CRIU says when a tree's namespaces do not belong to its user namespace (a Lizard sandbox's
/// did before the launcher created the user namespace first): the refusal is structural, not the
/// sandbox's.
const CRIU_LAYOUT_REFUSAL: &str = "doesn't belong to the target user namespace";

/// Deadline of one CRIU run at hibernation (a dump of a sandbox's tree takes well under a second;
/// past this it is killed and hibernation goes on per language).
const CRIU_DEADLINE: Duration = Duration::from_secs(30);

/// A CRIU checkpoint kept for a resume: `<sandbox dir>/criu.json` beside the images in
/// `<sandbox dir>/criu` (both host-side, root's; see docs/SECURITY.md, "CRIU checkpoints").
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct CriuManifest {
    dumped: lizard_jail::checkpoint::DumpSpec,
    image_bytes: u64,
    dump_ms: u64,
    /// The contexts at hibernation (for the resume's report).
    contexts: Vec<(lizard_proto::ContextId, lizard_proto::Language)>,
    /// The agent's execution-log position already metered when the tree was dumped (for a
    /// snapshot: a clone's restored agent has the source's log, counted from here).
    #[serde(default)]
    agent_log_seq: u64,
    /// The digest of the agent binary the dumped sandbox ran (`Runtime::agent_exe`), whose kept
    /// copy the restore binds; `None` (older checkpoints): the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent_exe: Option<String>,
}

const CRIU_MANIFEST: &str = "criu.json";
const CRIU_IMAGES: &str = "criu";

/// How long the whole handover of a new socket to a CRIU-restored agent may take
/// (`move_agent_socket`): past it the server gives up, whatever the agent does.
const HANDOVER_DEADLINE: Duration = Duration::from_secs(5);

pub use lizard_jail::sandbox::AGENT_CAPS;

#[cfg(test)]
mod tests {
    use super::create::check_volume_requests;
    use super::*;

    #[test]
    fn a_layout_refusal_of_a_restored_sandbox_is_not_remembered_for_the_others() {
        let tool = CheckpointTool {
            detail: "CRIU 4.2.1: Looks good.".into(),
            ..Default::default()
        };
        let refusal = || lizard_jail::checkpoint::CheckpointError::Failed {
            action: "dump",
            status: "exit status: 1".into(),
            detail: format!("One or more namespaces {CRIU_LAYOUT_REFUSAL}"),
        };
        let why = criu_dump_failed(&tool, &refusal(), true);
        assert!(why.contains("scripts/criu-patches"), "{why}");
        assert!(tool.layout_refused.get().is_none());
        let other = lizard_jail::checkpoint::CheckpointError::Failed {
            action: "dump",
            status: "exit status: 1".into(),
            detail: "Can't dump half of a pipe".into(),
        };
        let _ = criu_dump_failed(&tool, &other, false);
        assert!(tool.layout_refused.get().is_none());
        let _ = criu_dump_failed(&tool, &refusal(), false);
        assert!(tool
            .layout_refused
            .get()
            .unwrap()
            .contains("not tried again"));
    }

    #[test]
    fn metadata_and_env_are_bounded() {
        let b = METADATA_BOUNDS;
        let map = |n: usize, k: usize, v: usize| -> BTreeMap<String, String> {
            (0..n)
                .map(|i| (format!("{i:0>k$}"), "v".repeat(v)))
                .collect()
        };
        assert!(
            check_bounds("metadata", &map(64, 128, 1024 - 200), b).is_err(),
            "total"
        );
        assert!(check_bounds("metadata", &map(12, 128, 1024), b).is_ok());
        assert!(check_bounds("metadata", &map(65, 3, 1), b).is_err());
        assert!(check_bounds("metadata", &map(1, 129, 1), b).is_err());
        assert!(check_bounds("metadata", &map(1, 3, 1025), b).is_err());
        assert!(check_bounds("metadata", &[(String::new(), "x".into())].into(), b).is_err());
        assert!(check_bounds("metadata", &BTreeMap::new(), b).is_ok());
        assert!(check_bounds("env", &map(3, 8, 8 * 1024), ENV_BOUNDS).is_ok());
        assert!(check_bounds("env", &map(1, 8, 8 * 1024 + 1), ENV_BOUNDS).is_err());
        let e = check_bounds("env", &map(5, 8, 8000), ENV_BOUNDS).unwrap_err();
        assert!(e.to_string().contains("env: "), "{e}");
    }

    #[test]
    fn mem_available_is_read_in_mib() {
        let m = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:    2097152 kB\n";
        assert_eq!(parse_meminfo_mb(m, "MemAvailable"), Some(2048));
        assert_eq!(parse_meminfo_mb(m, "MemTotal"), Some(23437));
        assert_eq!(parse_meminfo_mb("MemTotal: 1 kB\n", "MemAvailable"), None);
        assert_eq!(parse_meminfo_mb("MemTotalX: 1 kB\n", "MemTotal"), None);
        assert!(mem_available_mb().is_some());
    }

    #[test]
    fn only_the_host_side_socket_layout_is_trusted() {
        let cgroup =
            Cgroup::open(lizard_jail::cgroup::CgroupPaths::V2 { path: "/".into() }).unwrap();
        let mut rt = Runtime {
            pid: 1,
            cgroup,
            dir: "/data/sandboxes/abc".into(),
            socket: "/data/sandboxes/abc/agent.sock".into(),
            cpu_base_ms: 0,
            disk: None,
            template_dir: None,
            template_bases: vec![],
            id_base: None,
            agent_peer: None,
            criu_restored: false,
            agent_exe: None,
        };
        assert!(socket_is_trusted_layout(&rt));
        // What servers before the host-side socket stored: a path on the sandbox's own disk.
        rt.socket = "/data/sandboxes/abc/disk/run/agent.sock".into();
        assert!(!socket_is_trusted_layout(&rt));
        rt.socket = "/data/sandboxes/other/agent.sock".into();
        assert!(!socket_is_trusted_layout(&rt));
    }

    #[test]
    fn sandbox_ids_are_hostnames_and_unique() {
        let a = new_sandbox_id();
        assert_eq!(a.len(), 20);
        assert!(a.chars().next().unwrap().is_ascii_lowercase());
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        assert_ne!(a, new_sandbox_id());
    }

    #[test]
    fn volume_requests_are_checked() {
        let m = |name: &str, path: Option<&str>| VolumeMountRequest {
            name: name.into(),
            mount_path: path.map(String::from),
            read_only: false,
        };
        let ok = check_volume_requests(&[m("data", None), m("b", Some("/mnt/b"))]).unwrap();
        assert_eq!(ok[0].1, "/home/user/data");
        for bad in [
            vec![m("data", Some("/etc"))],
            vec![m("Bad", None)],
            vec![m("a", Some("/data")), m("b", Some("/data/x"))],
            vec![m("a", Some("/data")), m("b", Some("/data"))],
            vec![m("a", Some("/home/user/../../proc"))],
            (0..17).map(|i| m(&format!("v{i}"), None)).collect(),
        ] {
            assert!(matches!(
                check_volume_requests(&bad),
                Err(SandboxError::Invalid(_))
            ));
        }
    }
}

#[cfg(test)]
mod handover_tests {
    //! `hand_over_socket` against fake restored agents that never accept, never answer, or take
    //! the socket: the first two are cut by the caller's deadline (nothing blocks a thread), the
    //! last gets the socket and the sandbox id.
    use super::*;
    use std::os::fd::AsRawFd;

    /// Run `f` (a future under a 1 s deadline, as `move_agent_socket` runs the handover) on a
    /// current-thread runtime in a thread of its own: a handover that blocked its thread would
    /// keep the deadline from firing, and the test fails after a minute instead of hanging.
    fn within_deadline<F>(f: impl FnOnce() -> F + Send + 'static) -> Option<Result<(), String>>
    where
        F: std::future::Future<Output = Result<(), String>>,
    {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let r = rt.block_on(async { tokio::time::timeout(Duration::from_secs(1), f()).await });
            let _ = tx.send(r.ok());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the handover blocked its thread past its deadline")
    }

    /// One message and its fds (`recv_with_fds` does not wait: retried until one is there).
    fn recv_waiting(
        c: &std::os::unix::net::UnixStream,
    ) -> std::io::Result<(Vec<u8>, Vec<std::os::fd::OwnedFd>)> {
        let mut b = [0u8; 128];
        loop {
            match lizard_jail::fdpass::recv_with_fds(c, &mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                r => return r.map(|(n, fds)| (b[..n].to_vec(), fds)),
            }
        }
    }

    fn new_socket(dir: &Path) -> std::os::fd::OwnedFd {
        lizard_jail::hostpath::bind_unix_listener(&dir.join("agent.sock.new")).unwrap()
    }

    #[test]
    fn an_agent_that_never_accepts_cannot_hold_the_handover() {
        lizard_test_support::needs_root!();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        // Backlog 0: one connection fills the queue; nobody accepts.
        let std_listener = {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let s = tokio::net::UnixSocket::new_stream().unwrap();
                s.bind(&path).unwrap();
                s.listen(0).unwrap().into_std().unwrap()
            })
        };
        let _queued = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let sock = new_socket(dir.path());
        let p = path.clone();
        let r = within_deadline(move || async move { hand_over_socket(&p, sock, "abc").await });
        assert!(r.is_none(), "the handover ended: {r:?}");
        drop(std_listener);
    }

    #[test]
    fn an_agent_that_never_answers_cannot_hold_the_handover() {
        lizard_test_support::needs_root!();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // Accepts, reads everything, never answers (the connection is held open).
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok((c, _)) = listener.accept() {
                let _ = recv_waiting(&c);
                let _ = held_tx.send(c);
            }
        });
        let sock = new_socket(dir.path());
        let p = path.clone();
        let r = within_deadline(move || async move { hand_over_socket(&p, sock, "abc").await });
        assert!(r.is_none(), "the handover ended: {r:?}");
        drop(held_rx);
    }

    #[test]
    fn an_agent_gets_the_socket_and_the_sandbox_id() {
        lizard_test_support::needs_root!();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let agent = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let (msg, fds) = recv_waiting(&c).unwrap();
            std::io::Write::write_all(&mut c, b"k").unwrap();
            (msg, fds.len(), fds.first().map(|f| f.as_raw_fd() >= 0))
        });
        let sock = new_socket(dir.path());
        let id = new_sandbox_id();
        let (p, id2) = (path.clone(), id.clone());
        let r = within_deadline(move || async move { hand_over_socket(&p, sock, &id2).await });
        assert_eq!(r, Some(Ok(())));
        let (msg, nfds, open) = agent.join().unwrap();
        assert_eq!(msg, format!("\0{id}\n").into_bytes());
        assert_eq!((nfds, open), (1, Some(true)));
    }
}
