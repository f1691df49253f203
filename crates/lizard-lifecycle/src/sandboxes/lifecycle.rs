//! A running sandbox's transitions: kill, pause and resume, hibernation and the wake from it, the
//! frozen window of a snapshot; and the teardown of what a sandbox held.

use super::*;

impl Sandboxes {
    /// Kill a sandbox: every process, its cgroup, its mounts and its writable layer are gone.
    ///
    /// The kill runs to its end even when the caller goes away (a client that hangs up, a
    /// request dropped at the server's shutdown grace): stopped half-way, it would leave running
    /// a sandbox the API already answers 404 for.
    pub async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        let Some(me) = self.me.upgrade() else {
            return Err(SandboxError::NotFound(id.to_string()));
        };
        let id = id.to_string();
        tokio::spawn(async move {
            let (_sb, _guard) = me.locked(&id).await?;
            me.kill_locked(&id).await
        })
        .await
        .map_err(|e| SandboxError::Launch(format!("the kill's task: {e}")))?
    }

    /// Stop sandbox `id` for a template import (`crate::templates`): it leaves the API, every
    /// process is killed and its cgroup removed — and verified gone, else this fails — while its
    /// writable layer stays (its disk image still mounted on the host at `runtime.disk`). Call
    /// [`Sandboxes::discard_stopped`] with the returned runtime when the layer is imported.
    pub async fn stop_keep_layer(&self, id: &str) -> Result<Runtime, SandboxError> {
        let (_sb, _guard) = self.locked(id).await?;
        let sb = self.take_live(id)?;
        sb.set_state(StoredState::Killed);
        sb.stop_packages();
        let rt = sb.runtime.clone();
        let stopped = {
            let rt = rt.clone();
            tokio::task::spawn_blocking(move || {
                let _ = rt.cgroup.kill_all();
                let _ = rt.cgroup.remove();
                // Bounded: the kill is final, an emptied cgroup goes in a few tries.
                for _ in 0..50 {
                    if rt.cgroup.remaining_dirs().is_empty() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    let _ = rt.cgroup.kill_all();
                    let _ = rt.cgroup.remove();
                }
                Err(rt.cgroup.remaining_dirs())
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
        };
        if let Err(left) = stopped {
            let rt2 = rt.clone();
            let _ = tokio::task::spawn_blocking(move || destroy(&rt2)).await;
            self.id_ranges.release(id);
            let _ = self
                .store
                .set_state(id, StoredState::Killed, Some(now_ms()));
            return Err(SandboxError::Launch(format!(
                "the build sandbox's cgroup is not empty: {left:?}"
            )));
        }
        Ok(rt)
    }

    /// Run `f` (blocking) on a running or paused sandbox's runtime with every process frozen and
    /// its lifecycle lock held (no resume, kill or hibernation meanwhile): a template from a
    /// running sandbox imports its writable layer so. A running sandbox is thawed afterwards; a
    /// paused one stays paused. Its timeout keeps counting.
    pub async fn with_frozen<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Runtime) -> T + Send + 'static,
    ) -> Result<T, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        let running = match sb.state() {
            StoredState::Running => true,
            StoredState::Paused => false,
            _ => {
                return Err(SandboxError::Invalid(format!(
                    "sandbox {id} is not running or paused"
                )))
            }
        };
        let cg = sb.runtime.cgroup.clone();
        if running {
            freezer(&cg, true).await?;
        }
        let rt = sb.runtime.clone();
        let out = tokio::task::spawn_blocking(move || f(&rt)).await;
        if running {
            freezer(&cg, false).await?;
        }
        out.map_err(|e| SandboxError::Launch(e.to_string()))
    }

    /// Remove a sandbox stopped by [`Sandboxes::stop_keep_layer`]: its files, its id range.
    pub async fn discard_stopped(&self, id: &str, rt: Runtime) {
        let _ = tokio::task::spawn_blocking(move || destroy(&rt)).await;
        self.id_ranges.release(id);
        if let Err(e) = self
            .store
            .set_state(id, StoredState::Killed, Some(now_ms()))
        {
            tracing::warn!(sandbox = %id, error = %e, "recording a build sandbox's end");
        }
    }

    /// Take sandbox `id` out of the live ones (its lifecycle lock held by the caller).
    fn take_live(&self, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        let mut m = self
            .live
            .write()
            .map_err(|_| SandboxError::NotFound(id.to_string()))?;
        m.remove(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))
    }

    pub(super) async fn kill_locked(&self, id: &str) -> Result<(), SandboxError> {
        // Counted until the sandbox is destroyed: the server's shutdown waits for it.
        let _under_way = self.kills.start();
        let sb = self.take_live(id)?;
        // The cgroup's counters are read host-side; the agent's execution log only if it answers
        // at once: nothing the agent does can stop the kill.
        crate::sandboxes::metering::sample_within(self, &sb, self.cfg.final_sample_deadline).await;
        sb.set_state(StoredState::Killed);
        sb.stop_packages();
        let runtime = sb.runtime.clone();
        // Host-side and bounded (the cgroup's kill and removal have their own deadlines).
        let destroyed = tokio::task::spawn_blocking(move || destroy(&runtime)).await;
        self.id_ranges.release(id);
        self.store
            .set_state(id, StoredState::Killed, Some(now_ms()))?;
        destroyed.map_err(|e| SandboxError::Launch(e.to_string()))
    }

    /// Pause: every process of the sandbox is frozen (its memory, open files and kernel state kept
    /// exactly) and its timeout stops counting. Idempotent.
    pub async fn pause(&self, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        self.pause_inner(id, false).await
    }

    /// `timed_out`: the pause is the timeout's action, so a resume starts a whole new lifetime
    /// instead of the (zero) rest of this one.
    pub(super) async fn pause_inner(
        &self,
        id: &str,
        timed_out: bool,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        // A hibernated sandbox is already stopped, more than paused.
        if matches!(sb.state(), StoredState::Paused | StoredState::Hibernated) {
            return Ok(sb);
        }
        crate::sandboxes::metering::sample_within(self, &sb, self.cfg.final_sample_deadline).await;
        let cg = sb.runtime.cgroup.clone();
        freezer(&cg, true).await?;
        let remaining = if timed_out {
            sb.timeout_ms.load(Ordering::SeqCst)
        } else {
            sb.timeout_at_ms().saturating_sub(now_ms())
        }
        .max(1);
        sb.paused_remaining_ms.store(remaining, Ordering::SeqCst);
        sb.paused_at_ms.store(now_ms(), Ordering::SeqCst);
        sb.set_state(StoredState::Paused);
        self.store.set_paused(id, Some(remaining))?;
        self.timeouts_changed.notify_one();
        Ok(sb)
    }

    /// Resume a paused sandbox: processes continue where they stopped; the timeout counts again
    /// from what was left. A hibernated sandbox is relaunched and its contexts restored (the
    /// report says what came back and what was lost); its timeout starts again. Idempotent.
    pub async fn resume(
        &self,
        id: &str,
    ) -> Result<(Arc<Sandbox>, Option<HibernationReport>), SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        match sb.state() {
            StoredState::Running | StoredState::Killed => return Ok((sb, None)),
            StoredState::Hibernated => {
                let (sb, report) = self.wake(&sb).await?;
                return Ok((sb, Some(report)));
            }
            StoredState::Paused => {}
        }
        crate::sandboxes::metering::sample(self, &sb).await;
        let cg = sb.runtime.cgroup.clone();
        freezer(&cg, false).await?;
        let at = now_ms() + sb.paused_remaining_ms.load(Ordering::SeqCst).max(1);
        sb.timeout_at_ms.store(at, Ordering::SeqCst);
        sb.set_state(StoredState::Running);
        self.store.set_paused(id, None)?;
        self.store.set_timeout(id, at)?;
        self.timeouts_changed.notify_one();
        Ok((sb, None))
    }

    /// Hibernate: every context saves its state to disk, then the sandbox's processes are killed
    /// and its cgroup removed, so it holds no memory; its directory (writable layer, saved state)
    /// and store row stay, so a resume, even after a server restart or a reboot, relaunches it.
    /// From running or paused; idempotent (`None` when it was already hibernated).
    pub async fn hibernate(
        &self,
        id: &str,
    ) -> Result<(Arc<Sandbox>, Option<HibernationReport>), SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        match sb.state() {
            StoredState::Hibernated | StoredState::Killed => return Ok((sb, None)),
            StoredState::Running | StoredState::Paused => {}
        }
        let was_paused = sb.state() == StoredState::Paused;
        let remaining = if was_paused {
            sb.paused_remaining_ms.load(Ordering::SeqCst)
        } else {
            sb.timeout_at_ms().saturating_sub(now_ms())
        }
        .max(1);
        let cg = sb.runtime.cgroup.clone();
        if was_paused {
            // The kernels must run to save their state.
            freezer(&cg, false).await?;
            // Metered as paused up to now.
            crate::sandboxes::metering::sample(self, &sb).await;
            sb.set_state(StoredState::Running);
        }
        sb.hibernating.store(true, Ordering::SeqCst);
        // Exact first, as a snapshot: the contexts listed (for the report), the executions up to
        // now metered while the agent answers, then CRIU, which kills the tree once dumped (still
        // stopped): nothing of the sandbox runs after its checkpoint, so its disk, kept as it is,
        // matches its memory. Only where CRIU does not apply or fails (the tree then runs on) do
        // the kernels save their own state (a restore that fails later relaunches the sandbox
        // with fresh contexts, and says why).
        // `Err((why, dumped))`: `dumped` when CRIU stopped the tree but its checkpoint is lost.
        let exact = match criu_refusal(&self.cfg.checkpoint) {
            Some(why) => Err((why, false)),
            None => match sb.agent.contexts().await {
                Err(e) => Err((format!("listing the contexts: {e}"), false)),
                Ok(contexts) => {
                    crate::sandboxes::metering::sample(self, &sb).await;
                    match criu_dump(&self.cfg.checkpoint, &sb).await {
                        Err(why) => Err((why, false)),
                        Ok(dumped) => {
                            let manifest = CriuManifest {
                                contexts: contexts
                                    .iter()
                                    .map(|c| (c.id.clone(), c.language))
                                    .collect(),
                                ..dumped
                            };
                            write_criu_manifest(&sb.runtime.dir, &manifest)
                                .map(|()| manifest)
                                .map_err(|e| (format!("keeping the CRIU checkpoint: {e}"), true))
                        }
                    }
                }
            },
        };
        let report = match exact {
            Ok(manifest) => HibernationReport {
                method: lizard_proto::HibernationMethod::Criu,
                method_reason: format!(
                    "criu: CRIU checkpointed the whole sandbox ({} MB in {} ms); a resume \
                     restores it exactly",
                    manifest.image_bytes / 1_000_000,
                    manifest.dump_ms
                ),
                contexts: criu_contexts(&manifest),
            },
            Err((why_not_criu, true)) => {
                // CRIU dumped and stopped it, but the checkpoint could not be kept.
                remove_criu_images(&sb.runtime.dir).await;
                HibernationReport {
                    method: lizard_proto::HibernationMethod::PerLanguage,
                    method_reason: format!(
                        "{why_not_criu}: nothing was saved; a resume starts fresh contexts"
                    ),
                    contexts: Vec::new(),
                }
            }
            Err((why_not_criu, false)) => match sb.agent.hibernate_snapshot(HIBERNATE_DIR).await {
                Ok(mut r) => {
                    r.method_reason = per_language_reason(&why_not_criu);
                    crate::sandboxes::metering::sample(self, &sb).await;
                    r
                }
                Err(e) => {
                    sb.hibernating.store(false, Ordering::SeqCst);
                    if was_paused {
                        let cg = cg.clone();
                        let _ = freezer(&cg, true).await;
                        sb.set_state(StoredState::Paused);
                    }
                    return Err(SandboxError::Launch(format!(
                        "saving the sandbox's contexts: {e}"
                    )));
                }
            },
        };
        // The cgroup's counters to the end (the agent, if CRIU stopped it, is not asked). A CRIU
        // restore brings back the same agent with its log (counted up to the sample above).
        crate::sandboxes::metering::sample_within(self, &sb, Duration::ZERO).await;
        if report.method != lizard_proto::HibernationMethod::Criu {
            crate::sandboxes::metering::reset_agent_log(self, &sb).await;
        }
        tokio::task::spawn_blocking(move || {
            cg.kill_all()?;
            cg.remove()
        })
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))
        .and_then(|r| r.map_err(|e| SandboxError::Launch(format!("stopping the sandbox: {e}"))))
        .inspect_err(|_| sb.hibernating.store(false, Ordering::SeqCst))?;
        sb.paused_remaining_ms.store(remaining, Ordering::SeqCst);
        sb.set_state(StoredState::Hibernated);
        sb.stop_packages();
        sb.hibernating.store(false, Ordering::SeqCst);
        self.store.set_hibernated(id, remaining)?;
        Ok((sb, Some(report)))
    }

    /// Relaunch a hibernated sandbox (lifecycle lock held) and restore its contexts.
    pub(super) async fn wake(
        &self,
        sb: &Arc<Sandbox>,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        crate::sandboxes::metering::sample(self, sb).await;
        let cpu_base_ms = self
            .store
            .get_usage(&sb.id)?
            .map(|u| u.cpu_ms)
            .unwrap_or(sb.runtime.cpu_base_ms);
        {
            // Its volumes stay mounted while it is hibernated, unless a server restart came between.
            let _lock = self.volumes.lock.lock().await;
            for v in &sb.volumes {
                self.volumes.ensure_mounted(&v.volume_id).await?;
            }
        }
        let network = sb.network();
        let egress = crate::egress::rules(&network.egress)?;
        // Exact first: the CRIU checkpoint taken at hibernation, if any.
        let mut criu_failed = None;
        if let Some((manifest, from)) = self.criu_restore_from(&sb.runtime.dir) {
            let started = std::time::Instant::now();
            let restored = self
                .launch_or_restore_in(
                    relaunch(sb, egress.as_ref().map(|_| &network), cpu_base_ms),
                    Some((from, manifest.agent_exe.clone())),
                )
                .await;
            remove_criu_images(&sb.runtime.dir).await;
            match restored {
                Ok(launched) => {
                    let report = HibernationReport {
                        method: lizard_proto::HibernationMethod::Criu,
                        method_reason: format!(
                            "criu: every process of the sandbox was restored exactly from its \
                             CRIU checkpoint ({} MB, restored in {} ms)",
                            manifest.image_bytes / 1_000_000,
                            started.elapsed().as_millis()
                        ),
                        contexts: criu_contexts(&manifest),
                    };
                    return self.woken(sb, launched, report).await;
                }
                Err(e) => {
                    tracing::warn!(sandbox = %sb.id, error = %e, "CRIU restore failed; relaunching");
                    criu_failed = Some(e.to_string());
                }
            }
        }
        // A new agent, whose execution log starts again at 1.
        crate::sandboxes::metering::reset_agent_log(self, sb).await;
        let launched = self
            .launch_in(relaunch(sb, egress.as_ref().map(|_| &network), cpu_base_ms))
            .await?;
        let report = match launched.agent.hibernate_restore(HIBERNATE_DIR).await {
            Ok(mut r) => {
                // The agent has deleted the saved copy (the host never walks that tree).
                r.method_reason = per_language_reason(&match &criu_failed {
                    Some(e) => format!("the CRIU restore failed: {e}"),
                    None => {
                        "it was hibernated per language (the hibernate answer said why not CRIU)"
                            .to_string()
                    }
                });
                r
            }
            Err(e) => {
                tracing::warn!(sandbox = %sb.id, error = %e, "restoring the contexts");
                HibernationReport {
                    method: lizard_proto::HibernationMethod::PerLanguage,
                    method_reason: match &criu_failed {
                        // An exact hibernation takes no per-language save.
                        Some(c) => format!(
                            "the CRIU restore failed ({c}), and its checkpoint was the sandbox's \
                             only saved state: the sandbox runs with fresh contexts"
                        ),
                        None => format!(
                            "the saved state could not be restored ({e}); the sandbox runs with \
                             fresh contexts"
                        ),
                    },
                    contexts: Vec::new(),
                }
            }
        };
        self.woken(sb, launched, report).await
    }

    /// The end of a wake: the relaunched (or restored) sandbox replaces the hibernated one.
    pub(super) async fn woken(
        &self,
        sb: &Arc<Sandbox>,
        launched: LaunchedSandbox,
        report: HibernationReport,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        let at = now_ms() + sb.timeout_ms.load(Ordering::SeqCst).max(1);
        let new = Arc::new(sb.relaunched(launched.runtime, StoredState::Running, at));
        *new.egress.lock().unwrap_or_else(|e| e.into_inner()) = launched.egress;
        self.store.set_runtime(
            &sb.id,
            &serde_json::to_value(&new.runtime).unwrap_or_default(),
        )?;
        self.store.set_paused(&sb.id, None)?;
        self.store.set_timeout(&sb.id, at)?;
        if let Ok(mut m) = self.live.write() {
            m.insert(sb.id.clone(), new.clone());
        }
        self.watch(&sb.id, new.runtime.pid, None);
        self.serve_packages(&new).await;
        // Anyone still holding the old object sees it as running (it is, under a new runtime).
        sb.set_state(StoredState::Running);
        self.timeouts_changed.notify_one();
        Ok((new, report))
    }
}

