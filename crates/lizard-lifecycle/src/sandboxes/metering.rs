//! Usage metering: running, paused and hibernated time, CPU time (from the sandbox's cgroup), memory
//! GiB-seconds (sampled) and executions (from the agent's execution log), stored per sandbox and
//! rolled up per project; volume storage in GiB-hours (host disk use of each volume's image, sampled
//! with the sandboxes, see `crate::volumes`), stored per volume.
//!
//! Samples are taken periodically and at every lifecycle transition, and written to the store each
//! time, so a server restart loses at most one interval of memory integration; each sandbox's
//! recent samples also stay in memory ([`Series`], for E2B's `getMetrics`).
//!
//! The agent is untrusted: CPU and memory come from the cgroup (host-side); the execution log it
//! reports is read under a deadline and a cap (`crate::agent_client`) and checked against what
//! the host knows ([`validate`]) before anything is stored. Each sandbox is sampled in a task of
//! its own ([`run_sampler`]), so one agent can delay only its own sandbox's metering. Not here:
//! billing prices or quotas.

use crate::agent_client::MAX_EXECUTIONS_PER_PAGE;
use crate::sandboxes::{Sandbox, Sandboxes};
use crate::store::{now_ms, StoredState, UsageRow, VolumeRow};
use lizard_proto::{ExecutionLog, SandboxUsage, UsageTotals};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// How many samples a sandbox's [`Series`] keeps (an hour at the default 5 s interval).
pub const SERIES_LEN: usize = 720;

/// One sample of a sandbox's cgroup and disk, as the usage sampler took it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub at_ms: u64,
    /// The cgroup's cumulative CPU time.
    pub cpu_ns: u64,
    pub memory_bytes: u64,
    /// Bytes in use on the sandbox's disk image (its writable layer), if it has one.
    pub disk_used_bytes: Option<u64>,
}

/// A sandbox's recent samples, oldest first, at most [`SERIES_LEN`]; in memory only (a server
/// restart or a relaunch from hibernation starts a new series).
#[derive(Debug, Default)]
pub struct Series(std::sync::Mutex<std::collections::VecDeque<Point>>);

impl Series {
    pub fn push(&self, p: Point) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() == SERIES_LEN {
            q.pop_front();
        }
        q.push_back(p);
    }

    /// The samples taken in `[from_ms, to_ms]`, each but the first of the whole series with the
    /// CPU it used since the one before, as a percentage of `cores` (0–100).
    pub fn window(&self, from_ms: u64, to_ms: u64, cores: f64) -> Vec<(Point, f64)> {
        let q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.iter()
            .zip(q.iter().skip(1))
            .filter(|(_, p)| p.at_ms >= from_ms && p.at_ms <= to_ms)
            .map(|(prev, p)| (*p, cpu_pct(prev, p, cores)))
            .collect()
    }
}

/// CPU used between two samples as a percentage of `cores`, 0–100.
fn cpu_pct(a: &Point, b: &Point, cores: f64) -> f64 {
    let wall_ns = b.at_ms.saturating_sub(a.at_ms) as f64 * 1e6;
    if wall_ns <= 0.0 || cores <= 0.0 {
        return 0.0;
    }
    (b.cpu_ns.saturating_sub(a.cpu_ns) as f64 / wall_ns / cores * 100.0).clamp(0.0, 100.0)
}

/// Bytes in use on `sb`'s disk image (its writable layer), if it has one and it is mounted.
pub fn disk_used_bytes(sb: &Sandbox) -> Option<u64> {
    let mountpoint = sb.runtime.disk.as_ref()?;
    lizard_jail::volume::used_bytes(&sb.runtime.dir.join("disk.img"), mountpoint).ok()
}

