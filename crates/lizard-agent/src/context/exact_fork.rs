//! The agent's side of an exact fork of a context (docs/ARCHITECTURE.md, "Fork of a context"):
//! the host checkpoints the source kernel's process tree with CRIU and restores it into a pid
//! namespace of its own; the agent prepares the new context's pipes and cgroup, holds the source
//! meanwhile, and then takes on the restored kernel.
//!
//! - [`Contexts::prepare_fork`]: a live fork first (a few milliseconds); when it carried
//!   everything it is the answer. Otherwise it is deleted and the plan for a checkpoint is made:
//!   the new context's id and cgroup, fresh pipes (the kernel's ends stay open in the agent for the
//!   host to take with `pidfd_getfd`), and the source's kernel lock held by a task until the host
//!   adopts or aborts — at most [`HOLD`]: no cell starts in the source while it is dumped.
//! - [`Contexts::adopt_fork`]: the restored kernel becomes the new context's (checked like a live
//!   fork's: a live process of the context's ids, in its cgroup).
//! - [`Contexts::abort_fork`]: nothing of the plan stays.

use super::{remove_cgroup_later, ContextError, ContextHandle, Contexts};
use crate::kernel::{AdoptedChannels, Kernel, KernelError};
use lizard_jail::delegation::ContextCgroup;
use lizard_proto::{CheckpointPlan, ContextId, ContextLimits, ForkChannel, LostItem};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The longest the source is held for a checkpoint the host has not finished.
pub const HOLD: Duration = Duration::from_secs(60);

/// A fork waiting for the host's checkpoint.
pub(crate) struct PendingFork {
    src: Arc<ContextHandle>,
    limits: Option<ContextLimits>,
    cgroup: Option<ContextCgroup>,
    /// The agent's ends: stdout, stderr, events (read) and control or stdin (write).
    ours: [OwnedFd; 4],
    /// The kernel's ends, for the host to take (closed once adopted or aborted).
    _theirs: Vec<OwnedFd>,
    /// Dropping it lets the source's kernel go.
    _release: oneshot::Sender<()>,
    made: Instant,
}

impl Contexts {
    /// Live-fork `id`; if that loses something, plan an exact fork instead (see the module docs).
    pub async fn prepare_fork(
        &self,
        id: &ContextId,
        limits: Option<ContextLimits>,
    ) -> Result<PreparedForkOut, ContextError> {
        self.drop_stale_forks();
        let (h, lost) = self.fork(id, limits).await?;
        if lost.is_empty() {
            return Ok(PreparedForkOut::Live(h, lost));
        }
        // The live fork goes; the source is held for the checkpoint.
        let _ = self.delete(&h.id).await;
        let src = self.get(id)?;
        let (held_tx, held_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        {
            let src = src.clone();
            tokio::spawn(async move {
                let Ok(slot) = src.kernel.try_lock() else {
                    let _ = held_tx.send(None);
                    return;
                };
                let k = slot.as_ref().map(|k| (k.pid(), k.channel_inodes()));
                let _ = held_tx.send(k);
                // Until adopted or aborted (the sender dropped), or at most HOLD.
                let _ = tokio::time::timeout(HOLD, release_rx).await;
                drop(slot);
            });
        }
        let (kernel_pid, inodes) = match held_rx.await {
            Ok(Some(k)) if !src.busy.load(Ordering::SeqCst) => k,
            Ok(None) => return Err(ContextError::NoKernel(id.clone())),
            _ => return Err(ContextError::Busy(id.clone())),
        };
        let new = ContextId(crate::ids::new_id());
        let limits = limits.or(src.limits).filter(|l| !l.is_empty());
        let cgroup = self.context_cgroup(&new, limits.as_ref())?;
        let pipe = |what: &'static str| {
            lizard_jail::cloexec_pipe()
                .map_err(|source| ContextError::Kernel(KernelError::Pipe { what, source }))
        };
        let (out_r, out_w) = pipe("stdout")?;
        let (err_r, err_w) = pipe("stderr")?;
        let (evt_r, evt_w) = pipe("event")?;
        let (ctl_r, ctl_w) = pipe("control")?;
        let ours = [&out_w, &err_w, &evt_w, &ctl_r];
        let channels = inodes
            .iter()
            .zip(ours)
            .map(|(ino, fd)| ForkChannel {
                pipe_inode: *ino,
                agent_fd: fd.as_raw_fd(),
            })
            .collect();
        let plan = CheckpointPlan {
            context_id: new.clone(),
            kernel_pid,
            channels,
            cgroup: cgroup.as_ref().map(|_| super::cgroup_name(&new)),
            lost,
        };
        let pending = PendingFork {
            src,
            limits,
            cgroup,
            ours: [out_r, err_r, evt_r, ctl_w],
            _theirs: vec![out_w, err_w, evt_w, ctl_r],
            _release: release_tx,
            made: Instant::now(),
        };
        if let Ok(mut p) = self.pending.lock() {
            p.insert(new, pending);
        }
        Ok(PreparedForkOut::Checkpoint(plan))
    }

