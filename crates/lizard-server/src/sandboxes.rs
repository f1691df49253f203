//! Sandbox lifecycle: create, find, list, extend, kill; timeouts; re-adoption after a restart.
//!
//! A sandbox is launched by running `lizard sandbox-init` (a single-threaded helper that sets up the
//! namespaces, rootfs, cgroup and seccomp through `lizard-jail`, then execs the agent as the sandbox's
//! PID 1) and is ready when its agent answers on its Unix socket. Nothing about a running sandbox
//! lives only in memory: the store row has its pid, cgroup and paths.
//!
//! Not here: HTTP (see `crate::api`), forwarding to the agent (see `crate::proxy`), usage numbers
//! (see `crate::metering`).

use crate::agent_client::AgentClient;
use crate::store::{now_ms, SandboxRow, Store, StoreError, StoredState};
use lizard_jail::cgroup::Cgroup;
use lizard_jail::sandbox::{Bind, IdMap, Limits, RootfsSpec, SandboxSpec, UserSpec};
use lizard_proto::{LimitsRequest, NetworkRequest, SandboxLimits, TimeoutAction};
use lizard_template::Template;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
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
}

/// Server-wide settings for sandboxes.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub data_dir: PathBuf,
    /// The data dir whose `templates/` holds the built templates (usually `data_dir`).
    pub templates_data_dir: PathBuf,
    /// The `lizard` binary: runs `sandbox-init`, and is bind-mounted into sandboxes as the agent.
    pub lizard_bin: PathBuf,
    pub default_template: String,
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub default_limits: SandboxLimits,
    /// First uid/gid on the host that sandbox ids map to (inside 0 → this).
    pub id_shift: u32,
    pub ready_timeout: Duration,
    /// Ready sandboxes (default template, Python kernel started) kept for fast creates; 0 = none.
    pub pool_size: usize,
}

/// What the server remembers about a running sandbox's processes (stored as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Runtime {
    pub pid: i32,
    pub cgroup: Cgroup,
    pub dir: PathBuf,
    pub socket: PathBuf,
    /// Where the writable layer's disk image is mounted (unmounted when the sandbox goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<PathBuf>,
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
    pub network: NetworkRequest,
    pub runtime: Runtime,
    timeout_at_ms: AtomicU64,
    /// The sandbox's lifetime, as last set (create or set_timeout).
    timeout_ms: AtomicU64,
    /// While paused: how much of the timeout was left when the sandbox was paused.
    paused_remaining_ms: AtomicU64,
    state: Mutex<StoredState>,
    /// Serializes pause, resume and kill of this sandbox.
    lifecycle: tokio::sync::Mutex<()>,
    pub agent: AgentClient,
}

impl Sandbox {
    pub fn state(&self) -> StoredState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn timeout_at_ms(&self) -> u64 {
        self.timeout_at_ms.load(Ordering::SeqCst)
    }
    fn set_state(&self, s: StoredState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }
}

/// A launched sandbox whose agent answers, not (yet) owned by any project.
struct LaunchedSandbox {
    id: String,
    runtime: Runtime,
    agent: AgentClient,
}

/// Name of the file in a sandbox's directory that records its [`Runtime`] from the moment it is
/// launched (so sandboxes that never reached the store can be cleaned up after a crash).
const RUNTIME_FILE: &str = "runtime.json";

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
    pub network: NetworkRequest,
}

pub struct Sandboxes {
    pub cfg: SandboxConfig,
    pub store: Arc<Store>,
    live: RwLock<HashMap<String, Arc<Sandbox>>>,
    timeouts_changed: Notify,
    pool: Mutex<Vec<LaunchedSandbox>>,
    pool_wanted: Notify,
    /// Held by the pool filler while it launches one sandbox; taken by `drain_pool` to close.
    pool_filling: tokio::sync::Mutex<bool>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A new sandbox id: 20 characters of `[a-z0-9]` from 100+ random bits; usable as a hostname.
pub fn new_sandbox_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut b = [0u8; 20];
    getrandom::fill(&mut b).expect("the OS random source is available");
    // The first character is a letter, so ids never look like numbers.
    b.iter()
        .enumerate()
        .map(|(i, x)| {
            let n = if i == 0 { 26 } else { 36 };
            ALPHABET[(*x as usize) % n] as char
        })
        .collect()
}

