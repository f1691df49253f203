//! Snapshots, clones and forks of running sandboxes.
//!
//! A **snapshot** is the memory state and the disk of a running (or paused) sandbox, kept by the
//! server: its memory is captured (the capture step, [`Capture`]: with CRIU every process is
//! dumped while the source is frozen; per language its kernels save themselves while it runs),
//! and the source is frozen briefly (its cgroup, then its disk's file system with `FIFREEZE`)
//! while its disk image is copied (a reflink where the host file system shares extents, else a
//! sparse `copy_file_range` of the allocated ranges), and thawed. The source goes on with its
//! kernels intact. The copy lives in `<data>/snapshots/<id>/disk.img` (root's, 0700 directory),
//! the row in the store's `snapshots` table: both survive a restart.
//!
//! A **clone** (`POST /v1/sandboxes` with `snapshot_id`) is a new sandbox (own id, host id range,
//! cgroup, network, writable layer) whose disk image is a copy of the snapshot's: the copy is
//! mounted on the host, its owners moved from the source's host id range to the clone's
//! (`lizard_jail::layer::shift_owners`, no link followed), the sandbox launched on it over the
//! source's template build, and its agent restores the contexts from the saved state inside its
//! own disk. A **fork** is a snapshot that is not kept: its image becomes the clone's.
//!
//! The saved kernel state is written by the source's agent on the source's disk
//! (`/run/lizard/snapshot`): the host never opens it, it only copies the whole image file (its
//! own file, of a size the host fixed) and reads nothing in it but directory entries and owners
//! for the id shift; the state is read back only inside the clone, by the clone's agent.
//!
//! **Capture method:** [`Capture`] is the one pluggable step: [`Capture::Criu`] (the default with
//! a usable CRIU: every process dumped while the source is frozen, its disk copied in the same
//! freeze, each clone restored from a copy of the images with its own identity) or
//! [`Capture::PerLanguage`] (the kernels' own save, as for hibernation), the fallback where CRIU is
//! missing, does not apply or fails. Every answer names the method and why.

use super::*;
use lizard_proto::{HibernationMethod, SandboxInfo, SnapshotInfo};

/// Where the source's agent saves its contexts for a snapshot (inside the sandbox, on its disk).
pub const SNAPSHOT_DIR: &str = "/run/lizard/snapshot";

/// In a clone's directory: the template build its writable layer was made on (until its first
/// launch writes `runtime.json`).
pub(super) const CLONE_BUILD_FILE: &str = "clone-build.json";

/// Held (shared) by every clone while it copies a snapshot and pins its template builds, and
/// (exclusive) by a delete: a snapshot's files and pins do not go from under a clone.
static FILES_LOCK: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub use crate::store::SnapshotSource;

#[derive(Debug, Serialize, Deserialize)]
struct CloneBuild {
    template_dir: PathBuf,
}

/// How the memory state is captured and restored: the one pluggable step of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// CRIU checkpoints every process of the sandbox (memory, threads, descriptors, sockets,
    /// running commands) into the snapshot's host-side directory while the source is frozen (its
    /// disk copied in the same freeze), and each clone is restored from those images exactly,
    /// with its own id, host id range, cgroup, network namespace, writable layer and agent
    /// socket (see ARCHITECTURE.md, "Snapshots and forks").
    Criu,
    /// Each kernel saves its own state (variables, functions, classes, imports, cwd, env) into
    /// the sandbox's disk and a fresh kernel in the clone loads it; what cannot be saved is
    /// reported lost (see ARCHITECTURE.md, "Hibernation").
    PerLanguage,
}

/// In a CRIU snapshot's directory: the images (`criu/`) and what the dump was told
/// (`criu.json`, as for hibernation).
const SNAPSHOT_CRIU_IMAGES: &str = "criu";

/// Dumps a snapshot or a hibernation tries before it falls back per language (see
/// `Sandboxes::criu_capture`, `criu_dump`): a connection to the agent not yet accepted fails one.
pub(crate) const CRIU_SNAPSHOT_TRIES: u32 = 3;

impl Capture {
    /// The method for a sandbox on this host, and why (with `tool`, the server's checkpoint
    /// tool).
    pub fn select(tool: &CheckpointTool) -> (Capture, String) {
        match criu_refusal(tool) {
            None => (
                Capture::Criu,
                "criu: CRIU checkpointed every process of the sandbox".into(),
            ),
            Some(why) => (Capture::PerLanguage, per_language_reason(&why)),
        }
    }

    pub fn method(self) -> HibernationMethod {
        match self {
            Capture::Criu => HibernationMethod::Criu,
            Capture::PerLanguage => HibernationMethod::PerLanguage,
        }
    }

    /// The per-language save of the running sandbox's memory state (into its own disk; a CRIU
    /// capture is taken with the disk copy, `Sandboxes::criu_capture`).
    async fn save_per_language(agent: &AgentClient) -> Result<HibernationReport, SandboxError> {
        agent
            .hibernate_snapshot(SNAPSHOT_DIR)
            .await
            .map_err(|e| SandboxError::Capture(format!("saving the sandbox's contexts: {e}")))
    }

