//! Starting kernels fast: the zygotes with fallback to spawning, and a spare JavaScript kernel.
//!
//! [`Launcher::start`] is how the context layer gets a kernel. Python and JavaScript kernels are
//! forked from the agent's zygote for that language ([`super::Zygote`], started on the first kernel
//! of the language: with `--prestart python` that is the default context's, so the default kernel
//! is itself a fork and shares the zygote's pages). If a zygote cannot start or stops answering,
//! or a forked kernel dies before it is ready, the kernel is spawned instead and a new zygote is
//! started in the background (after a failed start, spawning is used for [`RETRY_AFTER`] before
//! the next attempt).
//!
//! JavaScript creates are served first by a spare kernel, once the sandbox has started one
//! JavaScript kernel: the launcher keeps one ready in a neutral directory (forked from the
//! zygote in its nursery, or spawned without the zygote); a create takes it (the runner's `setup`
//! message moves it into the context's directory, its cgroup becomes the context's) and a new
//! spare is made in the background. A create that arrives while the spare is still being made
//! waits for it (it is further along than a fresh fork or spawn). Bash kernels are always
//! spawned (≈ 2 ms).
//!
//! Not here: what a kernel is or how it is driven (`super::Kernel`), contexts (`crate::context`).

use super::{ForkError, Kernel, KernelConfig, KernelError, Zygote};
use crate::users::{Ids, UidSlot};
use lizard_jail::delegation::{ContextCgroup, Delegation};
use lizard_proto::Language;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After a zygote failed to start, kernels are spawned for this long before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(Default)]
struct ZygoteSlot {
    zygote: Option<Arc<Zygote>>,
    failed_at: Option<Instant>,
}

/// A cgroup of its own that a zygote waits in, so that the kernel it forks next starts there and
/// the cgroup becomes the context's by renaming ([`ContextCgroup::take_over`]) instead of a
/// migration: moving a process into a v1 cgroup waits for an RCU grace period (7–16 ms when no
/// move happened recently). The zygote moves on to a fresh nursery after each fork, in the
/// background; the next fork waits for that move if it is still going on.
struct Nursery {
    zygote_pid: i32,
    cgroup: ContextCgroup,
}

/// A zygote's nursery, if it has one; locked from a fork until the zygote sits in a fresh one.
type NurserySlot = Arc<tokio::sync::Mutex<Option<Nursery>>>;

/// One language's zygote: whether kernels are forked, where the zygote runs, the zygote itself
/// and its nursery.
struct Lane {
    enabled: bool,
    cwd: PathBuf,
    /// The async lock makes concurrent first creates start only one zygote.
    slot: tokio::sync::Mutex<ZygoteSlot>,
    /// Only with a delegated cgroup sub-tree; locked while one is made.
    nursery: NurserySlot,
    /// A zygote to adopt is expected until then ([`Launcher::expect_adoption`]): the first
    /// kernel waits for it rather than start a zygote of the agent's own. The receiver says when
    /// the wait is over (adopted, or given up).
    expected: std::sync::Mutex<Option<(Instant, tokio::sync::watch::Receiver<bool>)>>,
}

impl Lane {
    fn new(enabled: bool, cwd: PathBuf) -> Lane {
        Lane {
            enabled,
            cwd,
            slot: tokio::sync::Mutex::new(ZygoteSlot::default()),
            nursery: NurserySlot::default(),
            expected: std::sync::Mutex::new(None),
        }
    }

    /// Wait until an expected adoption has happened or been given up, at most until its time.
    async fn await_adoption(&self) {
        let expected = match self.expected.lock() {
            Ok(e) => e.clone(),
            Err(_) => None,
        };
        if let Some((until, mut settled)) = expected {
            let until = tokio::time::Instant::from_std(until);
            let _ = tokio::time::timeout_at(until, settled.wait_for(|done| *done)).await;
        }
    }
}

/// Held by whoever adopts a zygote for a lane ([`Launcher::expect_adoption`]): dropping it (or
/// [`Launcher::adopt`]) ends the lane's wait.
pub struct Adoption(tokio::sync::watch::Sender<bool>);

