//! The warm pool: sandboxes launched ahead of demand for creates that any pooled sandbox fits.
//! It holds `pool_size` of them, or more up to `pool_max` when bursts of creates asked for more
//! lately ([`Demand`]).

use super::*;
use std::collections::VecDeque;
use std::time::Instant;

/// How far back creates count for the pool's size.
const WINDOW: Duration = Duration::from_secs(300);
/// A burst: the creates of this long.
const SPAN: Duration = Duration::from_secs(10);
/// The most creates remembered (a flood of creates costs no more than this).
const REMEMBERED: usize = 4096;
/// A refill waits until no create has come for this long: the claimed sandboxes of a burst run
/// their first cells on the same cores as the launches that replace them.
const QUIET: Duration = Duration::from_millis(60);
/// … but no longer than this, so that a steady stream of creates still gets its pool back.
const QUIET_AT_MOST: Duration = Duration::from_secs(1);

/// The default pool's size per GiB of the host's memory: one ready sandbox (≈ 9–11 MiB of
/// private memory each, docs/PERFORMANCE.md) per GiB keeps the pool under 1 % of memory, and a
/// 24 GiB host ready for a burst of 20 agents starting at once.
const POOLED_PER_GIB: u64 = 1;
/// … and at most this share of what the data dir's disk may promise (each pooled sandbox's disk
/// is promised in full): the rest is left to creates the pool cannot serve.
const POOL_DISK_SHARE: u64 = 4;
/// The default pool's bounds, whatever the host.
const DEFAULT_POOL: (usize, usize) = (2, 32);

/// The pool's size when `lizard serve --pool-size` is not given: [`pool_size_for`] the host's
/// `MemTotal` and the disk budget of `data_dir` (see [`crate::storage`]), for sandboxes whose
/// disks are `sandbox_disk_mb`.
pub fn default_pool_size(data_dir: &Path, disk_overcommit: f64, sandbox_disk_mb: u64) -> usize {
    let budget = crate::storage::Storage::new(data_dir, disk_overcommit).budget();
    pool_size_for(
        super::meminfo_mb("MemTotal").unwrap_or(0),
        budget,
        sandbox_disk_mb,
    )
}

/// One ready sandbox per GiB of `total_mem_mb`, and at most a quarter of what `disk_budget`
/// (bytes) can promise to sandbox disks of `sandbox_disk_mb`; at least 2, at most 32.
pub fn pool_size_for(total_mem_mb: u64, disk_budget: u64, sandbox_disk_mb: u64) -> usize {
    let by_memory = total_mem_mb / 1024 * POOLED_PER_GIB;
    let by_disk =
        disk_budget / POOL_DISK_SHARE / sandbox_disk_mb.max(1).saturating_mul(1024 * 1024);
    let n = usize::try_from(by_memory.min(by_disk)).unwrap_or(usize::MAX);
    n.clamp(DEFAULT_POOL.0, DEFAULT_POOL.1)
}

/// The recent pool-eligible creates: the pool is sized for the largest burst among them.
#[derive(Debug, Default)]
pub(super) struct Demand {
    creates: VecDeque<Instant>,
}

