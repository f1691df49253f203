//! The audit log's writing side: events stored (in the store's `audit` table) and emitted as
//! `tracing` events with target `audit`, and the retention of the audit log and of the execution
//! records. Which requests are audited is the HTTP side's (`lizard_server::audit::classify`).

use crate::store::{now_ms, Store};
use lizard_proto::AuditEvent;
use std::sync::Arc;

/// Objects longer than this (a path segment, a name) are cut in the log.
pub const MAX_OBJECT_CHARS: usize = 200;

/// At most [`MAX_OBJECT_CHARS`] characters of `s`.
pub fn cut(s: &str) -> String {
    s.chars().take(MAX_OBJECT_CHARS).collect()
}

/// How long and how many audit events (or execution records) are kept; `None` = no limit.
pub use crate::store::Retention;

/// Delete what the retentions (the audit log's and the execution records', see
/// `SandboxConfig::executions_retention`) no longer keep every hour (the server prunes once with
/// [`prune`] and [`prune_executions`] before it serves). Runs forever.
pub async fn run_retention(store: Arc<Store>, audit: Retention, executions: Retention) {
    let hour = std::time::Duration::from_secs(3600);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + hour, hour);
    loop {
        tick.tick().await;
        prune(&store, audit, true);
        prune_executions(&store, executions, true);
    }
}

/// Apply the audit log's retention: the count limit always, the age limit when `by_age`.
pub fn prune(store: &Store, r: Retention, by_age: bool) {
    prune_log(store, crate::store::Log::Audit, r, by_age)
}

/// Apply the execution records' retention (the count limit always, the age limit when `by_age`).
pub fn prune_executions(store: &Store, r: Retention, by_age: bool) {
    prune_log(store, crate::store::Log::Executions, r, by_age)
}

/// Apply retention `r` to `log`: the count limit always, the age limit when `by_age`.
pub fn prune_log(store: &Store, log: crate::store::Log, r: Retention, by_age: bool) {
    let before = match r.max_age {
        Some(age) if by_age => now_ms().saturating_sub(age.as_millis() as u64),
        _ => 0,
    };
    if before == 0 && r.max_events.is_none() {
        return;
    }
    match store.prune_log(log, before, r.max_events) {
        Ok(0) => {}
        Ok(n) => tracing::info!(deleted = n, ?log, "rows past their retention deleted"),
        Err(err) => {
            tracing::error!(error = %lizard_jail::error_chain(&err), ?log, "pruning failed")
        }
    }
}

/// Store `e` (assigning its id) and emit it as a `tracing` event with target `audit`. A store
/// failure is logged, never turned into a failure of the audited call (which already happened).
pub fn record(store: &Store, retention: Retention, mut e: AuditEvent) {
    e.at_ms = now_ms();
    match store.add_audit(&e) {
        Ok(id) => e.id = id,
        Err(err) => {
            tracing::error!(error = %lizard_jail::error_chain(&err), "writing an audit event failed")
        }
    }
    if retention.max_events.is_some() {
        prune(store, retention, false);
    }
    tracing::info!(
        target: "audit",
        id = e.id,
        actor = %e.actor,
        project = e.project.as_deref().unwrap_or("-"),
        key = e.key_prefix.as_deref().unwrap_or("-"),
        action = %e.action,
        object = e.object.as_deref().unwrap_or("-"),
        status = e.status,
        client = %e.client,
        "audit"
    );
}