impl Drop for Adoption {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// The spare JavaScript kernel: its own cgroup (with a delegated sub-tree) and the context uid it
/// runs as (with per-context uids), which the context that takes it gets.
type Spare = (Kernel, Option<ContextCgroup>, Option<Arc<UidSlot>>);

/// Starts kernels: forks Python and JavaScript ones from their zygotes, spawns the rest.
pub struct Launcher {
    cfg: KernelConfig,
    python: Lane,
    javascript: Lane,
    /// Where the spare JavaScript kernel waits until a context takes it.
    spare_cwd: PathBuf,
    use_js_spare: bool,
    /// The spare JavaScript kernel, in a cgroup of its own when there is a delegated sub-tree;
    /// held locked while a refill starts one.
    js_spare: tokio::sync::Mutex<Option<Spare>>,
    /// The delegated cgroup sub-tree, for the spare's own cgroup.
    cgroups: Option<Delegation>,
}

impl Launcher {
    /// `use_zygote`: fork Python kernels (false: always spawn, as before the zygote).
    /// `use_js_zygote`: fork JavaScript kernels.
    /// `use_js_spare`: keep a spare JavaScript kernel once JavaScript has been used (forked when
    /// `use_js_zygote`).
    /// `cgroups`: the delegated sub-tree (the spare is started in a cgroup of its own there, which
    /// becomes its context's: moving a running Node process between v1 memory cgroups costs
    /// ≈ 12 ms, renaming a cgroup nothing).
    pub fn new(
        cfg: KernelConfig,
        use_zygote: bool,
        use_js_zygote: bool,
        use_js_spare: bool,
        cgroups: Option<Delegation>,
    ) -> Arc<Launcher> {
        Arc::new(Launcher {
            python: Lane::new(use_zygote, cfg.run_dir.join("zygote")),
            javascript: Lane::new(use_js_zygote, cfg.run_dir.join("zygote-js")),
            spare_cwd: cfg.run_dir.join("spare-js"),
            cfg,
            use_js_spare,
            js_spare: tokio::sync::Mutex::new(None),
            cgroups,
        })
    }

    pub fn config(&self) -> &KernelConfig {
        &self.cfg
    }

    /// The directory a `language` zygote runs in (and has as its `HOME`).
    pub fn zygote_dir(&self, language: Language) -> PathBuf {
        match self.lane(language) {
            Some(lane) => lane.cwd.clone(),
            None => self.cfg.run_dir.join("zygote"),
        }
    }

    /// Start a kernel for `language` in `cwd` and wait until it is ready (see [`Kernel::start`]),
    /// in `cgroup` when given: a spawned kernel joins it before it executes; a forked or spare one
    /// started in a cgroup of its own, which becomes `cgroup` (or, failing that, is moved there
    /// once ready; pages it shares with the zygote stay charged where they were).
    ///
    /// `slot` is the context's uid (`crate::users`): a kernel runs as it. A context that has none
    /// yet (a create) gets the spare's, or a free one (`KernelError::NoFreeSlot` when every one
    /// is taken); without per-context uids it stays `None`.
    pub async fn start(
        self: &Arc<Self>,
        language: Language,
        cwd: &Path,
        scratch: &str,
        cgroup: Option<&ContextCgroup>,
        slot: &mut Option<Arc<UidSlot>>,
    ) -> Result<Kernel, KernelError> {
        // The spare runs as a uid of its own: only a context without one yet can take it.
        if language == Language::Javascript && self.use_js_spare && slot.is_none() {
            // Waits for a refill in progress (the lock is held while the spare starts).
            let spare = self.js_spare.lock().await.take();
            // The refill starts after this create is served: a Node start-up next to the setup
            // would share the sandbox's CPU quota with it (≈ 15 ms more per create).
            let _refill = RefillOnDrop(self);
            if let Some((mut k, spare_cg, spare_slot)) = spare {
                match k.setup(cwd, self.cfg.start_timeout).await {
                    Ok(()) => {
                        // The spare's own cgroup becomes the context's (renamed, limits copied).
                        if let Some(k) = hand_over(k, cgroup, spare_cg) {
                            *slot = spare_slot;
                            return Ok(k);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "spare JavaScript kernel unusable");
                        if let Some(own) = spare_cg {
                            let _ = own.remove_within(Duration::from_secs(1));
                        }
                    }
                }
            }
        }
        if slot.is_none() {
            *slot = crate::users::take_slot(None)?;
        }
        let user = crate::users::kernel_ids(slot.as_deref());
        if let Some(z) = self.forking_zygote(language).await {
            let (forked, nursery) = self.fork_in_nursery(&z, cwd, user).await;
            match forked {
                Ok(k) => {
                    if let Some(k) = hand_over(k, cgroup, nursery.map(|n| n.cgroup)) {
                        return Ok(k);
                    }
                }
                Err(e) => {
                    if let Some(n) = nursery {
                        retire(n.cgroup);
                    }
                    self.forget_on(e, &z)?;
                }
            }
        }
        Kernel::start(&self.cfg, language, cwd, scratch, cgroup, user).await
    }

