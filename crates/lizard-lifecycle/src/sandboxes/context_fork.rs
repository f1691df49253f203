//! Fork of a context, exact where it matters (docs/ARCHITECTURE.md, "Fork of a context"): the
//! agent forks the live kernel; when that fork would lose threads, child processes or sockets, the
//! server checkpoints the kernel's process tree with CRIU instead (`lizard context-fork`, a
//! single-threaded helper: `lizard_jail::subtree`) and the agent adopts the restored copy. Where
//! CRIU is missing or fails, the live fork is the answer and says why (`checkpoint_error`), unless
//! the request asked for an exact fork (`exact: true`, then an error).

use super::*;
use crate::agent_client::AgentError;
use lizard_proto::{ContextFork, ErrorBody, ErrorCode, ForkContextRequest, PreparedFork};
use std::os::unix::process::CommandExt;

/// The longest the helper may take, beyond the dump's and the restore's own deadlines.
const HELPER_SLACK: Duration = Duration::from_secs(15);

/// Deadline of the dump and of the restore, each.
const CRIU_DEADLINE: Duration = Duration::from_secs(60);

/// An agent's error answer as the API's: its typed body when it sent one.
fn agent_error(e: AgentError) -> SandboxError {
    match e {
        AgentError::Status { status, body } => SandboxError::Agent(
            serde_json::from_str::<ErrorBody>(&body).unwrap_or_else(|_| {
                ErrorBody::new(
                    ErrorCode::Unavailable,
                    format!("the sandbox's agent answered {status}"),
                )
            }),
        ),
        e => SandboxError::Agent(ErrorBody::new(
            ErrorCode::Unavailable,
            format!("the sandbox's agent: {}", lizard_jail::error_chain(&e)),
        )),
    }
}

