//! Contexts: named kernels, the default context per language, and running a cell.
//!
//! A context owns at most one live [`Kernel`]. Runs in one context are serialized by the kernel lock;
//! different contexts run in parallel. A run is a task of its own (not tied to the HTTP request), so a
//! client that goes away interrupts the cell but never leaves the kernel mid-protocol.
//!
//! Not here: HTTP (see `crate::api`), how kernels are spoken to (see `crate::kernel`).

mod exact_fork;
mod run;

pub use exact_fork::PreparedForkOut;

use crate::kernel::{Kernel, KernelConfig, KernelError, Launcher};
use lizard_jail::cgroup::CgroupError;
use lizard_jail::delegation::{ContextCgroup, Delegation};
use lizard_jail::Signal;
use lizard_proto::{
    Context, ContextId, ContextLimits, ContextState, EventFrame, ExecutionError, ExecutionEvent,
    ExecutionLog, ExecutionRecord, ExecutionStatus, ExecutionUsage, Language,
};
use run::{Action, Input, Run, Warning};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio::time::sleep_until;

/// Failures of context operations, mapped to API errors by `crate::api`.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("context {0} not found")]
    NotFound(ContextId),
    #[error("working directory {0:?} does not exist or is not a directory")]
    BadCwd(String),
    #[error(
        "working directory {0:?} is not accessible to the sandbox user the context's kernel runs          as: pick a directory it can enter (e.g. under /home/user or /tmp), or run as root          through the commands API (`user: \"root\"`)"
    )]
    CwdDenied(String),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("{0}")]
    InvalidLimits(String),
    #[error(
        "this sandbox's template has no {0} interpreter: run programs with the commands API or a \
         Bash context, or use a template with {0} (e.g. code-interpreter-v1)"
    )]
    NoInterpreter(Language),
    #[error("per-context limits are not available here: {0}")]
    LimitsUnsupported(String),
    #[error("cannot make the context's cgroup")]
    Cgroup(#[source] CgroupError),
    #[error(
        "context {0} is busy (a cell is running, or it is being forked or saved): fork it \
         between cells (interrupt the cell, or wait for it to end)"
    )]
    Busy(ContextId),
    #[error("context {0} has no live kernel to fork (its last restart failed)")]
    NoKernel(ContextId),
}

/// Agent-wide settings for contexts.
#[derive(Debug, Clone)]
pub struct ContextConfig {
    pub kernels: KernelConfig,
    /// Working directory of a context created without `cwd`.
    pub default_cwd: PathBuf,
    /// How long an interrupted cell may take to stop before its kernel is killed.
    pub interrupt_grace: Duration,
    /// Output (stdout + stderr) one run may send; beyond it the rest is dropped and the client
    /// gets one truncation notice on stderr. The cell keeps running.
    pub max_output_bytes: u64,
    /// The delegated cgroup sub-tree (inside a sandbox): each context gets a cgroup of its own
    /// there. `None`: contexts share the agent's cgroup and limits are refused.
    pub cgroups: Option<Delegation>,
    /// Fork Python kernels from a zygote (`crate::kernel::Launcher`) instead of spawning them.
    pub python_zygote: bool,
    /// Fork JavaScript kernels from a zygote (`crate::kernel::Launcher`).
    pub javascript_zygote: bool,
    /// Keep a spare JavaScript kernel once JavaScript has been used (`crate::kernel::Launcher`).
    pub javascript_spare: bool,
}

/// One run's parameters, validated by the API layer.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub code: String,
    pub env: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
}

/// What happened to the kernel process at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    Restart,
    Delete,
}

pub struct ContextHandle {
    pub id: ContextId,
    pub language: Language,
    pub cwd: PathBuf,
    pub is_default: bool,
    kernel: tokio::sync::Mutex<Option<Kernel>>,
    /// pid of the current kernel (for signals without taking the kernel lock); 0 when none.
    pid: AtomicI32,
    busy: AtomicBool,
    interrupt: Notify,
    execution_count: AtomicU64,
    kernel_restarts: AtomicU64,
    last_restart_reason: Mutex<Option<String>>,
    /// Set by restart/delete before they kill the kernel, so a run in flight reports it properly.
    replacing: Mutex<Option<Replace>>,
    scratch: String,
    /// The limits the context was created with.
    pub limits: Option<ContextLimits>,
    /// The context's own cgroup (every kernel of the context joins it), when there is one.
    cgroup: Option<ContextCgroup>,
    /// The context's own uid (every kernel of the context runs as it), with per-context uids;
    /// given back once the context is gone and its cgroup empty.
    uid_slot: Option<Arc<crate::users::UidSlot>>,
    /// OOM kills in the cgroup already reported.
    oom_seen: AtomicU64,
    /// The context this one was forked from (`Contexts::fork`).
    pub forked_from: Option<ContextId>,
    /// When it was made, in the agent's order of creation (contexts are listed in it).
    created: u64,
}