/// After a failed launch: a new sandbox is destroyed; a hibernated one only loses its processes
/// and cgroup (its directory holds the user's files and saved state).
pub(super) fn destroy_or_stop(rt: &Runtime, fresh: bool) {
    if fresh {
        destroy(rt);
    } else {
        let _ = rt.cgroup.kill_all();
        let _ = rt.cgroup.remove();
    }
}

/// [`destroy_or_stop`] of a sandbox whose PID 1 is not watched yet (a launch that failed half-way):
/// also reap PID 1, an unreaped child of this server (a subreaper) — no watch will.
pub(super) fn destroy_unwatched(rt: &Runtime, fresh: bool) {
    destroy_or_stop(rt, fresh);
    if let Err(e) = lizard_jail::process::reap_within(rt.pid, Duration::from_secs(5)) {
        tracing::debug!(pid = rt.pid, error = %e, "reaping the sandbox's PID 1");
    }
}

/// Unmount the disk image (if any) and remove the sandbox's directory.
pub(super) fn remove_files(dir: &Path, disk: Option<&Path>) {
    if let Some(disk) = disk {
        if let Err(e) = lizard_jail::disk::unmount(disk) {
            // Its files are the sandbox's: the host does not walk them (nor remove them).
            tracing::warn!(error = %e, dir = %dir.display(),
                "unmounting the sandbox's disk; its directory stays");
            return;
        }
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing the sandbox's files");
        }
    }
}