    /// The zygote to fork a `language` kernel from, if kernels of that language are forked and
    /// one runs (or can be started).
    async fn forking_zygote(self: &Arc<Self>, language: Language) -> Option<Arc<Zygote>> {
        if self.lane(language)?.enabled {
            self.zygote(language).await
        } else {
            None
        }
    }

    /// Fork a kernel from `z` in `cwd`. The kernel is born in the zygote's nursery (returned, if
    /// there was one: it is now the kernel's cgroup); the zygote moves on to a fresh one.
    async fn fork_in_nursery(
        self: &Arc<Self>,
        z: &Arc<Zygote>,
        cwd: &Path,
        user: Option<Ids>,
    ) -> (Result<Kernel, ForkError>, Option<Nursery>) {
        // Held until the zygote has left the nursery that becomes this kernel's cgroup: a fork
        // must never start in a context's cgroup (nor two kernels in one nursery).
        let mut slot = self.zygote_lane(z).nursery.clone().lock_owned().await;
        let nursery = slot.take().filter(|n| n.zygote_pid == z.pid());
        // Once the kernel exists, the zygote moves on (the kernel stays in `nursery`).
        let mut locked = Some(slot);
        let forked = Kernel::fork(&self.cfg, z, cwd, user, || {
            self.refill_nursery(z, locked.take())
        })
        .await;
        if locked.is_some() {
            self.refill_nursery(z, locked);
        }
        (forked, nursery)
    }

    /// After a failed fork: a kernel that died before `ready` may be the zygote's fault (its
    /// state), and a zygote that failed is unusable: replace it (the caller spawns, which also
    /// reports a cause that is not the zygote's). Other kernel errors are the caller's.
    fn forget_on(self: &Arc<Self>, e: ForkError, z: &Arc<Zygote>) -> Result<(), KernelError> {
        match e {
            ForkError::Kernel(e @ KernelError::DiedAtStart { .. }) => {
                tracing::warn!(error = %e, "forked kernel died at start; spawning instead");
                self.replace_zygote(z);
                Ok(())
            }
            ForkError::Kernel(e) => Err(e),
            ForkError::Zygote(e) => {
                tracing::warn!(error = %e, "zygote failed; spawning the kernel instead");
                self.replace_zygote(z);
                Ok(())
            }
        }
    }