impl Demand {
    pub(super) fn note(&mut self, at: Instant) {
        self.forget_before(at);
        if self.creates.len() == REMEMBERED {
            self.creates.pop_front();
        }
        self.creates.push_back(at);
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .creates
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > WINDOW)
        {
            self.creates.pop_front();
        }
    }

    /// The last create noted.
    fn last(&self) -> Option<Instant> {
        self.creates.back().copied()
    }

    /// The most creates within any [`SPAN`] of the last [`WINDOW`] before `now`.
    pub(super) fn largest_burst(&mut self, now: Instant) -> usize {
        self.forget_before(now);
        let (mut most, mut first) = (0, 0);
        for (last, t) in self.creates.iter().enumerate() {
            while t.saturating_duration_since(self.creates[first]) >= SPAN {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most
    }
}

impl Sandboxes {
    /// Whether a create request can be served by a pooled sandbox: the default template, with
    /// nothing that is fixed at launch (environment, limits, network) asked for.
    pub(super) fn pool_eligible(&self, template: &str, req: &CreateSandbox) -> bool {
        self.cfg.pool_size > 0
            && template == self.cfg.default_template
            && req.envs.is_empty()
            && req.limits == LimitsRequest::default()
            && req.volumes.is_empty()
            && req.network.egress.is_none()
    }

    /// Counts a pool-eligible create (served from the pool or not) for the pool's size.
    pub(super) fn note_pool_demand(&self) {
        if let Ok(mut d) = self.pool_demand.lock() {
            d.note(Instant::now());
        }
    }

    /// The ready sandboxes in the pool now.
    pub fn pool_ready(&self) -> usize {
        self.pool.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// How many ready sandboxes the pool holds now: `pool_size`, or the largest recent burst up
    /// to `pool_max`.
    pub fn pool_target(&self) -> usize {
        let burst = self
            .pool_demand
            .lock()
            .map(|mut d| d.largest_burst(Instant::now()))
            .unwrap_or(0);
        burst.clamp(
            self.cfg.pool_size,
            self.cfg.pool_max.max(self.cfg.pool_size),
        )
    }

    /// Wait until no pool-eligible create has come for [`QUIET`], at most [`QUIET_AT_MOST`]: a
    /// burst's claims and first runs go before the launches that refill the pool.
    async fn until_creates_pause(&self) {
        let until = Instant::now() + QUIET_AT_MOST;
        loop {
            let last = self.pool_demand.lock().ok().and_then(|d| d.last());
            let now = Instant::now();
            let Some(quiet_at) = last.map(|t| t + QUIET).filter(|q| *q > now) else {
                return;
            };
            if now >= until {
                return;
            }
            tokio::time::sleep(quiet_at.min(until) - now).await;
        }
    }

    /// Kills the pooled sandboxes beyond the pool's size (after a burst has aged out).
    async fn shrink_pool(&self) {
        let target = self.pool_target();
        let extra: Vec<LaunchedSandbox> = self
            .pool
            .lock()
            .map(|mut p| {
                let extra = p.len().saturating_sub(target);
                p.drain(..extra).collect()
            })
            .unwrap_or_default();
        for l in extra {
            tracing::debug!(sandbox = %l.id, "the pool shrinks");
            self.destroy_pooled(l).await;
        }
    }

    /// Tear a pooled sandbox down (unmounts and cgroup removal block: not on the runtime's
    /// threads), then give its id range back.
    async fn destroy_pooled(&self, l: LaunchedSandbox) {
        let LaunchedSandbox { id, runtime, .. } = l;
        let _ = tokio::task::spawn_blocking(move || destroy(&runtime)).await;
        self.id_ranges.release(&id);
    }

    pub(super) fn take_pooled(&self) -> Option<LaunchedSandbox> {
        self.pool.lock().ok().and_then(|mut p| p.pop())
    }

    /// Ask the pool filler to top the pool up (in the background).
    pub fn refill_pool(&self) {
        if self.cfg.pool_size > 0 {
            self.pool_wanted.notify_one();
        }
    }

    /// Keep the pool's ready sandboxes of the default template (see [`Demand`]), each with a
    /// started Python kernel, so that `create` is a claim and the first run is warm. Runs until the
    /// process ends.
    ///
    /// Up to `pool_refills` launches run at once (`lizard serve --pool-refills`, by default one
    /// per core): most of a launch is its Python zygote's start-up (≈ 140 ms of one core, see
    /// docs/PERFORMANCE.md), so one launch at a time refills at most ≈ 4 sandboxes a second
    /// however many cores are idle.
    pub async fn run_pool(self: Arc<Self>) {
        if self.cfg.pool_size == 0 {
            return;
        }
        // Pooled sandboxes are the hot path: made with the host zygote, if there is to be one
        // (its start takes a fraction of a second; a create meanwhile launches its own).
        self.host_zygotes_started(std::time::Duration::from_secs(30))
            .await;
        let at_once = self.cfg.pool_refills.max(1);
        loop {
            loop {
                let missing = self.pool_target().saturating_sub(self.pool_ready());
                if missing == 0 {
                    break;
                }
                self.until_creates_pause().await;
                let closed = self.pool_filling.lock().await;
                if *closed {
                    return;
                }
                let launches = (0..missing.min(at_once)).map(|_| self.launch_pooled());
                let filled = futures_util::future::join_all(launches).await;
                drop(closed);
                if filled.iter().any(|ok| !ok) {
                    break;
                }
            }
            if self.cfg.pool_max > self.cfg.pool_size {
                // A grown pool shrinks back once its burst is older than the window.
                let _ = tokio::time::timeout(SPAN, self.pool_wanted.notified()).await;
                self.shrink_pool().await;
            } else {
                self.pool_wanted.notified().await;
            }
        }
    }

    /// Launch one sandbox for the pool and add it once its Python kernel runs: whether it did.
    async fn launch_pooled(&self) -> bool {
        let template = self.cfg.default_template.clone();
        let limits = self.cfg.default_limits;
        let l = match self
            .launch_new(("", &template), &BTreeMap::new(), limits, &[], None)
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "filling the sandbox pool");
                return false;
            }
        };
        // Pooled sandboxes are handed out with their Python kernel running.
        if let Err(e) = l
            .agent
            .wait_default_context(lizard_proto::Language::Python, self.cfg.ready_timeout)
            .await
        {
            tracing::warn!(sandbox = %l.id, error = %e, "warming a pooled sandbox");
            destroy_unwatched(&l.runtime, true);
            self.id_ranges.release(&l.id);
            return false;
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
        true
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
            self.destroy_pooled(l).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pool_holds_one_sandbox_per_gib_of_memory_within_its_disk_share() {
        const GIB: u64 = 1024 * 1024 * 1024;
        let disk = u64::MAX; // not the bound
        assert_eq!(pool_size_for(0, disk, 1024), 2);
        assert_eq!(pool_size_for(3 * 1024 - 1, disk, 1024), 2);
        assert_eq!(pool_size_for(8 * 1024, disk, 1024), 8);
        // This machine's kind: 24 GiB, of which the kernel keeps some (MemTotal ≈ 23.4 GiB).
        assert_eq!(pool_size_for(23_970, disk, 1024), 23);
        assert_eq!(pool_size_for(512 * 1024, disk, 1024), 32);
        assert_eq!(pool_size_for(u64::MAX, disk, 1024), 32);
        // A quarter of the disk budget: 18 GiB promise 4 disks of 1 GiB to the pool, 9 of 512 MiB.
        assert_eq!(pool_size_for(23_970, 18 * GIB, 1024), 4);
        assert_eq!(pool_size_for(23_970, 18 * GIB, 512), 9);
        assert_eq!(pool_size_for(23_970, 144 * GIB, 1024), 23);
        assert_eq!(pool_size_for(23_970, 0, 1024), 2);
        assert_eq!(pool_size_for(23_970, disk, 0), 23);
        assert_eq!(pool_size_for(23_970, disk, u64::MAX), 2);
        let d = tempfile::tempdir().unwrap();
        assert!((2..=32).contains(&default_pool_size(d.path(), 1.0, 1024)));
    }

    #[test]
    fn the_largest_burst_is_the_most_creates_of_any_span() {
        let t0 = Instant::now();
        let mut d = Demand::default();
        assert_eq!(d.largest_burst(t0), 0);
        // 3 creates in the first second, then 5 within ten seconds a minute later.
        for ms in [0, 100, 900] {
            d.note(t0 + Duration::from_millis(ms));
        }
        for s in [60, 61, 65, 69, 69] {
            d.note(t0 + Duration::from_secs(s));
        }
        assert_eq!(d.largest_burst(t0 + Duration::from_secs(70)), 5);
        // A span is under ten seconds: 60 and 70 are not in one.
        d.note(t0 + Duration::from_secs(70));
        assert_eq!(d.largest_burst(t0 + Duration::from_secs(70)), 5);
    }

    #[test]
    fn bursts_age_out_of_the_window() {
        let t0 = Instant::now();
        let mut d = Demand::default();
        for _ in 0..20 {
            d.note(t0);
        }
        assert_eq!(d.largest_burst(t0 + WINDOW), 20);
        assert_eq!(d.largest_burst(t0 + WINDOW + Duration::from_secs(1)), 0);
    }

    #[test]
    fn a_flood_of_creates_is_remembered_up_to_a_bound() {
        let t0 = Instant::now();
        let mut d = Demand::default();
        for _ in 0..REMEMBERED * 3 {
            d.note(t0);
        }
        assert_eq!(d.creates.len(), REMEMBERED);
        assert_eq!(d.largest_burst(t0), REMEMBERED);
    }
}