impl Sandboxes {
    pub fn new(cfg: SandboxConfig, store: Arc<Store>) -> Arc<Sandboxes> {
        Arc::new(Sandboxes {
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
        for k in req.envs.keys() {
            if !lizard_proto::valid_env_name(k) {
                return Err(SandboxError::Invalid(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
        }
        let limits = self.resolve_limits(&req.limits)?;
        let egress = crate::egress::resolve(&req.network.egress).await?;
        let pooled = if self.pool_eligible(&template_name, &req) {
            self.take_pooled()
        } else {
            None
        };
        let launched = match pooled {
            Some(l) => l,
            None => {
                self.launch_new(&template_name, &req.envs, limits, egress.as_ref())
                    .await?
            }
        };
        self.refill_pool();
        let now = now_ms();
        let LaunchedSandbox { id, runtime, agent } = launched;
        let sb = Arc::new(Sandbox {
            id: id.clone(),
            project: req.project.clone(),
            template: template_name.clone(),
            created_at_ms: now,
            metadata: req.metadata.clone(),
            envs: req.envs.clone(),
            limits,
            on_timeout: req.on_timeout,
            network: req.network.clone(),
            runtime,
            timeout_at_ms: AtomicU64::new(now + timeout_ms),
            timeout_ms: AtomicU64::new(timeout_ms),
            paused_remaining_ms: AtomicU64::new(0),
            state: Mutex::new(StoredState::Running),
            lifecycle: tokio::sync::Mutex::new(()),
            agent,
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
                network: serde_json::to_value(&req.network).unwrap_or_default(),
            })
        });
        if let Err(e) = stored {
            destroy(&sb.runtime);
            return Err(e.into());
        }
        if let Ok(mut m) = self.live.write() {
            m.insert(id, sb.clone());
        }
        self.timeouts_changed.notify_one();
        Ok(sb)
    }

    /// Whether a create request can be served by a pooled sandbox: the default template, with
    /// nothing that is fixed at launch (environment, limits, network) asked for.
    fn pool_eligible(&self, template: &str, req: &CreateSandbox) -> bool {
        self.cfg.pool_size > 0
            && template == self.cfg.default_template
            && req.envs.is_empty()
            && req.limits == LimitsRequest::default()
            && req.network.egress.is_none()
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
                    .launch_new(&template, &BTreeMap::new(), limits, None)
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
                            destroy(&l.runtime);
                            break;
                        }
                        if let Ok(mut p) = self.pool.lock() {
                            p.push(l);
                        }
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
        }
    }

    /// Launch a sandbox of `template_name` and wait until its agent answers.
    async fn launch_new(
        &self,
        template_name: &str,
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        egress: Option<&crate::egress::Resolved>,
    ) -> Result<LaunchedSandbox, SandboxError> {
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
        let meta = template.meta.clone();
        let (Some(python), Some(node)) = (meta.python.clone(), meta.node.clone()) else {
            return Err(SandboxError::Launch(format!(
                "template {template_name} has no Python or no Node: it cannot run the code interpreter"
            )));
        };

        let id = new_sandbox_id();
        let dir = self.sandboxes_dir().join(&id);
        let disk = dir.join("disk");
        let prepared = {
            let (dir, disk, root) = (dir.clone(), disk.clone(), template.rootfs.clone());
            let bytes = limits.disk_mb * 1024 * 1024;
            let egress = egress.cloned();
            tokio::task::spawn_blocking(move || prepare_dirs(&dir, &disk, bytes, &root, egress))
                .await
                .map_err(|e| SandboxError::Launch(e.to_string()))
                .and_then(|r| r)
        };
        if let Err(e) = prepared {
            remove_files(&dir, Some(&disk));
            return Err(e);
        }
        let run = dir.join("run");
        // The agent (uid 1000 inside) creates its socket in the run dir.
        let host_uid = self.cfg.id_shift + meta.user.uid;
        let host_gid = self.cfg.id_shift + meta.user.gid;
        if let Err(e) = std::os::unix::fs::chown(&run, Some(host_uid), Some(host_gid)) {
            remove_files(&dir, Some(&disk));
            return Err(io_err(&run)(e));
        }

        let spec = self.spec(&id, &template, (&python, &node), &dir, envs, limits);
        let launched = match launch(&self.cfg.lizard_bin, &spec).await {
            Ok(l) => l,
            Err(e) => {
                remove_files(&dir, Some(&disk));
                return Err(e);
            }
        };
        let runtime = Runtime {
            pid: launched.pid,
            cgroup: launched.cgroup,
            dir: dir.clone(),
            socket: run.join("agent.sock"),
            disk: Some(disk),
        };
        // Written before anything can fail, so a server that dies now still finds and removes
        // this sandbox at its next start (see `adopt`).
        let rt_file = dir.join(RUNTIME_FILE);
        if let Err(e) = std::fs::write(&rt_file, serde_json::to_vec(&runtime).unwrap_or_default()) {
            destroy(&runtime);
            return Err(io_err(&rt_file)(e));
        }
        if let Some(egress) = egress {
            if let Err(e) = attach_network(&runtime, &egress.policy, &dir).await {
                destroy(&runtime);
                return Err(e);
            }
        }
        let agent = AgentClient::new(runtime.socket.clone());
        if let Err(e) = agent.wait_ready(self.cfg.ready_timeout).await {
            tracing::warn!(sandbox = %id, error = %e, log = %dir.join("agent.log").display(),
                "agent not ready; killing the sandbox");
            destroy(&runtime);
            return Err(SandboxError::NotReady(
                self.cfg.ready_timeout.as_millis() as u64
            ));
        }
        Ok(LaunchedSandbox { id, runtime, agent })
    }

    fn spec(
        &self,
        id: &str,
        template: &Template,
        (python, node): (&str, &str),
        dir: &Path,
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
    ) -> SandboxSpec {
        let (lower, meta) = (&template.rootfs, &template.meta);
        let mut env: BTreeMap<String, String> = meta.env.clone();
        env.extend(envs.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.insert("LIZARD_SANDBOX_ID".into(), id.to_string());
        env.insert("HOSTNAME".into(), id.to_string());
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--listen".into(),
            "127.0.0.1:8080".into(),
            "--socket".into(),
            "/run/lizard/agent.sock".into(),
            "--python".into(),
            python.to_string(),
            "--node".into(),
            node.to_string(),
            "--default-cwd".into(),
            meta.user.home.clone(),
            "--run-dir".into(),
            "/tmp/.lizard-agent".into(),
            // Most first runs are Python: start that kernel while the client is still talking.
            "--prestart".into(),
            "python".into(),
        ];
        if let Some(p) = &meta.node_path {
            args.push("--node-path".into());
            args.push(p.clone());
        }
        SandboxSpec {
            id: id.to_string(),
            hostname: id.to_string(),
            rootfs: RootfsSpec {
                lower: lower.to_path_buf(),
                upper: dir.join("disk/upper"),
                work: dir.join("disk/work"),
                mountpoint: dir.join("rootfs"),
            },
            binds: vec![
                Bind {
                    source: self.cfg.lizard_bin.clone(),
                    target: PathBuf::from("/opt/lizard/bin/lizard"),
                    readonly: true,
                },
                Bind {
                    source: dir.join("run"),
                    target: PathBuf::from("/run/lizard"),
                    readonly: false,
                },
            ],
            id_map: IdMap {
                inside: 0,
                outside: self.cfg.id_shift,
                count: 65536,
            },
            user: UserSpec {
                uid: meta.user.uid,
                gid: meta.user.gid,
            },
            cwd: PathBuf::from(&meta.user.home),
            program: PathBuf::from("/opt/lizard/bin/lizard"),
            args,
            env,
            limits: Limits {
                memory_bytes: Some(limits.memory_mb * 1024 * 1024),
                pids_max: Some(limits.pids),
                cpu_millicores: Some(limits.cpu_millicores),
                tmp_bytes: Some(limits.tmp_mb * 1024 * 1024),
                nofile: Some(4096),
            },
            log_path: dir.join("agent.log"),
        }
    }

    /// Kill a sandbox: every process, its cgroup, its mounts and its writable layer are gone.
    pub async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        if let Some(sb) = self.get(id) {
            let _guard = sb.lifecycle.lock().await;
            return self.kill_locked(id).await;
        }
        Err(SandboxError::NotFound(id.to_string()))
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
        crate::metering::sample(self, &sb).await;
        sb.set_state(StoredState::Killed);
        let runtime = sb.runtime.clone();
        tokio::task::spawn_blocking(move || destroy(&runtime))
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?;
        self.store
            .set_state(id, StoredState::Killed, Some(now_ms()))?;
        Ok(())
    }