    /// The per-language restore in a freshly launched clone; a failure is a report with fresh
    /// contexts (a CRIU clone is restored by the launcher, `Sandboxes::start_clone`).
    async fn restore_per_language(agent: &AgentClient, reason: &str) -> HibernationReport {
        let method = Capture::PerLanguage.method();
        match agent.hibernate_restore(SNAPSHOT_DIR).await {
            Ok(mut r) => {
                r.method = method;
                r.method_reason = reason.to_string();
                r
            }
            Err(e) => HibernationReport {
                method,
                method_reason: format!(
                    "the saved state could not be restored ({e}); the sandbox runs with fresh \
                     contexts"
                ),
                contexts: Vec::new(),
            },
        }
    }
}

/// A new snapshot id: `snap_` + 20 characters of `[a-z0-9]`.
pub fn new_snapshot_id() -> String {
    format!("snap_{}", new_sandbox_id())
}

/// Whether `id` looks like a snapshot id (anything else is unknown without a lookup).
pub fn valid_snapshot_id(id: &str) -> bool {
    id.len() == 25
        && id.starts_with("snap_")
        && id[5..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Bounds of the walk that moves a copied layer's owners to the clone's range.
fn shift_limits() -> lizard_jail::layer::ImportLimits {
    lizard_jail::layer::ImportLimits {
        max_bytes: u64::MAX,
        max_entries: 4_000_000,
        max_depth: 256,
        max_name_len: 255,
    }
}

/// The API view of a snapshot.
pub fn snapshot_info(r: &crate::store::SnapshotRow) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: r.id.clone(),
        sandbox_id: r.sandbox_id.clone(),
        project: r.project.clone(),
        template: r.template.clone(),
        created_at_ms: r.created_at_ms,
        size_bytes: r.size_bytes,
        method: r.report.method,
        method_reason: r.report.method_reason.clone(),
        frozen_ms: r.frozen_ms,
        contexts: r.report.contexts.clone(),
        metadata: r.metadata.clone(),
        limits: r.source.limits,
    }
}

/// A snapshot's storage: its size × its lifetime (until `now_ms` or its deletion), GiB-hours.
pub fn gib_hours(r: &crate::store::SnapshotRow, now_ms: u64) -> f64 {
    let end = r.deleted_at_ms.unwrap_or(now_ms);
    let hours = end.saturating_sub(r.created_at_ms) as f64 / 3_600_000.0;
    r.size_bytes as f64 / (1024.0 * 1024.0 * 1024.0) * hours
}

