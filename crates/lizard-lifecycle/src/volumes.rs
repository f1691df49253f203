//! Persistent volumes, server side: create, find, list and delete a project's named volumes, keep
//! each one's file system mounted on the host while sandboxes may use it, and meter its storage.
//!
//! A volume is a sparse ext4 image `<data>/volumes/<id>.img` loop-mounted at `<data>/volumes/<id>/`
//! (see `lizard_jail::volume`); a sandbox gets a bind of that directory at its mount path. The
//! host mount is made on first use (create, or a sandbox that mounts the volume) and kept until the
//! volume is deleted or the server shuts down with no sandbox using it. It is never mounted twice:
//! every mount, unmount and delete runs under one lock, and a volume used by a live sandbox (or by
//! one being launched, counted in `pending`) is never unmounted.
//!
//! Not here: which sandboxes are live or how they are killed (`crate::sandboxes`, which owns a
//! [`Volumes`] and does the in-use checks); HTTP (`crate::api`).

use crate::store::{now_ms, Store, StoreError, VolumeRow};
use lizard_proto::volume::{MAX_VOLUME_SIZE_BYTES, MIN_VOLUME_SIZE_BYTES};
use lizard_proto::{VolumeInfo, VolumeUsage};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Volume failures.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {0:?} not found")]
    NotFound(String),
    #[error("volume {0:?} already exists in this project")]
    Exists(String),
    #[error("volume {name:?} is mounted by sandbox(es) {}: kill them first or delete with force=true", sandboxes.join(", "))]
    InUse {
        name: String,
        sandboxes: Vec<String>,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("volume file system")]
    Host(#[from] lizard_jail::volume::VolumeError),
    #[error("volume task failed: {0}")]
    Task(String),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    NoSpace(#[from] crate::storage::Insufficient),
}

impl From<StoreError> for VolumeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::VolumeExists(n) => VolumeError::Exists(n),
            e => VolumeError::Store(e),
        }
    }
}

/// A new volume id: `vol_` + 20 characters of `[a-z0-9]`.
pub fn new_volume_id() -> String {
    format!("vol_{}", crate::ids::new_sandbox_id())
}

/// The volumes of one server.
pub struct Volumes {
    /// The data dir's disk commitments (sandbox disks and volumes alike).
    pub storage: crate::storage::Storage,
    dir: PathBuf,
    /// Host uid and gid of the sandbox user (owner of a new volume's root directory).
    owner: (u32, u32),
    store: Arc<Store>,
    /// Held for every mount, unmount and delete (and while a launch claims its volumes).
    pub(crate) lock: tokio::sync::Mutex<()>,
    /// Sandboxes being launched with each volume (not yet live, already counted as users).
    pending: std::sync::Mutex<HashMap<String, usize>>,
}

/// A launch's claim on its volumes: they count as in use until it is dropped (also when the
/// create request is abandoned mid-way).
pub(crate) struct Claim<'a> {
    volumes: &'a Volumes,
    ids: Vec<String>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut pending = self.volumes.pending_map();
        for id in &self.ids {
            if let Some(n) = pending.get_mut(id) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    pending.remove(id);
                }
            }
        }
    }
}

impl Volumes {
    /// `disk_overcommit`: see [`crate::storage::Storage::new`].
    pub fn new(
        data_dir: &Path,
        owner: (u32, u32),
        store: Arc<Store>,
        disk_overcommit: f64,
    ) -> Volumes {
        Volumes {
            storage: crate::storage::Storage::new(data_dir, disk_overcommit),
            dir: data_dir.join("volumes"),
            owner,
            store,
            lock: tokio::sync::Mutex::new(()),
            pending: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a launch as a user of `ids` until the returned claim is dropped. The caller holds
    /// `lock`, so no delete sees the volumes between their lookup and this count.
    pub(crate) fn claim(&self, ids: Vec<String>) -> Claim<'_> {
        let mut pending = self.pending_map();
        for id in &ids {
            *pending.entry(id.clone()).or_default() += 1;
        }
        drop(pending);
        Claim { volumes: self, ids }
    }

    /// Whether a launch with volume `id` is in progress.
    pub(crate) fn is_pending(&self, id: &str) -> bool {
        self.pending_map().get(id).copied().unwrap_or(0) > 0
    }

    pub fn image(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.img"))
    }

    /// The host directory the volume is mounted at (what sandboxes bind).
    pub fn mount_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn ensure_dir(&self) -> Result<(), VolumeError> {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(lizard_jail::volume::VolumeError::Io(lizard_jail::StepIo {
                step: "creating the volumes directory",
                path: self.dir.clone(),
                source,
            })
            .into()),
        }
    }