    /// Pause: every process of the sandbox is frozen (its memory, open files and kernel state kept
    /// exactly) and its timeout stops counting. Idempotent.
    pub async fn pause(&self, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        self.pause_inner(id, false).await
    }

    /// `timed_out`: the pause is the timeout's action, so a resume starts a whole new lifetime
    /// instead of the (zero) rest of this one.
    async fn pause_inner(&self, id: &str, timed_out: bool) -> Result<Arc<Sandbox>, SandboxError> {
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        let lifecycle = sb.clone();
        let _guard = lifecycle.lifecycle.lock().await;
        if sb.state() == StoredState::Paused {
            return Ok(sb);
        }
        crate::metering::sample(self, &sb).await;
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
        sb.set_state(StoredState::Paused);
        self.store.set_paused(id, Some(remaining))?;
        Ok(sb)
    }

    /// Resume a paused sandbox: processes continue where they stopped; the timeout counts again
    /// from what was left. Idempotent.
    pub async fn resume(&self, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        let lifecycle = sb.clone();
        let _guard = lifecycle.lifecycle.lock().await;
        if sb.state() == StoredState::Running {
            return Ok(sb);
        }
        crate::metering::sample(self, &sb).await;
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
        Ok(sb)
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

    /// Kill sandboxes whose timeout has passed; runs until the process ends.
    pub async fn run_timeouts(self: Arc<Self>) {
        loop {
            let now = now_ms();
            let mut next = now + 60_000;
            for sb in self
                .all()
                .into_iter()
                .filter(|s| s.state() == StoredState::Running)
            {
                let at = sb.timeout_at_ms();
                if at <= now {
                    let r = match sb.on_timeout {
                        TimeoutAction::Kill => {
                            tracing::info!(sandbox = %sb.id, "timeout reached; killing");
                            self.kill(&sb.id).await
                        }
                        TimeoutAction::Pause => {
                            tracing::info!(sandbox = %sb.id, "timeout reached; pausing");
                            self.pause_inner(&sb.id, true).await.map(|_| ())
                        }
                    };
                    if let Err(e) = r {
                        tracing::warn!(sandbox = %sb.id, error = %e, "timeout action failed");
                    }
                } else {
                    next = next.min(at);
                }
            }
            let wait = Duration::from_millis(next.saturating_sub(now_ms()).max(10));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.timeouts_changed.notified() => {}
            }
        }
    }

