//! The audit log's `secret.use` events: which secret the egress relay added to a request, to which
//! host, from which sandbox, during which executions — written off the relay's path, coalesced and
//! bounded.
//!
//! The relay tells of each injected request ([`SecretUses::record`]); that call only updates an
//! in-memory table (a lock, a hash-map entry) and never touches the store, so a sandbox that sends
//! thousands of requests to its allowed host cannot turn each one into a synchronous SQLite write
//! on the runtime's threads, nor slow another sandbox's requests. [`SecretUses::run`] writes the
//! table once a second: one audit event per (sandbox, secrets, host, method, path) with how many
//! requests it stands for. The table holds at most [`MAX_PENDING`] distinct rows; uses beyond that
//! are still counted, per sandbox, in one "not itemized" event, so no use goes unrecorded.
//!
//! Executions: the server registers each execute request it forwards to a sandbox's agent
//! ([`Executions::start`], ended when the answer's stream ends) with the key that sent it. A use
//! names the executions in flight in its sandbox at that moment (how many, the keys that started
//! them, the earliest start). That is the server's own knowledge, not the sandbox's: code in a
//! sandbox can make a request outside any execution (a background process), which then reads
//! "no execution in flight".

use crate::store::{now_ms, Store};
use lizard_egress::inject::InjectUse;
use lizard_proto::AuditEvent;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Distinct pending rows at the most between two writes.
pub const MAX_PENDING: usize = 1024;
/// Key prefixes named per row at the most.
const MAX_KEYS: usize = 4;
/// Executions remembered per sandbox at the most (more in flight are counted, not listed).
const MAX_TRACKED: usize = 64;

/// Execute requests in flight, per sandbox.
#[derive(Default)]
pub struct Executions {
    running: Mutex<HashMap<String, Tracked>>,
    serial: AtomicU64,
}

#[derive(Default)]
struct Tracked {
    /// serial → (key prefix, started at ms).
    listed: HashMap<u64, (String, u64)>,
    /// In flight beyond `listed` (not remembered one by one).
    more: u64,
}

/// What a use learns of its sandbox's executions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InFlight {
    pub count: u64,
    pub keys: BTreeSet<String>,
    pub earliest_ms: Option<u64>,
}

/// Ends its execution's registration when dropped.
pub struct ExecutionGuard {
    of: Arc<Executions>,
    sandbox: String,
    serial: Option<u64>,
}

impl Executions {
    /// Register an execute request sent by `key` (a key's prefix, or who else sent it) to
    /// `sandbox`; it is in flight until the guard is dropped.
    pub fn start(self: &Arc<Self>, sandbox: &str, key: &str) -> ExecutionGuard {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let mut m = lock(&self.running);
        let t = m.entry(sandbox.to_string()).or_default();
        let serial = if t.listed.len() < MAX_TRACKED {
            t.listed.insert(serial, (key.to_string(), now_ms()));
            Some(serial)
        } else {
            t.more += 1;
            None
        };
        ExecutionGuard {
            of: self.clone(),
            sandbox: sandbox.to_string(),
            serial,
        }
    }

    /// The executions in flight in `sandbox` now.
    pub fn in_flight(&self, sandbox: &str) -> InFlight {
        let m = lock(&self.running);
        let Some(t) = m.get(sandbox) else {
            return InFlight::default();
        };
        InFlight {
            count: t.listed.len() as u64 + t.more,
            keys: t
                .listed
                .values()
                .map(|(k, _)| k.clone())
                .take(MAX_KEYS)
                .collect(),
            earliest_ms: t.listed.values().map(|(_, at)| *at).min(),
        }
    }
}