/// The creation order of contexts ([`ContextHandle::created`]).
static CREATED: AtomicU64 = AtomicU64::new(0);

impl ContextHandle {
    /// The handle of a new context `id` of `language` in `cwd` whose kernel is `kernel`: no
    /// limits, cgroup or uid of its own, not the default, nothing run yet.
    fn new(
        id: ContextId,
        language: Language,
        cwd: PathBuf,
        kernel: Kernel,
        scratch: String,
    ) -> Self {
        ContextHandle {
            id,
            language,
            cwd,
            is_default: false,
            pid: AtomicI32::new(kernel.pid()),
            kernel: tokio::sync::Mutex::new(Some(kernel)),
            busy: AtomicBool::new(false),
            interrupt: Notify::new(),
            execution_count: AtomicU64::new(0),
            kernel_restarts: AtomicU64::new(0),
            last_restart_reason: Mutex::new(None),
            replacing: Mutex::new(None),
            scratch,
            limits: None,
            cgroup: None,
            uid_slot: None,
            oom_seen: AtomicU64::new(0),
            forked_from: None,
            created: CREATED.fetch_add(1, Ordering::SeqCst),
        }
    }

    /// The handle of `id`, a fork of `src` whose kernel is `kernel`, at `execution_count`.
    fn fork_of(
        src: &ContextHandle,
        id: ContextId,
        kernel: Kernel,
        execution_count: u64,
        scratch: String,
        limits: Option<ContextLimits>,
        cgroup: Option<ContextCgroup>,
    ) -> ContextHandle {
        ContextHandle {
            execution_count: AtomicU64::new(execution_count),
            limits,
            cgroup,
            // Shared: the uid goes back only when the source, every fork and their cgroups are
            // gone.
            uid_slot: src.uid_slot.clone(),
            forked_from: Some(src.id.clone()),
            ..Self::new(id, src.language, src.cwd.clone(), kernel, scratch)
        }
    }

    pub fn info(&self) -> Context {
        Context {
            id: self.id.clone(),
            language: self.language,
            cwd: self.cwd.display().to_string(),
            is_default: self.is_default,
            state: if self.busy.load(Ordering::SeqCst) {
                ContextState::Busy
            } else {
                ContextState::Idle
            },
            execution_count: self.execution_count.load(Ordering::SeqCst),
            kernel_restarts: self.kernel_restarts.load(Ordering::SeqCst),
            last_restart_reason: self.last_restart_reason.lock().ok().and_then(|r| r.clone()),
            limits: self.limits,
            memory_bytes: self.cgroup.as_ref().and_then(|c| c.memory_bytes().ok()),
        }
    }

    /// The context's uid slot number (saved with a hibernated context).
    pub fn uid_slot(&self) -> Option<u32> {
        self.uid_slot.as_ref().map(|s| s.number())
    }

    /// The ids the context's kernels run as (`None`: the agent's own).
    pub fn kernel_ids(&self) -> Option<crate::users::Ids> {
        crate::users::kernel_ids(self.uid_slot.as_deref())
    }

    /// Whether the OOM killer killed something in the context's cgroup since the last call.
    fn new_oom_kill(&self) -> bool {
        let Some(n) = self.cgroup.as_ref().and_then(|c| c.oom_kills().ok()) else {
            return false;
        };
        self.oom_seen.swap(n, Ordering::SeqCst) < n
    }

    /// Interrupt the running cell, if any (SIGINT to the kernel's process group).
    pub fn interrupt(&self) {
        if self.busy.load(Ordering::SeqCst) {
            self.interrupt.notify_one();
        }
    }

    /// The kernel, once no cell runs (waiting at most `wait`); `None` if a cell is still running.
    pub(crate) async fn idle_kernel(
        &self,
        wait: Duration,
    ) -> Option<tokio::sync::MutexGuard<'_, Option<Kernel>>> {
        tokio::time::timeout(wait, self.kernel.lock()).await.ok()
    }

    pub(crate) fn execution_count(&self) -> u64 {
        self.execution_count.load(Ordering::SeqCst)
    }

    pub(crate) fn set_execution_count(&self, n: u64) {
        self.execution_count.store(n, Ordering::SeqCst);
    }

    fn kill_current(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid > 0 {
            let _ = lizard_jail::signal_group(pid, Signal::SIGKILL);
        }
    }

    fn note_restart(&self, reason: String) {
        self.kernel_restarts.fetch_add(1, Ordering::SeqCst);
        self.execution_count.store(0, Ordering::SeqCst);
        if let Ok(mut r) = self.last_restart_reason.lock() {
            *r = Some(reason);
        }
    }
}

