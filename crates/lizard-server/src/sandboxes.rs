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
//! Not here: HTTP (see `crate::api`), forwarding to the agent (see `crate::proxy`), usage numbers
//! (see `crate::sandboxes::metering`).

pub mod agent_exe;
pub mod metering;
pub mod snapshot;

use crate::agent_client::AgentClient;
use crate::store::{now_ms, SandboxRow, Store, StoreError, StoredState, VolumeRow};
use crate::volumes::{VolumeError, Volumes};
use lizard_jail::cgroup::Cgroup;
use lizard_jail::sandbox::{
    Bind, Capability, IdMap, InheritFd, Limits, RootfsSpec, SandboxSpec, UserSpec,
};
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
    live: RwLock<HashMap<String, Arc<Sandbox>>>,
    timeouts_changed: Notify,
    pool: Mutex<Vec<LaunchedSandbox>>,
    pool_wanted: Notify,
    /// Held by the pool filler while it launches one sandbox; taken by `drain_pool` to close.
    pool_filling: tokio::sync::Mutex<bool>,
    /// Itself, for the PID 1 watches (which outlive the calls that start them).
    me: std::sync::Weak<Sandboxes>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub use crate::ids::new_sandbox_id;

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
            cfg,
            store,
            live: RwLock::new(HashMap::new()),
            timeouts_changed: Notify::new(),
            pool: Mutex::new(Vec::new()),
            pool_wanted: Notify::new(),
            pool_filling: tokio::sync::Mutex::new(false),
        })
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

    fn resolve_limits(&self, r: &LimitsRequest) -> Result<SandboxLimits, SandboxError> {
        let d = self.cfg.default_limits;
        let l = SandboxLimits {
            memory_mb: r.memory_mb.unwrap_or(d.memory_mb),
            cpu_millicores: r.cpu_millicores.unwrap_or(d.cpu_millicores),
            pids: r.pids.unwrap_or(d.pids),
            tmp_mb: r.tmp_mb.unwrap_or(d.tmp_mb),
            disk_mb: r.disk_mb.unwrap_or(d.disk_mb),
        };
        if !(64..=1024 * 1024).contains(&l.memory_mb) {
            return Err(SandboxError::Invalid(
                "limits.memory_mb must be between 64 and 1048576".into(),
            ));
        }
        if !(10..=256_000).contains(&l.cpu_millicores) {
            return Err(SandboxError::Invalid(
                "limits.cpu_millicores must be between 10 and 256000".into(),
            ));
        }
        if !(16..=1_000_000).contains(&l.pids) {
            return Err(SandboxError::Invalid(
                "limits.pids must be between 16 and 1000000".into(),
            ));
        }
        if !(1..=1024 * 1024).contains(&l.tmp_mb) {
            return Err(SandboxError::Invalid(
                "limits.tmp_mb must be between 1 and 1048576".into(),
            ));
        }
        if !(64..=16 * 1024 * 1024).contains(&l.disk_mb) {
            return Err(SandboxError::Invalid(
                "limits.disk_mb must be between 64 and 16777216".into(),
            ));
        }
        Ok(l)
    }

    /// [`Sandboxes::create`] in a task of its own: a caller that goes away (a client that hangs
    /// up, so its handler is dropped) does not cancel a launch halfway, which would leave a
    /// running sandbox that neither the API nor the store knows. The sandbox is then created as
    /// asked (and ends by its timeout like any other).
    pub async fn create_detached(
        self: &Arc<Self>,
        req: CreateSandbox,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let this = self.clone();
        tokio::spawn(async move { this.create(req).await })
            .await
            .map_err(|e| SandboxError::Launch(format!("the create task failed: {e}")))?
    }

    /// Create and start a sandbox; returns once its agent answers.
    pub async fn create(
        self: &Arc<Self>,
        req: CreateSandbox,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let template_name = req
            .template
            .clone()
            .unwrap_or_else(|| self.cfg.default_template.clone());
        // A name, never a path: the template library also accepts spec file paths.
        if template_name.is_empty()
            || template_name.len() > 64
            || !template_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || template_name.starts_with('.')
        {
            return Err(SandboxError::Invalid(format!(
                "invalid template name {template_name:?}"
            )));
        }
        let timeout_ms = req.timeout_ms.unwrap_or(self.cfg.default_timeout_ms);
        if timeout_ms == 0 || timeout_ms > self.cfg.max_timeout_ms {
            return Err(SandboxError::Invalid(format!(
                "timeout_ms must be between 1 and {}",
                self.cfg.max_timeout_ms
            )));
        }
        check_bounds("metadata", &req.metadata, METADATA_BOUNDS)?;
        check_bounds("env", &req.envs, ENV_BOUNDS)?;
        for k in req.envs.keys() {
            if !lizard_proto::valid_env_name(k) {
                return Err(SandboxError::Invalid(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
            // The agent reads its settings from LIZARD_* variables: a sandbox's environment
            // must not reconfigure it (only the operator's --agent-env does).
            if k.starts_with(RESERVED_ENV_PREFIX) {
                return Err(SandboxError::Invalid(format!(
                    "environment variable names starting with {RESERVED_ENV_PREFIX} are reserved \
                     ({k:?})"
                )));
            }
        }
        let limits = self.resolve_limits(&req.limits)?;
        let wanted = check_volume_requests(&req.volumes)?;
        let (volumes, _claim) = self.claim_volumes(&req.project, wanted).await?;
        let egress = crate::egress::rules(&req.network.egress)?;
        self.check_inject(&req.project, &req.network, egress.as_ref())?;
        let pooled = if self.pool_eligible(&template_name, &req) {
            self.take_pooled()
        } else {
            None
        };
        let launched = match pooled {
            Some(l) => Ok(l),
            None => {
                self.launch_new(
                    (&req.project, &template_name),
                    &req.envs,
                    limits,
                    &volumes,
                    egress.as_ref().map(|_| &req.network),
                )
                .await
            }
        };
        let launched = launched?;
        self.refill_pool();
        let now = now_ms();
        let LaunchedSandbox {
            id,
            runtime,
            agent,
            exited,
            egress,
        } = launched;
        let sb = Arc::new(Sandbox {
            id: id.clone(),
            project: req.project.clone(),
            template: template_name.clone(),
            created_at_ms: now,
            metadata: req.metadata.clone(),
            envs: req.envs.clone(),
            limits,
            on_timeout: req.on_timeout,
            network: Mutex::new(req.network.clone()),
            runtime,
            volumes: volumes.clone(),
            timeout_at_ms: AtomicU64::new(now + timeout_ms),
            timeout_ms: AtomicU64::new(timeout_ms),
            paused_remaining_ms: AtomicU64::new(0),
            state: Mutex::new(StoredState::Running),
            paused_at_ms: AtomicU64::new(0),
            hibernating: Default::default(),
            lifecycle: Arc::new(tokio::sync::Mutex::new(())),
            agent,
            metrics: Default::default(),
            packages: Default::default(),
            egress: Mutex::new(egress),
            mirror_metered: Default::default(),
            egress_metered: Default::default(),
        });
        let stored = self.store.ensure_project(&req.project).and_then(|()| {
            self.store.insert_sandbox(&SandboxRow {
                id: id.clone(),
                project: req.project,
                template: template_name,
                state: StoredState::Running,
                created_at_ms: now,
                timeout_at_ms: now + timeout_ms,
                ended_at_ms: None,
                metadata: req.metadata,
                envs: req.envs,
                runtime: serde_json::to_value(&sb.runtime).unwrap_or_default(),
                limits: serde_json::to_value(limits).unwrap_or_default(),
                paused_remaining_ms: 0,
                on_timeout: req.on_timeout,
                timeout_ms,
                volumes: volumes.clone(),
                network: serde_json::to_value(&req.network).unwrap_or_default(),
            })
        });
        if let Err(e) = stored {
            destroy_unwatched(&sb.runtime, true);
            self.id_ranges.release(&id);
            return Err(e.into());
        }
        self.serve_packages(&sb).await;
        if let Ok(mut m) = self.live.write() {
            m.insert(id.clone(), sb.clone());
        }
        match exited {
            // A pooled sandbox: its watch runs since it was pooled. If PID 1 exited while it was
            // neither pooled nor live (just now), the watch found nothing: clean up here.
            Some(flag) => {
                if flag.load(Ordering::SeqCst) {
                    self.pid1_exited(&id, sb.runtime.pid).await;
                    return Err(SandboxError::Launch(
                        "the pooled sandbox's agent exited".into(),
                    ));
                }
            }
            None => self.watch(&id, sb.runtime.pid, None),
        }
        // Live now: `_claim` (dropped on return) hands the count over to `volume_users`.
        self.timeouts_changed.notify_one();
        Ok(sb)
    }

    /// Serve the package registries' mirror (`cfg.packages`) to sandbox `sb`: a listener of the
    /// server's own at `lizard_packages::LISTEN_ADDR` made in the sandbox's network namespace
    /// (`tcp_listener_in_netns_of`, entered through a pidfd of PID 1 checked to be in the
    /// sandbox's cgroup, so a reused pid cannot name another process's namespace). Called
    /// whenever its processes (re)start: a create, a wake or restore, a clone, an adoption —
    /// before any user code of a new sandbox runs, so none of it can take the address first (a
    /// restored or adopted sandbox that did only deprives itself). Failing leaves the sandbox
    /// without the mirror (logged), never fails the sandbox.
    async fn serve_packages(&self, sb: &Arc<Sandbox>) {
        let Some(proxy) = &self.cfg.packages else {
            return;
        };
        let packages_allowed = self
            .store
            .project_allows_packages(&sb.project)
            .unwrap_or(false);
        let view = lizard_packages::SandboxView {
            id: sb.id.clone(),
            project: sb.project.clone(),
            packages_allowed,
            has_egress: !sb.network().egress.is_none(),
        };
        let (pid, cgroup) = (sb.runtime.pid, sb.runtime.cgroup.clone());
        let listener = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::network::tcp_listener_in_netns_of(pidfd, lizard_packages::LISTEN_ADDR)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .and_then(|l| tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string()));
        match listener {
            Ok(l) => {
                let mut handle = sb.packages.lock().unwrap_or_else(|e| e.into_inner());
                *handle = Some(proxy.serve(l, view));
                // A new handle counts from zero.
                *sb.mirror_metered.lock().unwrap_or_else(|e| e.into_inner()) = (0, 0);
            }
            Err(e) => tracing::warn!(sandbox = %sb.id, error = %e,
                "no package registries in this sandbox"),
        }
    }

    /// Configure the network namespace of the sandbox whose PID 1 is `rt.pid` for egress and
    /// serve its relay and DNS responder there under `rules` (see `crate::egress`): entered, like
    /// the mirror's listener, through a pidfd of PID 1 checked to be in the sandbox's cgroup.
    /// Called before the agent is waited for (no user code has run in a new sandbox), and again
    /// at an adoption (the ruleset is reinstalled: the same for every sandbox).
    async fn serve_egress(
        &self,
        (id, project): (&str, &str),
        rt: &Runtime,
        network: &NetworkRequest,
    ) -> Result<crate::egress::EgressHandle, String> {
        let rules = crate::egress::rules(&network.egress)
            .map_err(|e| e.to_string())?
            .unwrap_or_else(lizard_egress::Rules::none);
        // A rule that no longer holds (its secret deleted since) costs the sandbox its injection,
        // never its egress or its start: its requests then go out without the secret.
        let injection = match self
            .injection((id, project), &rt.dir, network, &rules)
            .await
        {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e,
                    "the sandbox's inject rules no longer hold; serving its egress without them");
                None
            }
        };
        let (pid, cgroup) = (rt.pid, rt.cgroup.clone());
        let sockets = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::network::egress_in_netns_of(
                pidfd,
                &lizard_egress::nft::DEFAULT_ROUTE,
                &lizard_egress::nft::ruleset(),
                lizard_egress::PROXY_ADDR,
                lizard_egress::DNS_ADDR,
            )
            .map_err(|e| lizard_jail::error_chain(&e))
        })
        .await
        .map_err(|e| e.to_string())??;
        let handle = self
            .cfg
            .egress
            .serve(sockets, rules)
            .map_err(|e| format!("serving the sandbox's egress: {e}"))?;
        handle.policy().set_injection(injection);
        Ok(handle)
    }

    /// Check a create's `network.inject` (hosts allowed by `egress`, secrets of `project`
    /// existing): an invalid request naming the rule, before anything is launched.
    fn check_inject(
        &self,
        project: &str,
        network: &NetworkRequest,
        egress: Option<&lizard_egress::Rules>,
    ) -> Result<(), SandboxError> {
        if network.inject.is_empty() {
            return Ok(());
        }
        let Some(rules) = egress else {
            return Err(SandboxError::Invalid(
                "network.inject needs network.egress allowing its hosts".into(),
            ));
        };
        crate::egress::inject_rules(
            &network.inject,
            rules,
            project,
            &self.store,
            &self.cfg.secrets,
        )?;
        Ok(())
    }

    /// The secret injection of sandbox `id` (of `project`, directory `dir`) for `network`: its
    /// rules with the secrets' values, its CA (kept in `dir`), and an audit event for each use.
    /// `None` without `network.inject`.
    async fn injection(
        &self,
        (id, project): (&str, &str),
        dir: &Path,
        network: &NetworkRequest,
        rules: &lizard_egress::Rules,
    ) -> Result<Option<Arc<lizard_egress::inject::Injection>>, SandboxError> {
        if network.inject.is_empty() {
            return Ok(None);
        }
        let inject = crate::egress::inject_rules(
            &network.inject,
            rules,
            project,
            &self.store,
            &self.cfg.secrets,
        )?;
        let (dir, sid) = (dir.to_path_buf(), id.to_string());
        let ca = tokio::task::spawn_blocking(move || crate::egress::load_or_make_ca(&dir, &sid))
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
            .map_err(|e| SandboxError::Launch(format!("the sandbox's egress CA: {e}")))?;
        let (store, sandbox, project) = (self.store.clone(), id.to_string(), project.to_string());
        let on_use = Arc::new(move |u: lizard_egress::inject::InjectUse| {
            let object = crate::audit::cut(&format!(
                "{} -> {} {} {} (sandbox {sandbox})",
                u.secrets.join(","),
                u.host,
                u.method,
                u.path
            ));
            let e = lizard_proto::AuditEvent {
                id: 0,
                at_ms: now_ms(),
                actor: "sandbox".into(),
                project: Some(project.clone()),
                key_prefix: None,
                action: "secret.use".into(),
                object: Some(object),
                status: 0,
                client: sandbox.clone(),
            };
            if let Err(err) = store.add_audit(&e) {
                tracing::warn!(error = %err, "recording a secret's use");
            }
            tracing::info!(target: "audit", sandbox = %sandbox, project = %project,
                secrets = %u.secrets.join(","), host = %u.host, "secret.use");
        });
        Ok(Some(Arc::new(self.cfg.egress.injection(
            inject,
            Arc::new(ca),
            on_use,
        ))))
    }

    /// [`Self::serve_egress`] for a running (or paused) sandbox `sb` with egress whose processes
    /// are already there (an adoption, a rule change that turns egress on): failing leaves it
    /// without egress (logged, its connections refused at once), never fails the sandbox.
    async fn serve_egress_of(&self, sb: &Arc<Sandbox>) {
        let network = sb.network();
        if network.egress.is_none() {
            return;
        }
        match self
            .serve_egress((&sb.id, &sb.project), &sb.runtime, &network)
            .await
        {
            Ok(h) => *sb.egress.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => tracing::warn!(sandbox = %sb.id, error = %e, "no egress in this sandbox"),
        }
    }

    /// Whether a create request can be served by a pooled sandbox: the default template, with
    /// nothing that is fixed at launch (environment, limits, network) asked for.
    fn pool_eligible(&self, template: &str, req: &CreateSandbox) -> bool {
        self.cfg.pool_size > 0
            && template == self.cfg.default_template
            && req.envs.is_empty()
            && req.limits == LimitsRequest::default()
            && req.volumes.is_empty()
            && req.network.egress.is_none()
    }

    /// Resolve the requested volumes in `project`, mount them on the host and count this launch
    /// as a user of each until the returned claim is dropped.
    async fn claim_volumes(
        &self,
        project: &str,
        wanted: Vec<(String, String, bool)>,
    ) -> Result<(Vec<SandboxVolume>, crate::volumes::Claim<'_>), SandboxError> {
        if wanted.is_empty() {
            return Ok((Vec::new(), self.volumes.claim(Vec::new())));
        }
        let _lock = self.volumes.lock.lock().await;
        let mut out: Vec<SandboxVolume> = Vec::new();
        for (key, mount_path, read_only) in wanted {
            let row = self
                .store
                .find_volume(project, &key)?
                .ok_or_else(|| VolumeError::NotFound(key.clone()))?;
            if out.iter().any(|v| v.volume_id == row.id) {
                return Err(SandboxError::Invalid(format!(
                    "volume {:?} is listed twice",
                    row.name
                )));
            }
            self.volumes.ensure_mounted(&row.id).await?;
            out.push(SandboxVolume {
                volume_id: row.id,
                name: row.name,
                mount_path,
                read_only,
            });
        }
        let claim = self
            .volumes
            .claim(out.iter().map(|v| v.volume_id.clone()).collect());
        Ok((out, claim))
    }

    /// Live (running or paused) sandboxes that mount volume `id`.
    pub fn volume_users(&self, id: &str) -> Vec<String> {
        let mut users: Vec<String> = self
            .all()
            .into_iter()
            .filter(|sb| sb.volumes.iter().any(|v| v.volume_id == id))
            .map(|sb| sb.id.clone())
            .collect();
        users.sort();
        users
    }

    /// Delete a volume: refused with `VolumeError::InUse` while a live sandbox mounts it, unless
    /// `force`, which kills those sandboxes first. A sandbox still being launched with it always
    /// makes the delete fail.
    pub async fn delete_volume(&self, row: &VolumeRow, force: bool) -> Result<(), SandboxError> {
        let lock = self.volumes.lock.lock().await;
        let users = self.volume_users(&row.id);
        let launching = self.volumes.is_pending(&row.id);
        if launching || (!users.is_empty() && !force) {
            let mut sandboxes = users;
            if launching {
                sandboxes.push("(one being created)".into());
            }
            return Err(VolumeError::InUse {
                name: row.name.clone(),
                sandboxes,
            }
            .into());
        }
        for id in users {
            match self.kill(&id).await {
                Ok(()) | Err(SandboxError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.volumes.destroy(row).await?;
        drop(lock);
        Ok(())
    }

    /// At shutdown: unmount the volumes no live sandbox uses.
    pub async fn unmount_unused_volumes(&self) {
        self.volumes
            .unmount_unused(|id| !self.volume_users(id).is_empty())
            .await;
    }

    fn take_pooled(&self) -> Option<LaunchedSandbox> {
        self.pool.lock().ok().and_then(|mut p| p.pop())
    }

    /// Ask the pool filler to top the pool up (in the background).
    pub fn refill_pool(&self) {
        if self.cfg.pool_size > 0 {
            self.pool_wanted.notify_one();
        }
    }

    /// Keep `pool_size` ready sandboxes of the default template, each with a started Python
    /// kernel, so that `create` is a claim and the first run is warm. Runs until the process ends.
    pub async fn run_pool(self: Arc<Self>) {
        if self.cfg.pool_size == 0 {
            return;
        }
        loop {
            while self.pool.lock().map(|p| p.len()).unwrap_or(0) < self.cfg.pool_size {
                let closed = self.pool_filling.lock().await;
                if *closed {
                    return;
                }
                let template = self.cfg.default_template.clone();
                let limits = self.cfg.default_limits;
                match self
                    .launch_new(("", &template), &BTreeMap::new(), limits, &[], None)
                    .await
                {
                    Ok(l) => {
                        // Pooled sandboxes are handed out with their Python kernel running.
                        if let Err(e) = l
                            .agent
                            .wait_default_context(
                                lizard_proto::Language::Python,
                                self.cfg.ready_timeout,
                            )
                            .await
                        {
                            tracing::warn!(sandbox = %l.id, error = %e, "warming a pooled sandbox");
                            destroy_unwatched(&l.runtime, true);
                            self.id_ranges.release(&l.id);
                            break;
                        }
                        let flag = Arc::new(AtomicBool::new(false));
                        let (id, pid) = (l.id.clone(), l.runtime.pid);
                        if let Ok(mut p) = self.pool.lock() {
                            p.push(LaunchedSandbox {
                                exited: Some(flag.clone()),
                                ..l
                            });
                        }
                        self.watch(&id, pid, Some(flag));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "filling the sandbox pool");
                        break;
                    }
                }
            }
            self.pool_wanted.notified().await;
        }
    }

    /// Stop refilling and kill the pooled (unclaimed) sandboxes, e.g. at shutdown. Waits for a
    /// launch in progress, so nothing is left behind.
    pub async fn drain_pool(&self) {
        *self.pool_filling.lock().await = true;
        let pooled: Vec<LaunchedSandbox> = self
            .pool
            .lock()
            .map(|mut p| p.drain(..).collect())
            .unwrap_or_default();
        for l in pooled {
            destroy(&l.runtime);
            self.id_ranges.release(&l.id);
        }
    }

    /// Launch a sandbox of `template_name` and wait until its agent answers.
    async fn launch_new(
        &self,
        (project, template_name): (&str, &str),
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        volumes: &[SandboxVolume],
        egress: Option<&NetworkRequest>,
    ) -> Result<LaunchedSandbox, SandboxError> {
        let id = new_sandbox_id();
        let dir = self.sandboxes_dir().join(&id);
        // Before anything is made: the disk image must fit the data dir's file system (counted
        // as a create in progress until this returns).
        let _reserved = self.volumes.storage.reserve(
            &dir.join("disk.img"),
            limits.disk_mb * 1024 * 1024,
            "a sandbox disk",
        )?;
        let id_base = self.id_ranges.take(&id).ok_or_else(|| {
            SandboxError::Launch(format!(
                "every host id range is in use ({} sandboxes)",
                self.id_ranges.held()
            ))
        })?;
        let launched = self
            .launch_in(
                id.clone(),
                &dir,
                (project, template_name),
                envs,
                limits,
                volumes,
                egress,
                (true, Some(id_base)),
                0,
            )
            .await;
        if launched.is_err() {
            self.id_ranges.release(&id);
        }
        launched
    }

    /// The template build a sandbox directory's last launch used (from its `runtime.json`), with
    /// its layers.
    fn previous_build(&self, dir: &Path) -> Option<Chain> {
        let rt: Option<Runtime> = std::fs::read(dir.join(RUNTIME_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        // A clone's first launch: the build its snapshot was taken on (`snapshot`).
        let build = match rt {
            Some(rt) => rt.template_dir?,
            None => Self::clone_build(dir)?,
        };
        let (top, _) = lizard_template::layer::read_build_dir(&build)?;
        lizard_template::layer::resolve(&top).ok()
    }

    /// The template `template_name` as `project` sees it, with its chain of layers: the
    /// project's own user template, else a public one (see `crate::templates`), else a built-in
    /// or a host-built one. Another project's private template is unknown (a 404, like any
    /// unknown name).
    pub(crate) fn find_template(
        &self,
        project: &str,
        template_name: &str,
    ) -> Result<Chain, SandboxError> {
        if !project.is_empty() {
            if let Some(row) = self.store.find_template(project, template_name)? {
                let unknown = || SandboxError::UnknownTemplate(template_name.to_string());
                let key = row.key.as_deref().ok_or_else(unknown)?;
                // User templates live in the server's own data dir.
                let dir = lizard_template::layer::user_dir(&self.cfg.data_dir, &row.id).join(key);
                let (top, _) = lizard_template::layer::read_build_dir(&dir).ok_or_else(unknown)?;
                return lizard_template::layer::resolve(&top)
                    .map_err(|e| SandboxError::Launch(format!("template {template_name}: {e}")));
            }
        }
        let top = self.find_builtin(template_name)?;
        lizard_template::layer::resolve(&top)
            .map_err(|e| SandboxError::Launch(format!("template {template_name}: {e}")))
    }

    /// A built-in or host-built template by name.
    pub(crate) fn find_builtin(&self, template_name: &str) -> Result<Template, SandboxError> {
        let dir = &self.cfg.templates_data_dir;
        let template = match lizard_template::find(dir, template_name) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(SandboxError::UnknownTemplate(template_name.to_string())),
            // Not a built-in: a user's own template, built from its spec file into this data dir.
            Err(lizard_template::TemplateError::UnknownTemplate { .. }) => {
                lizard_template::find_built(dir, template_name)
                    .ok_or_else(|| SandboxError::UnknownTemplate(template_name.to_string()))?
            }
            Err(e) => return Err(SandboxError::Launch(format!("looking up template: {e}"))),
        };
        Ok(template)
    }

    /// Launch sandbox `id` in `dir` (a new directory, or the kept one of a hibernated sandbox:
    /// its writable layer is reused) and wait until its agent answers. On failure a new
    /// sandbox's directory is removed, a hibernated one's kept. `(fresh, id_base)`: whether it
    /// is a new sandbox, and the first host id of its own range (`None`: the shared range of
    /// sandboxes from before per-sandbox ranges).
    #[allow(clippy::too_many_arguments)]
    async fn launch_in(
        &self,
        id: String,
        dir: &Path,
        (project, template_name): (&str, &str),
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        volumes: &[SandboxVolume],
        egress: Option<&NetworkRequest>,
        (fresh, id_base): (bool, Option<u32>),
        cpu_base_ms: u64,
    ) -> Result<LaunchedSandbox, SandboxError> {
        self.launch_or_restore_in(
            id,
            dir,
            (project, template_name),
            envs,
            limits,
            volumes,
            egress,
            (fresh, id_base),
            cpu_base_ms,
            None,
        )
        .await
    }

    /// [`Self::launch_in`], or with `restore` a CRIU restore of the sandbox into the same host
    /// side (`SandboxSpec::restore`).
    #[allow(clippy::too_many_arguments)]
    async fn launch_or_restore_in(
        &self,
        id: String,
        dir: &Path,
        (project, template_name): (&str, &str),
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        volumes: &[SandboxVolume],
        egress: Option<&NetworkRequest>,
        (fresh, id_base): (bool, Option<u32>),
        cpu_base_ms: u64,
        restore: Option<(lizard_jail::sandbox::RestoreFrom, Option<String>)>,
    ) -> Result<LaunchedSandbox, SandboxError> {
        // The agent binary it will run: a restore's is the checkpoint's (its digest, second).
        let agent_file = match (&self.cfg.checkpoint.agent_exes, &restore) {
            (None, _) => None,
            (Some(x), None) => x
                .current_digest()
                .await
                .ok()
                .map(|digest| agent_exe::AgentFile {
                    path: x.current_file().to_path_buf(),
                    digest,
                }),
            (Some(x), Some((_, digest))) => Some(
                x.for_restore(digest.as_deref())
                    .await
                    .map_err(SandboxError::Launch)?,
            ),
        };
        let restore = restore.map(|(from, _)| from);
        // A relaunch keeps the lower layer its writable layer was made on, when it is still there.
        let chain = match (!fresh).then(|| self.previous_build(dir)).flatten() {
            Some(c) => c,
            None => self.find_template(project, template_name)?,
        };
        let template = chain.top.clone();
        let meta = template.meta.clone();
        // A template without Python or Node (the Debian bases) serves commands, files and Bash;
        // its agent refuses contexts of the missing language with a typed error.
        let (python, node) = (meta.python.clone(), meta.node.clone());
        let dir = dir.to_path_buf();
        let disk = dir.join("disk");
        let cleanup = |dir: &Path| {
            if fresh {
                remove_files(dir, Some(&dir.join("disk")));
            }
        };
        // The sandbox's host ids; the template's files are `meta.id_shift + id` on disk.
        let host_base = id_base.unwrap_or(meta.id_shift);
        let layer_map = IdMap {
            inside: 0,
            outside: host_base,
            count: 65536,
        };
        let prepared = {
            // The top layer that has an `/etc` (a layer may not: it holds only what its build
            // changed).
            let root = chain
                .lower
                .iter()
                .find(|l| l.join("etc").is_dir())
                .unwrap_or(&template.rootfs)
                .clone();
            let (dir, disk) = (dir.clone(), disk.clone());
            let layer_base = meta.id_shift;
            let bytes = limits.disk_mb * 1024 * 1024;
            // With egress: the sandbox's CA (kept in its directory) and the host's roots, which
            // its layer's trust files are made of.
            let trust = egress.map(|_| (id.clone(), self.cfg.egress.host_roots_pem()));
            tokio::task::spawn_blocking(move || {
                if fresh {
                    prepare_dirs(&dir, &disk, bytes, &root, trust, |id| {
                        layer_map.layer_to_outside(layer_base, id)
                    })
                } else {
                    reopen_dirs(&dir, &disk)
                }
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))
            .and_then(|r| r)
        };
        if let Err(e) = prepared {
            cleanup(&dir);
            return Err(e);
        }
        // The sandbox's host-side logs: it writes into pipes the server drains (capped at the
        // writer, see `crate::host_logs`), never into a host file.
        for name in crate::host_logs::FILES {
            let log = dir.join(name);
            if let Err(e) = crate::host_logs::make_pipe(&log) {
                cleanup(&dir);
                return Err(io_err(&log)(e));
            }
        }
        crate::host_logs::ensure_drains(&dir);
        // The run dir (hibernation's saved state) lives on the sandbox's own disk image: a bind
        // from there shows `/run` in the sandbox's mountinfo, not a host path. The agent (the
        // sandbox's root) writes there; the host changes only the directory itself, through a
        // descriptor opened without following links (the disk's root is not the sandbox's).
        let owned_run = {
            let disk = disk.clone();
            // The agent's: it runs as the sandbox's root (user code cannot write there).
            let owner = (host_base, host_base);
            tokio::task::spawn_blocking(move || {
                lizard_jail::hostpath::TrustedDir::open(&disk)
                    .and_then(|d| d.own_subdir("run".as_ref(), owner.0, owner.1, 0o755))
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))
            .and_then(|r| {
                r.map_err(|e| {
                    SandboxError::Launch(format!(
                        "the sandbox's run dir: {}",
                        lizard_jail::error_chain(&e)
                    ))
                })
            })
        };
        if let Err(e) = owned_run {
            cleanup(&dir);
            return Err(e);
        }

        let mut spec = self.spec(
            &id,
            &chain,
            (python.as_deref(), node.as_deref()),
            &dir,
            envs,
            limits,
            fresh,
            egress.is_none(),
        );
        spec.id_map = layer_map;
        // The template layer (and the volumes) are shown through the sandbox's own range.
        spec.layer_id_base = id_base.map(|_| meta.id_shift);
        // Volumes: their host mount directories, bound at their mount paths (no symlink followed),
        // through the id map: their files stay in the template's range on disk, shared by
        // sandboxes of every range.
        spec.binds.extend(volumes.iter().map(|v| Bind {
            source: self.volumes.mount_dir(&v.volume_id),
            target: PathBuf::from(&v.mount_path),
            readonly: v.read_only,
            no_symlinks: true,
            idmapped: true,
        }));
        if let (Some(file), Some(current)) = (&agent_file, &self.cfg.agent_exe_file) {
            // The agent's bind (see `spec`) from the file of the binary it runs.
            for b in spec.binds.iter_mut().filter(|b| &b.source == current) {
                b.source = file.path.clone();
            }
        }
        let agent_exe = agent_file.map(|f| f.digest);
        let restoring = restore.is_some();
        spec.restore = restore;
        let launched = match launch(&self.cfg.lizard_bin, &spec).await {
            Ok(l) => l,
            Err(e) => {
                cleanup(&dir);
                return Err(e);
            }
        };
        let runtime = Runtime {
            pid: launched.pid,
            cgroup: launched.cgroup,
            dir: dir.clone(),
            socket: dir.join(AGENT_SOCKET),
            cpu_base_ms,
            disk: Some(disk),
            template_dir: Some(template.dir.clone()),
            template_bases: chain.builds[1..].to_vec(),
            id_base,
            agent_peer: restoring.then_some(launched.helper_pid),
            criu_restored: restoring,
            agent_exe,
        };
        for build in &chain.builds {
            if let Err(e) = lizard_template::store::pin(build, &id) {
                tracing::warn!(sandbox = %id, error = %e, "cannot pin the template build");
            }
        }
        // Written before anything can fail, so a server that dies now still finds and removes
        // this sandbox at its next start (see `adopt`).
        let rt_file = dir.join(RUNTIME_FILE);
        if let Err(e) = std::fs::write(&rt_file, serde_json::to_vec(&runtime).unwrap_or_default()) {
            destroy_unwatched(&runtime, fresh);
            return Err(io_err(&rt_file)(e));
        }
        let egress = match egress {
            Some(network) => match self.serve_egress((&id, project), &runtime, network).await {
                Ok(h) => Some(h),
                Err(e) => {
                    destroy_unwatched(&runtime, fresh);
                    return Err(SandboxError::Launch(e));
                }
            },
            None => None,
        };
        let agent = AgentClient::with_limits(
            runtime.socket.clone(),
            runtime.agent_peer(),
            self.cfg.agent_limits,
        );
        if let Err(e) = agent.wait_ready(self.cfg.ready_timeout).await {
            tracing::warn!(sandbox = %id, error = %e, log = %dir.join("agent.log").display(),
                "agent not ready; killing the sandbox");
            destroy_unwatched(&runtime, fresh);
            return Err(SandboxError::NotReady(
                self.cfg.ready_timeout.as_millis() as u64
            ));
        }
        let (mut runtime, mut agent) = (runtime, agent);
        if runtime.agent_peer.is_some() {
            // Restored by CRIU: its listener is the launcher's, in the host's network namespace.
            // Hand it one of its own (see `move_agent_socket`); should that fail, it keeps the
            // launcher's (and is not checkpointed by CRIU again: `criu_refusal`).
            match move_agent_socket(&runtime, &id).await {
                Ok(()) => {
                    runtime.agent_peer = None;
                    agent = AgentClient::with_limits(
                        runtime.socket.clone(),
                        runtime.pid,
                        self.cfg.agent_limits,
                    );
                    let moved = agent.health().await.map(drop).map_err(|e| e.to_string());
                    let written = moved.and_then(|()| {
                        std::fs::write(&rt_file, serde_json::to_vec(&runtime).unwrap_or_default())
                            .map_err(|e| e.to_string())
                    });
                    if let Err(e) = written {
                        tracing::warn!(sandbox = %id, error = %e,
                            "the restored agent's new socket; killing the sandbox");
                        destroy_unwatched(&runtime, fresh);
                        return Err(SandboxError::Launch(format!(
                            "the restored agent's new socket: {e}"
                        )));
                    }
                }
                Err(e) => tracing::warn!(sandbox = %id, error = %e,
                    "the restored agent keeps the launcher's socket"),
            }
        }
        Ok(LaunchedSandbox {
            id,
            runtime,
            agent,
            exited: None,
            egress,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn spec(
        &self,
        id: &str,
        chain: &Chain,
        (python, node): (Option<&str>, Option<&str>),
        dir: &Path,
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        prestart: bool,
        no_egress: bool,
    ) -> SandboxSpec {
        let meta = &chain.top.meta;
        // A layered template's WORKDIR is where code runs by default.
        let cwd = chain
            .workdir
            .clone()
            .unwrap_or_else(|| meta.user.home.clone());
        // The package registries' mirror (`lizard-packages`): pip, uv and npm point at it, and
        // without egress the proxy variables too, so that any other destination gets its
        // explanation at once. The template's and the user's own settings win.
        let mut env: BTreeMap<String, String> = match &self.cfg.packages {
            Some(_) => lizard_packages::sandbox_env(no_egress)
                .into_iter()
                .collect(),
            None => BTreeMap::new(),
        };
        if !no_egress {
            // Its TLS clients trust its own CA too (secret injection terminates TLS with it).
            env.extend(
                crate::egress::trust_env()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string())),
            );
        }
        env.extend(meta.env.clone());
        env.extend(envs.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(self.cfg.agent_env.clone());
        env.insert("LIZARD_SANDBOX_ID".into(), id.to_string());
        env.insert("HOSTNAME".into(), id.to_string());
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--listen".into(),
            "127.0.0.1:8080".into(),
            // The socket the launcher bound at `<dir>/agent.sock` (see `inherit_fds` below).
            "--socket-fd".into(),
            "3".into(),
            "--default-cwd".into(),
            cwd.clone(),
            "--run-dir".into(),
            "/tmp/.lizard-agent".into(),
            "--context-cgroups".into(),
            lizard_jail::delegation::MOUNT_DIR.into(),
            // The agent is the sandbox's root (`user` and `keep_caps` below); everything user code
            // runs, it runs as the sandbox user, each context's kernel as a uid of its own.
            "--sandbox-user".into(),
            format!("{}:{}", meta.user.uid, meta.user.gid),
            "--context-uids".into(),
            format!(
                "{}:{}",
                lizard_template::meta::CONTEXT_UID_BASE,
                lizard_template::meta::CONTEXT_UIDS
            ),
        ];
        let mut without = Vec::new();
        match python {
            Some(p) => args.extend(["--python".into(), p.to_string()]),
            None => without.push("python"),
        }
        match node {
            Some(n) => args.extend(["--node".into(), n.to_string()]),
            None => without.push("javascript"),
        }
        if !without.is_empty() {
            args.push("--without".into());
            args.push(without.join(","));
        }
        if prestart && python.is_some() {
            // Most first runs are Python: start that kernel while the client is still talking.
            // (Not after hibernation: the restore recreates the saved contexts instead.)
            args.push("--prestart".into());
            args.push("python".into());
        }
        if let Some(p) = &meta.node_path {
            args.push("--node-path".into());
            args.push(p.clone());
        }
        SandboxSpec {
            id: id.to_string(),
            hostname: id.to_string(),
            rootfs: RootfsSpec {
                lower: chain.lower.clone(),
                upper: dir.join("disk/upper"),
                work: dir.join("disk/work"),
                mountpoint: dir.join("rootfs"),
            },
            binds: {
                let mut binds = vec![Bind {
                    source: dir.join("disk").join("run"),
                    target: PathBuf::from("/run/lizard"),
                    readonly: false,
                    ..Default::default()
                }];
                if let (None, Some(file)) = (&self.cfg.agent_wrapper, &self.cfg.agent_exe_file) {
                    // The agent's regular-file copy over the template's placeholder.
                    binds.push(Bind {
                        source: file.clone(),
                        target: PathBuf::from(&meta.lizard_bin),
                        readonly: true,
                        ..Default::default()
                    });
                }
                binds
            },
            id_map: IdMap {
                inside: 0,
                outside: self.cfg.id_shift,
                count: 65536,
            },
            layer_id_base: None,
            // PID 1, the agent, is the sandbox's root with only the capabilities it needs to run
            // user code as other users (see SECURITY.md, "The agent is the sandbox's root").
            user: UserSpec { uid: 0, gid: 0 },
            cwd: PathBuf::from(&cwd),
            // argv[0] only (the template's placeholder path): the agent runs from the sealed copy.
            program: PathBuf::from(&meta.lizard_bin),
            program_source: match (&self.cfg.agent_wrapper, &self.cfg.agent_exe_file) {
                // Run from the bind of the tmpfs copy (added below).
                (None, Some(_)) => None,
                (wrapper, _) => Some(wrapper.as_ref().unwrap_or(&self.cfg.agent_exe).proc_path()),
            },
            args,
            env,
            limits: Limits {
                memory_bytes: Some(limits.memory_mb * 1024 * 1024),
                pids_max: Some(limits.pids),
                cpu_millicores: Some(limits.cpu_millicores),
                tmp_bytes: Some(limits.tmp_mb * 1024 * 1024),
                nofile: Some(4096),
                ptys_max: Some(lizard_jail::sandbox::DEFAULT_PTYS_MAX),
            },
            keep_caps: AGENT_CAPS.to_vec(),
            context_cgroups: true,
            log_path: crate::host_logs::pipe_path(&dir.join("agent.log")),
            // fd 3: the agent's socket, in the sandbox's root-only directory on the host.
            inherit_fds: {
                let mut fds = vec![InheritFd::UnixListener {
                    path: dir.join(AGENT_SOCKET),
                }];
                if self.cfg.agent_wrapper.is_some() {
                    // fd 4: the real agent, for a wrapper to run (see `agent_wrapper`).
                    fds.push(InheritFd::ReadOnlyFile {
                        path: self.cfg.agent_exe.proc_path(),
                    });
                }
                fds
            },
            restore: None,
        }
    }

    /// Kill a sandbox: every process, its cgroup, its mounts and its writable layer are gone.
    pub async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        let (_sb, _guard) = self.locked(id).await?;
        self.kill_locked(id).await
    }

    /// Stop sandbox `id` for a template import (`crate::templates`): it leaves the API, every
    /// process is killed and its cgroup removed — and verified gone, else this fails — while its
    /// writable layer stays (its disk image still mounted on the host at `runtime.disk`). Call
    /// [`Sandboxes::discard_stopped`] with the returned runtime when the layer is imported.
    pub async fn stop_keep_layer(&self, id: &str) -> Result<Runtime, SandboxError> {
        let (_sb, _guard) = self.locked(id).await?;
        let sb = {
            let mut m = self
                .live
                .write()
                .map_err(|_| SandboxError::NotFound(id.to_string()))?;
            m.remove(id)
                .ok_or_else(|| SandboxError::NotFound(id.to_string()))?
        };
        sb.set_state(StoredState::Killed);
        sb.stop_packages();
        let rt = sb.runtime.clone();
        let stopped = {
            let rt = rt.clone();
            tokio::task::spawn_blocking(move || {
                let _ = rt.cgroup.kill_all();
                let _ = rt.cgroup.remove();
                // Bounded: the kill is final, an emptied cgroup goes in a few tries.
                for _ in 0..50 {
                    if rt.cgroup.remaining_dirs().is_empty() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = rt.cgroup.kill_all();
                    let _ = rt.cgroup.remove();
                }
                Err(rt.cgroup.remaining_dirs())
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
        };
        if let Err(left) = stopped {
            let rt2 = rt.clone();
            let _ = tokio::task::spawn_blocking(move || destroy(&rt2)).await;
            self.id_ranges.release(id);
            let _ = self
                .store
                .set_state(id, StoredState::Killed, Some(now_ms()));
            return Err(SandboxError::Launch(format!(
                "the build sandbox's cgroup is not empty: {left:?}"
            )));
        }
        Ok(rt)
    }

    /// Run `f` (blocking) on a running or paused sandbox's runtime with every process frozen and
    /// its lifecycle lock held (no resume, kill or hibernation meanwhile): a template from a
    /// running sandbox imports its writable layer so. A running sandbox is thawed afterwards; a
    /// paused one stays paused. Its timeout keeps counting.
    pub async fn with_frozen<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Runtime) -> T + Send + 'static,
    ) -> Result<T, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        let running = match sb.state() {
            StoredState::Running => true,
            StoredState::Paused => false,
            _ => {
                return Err(SandboxError::Invalid(format!(
                    "sandbox {id} is not running or paused"
                )))
            }
        };
        let cg = sb.runtime.cgroup.clone();
        if running {
            let cg = cg.clone();
            tokio::task::spawn_blocking(move || cg.freeze())
                .await
                .map_err(|e| SandboxError::Launch(e.to_string()))?
                .map_err(|e| SandboxError::Launch(format!("freezing the sandbox: {e}")))?;
        }
        let rt = sb.runtime.clone();
        let out = tokio::task::spawn_blocking(move || f(&rt)).await;
        if running {
            tokio::task::spawn_blocking(move || cg.thaw())
                .await
                .map_err(|e| SandboxError::Launch(e.to_string()))?
                .map_err(|e| SandboxError::Launch(format!("thawing the sandbox: {e}")))?;
        }
        out.map_err(|e| SandboxError::Launch(e.to_string()))
    }

    /// Remove a sandbox stopped by [`Sandboxes::stop_keep_layer`]: its files, its id range.
    pub async fn discard_stopped(&self, id: &str, rt: Runtime) {
        let _ = tokio::task::spawn_blocking(move || destroy(&rt)).await;
        self.id_ranges.release(id);
        if let Err(e) = self
            .store
            .set_state(id, StoredState::Killed, Some(now_ms()))
        {
            tracing::warn!(sandbox = %id, error = %e, "recording a build sandbox's end");
        }
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

    /// `PATCH /v1/sandboxes/{id}/network`: replace the egress rules and/or the inject rules of
    /// sandbox `id` (created with egress; a part `update` does not give stays) live — its next
    /// connection and DNS query are decided by them; connections already relayed go on — and keep
    /// them for its next lives (wake, restart, snapshots). `none` becomes
    /// "nothing allowed" (`{"allow": []}`): the sandbox keeps its egress plumbing, so that rules
    /// can be widened again. A sandbox created without egress cannot get it now (409): its tools
    /// were pointed at the package mirror as their proxy when it started.
    pub async fn set_network(
        &self,
        id: &str,
        update: lizard_proto::UpdateNetworkRequest,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        let mut network = update.applied_to(&sb.network());
        if sb.network().egress.is_none() {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} was created without egress, so its tools use the package mirror as \
                 their proxy; create the sandbox with network.egress (rules, even {{\"allow\": []}}, \
                 can then be changed at any time)"
            )));
        }
        if network.egress.is_none() {
            network.egress =
                lizard_proto::Egress::Rules(lizard_proto::EgressRules::allow(Vec::<String>::new()));
        }
        let rules =
            crate::egress::rules(&network.egress)?.unwrap_or_else(lizard_egress::Rules::none);
        let injection = self
            .injection((id, &sb.project), &sb.runtime.dir, &network, &rules)
            .await?;
        self.store
            .set_network(id, &serde_json::to_value(&network).unwrap_or_default())?;
        *sb.network.lock().unwrap_or_else(|e| e.into_inner()) = network;
        if let Some(h) = sb.egress.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            h.policy().set_rules(rules);
            h.policy().set_injection(injection);
        }
        Ok(sb)
    }

    async fn kill_locked(&self, id: &str) -> Result<(), SandboxError> {
        let sb = {
            let mut m = self
                .live
                .write()
                .map_err(|_| SandboxError::NotFound(id.to_string()))?;
            m.remove(id)
                .ok_or_else(|| SandboxError::NotFound(id.to_string()))?
        };
        // The cgroup's counters are read host-side; the agent's execution log only if it answers
        // at once: nothing the agent does can stop the kill.
        crate::sandboxes::metering::sample_within(self, &sb, self.cfg.final_sample_deadline).await;
        sb.set_state(StoredState::Killed);
        sb.stop_packages();
        let runtime = sb.runtime.clone();
        // Host-side and bounded (the cgroup's kill and removal have their own deadlines).
        let destroyed = tokio::task::spawn_blocking(move || destroy(&runtime)).await;
        self.id_ranges.release(id);
        self.store
            .set_state(id, StoredState::Killed, Some(now_ms()))?;
        destroyed.map_err(|e| SandboxError::Launch(e.to_string()))
    }

    /// Pause: every process of the sandbox is frozen (its memory, open files and kernel state kept
    /// exactly) and its timeout stops counting. Idempotent.
    pub async fn pause(&self, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        self.pause_inner(id, false).await
    }

    /// `timed_out`: the pause is the timeout's action, so a resume starts a whole new lifetime
    /// instead of the (zero) rest of this one.
    async fn pause_inner(&self, id: &str, timed_out: bool) -> Result<Arc<Sandbox>, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        // A hibernated sandbox is already stopped, more than paused.
        if matches!(sb.state(), StoredState::Paused | StoredState::Hibernated) {
            return Ok(sb);
        }
        crate::sandboxes::metering::sample_within(self, &sb, self.cfg.final_sample_deadline).await;
        let cg = sb.runtime.cgroup.clone();
        tokio::task::spawn_blocking(move || cg.freeze())
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
            .map_err(|e| SandboxError::Launch(format!("freezing the sandbox: {e}")))?;
        let remaining = if timed_out {
            sb.timeout_ms.load(Ordering::SeqCst)
        } else {
            sb.timeout_at_ms().saturating_sub(now_ms())
        }
        .max(1);
        sb.paused_remaining_ms.store(remaining, Ordering::SeqCst);
        sb.paused_at_ms.store(now_ms(), Ordering::SeqCst);
        sb.set_state(StoredState::Paused);
        self.store.set_paused(id, Some(remaining))?;
        self.timeouts_changed.notify_one();
        Ok(sb)
    }

    /// Resume a paused sandbox: processes continue where they stopped; the timeout counts again
    /// from what was left. A hibernated sandbox is relaunched and its contexts restored (the
    /// report says what came back and what was lost); its timeout starts again. Idempotent.
    pub async fn resume(
        &self,
        id: &str,
    ) -> Result<(Arc<Sandbox>, Option<HibernationReport>), SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        match sb.state() {
            StoredState::Running | StoredState::Killed => return Ok((sb, None)),
            StoredState::Hibernated => {
                let (sb, report) = self.wake(&sb).await?;
                return Ok((sb, Some(report)));
            }
            StoredState::Paused => {}
        }
        crate::sandboxes::metering::sample(self, &sb).await;
        let cg = sb.runtime.cgroup.clone();
        tokio::task::spawn_blocking(move || cg.thaw())
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
            .map_err(|e| SandboxError::Launch(format!("thawing the sandbox: {e}")))?;
        let at = now_ms() + sb.paused_remaining_ms.load(Ordering::SeqCst).max(1);
        sb.timeout_at_ms.store(at, Ordering::SeqCst);
        sb.set_state(StoredState::Running);
        self.store.set_paused(id, None)?;
        self.store.set_timeout(id, at)?;
        self.timeouts_changed.notify_one();
        Ok((sb, None))
    }

    /// Hibernate: every context saves its state to disk, then the sandbox's processes are killed
    /// and its cgroup removed, so it holds no memory; its directory (writable layer, saved state)
    /// and store row stay, so a resume, even after a server restart or a reboot, relaunches it.
    /// From running or paused; idempotent (`None` when it was already hibernated).
    pub async fn hibernate(
        &self,
        id: &str,
    ) -> Result<(Arc<Sandbox>, Option<HibernationReport>), SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        match sb.state() {
            StoredState::Hibernated | StoredState::Killed => return Ok((sb, None)),
            StoredState::Running | StoredState::Paused => {}
        }
        let was_paused = sb.state() == StoredState::Paused;
        let remaining = if was_paused {
            sb.paused_remaining_ms.load(Ordering::SeqCst)
        } else {
            sb.timeout_at_ms().saturating_sub(now_ms())
        }
        .max(1);
        let cg = sb.runtime.cgroup.clone();
        if was_paused {
            // The kernels must run to save their state.
            let cg = cg.clone();
            tokio::task::spawn_blocking(move || cg.thaw())
                .await
                .map_err(|e| SandboxError::Launch(e.to_string()))?
                .map_err(|e| SandboxError::Launch(format!("thawing the sandbox: {e}")))?;
            // Metered as paused up to now.
            crate::sandboxes::metering::sample(self, &sb).await;
            sb.set_state(StoredState::Running);
        }
        sb.hibernating.store(true, Ordering::SeqCst);
        // Exact first, as a snapshot: the contexts listed (for the report), the executions up to
        // now metered while the agent answers, then CRIU, which kills the tree once dumped (still
        // stopped): nothing of the sandbox runs after its checkpoint, so its disk, kept as it is,
        // matches its memory. Only where CRIU does not apply or fails (the tree then runs on) do
        // the kernels save their own state (a restore that fails later relaunches the sandbox
        // with fresh contexts, and says why).
        // `Err((why, dumped))`: `dumped` when CRIU stopped the tree but its checkpoint is lost.
        let exact = match criu_refusal(&self.cfg.checkpoint) {
            Some(why) => Err((why, false)),
            None => match sb.agent.contexts().await {
                Err(e) => Err((format!("listing the contexts: {e}"), false)),
                Ok(contexts) => {
                    crate::sandboxes::metering::sample(self, &sb).await;
                    match criu_dump(&self.cfg.checkpoint, &sb).await {
                        Err(why) => Err((why, false)),
                        Ok(dumped) => {
                            let manifest = CriuManifest {
                                contexts: contexts
                                    .iter()
                                    .map(|c| (c.id.clone(), c.language))
                                    .collect(),
                                ..dumped
                            };
                            write_criu_manifest(&sb.runtime.dir, &manifest)
                                .map(|()| manifest)
                                .map_err(|e| (format!("keeping the CRIU checkpoint: {e}"), true))
                        }
                    }
                }
            },
        };
        let report = match exact {
            Ok(manifest) => HibernationReport {
                method: lizard_proto::HibernationMethod::Criu,
                method_reason: format!(
                    "criu: CRIU checkpointed the whole sandbox ({} MB in {} ms); a resume \
                     restores it exactly",
                    manifest.image_bytes / 1_000_000,
                    manifest.dump_ms
                ),
                contexts: criu_contexts(&manifest),
            },
            Err((why_not_criu, true)) => {
                // CRIU dumped and stopped it, but the checkpoint could not be kept.
                remove_criu_images(&sb.runtime.dir).await;
                HibernationReport {
                    method: lizard_proto::HibernationMethod::PerLanguage,
                    method_reason: format!(
                        "{why_not_criu}: nothing was saved; a resume starts fresh contexts"
                    ),
                    contexts: Vec::new(),
                }
            }
            Err((why_not_criu, false)) => match sb.agent.hibernate_snapshot(HIBERNATE_DIR).await {
                Ok(mut r) => {
                    r.method_reason = per_language_reason(&why_not_criu);
                    crate::sandboxes::metering::sample(self, &sb).await;
                    r
                }
                Err(e) => {
                    sb.hibernating.store(false, Ordering::SeqCst);
                    if was_paused {
                        let cg = cg.clone();
                        let _ = tokio::task::spawn_blocking(move || cg.freeze()).await;
                        sb.set_state(StoredState::Paused);
                    }
                    return Err(SandboxError::Launch(format!(
                        "saving the sandbox's contexts: {e}"
                    )));
                }
            },
        };
        // The cgroup's counters to the end (the agent, if CRIU stopped it, is not asked). A CRIU
        // restore brings back the same agent with its log (counted up to the sample above).
        crate::sandboxes::metering::sample_within(self, &sb, Duration::ZERO).await;
        if report.method != lizard_proto::HibernationMethod::Criu {
            crate::sandboxes::metering::reset_agent_log(self, id);
        }
        tokio::task::spawn_blocking(move || {
            cg.kill_all()?;
            cg.remove()
        })
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))
        .and_then(|r| r.map_err(|e| SandboxError::Launch(format!("stopping the sandbox: {e}"))))
        .inspect_err(|_| sb.hibernating.store(false, Ordering::SeqCst))?;
        sb.paused_remaining_ms.store(remaining, Ordering::SeqCst);
        sb.set_state(StoredState::Hibernated);
        sb.stop_packages();
        sb.hibernating.store(false, Ordering::SeqCst);
        self.store.set_hibernated(id, remaining)?;
        Ok((sb, Some(report)))
    }

    /// Relaunch a hibernated sandbox (lifecycle lock held) and restore its contexts.
    async fn wake(
        &self,
        sb: &Arc<Sandbox>,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        crate::sandboxes::metering::sample(self, sb).await;
        let cpu_base_ms = self
            .store
            .get_usage(&sb.id)?
            .map(|u| u.cpu_ms)
            .unwrap_or(sb.runtime.cpu_base_ms);
        {
            // Its volumes stay mounted while it is hibernated, unless a server restart came between.
            let _lock = self.volumes.lock.lock().await;
            for v in &sb.volumes {
                self.volumes.ensure_mounted(&v.volume_id).await?;
            }
        }
        let network = sb.network();
        let egress = crate::egress::rules(&network.egress)?;
        // Exact first: the CRIU checkpoint taken at hibernation, if any.
        let mut criu_failed = None;
        if let Some((manifest, from)) = self.criu_restore_from(&sb.runtime.dir) {
            let started = std::time::Instant::now();
            let restored = self
                .launch_or_restore_in(
                    sb.id.clone(),
                    &sb.runtime.dir,
                    (&sb.project, &sb.template),
                    &sb.envs,
                    sb.limits,
                    &sb.volumes,
                    egress.as_ref().map(|_| &network),
                    (false, sb.runtime.id_base),
                    cpu_base_ms,
                    Some((from, manifest.agent_exe.clone())),
                )
                .await;
            remove_criu_images(&sb.runtime.dir).await;
            match restored {
                Ok(launched) => {
                    let report = HibernationReport {
                        method: lizard_proto::HibernationMethod::Criu,
                        method_reason: format!(
                            "criu: every process of the sandbox was restored exactly from its \
                             CRIU checkpoint ({} MB, restored in {} ms)",
                            manifest.image_bytes / 1_000_000,
                            started.elapsed().as_millis()
                        ),
                        contexts: criu_contexts(&manifest),
                    };
                    return self.woken(sb, launched, report).await;
                }
                Err(e) => {
                    tracing::warn!(sandbox = %sb.id, error = %e, "CRIU restore failed; relaunching");
                    criu_failed = Some(e.to_string());
                }
            }
        }
        // A new agent, whose execution log starts again at 1.
        crate::sandboxes::metering::reset_agent_log(self, &sb.id);
        let launched = self
            .launch_in(
                sb.id.clone(),
                &sb.runtime.dir,
                (&sb.project, &sb.template),
                &sb.envs,
                sb.limits,
                &sb.volumes,
                egress.as_ref().map(|_| &network),
                (false, sb.runtime.id_base),
                cpu_base_ms,
            )
            .await?;
        let report = match launched.agent.hibernate_restore(HIBERNATE_DIR).await {
            Ok(mut r) => {
                // The agent has deleted the saved copy (the host never walks that tree).
                r.method_reason = per_language_reason(&match &criu_failed {
                    Some(e) => format!("the CRIU restore failed: {e}"),
                    None => {
                        "it was hibernated per language (the hibernate answer said why not CRIU)"
                            .to_string()
                    }
                });
                r
            }
            Err(e) => {
                tracing::warn!(sandbox = %sb.id, error = %e, "restoring the contexts");
                HibernationReport {
                    method: lizard_proto::HibernationMethod::PerLanguage,
                    method_reason: match &criu_failed {
                        // An exact hibernation takes no per-language save.
                        Some(c) => format!(
                            "the CRIU restore failed ({c}), and its checkpoint was the sandbox's \
                             only saved state: the sandbox runs with fresh contexts"
                        ),
                        None => format!(
                            "the saved state could not be restored ({e}); the sandbox runs with \
                             fresh contexts"
                        ),
                    },
                    contexts: Vec::new(),
                }
            }
        };
        self.woken(sb, launched, report).await
    }

    /// The end of a wake: the relaunched (or restored) sandbox replaces the hibernated one.
    async fn woken(
        &self,
        sb: &Arc<Sandbox>,
        launched: LaunchedSandbox,
        report: HibernationReport,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        let at = now_ms() + sb.timeout_ms.load(Ordering::SeqCst).max(1);
        let new = Arc::new(sb.relaunched(launched.runtime, StoredState::Running, at));
        *new.egress.lock().unwrap_or_else(|e| e.into_inner()) = launched.egress;
        self.store.set_runtime(
            &sb.id,
            &serde_json::to_value(&new.runtime).unwrap_or_default(),
        )?;
        self.store.set_paused(&sb.id, None)?;
        self.store.set_timeout(&sb.id, at)?;
        if let Ok(mut m) = self.live.write() {
            m.insert(sb.id.clone(), new.clone());
        }
        self.watch(&sb.id, new.runtime.pid, None);
        self.serve_packages(&new).await;
        // Anyone still holding the old object sees it as running (it is, under a new runtime).
        sb.set_state(StoredState::Running);
        self.timeouts_changed.notify_one();
        Ok((new, report))
    }

    /// Move the sandbox's timeout to `timeout_ms` from now.
    pub fn set_timeout(&self, id: &str, timeout_ms: u64) -> Result<u64, SandboxError> {
        if timeout_ms == 0 || timeout_ms > self.cfg.max_timeout_ms {
            return Err(SandboxError::Invalid(format!(
                "timeout_ms must be between 1 and {}",
                self.cfg.max_timeout_ms
            )));
        }
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        let at = now_ms() + timeout_ms;
        sb.timeout_at_ms.store(at, Ordering::SeqCst);
        sb.timeout_ms.store(timeout_ms, Ordering::SeqCst);
        self.store.set_timeout(id, at)?;
        self.store.set_timeout_ms(id, timeout_ms)?;
        self.timeouts_changed.notify_one();
        Ok(at)
    }

    /// Kill (or pause) sandboxes whose timeout has passed, and hibernate those paused longer than
    /// `hibernate_after`; runs until the process ends. Each action is a task of its own (at most
    /// one per sandbox at a time), so a sandbox whose agent is slow delays nobody else's timeout.
    pub async fn run_timeouts(self: Arc<Self>) {
        // The actions running, by sandbox, and when each started.
        let busy: Arc<Mutex<HashMap<String, (TimedAction, std::time::Instant)>>> =
            Default::default();
        // Start `action` on `sb` unless one is still running for it; `false` if one is.
        let start = |sb: &Arc<Sandbox>, action: TimedAction| -> bool {
            {
                let mut b = busy.lock().unwrap_or_else(|e| e.into_inner());
                if b.contains_key(&sb.id) {
                    return false;
                }
                b.insert(sb.id.clone(), (action, std::time::Instant::now()));
            }
            let (me, busy, id) = (self.clone(), busy.clone(), sb.id.clone());
            tokio::spawn(async move {
                let r = match action {
                    TimedAction::Kill => me.kill(&id).await,
                    TimedAction::Pause => me.pause_inner(&id, true).await.map(|_| ()),
                    TimedAction::Hibernate => me.hibernate(&id).await.map(|_| ()),
                };
                let ok = r.is_ok();
                if let Err(e) = r {
                    tracing::warn!(sandbox = %id, error = %e, ?action, "timed action failed");
                    if action == TimedAction::Hibernate {
                        // Not again at once: after another full period.
                        if let Some(sb) = me.get(&id) {
                            sb.paused_at_ms.store(now_ms(), Ordering::SeqCst);
                        }
                    }
                }
                busy.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                if ok {
                    // (A failure is retried at the loop's next round, not at once.)
                    me.timeouts_changed.notify_one();
                }
            });
            true
        };
        loop {
            let now = now_ms();
            let mut next = now + 60_000;
            if let Some(min_mb) = self.cfg.hibernate_below_mb {
                // Checked every second while enabled.
                next = next.min(now + 1000);
                let available = mem_available_mb();
                // One at a time: a hibernation thaws its sandbox first, which costs memory. But
                // one whose agent does not answer its snapshot (it may take up to the hibernate
                // deadline) must not hold the others' relief: after PRESSURE_STALL the next
                // sandbox goes too.
                let (hibernating, taken): (bool, Vec<String>) = {
                    let b = busy.lock().unwrap_or_else(|e| e.into_inner());
                    let fresh = b.values().any(|(a, at)| {
                        *a == TimedAction::Hibernate && at.elapsed() < PRESSURE_STALL
                    });
                    (fresh, b.keys().cloned().collect())
                };
                if !hibernating && available.is_some_and(|a| a < min_mb) {
                    let mut paused: Vec<Arc<Sandbox>> = self
                        .all()
                        .into_iter()
                        .filter(|s| s.state() == StoredState::Paused && !taken.contains(&s.id))
                        .collect();
                    paused.sort_by_key(|s| s.paused_at_ms.load(Ordering::SeqCst));
                    if let Some(sb) = paused.first() {
                        tracing::info!(sandbox = %sb.id, available_mb = ?available,
                            "memory pressure; hibernating the longest-paused sandbox");
                        start(sb, TimedAction::Hibernate);
                    }
                }
            }
            if let Some(after) = self.cfg.hibernate_after {
                let after = after.as_millis() as u64;
                for sb in self
                    .all()
                    .into_iter()
                    .filter(|s| s.state() == StoredState::Paused)
                {
                    let at = sb.paused_at_ms.load(Ordering::SeqCst) + after;
                    if at <= now {
                        if start(&sb, TimedAction::Hibernate) {
                            tracing::info!(sandbox = %sb.id, "paused for {after} ms; hibernating");
                        }
                    } else {
                        next = next.min(at);
                    }
                }
            }
            for sb in self
                .all()
                .into_iter()
                .filter(|s| s.state() == StoredState::Running)
            {
                let at = sb.timeout_at_ms();
                if at <= now {
                    let action = match sb.on_timeout {
                        TimeoutAction::Kill => TimedAction::Kill,
                        TimeoutAction::Pause => TimedAction::Pause,
                    };
                    if start(&sb, action) {
                        tracing::info!(sandbox = %sb.id, ?action, "timeout reached");
                    }
                } else {
                    next = next.min(at);
                }
            }
            // (An action that ends wakes the loop: `timeouts_changed`.)
            let wait = Duration::from_millis(next.saturating_sub(now_ms()).max(10));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.timeouts_changed.notified() => {}
            }
        }
    }

    /// Watch the PID 1 (host pid `pid`) of sandbox `id`: when it exits, reap it (it is this
    /// server's child when this server launched it: `lizard serve` is a subreaper) and clean the
    /// sandbox up like a kill (see [`Sandboxes::pid1_exited`]). `flag` is set first. Only for a
    /// `pid` that cannot have been reused: an unreaped child of ours, or one just checked.
    fn watch(&self, id: &str, pid: i32, flag: Option<Arc<AtomicBool>>) {
        match lizard_jail::process::pidfd_open(pid) {
            Ok(fd) => self.watch_pidfd(id, pid, fd, flag),
            Err(e) => {
                // Gone and reaped already (not our child): it exited.
                tracing::warn!(sandbox = %id, pid, error = %e, "cannot watch the sandbox's PID 1");
                if let Some(f) = &flag {
                    f.store(true, Ordering::SeqCst);
                }
                if let Some(me) = self.me.upgrade() {
                    let id = id.to_string();
                    tokio::spawn(async move { me.pid1_exited(&id, pid).await });
                }
            }
        }
    }

    fn watch_pidfd(
        &self,
        id: &str,
        pid: i32,
        pidfd: std::os::fd::OwnedFd,
        flag: Option<Arc<AtomicBool>>,
    ) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let id = id.to_string();
        tokio::spawn(async move {
            use tokio::io::{unix::AsyncFd, Interest};
            // tokio deprecated its safe constructor for an `unsafe` one whose condition (the fd
            // stays open and the same for the AsyncFd's life) an `OwnedFd` moved into it meets by
            // construction; `unsafe` belongs in lizard-jail only (as in the agent's kernels).
            #[allow(deprecated)]
            let registered = AsyncFd::with_interest(pidfd, Interest::READABLE);
            let afd = match registered {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(sandbox = %id, pid, error = %e, "cannot watch the sandbox's PID 1");
                    return;
                }
            };
            // A pidfd becomes readable (for good) when its process exits.
            if let Err(e) = afd.readable().await {
                tracing::warn!(sandbox = %id, pid, error = %e, "watching the sandbox's PID 1");
                return;
            }
            let pidfd = afd.into_inner();
            // Ours to reap when we launched it (ECHILD for an adopted one: init reaps those).
            // Exited is not yet waitable while a tracer holds the zombie: CRIU, which kills the
            // tree it has just dumped while still attached, until it exits — so wait (bounded)
            // rather than leave a zombie behind.
            let deadline = tokio::time::Instant::now() + REAP_TRACED_WITHIN;
            let mut pause = Duration::from_millis(1);
            let status = loop {
                match lizard_jail::fdpass::reap_pidfd(&pidfd) {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                    Ok(None) => {
                        tracing::warn!(sandbox = %id, pid,
                            "the sandbox's PID 1 exited but could not be reaped");
                        break None;
                    }
                    Err(_) => break None,
                }
            };
            tracing::debug!(sandbox = %id, pid, ?status, "the sandbox's PID 1 exited");
            if let Some(f) = &flag {
                f.store(true, Ordering::SeqCst);
            }
            me.pid1_exited(&id, pid).await;
        });
    }

    /// The PID 1 (host pid `pid`) of sandbox `id` exited. Unless that is the expected end (a kill
    /// or hibernation, which hold the lifecycle lock meanwhile and leave the sandbox not running,
    /// or a relaunch that gave it another PID 1), clean it up exactly like a kill and mark it
    /// `killed`.
    async fn pid1_exited(&self, id: &str, pid: i32) {
        let pooled = self.pool.lock().ok().and_then(|mut p| {
            let i = p.iter().position(|l| l.id == id && l.runtime.pid == pid)?;
            Some(p.remove(i))
        });
        if let Some(l) = pooled {
            tracing::warn!(sandbox = %id, pid, "a pooled sandbox's PID 1 exited; removing it");
            let rt = l.runtime;
            let _ = tokio::task::spawn_blocking(move || destroy(&rt)).await;
            self.id_ranges.release(id);
            self.refill_pool();
            return;
        }
        let Ok((sb, _guard)) = self.locked(id).await else {
            return;
        };
        let running = matches!(sb.state(), StoredState::Running | StoredState::Paused);
        if sb.runtime.pid != pid || !running || sb.is_hibernating() {
            return;
        }
        tracing::warn!(sandbox = %id, pid,
            "the sandbox's PID 1 (its agent) exited on its own; cleaning the sandbox up like a kill");
        if let Err(e) = self.kill_locked(id).await {
            tracing::warn!(sandbox = %id, error = %e, "cleaning up after the sandbox's PID 1 exited");
        }
    }

    /// After a server start: take back every sandbox the store says is running, paused or
    /// hibernated that is still there; clean up the rest. Whether a sandbox is alive is decided
    /// host-side only — its PID 1 is still in its cgroup (running or paused), its disk image
    /// exists (hibernated) — never by asking its agent: an agent that does not answer neither
    /// delays the start nor makes the server lose a live sandbox (it is adopted, and its own calls
    /// fail under their deadlines). So this returns in about the time of reading a few cgroup
    /// files per sandbox; the lost ones are destroyed afterwards in the background (their host id
    /// ranges stay held until they are gone). Call it after binding the listener and before
    /// serving: no request ever sees a sandbox "not yet adopted".
    pub async fn adopt(self: &Arc<Self>) -> Result<(usize, usize), SandboxError> {
        let rows = self.store.list_sandboxes(None, false)?;
        let dir = self.sandboxes_dir();
        // Host-side checks (file reads): off the async threads.
        let (checked, strays) = tokio::task::spawn_blocking(move || {
            let checked: Vec<Checked> = rows
                .into_iter()
                .map(|row| {
                    let runtime: Option<Runtime> = serde_json::from_value(row.runtime.clone()).ok();
                    let (alive, pidfd) = match &runtime {
                        // Launched by an older server: its agent's socket is on its own disk,
                        // where code in the sandbox can replace it. Never connected to (a
                        // hibernated one gets the new layout when it wakes).
                        Some(rt)
                            if row.state != StoredState::Hibernated
                                && !socket_is_trusted_layout(rt) =>
                        {
                            tracing::warn!(sandbox = %row.id, socket = %rt.socket.display(),
                                "sandbox from an older server with its agent socket inside the \
                                 sandbox: not adoptable, killing it");
                            (false, None)
                        }
                        Some(rt) if row.state == StoredState::Hibernated => {
                            (is_alive(rt, row.state), None)
                        }
                        // A live sandbox's PID 1, held by a pidfd opened before checking that it
                        // is in the sandbox's cgroup (so a reused pid is not mistaken for it).
                        Some(rt) => match lizard_jail::process::pidfd_open(rt.pid) {
                            Ok(fd) if is_alive(rt, row.state) => (true, Some(fd)),
                            _ => (false, None),
                        },
                        None => (false, None),
                    };
                    // A running sandbox is never frozen between calls: one that is was left so by
                    // a snapshot or hibernation cut short by the previous server's end. Thawed,
                    // or it would never answer again.
                    if let (true, Some(rt), StoredState::Running) = (alive, &runtime, row.state) {
                        if let Err(e) = rt.cgroup.thaw() {
                            tracing::warn!(sandbox = %row.id, error = %e, "cannot thaw the sandbox");
                        }
                    }
                    (row, runtime, alive, pidfd)
                })
                .collect();
            let strays: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                        .collect()
                })
                .unwrap_or_default();
            (checked, strays)
        })
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))?;
        let (mut adopted, mut lost) = (0, 0);
        // (sandbox id, its runtime if known, its directory)
        let mut doomed: Vec<(String, Option<Runtime>, PathBuf)> = Vec::new();
        for (row, runtime, alive, pidfd) in checked {
            match (alive, runtime) {
                (true, Some(rt)) => {
                    crate::host_logs::ensure_drains(&rt.dir);
                    if let Some(base) = rt.id_base {
                        if !self.id_ranges.register(&row.id, base) {
                            tracing::warn!(sandbox = %row.id, base,
                                "the sandbox's host id range is not a valid free range");
                        }
                    }
                    let limits = serde_json::from_value(row.limits.clone()).unwrap_or_default();
                    let pid = rt.pid;
                    let agent = AgentClient::with_limits(
                        rt.socket.clone(),
                        rt.agent_peer(),
                        self.cfg.agent_limits,
                    );
                    // Runs the previous server forwarded may not all be metered yet: one page.
                    agent.allow_runs(crate::agent_client::MAX_EXECUTIONS_PER_PAGE as u64);
                    let sb = Arc::new(Sandbox {
                        agent,
                        id: row.id.clone(),
                        project: row.project,
                        template: row.template,
                        created_at_ms: row.created_at_ms,
                        metadata: row.metadata,
                        envs: row.envs,
                        limits,
                        on_timeout: row.on_timeout,
                        network: Mutex::new(
                            serde_json::from_value(row.network.clone()).unwrap_or_default(),
                        ),
                        runtime: rt,
                        volumes: row.volumes,
                        timeout_at_ms: AtomicU64::new(row.timeout_at_ms),
                        timeout_ms: AtomicU64::new(row.timeout_ms),
                        paused_remaining_ms: AtomicU64::new(row.paused_remaining_ms),
                        state: Mutex::new(row.state),
                        // The pause time is not stored: idle hibernation counts from now.
                        paused_at_ms: AtomicU64::new(now_ms()),
                        hibernating: Default::default(),
                        lifecycle: Arc::new(tokio::sync::Mutex::new(())),
                        metrics: Default::default(),
                        packages: Default::default(),
                        egress: Default::default(),
                        mirror_metered: Default::default(),
                        egress_metered: Default::default(),
                    });
                    // A hibernated one has no processes: its mirror and egress start with its
                    // wake.
                    if sb.state() != StoredState::Hibernated {
                        self.serve_packages(&sb).await;
                        self.serve_egress_of(&sb).await;
                    }
                    if let Ok(mut m) = self.live.write() {
                        m.insert(row.id.clone(), sb);
                    }
                    if let Some(fd) = pidfd {
                        self.watch_pidfd(&row.id, pid, fd, None);
                    }
                    adopted += 1;
                }
                (_, rt) => {
                    self.store
                        .set_state(&row.id, StoredState::Killed, Some(now_ms()))?;
                    let dir = rt
                        .as_ref()
                        .map(|r| r.dir.clone())
                        .unwrap_or_else(|| self.sandboxes_dir().join(&row.id));
                    doomed.push((row.id, rt, dir));
                    lost += 1;
                }
            }
        }
        // Sandboxes that never reached the store (a pool, or a create cut short by a crash).
        for (id, path) in strays {
            if self.get(&id).is_some() || doomed.iter().any(|(d, _, _)| *d == id) {
                continue;
            }
            let rt = std::fs::read(path.join(RUNTIME_FILE))
                .ok()
                .and_then(|b| serde_json::from_slice::<Runtime>(&b).ok());
            doomed.push((id, rt, path));
            lost += 1;
        }
        // Their processes may still run until destroyed: no new sandbox gets their ids meanwhile.
        for (id, rt, _) in &doomed {
            if let Some(base) = rt.as_ref().and_then(|r| r.id_base) {
                self.id_ranges.register(id, base);
            }
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            for (id, rt, dir) in doomed {
                match rt {
                    Some(rt) => destroy(&rt),
                    None => remove_files(&dir, Some(&dir.join("disk"))),
                }
                me.id_ranges.release(&id);
            }
        });
        self.timeouts_changed.notify_one();
        Ok((adopted, lost))
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

