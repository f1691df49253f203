//! Adoption after a server restart: the store's sandboxes found again, running, paused and
//! hibernated ones included, each checked host-side before it is trusted.

use super::*;

impl Sandboxes {
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
                    let network = serde_json::from_value(row.network.clone()).unwrap_or_default();
                    let pid = rt.pid;
                    let agent = AgentClient::with_limits(
                        rt.socket.clone(),
                        rt.agent_peer(),
                        self.cfg.agent_limits,
                    );
                    // Runs the previous server forwarded may not all be metered yet: one page.
                    agent.allow_runs(crate::agent_client::MAX_EXECUTIONS_PER_PAGE as u64);
                    // A paused one's pause time is not stored: idle hibernation counts from now.
                    let sb = Arc::new(Sandbox::new(&row, limits, network, rt, agent, None));
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
                    None => {
                        kill_unrecorded(&id);
                        remove_files(&dir, Some(&dir.join("disk")));
                    }
                }
                me.id_ranges.release(&id);
            }
        });
        self.timeouts_changed.notify_one();
        Ok((adopted, lost))
    }
}

/// A sandbox whose launch a server's end cut short before its runtime file was written: its
/// processes (its jail was up) are in the cgroup named after it under this server's own, which
/// goes with them. Without this they would run on, re-parented to init, for ever. Blocking.
fn kill_unrecorded(id: &str) {
    let cg = match lizard_jail::cgroup::Hierarchy::detect().and_then(|h| h.existing(id)) {
        Ok(Some(cg)) => cg,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(sandbox = id, error = %e, "looking for a cut-short sandbox's cgroup");
            return;
        }
    };
    tracing::warn!(
        sandbox = id,
        "a sandbox launched by the previous server never recorded: killing it"
    );
    if let Err(e) = cg.kill_all() {
        tracing::warn!(sandbox = id, error = %e, "killing a cut-short sandbox's processes");
    }
    if let Err(e) = cg.remove() {
        tracing::warn!(sandbox = id, error = %e, "removing a cut-short sandbox's cgroup");
    }
}

/// Whether a sandbox from the store is still there, by host-side facts only: a hibernated one has
/// no processes and lives as long as its writable layer's disk image (mounted or not: after a
/// host reboot it is not); a running or paused one while its PID 1 is in its cgroup (a frozen or
/// hung agent cannot answer, and need not: the kernel says whether it lives). Blocking.
pub(super) fn is_alive(rt: &Runtime, state: StoredState) -> bool {
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