/// What the sandbox uses right now: memory bytes, and CPU as a percentage of its CPU limit over a
/// 100 ms window (for E2B's `getMetrics`).
pub async fn instant(sb: &Sandbox) -> (u64, f64) {
    let cg = sb.runtime.cgroup.clone();
    let cores = (sb.limits.cpu_millicores as f64 / 1000.0).max(0.001);
    tokio::task::spawn_blocking(move || {
        let t0 = std::time::Instant::now();
        let a = cg.cpu_usage_ns().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(100));
        let b = cg.cpu_usage_ns().unwrap_or(a);
        let wall = t0.elapsed().as_nanos().max(1) as f64;
        let pct = (b.saturating_sub(a) as f64 / wall / cores * 100.0).min(100.0);
        (cg.memory_bytes().unwrap_or(0), pct)
    })
    .await
    .unwrap_or((0, 0.0))
}

/// Take one sample of `sb` and store it (the agent's execution log read under its usual
/// deadline).
pub async fn sample(sandboxes: &Sandboxes, sb: &Sandbox) {
    sample_within(sandboxes, sb, sb.agent.limits().executions.deadline).await
}

/// Take one sample of `sb` and store it: the cgroup's counters (host-side) always; the agent's
/// execution log only if it answers within `log_deadline` (else that part is skipped: the records
/// are read at the next sample, or lost with a killed sandbox).
pub async fn sample_within(sandboxes: &Sandboxes, sb: &Sandbox, log_deadline: Duration) {
    // One sample of a sandbox at a time (see `Sandbox::sampling`).
    let _one_at_a_time = sb.sampling.lock().await;
    let store = &sandboxes.store;
    let mut u = match store.get_usage(&sb.id) {
        Ok(Some(u)) => u,
        Ok(None) => UsageRow {
            sandbox_id: sb.id.clone(),
            project: sb.project.clone(),
            updated_at_ms: sb.created_at_ms,
            ..Default::default()
        },
        Err(e) => {
            tracing::warn!(sandbox = %sb.id, error = %e, "reading usage");
            return;
        }
    };
    let now = now_ms();
    let since = if u.updated_at_ms == 0 {
        sb.created_at_ms
    } else {
        u.updated_at_ms
    };
    let dt_ms = now.saturating_sub(since);
    match sb.state() {
        StoredState::Running => u.running_ms += dt_ms,
        StoredState::Paused => u.paused_ms += dt_ms,
        StoredState::Hibernated => u.hibernated_ms += dt_ms,
        StoredState::Killed => {}
    }
    // A hibernated sandbox has no cgroup and holds no memory.
    if sb.state() != StoredState::Hibernated {
        let cg = sb.runtime.cgroup.clone();
        let (cpu_ns, mem) =
            tokio::task::spawn_blocking(move || (cg.cpu_usage_ns(), cg.memory_bytes()))
                .await
                .unwrap_or((Ok(0), Ok(0)));
        if let (Ok(cpu_ns), Ok(memory_bytes)) = (&cpu_ns, &mem) {
            sb.metrics.push(Point {
                at_ms: now,
                cpu_ns: *cpu_ns,
                memory_bytes: *memory_bytes,
                disk_used_bytes: disk_used_bytes(sb),
            });
        }
        if let Ok(ns) = cpu_ns {
            // The cgroup counter is cumulative for the cgroup's life (a sandbox resumed from
            // hibernation has a new one, counted from `cpu_base_ms`); never let it go backwards.
            u.cpu_ms = u.cpu_ms.max(sb.runtime.cpu_base_ms + ns / 1_000_000);
        }
        if let Ok(bytes) = mem {
            u.memory_gib_seconds += bytes as f64 / GIB * (dt_ms as f64 / 1000.0);
        }
    }
    if sb.state() == StoredState::Running {
        match sb
            .agent
            .executions_within(u.agent_log_seq, log_deadline)
            .await
        {
            Ok(log) => {
                // Read once the page is in: every run it reports started with a request counted
                // by now and ended by now. (Read before, the runs that ended meanwhile would be
                // dropped as impossible: honest cells lost from the usage.)
                let bounds = Bounds::of(sb, now_ms());
                let any = !log.records.is_empty();
                record_executions(store, sb, &mut u, log, &bounds);
                if any && sandboxes.cfg.executions_retention.max_events.is_some() {
                    crate::audit::prune_executions(
                        &sandboxes.store,
                        sandboxes.cfg.executions_retention,
                        false,
                    );
                }
            }
            Err(e) => tracing::debug!(sandbox = %sb.id, error = %e, "reading the execution log"),
        }
    }
    // The mirror's counters of this life of the sandbox's processes, as far as not yet counted.
    let (bytes, requests) = sb.mirror_delta();
    u.mirror_bytes = u.mirror_bytes.saturating_add(bytes);
    u.mirror_requests = u.mirror_requests.saturating_add(requests);
    let (out, inn, refused) = sb.egress_delta();
    u.egress_bytes_out = u.egress_bytes_out.saturating_add(out);
    u.egress_bytes_in = u.egress_bytes_in.saturating_add(inn);
    u.egress_refused = u.egress_refused.saturating_add(refused);
    u.updated_at_ms = now;
    if let Err(e) = store.put_usage(&u) {
        tracing::warn!(sandbox = %sb.id, error = %e, "writing usage");
    }
}

