//! Timeouts (kill or pause when a sandbox's time is up, hibernation after `--hibernate-after`) and
//! the watch on each sandbox's PID 1 (an exit is cleaned up like a kill).

use super::*;

impl Sandboxes {
    /// Move the sandbox's timeout to `timeout_ms` from now.
    pub fn set_timeout(&self, id: &str, timeout_ms: u64) -> Result<u64, SandboxError> {
        self.move_timeout(id, timeout_ms, false)
    }

    /// [`Self::set_timeout`] that only ever pushes the end later (E2B's `connect`): a timeout
    /// ending before the current one leaves it as it is. Returns the end time in force.
    pub fn extend_timeout(&self, id: &str, timeout_ms: u64) -> Result<u64, SandboxError> {
        self.move_timeout(id, timeout_ms, true)
    }

    fn move_timeout(
        &self,
        id: &str,
        timeout_ms: u64,
        only_later: bool,
    ) -> Result<u64, SandboxError> {
        if timeout_ms == 0 || timeout_ms > self.cfg.max_timeout_ms {
            return Err(SandboxError::Invalid(format!(
                "timeout_ms must be between 1 and {}",
                self.cfg.max_timeout_ms
            )));
        }
        let sb = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        let at = now_ms() + timeout_ms;
        if only_later && at <= sb.timeout_at_ms() {
            return Ok(sb.timeout_at_ms());
        }
        sb.timeout_at_ms.store(at, Ordering::SeqCst);
        sb.timeout_ms.store(timeout_ms, Ordering::SeqCst);
        self.store.set_timeout(id, at)?;
        self.store.set_timeout_ms(id, timeout_ms)?;
        self.timeouts_changed.notify_one();
        Ok(at)
    }