/// All contexts of this agent.
pub struct Contexts {
    cfg: ContextConfig,
    launcher: Arc<Launcher>,
    map: RwLock<HashMap<ContextId, Arc<ContextHandle>>>,
    /// Default context per language; the async lock makes concurrent first runs create only one.
    defaults: tokio::sync::Mutex<HashMap<Language, ContextId>>,
    log: Mutex<RunLog>,
    /// Exact forks waiting for the host's checkpoint (`exact_fork`).
    pending: Mutex<HashMap<ContextId, exact_fork::PendingFork>>,
}

/// The name of context `id`'s cgroup (in each delegated directory).
fn cgroup_name(id: &ContextId) -> String {
    format!("ctx-{}", id.0)
}

/// Bounded log of finished runs, read by the server for metering.
#[derive(Default)]
struct RunLog {
    next_seq: u64,
    records: VecDeque<ExecutionRecord>,
}

/// How many finished runs the agent remembers for a metering reader.
const RUN_LOG_CAPACITY: usize = 10_000;

impl Contexts {
    /// A new kernel for the existing context `h` (a restart, or a replacement after its kernel
    /// died): same language, cwd, cgroup and uid.
    async fn fresh_kernel(&self, h: &ContextHandle) -> Result<Kernel, KernelError> {
        self.launcher
            .start(
                h.language,
                &h.cwd,
                &h.scratch,
                h.cgroup.as_ref(),
                // A context with a uid already: the launcher never swaps it (only a new
                // context may take the spare's).
                &mut h.uid_slot.clone(),
            )
            .await
    }