    /// Make a spare JavaScript kernel in the background unless there is one (or one starting):
    /// forked from the zygote (in its nursery, which becomes the spare's cgroup) when JavaScript
    /// kernels are forked, else spawned in a cgroup of its own.
    fn refill_js_spare(self: &Arc<Self>) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut slot = this.js_spare.lock().await;
            if slot.is_some() {
                return;
            }
            if let Err(source) = std::fs::create_dir_all(&this.spare_cwd) {
                tracing::warn!(error = %source, "cannot make the spare kernel's directory");
                return;
            }
            // The spare's uid is reserved with it (given back if it cannot be made).
            let spare_slot = match crate::users::take_slot(None) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "no uid for a spare JavaScript kernel");
                    return;
                }
            };
            let user = crate::users::kernel_ids(spare_slot.as_deref());
            if let Some(z) = this.forking_zygote(Language::Javascript).await {
                let (forked, nursery) = this.fork_in_nursery(&z, &this.spare_cwd, user).await;
                let own = nursery.map(|n| n.cgroup);
                match forked {
                    Ok(k) => {
                        *slot = Some((k, own, spare_slot));
                        return;
                    }
                    Err(e) => {
                        // No spare this time: the next create forks from the replacement zygote
                        // (or spawns while there is none).
                        if let Some(own) = own {
                            retire(own);
                        }
                        if let Err(e) = this.forget_on(e, &z) {
                            tracing::warn!(error = %e, "cannot fork a spare JavaScript kernel");
                        }
                        return;
                    }
                }
            }
            let own = this.cgroups.as_ref().and_then(|d| {
                d.create(
                    &format!("ctx-spare-{}", crate::ids::new_id()),
                    &Default::default(),
                )
                .map_err(|e| tracing::warn!(error = %e, "no cgroup for the spare kernel"))
                .ok()
            });
            let started = Kernel::start(
                &this.cfg,
                Language::Javascript,
                &this.spare_cwd,
                "js-spare",
                own.as_ref(),
                user,
            )
            .await;
            match started {
                Ok(k) => *slot = Some((k, own, spare_slot)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a spare JavaScript kernel");
                    if let Some(own) = own {
                        let _ = own.remove();
                    }
                }
            }
        });
    }

    /// After a CRIU restore that named the sandbox's own id (`crate::identity`): the spare
    /// JavaScript kernel was made before the checkpoint, with the source's id in its environment.
    /// It is killed (its cgroup removed once empty); the next JavaScript create makes a new one.
    /// (Zygotes stay: each fork request carries the id.)
    pub fn discard_spare(&self) {
        let Ok(mut slot) = self.js_spare.try_lock() else {
            return;
        };
        if let Some((kernel, cgroup, _uid)) = slot.take() {
            drop(kernel);
            if let Some(cg) = cgroup {
                retire(cg);
            }
        }
    }

    /// The zygote lane of `language` (Bash has none).
    fn lane(&self, language: Language) -> Option<&Lane> {
        match language {
            Language::Python => Some(&self.python),
            Language::Javascript => Some(&self.javascript),
            Language::Bash => None,
        }
    }

    /// The lane zygote `z` belongs to.
    fn zygote_lane(&self, z: &Zygote) -> &Lane {
        self.lane(z.language()).unwrap_or(&self.python)
    }

    /// Move zygote `z` into a fresh nursery in the background (unless it has one, or there is no
    /// delegated cgroup sub-tree). Holds the nursery slot while moving (`locked`: the caller's
    /// guard, handed over), so the next fork waits for it; an old nursery (of a replaced zygote)
    /// is removed once empty.
    fn refill_nursery(
        self: &Arc<Self>,
        z: &Arc<Zygote>,
        locked: Option<tokio::sync::OwnedMutexGuard<Option<Nursery>>>,
    ) {
        let Some(cgroups) = self.cgroups.clone() else {
            return;
        };
        let (pid, language) = (z.pid(), z.language());
        let nursery = self.zygote_lane(z).nursery.clone();
        tokio::spawn(async move {
            let mut slot = match locked {
                Some(guard) => guard,
                None => nursery.lock_owned().await,
            };
            match slot.take() {
                Some(n) if n.zygote_pid == pid => {
                    *slot = Some(n);
                    return;
                }
                Some(old) => retire(old.cgroup),
                None => {}
            }
            let made = tokio::task::spawn_blocking(move || {
                let name = format!("ctx-nursery-{}", crate::ids::new_id());
                let cg = cgroups.create(&name, &Default::default())?;
                match cg.add_pid(pid) {
                    Ok(()) => Ok(cg),
                    Err(e) => {
                        let _ = cg.remove();
                        Err(e)
                    }
                }
            })
            .await;
            match made {
                Ok(Ok(cgroup)) => {
                    *slot = Some(Nursery {
                        zygote_pid: pid,
                        cgroup,
                    })
                }
                Ok(Err(e)) => tracing::debug!(error = %e, %language, "no nursery for the zygote"),
                Err(e) => tracing::warn!(error = %e, "nursery task failed"),
            }
        });
    }

    /// Expect a `language` zygote to adopt (a host zygote's fork joining the sandbox) for up to
    /// `wait`: until it is adopted ([`Launcher::adopt`]) or the returned [`Adoption`] is dropped,
    /// the first kernel waits for it instead of starting a zygote of the agent's own.
    pub fn expect_adoption(&self, language: Language, wait: Duration) -> Option<Adoption> {
        let lane = self.lane(language).filter(|l| l.enabled)?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        if let Ok(mut e) = lane.expected.lock() {
            *e = Some((Instant::now() + wait, rx));
        }
        Some(Adoption(tx))
    }

    /// Make `z` its language's zygote: kernels are forked from it from now on. A zygote the
    /// agent started meanwhile is dropped (killed; the kernels it forked live on).
    pub async fn adopt(self: &Arc<Self>, z: Zygote, adoption: Adoption) {
        let Some(lane) = self.lane(z.language()) else {
            return;
        };
        let z = Arc::new(z);
        let mut slot = lane.slot.lock().await;
        let old = slot.zygote.replace(z.clone());
        slot.failed_at = None;
        let nursery = lane.nursery.clone().lock_owned().await;
        self.refill_nursery(&z, Some(nursery));
        drop(slot);
        drop(adoption);
        if let Some(old) = old {
            tracing::info!(
                pid = old.pid(),
                "the adopted zygote replaces the agent's own"
            );
        }
    }

    /// The running zygote for `language`, started if there is none (unless a start failed
    /// recently).
    async fn zygote(self: &Arc<Self>, language: Language) -> Option<Arc<Zygote>> {
        let lane = self.lane(language)?;
        let cwd = &lane.cwd;
        lane.await_adoption().await;
        let mut slot = lane.slot.lock().await;
        if let Some(z) = &slot.zygote {
            return Some(z.clone());
        }
        if slot.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return None;
        }
        let started = match std::fs::create_dir_all(cwd) {
            Ok(()) => Zygote::start(&self.cfg, language, cwd).await,
            Err(source) => Err(KernelError::Pipe {
                what: "zygote directory",
                source,
            }),
        };
        match started {
            Ok(z) => {
                let z = Arc::new(z);
                slot.zygote = Some(z.clone());
                slot.failed_at = None;
                // The first fork waits for the first nursery: a forked kernel (no longer root)
                // cannot be moved into its context's cgroup afterwards (see `into_cgroup`).
                let nursery = lane.nursery.clone().lock_owned().await;
                self.refill_nursery(&z, Some(nursery));
                Some(z)
            }
            Err(e) => {
                tracing::warn!(error = %e, %language, "cannot start the zygote; spawning kernels");
                slot.failed_at = Some(Instant::now());
                None
            }
        }
    }

    /// Forget the failed zygote `old` (dropping the last reference kills it) and start a new one
    /// in the background.
    fn replace_zygote(self: &Arc<Self>, old: &Arc<Zygote>) {
        let this = self.clone();
        let (old_pid, language) = (old.pid(), old.language());
        tokio::spawn(async move {
            if let Some(lane) = this.lane(language) {
                let mut slot = lane.slot.lock().await;
                if slot.zygote.as_ref().is_some_and(|z| z.pid() == old_pid) {
                    slot.zygote = None;
                }
            }
            let _ = this.zygote(language).await;
        });
    }
}