    /// After a server start: take back every sandbox the store says is running whose agent still
    /// answers; clean up the rest.
    pub async fn adopt(self: &Arc<Self>) -> Result<(usize, usize), SandboxError> {
        let (mut adopted, mut lost) = (0, 0);
        for row in self.store.list_sandboxes(None, false)? {
            let runtime: Option<Runtime> = serde_json::from_value(row.runtime.clone()).ok();
            let alive = match &runtime {
                // A frozen agent cannot answer: a paused sandbox is alive while its cgroup has
                // processes.
                Some(rt) if row.state == StoredState::Paused => {
                    rt.cgroup.pids().map(|p| !p.is_empty()).unwrap_or(false)
                }
                Some(rt) => {
                    let agent = AgentClient::new(rt.socket.clone());
                    agent.health().await.is_ok()
                }
                None => false,
            };
            match (alive, runtime) {
                (true, Some(rt)) => {
                    let limits = serde_json::from_value(row.limits.clone()).unwrap_or_default();
                    let sb = Arc::new(Sandbox {
                        agent: AgentClient::new(rt.socket.clone()),
                        id: row.id.clone(),
                        project: row.project,
                        template: row.template,
                        created_at_ms: row.created_at_ms,
                        metadata: row.metadata,
                        envs: row.envs,
                        limits,
                        on_timeout: row.on_timeout,
                        network: serde_json::from_value(row.network.clone()).unwrap_or_default(),
                        runtime: rt,
                        timeout_at_ms: AtomicU64::new(row.timeout_at_ms),
                        timeout_ms: AtomicU64::new(row.timeout_ms),
                        paused_remaining_ms: AtomicU64::new(row.paused_remaining_ms),
                        state: Mutex::new(row.state),
                        lifecycle: tokio::sync::Mutex::new(()),
                    });
                    if let Ok(mut m) = self.live.write() {
                        m.insert(row.id, sb);
                    }
                    adopted += 1;
                }
                (_, rt) => {
                    if let Some(rt) = rt {
                        destroy(&rt);
                    }
                    self.store
                        .set_state(&row.id, StoredState::Killed, Some(now_ms()))?;
                    lost += 1;
                }
            }
        }
        // Sandboxes that never reached the store (a pool, or a create cut short by a crash).
        if let Ok(entries) = std::fs::read_dir(self.sandboxes_dir()) {
            for e in entries.flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                if self.get(&id).is_some() {
                    continue;
                }
                match std::fs::read(e.path().join(RUNTIME_FILE))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Runtime>(&b).ok())
                {
                    Some(rt) => destroy(&rt),
                    None => remove_files(&e.path(), Some(&e.path().join("disk"))),
                }
                lost += 1;
            }
        }
        self.timeouts_changed.notify_one();
        Ok((adopted, lost))
    }
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
        Ok(InitReply::Ok(l)) => Ok(l),
        Ok(InitReply::Error(e)) => Err(SandboxError::Launch(e)),
        Err(_) => Err(SandboxError::Launch(format!(
            "sandbox-init exited with {} and said {:?} {:?}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Make a new sandbox's directories: `run/`, `rootfs/` and the writable layer (`disk/upper`,
/// `disk/work`) on its own disk image of `disk_bytes`, mounted on `disk`; with egress, the
/// layer's `/etc/resolv.conf` (slirp's resolver) and `/etc/hosts` (the allow-list's names).
/// Blocking.
fn prepare_dirs(
    dir: &Path,
    disk: &Path,
    disk_bytes: u64,
    template_root: &Path,
    egress: Option<crate::egress::Resolved>,
) -> Result<(), SandboxError> {
    for d in [dir.join("rootfs"), dir.join("run")] {
        std::fs::create_dir_all(&d).map_err(io_err(&d))?;
    }
    lizard_jail::disk::create(&dir.join("disk.img"), disk, disk_bytes)
        .map_err(|e| SandboxError::Launch(lizard_jail::sandbox::error_chain(&e)))?;
    let upper = disk.join("upper");
    for d in [upper.clone(), disk.join("work")] {
        std::fs::create_dir(&d).map_err(io_err(&d))?;
    }
    let Some(egress) = egress else {
        return Ok(());
    };
    // Files of the template's owner (its shifted root) and mode, like the ones they hide.
    let lower_etc = template_root.join("etc");
    let meta = std::fs::metadata(&lower_etc).map_err(io_err(&lower_etc))?;
    let (uid, gid) = (
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::gid(&meta),
    );
    let etc = upper.join("etc");
    std::fs::create_dir(&etc).map_err(io_err(&etc))?;
    std::fs::set_permissions(&etc, meta.permissions()).map_err(io_err(&etc))?;
    std::os::unix::fs::chown(&etc, Some(uid), Some(gid)).map_err(io_err(&etc))?;
    let mut hosts = std::fs::read_to_string(lower_etc.join("hosts")).unwrap_or_default();
    for (name, addr) in &egress.hosts {
        hosts.push_str(&format!("{addr}\t{name}\n"));
    }
    let resolv = format!(
        "# Written by Lizard: slirp4netns's DNS forwarder.\nnameserver {}\n",
        lizard_jail::network::RESOLVER
    );
    for (name, text) in [("resolv.conf", resolv), ("hosts", hosts)] {
        let path = etc.join(name);
        std::fs::write(&path, text).map_err(io_err(&path))?;
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(io_err(&path))?;
    }
    Ok(())
}

/// Install the egress policy in the sandbox's network namespace and attach slirp4netns, inside
/// the sandbox's cgroup (so the cgroup's kill ends it, and its CPU counts as the sandbox's). A
/// thread reaps it when it exits. After a server restart it keeps running, re-parented to init.
async fn attach_network(
    rt: &Runtime,
    policy: &lizard_jail::network::Policy,
    dir: &Path,
) -> Result<(), SandboxError> {
    let (pid, policy, log, cgroup) = (
        rt.pid,
        policy.clone(),
        dir.join("slirp4netns.log"),
        rt.cgroup.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let slirp = lizard_jail::network::attach(pid, &policy, &log)
            .map_err(|e| SandboxError::Launch(lizard_jail::sandbox::error_chain(&e)))?;
        let joined = cgroup.add_pid(slirp.pid());
        std::thread::spawn(move || slirp.wait());
        joined.map_err(|e| {
            SandboxError::Launch(format!(
                "moving slirp4netns into the sandbox's cgroup: {}",
                lizard_jail::sandbox::error_chain(&e)
            ))
        })
    })
    .await
    .map_err(|e| SandboxError::Launch(e.to_string()))?
}

/// Unmount the disk image (if any) and remove the sandbox's directory.
fn remove_files(dir: &Path, disk: Option<&Path>) {
    if let Some(disk) = disk {
        if let Err(e) = lizard_jail::disk::unmount(disk) {
            tracing::warn!(error = %e, "unmounting the sandbox's disk");
        }
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing the sandbox's files");
        }
    }
}

/// Kill every process of the sandbox (slirp4netns included) and remove its cgroup, its disk and
/// its files (blocking).
fn destroy(rt: &Runtime) {
    if let Err(e) = rt.cgroup.kill_all() {
        tracing::warn!(error = %e, "killing the sandbox's cgroup");
    }
    if let Err(e) = rt.cgroup.remove() {
        tracing::warn!(error = %e, "removing the sandbox's cgroup");
    }
    remove_files(&rt.dir, rt.disk.as_deref());
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