/// Whether a sandbox from the store is still there, by host-side facts only: a hibernated one has
/// no processes and lives as long as its writable layer's disk image (mounted or not: after a
/// host reboot it is not); a running or paused one while its PID 1 is in its cgroup (a frozen or
/// hung agent cannot answer, and need not: the kernel says whether it lives). Blocking.
fn is_alive(rt: &Runtime, state: StoredState) -> bool {
    match state {
        StoredState::Hibernated => rt.dir.join("disk.img").is_file(),
        StoredState::Killed => false,
        StoredState::Running | StoredState::Paused => rt
            .cgroup
            .pids()
            .map(|p| p.contains(&rt.pid))
            .unwrap_or(false),
    }
}

/// Validate the `volumes` of a create request: names, mount paths (default
/// `/home/user/<name>`), no two on one path or nested. Returns (name or id, mount path, read-only).
fn check_volume_requests(
    reqs: &[VolumeMountRequest],
) -> Result<Vec<(String, String, bool)>, SandboxError> {
    use lizard_proto::volume::MAX_VOLUMES_PER_SANDBOX;
    if reqs.len() > MAX_VOLUMES_PER_SANDBOX {
        return Err(SandboxError::Invalid(format!(
            "at most {MAX_VOLUMES_PER_SANDBOX} volumes per sandbox"
        )));
    }
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for r in reqs {
        let is_id = r.name.starts_with("vol_")
            && r.name.len() == 24
            && r.name[4..]
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !is_id && !lizard_proto::valid_volume_name(&r.name) {
            return Err(SandboxError::Invalid(format!(
                "invalid volume name {:?}",
                r.name
            )));
        }
        let path = r
            .mount_path
            .clone()
            .unwrap_or_else(|| format!("/home/user/{}", r.name));
        lizard_proto::check_mount_path(&path).map_err(SandboxError::Invalid)?;
        if let Some((_, other, _)) = out
            .iter()
            .find(|(_, p, _)| lizard_proto::mount_paths_overlap(p, &path))
        {
            return Err(SandboxError::Invalid(format!(
                "volume mount paths {other:?} and {path:?} overlap"
            )));
        }
        out.push((r.name.clone(), path, r.read_only));
    }
    Ok(out)
}

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