/// What a clone is made from: a kept snapshot's image (copied) or a fork's (moved).
enum Image<'a> {
    Copy(&'a Path),
    Move(&'a Path),
}

/// A clone request (validated by the API layer: project resolved, snapshot visible).
#[derive(Debug, Clone, Default)]
pub struct CloneRequest {
    pub project: String,
    pub timeout_ms: Option<u64>,
    pub metadata: BTreeMap<String, String>,
    pub on_timeout: Option<TimeoutAction>,
}

impl Sandboxes {
    fn snapshots_dir(&self) -> PathBuf {
        self.cfg.data_dir.join("snapshots")
    }

    /// Where snapshot `id`'s image lives.
    pub fn snapshot_image(&self, id: &str) -> PathBuf {
        self.snapshots_dir().join(id).join("disk.img")
    }

    /// Take a snapshot of sandbox `id` (running or paused; it keeps running, or stays paused)
    /// and keep it. In a task of its own, like a create: a caller that goes away does not stop
    /// it half-way (which could leave the source frozen).
    pub async fn snapshot_detached(
        self: &Arc<Self>,
        id: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<crate::store::SnapshotRow, SandboxError> {
        check_bounds("metadata", &metadata, METADATA_BOUNDS)?;
        let (this, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            let row = this.capture(&id, new_snapshot_id(), metadata).await?;
            if let Err(e) = this.store.insert_snapshot(&row) {
                this.discard_snapshot_files(&row);
                return Err(e.into());
            }
            Ok(row)
        })
        .await
        .map_err(|e| SandboxError::Launch(format!("the snapshot task failed: {e}")))?
    }

    /// Save sandbox `id`'s memory state and copy its disk into `snapshots/<snap_id>/`; the row
    /// is not stored yet.
    async fn capture(
        &self,
        id: &str,
        snap_id: String,
        metadata: BTreeMap<String, String>,
    ) -> Result<crate::store::SnapshotRow, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        let was_paused = match sb.state() {
            StoredState::Running => false,
            StoredState::Paused => true,
            StoredState::Hibernated => {
                return Err(SandboxError::Conflict(format!(
                    "sandbox {id} is hibernated: resume it before taking a snapshot"
                )))
            }
            StoredState::Killed => return Err(SandboxError::NotFound(id.to_string())),
        };
        let (Some(mount), Some(template_dir), Some(id_base)) = (
            sb.runtime.disk.clone(),
            sb.runtime.template_dir.clone(),
            sb.runtime.id_base,
        ) else {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} was started by an older server (no disk image of its own or no id \
                 range): it cannot be snapshotted"
            )));
        };
        let image = sb.runtime.dir.join("disk.img");
        let cg = sb.runtime.cgroup.clone();
        let started = std::time::Instant::now();
        if was_paused {
            // The kernels must run to save their state.
            freezer(&cg, false).await?;
        }
        let (capture, reason) = Capture::select(&self.cfg.checkpoint);
        let sdir = self.snapshots_dir().join(&snap_id);
        let dst = sdir.join("disk.img");
        let max_bytes = (sb.limits.disk_mb * 1024 * 1024).max(lizard_jail::disk::MIN_BYTES);
        let mut per_language_why = None;
        let mut exact = None;
        if capture == Capture::Criu {
            match self
                .criu_capture(&sb, &sdir, &image, &mount, max_bytes, was_paused)
                .await
            {
                Ok(done) => exact = Some(done),
                Err(why) => {
                    tracing::warn!(sandbox = %id, error = %why, "CRIU snapshot failed; per language");
                    let _ = std::fs::remove_dir_all(&sdir);
                    per_language_why = Some(per_language_reason(&why));
                    if was_paused {
                        // Left frozen by the attempt; the kernels must run to save themselves.
                        let cg = cg.clone();
                        let _ = freezer(&cg, false).await;
                    }
                }
            }
        }
        let (report, method, copy_ms, save_ms) = match exact {
            Some((report, method, frozen_ms)) => (report, method, frozen_ms, 0),
            None => {
                let capture = Capture::PerLanguage;
                let saved = Capture::save_per_language(&sb.agent).await;
                let save_ms = started.elapsed().as_millis() as u64;
                let mut report = match saved {
                    Ok(r) => r,
                    Err(e) => {
                        if was_paused {
                            let cg = cg.clone();
                            let _ = freezer(&cg, true).await;
                        }
                        return Err(e);
                    }
                };
                report.method = capture.method();
                report.method_reason = per_language_why.unwrap_or(reason);
                let reserved = self.volumes.storage.reserve(
                    &dst,
                    lizard_jail::disk::allocated_bytes(&image),
                    "a snapshot",
                );
                let copied = match reserved {
                    Err(e) => Err(SandboxError::NoSpace(e)),
                    Ok(_reservation) => {
                        let copy = FrozenCopy {
                            sdir: sdir.clone(),
                            image: image.clone(),
                            mount: mount.clone(),
                            dst: dst.clone(),
                            cg: cg.clone(),
                            max_bytes,
                            processes_stay_frozen: was_paused,
                        };
                        tokio::task::spawn_blocking(move || copy_frozen(&copy, || Ok(())))
                            .await
                            .map_err(|e| SandboxError::Launch(e.to_string()))
                            .and_then(|r| r)
                    }
                };
                if was_paused {
                    // Paused it was, paused it stays (its thaw above was for the kernels' save).
                    let cg = cg.clone();
                    let _ = freezer(&cg, true).await;
                }
                match copied {
                    Ok(((method, copy_ms), ())) => (report, method, copy_ms, save_ms),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&sdir);
                        return Err(e);
                    }
                }
            }
        };
        let size_bytes = lizard_jail::disk::allocated_bytes(&dst)
            + lizard_jail::checkpoint::ImagesDir {
                path: sdir.join(SNAPSHOT_CRIU_IMAGES),
            }
            .bytes();
        tracing::info!(sandbox = %id, snapshot = %snap_id, save_ms, copy_ms,
            copy = method.as_str(), size_bytes, "snapshot taken");
        // The sandbox's egress CA goes with its disk (whose trust files name it), for the clones.
        copy_egress_ca(&sb.runtime.dir, &sdir);
        let builds: Vec<PathBuf> = std::iter::once(template_dir.clone())
            .chain(sb.runtime.template_bases.iter().cloned())
            .collect();
        for b in &builds {
            if let Err(e) = lizard_template::store::pin(b, &snap_id) {
                tracing::warn!(snapshot = %snap_id, error = %e, "cannot pin the template build");
            }
        }
        Ok(crate::store::SnapshotRow {
            id: snap_id,
            project: sb.project.clone(),
            sandbox_id: sb.id.clone(),
            template: sb.template.clone(),
            created_at_ms: now_ms(),
            deleted_at_ms: None,
            size_bytes,
            report,
            frozen_ms: Some(copy_ms),
            metadata,
            source: SnapshotSource {
                limits: sb.limits,
                envs: sb.envs.clone(),
                network: sb.network(),
                on_timeout: sb.on_timeout,
                timeout_ms: sb.timeout_ms.load(Ordering::SeqCst),
                volumes: sb.volumes.clone(),
                template_dir,
                template_bases: sb.runtime.template_bases.clone(),
                id_base,
            },
        })
    }

    /// The CRIU capture of a snapshot: the source's cgroup frozen, every process dumped (left
    /// running) into `<sdir>/criu`, the disk image copied in the same freeze, then thawed (unless
    /// it was paused). Returns the report, how the disk was copied and how long the source was
    /// frozen; `Err` is why not (the caller falls back per language), with nothing left in
    /// `sdir`.
    async fn criu_capture(
        &self,
        sb: &Sandbox,
        sdir: &Path,
        image: &Path,
        mount: &Path,
        max_bytes: u64,
        was_paused: bool,
    ) -> Result<(HibernationReport, lizard_jail::disk::CopyMethod, u64), String> {
        let criu = self
            .cfg
            .checkpoint
            .criu
            .clone()
            .ok_or_else(|| format!("no usable CRIU ({})", self.cfg.checkpoint.detail))?;
        let contexts = sb
            .agent
            .contexts()
            .await
            .map_err(|e| format!("listing the contexts: {e}"))?;
        // The agent binary it runs stays on disk for its clones (an upgrade may come between).
        if let (Some(x), Some(digest)) = (&self.cfg.checkpoint.agent_exes, &sb.runtime.agent_exe) {
            x.keep(digest).await?;
        }
        // The source's executions so far are its own: metered now, and a clone's restored agent
        // (with the source's execution log) is counted from this position on.
        crate::sandboxes::metering::sample(self, sb).await;
        let agent_log_seq = self
            .store
            .get_usage(&sb.id)
            .ok()
            .flatten()
            .map_or(0, |u| u.agent_log_seq);
        let dst = sdir.join("disk.img");
        let _reservation = self
            .volumes
            .storage
            .reserve(
                &dst,
                lizard_jail::disk::allocated_bytes(image),
                "a snapshot",
            )
            .map_err(|e| e.to_string())?;
        let copy = FrozenCopy {
            sdir: sdir.to_path_buf(),
            image: image.to_path_buf(),
            mount: mount.to_path_buf(),
            dst,
            cg: sb.runtime.cgroup.clone(),
            max_bytes,
            processes_stay_frozen: was_paused,
        };
        // Kept connections of forwarded requests: their other ends are the server's.
        sb.agent
            .close_idle(crate::agent_client::CLOSE_IDLE_WAIT)
            .await;
        let agent = sb.agent.clone();
        let pid = sb.runtime.pid;
        let restored = sb.runtime.criu_restored;
        let tool = self.cfg.checkpoint.clone();
        let done = tokio::task::spawn_blocking(move || {
            let (sdir, cg) = (&copy.sdir, &copy.cg);
            let images = sdir.join(SNAPSHOT_CRIU_IMAGES);
            let freezer = cg.freezer_dir().to_path_buf();
            // A failed dump stops here (no disk copy): the caller falls back per language.
            let r = copy_frozen(&copy, || {
                let mut tries = 0;
                loop {
                    tries += 1;
                    // Frozen while moving a kernel between cgroups: a checkpoint now would not
                    // restore (`agent_holds_cgroup_file`); let the agent finish the move.
                    if tries < CRIU_SNAPSHOT_TRIES && agent_holds_cgroup_file(pid) {
                        let _ = cg.thaw();
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        cg.freeze().map_err(|e| {
                            SandboxError::Launch(format!("freezing the sandbox: {e}"))
                        })?;
                        continue;
                    }
                    // With the cgroups: a clone's restore maps them onto its own
                    // (`--cgroup-root`), each kernel back in its context's cgroup.
                    match dump_sandbox(&criu, pid, &images, Some(&freezer), true, true) {
                        Ok(done) => return Ok(done),
                        // A connection to the agent made while the sandbox was frozen waits,
                        // unaccepted, in its socket's queue, and its other end is the server's
                        // (in the host's network namespace), which CRIU cannot find: let the
                        // agent accept it and try again.
                        Err(e)
                            if tries < CRIU_SNAPSHOT_TRIES
                                && lizard_jail::error_chain(&e).contains("Unix socket") =>
                        {
                            // (or a forwarded request that ended meanwhile kept its connection)
                            drop(agent.drop_idle());
                            let _ = cg.thaw();
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            cg.freeze().map_err(|e| {
                                SandboxError::Launch(format!("freezing the sandbox: {e}"))
                            })?;
                        }
                        Err(e) => {
                            return Err(SandboxError::Capture(criu_dump_failed(
                                &tool, &e, restored,
                            )))
                        }
                    }
                }
            });
            match r {
                Ok((copied, dumped)) => Ok((copied, dumped, copy.sdir)),
                Err(SandboxError::Capture(why)) => Err(why),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
        .map_err(|e| format!("the CRIU attempt failed: {e}"))??;
        let ((method, frozen_ms), (dumped, stats), sdir) = done;
        let manifest = CriuManifest {
            dumped,
            image_bytes: stats.image_bytes,
            dump_ms: stats.duration.as_millis() as u64,
            contexts: contexts
                .iter()
                .map(|c| (c.id.clone(), c.language))
                .collect(),
            agent_log_seq,
            agent_exe: sb.runtime.agent_exe.clone(),
        };
        write_criu_manifest(&sdir, &manifest)
            .map_err(|e| format!("keeping the checkpoint: {e}"))?;
        let report = HibernationReport {
            method: HibernationMethod::Criu,
            method_reason: format!(
                "criu: CRIU checkpointed every process of the sandbox ({} MB dumped in {} ms; the \
                 source was frozen {frozen_ms} ms, its disk copied meanwhile); each clone is \
                 restored exactly",
                stats.image_bytes / 1_000_000,
                stats.duration.as_millis()
            ),
            contexts: criu_contexts(&manifest),
        };
        Ok((report, method, frozen_ms))
    }

    /// Remove a snapshot's files and its pins of template builds (its row is the caller's).
    fn discard_snapshot_files(&self, row: &crate::store::SnapshotRow) {
        let dir = self.snapshots_dir().join(&row.id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(snapshot = %row.id, error = %e, "removing a snapshot's files");
            }
        }
        lizard_template::store::unpin(&row.source.template_dir, &row.id);
        for b in &row.source.template_bases {
            lizard_template::store::unpin(b, &row.id);
        }
    }

    /// Delete a snapshot: its files go, its row stays (deleted) for usage. Clones made from it
    /// keep running (each has its own copy).
    pub async fn delete_snapshot(
        &self,
        row: &crate::store::SnapshotRow,
    ) -> Result<(), SandboxError> {
        let _files = FILES_LOCK.write().await;
        // Looked up again under the lock: two deletes at once remove it once.
        if self.store.get_snapshot(&row.id)?.is_none() {
            return Ok(());
        }
        self.store.mark_snapshot_deleted(&row.id, now_ms())?;
        let row = row.clone();
        let me = self.me.upgrade();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(me) = me {
                me.discard_snapshot_files(&row);
            }
        })
        .await;
        Ok(())
    }

    /// At start-up: remove snapshot directories that have no live row (a snapshot interrupted by
    /// a crash, or deleted while its files could not be removed).
    pub fn clean_snapshot_dirs(&self) {
        let Ok(dirs) = std::fs::read_dir(self.snapshots_dir()) else {
            return;
        };
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let live =
                valid_snapshot_id(&name) && matches!(self.store.get_snapshot(&name), Ok(Some(_)));
            if !live {
                tracing::info!(snapshot = %name, "removing an unfinished or deleted snapshot's files");
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
    }

    /// Start a new sandbox from snapshot `row` (a clone); in a task of its own, like a create.
    pub async fn clone_detached(
        self: &Arc<Self>,
        row: crate::store::SnapshotRow,
        req: CloneRequest,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        let this = self.clone();
        tokio::spawn(async move {
            let _files = FILES_LOCK.read().await;
            // Deleted while this waited: as unknown as any other id.
            if this.store.get_snapshot(&row.id)?.is_none() {
                return Err(SandboxError::SnapshotNotFound(row.id.clone()));
            }
            let image = this.snapshot_image(&row.id);
            this.start_clone(&row, Image::Copy(&image), req).await
        })
        .await
        .map_err(|e| SandboxError::Launch(format!("the clone task failed: {e}")))?
    }

    /// Fork sandbox `id`: a snapshot that is not kept, whose image becomes the new sandbox's.
    pub async fn fork_detached(
        self: &Arc<Self>,
        id: &str,
        req: CloneRequest,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        check_bounds("metadata", &req.metadata, METADATA_BOUNDS)?;
        let (this, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            // A temporary snapshot id: its directory is removed whatever happens (and at the
            // next start-up, as it has no row, should this server die meanwhile).
            let row = this
                .capture(&id, new_snapshot_id(), BTreeMap::new())
                .await?;
            let image = this.snapshot_image(&row.id);
            let out = this.start_clone(&row, Image::Move(&image), req).await;
            this.discard_snapshot_files(&row);
            out
        })
        .await
        .map_err(|e| SandboxError::Launch(format!("the fork task failed: {e}")))?
    }

    async fn start_clone(
        &self,
        row: &crate::store::SnapshotRow,
        image: Image<'_>,
        req: CloneRequest,
    ) -> Result<(Arc<Sandbox>, HibernationReport), SandboxError> {
        let src = &row.source;
        let timeout_ms = req.timeout_ms.unwrap_or(src.timeout_ms);
        if timeout_ms == 0 || timeout_ms > self.cfg.max_timeout_ms {
            return Err(SandboxError::Invalid(format!(
                "timeout_ms must be between 1 and {}",
                self.cfg.max_timeout_ms
            )));
        }
        check_bounds("metadata", &req.metadata, METADATA_BOUNDS)?;
        let on_timeout = req.on_timeout.unwrap_or(src.on_timeout);
        let limits = src.limits;
        let wanted = src
            .volumes
            .iter()
            .map(|v| (v.volume_id.clone(), v.mount_path.clone(), v.read_only))
            .collect();
        let (volumes, _claim) = self.claim_volumes(&req.project, wanted).await?;
        let egress = crate::egress::rules(&src.network.egress)?;
        let super::launch::NewPlace {
            id,
            dir,
            reserved: _reserved,
            id_base,
        } = self.new_place(limits)?;
        let started = std::time::Instant::now();
        let moved = matches!(image, Image::Move(_));
        let prepared = {
            let (dir, src_image) = match image {
                Image::Copy(p) => (dir.clone(), p.to_path_buf()),
                Image::Move(p) => (dir.clone(), p.to_path_buf()),
            };
            let max_bytes = (limits.disk_mb * 1024 * 1024).max(lizard_jail::disk::MIN_BYTES);
            let shift = lizard_jail::layer::IdShift {
                from_base: src.id_base,
                to_base: id_base,
                count: 65536,
            };
            let build = CloneBuild {
                template_dir: src.template_dir.clone(),
            };
            tokio::task::spawn_blocking(move || {
                prepare_clone(&dir, &src_image, moved, max_bytes, shift, &build)
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))
            .and_then(|r| r)
        };
        let fail = |e: SandboxError| {
            remove_files(&dir, Some(&dir.join("disk")));
            self.id_ranges.release(&id);
            e
        };
        if let Err(e) = prepared {
            return Err(fail(e));
        }
        let copy_ms = started.elapsed().as_millis() as u64;
        // Its layer trusts the source's egress CA: the clone's egress uses the same one.
        copy_egress_ca(&self.snapshots_dir().join(&row.id), &dir);
        // An exact snapshot: its CRIU images, copied (a fork's moved) into the clone's directory,
        // made for the clone's host id range and host name; the snapshot's own are never changed.
        let exact = if row.report.method == HibernationMethod::Criu {
            match self
                .stage_clone_images(row, &dir, moved, id_base, &id)
                .await
            {
                Ok(from) => Some(from),
                Err(e) => {
                    for b in std::iter::once(&src.template_dir).chain(&src.template_bases) {
                        lizard_template::store::unpin(b, &id);
                    }
                    return Err(fail(e));
                }
            }
        } else {
            None
        };
        let manifest = exact.as_ref().map(|(m, _)| m.clone());
        let launched = self
            .launch_or_restore_in(
                super::launch::Launch {
                    id: id.clone(),
                    dir: &dir,
                    project: &req.project,
                    template: &row.template,
                    envs: &src.envs,
                    limits,
                    volumes: &volumes,
                    egress: egress.as_ref().map(|_| &src.network),
                    fresh: false,
                    id_base: Some(id_base),
                    cpu_base_ms: 0,
                },
                exact.map(|(m, from)| (from, m.agent_exe)),
            )
            .await;
        if manifest.is_some() {
            remove_criu_images(&dir).await;
        }
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                for b in std::iter::once(&src.template_dir).chain(&src.template_bases) {
                    lizard_template::store::unpin(b, &id);
                }
                let e = match &manifest {
                    Some(_) => SandboxError::Launch(format!(
                        "restoring the snapshot's CRIU checkpoint: {e}"
                    )),
                    None => e,
                };
                return Err(fail(e));
            }
        };
        let _ = std::fs::remove_file(dir.join(CLONE_BUILD_FILE));
        let report = match &manifest {
            Some(m) => HibernationReport {
                method: HibernationMethod::Criu,
                method_reason: format!(
                    "criu: every process of the sandbox was restored exactly from the snapshot's \
                     CRIU checkpoint ({} MB, ready in {} ms), with this sandbox's own id, host \
                     ids, cgroup, network namespace, writable layer and agent socket{}",
                    m.image_bytes / 1_000_000,
                    started.elapsed().as_millis(),
                    if self.cfg.checkpoint.share_clone_memory {
                        "; its memory pages are merged with identical pages of other clones \
                         (--share-clone-memory)"
                    } else {
                        ""
                    }
                ),
                contexts: criu_contexts(m),
            },
            None => Capture::restore_per_language(&launched.agent, &row.report.method_reason).await,
        };
        tracing::info!(snapshot = %row.id, sandbox = %id, copy_ms,
            ready_ms = started.elapsed().as_millis() as u64, "sandbox cloned from a snapshot");
        let now = now_ms();
        let LaunchedSandbox {
            id,
            runtime,
            agent,
            egress,
            ..
        } = launched;
        let stored_row = SandboxRow {
            id: id.clone(),
            project: req.project.clone(),
            template: row.template.clone(),
            state: StoredState::Running,
            created_at_ms: now,
            timeout_at_ms: now + timeout_ms,
            ended_at_ms: None,
            metadata: req.metadata.clone(),
            envs: src.envs.clone(),
            runtime: serde_json::to_value(&runtime).unwrap_or_default(),
            limits: serde_json::to_value(limits).unwrap_or_default(),
            paused_remaining_ms: 0,
            on_timeout,
            timeout_ms,
            volumes: volumes.clone(),
            network: serde_json::to_value(&src.network).unwrap_or_default(),
        };
        let sb = Arc::new(Sandbox::new(
            &stored_row,
            limits,
            src.network.clone(),
            runtime,
            agent,
            egress,
        ));
        let stored = self
            .store
            .ensure_project(&stored_row.project)
            .and_then(|()| self.store.insert_sandbox(&stored_row));
        if let Err(e) = stored {
            destroy_unwatched(&sb.runtime, true);
            self.id_ranges.release(&id);
            return Err(e.into());
        }
        if let Some(m) = &manifest {
            // Its agent's execution log is the source's: only what runs from now on is its own.
            let usage = crate::store::UsageRow {
                sandbox_id: id.clone(),
                project: req.project.clone(),
                updated_at_ms: now,
                agent_log_seq: m.agent_log_seq,
                ..Default::default()
            };
            if let Err(e) = self.store.put_usage(&usage) {
                tracing::warn!(sandbox = %id, error = %e, "writing usage");
            }
        }
        self.serve_packages(&sb).await;
        if let Ok(mut m) = self.live.write() {
            m.insert(id.clone(), sb.clone());
        }
        self.watch(&id, sb.runtime.pid, None);
        self.timeouts_changed.notify_one();
        Ok((sb, report))
    }

    /// A clone's copy of snapshot `row`'s CRIU images at `<dir>/criu` (moved for a fork), with
    /// the user namespace's id maps moved to the clone's range `id_base` and the host name
    /// `id`, as a restore.
    async fn stage_clone_images(
        &self,
        row: &crate::store::SnapshotRow,
        dir: &Path,
        moved: bool,
        id_base: u32,
        id: &str,
    ) -> Result<(CriuManifest, lizard_jail::sandbox::RestoreFrom), SandboxError> {
        let Some(criu) = self.cfg.checkpoint.criu.clone() else {
            return Err(SandboxError::Conflict(format!(
                "snapshot {} is a CRIU checkpoint and this server has no usable CRIU ({})",
                row.id, self.cfg.checkpoint.detail
            )));
        };
        let sdir = self.snapshots_dir().join(&row.id);
        let (dir, from_base, id) = (dir.to_path_buf(), row.source.id_base, id.to_string());
        let lizard_bin = self.cfg.lizard_bin.clone();
        let mergeable = self.cfg.checkpoint.share_clone_memory;
        tokio::task::spawn_blocking(move || {
            let fail = |what: &str, e: String| SandboxError::Launch(format!("{what}: {e}"));
            let src = sdir.join(SNAPSHOT_CRIU_IMAGES);
            let dst = dir.join(CRIU_IMAGES);
            if moved {
                let _ = std::fs::remove_dir_all(&dst);
                std::fs::rename(&src, &dst).map_err(io_err(&dst))?;
            } else {
                copy_images(&src, &dst).map_err(|e| fail("copying the snapshot's images", e))?;
            }
            lizard_jail::checkpoint::rewrite_userns(&dst, from_base, id_base, 65536)
                .map_err(|e| fail("the clone's id maps", lizard_jail::error_chain(&e)))?;
            lizard_jail::checkpoint::rewrite_uts(&dst, &id)
                .map_err(|e| fail("the clone's host name", lizard_jail::error_chain(&e)))?;
            if mergeable {
                let m = lizard_jail::checkpoint::mark_mergeable(&dst).map_err(|e| {
                    fail(
                        "marking the clone's memory mergeable",
                        lizard_jail::error_chain(&e),
                    )
                })?;
                tracing::debug!(sandbox = %id, processes = m.images, mappings = m.mappings,
                    mib = m.bytes >> 20, "clone's memory marked mergeable");
            }
            read_criu_restore(&sdir, &dst, criu, &lizard_bin).ok_or_else(|| {
                SandboxError::Launch(format!(
                    "the snapshot's CRIU manifest in {} is missing or unreadable",
                    sdir.display()
                ))
            })
        })
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))?
    }

    /// The template build a clone's directory was made for (see [`CLONE_BUILD_FILE`]).
    pub(super) fn clone_build(dir: &Path) -> Option<PathBuf> {
        let bytes = std::fs::read(dir.join(CLONE_BUILD_FILE)).ok()?;
        serde_json::from_slice::<CloneBuild>(&bytes)
            .ok()
            .map(|b| b.template_dir)
    }
}

