//! Hibernation, agent side: save every context's kernel state into a directory, and, in a freshly
//! started agent, recreate the contexts (same ids, languages, working directories, default flags and
//! execution counts) and load their state back.
//!
//! Layout of the directory: `manifest.json` (the contexts and what each could not save) and one
//! sub-directory per context id, written and read by the kernel itself (`snapshot` / `restore`
//! control messages, `kernels/PROTOCOL.md`). Not here: stopping or relaunching the sandbox (the
//! server does that), checkpointing processes (there is no CRIU path).

use crate::context::Contexts;
use crate::kernel::HibernateOp;
use lizard_proto::{
    ContextId, ContextReport, HibernationMethod, HibernationReport, Language, LostItem,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a running cell may delay a snapshot of its context before the context is reported lost.
const BUSY_WAIT: Duration = Duration::from_secs(5);
/// How long one kernel may take to save or load its state.
const KERNEL_OP_TIMEOUT: Duration = Duration::from_secs(180);
/// The id of hibernation control messages (executions count from 1).
const OP_ID: u64 = 0;
const MANIFEST: &str = "manifest.json";

/// Failures of a whole snapshot or restore (per-context failures are reported as lost items).
#[derive(Debug, thiserror::Error)]
pub enum HibernateError {
    #[error("the hibernation directory must be an absolute path")]
    BadDir,
    #[error("hibernation I/O on {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the hibernation manifest {path} is unreadable")]
    Manifest {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    contexts: Vec<SavedContext>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedContext {
    id: ContextId,
    language: Language,
    /// The context's configured working directory (the kernel saves its current one itself).
    cwd: PathBuf,
    is_default: bool,
    execution_count: u64,
    /// The kernel's state was saved (false: only the context itself is recreated).
    saved: bool,
    lost: Vec<LostItem>,
    /// The context's limits (its new cgroup gets them again).
    #[serde(default)]
    limits: Option<lizard_proto::ContextLimits>,
    /// The context's uid slot (`crate::users`): the restored context gets it back when free.
    #[serde(default)]
    uid_slot: Option<u32>,
}

/// Make `dir` the kernel's own (mode 0700, owner `ids`: no other context may read the state
/// saved in it), and everything already in it (a restore by a kernel of another uid). Symlinks
/// are never followed (`lchown`); the walk is bounded.
fn give_to(dir: &Path, ids: Option<crate::users::Ids>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let Some(ids) = ids else { return Ok(()) };
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 1_000_000 {
            return Err(std::io::Error::other("too many saved files"));
        }
        std::os::unix::fs::lchown(&p, Some(ids.uid), Some(ids.gid))?;
        let meta = std::fs::symlink_metadata(&p)?;
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
    }
    Ok(())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HibernateError + '_ {
    move |source| HibernateError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn lost_all(reason: String) -> Vec<LostItem> {
    vec![LostItem {
        name: "*".into(),
        reason,
    }]
}

/// Save every context's state into `dir` (emptied first).
pub async fn snapshot(
    contexts: &Contexts,
    dir: &Path,
) -> Result<HibernationReport, HibernateError> {
    if !dir.is_absolute() {
        return Err(HibernateError::BadDir);
    }
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    tokio::fs::create_dir_all(dir).await.map_err(io_err(dir))?;
    let mut saved = Vec::new();
    let mut reports = Vec::new();
    for h in contexts.handles() {
        let ctx_dir = dir.join(h.id.as_str());
        if let Err(e) = give_to(&ctx_dir, h.kernel_ids()) {
            tracing::warn!(context = %h.id, error = %e, "preparing the context's state directory");
        }
        let (ok, items, lost) = match h.idle_kernel(BUSY_WAIT).await {
            None => (
                false,
                Vec::new(),
                lost_all(format!(
                    "a cell was still running after {} s; the context's state was not saved",
                    BUSY_WAIT.as_secs()
                )),
            ),
            Some(mut slot) => match slot.as_mut() {
                None => (false, Vec::new(), Vec::new()),
                Some(k) => {
                    match k
                        .hibernate_op(HibernateOp::Snapshot, OP_ID, &ctx_dir, KERNEL_OP_TIMEOUT)
                        .await
                    {
                        Ok(a) => (a.ok, a.items, a.lost),
                        Err(e) => (false, Vec::new(), lost_all(e.to_string())),
                    }
                }
            },
        };
        saved.push(SavedContext {
            id: h.id.clone(),
            language: h.language,
            cwd: h.cwd.clone(),
            is_default: h.is_default,
            execution_count: h.execution_count(),
            saved: ok,
            lost: lost.clone(),
            limits: h.limits,
            uid_slot: h.uid_slot(),
        });
        reports.push(ContextReport {
            id: h.id.clone(),
            language: h.language,
            restored: items,
            lost,
        });
    }
    let path = dir.join(MANIFEST);
    let bytes = serde_json::to_vec_pretty(&Manifest { contexts: saved }).unwrap_or_default();
    tokio::fs::write(&path, bytes)
        .await
        .map_err(io_err(&path))?;
    Ok(report(reports))
}

/// Recreate the contexts saved in `dir` and load their state, then delete `dir` (the state is in
/// the kernels again; the host never walks this directory, which the sandbox could have written).
/// A context that cannot be recreated is reported with everything lost; the others are restored
/// regardless.
pub async fn restore(contexts: &Contexts, dir: &Path) -> Result<HibernationReport, HibernateError> {
    if !dir.is_absolute() {
        return Err(HibernateError::BadDir);
    }
    let path = dir.join(MANIFEST);
    let bytes = tokio::fs::read(&path).await.map_err(io_err(&path))?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|source| HibernateError::Manifest {
            path: path.display().to_string(),
            source,
        })?;
    let mut reports = Vec::new();
    for c in manifest.contexts {
        let mut lost = c.lost.clone();
        let cwd = c.cwd.is_dir().then(|| c.cwd.display().to_string());
        let h = match contexts
            .create_with_id(
                c.id.clone(),
                c.language,
                cwd,
                c.is_default,
                c.limits,
                c.uid_slot,
            )
            .await
        {
            Ok(h) => h,
            Err(e) => {
                lost.extend(lost_all(format!("the context could not be recreated: {e}")));
                reports.push(ContextReport {
                    id: c.id,
                    language: c.language,
                    restored: Vec::new(),
                    lost,
                });
                continue;
            }
        };
        if c.is_default {
            contexts.set_default(&h).await;
        }
        let mut restored = Vec::new();
        let ctx_dir = dir.join(c.id.as_str());
        if c.saved {
            if let Err(e) = give_to(&ctx_dir, h.kernel_ids()) {
                lost.extend(lost_all(format!("the saved state is unusable: {e}")));
            }
            if let Some(mut slot) = h.idle_kernel(BUSY_WAIT).await {
                if let Some(k) = slot.as_mut() {
                    match k
                        .hibernate_op(HibernateOp::Restore, OP_ID, &ctx_dir, KERNEL_OP_TIMEOUT)
                        .await
                    {
                        Ok(a) => {
                            restored = a.items;
                            lost.extend(a.lost);
                        }
                        Err(e) => lost.extend(lost_all(e.to_string())),
                    }
                }
            }
        }
        h.set_execution_count(c.execution_count);
        reports.push(ContextReport {
            id: c.id,
            language: c.language,
            restored,
            lost,
        });
    }
    if let Err(e) = tokio::fs::remove_dir_all(dir).await {
        tracing::warn!(dir = %dir.display(), error = %e, "removing the restored hibernation state");
    }
    Ok(report(reports))
}

fn report(contexts: Vec<ContextReport>) -> HibernationReport {
    HibernationReport {
        method: HibernationMethod::PerLanguage,
        method_reason: "each kernel saves and reloads its own state".into(),
        contexts,
    }
}