async fn launch(lizard_bin: &Path, spec: &SandboxSpec) -> Result<Launched, SandboxError> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(lizard_bin)
        .arg("sandbox-init")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            SandboxError::Launch(format!(
                "running {} sandbox-init: {e}",
                lizard_bin.display()
            ))
        })?;
    let helper_pid = child.id().map_or(0, |p| p as i32);
    let input = serde_json::to_vec(spec).map_err(|e| SandboxError::Launch(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .await
            .map_err(|e| SandboxError::Launch(format!("writing the sandbox spec: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    match serde_json::from_str::<InitReply>(line) {
        Ok(InitReply::Ok(l)) => Ok(Launched { helper_pid, ..l }),
        Ok(InitReply::Error(e)) => Err(SandboxError::Launch(e)),
        Err(_) => Err(SandboxError::Launch(format!(
            "sandbox-init exited with {} and said {:?} {:?}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
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

fn write_criu_manifest(dir: &Path, m: &CriuManifest) -> std::io::Result<()> {
    let path = dir.join(CRIU_MANIFEST);
    let _ = std::fs::remove_file(&path);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        // `create_new` (O_EXCL) never follows a link; the directory is root's alone anyway.
        .mode(0o600)
        .open(&path)?
        .write_all(&serde_json::to_vec(m).map_err(std::io::Error::other)?)
}

/// The images and manifest of a CRIU checkpoint, gone (each attempt is used once).
async fn remove_criu_images(dir: &Path) {
    let dir = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_file(dir.join(CRIU_MANIFEST));
        // `ImagesDir::create` removes what is there without following links.
        if let Ok(images) = lizard_jail::checkpoint::ImagesDir::create(&dir.join(CRIU_IMAGES)) {
            let _ = images.remove();
        }
    })
    .await;
}

impl Sandboxes {
    /// The kept CRIU checkpoint of the sandbox in `dir`, if there is one and CRIU is usable.
    fn criu_restore_from(
        &self,
        dir: &Path,
    ) -> Option<(CriuManifest, lizard_jail::sandbox::RestoreFrom)> {
        let criu = self.cfg.checkpoint.criu.clone()?;
        if !self.cfg.checkpoint.exact_restore {
            return None;
        }
        read_criu_restore(dir, &dir.join(CRIU_IMAGES), criu, &self.cfg.lizard_bin)
    }
}

/// The CRIU checkpoint whose manifest is in `dir` and images in `images`, as a restore.
fn read_criu_restore(
    dir: &Path,
    images: &Path,
    criu: lizard_jail::checkpoint::Criu,
    lizard_bin: &Path,
) -> Option<(CriuManifest, lizard_jail::sandbox::RestoreFrom)> {
    let text = std::fs::File::open(dir.join(CRIU_MANIFEST)).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(text, 4 << 20), &mut bytes).ok()?;
    let manifest: CriuManifest = serde_json::from_slice(&bytes).ok()?;
    let from = lizard_jail::sandbox::RestoreFrom {
        criu: criu.program,
        criu_run_dir: criu.run_dir,
        netns_setup: vec![
            lizard_bin.display().to_string(),
            lizard_jail::sandbox::NETNS_SETUP_COMMAND.into(),
        ],
        images: images.to_path_buf(),
        dumped: manifest.dumped.clone(),
        deadline_ms: CRIU_DEADLINE.as_millis() as u64,
    };
    Some((manifest, from))
}

/// A pidfd of a sandbox's PID 1 `pid`, checked to be in the sandbox's `cgroup` after it is held
/// (from then on it names that very process: a reused pid cannot name another one). Blocking
/// (reads the cgroup's pid list): call from a blocking thread.
fn pid1_pidfd(pid: i32, cgroup: &Cgroup) -> Result<std::os::fd::OwnedFd, String> {
    let pidfd = lizard_jail::process::pidfd_open(pid)
        .map_err(|e| format!("a pidfd of the sandbox's PID 1 ({pid}): {e}"))?;
    if !cgroup.pids().is_ok_and(|p| p.contains(&pid)) {
        return Err(format!("pid {pid} is not in the sandbox's cgroup"));
    }
    Ok(pidfd)
}

/// How long the whole handover of a new socket to a CRIU-restored agent may take
/// (`move_agent_socket`): past it the server gives up, whatever the agent does.
const HANDOVER_DEADLINE: Duration = Duration::from_secs(5);

/// Give a CRIU-restored agent a listening socket of its own sandbox, and its own sandbox id: a
/// socket made in the sandbox's network namespace (`bind_unix_listener_in_netns_of`, entered
/// through a pidfd of the sandbox's PID 1 checked to be in the sandbox's cgroup, so a reused pid
/// cannot name another process), bound at `<dir>/agent.sock.new` (root-only directory), sent to
/// the agent over its current socket as one NUL byte, the sandbox id and a newline, with the socket
/// attached (`lizard_agent::relisten`); the agent takes the id for every process it starts from
/// then on (`lizard_agent::identity`: CRIU restored the source's environment), closes its old
/// listener, listens on the new one at the same descriptor and answers `k`; then the new socket
/// replaces the old at the agent's path (a `rename` in the root-only directory). Its clients'
/// `SO_PEERCRED` peer is then the agent (PID 1), as after a launch, and a later CRIU dump finds
/// the socket in the sandbox's namespace.
///
/// The whole of it is bounded by [`HANDOVER_DEADLINE`]: the parts that talk to the agent
/// (connect, send, answer) are asynchronous, a full accept queue fails the connect at once (it is
/// retried until the deadline) and no blocking thread ever waits on the agent; the blocking part
/// (pidfd, cgroup, the socket in the namespace) touches only the host. An agent that does not
/// answer harms only its own sandbox (the new socket is removed; the old one may be gone).
async fn move_agent_socket(runtime: &Runtime, id: &str) -> Result<(), String> {
    let (pid, socket, cgroup) = (runtime.pid, runtime.socket.clone(), runtime.cgroup.clone());
    let new = socket.with_extension("sock.new");
    let moved = tokio::time::timeout(HANDOVER_DEADLINE, async {
        let new2 = new.clone();
        let sock = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::hostpath::bind_unix_listener_in_netns_of(pidfd, &new2)
                .map_err(|e| lizard_jail::error_chain(&e))
        })
        .await
        .map_err(|e| e.to_string())??;
        hand_over_socket(&socket, sock, id).await
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "no answer within {} s",
            HANDOVER_DEADLINE.as_secs()
        ))
    });
    match moved {
        Ok(()) => std::fs::rename(&new, &socket).map_err(|e| e.to_string()),
        Err(e) => {
            let _ = std::fs::remove_file(&new);
            Err(e)
        }
    }
}

/// The agent-facing part of [`move_agent_socket`] (no deadline of its own: the caller's bounds
/// it; nothing here blocks a thread): connect to the agent's socket at `socket`, send `sock` with
/// the sandbox id `id`, wait for `k`.
async fn hand_over_socket(
    socket: &Path,
    sock: std::os::fd::OwnedFd,
    id: &str,
) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncReadExt;
    let (_dir, target) = lizard_jail::hostpath::unix_socket_entry(socket)
        .map_err(|e| lizard_jail::error_chain(&e))?;
    let mut conn = loop {
        match tokio::net::UnixStream::connect(&target).await {
            Ok(c) => break c,
            // Its accept queue is full (a Unix connect never waits when non-blocking).
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => return Err(format!("connecting to the agent: {e}")),
        }
    };
    let mut msg = Vec::with_capacity(id.len() + 2);
    msg.push(0);
    msg.extend_from_slice(id.as_bytes());
    msg.push(b'\n');
    let fd = sock.as_raw_fd();
    conn.async_io(tokio::io::Interest::WRITABLE, || {
        lizard_jail::fdpass::send_with_fds(&conn, &msg, &[fd])
    })
    .await
    .map_err(|e| format!("sending the socket: {e}"))?;
    drop(sock);
    let mut ack = [0u8; 1];
    match conn.read(&mut ack).await {
        Ok(1) if ack[0] == b'k' => Ok(()),
        Ok(_) => Err("the agent did not take the new socket".to_string()),
        Err(e) => Err(format!("the agent's answer: {e}")),
    }
}

