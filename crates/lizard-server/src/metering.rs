//! Usage metering: running, paused and hibernated time, CPU time (from the sandbox's cgroup), memory
//! GiB-seconds (sampled) and executions (from the agent's execution log), stored per sandbox and
//! rolled up per project; volume storage in GiB-hours (host disk use of each volume's image, sampled
//! with the sandboxes, see `crate::volumes`), stored per volume.
//!
//! Samples are taken periodically and at every lifecycle transition, and written to the store each
//! time, so a server restart loses at most one interval of memory integration; each sandbox's
//! recent samples also stay in memory ([`Series`], for E2B's `getMetrics`). Not here: billing
//! prices or quotas.

use crate::sandboxes::{Sandbox, Sandboxes};
use crate::store::{now_ms, StoredState, UsageRow, VolumeRow};
use lizard_proto::{SandboxUsage, UsageTotals};
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

/// Take one sample of `sb` and store it.
pub async fn sample(sandboxes: &Sandboxes, sb: &Sandbox) {
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
        match sb.agent.executions(u.agent_log_seq).await {
            Ok(log) => {
                if let Err(e) = store.add_executions(&sb.id, &sb.project, &log.records) {
                    tracing::warn!(sandbox = %sb.id, error = %e, "recording executions");
                }
                for r in &log.records {
                    u.executions += 1;
                    u.execution_wall_ms += r.wall_ms;
                    u.execution_cpu_ms += r.cpu_ms;
                    u.max_execution_peak_rss_bytes =
                        u.max_execution_peak_rss_bytes.max(r.peak_rss_bytes);
                }
                u.executions += log.dropped;
                u.agent_log_seq = log.next;
            }
            Err(e) => tracing::debug!(sandbox = %sb.id, error = %e, "reading the execution log"),
        }
    }
    u.updated_at_ms = now;
    if let Err(e) = store.put_usage(&u) {
        tracing::warn!(sandbox = %sb.id, error = %e, "writing usage");
    }
}

/// Forget the agent's execution-log position: a sandbox relaunched from hibernation has a new
/// agent whose log starts again at 1.
pub fn reset_agent_log(sandboxes: &Sandboxes, id: &str) {
    let store = &sandboxes.store;
    if let Ok(Some(mut u)) = store.get_usage(id) {
        u.agent_log_seq = 0;
        if let Err(e) = store.put_usage(&u) {
            tracing::warn!(sandbox = %id, error = %e, "writing usage");
        }
    }
}

/// Sample every live sandbox every `interval`, forever.
pub async fn run_sampler(sandboxes: Arc<Sandboxes>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for sb in sandboxes.all() {
            sample(&sandboxes, &sb).await;
            // The sandbox's host-side logs are outside its disk quota: keep them bounded.
            let dir = sb.runtime.dir.clone();
            match tokio::task::spawn_blocking(move || crate::host_logs::cap(&dir)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::info!(sandbox = %sb.id, logs = n, "host-side logs cut"),
                Ok(Err(e)) => {
                    tracing::warn!(sandbox = %sb.id, error = %e, "cutting host-side logs")
                }
                Err(_) => {}
            }
        }
        let s = sandboxes.clone();
        let _ = tokio::task::spawn_blocking(move || s.volumes.sample(None)).await;
    }
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
    let metrics: [Metric; 7] = [
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
