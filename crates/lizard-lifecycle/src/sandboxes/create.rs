//! Creating a sandbox: its limits resolved against the server's, its volumes claimed, a pooled
//! sandbox taken or a new one launched; volumes' users and their unmounting.

use super::*;

impl Sandboxes {
    pub(super) fn resolve_limits(&self, r: &LimitsRequest) -> Result<SandboxLimits, SandboxError> {
        let d = self.cfg.default_limits;
        let l = SandboxLimits {
            memory_mb: r.memory_mb.unwrap_or(d.memory_mb),
            cpu_millicores: r.cpu_millicores.unwrap_or(d.cpu_millicores),
            pids: r.pids.unwrap_or(d.pids),
            tmp_mb: r.tmp_mb.unwrap_or(d.tmp_mb),
            disk_mb: r.disk_mb.unwrap_or(d.disk_mb),
        };
        if !(64..=1024 * 1024).contains(&l.memory_mb) {
            return Err(SandboxError::Invalid(
                "limits.memory_mb must be between 64 and 1048576".into(),
            ));
        }
        if !(10..=256_000).contains(&l.cpu_millicores) {
            return Err(SandboxError::Invalid(
                "limits.cpu_millicores must be between 10 and 256000".into(),
            ));
        }
        if !(16..=1_000_000).contains(&l.pids) {
            return Err(SandboxError::Invalid(
                "limits.pids must be between 16 and 1000000".into(),
            ));
        }
        if !(1..=1024 * 1024).contains(&l.tmp_mb) {
            return Err(SandboxError::Invalid(
                "limits.tmp_mb must be between 1 and 1048576".into(),
            ));
        }
        if !(64..=16 * 1024 * 1024).contains(&l.disk_mb) {
            return Err(SandboxError::Invalid(
                "limits.disk_mb must be between 64 and 16777216".into(),
            ));
        }
        Ok(l)
    }

    /// [`Sandboxes::create`] in a task of its own: a caller that goes away (a client that hangs
    /// up, so its handler is dropped) does not cancel a launch halfway, which would leave a
    /// running sandbox that neither the API nor the store knows. The sandbox is then created as
    /// asked (and ends by its timeout like any other).
    pub async fn create_detached(
        self: &Arc<Self>,
        req: CreateSandbox,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let this = self.clone();
        tokio::spawn(async move { this.create(req).await })
            .await
            .map_err(|e| SandboxError::Launch(format!("the create task failed: {e}")))?
    }

