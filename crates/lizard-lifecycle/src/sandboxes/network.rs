//! A sandbox's network services on the host: the package registries' mirror and, with egress,
//! the relay and DNS responder with their rules and secret injection; live rule changes.

use super::*;

impl Sandboxes {
    /// Serve the package registries' mirror (`cfg.packages`) to sandbox `sb`: a listener of the
    /// server's own at `lizard_packages::LISTEN_ADDR` made in the sandbox's network namespace
    /// (`tcp_listener_in_netns_of`, entered through a pidfd of PID 1 checked to be in the
    /// sandbox's cgroup, so a reused pid cannot name another process's namespace). Called
    /// whenever its processes (re)start: a create, a wake or restore, a clone, an adoption —
    /// before any user code of a new sandbox runs, so none of it can take the address first (a
    /// restored or adopted sandbox that did only deprives itself). Failing leaves the sandbox
    /// without the mirror (logged), never fails the sandbox.
    pub(super) async fn serve_packages(&self, sb: &Arc<Sandbox>) {
        let Some(proxy) = &self.cfg.packages else {
            return;
        };
        let packages_allowed = self
            .store
            .project_allows_packages(&sb.project)
            .unwrap_or(false);
        let view = lizard_packages::SandboxView {
            id: sb.id.clone(),
            project: sb.project.clone(),
            packages_allowed,
            has_egress: !sb.network().egress.is_none(),
        };
        let (pid, cgroup) = (sb.runtime.pid, sb.runtime.cgroup.clone());
        let listener = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::network::tcp_listener_in_netns_of(pidfd, lizard_packages::LISTEN_ADDR)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r)
        .and_then(|l| tokio::net::TcpListener::from_std(l).map_err(|e| e.to_string()));
        match listener {
            Ok(l) => {
                let mut handle = sb.packages.lock().unwrap_or_else(|e| e.into_inner());
                *handle = Some(proxy.serve(l, view));
                // A new handle counts from zero.
                *sb.mirror_metered.lock().unwrap_or_else(|e| e.into_inner()) = (0, 0);
            }
            Err(e) => tracing::warn!(sandbox = %sb.id, error = %e,
                "no package registries in this sandbox"),
        }
    }

    /// Configure the network namespace of the sandbox whose PID 1 is `rt.pid` for egress and
    /// serve its relay and DNS responder there under `rules` (see `crate::egress`): entered, like
    /// the mirror's listener, through a pidfd of PID 1 checked to be in the sandbox's cgroup.
    /// Called before the agent is waited for (no user code has run in a new sandbox), and again
    /// at an adoption (the ruleset is reinstalled: the same for every sandbox).
    pub(super) async fn serve_egress(
        &self,
        (id, project): (&str, &str),
        rt: &Runtime,
        network: &NetworkRequest,
    ) -> Result<crate::egress::EgressHandle, String> {
        let rules = crate::egress::rules(&network.egress)
            .map_err(|e| e.to_string())?
            .unwrap_or_else(lizard_egress::Rules::none);
        // A rule that no longer holds (its secret deleted since) costs the sandbox its injection,
        // never its egress or its start: its requests then go out without the secret.
        let injection = match self
            .injection((id, project), &rt.dir, network, &rules)
            .await
        {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e,
                    "the sandbox's inject rules no longer hold; serving its egress without them");
                None
            }
        };
        let (pid, cgroup) = (rt.pid, rt.cgroup.clone());
        let sockets = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::network::egress_in_netns_of(
                pidfd,
                &lizard_egress::nft::DEFAULT_ROUTE,
                &lizard_egress::nft::ruleset(),
                lizard_egress::PROXY_ADDR,
                lizard_egress::DNS_ADDR,
            )
            .map_err(|e| lizard_jail::error_chain(&e))
        })
        .await
        .map_err(|e| e.to_string())??;
        let handle = self
            .cfg
            .egress
            .serve(sockets, rules)
            .map_err(|e| format!("serving the sandbox's egress: {e}"))?;
        handle.policy().set_injection(injection);
        Ok(handle)
    }

    /// Check a create's `network.inject` (hosts allowed by `egress`, secrets of `project`
    /// existing): an invalid request naming the rule, before anything is launched.
    pub(super) fn check_inject(
        &self,
        project: &str,
        network: &NetworkRequest,
        egress: Option<&lizard_egress::Rules>,
    ) -> Result<(), SandboxError> {
        if network.inject.is_empty() {
            return Ok(());
        }
        let Some(rules) = egress else {
            return Err(SandboxError::Invalid(
                "network.inject needs network.egress allowing its hosts".into(),
            ));
        };
        self.inject_rules(network, rules, project).map(drop)
    }

    /// `network.inject` as the egress's inject rules, with `project`'s secrets substituted.
    fn inject_rules(
        &self,
        network: &NetworkRequest,
        rules: &lizard_egress::Rules,
        project: &str,
    ) -> Result<Vec<lizard_egress::inject::InjectRule>, SandboxError> {
        Ok(crate::egress::inject_rules(
            &network.inject,
            rules,
            project,
            &self.store,
            &self.cfg.secrets,
        )?)
    }

    /// The secret injection of sandbox `id` (of `project`, directory `dir`) for `network`: its
    /// rules with the secrets' values, its CA (kept in `dir`), and an audit event for each use.
    /// `None` without `network.inject`.
    pub(super) async fn injection(
        &self,
        (id, project): (&str, &str),
        dir: &Path,
        network: &NetworkRequest,
        rules: &lizard_egress::Rules,
    ) -> Result<Option<Arc<lizard_egress::inject::Injection>>, SandboxError> {
        if network.inject.is_empty() {
            return Ok(None);
        }
        let inject = self.inject_rules(network, rules, project)?;
        let (dir, sid) = (dir.to_path_buf(), id.to_string());
        let ca = tokio::task::spawn_blocking(move || crate::egress::load_or_make_ca(&dir, &sid))
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))?
            .map_err(|e| SandboxError::Launch(format!("the sandbox's egress CA: {e}")))?;
        let (uses, sandbox, project) = (
            self.secret_uses.clone(),
            id.to_string(),
            project.to_string(),
        );
        let on_use = Arc::new(move |u: lizard_egress::inject::InjectUse| {
            uses.record(&sandbox, &project, &u)
        });
        Ok(Some(Arc::new(self.cfg.egress.injection(
            inject,
            Arc::new(ca),
            on_use,
        ))))
    }

    /// [`Self::serve_egress`] for a running (or paused) sandbox `sb` with egress whose processes
    /// are already there (an adoption, a rule change that turns egress on): failing leaves it
    /// without egress (logged, its connections refused at once), never fails the sandbox.
    pub(super) async fn serve_egress_of(&self, sb: &Arc<Sandbox>) {
        let network = sb.network();
        if network.egress.is_none() {
            return;
        }
        match self
            .serve_egress((&sb.id, &sb.project), &sb.runtime, &network)
            .await
        {
            Ok(h) => *sb.egress.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => tracing::warn!(sandbox = %sb.id, error = %e, "no egress in this sandbox"),
        }
    }

    /// `PATCH /v1/sandboxes/{id}/network`: replace the egress rules and/or the inject rules of
    /// sandbox `id` (created with egress; a part `update` does not give stays) live — its next
    /// connection and DNS query are decided by them; connections already relayed go on — and keep
    /// them for its next lives (wake, restart, snapshots). `none` becomes
    /// "nothing allowed" (`{"allow": []}`): the sandbox keeps its egress plumbing, so that rules
    /// can be widened again. A sandbox created without egress cannot get it now (409): its tools
    /// were pointed at the package mirror as their proxy when it started. The ingress flags
    /// (`public_ports`, `auto_resume`) alone change on any sandbox.
    pub async fn set_network(
        &self,
        id: &str,
        update: lizard_proto::UpdateNetworkRequest,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let (sb, _guard) = self.locked(id).await?;
        let mut network = update.applied_to(&sb.network());
        if update.egress.is_none() && update.inject.is_none() {
            // Only the ingress flags (public ports, resume on requests): no egress to change.
            self.store
                .set_network(id, &serde_json::to_value(&network).unwrap_or_default())?;
            *sb.network.lock().unwrap_or_else(|e| e.into_inner()) = network;
            return Ok(sb);
        }
        if sb.network().egress.is_none() {
            return Err(SandboxError::Conflict(format!(
                "sandbox {id} was created without egress, so its tools use the package mirror as \
                 their proxy; create the sandbox with network.egress (rules, even {{\"allow\": []}}, \
                 can then be changed at any time)"
            )));
        }
        if network.egress.is_none() {
            network.egress =
                lizard_proto::Egress::Rules(lizard_proto::EgressRules::allow(Vec::<String>::new()));
        }
        let rules =
            crate::egress::rules(&network.egress)?.unwrap_or_else(lizard_egress::Rules::none);
        let injection = self
            .injection((id, &sb.project), &sb.runtime.dir, &network, &rules)
            .await?;
        self.store
            .set_network(id, &serde_json::to_value(&network).unwrap_or_default())?;
        *sb.network.lock().unwrap_or_else(|e| e.into_inner()) = network;
        if let Some(h) = sb.egress.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            h.policy().set_rules(rules);
            h.policy().set_injection(injection);
        }
        Ok(sb)
    }
}