    /// Kill (or pause) sandboxes whose timeout has passed, and hibernate those paused longer than
    /// `hibernate_after`; runs until the process ends. Each action is a task of its own (at most
    /// one per sandbox at a time), so a sandbox whose agent is slow delays nobody else's timeout.
    pub async fn run_timeouts(self: Arc<Self>) {
        // The actions running, by sandbox, and when each started.
        let busy: Arc<Mutex<HashMap<String, (TimedAction, std::time::Instant)>>> =
            Default::default();
        // Start `action` on `sb` unless one is still running for it; `false` if one is.
        let start = |sb: &Arc<Sandbox>, action: TimedAction| -> bool {
            {
                let mut b = busy.lock().unwrap_or_else(|e| e.into_inner());
                if b.contains_key(&sb.id) {
                    return false;
                }
                b.insert(sb.id.clone(), (action, std::time::Instant::now()));
            }
            let (me, busy, id) = (self.clone(), busy.clone(), sb.id.clone());
            tokio::spawn(async move {
                let r = match action {
                    TimedAction::Kill => me.kill(&id).await,
                    TimedAction::Pause => me.pause_inner(&id, true).await.map(|_| ()),
                    TimedAction::Hibernate => me.hibernate(&id).await.map(|_| ()),
                    TimedAction::TimeoutHibernate => match me.pause_inner(&id, true).await {
                        Ok(_) => me.hibernate(&id).await.map(|_| ()),
                        Err(e) => Err(e),
                    },
                };
                let ok = r.is_ok();
                if let Err(e) = r {
                    tracing::warn!(sandbox = %id, error = %e, ?action, "timed action failed");
                    if action == TimedAction::Hibernate {
                        // Not again at once: after another full period.
                        if let Some(sb) = me.get(&id) {
                            sb.paused_at_ms.store(now_ms(), Ordering::SeqCst);
                        }
                    }
                }
                busy.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                if ok {
                    // (A failure is retried at the loop's next round, not at once.)
                    me.timeouts_changed.notify_one();
                }
            });
            true
        };
        loop {
            let now = now_ms();
            let mut next = now + 60_000;
            if let Some(min_mb) = self.cfg.hibernate_below_mb {
                // Checked every second while enabled.
                next = next.min(now + 1000);
                let available = mem_available_mb();
                // One at a time: a hibernation thaws its sandbox first, which costs memory. But
                // one whose agent does not answer its snapshot (it may take up to the hibernate
                // deadline) must not hold the others' relief: after PRESSURE_STALL the next
                // sandbox goes too.
                let (hibernating, taken): (bool, Vec<String>) = {
                    let b = busy.lock().unwrap_or_else(|e| e.into_inner());
                    let fresh = b.values().any(|(a, at)| {
                        *a == TimedAction::Hibernate && at.elapsed() < PRESSURE_STALL
                    });
                    (fresh, b.keys().cloned().collect())
                };
                if !hibernating && available.is_some_and(|a| a < min_mb) {
                    let mut paused: Vec<Arc<Sandbox>> = self
                        .all()
                        .into_iter()
                        .filter(|s| s.state() == StoredState::Paused && !taken.contains(&s.id))
                        .collect();
                    paused.sort_by_key(|s| s.paused_at_ms.load(Ordering::SeqCst));
                    if let Some(sb) = paused.first() {
                        tracing::info!(sandbox = %sb.id, available_mb = ?available,
                            "memory pressure; hibernating the longest-paused sandbox");
                        start(sb, TimedAction::Hibernate);
                    }
                }
            }
            if let Some(after) = self.cfg.hibernate_after {
                let after = after.as_millis() as u64;
                for sb in self
                    .all()
                    .into_iter()
                    .filter(|s| s.state() == StoredState::Paused)
                {
                    let at = sb.paused_at_ms.load(Ordering::SeqCst) + after;
                    if at <= now {
                        if start(&sb, TimedAction::Hibernate) {
                            tracing::info!(sandbox = %sb.id, "paused for {after} ms; hibernating");
                        }
                    } else {
                        next = next.min(at);
                    }
                }
            }
            for sb in self
                .all()
                .into_iter()
                .filter(|s| s.state() == StoredState::Running)
            {
                let at = sb.timeout_at_ms();
                if at <= now {
                    let action = match sb.on_timeout {
                        TimeoutAction::Kill => TimedAction::Kill,
                        TimeoutAction::Pause => TimedAction::Pause,
                        TimeoutAction::Hibernate => TimedAction::TimeoutHibernate,
                    };
                    if start(&sb, action) {
                        tracing::info!(sandbox = %sb.id, ?action, "timeout reached");
                    }
                } else {
                    next = next.min(at);
                }
            }
            // (An action that ends wakes the loop: `timeouts_changed`.)
            let wait = Duration::from_millis(next.saturating_sub(now_ms()).max(10));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.timeouts_changed.notified() => {}
            }
        }
    }

    /// Watch the PID 1 (host pid `pid`) of sandbox `id`: when it exits, reap it (it is this
    /// server's child when this server launched it: `lizard serve` is a subreaper) and clean the
    /// sandbox up like a kill (see [`Sandboxes::pid1_exited`]). `flag` is set first. Only for a
    /// `pid` that cannot have been reused: an unreaped child of ours, or one just checked.
    pub(super) fn watch(&self, id: &str, pid: i32, flag: Option<Arc<AtomicBool>>) {
        match lizard_jail::process::pidfd_open(pid) {
            Ok(fd) => self.watch_pidfd(id, pid, fd, flag),
            Err(e) => {
                // Gone and reaped already (not our child): it exited.
                tracing::warn!(sandbox = %id, pid, error = %e, "cannot watch the sandbox's PID 1");
                if let Some(f) = &flag {
                    f.store(true, Ordering::SeqCst);
                }
                if let Some(me) = self.me.upgrade() {
                    let id = id.to_string();
                    tokio::spawn(async move { me.pid1_exited(&id, pid).await });
                }
            }
        }
    }

    pub(super) fn watch_pidfd(
        &self,
        id: &str,
        pid: i32,
        pidfd: std::os::fd::OwnedFd,
        flag: Option<Arc<AtomicBool>>,
    ) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let id = id.to_string();
        tokio::spawn(async move {
            use tokio::io::{unix::AsyncFd, Interest};
            // tokio deprecated its safe constructor for an `unsafe` one whose condition (the fd
            // stays open and the same for the AsyncFd's life) an `OwnedFd` moved into it meets by
            // construction; `unsafe` belongs in lizard-jail only (as in the agent's kernels).
            #[allow(deprecated)]
            let registered = AsyncFd::with_interest(pidfd, Interest::READABLE);
            let afd = match registered {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(sandbox = %id, pid, error = %e, "cannot watch the sandbox's PID 1");
                    return;
                }
            };
            // A pidfd becomes readable (for good) when its process exits.
            if let Err(e) = afd.readable().await {
                tracing::warn!(sandbox = %id, pid, error = %e, "watching the sandbox's PID 1");
                return;
            }
            let pidfd = afd.into_inner();
            // Ours to reap when we launched it (ECHILD for an adopted one: init reaps those).
            // Exited is not yet waitable while a tracer holds the zombie: CRIU, which kills the
            // tree it has just dumped while still attached, until it exits — so wait (bounded)
            // rather than leave a zombie behind.
            let deadline = tokio::time::Instant::now() + REAP_TRACED_WITHIN;
            let mut pause = Duration::from_millis(1);
            let status = loop {
                match lizard_jail::fdpass::reap_pidfd(&pidfd) {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                    Ok(None) => {
                        tracing::warn!(sandbox = %id, pid,
                            "the sandbox's PID 1 exited but could not be reaped");
                        break None;
                    }
                    Err(_) => break None,
                }
            };
            tracing::debug!(sandbox = %id, pid, ?status, "the sandbox's PID 1 exited");
            if let Some(f) = &flag {
                f.store(true, Ordering::SeqCst);
            }
            me.pid1_exited(&id, pid).await;
        });
    }

    /// The PID 1 (host pid `pid`) of sandbox `id` exited. Unless that is the expected end (a kill
    /// or hibernation, which hold the lifecycle lock meanwhile and leave the sandbox not running,
    /// or a relaunch that gave it another PID 1), clean it up exactly like a kill and mark it
    /// `killed`.
    pub(super) async fn pid1_exited(&self, id: &str, pid: i32) {
        let pooled = self.pool.lock().ok().and_then(|mut p| {
            let i = p.iter().position(|l| l.id == id && l.runtime.pid == pid)?;
            Some(p.remove(i))
        });
        if let Some(l) = pooled {
            tracing::warn!(sandbox = %id, pid, "a pooled sandbox's PID 1 exited; removing it");
            let rt = l.runtime;
            let _ = tokio::task::spawn_blocking(move || destroy(&rt)).await;
            self.id_ranges.release(id);
            self.refill_pool();
            return;
        }
        let Ok((sb, _guard)) = self.locked(id).await else {
            return;
        };
        let running = matches!(sb.state(), StoredState::Running | StoredState::Paused);
        if sb.runtime.pid != pid || !running || sb.is_hibernating() {
            return;
        }
        tracing::warn!(sandbox = %id, pid,
            "the sandbox's PID 1 (its agent) exited on its own; cleaning the sandbox up like a kill");
        if let Err(e) = self.kill_locked(id).await {
            tracing::warn!(sandbox = %id, error = %e, "cleaning up after the sandbox's PID 1 exited");
        }
    }
}

/// A pidfd of a sandbox's PID 1 `pid`, checked to be in the sandbox's `cgroup` after it is held
/// (from then on it names that very process: a reused pid cannot name another one). Blocking
/// (reads the cgroup's pid list): call from a blocking thread.
pub(super) fn pid1_pidfd(pid: i32, cgroup: &Cgroup) -> Result<std::os::fd::OwnedFd, String> {
    let pidfd = lizard_jail::process::pidfd_open(pid)
        .map_err(|e| format!("a pidfd of the sandbox's PID 1 ({pid}): {e}"))?;
    if !cgroup.pids().is_ok_and(|p| p.contains(&pid)) {
        return Err(format!("pid {pid} is not in the sandbox's cgroup"));
    }
    Ok(pidfd)
}