/// After a kill: the sandbox's cgroup directories must be gone (host-wide cgroup ids are a shared
/// resource). If any is left, say so loudly and keep trying in the background (killing what may
/// still be in it), a bounded number of times.
pub(super) fn verify_cgroup_gone(cgroup: &Cgroup) {
    let left = cgroup.remaining_dirs();
    if left.is_empty() {
        return;
    }
    tracing::error!(dirs = ?left, "a killed sandbox's cgroup is still there; retrying in the background");
    let cgroup = cgroup.clone();
    std::thread::spawn(move || {
        for attempt in 1..=30u32 {
            std::thread::sleep(Duration::from_secs(u64::from(attempt.min(10))));
            let _ = cgroup.kill_all();
            let _ = cgroup.remove();
            let left = cgroup.remaining_dirs();
            if left.is_empty() {
                tracing::info!(attempt, "a killed sandbox's cgroup is gone at last");
                return;
            }
            tracing::error!(attempt, dirs = ?left, "a killed sandbox's cgroup is still there");
        }
    });
}

/// Kill every process of the sandbox and remove its cgroup, its disk and
/// its files (blocking).
pub(super) fn destroy(rt: &Runtime) {
    if let Err(e) = rt.cgroup.kill_all() {
        tracing::warn!(error = %e, "killing the sandbox's cgroup");
    }
    if let Err(e) = rt.cgroup.remove() {
        tracing::warn!(error = %e, "removing the sandbox's cgroup");
    }
    verify_cgroup_gone(&rt.cgroup);
    remove_files(&rt.dir, rt.disk.as_deref());
    if let (Some(build), Some(id)) = (&rt.template_dir, rt.dir.file_name()) {
        lizard_template::store::unpin(build, &id.to_string_lossy());
        for base in &rt.template_bases {
            lizard_template::store::unpin(base, &id.to_string_lossy());
        }
    }
}

/// The launch that wakes hibernated sandbox `sb` again in its own directory and host id range.
fn relaunch<'a>(
    sb: &'a Sandbox,
    egress: Option<&'a NetworkRequest>,
    cpu_base_ms: u64,
) -> super::launch::Launch<'a> {
    super::launch::Launch {
        id: sb.id.clone(),
        dir: &sb.runtime.dir,
        project: &sb.project,
        template: &sb.template,
        envs: &sb.envs,
        limits: sb.limits,
        volumes: &sb.volumes,
        egress,
        fresh: false,
        id_base: sb.runtime.id_base,
        cpu_base_ms,
    }
}