/// What a true execution record of a sandbox can say (the agent is untrusted: what it reports is
/// checked against what the host knows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// The sandbox was created then: no run finished before, none ran longer than since.
    pub created_at_ms: u64,
    /// Now: no run finished later.
    pub now_ms: u64,
    /// The sandbox's memory limit: no kernel's peak RSS is above it.
    pub memory_bytes: u64,
    /// The sandbox's CPU limit in cores: a run's CPU time is at most this times its wall time.
    pub cores: f64,
    /// Requests the server forwarded to the agent not yet matched by a reported run: every run
    /// starts with one, so no page may report more (records and `dropped` together).
    pub unmatched_requests: u64,
}

impl Bounds {
    pub fn of(sb: &Sandbox, now_ms: u64) -> Bounds {
        Bounds {
            created_at_ms: sb.created_at_ms,
            now_ms,
            memory_bytes: sb.limits.memory_mb.saturating_mul(1024 * 1024),
            cores: (sb.limits.cpu_millicores as f64 / 1000.0).max(0.001),
            unmatched_requests: sb.agent.unmatched_requests(),
        }
    }
}

/// Slack on the time bounds (clocks read at slightly different moments, CPU accounting ticks).
const SLACK_MS: u64 = 2_000;
/// Longest context id kept (the agent's are 20-odd characters).
const MAX_CONTEXT_ID: usize = 64;

/// A page of the execution log made believable: at most [`MAX_EXECUTIONS_PER_PAGE`] records and
/// no more than [`Bounds::unmatched_requests`] (records and `dropped` together), their `seq`
/// strictly increasing after `after` and not past `next` (the others are dropped), `next` never
/// behind `after` (else the whole page is refused), context ids short and plain, times, CPU and
/// memory clamped into [`Bounds`], `dropped` at most what `next` leaves room for (and at most one
/// page). Returns the page and how many records were dropped or clamped.
pub fn validate(log: ExecutionLog, after: u64, b: &Bounds) -> (ExecutionLog, usize) {
    if log.next < after {
        let n = log.records.len().max(1);
        return (
            ExecutionLog {
                next: after,
                records: Vec::new(),
                dropped: 0,
            },
            n,
        );
    }
    let most = (MAX_EXECUTIONS_PER_PAGE as u64).min(b.unmatched_requests) as usize;
    let mut fixed = log.records.len().saturating_sub(most);
    let mut last = after;
    let mut records = Vec::with_capacity(log.records.len().min(MAX_EXECUTIONS_PER_PAGE));
    for mut r in log.records.into_iter().take(most) {
        let id_ok = !r.context_id.0.is_empty()
            && r.context_id.0.len() <= MAX_CONTEXT_ID
            && r.context_id
                .0
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
        if r.seq <= last || r.seq > log.next || !id_ok {
            fixed += 1;
            continue;
        }
        last = r.seq;
        let orig = (r.finished_at_ms, r.wall_ms, r.cpu_ms, r.peak_rss_bytes);
        r.finished_at_ms = r
            .finished_at_ms
            .clamp(b.created_at_ms, b.now_ms.max(b.created_at_ms));
        r.wall_ms = r
            .wall_ms
            .min(r.finished_at_ms.saturating_sub(b.created_at_ms) + SLACK_MS);
        let max_cpu = (r.wall_ms as f64 * b.cores) as u64 + SLACK_MS;
        r.cpu_ms = r.cpu_ms.min(max_cpu);
        r.peak_rss_bytes = r.peak_rss_bytes.min(b.memory_bytes);
        if orig != (r.finished_at_ms, r.wall_ms, r.cpu_ms, r.peak_rss_bytes) {
            fixed += 1;
        }
        records.push(r);
    }
    let room = log
        .next
        .saturating_sub(after)
        .saturating_sub(records.len() as u64);
    let dropped = log
        .dropped
        .min(room)
        .min(MAX_EXECUTIONS_PER_PAGE as u64)
        .min(b.unmatched_requests.saturating_sub(records.len() as u64));
    if dropped != log.dropped {
        fixed += 1;
    }
    (
        ExecutionLog {
            next: log.next,
            records,
            dropped,
        },
        fixed,
    )
}