    pub fn new(cfg: ContextConfig) -> Contexts {
        Contexts {
            launcher: Launcher::new(
                cfg.kernels.clone(),
                cfg.python_zygote,
                cfg.javascript_zygote,
                cfg.javascript_spare,
                cfg.cgroups.clone(),
            ),
            cfg,
            map: RwLock::new(HashMap::new()),
            defaults: tokio::sync::Mutex::new(HashMap::new()),
            log: Mutex::new(RunLog::default()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// What starts the contexts' kernels.
    pub fn launcher(&self) -> &Arc<Launcher> {
        &self.launcher
    }

    /// The agent-wide settings (default working directory, interpreters).
    pub fn config(&self) -> &ContextConfig {
        &self.cfg
    }

    /// Finished runs with `seq > after`, oldest first (at most `limit`).
    pub fn executions_after(&self, after: u64, limit: usize) -> ExecutionLog {
        let Ok(log) = self.log.lock() else {
            return ExecutionLog::default();
        };
        let oldest = log
            .records
            .front()
            .map(|r| r.seq)
            .unwrap_or(log.next_seq + 1);
        let records: Vec<ExecutionRecord> = log
            .records
            .iter()
            .filter(|r| r.seq > after)
            .take(limit)
            .cloned()
            .collect();
        ExecutionLog {
            next: records
                .last()
                .map(|r| r.seq)
                .unwrap_or(after.max(log.next_seq)),
            dropped: oldest.saturating_sub(after + 1),
            records,
        }
    }

    fn record(
        &self,
        h: &ContextHandle,
        status: ExecutionStatus,
        wall_ms: u64,
        usage: Option<ExecutionUsage>,
    ) {
        let Ok(mut log) = self.log.lock() else { return };
        log.next_seq += 1;
        let u = usage.unwrap_or_default();
        let rec = ExecutionRecord {
            seq: log.next_seq,
            context_id: h.id.clone(),
            language: h.language,
            status,
            wall_ms,
            cpu_ms: u.cpu_ms,
            peak_rss_bytes: u.peak_rss_bytes,
            finished_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        };
        log.records.push_back(rec);
        while log.records.len() > RUN_LOG_CAPACITY {
            log.records.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, id: &ContextId) -> Result<Arc<ContextHandle>, ContextError> {
        self.map
            .read()
            .ok()
            .and_then(|m| m.get(id).cloned())
            .ok_or_else(|| ContextError::NotFound(id.clone()))
    }

    pub fn list(&self) -> Vec<Context> {
        let mut v: Vec<Arc<ContextHandle>> = self
            .map
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        // In the order they were made (E2B's SDKs and users expect it), not by their random ids.
        v.sort_by_key(|c| c.created);
        v.iter().map(|c| c.info()).collect()
    }

    /// Create a context and start its kernel (returns once the kernel is ready).
    pub async fn create(
        &self,
        language: Language,
        cwd: Option<String>,
    ) -> Result<Arc<ContextHandle>, ContextError> {
        self.create_inner(language, cwd, false).await
    }

    /// [`Contexts::create`] with limits for the context's own cgroup (checked against the
    /// sandbox's; refused where contexts get no cgroup).
    pub async fn create_limited(
        &self,
        language: Language,
        cwd: Option<String>,
        limits: Option<ContextLimits>,
    ) -> Result<Arc<ContextHandle>, ContextError> {
        self.create_with_id(
            ContextId(crate::ids::new_id()),
            language,
            cwd,
            false,
            limits,
            None,
        )
        .await
    }

    /// The context's cgroup: with `limits`, checked and applied (an error if that is not
    /// possible); without, a plain child for accounting when cgroups are delegated (a failure is
    /// logged, the context then shares the agent's cgroup).
    fn context_cgroup(
        &self,
        id: &ContextId,
        limits: Option<&ContextLimits>,
    ) -> Result<Option<ContextCgroup>, ContextError> {
        let limits = limits.filter(|l| !l.is_empty());
        let Some(d) = &self.cfg.cgroups else {
            return match limits {
                Some(_) => Err(ContextError::LimitsUnsupported(
                    "this agent has no delegated cgroup (it runs outside a sandbox, or on a \
                     cgroup v2 host)"
                        .into(),
                )),
                None => Ok(None),
            };
        };
        let name = cgroup_name(id);
        let Some(l) = limits else {
            return match d.create(&name, &Default::default()) {
                Ok(cg) => Ok(Some(cg)),
                Err(e) => {
                    tracing::warn!(context = %id, error = %e, "no cgroup for the context");
                    Ok(None)
                }
            };
        };
        let ceiling = d.ceiling().map_err(ContextError::Cgroup)?;
        let mb = |b: Option<u64>| b.map(|b| b / (1024 * 1024));
        l.check(&ContextLimits {
            memory_mb: mb(ceiling.memory_bytes),
            cpu_millicores: ceiling.cpu_millicores,
        })
        .map_err(ContextError::InvalidLimits)?;
        let want = lizard_jail::delegation::ContextLimits {
            memory_bytes: l.memory_mb.map(|m| m * 1024 * 1024),
            cpu_millicores: l.cpu_millicores,
        };
        d.create(&name, &want)
            .map(Some)
            .map_err(ContextError::Cgroup)
    }

    async fn create_inner(
        &self,
        language: Language,
        cwd: Option<String>,
        is_default: bool,
    ) -> Result<Arc<ContextHandle>, ContextError> {
        self.create_with_id(
            ContextId(crate::ids::new_id()),
            language,
            cwd,
            is_default,
            None,
            None,
        )
        .await
    }

    /// Create a context with a given id (hibernation restores contexts under their old ids, and
    /// their old uid slots, `want_slot`, when free).
    pub(crate) async fn create_with_id(
        &self,
        id: ContextId,
        language: Language,
        cwd: Option<String>,
        is_default: bool,
        limits: Option<ContextLimits>,
        want_slot: Option<u32>,
    ) -> Result<Arc<ContextHandle>, ContextError> {
        if self.cfg.kernels.without.contains(&language) {
            return Err(ContextError::NoInterpreter(language));
        }
        let cwd = match cwd {
            Some(c) => {
                let p = PathBuf::from(&c);
                let p = if p.is_absolute() {
                    p
                } else {
                    self.cfg.default_cwd.join(p)
                };
                if !p.is_dir() {
                    return Err(ContextError::BadCwd(c));
                }
                // The kernel runs as the sandbox user: a directory it cannot enter (`/root`)
                // would fail its start with a bare "Permission denied".
                let probe = p.clone();
                let enterable = tokio::task::spawn_blocking(move || {
                    crate::users::with_sandbox_user(|| lizard_jail::creds::can_search(&probe))
                })
                .await;
                if let Ok(Err(e)) = enterable {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        return Err(ContextError::CwdDenied(c));
                    }
                }
                p
            }
            None => self.cfg.default_cwd.clone(),
        };
        let scratch = format!("ctx-{}", id.0);
        let limits = limits.filter(|l| !l.is_empty());
        let mut uid_slot = match want_slot {
            Some(n) => crate::users::take_slot(Some(n)).map_err(KernelError::from)?,
            None => None,
        };
        let cgroup = self.context_cgroup(&id, limits.as_ref())?;
        let kernel = match self
            .launcher
            .start(language, &cwd, &scratch, cgroup.as_ref(), &mut uid_slot)
            .await
        {
            Ok(k) => k,
            Err(e) => {
                if let Some(cg) = cgroup {
                    remove_cgroup_later(cg, uid_slot);
                }
                return Err(e.into());
            }
        };
        let handle = Arc::new(ContextHandle {
            is_default,
            limits,
            cgroup,
            uid_slot,
            ..ContextHandle::new(id.clone(), language, cwd, kernel, scratch)
        });
        if let Ok(mut m) = self.map.write() {
            m.insert(id, handle.clone());
        }
        Ok(handle)
    }

    /// Fork context `id` into a new context of the same sandbox: its live kernel is forked
    /// (copy-on-write: every variable, function, import of the source, and its execution count;
    /// `crate::kernel::LiveFork`). Refused with [`ContextError::Busy`] while a cell runs. The fork
    /// runs as the source's uid (an unprivileged kernel cannot change it; the slot is held until
    /// every context using it is gone) in a cgroup of its own, with `limits` or the source's.
    /// Returns the new context and what of the source's live state it does not have.
    pub async fn fork(
        &self,
        id: &ContextId,
        limits: Option<ContextLimits>,
    ) -> Result<(Arc<ContextHandle>, Vec<lizard_proto::LostItem>), ContextError> {
        let src = self.get(id)?;
        let mut slot = src
            .kernel
            .try_lock()
            .map_err(|_| ContextError::Busy(id.clone()))?;
        if src.busy.load(Ordering::SeqCst) {
            return Err(ContextError::Busy(id.clone()));
        }
        let Some(kernel) = slot.as_mut() else {
            return Err(ContextError::NoKernel(id.clone()));
        };
        let new = ContextId(crate::ids::new_id());
        let limits = limits.or(src.limits).filter(|l| !l.is_empty());
        let cgroup = self.context_cgroup(&new, limits.as_ref())?;
        if cgroup.is_none() && self.cfg.cgroups.is_some() {
            // It would stay in its source's cgroup, and die with it (a deleted context's cgroup
            // is emptied with SIGKILL).
            return Err(KernelError::ForkFailed {
                language: src.language,
                message: "no cgroup could be made for the fork".into(),
            }
            .into());
        }
        let scratch = format!("ctx-{}", new.0);
        let others = self.kernel_pids();
        let forked = kernel
            .fork_live(
                &self.cfg.kernels,
                &scratch,
                src.kernel_ids(),
                cgroup.as_ref(),
                |pid| others.contains(&pid),
            )
            .await;
        let count = src.execution_count();
        drop(slot);
        let forked = match forked {
            Ok(f) => f,
            Err(e) => {
                if let Some(cg) = cgroup {
                    // Whatever the failed fork left in the new cgroup goes with it.
                    remove_cgroup_later(cg, None);
                }
                return Err(e.into());
            }
        };
        let handle = Arc::new(ContextHandle::fork_of(
            &src,
            new.clone(),
            forked.kernel,
            count,
            scratch,
            limits,
            cgroup,
        ));
        tracing::debug!(context = %new, source = %id, pid = handle.pid.load(Ordering::SeqCst), lost = forked.lost.len(), "context forked");
        if let Ok(mut m) = self.map.write() {
            m.insert(new, handle.clone());
        }
        Ok((handle, forked.lost))
    }

    /// The default context of `language`, created on first use.
    pub async fn default_for(
        &self,
        language: Language,
    ) -> Result<Arc<ContextHandle>, ContextError> {
        let mut defaults = self.defaults.lock().await;
        if let Some(id) = defaults.get(&language) {
            if let Ok(h) = self.get(id) {
                return Ok(h);
            }
        }
        let h = self.create_inner(language, None, true).await?;
        defaults.insert(language, h.id.clone());
        Ok(h)
    }

    /// Make `h` the default context of its language (replacing any other default, which is
    /// deleted), e.g. after hibernation restored it.
    pub(crate) async fn set_default(&self, h: &ContextHandle) {
        let old = {
            let mut defaults = self.defaults.lock().await;
            defaults.insert(h.language, h.id.clone())
        };
        if let Some(old) = old.filter(|o| *o != h.id) {
            // `delete` forgets defaults pointing at `old` only; the new entry stays.
            let _ = self.delete(&old).await;
        }
    }

    /// Every context, in id order.
    pub(crate) fn handles(&self) -> Vec<Arc<ContextHandle>> {
        let mut v: Vec<Arc<ContextHandle>> = self
            .map
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Replace the context's kernel with a fresh one (same id, state cleared). A running cell ends
    /// with a `ContextRestarted` error.
    pub async fn restart(&self, id: &ContextId) -> Result<Context, ContextError> {
        let h = self.get(id)?;
        set_replacing(&h, Some(Replace::Restart));
        h.kill_current();
        let mut slot = h.kernel.lock().await;
        set_replacing(&h, None);
        *slot = None;
        h.pid.store(0, Ordering::SeqCst);
        let k = self.fresh_kernel(&h).await?;
        h.pid.store(k.pid(), Ordering::SeqCst);
        *slot = Some(k);
        h.note_restart("restarted on request".into());
        drop(slot);
        Ok(h.info())
    }

    /// Delete the context: its kernel process tree is killed and its resources freed.
    pub async fn delete(&self, id: &ContextId) -> Result<(), ContextError> {
        let h = {
            let mut m = self
                .map
                .write()
                .map_err(|_| ContextError::NotFound(id.clone()))?;
            m.remove(id)
                .ok_or_else(|| ContextError::NotFound(id.clone()))?
        };
        {
            let mut d = self.defaults.lock().await;
            d.retain(|_, v| v != id);
        }
        set_replacing(&h, Some(Replace::Delete));
        h.kill_current();
        let mut slot = h.kernel.lock().await;
        *slot = None; // Drop kills the group; the pump reaps it.
        h.pid.store(0, Ordering::SeqCst);
        drop(slot);
        match h.cgroup.clone() {
            Some(cg) => remove_cgroup_later(cg, h.uid_slot.clone()),
            // No cgroup to wait for: the uid goes back once the handle is gone.
            None => drop(h),
        }
        Ok(())
    }

    /// pids of the live kernel processes (which their pumps reap themselves).
    pub fn kernel_pids(&self) -> std::collections::HashSet<i32> {
        self.map
            .read()
            .map(|m| {
                m.values()
                    .map(|h| h.pid.load(Ordering::SeqCst))
                    .filter(|p| *p > 0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// After a CRIU restore (the server's socket handover tells, `crate::relisten`): the delegated
    /// cgroup tree is the launcher's new one, empty, and every process of the sandbox is in its
    /// root cgroup. Make each context's cgroup again, with the context's limits, and move the
    /// context's kernel and the kernel's descendants into it. Returns how many contexts were
    /// placed; a failure is logged (that context then shares the sandbox's cgroup).
    pub fn recreate_cgroups(&self) -> usize {
        let Some(d) = &self.cfg.cgroups else {
            return 0;
        };
        let handles: Vec<Arc<ContextHandle>> = self
            .map
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let parents = parent_pids();
        let mut placed = 0;
        for h in handles {
            let Some(cg) = &h.cgroup else { continue };
            let want = lizard_jail::delegation::ContextLimits {
                memory_bytes: h
                    .limits
                    .as_ref()
                    .and_then(|l| l.memory_mb)
                    .map(|m| m * 1024 * 1024),
                cpu_millicores: h.limits.as_ref().and_then(|l| l.cpu_millicores),
            };
            if let Err(e) = d.create(&format!("ctx-{}", h.id.0), &want) {
                tracing::warn!(context = %h.id, error = %e, "recreating the context's cgroup");
                continue;
            }
            let root = h.pid.load(Ordering::SeqCst);
            if root <= 0 {
                placed += 1;
                continue;
            }
            let mut todo = vec![root];
            let mut seen = std::collections::HashSet::new();
            while let Some(pid) = todo.pop() {
                if !seen.insert(pid) || seen.len() > 100_000 {
                    continue;
                }
                for procs in cg.procs_paths() {
                    if let Err(e) = std::fs::write(&procs, pid.to_string()) {
                        tracing::debug!(context = %h.id, pid, error = %e, "moving a process");
                    }
                }
                todo.extend(parents.iter().filter(|(_, pp)| *pp == pid).map(|(p, _)| *p));
            }
            placed += 1;
        }
        placed
    }

    /// After a handover that named the sandbox's id: drop what was made for later contexts
    /// before the checkpoint (`Launcher::discard_spare`).
    pub fn discard_spare(&self) {
        self.launcher.discard_spare();
    }

    /// Kill every kernel (agent shutdown).
    pub fn kill_all(&self) {
        if let Ok(m) = self.map.read() {
            for h in m.values() {
                h.kill_current();
            }
        }
    }

    /// Start a run in `h`; its events arrive on the returned channel, starting with `start` and
    /// ending with `end`. Dropping the receiver interrupts the cell.
    pub fn run(
        self: &Arc<Self>,
        h: Arc<ContextHandle>,
        req: RunRequest,
    ) -> mpsc::Receiver<EventFrame> {
        let (tx, rx) = mpsc::channel(256);
        let this = self.clone();
        tokio::spawn(async move { this.run_task(h, req, tx).await });
        rx
    }

    /// Drive one run: the state machine (`run::Run`, whose docs list every path) decides what
    /// happens; this waits for its inputs and performs its actions, then measures usage, replaces
    /// a kernel that died, records the run and sends `end`.
    async fn run_task(&self, h: Arc<ContextHandle>, req: RunRequest, tx: mpsc::Sender<EventFrame>) {
        let mut out = Emitter::new(tx);
        let started = Instant::now();
        let mut slot = h.kernel.lock().await;
        h.busy.store(true, Ordering::SeqCst);

        if slot.is_none() {
            match self.fresh_kernel(&h).await {
                Ok(k) => {
                    h.pid.store(k.pid(), Ordering::SeqCst);
                    *slot = Some(k);
                }
                Err(e) => {
                    out.send(ExecutionEvent::Start {
                        execution_count: h.execution_count.load(Ordering::SeqCst),
                        context_id: h.id.clone(),
                    })
                    .await;
                    out.error("KernelUnavailable", e.to_string()).await;
                    out.end(ExecutionStatus::KernelDied, started, None).await;
                    h.busy.store(false, Ordering::SeqCst);
                    return;
                }
            }
        }
        let Some(kernel) = slot.as_mut() else {
            return;
        };
        let count = h.execution_count.fetch_add(1, Ordering::SeqCst) + 1;
        let cpu_before = kernel.usage_files().map_or(0, |u| {
            let _ = u.reset_peak_rss();
            u.cpu_time_ms().unwrap_or(0)
        });

        kernel.set_forwarding(true);
        let sent = kernel.send_exec(count, &req.code, &req.env).await;
        out.send(ExecutionEvent::Start {
            execution_count: count,
            context_id: h.id.clone(),
        })
        .await;

        let grace = self.cfg.interrupt_grace;
        let mut run = Run::new(
            count,
            req.timeout,
            grace,
            self.cfg.max_output_bytes,
            tokio::time::Instant::now(),
        );
        let mut actions = Vec::new();
        let mut taken = 0;
        if let Err(e) = sent {
            tracing::warn!(context = %h.id, error = %e, "cannot send cell");
            actions = run.send_failed();
        }
        loop {
            for action in actions.drain(..) {
                match action {
                    Action::Emit(event) => out.push(event).await,
                    Action::Signal(signal) => kernel.signal(signal),
                    Action::Warn(Warning::StrayDone { id, count }) => {
                        tracing::warn!(context = %h.id, id, count, "done for another run")
                    }
                    Action::Warn(Warning::Protocol { message }) => {
                        tracing::warn!(context = %h.id, %message, "runner protocol error")
                    }
                }
            }
            if run.is_over() {
                break;
            }
            // What the kernel already said is taken first (a few in a row: the deadline, an
            // interrupt and a client's leaving are only seen below); the events it makes go out
            // together once nothing more is here (a result and the run's end: one write on every
            // hop to the client).
            if taken < MAX_PENDING_FRAMES {
                if let Some(msg) = kernel.try_recv() {
                    taken += 1;
                    actions = run.step(tokio::time::Instant::now(), Input::Kernel(msg));
                    continue;
                }
            }
            taken = 0;
            out.flush().await;
            let wants = run.wants();
            let input = tokio::select! {
                msg = kernel.recv() => match msg {
                    Some(msg) => Input::Kernel(msg),
                    None => Input::PumpEnded,
                },
                _ = async { sleep_until(wants.deadline.unwrap_or_else(far_future)).await },
                    if wants.deadline.is_some() => Input::Deadline,
                _ = h.interrupt.notified(), if wants.interrupt => Input::Interrupt,
                _ = out.tx.closed(), if wants.client_gone => Input::ClientGone,
                _ = async { sleep_until(wants.sigint_at.unwrap_or_else(far_future)).await },
                    if wants.sigint_at.is_some() => Input::SigintDue,
            };
            actions = run.step(tokio::time::Instant::now(), input);
        }
        kernel.set_forwarding(false);
        let ending = run.finish();
        if let Some(notice) = ending.notice {
            out.send(ExecutionEvent::Stderr { text: notice }).await;
        }
        let mut usage = None;
        if ending.death.is_none() {
            let (cpu_after, peak) = kernel.usage_files().map_or((cpu_before, 0), |u| {
                (
                    u.cpu_time_ms().unwrap_or(cpu_before),
                    u.peak_rss_bytes().unwrap_or(0),
                )
            });
            usage = Some(ExecutionUsage {
                cpu_ms: cpu_after.saturating_sub(cpu_before),
                peak_rss_bytes: peak,
            });
        }

        if let Some(death) = ending.death {
            *slot = None;
            h.pid.store(0, Ordering::SeqCst);
            let replacing = h.replacing.lock().ok().and_then(|r| *r);
            let report = death.report(
                replacing,
                || h.new_oom_kill(),
                h.language,
                grace,
                h.limits.and_then(|l| l.memory_mb),
            );
            out.error(report.name, report.message.clone()).await;
            if report.replace {
                // Start the replacement now, so the next run finds a ready kernel.
                match self.fresh_kernel(&h).await {
                    Ok(k) => {
                        h.pid.store(k.pid(), Ordering::SeqCst);
                        *slot = Some(k);
                    }
                    Err(e) => {
                        tracing::warn!(context = %h.id, error = %e, "cannot restart kernel")
                    }
                }
                h.note_restart(report.message);
            }
        }
        drop(slot);
        h.busy.store(false, Ordering::SeqCst);
        self.record(
            &h,
            ending.status,
            started.elapsed().as_millis() as u64,
            usage,
        );
        out.end(ending.status, started, usage).await;
    }
}

/// Remove a context's cgroup once its processes are gone (in the background: the killed kernel's
/// group may take a moment to exit; whatever else of the context is still in it — a process that
/// left the kernel's group — is killed). Then the context's uid (`slot`) is free again: never
/// while a process of the context may still run as it. Whatever is left when the sandbox ends
/// goes with its cgroup.
/// `(pid, parent pid)` of every process this agent's `/proc` shows (its sandbox's pid namespace),
/// each `stat` read up to 4 KiB.
fn parent_pids() -> Vec<(i32, i32)> {
    use std::io::Read;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten().take(100_000) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let mut stat = String::new();
        let read = std::fs::File::open(e.path().join("stat"))
            .and_then(|f| f.take(4096).read_to_string(&mut stat));
        if read.is_err() {
            continue;
        }
        // `pid (comm) state ppid …`: comm may hold anything, the last ')' ends it.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            out.push((pid, ppid));
        }
    }
    out
}

fn remove_cgroup_later(cg: ContextCgroup, slot: Option<Arc<crate::users::UidSlot>>) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            cg.kill_all();
            match cg.remove_within(Duration::from_millis(500)) {
                Ok(()) => {
                    drop(slot);
                    return;
                }
                Err(e) if Instant::now() >= deadline => {
                    // The uid stays taken (`slot` is leaked): reusing it could hand a new
                    // context a process of this one.
                    tracing::warn!(error = %e, "cannot remove a context's cgroup; its uid stays taken");
                    std::mem::forget(slot);
                    return;
                }
                Err(_) => {}
            }
        }
    });
}

fn set_replacing(h: &ContextHandle, r: Option<Replace>) {
    if let Ok(mut g) = h.replacing.lock() {
        *g = r;
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365)
}

/// Numbers the frames of one run and tolerates a receiver that went away.
struct Emitter {
    tx: mpsc::Sender<EventFrame>,
    seq: u64,
    /// Frames not sent yet (see [`Emitter::push`]).
    pending: Vec<EventFrame>,
}

/// At most this many frames wait in an [`Emitter`] before they are sent.
const MAX_PENDING_FRAMES: usize = 32;

impl Emitter {
    fn new(tx: mpsc::Sender<EventFrame>) -> Emitter {
        Emitter {
            tx,
            seq: 0,
            pending: Vec::new(),
        }
    }

    /// `event` goes out with the next [`Emitter::flush`] (or [`Emitter::send`]), in order; at
    /// most [`MAX_PENDING_FRAMES`] wait.
    async fn push(&mut self, event: ExecutionEvent) {
        let frame = EventFrame {
            seq: self.seq,
            event,
        };
        self.seq += 1;
        self.pending.push(frame);
        if self.pending.len() >= MAX_PENDING_FRAMES {
            self.flush().await;
        }
    }

    /// Send every waiting frame, back to back (the response body takes what is there as one
    /// chunk).
    async fn flush(&mut self) {
        for frame in self.pending.drain(..) {
            // A closed receiver means the client left; the run goes on (interrupted) without it.
            let _ = self.tx.send(frame).await;
        }
    }

    async fn send(&mut self, event: ExecutionEvent) {
        self.push(event).await;
        self.flush().await;
    }

    async fn error(&mut self, name: &str, value: String) {
        self.send(ExecutionEvent::Error(ExecutionError {
            name: name.to_string(),
            value,
            traceback: String::new(),
        }))
        .await
    }

    async fn end(
        &mut self,
        status: ExecutionStatus,
        started: Instant,
        usage: Option<ExecutionUsage>,
    ) {
        self.send(ExecutionEvent::End {
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            usage,
        })
        .await
    }
}