    /// Take on the kernel the host restored for the planned fork `new` (see the module docs).
    pub async fn adopt_fork(
        &self,
        new: &ContextId,
        kernel_pid: i32,
    ) -> Result<(Arc<ContextHandle>, ContextId), ContextError> {
        let p = self.take_pending(new)?;
        let PendingFork {
            src,
            limits,
            cgroup,
            ours: [out, err, events, control],
            ..
        } = p;
        let scratch = format!("ctx-{}", new.0);
        let others = self.kernel_pids();
        let adopted = Kernel::adopt(
            &self.cfg.kernels,
            src.language,
            kernel_pid,
            &scratch,
            src.kernel_ids(),
            AdoptedChannels {
                out,
                err,
                events,
                control,
            },
            |pid| others.contains(&pid),
        )
        .await;
        let in_cgroup = match (&adopted, &cgroup) {
            (Ok(_), Some(cg)) => cg.holds_all_threads_of(kernel_pid).unwrap_or(false),
            _ => true,
        };
        let kernel = match adopted {
            Ok(k) if in_cgroup => k,
            other => {
                // Whatever was restored goes with the cgroup.
                if let Some(cg) = cgroup {
                    remove_cgroup_later(cg, None);
                }
                return Err(match other {
                    Err(e) => e.into(),
                    Ok(_) => KernelError::ForkFailed {
                        language: src.language,
                        message: "the restored kernel is not in the fork's cgroup".into(),
                    }
                    .into(),
                });
            }
        };
        let handle = Arc::new(ContextHandle::fork_of(
            &src,
            new.clone(),
            kernel,
            src.execution_count(),
            scratch,
            limits,
            cgroup,
        ));
        tracing::debug!(context = %new, source = %src.id, pid = kernel_pid, "context forked exactly");
        if let Ok(mut m) = self.map.write() {
            m.insert(new.clone(), handle.clone());
        }
        Ok((handle, src.id.clone()))
    }

    /// The planned fork `new`, out of the table.
    fn take_pending(&self, new: &ContextId) -> Result<PendingFork, ContextError> {
        self.pending
            .lock()
            .ok()
            .and_then(|mut m| m.remove(new))
            .ok_or_else(|| ContextError::NotFound(new.clone()))
    }

    /// Forget the planned fork `new` (its cgroup, pipes, and the hold on the source).
    pub fn abort_fork(&self, new: &ContextId) -> Result<(), ContextError> {
        let p = self.take_pending(new)?;
        if let Some(cg) = p.cgroup {
            remove_cgroup_later(cg, None);
        }
        Ok(())
    }

    /// Planned forks older than [`HOLD`] (their host gave up) go.
    fn drop_stale_forks(&self) {
        let stale: Vec<ContextId> = self
            .pending
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, p)| p.made.elapsed() > HOLD)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in stale {
            let _ = self.abort_fork(&id);
        }
    }
}

/// What [`Contexts::prepare_fork`] made.
pub enum PreparedForkOut {
    Live(Arc<ContextHandle>, Vec<LostItem>),
    Checkpoint(CheckpointPlan),
}