/// Validate a page of `sb`'s execution log, store its records and add them to `u`.
pub fn record_executions(
    store: &crate::store::Store,
    sb: &Sandbox,
    u: &mut UsageRow,
    log: ExecutionLog,
    b: &Bounds,
) {
    let runs = record_page(store, &sb.id, &sb.project, u, log, b);
    sb.agent.match_runs(runs);
}

/// Validate and store one page; returns how many runs it counted (records and dropped ones).
fn record_page(
    store: &crate::store::Store,
    id: &str,
    project: &str,
    u: &mut UsageRow,
    log: ExecutionLog,
    b: &Bounds,
) -> u64 {
    let (log, fixed) = validate(log, u.agent_log_seq, b);
    if fixed > 0 {
        tracing::warn!(sandbox = %id, records = fixed,
            "the agent reported impossible executions (dropped or clamped)");
    }
    if let Err(e) = store.add_executions(id, project, &log.records) {
        tracing::warn!(sandbox = %id, error = %e, "recording executions");
    }
    for r in &log.records {
        u.executions = u.executions.saturating_add(1);
        u.execution_wall_ms = u.execution_wall_ms.saturating_add(r.wall_ms);
        u.execution_cpu_ms = u.execution_cpu_ms.saturating_add(r.cpu_ms);
        u.max_execution_peak_rss_bytes = u.max_execution_peak_rss_bytes.max(r.peak_rss_bytes);
    }
    u.executions = u.executions.saturating_add(log.dropped);
    u.agent_log_seq = log.next;
    log.records.len() as u64 + log.dropped
}

/// Forget the agent's execution-log position: a sandbox relaunched from hibernation has a new
/// agent whose log starts again at 1. Between samples (see `Sandbox::sampling`): a sample
/// overlapping it would write the old position back.
pub async fn reset_agent_log(sandboxes: &Sandboxes, sb: &Sandbox) {
    let _one_at_a_time = sb.sampling.lock().await;
    let (store, id) = (&sandboxes.store, &sb.id);
    if let Ok(Some(mut u)) = store.get_usage(id) {
        u.agent_log_seq = 0;
        if let Err(e) = store.put_usage(&u) {
            tracing::warn!(sandbox = %id, error = %e, "writing usage");
        }
    }
}

/// How many sandboxes the sampler samples at once.
pub const SAMPLER_CONCURRENCY: usize = 32;