/// Why CRIU cannot checkpoint sandboxes on this server, before any attempt (`None`: it can be
/// tried).
fn criu_refusal(tool: &CheckpointTool) -> Option<String> {
    if tool.criu.is_none() {
        return Some(format!("no usable CRIU ({})", tool.detail));
    }
    if let Some(refused) = tool.layout_refused.get() {
        return Some(refused.clone());
    }
    if !tool.exact_restore {
        return Some(criu_unused(tool));
    }
    None
}

/// Dump the tree of sandbox PID 1 `pid` (left running, or killed by CRIU once dumped) into a
/// fresh `images` directory (blocking):
/// the binds of host files and file systems (device nodes, /proc masks, the agent's binds, cgroup
/// directories), the log and the agent's listening socket (fd 3, bound at a host path) are
/// external, as CRIU does not dump the host. No images are left on an error.
fn dump_sandbox(
    criu: &lizard_jail::checkpoint::Criu,
    pid: i32,
    images: &Path,
    freeze_cgroup: Option<&Path>,
    manage_cgroups: bool,
    leave_running: bool,
) -> Result<
    (
        lizard_jail::checkpoint::DumpSpec,
        lizard_jail::checkpoint::DumpStats,
    ),
    lizard_jail::checkpoint::CheckpointError,