/// The API answer for a clone or fork: the new sandbox with its restore report.
pub fn clone_info(sb: &Sandbox, report: HibernationReport) -> SandboxInfo {
    let mut info = super::info(sb);
    info.restore = Some(report);
    info
}

/// How long a sandbox's disk copy may keep it frozen: a sparse copy still going then stops, the
/// snapshot fails and the sandbox runs on (a 10 GiB image of data copies in well under a minute
/// here; a host disk this slow would hold the sandbox frozen, and its lifecycle lock, for longer).
pub const FROZEN_COPY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// What [`copy_frozen`] copies: the sandbox's disk `image` (mounted on `mount`) into `dst`, with
/// its snapshot directory `sdir` made first (root's, 0700), the sandbox's cgroup `cg`.
struct FrozenCopy {
    sdir: PathBuf,
    image: PathBuf,
    mount: PathBuf,
    dst: PathBuf,
    cg: Cgroup,
    max_bytes: u64,
    processes_stay_frozen: bool,
}

/// Copy a running sandbox's disk image consistently (blocking): its processes frozen (unless
/// already), `while_frozen` run (a CRIU dump, which leaves a frozen cgroup frozen), its file
/// system frozen (`FIFREEZE`: clean on the image), the image copied (by [`FROZEN_COPY_DEADLINE`],
/// else the snapshot fails and the sandbox is thawed), both thawed (the processes
/// stay frozen with `processes_stay_frozen`). Returns how it was copied, how long the processes
/// were frozen, and what `while_frozen` gave.
fn copy_frozen<T>(
    c: &FrozenCopy,
    while_frozen: impl FnOnce() -> Result<T, SandboxError>,
) -> Result<((lizard_jail::disk::CopyMethod, u64), T), SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    let FrozenCopy {
        sdir,
        image,
        mount,
        dst,
        cg,
        max_bytes,
        processes_stay_frozen,
    } = c;
    let (max_bytes, processes_stay_frozen) = (*max_bytes, *processes_stay_frozen);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(sdir)
        .map_err(io_err(sdir))?;
    private_dir(sdir)?;
    if let Some(parent) = sdir.parent() {
        private_dir(parent)?;
    }
    let started = std::time::Instant::now();
    let copied = cg
        .freeze()
        .map_err(|e| SandboxError::Launch(format!("freezing the sandbox: {e}")))
        .and_then(|()| {
            let extra = while_frozen()?;
            // Frozen still (should the dump have thawed it, frozen again: memory and disk match).
            if !cg.is_frozen().unwrap_or(false) {
                cg.freeze()
                    .map_err(|e| SandboxError::Launch(format!("freezing the sandbox: {e}")))?;
            }
            let frozen = lizard_jail::disk::FrozenFs::freeze(mount)
                .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
            let deadline = std::time::Instant::now() + FROZEN_COPY_DEADLINE;
            let copied = lizard_jail::disk::copy_image(image, dst, max_bytes, Some(deadline))
                .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)));
            frozen
                .thaw()
                .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
            copied.map(|c| (c, extra))
        });
    // Thawed whatever happened (a freeze that timed out may have left it half-frozen).
    if !processes_stay_frozen {
        cg.thaw()
            .map_err(|e| SandboxError::Launch(format!("thawing the sandbox: {e}")))?;
    }
    let ((method, _), extra) = copied?;
    Ok(((method, started.elapsed().as_millis() as u64), extra))
}