/// Sample every live sandbox every `interval`, forever. Each sandbox's sample is a task of its
/// own (at most [`SAMPLER_CONCURRENCY`] at once, each bounded by the agent call's deadline; a
/// sandbox whose last sample is still running is skipped this round), so an agent that is slow or
/// hung delays only its own sandbox's metering. Host-side logs are capped and volumes sampled in
/// the tick itself, never behind an agent.
pub async fn run_sampler(sandboxes: Arc<Sandboxes>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let permits = Arc::new(tokio::sync::Semaphore::new(SAMPLER_CONCURRENCY));
    let in_flight: Arc<std::sync::Mutex<HashSet<String>>> = Default::default();
    loop {
        tick.tick().await;
        for sb in &sandboxes.all() {
            if !lock(&in_flight).insert(sb.id.clone()) {
                continue;
            }
            let (s, sb, permits, in_flight) = (
                sandboxes.clone(),
                sb.clone(),
                permits.clone(),
                in_flight.clone(),
            );
            tokio::spawn(async move {
                if let Ok(_permit) = permits.acquire().await {
                    sample(&s, &sb).await;
                }
                lock(&in_flight).remove(&sb.id);
            });
        }
        let s = sandboxes.clone();
        let _ = tokio::task::spawn_blocking(move || s.volumes.sample(None)).await;
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl From<&UsageRow> for SandboxUsage {
    fn from(u: &UsageRow) -> Self {
        SandboxUsage {
            sandbox_id: u.sandbox_id.clone(),
            running_seconds: u.running_ms as f64 / 1000.0,
            paused_seconds: u.paused_ms as f64 / 1000.0,
            hibernated_seconds: u.hibernated_ms as f64 / 1000.0,
            cpu_seconds: u.cpu_ms as f64 / 1000.0,
            memory_gib_seconds: u.memory_gib_seconds,
            executions: u.executions,
            execution_wall_seconds: u.execution_wall_ms as f64 / 1000.0,
            execution_cpu_seconds: u.execution_cpu_ms as f64 / 1000.0,
            max_execution_peak_rss_bytes: u.max_execution_peak_rss_bytes,
            mirror_bytes: u.mirror_bytes,
            mirror_requests: u.mirror_requests,
            egress_bytes_out: u.egress_bytes_out,
            egress_bytes_in: u.egress_bytes_in,
            egress_refused: u.egress_refused,
        }
    }
}

pub fn totals(rows: &[UsageRow]) -> UsageTotals {
    let mut t = UsageTotals::default();
    for u in rows {
        t.sandboxes += 1;
        t.running_seconds += u.running_ms as f64 / 1000.0;
        t.paused_seconds += u.paused_ms as f64 / 1000.0;
        t.hibernated_seconds += u.hibernated_ms as f64 / 1000.0;
        t.cpu_seconds += u.cpu_ms as f64 / 1000.0;
        t.memory_gib_seconds += u.memory_gib_seconds;
        t.executions += u.executions;
        t.execution_wall_seconds += u.execution_wall_ms as f64 / 1000.0;
        t.execution_cpu_seconds += u.execution_cpu_ms as f64 / 1000.0;
        t.mirror_bytes += u.mirror_bytes;
        t.mirror_requests += u.mirror_requests;
        t.egress_bytes_out += u.egress_bytes_out;
        t.egress_bytes_in += u.egress_bytes_in;
        t.egress_refused += u.egress_refused;
    }
    t
}

/// Prometheus text exposition of per-project counters, the number of live sandboxes and volume
/// storage (`volumes`: every volume row, deleted ones included).
pub fn prometheus(
    rows: &[UsageRow],
    live: &[(String, StoredState)],
    volumes: &[VolumeRow],
) -> String {
    use std::collections::BTreeMap;
    let mut per: BTreeMap<&str, Vec<UsageRow>> = BTreeMap::new();
    for r in rows {
        per.entry(r.project.as_str()).or_default().push(r.clone());
    }
    let mut out = String::new();
    type Metric = (&'static str, &'static str, fn(&UsageTotals) -> f64);
    let metrics: [Metric; 12] = [
        (
            "lizard_sandbox_running_seconds_total",
            "Seconds sandboxes spent running.",
            |t| t.running_seconds,
        ),
        (
            "lizard_sandbox_paused_seconds_total",
            "Seconds sandboxes spent paused.",
            |t| t.paused_seconds,
        ),
        (
            "lizard_sandbox_hibernated_seconds_total",
            "Seconds sandboxes spent hibernated (on disk, no processes).",
            |t| t.hibernated_seconds,
        ),
        (
            "lizard_sandbox_cpu_seconds_total",
            "CPU seconds used by sandboxes (cgroup accounting).",
            |t| t.cpu_seconds,
        ),
        (
            "lizard_sandbox_memory_gib_seconds_total",
            "Memory use integrated over time, GiB-seconds.",
            |t| t.memory_gib_seconds,
        ),
        (
            "lizard_executions_total",
            "Code executions finished.",
            |t| t.executions as f64,
        ),
        (
            "lizard_sandboxes_created_total",
            "Sandboxes created.",
            |t| t.sandboxes as f64,
        ),
        (
            "lizard_sandbox_mirror_bytes_total",
            "Body bytes the package registries' mirror sent to sandboxes.",
            |t| t.mirror_bytes as f64,
        ),
        (
            "lizard_sandbox_mirror_requests_total",
            "Requests of sandboxes to the package registries' mirror.",
            |t| t.mirror_requests as f64,
        ),
        (
            "lizard_sandbox_egress_bytes_out_total",
            "Bytes sandboxes' egress carried out of them.",
            |t| t.egress_bytes_out as f64,
        ),
        (
            "lizard_sandbox_egress_bytes_in_total",
            "Bytes sandboxes' egress carried into them.",
            |t| t.egress_bytes_in as f64,
        ),
        (
            "lizard_sandbox_egress_refused_total",
            "Connections and DNS queries of sandboxes refused by their egress rules.",
            |t| t.egress_refused as f64,
        ),
    ];
    for (name, help, get) in metrics {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (project, rows) in &per {
            let _ = writeln!(
                out,
                "{name}{{project=\"{}\"}} {}",
                escape(project),
                get(&totals(rows))
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP lizard_sandboxes_live Sandboxes currently running, paused or hibernated."
    );
    let _ = writeln!(out, "# TYPE lizard_sandboxes_live gauge");
    let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (project, state) in live {
        let s = match state {
            StoredState::Running => "running",
            StoredState::Paused => "paused",
            StoredState::Hibernated => "hibernated",
            StoredState::Killed => continue,
        };
        *counts.entry((project.as_str(), s)).or_default() += 1;
    }
    for ((project, state), n) in counts {
        let _ = writeln!(
            out,
            "lizard_sandboxes_live{{project=\"{}\",state=\"{state}\"}} {n}",
            escape(project)
        );
    }
    // (GiB-hours, live volumes, bytes used by live volumes) per project.
    let mut vols: BTreeMap<&str, (f64, u64, u64)> = BTreeMap::new();
    for v in volumes {
        let e = vols.entry(v.project.as_str()).or_default();
        e.0 += v.gib_hours;
        if v.deleted_at_ms.is_none() {
            e.1 += 1;
            e.2 += v.used_bytes;
        }
    }
    type VolMetric = (
        &'static str,
        &'static str,
        &'static str,
        fn(&(f64, u64, u64)) -> f64,
    );
    let vol_metrics: [VolMetric; 3] = [
        (
            "lizard_volume_gib_hours_total",
            "counter",
            "Volume storage (host disk use) integrated over time, GiB-hours.",
            |t| t.0,
        ),
        ("lizard_volumes", "gauge", "Volumes that exist.", |t| {
            t.1 as f64
        }),
        (
            "lizard_volume_used_bytes",
            "gauge",
            "Host disk used by existing volumes at the last sample.",
            |t| t.2 as f64,
        ),
    ];
    for (name, kind, help, get) in vol_metrics {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (project, t) in &vols {
            let _ = writeln!(out, "{name}{{project=\"{}\"}} {}", escape(project), get(t));
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_keeps_the_newest_and_computes_cpu_between_samples() {
        let s = Series::default();
        let p = |i: u64, cpu_ms: u64| Point {
            at_ms: i * 1000,
            cpu_ns: cpu_ms * 1_000_000,
            memory_bytes: i,
            disk_used_bytes: None,
        };
        for i in 0..(SERIES_LEN as u64 + 5) {
            // Half a core busy every second, then a full core in the last second.
            s.push(p(i, i * 500));
        }
        s.push(p(
            SERIES_LEN as u64 + 5,
            (SERIES_LEN as u64 + 4) * 500 + 1000,
        ));
        let all = s.window(0, u64::MAX, 1.0);
        assert_eq!(
            all.len(),
            SERIES_LEN - 1,
            "the first kept sample has no predecessor"
        );
        assert_eq!(all[0].0.memory_bytes, 7, "the oldest were dropped");
        assert!((all[0].1 - 50.0).abs() < 1e-9, "{}", all[0].1);
        assert!((all.last().unwrap().1 - 100.0).abs() < 1e-9);
        let half_of_two_cores = s.window(0, u64::MAX, 2.0);
        assert!((half_of_two_cores[0].1 - 25.0).abs() < 1e-9);
        let some = s.window(100_000, 102_000, 1.0);
        assert_eq!(
            some.iter().map(|(p, _)| p.at_ms).collect::<Vec<_>>(),
            vec![100_000, 101_000, 102_000]
        );
    }

    fn rec(seq: u64, finished_at_ms: u64) -> lizard_proto::ExecutionRecord {
        lizard_proto::ExecutionRecord {
            seq,
            context_id: lizard_proto::ContextId("ctx_abc".into()),
            language: lizard_proto::Language::Python,
            status: lizard_proto::ExecutionStatus::Ok,
            wall_ms: 10,
            cpu_ms: 5,
            peak_rss_bytes: 1 << 20,
            finished_at_ms,
        }
    }

    const B: Bounds = Bounds {
        created_at_ms: 1_000_000,
        now_ms: 1_060_000,
        memory_bytes: 512 << 20,
        cores: 1.0,
        unmatched_requests: 1_000_000,
    };

    #[test]
    fn honest_pages_pass_unchanged() {
        let log = ExecutionLog {
            next: 12,
            records: vec![rec(11, 1_050_000), rec(12, 1_059_000)],
            dropped: 0,
        };
        assert_eq!(validate(log.clone(), 10, &B), (log, 0));
        let log = ExecutionLog {
            next: 30,
            records: vec![rec(30, 1_059_000)],
            dropped: 19,
        };
        assert_eq!(validate(log.clone(), 10, &B), (log, 0));
    }

    #[test]
    fn impossible_records_are_dropped_or_clamped() {
        let mut huge = rec(5, u64::MAX);
        huge.wall_ms = u64::MAX;
        huge.cpu_ms = u64::MAX;
        huge.peak_rss_bytes = u64::MAX;
        let mut bad_id = rec(6, 1_050_000);
        bad_id.context_id = lizard_proto::ContextId("x".repeat(10_000));
        let log = ExecutionLog {
            next: 8,
            records: vec![
                rec(1, 1_050_000), // not after `after`
                huge,
                rec(5, 1_050_000), // seq again
                bad_id,
                rec(4, 1_050_000), // going back
                rec(7, 0),
                rec(99, 1_050_000), // past `next`
            ],
            dropped: u64::MAX,
        };
        let (v, fixed) = validate(log, 2, &B);
        assert_eq!(v.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 7]);
        let h = &v.records[0];
        assert_eq!(h.finished_at_ms, B.now_ms);
        assert_eq!(h.wall_ms, 60_000 + SLACK_MS);
        assert_eq!(h.cpu_ms, 60_000 + 2 * SLACK_MS);
        assert_eq!(h.peak_rss_bytes, B.memory_bytes);
        assert_eq!(v.records[1].finished_at_ms, B.created_at_ms);
        assert_eq!(v.dropped, 4, "next - after - records");
        assert_eq!(fixed, 8);
        // A `next` that goes backwards: the page is refused, the position kept.
        let back = ExecutionLog {
            next: 3,
            records: vec![rec(4, 1_050_000)],
            dropped: 7,
        };
        assert_eq!(
            validate(back, 10, &B).0,
            ExecutionLog {
                next: 10,
                records: vec![],
                dropped: 0
            }
        );
    }

    #[tokio::test]
    async fn an_agent_inventing_records_stores_only_a_bounded_validated_page() {
        lizard_test_support::needs_root!();
        use crate::agent_client::tests::{fake_agent, Mode};
        use crate::agent_client::{AgentClient, AgentLimits, CallLimit};
        let mut records: Vec<_> = (1..=25_000).map(|i| rec(i, u64::MAX)).collect();
        for r in &mut records {
            r.wall_ms = u64::MAX / 2;
            r.peak_rss_bytes = u64::MAX;
        }
        records.push(rec(3, 1_050_000));
        let log = ExecutionLog {
            next: u64::MAX,
            records,
            dropped: u64::MAX,
        };
        let agent = fake_agent(Mode::Json(serde_json::to_vec(&log).unwrap()));
        // A cap large enough for the whole lie: validation, not the cap, bounds what is stored.
        let big = CallLimit {
            deadline: Duration::from_secs(30),
            max_body_bytes: 64 << 20,
        };
        let client = AgentClient::with_limits(
            agent.socket(),
            std::process::id() as i32,
            AgentLimits {
                executions: big,
                ..Default::default()
            },
        );
        let page = client.executions(0).await.unwrap();
        let d = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&d.path().join("db")).unwrap();
        let mut u = UsageRow::default();
        assert_eq!(
            record_page(&store, "sbx", "p", &mut u, page, &B),
            2 * MAX_EXECUTIONS_PER_PAGE as u64
        );
        let rows = store
            .executions("p", None, 0, i64::MAX as u64, 100_000)
            .unwrap();
        assert_eq!(rows.len(), MAX_EXECUTIONS_PER_PAGE);
        assert!(rows.iter().all(|r| r.finished_at_ms == B.now_ms
            && r.wall_ms <= 60_000 + SLACK_MS
            && r.peak_rss_bytes <= B.memory_bytes));
        assert_eq!(u.executions, 2 * MAX_EXECUTIONS_PER_PAGE as u64);
        assert_eq!(u.agent_log_seq, u64::MAX);
        // The next page starts after `u64::MAX`: nothing more can be claimed.
        let more = ExecutionLog {
            next: u64::MAX,
            records: vec![rec(u64::MAX, 1_050_000)],
            dropped: 5,
        };
        assert_eq!(record_page(&store, "sbx", "p", &mut u, more, &B), 0);
        assert_eq!(u.executions, 2 * MAX_EXECUTIONS_PER_PAGE as u64);
    }

    #[test]
    fn no_more_runs_than_requests_were_forwarded() {
        let few = Bounds {
            unmatched_requests: 3,
            ..B
        };
        let log = ExecutionLog {
            next: 1_000,
            records: (1..=5).map(|i| rec(i, 1_050_000)).collect(),
            dropped: 900,
        };
        let (v, fixed) = validate(log, 0, &few);
        assert_eq!(v.records.len(), 3);
        assert_eq!(v.dropped, 0);
        assert_eq!(fixed, 3, "two records and `dropped`");
        let log = ExecutionLog {
            next: 1_000,
            records: vec![rec(999, 1_050_000)],
            dropped: 900,
        };
        assert_eq!(validate(log, 0, &few).0.dropped, 2);
    }

    #[test]
    fn prometheus_text_shape() {
        let rows = vec![UsageRow {
            sandbox_id: "a".into(),
            project: "p\"q".into(),
            cpu_ms: 1500,
            executions: 3,
            ..Default::default()
        }];
        let vols = vec![
            VolumeRow {
                project: "p\"q".into(),
                gib_hours: 2.5,
                used_bytes: 100,
                ..Default::default()
            },
            VolumeRow {
                project: "p\"q".into(),
                gib_hours: 0.5,
                used_bytes: 7,
                deleted_at_ms: Some(1),
                ..Default::default()
            },
        ];
        let text = prometheus(&rows, &[("p\"q".into(), StoredState::Running)], &vols);
        assert!(text.contains("lizard_volume_gib_hours_total{project=\"p\\\"q\"} 3"));
        assert!(text.contains("lizard_volumes{project=\"p\\\"q\"} 1"));
        assert!(text.contains("lizard_volume_used_bytes{project=\"p\\\"q\"} 100"));
        assert!(text.contains("lizard_sandbox_cpu_seconds_total{project=\"p\\\"q\"} 1.5"));
        assert!(text.contains("lizard_executions_total{project=\"p\\\"q\"} 3"));
        assert!(text.contains("lizard_sandboxes_live{project=\"p\\\"q\",state=\"running\"} 1"));
    }
}
