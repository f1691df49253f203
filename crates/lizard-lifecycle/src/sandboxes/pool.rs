//! The warm pool: sandboxes launched ahead of demand for creates that any pooled sandbox fits.

use super::*;

impl Sandboxes {
    /// Whether a create request can be served by a pooled sandbox: the default template, with
    /// nothing that is fixed at launch (environment, limits, network) asked for.
    pub(super) fn pool_eligible(&self, template: &str, req: &CreateSandbox) -> bool {
        self.cfg.pool_size > 0
            && template == self.cfg.default_template
            && req.envs.is_empty()
            && req.limits == LimitsRequest::default()
            && req.volumes.is_empty()
            && req.network.egress.is_none()
    }

    pub(super) fn take_pooled(&self) -> Option<LaunchedSandbox> {
        self.pool.lock().ok().and_then(|mut p| p.pop())
    }

    /// Ask the pool filler to top the pool up (in the background).
    pub fn refill_pool(&self) {
        if self.cfg.pool_size > 0 {
            self.pool_wanted.notify_one();
        }
    }

    /// Keep `pool_size` ready sandboxes of the default template, each with a started Python
    /// kernel, so that `create` is a claim and the first run is warm. Runs until the process ends.
    pub async fn run_pool(self: Arc<Self>) {
        if self.cfg.pool_size == 0 {
            return;
        }
        loop {
            while self.pool.lock().map(|p| p.len()).unwrap_or(0) < self.cfg.pool_size {
                let closed = self.pool_filling.lock().await;
                if *closed {
                    return;
                }
                let template = self.cfg.default_template.clone();
                let limits = self.cfg.default_limits;
                match self
                    .launch_new(("", &template), &BTreeMap::new(), limits, &[], None)
                    .await
                {
                    Ok(l) => {
                        // Pooled sandboxes are handed out with their Python kernel running.
                        if let Err(e) = l
                            .agent
                            .wait_default_context(
                                lizard_proto::Language::Python,
                                self.cfg.ready_timeout,
                            )
                            .await
                        {
                            tracing::warn!(sandbox = %l.id, error = %e, "warming a pooled sandbox");
                            destroy_unwatched(&l.runtime, true);
                            self.id_ranges.release(&l.id);
                            break;
                        }
                        let flag = Arc::new(AtomicBool::new(false));
                        let (id, pid) = (l.id.clone(), l.runtime.pid);
                        if let Ok(mut p) = self.pool.lock() {
                            p.push(LaunchedSandbox {
                                exited: Some(flag.clone()),
                                ..l
                            });
                        }
                        self.watch(&id, pid, Some(flag));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "filling the sandbox pool");
                        break;
                    }
                }
            }
            self.pool_wanted.notified().await;
        }
    }

    /// Stop refilling and kill the pooled (unclaimed) sandboxes, e.g. at shutdown. Waits for a
    /// launch in progress, so nothing is left behind.
    pub async fn drain_pool(&self) {
        *self.pool_filling.lock().await = true;
        let pooled: Vec<LaunchedSandbox> = self
            .pool
            .lock()
            .map(|mut p| p.drain(..).collect())
            .unwrap_or_default();
        for l in pooled {
            destroy(&l.runtime);
            self.id_ranges.release(&l.id);
        }
    }
}