impl Drop for ExecutionGuard {
    fn drop(&mut self) {
        let mut m = lock(&self.of.running);
        if let Some(t) = m.get_mut(&self.sandbox) {
            match self.serial {
                Some(s) => {
                    t.listed.remove(&s);
                }
                None => t.more = t.more.saturating_sub(1),
            }
            if t.listed.is_empty() && t.more == 0 {
                m.remove(&self.sandbox);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UseKey {
    sandbox: String,
    project: String,
    secrets: Vec<String>,
    host: String,
    method: String,
    path: String,
}

#[derive(Debug, Default)]
struct UseRow {
    first_ms: u64,
    uses: u64,
    /// The most executions seen in flight at one use, the keys that started them, the earliest.
    executions: u64,
    keys: BTreeSet<String>,
    earliest_ms: Option<u64>,
}

#[derive(Default)]
struct Pending {
    rows: HashMap<UseKey, UseRow>,
    /// Uses that found the table full: (sandbox, project) → count.
    not_itemized: HashMap<(String, String), u64>,
}

/// The `secret.use` events waiting to be written (see the module docs).
pub struct SecretUses {
    pending: Mutex<Pending>,
    pub executions: Arc<Executions>,
}

impl Default for SecretUses {
    fn default() -> Self {
        SecretUses {
            pending: Mutex::new(Pending::default()),
            executions: Arc::new(Executions::default()),
        }
    }
}

impl SecretUses {
    /// Note one injected request of `sandbox` (of `project`). Never blocks on I/O.
    pub fn record(&self, sandbox: &str, project: &str, u: &InjectUse) {
        let now = now_ms();
        let flight = self.executions.in_flight(sandbox);
        let key = UseKey {
            sandbox: sandbox.to_string(),
            project: project.to_string(),
            secrets: u.secrets.clone(),
            host: u.host.clone(),
            method: u.method.clone(),
            path: u.path.clone(),
        };
        let mut p = lock(&self.pending);
        let full = p.rows.len() >= MAX_PENDING;
        let row = match p.rows.get_mut(&key) {
            Some(r) => r,
            None if full => {
                *p.not_itemized
                    .entry((sandbox.to_string(), project.to_string()))
                    .or_default() += 1;
                return;
            }
            None => p.rows.entry(key).or_insert_with(|| UseRow {
                first_ms: now,
                ..Default::default()
            }),
        };
        row.uses += 1;
        row.executions = row.executions.max(flight.count);
        for k in flight.keys {
            if row.keys.len() < MAX_KEYS {
                row.keys.insert(k);
            }
        }
        row.earliest_ms = match (row.earliest_ms, flight.earliest_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The events for what is pending now (the table emptied).
    fn take(&self) -> Vec<AuditEvent> {
        let p = std::mem::take(&mut *lock(&self.pending));
        let mut out: Vec<AuditEvent> = p
            .rows
            .into_iter()
            .map(|(k, r)| {
                let times = if r.uses > 1 {
                    format!(" x{}", r.uses)
                } else {
                    String::new()
                };
                let during = match r.executions {
                    0 => "no execution in flight".to_string(),
                    n => format!(
                        "during {n} execution(s) since {} by {}",
                        r.earliest_ms.unwrap_or(r.first_ms),
                        r.keys.iter().cloned().collect::<Vec<_>>().join(",")
                    ),
                };
                event(
                    &k.sandbox,
                    &k.project,
                    r.first_ms,
                    r.keys.iter().next().cloned(),
                    format!(
                        "{} -> {} {} {}{times} (sandbox {}; {during})",
                        k.secrets.join(","),
                        k.host,
                        k.method,
                        k.path,
                        k.sandbox
                    ),
                )
            })
            .collect();
        for ((sandbox, project), n) in p.not_itemized {
            out.push(event(
                &sandbox,
                &project,
                now_ms(),
                None,
                format!("{n} more secret use(s), not itemized (sandbox {sandbox})"),
            ));
        }
        out.sort_by_key(|e| e.at_ms);
        out
    }

    /// Write what is pending now to `store` (and as `tracing` events), applying `retention`.
    pub fn flush(&self, store: &Store, retention: crate::audit::Retention) {
        let events = self.take();
        if events.is_empty() {
            return;
        }
        for e in &events {
            if let Err(err) = store.add_audit(e) {
                tracing::warn!(error = %lizard_jail::error_chain(&err), "recording a secret's use");
            }
            tracing::info!(target: "audit", sandbox = %e.client,
                project = e.project.as_deref().unwrap_or("-"),
                object = e.object.as_deref().unwrap_or("-"), "secret.use");
        }
        if retention.max_events.is_some() {
            crate::audit::prune(store, retention, false);
        }
    }

    /// Write the pending events every `every`, off the runtime's threads. Runs forever.
    pub async fn run(self: Arc<Self>, store: Arc<Store>, retention: crate::audit::Retention) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (me, store) = (self.clone(), store.clone());
            let _ = tokio::task::spawn_blocking(move || me.flush(&store, retention)).await;
        }
    }
}

fn event(
    sandbox: &str,
    project: &str,
    at_ms: u64,
    key_prefix: Option<String>,
    object: String,
) -> AuditEvent {
    AuditEvent {
        id: 0,
        at_ms,
        actor: "sandbox".into(),
        project: Some(project.to_string()),
        key_prefix,
        action: "secret.use".into(),
        object: Some(crate::audit::cut(&object)),
        status: 0,
        client: sandbox.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn use_of(path: &str) -> InjectUse {
        InjectUse {
            host: "api.example.com".into(),
            method: "GET".into(),
            path: path.into(),
            secrets: vec!["example".into()],
        }
    }

    #[test]
    fn repeated_uses_are_one_event_with_their_count_and_executions() {
        let u = SecretUses::default();
        let g = u.executions.start("sb1", "lz_ab12c");
        for _ in 0..1000 {
            u.record("sb1", "p", &use_of("/v1/x"));
        }
        drop(g);
        u.record("sb1", "p", &use_of("/v1/y"));
        let mut ev = u.take();
        assert_eq!(ev.len(), 2, "{ev:?}");
        ev.sort_by_key(|e| e.object.clone());
        let x = ev[0].object.as_deref().unwrap();
        assert!(x.starts_with("example -> api.example.com GET /v1/x x1000 (sandbox sb1; during 1 execution(s) since "), "{x}");
        assert!(x.ends_with("by lz_ab12c)"), "{x}");
        assert_eq!(ev[0].key_prefix.as_deref(), Some("lz_ab12c"));
        assert_eq!(ev[0].action, "secret.use");
        assert_eq!(ev[0].client, "sb1");
        let y = ev[1].object.as_deref().unwrap();
        assert!(
            y.ends_with("/v1/y (sandbox sb1; no execution in flight)"),
            "{y}"
        );
        assert!(u.take().is_empty(), "the table is emptied");
        assert_eq!(u.executions.in_flight("sb1"), InFlight::default());
    }

    #[test]
    fn a_flood_of_distinct_paths_stays_bounded_and_counted() {
        let u = SecretUses::default();
        let n = MAX_PENDING as u64 + 5000;
        for i in 0..n {
            u.record("sb1", "p", &use_of(&format!("/{i}")));
        }
        assert_eq!(lock(&u.pending).rows.len(), MAX_PENDING);
        let ev = u.take();
        assert_eq!(ev.len(), MAX_PENDING + 1);
        let last = ev
            .iter()
            .find(|e| e.object.as_deref().unwrap().contains("not itemized"));
        assert!(
            last.unwrap()
                .object
                .as_deref()
                .unwrap()
                .starts_with("5000 more secret use(s)"),
            "{last:?}"
        );
    }

    #[test]
    fn executions_are_tracked_per_sandbox_and_bounded() {
        let e = Arc::new(Executions::default());
        let guards: Vec<_> = (0..MAX_TRACKED + 3)
            .map(|i| e.start("sb1", &format!("lz_{}", i % 6)))
            .collect();
        let other = e.start("sb2", "sandbox-token");
        let f = e.in_flight("sb1");
        assert_eq!(f.count, MAX_TRACKED as u64 + 3);
        assert!(f.keys.len() <= MAX_KEYS && !f.keys.is_empty(), "{f:?}");
        assert!(f.earliest_ms.is_some());
        assert_eq!(e.in_flight("sb2").count, 1);
        drop(guards);
        assert_eq!(e.in_flight("sb1"), InFlight::default());
        assert!(
            !lock(&e.running).contains_key("sb1"),
            "an idle sandbox leaves no entry"
        );
        drop(other);
        assert!(lock(&e.running).is_empty());
    }
}