> {
    let images = lizard_jail::checkpoint::ImagesDir::create(images)?;
    let mut spec = lizard_jail::checkpoint::DumpSpec::of_sandbox(pid).unwrap_or_default();
    spec.manage_cgroups = manage_cgroups;
    // A sandbox's network namespace holds what every launch makes (loopback), the generic egress
    // ruleset and route (`lizard_egress::nft`) and the host's listeners, nothing of the
    // sandbox's: the restore makes the first again, the server the others
    // (`Sandboxes::serve_egress`, `serve_packages`).
    spec.empty_netns = true;
    if let Some(ino) = std::fs::read_link(format!("/proc/{pid}/fd/3"))
        .ok()
        .and_then(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
    {
        spec.external_unix.push(ino);
    }
    let r = criu.dump(
        pid,
        &images,
        &spec,
        leave_running,
        freeze_cgroup,
        CRIU_DEADLINE,
    );
    if r.is_err() {
        let _ = images.remove();
    }
    r.map(|stats| (spec, stats))
}

/// What a failed dump means, remembered when it is the structural refusal (see
/// [`CRIU_LAYOUT_REFUSAL`]) of a sandbox that was launched, not restored: a sandbox restored by
/// CRIU gets that refusal from a CRIU without scripts/criu-patches (its namespace check cannot
/// open the restored, non-dumpable agent's namespaces), which says nothing about the others.
fn criu_dump_failed(
    tool: &CheckpointTool,
    e: &lizard_jail::checkpoint::CheckpointError,
    restored: bool,
) -> String {
    let why = format!(
        "{} could not checkpoint the sandbox: {}",
        tool.detail.split(':').next().unwrap_or("CRIU"),
        lizard_jail::error_chain(e)
    );
    if !why.contains(CRIU_LAYOUT_REFUSAL) {
        return why;
    }
    if restored {
        return format!(
            "{why} (the sandbox was itself restored by CRIU: dumping it again needs the CRIU that \
             scripts/criu.sh builds, with scripts/criu-patches applied)"
        );
    }
    let _ = tool.layout_refused.set(format!(
        "{why} (this server's sandboxes all have that namespace layout: not tried again)"
    ));
    why
}

/// Checkpoint the running sandbox with CRIU (leaving it running) into `<dir>/criu`, kept for a
/// resume; `Err` says why not (no CRIU, what the sandbox has that a restore cannot give back,
/// CRIU's own error), with no images left.
async fn criu_dump(tool: &CheckpointTool, sb: &Sandbox) -> Result<CriuManifest, String> {
    if let Some(why) = criu_refusal(tool) {
        return Err(why);
    }
    let Some(criu) = tool.criu.clone() else {
        return Err(format!("no usable CRIU ({})", tool.detail));
    };
    // The agent binary it runs stays on disk for the restore (a server upgrade comes between).
    if let (Some(x), Some(digest)) = (&tool.agent_exes, &sb.runtime.agent_exe) {
        x.keep(digest).await?;
    }
    let pid = sb.runtime.pid;
    let restored = sb.runtime.criu_restored;
    let dir = sb.runtime.dir.join(CRIU_IMAGES);
    // The resume restores into the same cgroups: CRIU puts every task back into its own cgroup
    // (the contexts') and the sandbox's cgroup namespace.
    let outcome = tokio::task::spawn_blocking(move || {
        let mut tries = 0;
        loop {
            tries += 1;
            match dump_sandbox(&criu, pid, &dir, None, true, false) {
                // A connection to the agent not yet accepted (its other end is the server's, in
                // the host's network namespace, which CRIU cannot find): a failed dump leaves
                // the tree running, so the agent accepts it; then again.
                Err(e)
                    if tries < crate::sandboxes::snapshot::CRIU_SNAPSHOT_TRIES
                        && lizard_jail::error_chain(&e).contains("Unix socket") =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    })
    .await;
    match outcome {
        Ok(Ok((dumped, stats))) => Ok(CriuManifest {
            dumped,
            image_bytes: stats.image_bytes,
            dump_ms: stats.duration.as_millis() as u64,
            contexts: Vec::new(),
            agent_log_seq: 0,
            agent_exe: sb.runtime.agent_exe.clone(),
        }),
        Ok(Err(e)) => Err(criu_dump_failed(tool, &e, restored)),
        Err(e) => Err(format!("the CRIU attempt failed: {e}")),
    }
}

/// The report's contexts of a CRIU restore: each kernel restored as the same process.
fn criu_contexts(manifest: &CriuManifest) -> Vec<lizard_proto::ContextReport> {
    manifest
        .contexts
        .iter()
        .map(|(id, language)| lizard_proto::ContextReport {
            id: id.clone(),
            language: *language,
            restored: vec![lizard_proto::StateItem {
                name: "the kernel process".into(),
                kind: "process".into(),
            }],
            lost: Vec::new(),
        })
        .collect()
}

/// Why CRIU is not tried at all on this server (see [`criu_dump`]).
fn criu_unused(tool: &CheckpointTool) -> String {
    match (&tool.criu, tool.layout_refused.get()) {
        (None, _) => format!("no usable CRIU ({})", tool.detail),
        (Some(_), Some(refused)) => refused.clone(),
        (Some(_), None) => "the agents run from their sealed in-memory copy (the file copy a CRIU \
             restore needs could not be made, or a test's agent wrapper runs as PID 1), which CRIU \
             cannot restore"
            .to_string(),
    }
}

/// `method_reason` of a per-language hibernation after CRIU was not used.
fn per_language_reason(why_not_criu: &str) -> String {
    format!("per-language: {why_not_criu}; each kernel saved and restored its own state")
}

/// The host's MemAvailable in MiB (`None` if /proc/meminfo cannot be read).
fn mem_available_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available_mb(&text)
}

fn parse_mem_available_mb(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
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

/// After a failed launch: a new sandbox is destroyed; a hibernated one only loses its processes
/// and cgroup (its directory holds the user's files and saved state).
fn destroy_or_stop(rt: &Runtime, fresh: bool) {
    if fresh {
        destroy(rt);
    } else {
        let _ = rt.cgroup.kill_all();
        let _ = rt.cgroup.remove();
    }
}

/// [`destroy_or_stop`] of a sandbox whose PID 1 is not watched yet (a launch that failed half-way):
/// also reap PID 1, an unreaped child of this server (a subreaper) — no watch will.
fn destroy_unwatched(rt: &Runtime, fresh: bool) {
    destroy_or_stop(rt, fresh);
    if let Err(e) = lizard_jail::process::reap_within(rt.pid, Duration::from_secs(5)) {
        tracing::debug!(pid = rt.pid, error = %e, "reaping the sandbox's PID 1");
    }
}

/// The sandbox's directory is root's alone (0700): it holds the agent's socket, which the launcher
/// refuses to make in a directory anyone else can write, and nothing in it is anyone else's.
fn private_dir(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_err(dir))
}

/// Reopen a hibernated sandbox's directories for its relaunch: its disk image mounted again
/// (unless it still is) and an empty overlay work dir (the last mount's leftovers go). Blocking.
fn reopen_dirs(dir: &Path, disk: &Path) -> Result<(), SandboxError> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    private_dir(dir)?;
    lizard_jail::disk::ensure_mounted(&dir.join("disk.img"), disk)
        .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
    // `disk/run` (owned by the sandbox's user) is made sure of by `launch_in`, without following
    // links. `disk/work` is the overlay's own (never visible inside).
    let work = disk.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir(&work).map_err(io_err(&work))
}

/// Make a new sandbox's directories: `rootfs/`, and on its own disk image of `disk_bytes` mounted on
/// `disk` the writable layer (`disk/upper`, `disk/work`) and the run dir (`disk/run`); with egress
/// (`trust`: the sandbox's id and the host's roots as PEM) the sandbox's CA
/// ([`crate::egress::load_or_make_ca`], in `dir`) and the layer's `/etc/resolv.conf` (the host's
/// DNS responder in the sandbox's namespace, `lizard_egress::DNS_ADDR`), `/etc/lizard/egress-ca.pem`
/// (the CA's certificate) and `/etc/lizard/ca-bundle.pem` (the host's roots and the CA, for
/// `SSL_CERT_FILE` & co.), owned by `shown_as(the template's owner on disk)`. Nothing of the
/// template is read but the metadata of its `/etc`. Blocking.
fn prepare_dirs(
    dir: &Path,
    disk: &Path,
    disk_bytes: u64,
    template_root: &Path,
    trust: Option<(String, Arc<str>)>,
    shown_as: impl Fn(u32) -> u32,
) -> Result<(), SandboxError> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    private_dir(dir)?;
    lizard_jail::disk::create(&dir.join("disk.img"), disk, disk_bytes)
        .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
    let upper = disk.join("upper");
    // A fresh file system: nothing of the sandbox's yet (`run` gets its owner in `launch_in`).
    for d in [upper.clone(), disk.join("work"), disk.join("run")] {
        std::fs::create_dir(&d).map_err(io_err(&d))?;
    }
    let Some((sandbox_id, host_roots)) = trust else {
        return Ok(());
    };
    let ca = crate::egress::load_or_make_ca(dir, &sandbox_id)
        .map_err(|e| SandboxError::Launch(format!("the sandbox's egress CA: {e}")))?;
    // Files of the template's owner (its shifted root, as the sandbox's range shows it: the
    // upper layer is not idmapped) and mode, like the ones they hide.
    let lower_etc = template_root.join("etc");
    let meta = std::fs::metadata(&lower_etc).map_err(io_err(&lower_etc))?;
    let (uid, gid) = (
        shown_as(std::os::unix::fs::MetadataExt::uid(&meta)),
        shown_as(std::os::unix::fs::MetadataExt::gid(&meta)),
    );
    let etc = upper.join("etc");
    std::fs::create_dir(&etc).map_err(io_err(&etc))?;
    std::fs::set_permissions(&etc, meta.permissions()).map_err(io_err(&etc))?;
    std::os::unix::fs::chown(&etc, Some(uid), Some(gid)).map_err(io_err(&etc))?;
    let resolv = format!(
        "# Written by Lizard: the host's DNS responder for this sandbox, which answers what its\n\
         # egress rules allow (any other nameserver is redirected to it).\nnameserver {}\n",
        lizard_egress::DNS_ADDR.ip()
    );
    let lizard_etc = upper.join(crate::egress::TRUST_DIR);
    std::fs::create_dir(&lizard_etc).map_err(io_err(&lizard_etc))?;
    std::fs::set_permissions(&lizard_etc, meta.permissions()).map_err(io_err(&lizard_etc))?;
    std::os::unix::fs::chown(&lizard_etc, Some(uid), Some(gid)).map_err(io_err(&lizard_etc))?;
    let ca_pem = ca.cert_pem();
    let bundle = format!("{host_roots}{ca_pem}");
    for (path, text) in [
        (etc.join("resolv.conf"), resolv.as_str()),
        (
            lizard_etc.join(crate::egress::CA_CERT_FILE),
            ca_pem.as_str(),
        ),
        (lizard_etc.join(crate::egress::BUNDLE_FILE), bundle.as_str()),
    ] {
        // New files in the fresh layer (`create_new`: never through an existing entry).
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io_err(&path))?;
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(io_err(&path))?;
    }
    Ok(())
}