    /// Create a volume of `project` (its file system made and mounted).
    pub async fn create(
        &self,
        project: &str,
        name: &str,
        size_limit_bytes: Option<u64>,
    ) -> Result<VolumeRow, VolumeError> {
        if !lizard_proto::valid_volume_name(name) {
            return Err(VolumeError::Invalid(format!(
                "invalid volume name {name:?}: 1-63 of a-z 0-9 . _ -, starting with a letter or \
                 digit, not with vol_"
            )));
        }
        let size = size_limit_bytes.unwrap_or(lizard_proto::volume::DEFAULT_VOLUME_SIZE_BYTES);
        if !(MIN_VOLUME_SIZE_BYTES..=MAX_VOLUME_SIZE_BYTES).contains(&size) {
            return Err(VolumeError::Invalid(format!(
                "size_limit_bytes must be between {MIN_VOLUME_SIZE_BYTES} and {MAX_VOLUME_SIZE_BYTES}"
            )));
        }
        let row = VolumeRow {
            id: new_volume_id(),
            project: project.to_string(),
            name: name.to_string(),
            size_limit_bytes: size,
            created_at_ms: now_ms(),
            updated_at_ms: now_ms(),
            ..Default::default()
        };
        // A taken name is the clearer answer than a storage refusal (the insert below, under the
        // lock, still refuses a name taken meanwhile).
        if self.store.find_volume(project, name)?.is_some() {
            return Err(VolumeError::Exists(name.to_string()));
        }
        // Before anything is made: the image's size must fit the data dir's file system.
        let _reserved = self
            .storage
            .reserve(&self.image(&row.id), size, &format!("volume {name:?}"))
            .map_err(VolumeError::NoSpace)?;
        self.ensure_dir()?;
        let _guard = self.lock.lock().await;
        self.store.ensure_project(project)?;
        self.store.insert_volume(&row)?;
        let (image, dir, owner) = (self.image(&row.id), self.mount_dir(&row.id), self.owner);
        let made = tokio::task::spawn_blocking(move || {
            lizard_jail::volume::create_image(&image, &dir, size, owner)
        })
        .await
        .map_err(|e| VolumeError::Task(e.to_string()));
        if let Err(e) = made.and_then(|r| r.map_err(VolumeError::from)) {
            let _ = self.store.remove_volume_row(&row.id);
            return Err(e);
        }
        Ok(row)
    }

    /// Mount the volume on the host unless it is. The caller holds `lock`.
    pub(crate) async fn ensure_mounted(&self, id: &str) -> Result<(), VolumeError> {
        let (image, dir) = (self.image(id), self.mount_dir(id));
        tokio::task::spawn_blocking(move || lizard_jail::volume::mount(&image, &dir))
            .await
            .map_err(|e| VolumeError::Task(e.to_string()))??;
        Ok(())
    }

    /// Unmount and remove the volume's files, and mark it deleted (its usage stays). The caller
    /// holds `lock` and has checked that no sandbox uses it.
    pub(crate) async fn destroy(&self, row: &VolumeRow) -> Result<(), VolumeError> {
        self.sample_one(row);
        let (image, dir) = (self.image(&row.id), self.mount_dir(&row.id));
        tokio::task::spawn_blocking(move || lizard_jail::volume::destroy(&image, &dir))
            .await
            .map_err(|e| VolumeError::Task(e.to_string()))??;
        self.store.mark_volume_deleted(&row.id, now_ms())?;
        Ok(())
    }

