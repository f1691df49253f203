//! The sandboxes' side of the shared Python zygotes (`crate::host_zygotes`): which template
//! builds have one, and the join after a launch.

use super::Sandboxes;
use crate::host_zygotes::{HostZygote, Runner, ZygoteConfig};
use std::path::Path;
use std::sync::Arc;

/// Made in a zygote's directory (`<data>/zygotes/<template>/`) once launches use it; it holds the
/// zygote's host pid.
pub const READY_FILE: &str = "ready";

impl Sandboxes {
    /// With `host_zygotes`: start the default template's host zygote in the background; launches
    /// and the pool wait for the start to be over (see [`Self::host_zygotes_started`]). Its uid
    /// and gid are the one below the sandboxes' id span, which no sandbox maps.
    pub fn start_host_zygotes(self: &Arc<Self>) {
        if !self.cfg.host_zygotes {
            return;
        }
        self.zygotes_started.send_replace(false);
        let this = self.clone();
        tokio::spawn(async move {
            this.start_default_zygote().await;
            this.zygotes_started.send_replace(true);
        });
    }

    /// Wait until [`Self::start_host_zygotes`] is over (at most `limit`).
    pub(super) async fn host_zygotes_started(&self, limit: std::time::Duration) {
        let mut rx = self.zygotes_started.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|done| *done)).await;
    }

    /// Start the default template's host zygote and register it (blocking work in a thread).
    async fn start_default_zygote(&self) {
        let template = match self.find_builtin(&self.cfg.default_template) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "no host zygote: the default template");
                return;
            }
        };
        let Some(python) = template.meta.python.clone() else {
            return;
        };
        let (start, end) = crate::id_ranges::span(self.cfg.id_shift);
        let Some(uid) = self.cfg.id_shift.checked_sub(1).filter(|u| *u > 0) else {
            tracing::warn!("no host zygote: no host id below the sandboxes' range");
            return;
        };
        let Ok(count) = u32::try_from(end - start) else {
            tracing::warn!("no host zygote: the sandboxes' id span is too large");
            return;
        };
        let cfg = ZygoteConfig {
            template: template.name.clone(),
            layers: vec![template.rootfs.clone()],
            runner: Runner::for_template(&template.rootfs, &python),
            python,
            env: template.meta.env.clone(),
            uid,
            gid: uid,
            sandbox_ids: (start as u32, count),
            dir: self.cfg.data_dir.join("zygotes").join(&template.name),
            lizard_bin: self.cfg.lizard_bin.clone(),
        };
        let started = std::time::Instant::now();
        let ready = cfg.dir.join(READY_FILE);
        let _ = std::fs::remove_file(&ready);
        match tokio::task::spawn_blocking(move || HostZygote::start(&cfg)).await {
            Ok(Ok(z)) => {
                tracing::info!(template = %template.name, pid = z.pid(),
                    ms = started.elapsed().as_millis() as u64, "host zygote ready");
                let pid = z.pid();
                if let Ok(mut map) = self.zygotes.write() {
                    map.insert(template.dir.clone(), Arc::new(z));
                }
                // For operators and tests: from now on launches of the template use it.
                let _ = std::fs::write(&ready, pid.to_string());
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "the host zygote did not start"),
            Err(e) => tracing::warn!(error = %e, "the host zygote's start"),
        }
    }

    /// End every host zygote (the server's shutdown; a join under way keeps its zygote until it
    /// is done).
    pub fn stop_host_zygotes(&self) {
        let stopped = match self.zygotes.write() {
            Ok(mut map) => std::mem::take(&mut *map),
            Err(_) => return,
        };
        drop(stopped);
    }

    /// The running host zygote made from the template build at `template_dir`, if any. One that
    /// died or stopped answering is dropped (killed) and a new one started in the background;
    /// launches meanwhile do without.
    pub(super) fn host_zygote(&self, template_dir: &Path) -> Option<Arc<HostZygote>> {
        let z = self.zygotes.read().ok()?.get(template_dir).cloned()?;
        if z.alive() {
            return Some(z);
        }
        let removed = match self.zygotes.write() {
            Ok(mut map) => map
                .get(template_dir)
                .is_some_and(|cur| Arc::ptr_eq(cur, &z))
                .then(|| map.remove(template_dir))
                .flatten(),
            Err(_) => None,
        };
        if let (Some(_), Some(this)) = (&removed, self.me.upgrade()) {
            tracing::warn!(template = %z.template(), "the host zygote is gone; starting another");
            tokio::spawn(async move {
                drop(removed);
                this.start_default_zygote().await;
            });
        }
        None
    }
}

/// Have `zygote` join the launched sandbox `id` (PID 1 `pid`, in `cgroup`), in the background:
/// its agent waits for it (`lizard-agent`'s `adopt`) and falls back to a zygote of its own.
pub(super) fn join_in_background(
    zygote: Arc<HostZygote>,
    id: &str,
    pid: i32,
    cgroup: lizard_jail::cgroup::Cgroup,
) {
    let id = id.to_string();
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || match zygote.join(pid, &cgroup) {
        Ok(joined) => tracing::debug!(sandbox = %id, joined,
            us = started.elapsed().as_micros() as u64, "the host zygote joined"),
        Err(e) => tracing::warn!(sandbox = %id, error = %e, "the host zygote could not join"),
    });
}