/// Put kernel `k`, started in a cgroup of its own (`own`: a zygote's nursery, or a spare's), into
/// its context's `cgroup`: `own` becomes that cgroup (renamed, limits written); failing that, or
/// without one, the kernel is moved.
fn hand_over(
    k: Kernel,
    cgroup: Option<&ContextCgroup>,
    own: Option<ContextCgroup>,
) -> Option<Kernel> {
    match (cgroup, own) {
        (Some(target), Some(own)) => match target.take_over(&own) {
            Ok(()) => Some(k),
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand the kernel's own cgroup over");
                let k = into_cgroup(k, cgroup);
                retire(own);
                k
            }
        },
        (_, own) => {
            let k = into_cgroup(k, cgroup);
            if let Some(own) = own {
                retire(own);
            }
            k
        }
    }
}

/// Remove a cgroup of a zygote or kernel that is no longer used, in the background, once its
/// processes have left (a zygote moving to a new nursery, or killed; a kernel moved out).
fn retire(cgroup: ContextCgroup) {
    tokio::task::spawn_blocking(move || {
        if let Err(e) = cgroup.remove_within(Duration::from_secs(30)) {
            tracing::warn!(error = %e, "cannot remove an old nursery cgroup");
        }
    });
}

/// Move a ready kernel into its context's cgroup; `None` (the kernel killed) if that fails, so the
/// caller spawns one in the cgroup instead of running one outside its limits. (A kernel that runs
/// as a context's uid cannot be moved: cgroup v1 lets the agent, which is not the host's root,
/// move only processes of its own uid; that kernel is spawned into the cgroup instead.)
fn into_cgroup(k: Kernel, cgroup: Option<&ContextCgroup>) -> Option<Kernel> {
    let Some(cg) = cgroup else {
        return Some(k);
    };
    match cg.add_pid(k.pid()) {
        Ok(()) => Some(k),
        Err(e) => {
            tracing::warn!(error = %e, "cannot move the kernel into its context's cgroup; spawning");
            k.signal(lizard_jail::Signal::SIGKILL);
            None
        }
    }
}

/// Starts a spare JavaScript kernel when dropped (at the end of a JavaScript create).
struct RefillOnDrop<'a>(&'a Arc<Launcher>);

impl Drop for RefillOnDrop<'_> {
    fn drop(&mut self) {
        self.0.refill_js_spare();
    }
}