/// A context id as the agent makes them (it goes into the agent's URL path).
fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Sandboxes {
    /// Fork context `ctx` of the running sandbox `sb` (see the module docs).
    pub async fn fork_context(
        &self,
        sb: &Arc<Sandbox>,
        ctx: &str,
        req: ForkContextRequest,
    ) -> Result<ContextFork, SandboxError> {
        if !plain_id(ctx) {
            return Err(SandboxError::Agent(ErrorBody::new(
                ErrorCode::NotFound,
                format!("context {ctx} not found"),
            )));
        }
        if sb.state() != StoredState::Running {
            return Err(SandboxError::Conflict(format!(
                "sandbox {} is not running (resume it first)",
                sb.id
            )));
        }
        let criu = self.cfg.checkpoint.criu.clone();
        let exact = req.exact;
        let live_req = ForkContextRequest {
            limits: req.limits,
            exact: None,
        };
        let Some(criu) = criu.filter(|_| exact != Some(false)) else {
            if exact == Some(true) {
                return Err(SandboxError::Conflict(format!(
                    "an exact fork needs CRIU on the host: {}",
                    self.cfg.checkpoint.detail
                )));
            }
            let mut f = sb
                .agent
                .fork_live(ctx, &live_req)
                .await
                .map_err(agent_error)?;
            if !f.lost.is_empty() && exact.is_none() {
                f.checkpoint_error = Some(format!("no checkpoint: {}", self.cfg.checkpoint.detail));
            }
            return Ok(f);
        };
        let plan = match sb
            .agent
            .fork_prepare(ctx, &live_req)
            .await
            .map_err(agent_error)?
        {
            PreparedFork::Live(f) => return Ok(f),
            PreparedFork::Checkpoint(plan) => plan,
        };
        let new = plan.context_id.0.clone();
        let forked = self.checkpoint_fork(sb, &plan, &criu).await;
        let forked = match forked {
            Ok(f) => sb
                .agent
                .fork_adopt(
                    &new,
                    &lizard_proto::AdoptFork {
                        kernel_pid: f.tree_pid,
                    },
                )
                .await
                .map_err(|e| lizard_jail::error_chain(&e)),
            Err(e) => {
                let _ = sb.agent.fork_abort(&new).await;
                Err(e)
            }
        };
        match forked {
            Ok(f) => Ok(f),
            Err(why) => {
                tracing::warn!(sandbox = %sb.id, context = ctx, error = %why, "exact context fork failed");
                if exact == Some(true) {
                    return Err(SandboxError::Conflict(format!(
                        "the exact fork failed: {why}"
                    )));
                }
                let mut f = sb
                    .agent
                    .fork_live(ctx, &live_req)
                    .await
                    .map_err(agent_error)?;
                f.checkpoint_error = Some(why);
                Ok(f)
            }
        }
    }

    /// Run the helper that checkpoints and restores the planned fork's kernel.
    async fn checkpoint_fork(
        &self,
        sb: &Arc<Sandbox>,
        plan: &lizard_proto::CheckpointPlan,
        criu: &lizard_jail::checkpoint::Criu,
    ) -> Result<lizard_jail::subtree::SubtreeFork, String> {
        let rt = &sb.runtime;
        if plan.channels.len() != 4 || plan.channels.iter().any(|c| c.agent_fd < 0) {
            return Err("the agent's plan names unexpected descriptors".into());
        }
        // The fork's cgroup: the sandbox's, with the delegated controllers' `ctx/<name>` below.
        let cgroup = match &plan.cgroup {
            Some(name) => lizard_jail::delegation::context_cgroup_paths(&rt.cgroup, name)
                .map_err(|e| format!("the agent's plan names cgroup {name:?}: {e}"))?,
            None => rt.cgroup.paths().clone(),
        };
        let spec = lizard_jail::subtree::SubtreeForkSpec {
            criu: criu.program.clone(),
            criu_run_dir: criu.run_dir.clone(),
            sandbox_pid: rt.pid,
            tree_pid: plan.kernel_pid,
            channels: plan
                .channels
                .iter()
                .map(|c| lizard_jail::subtree::Channel {
                    pipe_inode: c.pipe_inode,
                    agent_fd: c.agent_fd,
                })
                .collect(),
            cgroup,
            images: rt.dir.join(format!("ctxfork-{}", plan.context_id.0)),
            deadline_ms: CRIU_DEADLINE.as_millis() as u64,
        };
        let input = serde_json::to_vec(&spec).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.cfg.lizard_bin);
        // The copy's init is this helper's child: inside, its command line is all that shows of
        // it, and says no host path.
        cmd.as_std_mut().arg0("lizard");
        let mut child = cmd
            .arg("context-fork")
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "running {} context-fork: {e}",
                    self.cfg.lizard_bin.display()
                )
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            stdin
                .write_all(&input)
                .await
                .map_err(|e| format!("writing the fork's spec: {e}"))?;
        }
        let out = tokio::time::timeout(CRIU_DEADLINE * 2 + HELPER_SLACK, child.wait_with_output())
            .await
            .map_err(|_| "the fork's helper did not finish in time".to_string())?
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        match serde_json::from_str::<lizard_jail::subtree::SubtreeReply>(
            text.lines().last().unwrap_or(""),
        ) {
            Ok(lizard_jail::subtree::SubtreeReply::Ok(f)) => {
                tracing::info!(
                    sandbox = %sb.id, context = %plan.context_id, dump_ms = f.dump_ms,
                    restore_ms = f.restore_ms, image_bytes = f.image_bytes, own_netns = f.own_netns,
                    "context forked with a checkpoint"
                );
                Ok(f)
            }
            Ok(lizard_jail::subtree::SubtreeReply::Error(e)) => Err(e),
            Err(_) => Err(format!(
                "the fork's helper exited with {} and said {:?}",
                out.status,
                text.chars().take(500).collect::<String>()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_reach_the_agents_path() {
        assert!(plain_id("8c5bbee60dcca339ee26bc0aa4601ba8"));
        assert!(plain_id("ctx-ab_1"));
        for bad in ["", "../x", "a/b", "a?b", "a b", &"x".repeat(65)] {
            assert!(!plain_id(bad), "{bad}");
        }
    }

    #[test]
    fn an_agents_typed_error_is_passed_on() {
        let e = agent_error(AgentError::Status {
            status: 409,
            body: r#"{"code":"conflict","message":"context x is busy"}"#.into(),
        });
        let SandboxError::Agent(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!(b.code, ErrorCode::Conflict);
        assert_eq!(b.message, "context x is busy");
        let e = agent_error(AgentError::Status {
            status: 500,
            body: "garbage".into(),
        });
        let SandboxError::Agent(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!(b.code, ErrorCode::Unavailable);
    }
}