/// Unmount the disk image (if any) and remove the sandbox's directory.
fn remove_files(dir: &Path, disk: Option<&Path>) {
    if let Some(disk) = disk {
        if let Err(e) = lizard_jail::disk::unmount(disk) {
            // Its files are the sandbox's: the host does not walk them (nor remove them).
            tracing::warn!(error = %e, dir = %dir.display(),
                "unmounting the sandbox's disk; its directory stays");
            return;
        }
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing the sandbox's files");
        }
    }
}

/// After a kill: the sandbox's cgroup directories must be gone (host-wide cgroup ids are a shared
/// resource). If any is left, say so loudly and keep trying in the background (killing what may
/// still be in it), a bounded number of times.
fn verify_cgroup_gone(cgroup: &Cgroup) {
    let left = cgroup.remaining_dirs();
    if left.is_empty() {
        return;
    }
    tracing::error!(dirs = ?left, "a killed sandbox's cgroup is still there; retrying in the background");
    let cgroup = cgroup.clone();
    std::thread::spawn(move || {
        for attempt in 1..=30u32 {
            std::thread::sleep(Duration::from_secs(u64::from(attempt.min(10))));
            let _ = cgroup.kill_all();
            let _ = cgroup.remove();
            let left = cgroup.remaining_dirs();
            if left.is_empty() {
                tracing::info!(attempt, "a killed sandbox's cgroup is gone at last");
                return;
            }
            tracing::error!(attempt, dirs = ?left, "a killed sandbox's cgroup is still there");
        }
    });
}

/// Kill every process of the sandbox and remove its cgroup, its disk and
/// its files (blocking).
fn destroy(rt: &Runtime) {
    if let Err(e) = rt.cgroup.kill_all() {
        tracing::warn!(error = %e, "killing the sandbox's cgroup");
    }
    if let Err(e) = rt.cgroup.remove() {
        tracing::warn!(error = %e, "removing the sandbox's cgroup");
    }
    verify_cgroup_gone(&rt.cgroup);
    remove_files(&rt.dir, rt.disk.as_deref());
    if let (Some(build), Some(id)) = (&rt.template_dir, rt.dir.file_name()) {
        lizard_template::store::unpin(build, &id.to_string_lossy());
        for base in &rt.template_bases {
            lizard_template::store::unpin(base, &id.to_string_lossy());
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(parse_mem_available_mb(m), Some(2048));
        assert_eq!(parse_mem_available_mb("MemTotal: 1 kB\n"), None);
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