    /// Unmount every volume for which `in_use` is false (at shutdown: sandboxes that outlive the
    /// server keep theirs mounted, and the next server finds them so).
    pub async fn unmount_unused(&self, in_use: impl Fn(&str) -> bool) {
        let _guard = self.lock.lock().await;
        let Ok(rows) = self.store.list_volumes(None, false) else {
            return;
        };
        for row in rows {
            if in_use(&row.id) || self.is_pending(&row.id) {
                continue;
            }
            let dir = self.mount_dir(&row.id);
            if let Err(e) =
                tokio::task::spawn_blocking(move || lizard_jail::volume::unmount(&dir)).await
            {
                tracing::warn!(volume = %row.id, error = %e, "unmounting a volume");
            }
        }
    }

    /// Bytes in use now (the file system's own count when mounted, else the image's disk blocks).
    fn used_bytes(&self, row: &VolumeRow) -> u64 {
        lizard_jail::volume::used_bytes(&self.image(&row.id), &self.mount_dir(&row.id))
            .unwrap_or(row.used_bytes)
    }

    /// Bring one volume's GiB-hours up to date (bytes in use × time since the last sample).
    fn sample_one(&self, row: &VolumeRow) -> u64 {
        let used = self.used_bytes(row);
        let now = now_ms();
        let since = row.updated_at_ms.max(row.created_at_ms);
        let hours = now.saturating_sub(since) as f64 / 3_600_000.0;
        // Integrate the average of the previous and the current sample (trapezoid).
        let avg = (row.used_bytes + used) as f64 / 2.0;
        let gib_hours = row.gib_hours + avg / GIB * hours;
        if let Err(e) = self.store.put_volume_usage(&row.id, gib_hours, used, now) {
            tracing::warn!(volume = %row.id, error = %e, "writing volume usage");
        }
        used
    }

    /// Sample every live volume (of `project`, or all).
    pub fn sample(&self, project: Option<&str>) {
        if let Ok(rows) = self.store.list_volumes(project, false) {
            for row in rows {
                self.sample_one(&row);
            }
        }
    }

    /// The API view of a volume.
    pub fn info(&self, row: &VolumeRow, mounted_by: Vec<String>) -> VolumeInfo {
        VolumeInfo {
            volume_id: row.id.clone(),
            project: row.project.clone(),
            name: row.name.clone(),
            size_limit_bytes: row.size_limit_bytes,
            used_bytes: self.used_bytes(row),
            created_at_ms: row.created_at_ms,
            mounted_by,
        }
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

impl From<&VolumeRow> for VolumeUsage {
    fn from(r: &VolumeRow) -> Self {
        VolumeUsage {
            volume_id: r.id.clone(),
            name: r.name.clone(),
            gib_hours: r.gib_hours,
            used_bytes: r.used_bytes,
            deleted: r.deleted_at_ms.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_unique() {
        let a = new_volume_id();
        assert!(a.starts_with("vol_") && a.len() == 24);
        assert_ne!(a, new_volume_id());
        assert!(!lizard_proto::valid_volume_name(&a));
    }

    #[test]
    fn a_claim_counts_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&d.path().join("db")).unwrap());
        let v = Volumes::new(d.path(), (1, 1), store, 1.0);
        let a = v.claim(vec!["vol_a".into()]);
        let b = v.claim(vec!["vol_a".into(), "vol_b".into()]);
        assert!(v.is_pending("vol_a") && v.is_pending("vol_b"));
        drop(b);
        assert!(v.is_pending("vol_a") && !v.is_pending("vol_b"));
        drop(a);
        assert!(!v.is_pending("vol_a"));
    }

    #[tokio::test]
    async fn bad_names_and_sizes_are_refused_before_any_disk_work() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&d.path().join("db")).unwrap());
        let v = Volumes::new(d.path(), (1, 1), store, 1.0);
        for (name, size) in [
            ("Bad", None),
            ("../x", None),
            ("ok", Some(1)),
            ("ok", Some(u64::MAX)),
        ] {
            assert!(matches!(
                v.create("p", name, size).await,
                Err(VolumeError::Invalid(_))
            ));
        }
        assert!(!d.path().join("volumes").exists());
    }
}