/// Copy a directory of CRIU images (regular files only, no link followed; CRIU writes no
/// sub-directories) into a fresh root-only directory `dst` (blocking). The memory pages
/// (`pages-*.img`, nearly all of the bytes) are hard links, not copies: a restore only reads them
/// (no `--auto-dedup`), nothing else writes them, and they stay root's (`open_to_restored_tasks`
/// leaves linked files alone), so a clone's staging costs no copy of its memory.
fn copy_images(src: &Path, dst: &Path) -> Result<(), String> {
    let images = lizard_jail::checkpoint::ImagesDir::create(dst).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .take(100_000)
    {
        let entry = entry.map_err(|e| e.to_string())?;
        if entry.file_type().map_err(|e| e.to_string())?.is_file() {
            let to = images.path.join(entry.file_name());
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let linked = name.starts_with("pages-")
                && name.ends_with(".img")
                && std::fs::hard_link(entry.path(), &to).is_ok();
            if !linked {
                std::fs::copy(entry.path(), &to)
                    .map_err(|e| format!("{}: {e}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Make a clone's directory (blocking): the snapshot's image copied (or, for a fork, moved) to
/// `<dir>/disk.img`, mounted on `<dir>/disk`, its owners moved to the clone's host id range, and
/// the build its layer was made on written down for `launch_in`.
fn prepare_clone(
    dir: &Path,
    src_image: &Path,
    moved: bool,
    max_bytes: u64,
    shift: lizard_jail::layer::IdShift,
    build: &CloneBuild,
) -> Result<(), SandboxError> {
    let launch = |e: String| SandboxError::Launch(e);
    std::fs::create_dir_all(dir.join("rootfs")).map_err(io_err(dir))?;
    private_dir(dir)?;
    let img = dir.join("disk.img");
    if moved {
        std::fs::rename(src_image, &img).map_err(io_err(&img))?;
    } else {
        lizard_jail::disk::copy_image(src_image, &img, max_bytes, None)
            .map_err(|e| launch(lizard_jail::error_chain(&e)))?;
    }
    let disk = dir.join("disk");
    lizard_jail::disk::ensure_mounted(&img, &disk)
        .map_err(|e| launch(lizard_jail::error_chain(&e)))?;
    if shift.from_base != shift.to_base {
        lizard_jail::layer::shift_owners(&disk, shift, shift_limits()).map_err(|e| {
            launch(format!(
                "moving the snapshot's files to the new sandbox's ids: {}",
                lizard_jail::error_chain(&e)
            ))
        })?;
    }
    let path = dir.join(CLONE_BUILD_FILE);
    std::fs::write(&path, serde_json::to_vec(build).unwrap_or_default()).map_err(io_err(&path))
}

/// Copy the egress CA file (`crate::egress::CA_FILE`, host-written, in a root-only directory) of
/// `from` into `to`, if there is one: a snapshot keeps its sandbox's, a clone gets its snapshot's.
/// Blocking (a small file).
fn copy_egress_ca(from: &Path, to: &Path) {
    let src = from.join(crate::egress::CA_FILE);
    if !src.is_file() {
        return;
    }
    let dst = to.join(crate::egress::CA_FILE);
    let copied = std::fs::read(&src).and_then(|bytes| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dst)
            .and_then(|mut f| f.write_all(&bytes))
    });
    if let Err(e) = copied {
        tracing::warn!(from = %src.display(), error = %e, "copying the sandbox's egress CA");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_ids_are_prefixed_and_checked() {
        let a = new_snapshot_id();
        assert!(valid_snapshot_id(&a), "{a}");
        assert_ne!(a, new_snapshot_id());
        for bad in [
            "",
            "snap_",
            "snap_../../etc",
            "vol_abcdefghijklmnopqrst",
            &a.to_uppercase(),
        ] {
            assert!(!valid_snapshot_id(bad), "{bad}");
        }
    }

    #[test]
    fn storage_is_size_times_lifetime() {
        let row = crate::store::SnapshotRow {
            id: "snap_x".into(),
            project: "p".into(),
            sandbox_id: "s".into(),
            template: "t".into(),
            created_at_ms: 0,
            deleted_at_ms: Some(3_600_000),
            size_bytes: 2 * 1024 * 1024 * 1024,
            frozen_ms: None,
            report: HibernationReport {
                method: HibernationMethod::PerLanguage,
                method_reason: String::new(),
                contexts: vec![],
            },
            metadata: BTreeMap::new(),
            source: SnapshotSource {
                limits: SandboxLimits::default(),
                envs: BTreeMap::new(),
                network: NetworkRequest::default(),
                on_timeout: TimeoutAction::Kill,
                timeout_ms: 1,
                volumes: vec![],
                template_dir: "/t".into(),
                template_bases: vec![],
                id_base: 1,
            },
        };
        assert!((gib_hours(&row, u64::MAX) - 2.0).abs() < 1e-9);
        let mut live = row.clone();
        live.deleted_at_ms = None;
        assert!((gib_hours(&live, 1_800_000) - 1.0).abs() < 1e-9);
    }
}