    /// Create and start a sandbox; returns once its agent answers.
    pub async fn create(
        self: &Arc<Self>,
        req: CreateSandbox,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let template_name = req
            .template
            .clone()
            .unwrap_or_else(|| self.cfg.default_template.clone());
        // A name, never a path: the template library also accepts spec file paths.
        if template_name.is_empty()
            || template_name.len() > 64
            || !template_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || template_name.starts_with('.')
        {
            return Err(SandboxError::Invalid(format!(
                "invalid template name {template_name:?}"
            )));
        }
        let timeout_ms = req.timeout_ms.unwrap_or(self.cfg.default_timeout_ms);
        if timeout_ms == 0 || timeout_ms > self.cfg.max_timeout_ms {
            return Err(SandboxError::Invalid(format!(
                "timeout_ms must be between 1 and {}",
                self.cfg.max_timeout_ms
            )));
        }
        check_bounds("metadata", &req.metadata, METADATA_BOUNDS)?;
        check_bounds("env", &req.envs, ENV_BOUNDS)?;
        for k in req.envs.keys() {
            if !lizard_proto::valid_env_name(k) {
                return Err(SandboxError::Invalid(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
            // The agent reads its settings from LIZARD_* variables: a sandbox's environment
            // must not reconfigure it (only the operator's --agent-env does).
            if k.starts_with(RESERVED_ENV_PREFIX) {
                return Err(SandboxError::Invalid(format!(
                    "environment variable names starting with {RESERVED_ENV_PREFIX} are reserved \
                     ({k:?})"
                )));
            }
        }
        let limits = self.resolve_limits(&req.limits)?;
        let wanted = check_volume_requests(&req.volumes)?;
        let (volumes, _claim) = self.claim_volumes(&req.project, wanted).await?;
        let egress = crate::egress::rules(&req.network.egress)?;
        self.check_inject(&req.project, &req.network, egress.as_ref())?;
        let pooled = if self.pool_eligible(&template_name, &req) {
            self.note_pool_demand();
            self.take_pooled()
        } else {
            None
        };
        let launched = match pooled {
            Some(l) => Ok(l),
            None => {
                self.launch_new(
                    (&req.project, &template_name),
                    &req.envs,
                    limits,
                    &volumes,
                    egress.as_ref().map(|_| &req.network),
                )
                .await
            }
        };
        let launched = launched?;
        self.refill_pool();
        let now = now_ms();
        let LaunchedSandbox {
            id,
            runtime,
            agent,
            exited,
            egress,
        } = launched;
        let row = SandboxRow {
            id: id.clone(),
            project: req.project,
            template: template_name,
            state: StoredState::Running,
            created_at_ms: now,
            timeout_at_ms: now + timeout_ms,
            ended_at_ms: None,
            metadata: req.metadata,
            envs: req.envs,
            runtime: serde_json::to_value(&runtime).unwrap_or_default(),
            limits: serde_json::to_value(limits).unwrap_or_default(),
            paused_remaining_ms: 0,
            on_timeout: req.on_timeout,
            timeout_ms,
            volumes: volumes.clone(),
            network: serde_json::to_value(&req.network).unwrap_or_default(),
        };
        let sb = Arc::new(Sandbox::new(
            &row,
            limits,
            req.network,
            runtime,
            agent,
            egress,
        ));
        let stored = self
            .store
            .ensure_project(&row.project)
            .and_then(|()| self.store.insert_sandbox(&row));
        if let Err(e) = stored {
            destroy_unwatched(&sb.runtime, true);
            self.id_ranges.release(&id);
            return Err(e.into());
        }
        self.serve_packages(&sb).await;
        if let Ok(mut m) = self.live.write() {
            m.insert(id.clone(), sb.clone());
        }
        match exited {
            // A pooled sandbox: its watch runs since it was pooled. If PID 1 exited while it was
            // neither pooled nor live (just now), the watch found nothing: clean up here.
            Some(flag) => {
                if flag.load(Ordering::SeqCst) {
                    self.pid1_exited(&id, sb.runtime.pid).await;
                    return Err(SandboxError::Launch(
                        "the pooled sandbox's agent exited".into(),
                    ));
                }
            }
            None => self.watch(&id, sb.runtime.pid, None),
        }
        // Live now: `_claim` (dropped on return) hands the count over to `volume_users`.
        self.timeouts_changed.notify_one();
        Ok(sb)
    }

    /// Resolve the requested volumes in `project`, mount them on the host and count this launch
    /// as a user of each until the returned claim is dropped.
    pub(super) async fn claim_volumes(
        &self,
        project: &str,
        wanted: Vec<(String, String, bool)>,
    ) -> Result<(Vec<SandboxVolume>, crate::volumes::Claim<'_>), SandboxError> {
        if wanted.is_empty() {
            return Ok((Vec::new(), self.volumes.claim(Vec::new())));
        }
        let _lock = self.volumes.lock.lock().await;
        let mut out: Vec<SandboxVolume> = Vec::new();
        for (key, mount_path, read_only) in wanted {
            let row = self
                .store
                .find_volume(project, &key)?
                .ok_or_else(|| VolumeError::NotFound(key.clone()))?;
            if out.iter().any(|v| v.volume_id == row.id) {
                return Err(SandboxError::Invalid(format!(
                    "volume {:?} is listed twice",
                    row.name
                )));
            }
            self.volumes.ensure_mounted(&row.id).await?;
            out.push(SandboxVolume {
                volume_id: row.id,
                name: row.name,
                mount_path,
                read_only,
            });
        }
        let claim = self
            .volumes
            .claim(out.iter().map(|v| v.volume_id.clone()).collect());
        Ok((out, claim))
    }

    /// Live (running or paused) sandboxes that mount volume `id`.
    pub fn volume_users(&self, id: &str) -> Vec<String> {
        let mut users: Vec<String> = self
            .all()
            .into_iter()
            .filter(|sb| sb.volumes.iter().any(|v| v.volume_id == id))
            .map(|sb| sb.id.clone())
            .collect();
        users.sort();
        users
    }

    /// Delete a volume: refused with `VolumeError::InUse` while a live sandbox mounts it, unless
    /// `force`, which kills those sandboxes first. A sandbox still being launched with it always
    /// makes the delete fail.
    pub async fn delete_volume(&self, row: &VolumeRow, force: bool) -> Result<(), SandboxError> {
        let lock = self.volumes.lock.lock().await;
        let users = self.volume_users(&row.id);
        let launching = self.volumes.is_pending(&row.id);
        if launching || (!users.is_empty() && !force) {
            let mut sandboxes = users;
            if launching {
                sandboxes.push("(one being created)".into());
            }
            return Err(VolumeError::InUse {
                name: row.name.clone(),
                sandboxes,
            }
            .into());
        }
        for id in users {
            match self.kill(&id).await {
                Ok(()) | Err(SandboxError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.volumes.destroy(row).await?;
        drop(lock);
        Ok(())
    }

    /// At shutdown: unmount the volumes no live sandbox uses.
    pub async fn unmount_unused_volumes(&self) {
        self.volumes
            .unmount_unused(|id| !self.volume_users(id).is_empty())
            .await;
    }
}

/// Validate the `volumes` of a create request: names, mount paths (default
/// `/home/user/<name>`), no two on one path or nested. Returns (name or id, mount path, read-only).
pub(super) fn check_volume_requests(
    reqs: &[VolumeMountRequest],
) -> Result<Vec<(String, String, bool)>, SandboxError> {
    use lizard_proto::volume::MAX_VOLUMES_PER_SANDBOX;
    if reqs.len() > MAX_VOLUMES_PER_SANDBOX {
        return Err(SandboxError::Invalid(format!(
            "at most {MAX_VOLUMES_PER_SANDBOX} volumes per sandbox"
        )));
    }
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for r in reqs {
        let is_id = r.name.starts_with("vol_")
            && r.name.len() == 24
            && r.name[4..]
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !is_id && !lizard_proto::valid_volume_name(&r.name) {
            return Err(SandboxError::Invalid(format!(
                "invalid volume name {:?}",
                r.name
            )));
        }
        let path = r
            .mount_path
            .clone()
            .unwrap_or_else(|| format!("/home/user/{}", r.name));
        lizard_proto::check_mount_path(&path).map_err(SandboxError::Invalid)?;
        if let Some((_, other, _)) = out
            .iter()
            .find(|(_, p, _)| lizard_proto::mount_paths_overlap(p, &path))
        {
            return Err(SandboxError::Invalid(format!(
                "volume mount paths {other:?} and {path:?} overlap"
            )));
        }
        out.push((r.name.clone(), path, r.read_only));
    }
    Ok(out)
}
