//! Exact checkpoints with CRIU: dumping a sandbox, its manifest, restoring from it, and handing
//! the restored agent its new listening socket and id.

use super::*;

pub(super) fn write_criu_manifest(dir: &Path, m: &CriuManifest) -> std::io::Result<()> {
    let path = dir.join(CRIU_MANIFEST);
    let _ = std::fs::remove_file(&path);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        // `create_new` (O_EXCL) never follows a link; the directory is root's alone anyway.
        .mode(0o600)
        .open(&path)?
        .write_all(&serde_json::to_vec(m).map_err(std::io::Error::other)?)
}

/// The images and manifest of a CRIU checkpoint, gone (each attempt is used once).
pub(super) async fn remove_criu_images(dir: &Path) {
    let dir = dir.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_file(dir.join(CRIU_MANIFEST));
        // `ImagesDir::create` removes what is there without following links.
        if let Ok(images) = lizard_jail::checkpoint::ImagesDir::create(&dir.join(CRIU_IMAGES)) {
            let _ = images.remove();
        }
    })
    .await;
}

impl Sandboxes {
    /// The kept CRIU checkpoint of the sandbox in `dir`, if there is one and CRIU is usable.
    pub(super) fn criu_restore_from(
        &self,
        dir: &Path,
    ) -> Option<(CriuManifest, lizard_jail::sandbox::RestoreFrom)> {
        let criu = self.cfg.checkpoint.criu.clone()?;
        if !self.cfg.checkpoint.exact_restore {
            return None;
        }
        read_criu_restore(dir, &dir.join(CRIU_IMAGES), criu, &self.cfg.lizard_bin)
    }
}

/// The CRIU checkpoint whose manifest is in `dir` and images in `images`, as a restore.
pub(super) fn read_criu_restore(
    dir: &Path,
    images: &Path,
    criu: lizard_jail::checkpoint::Criu,
    lizard_bin: &Path,
) -> Option<(CriuManifest, lizard_jail::sandbox::RestoreFrom)> {
    let text = std::fs::File::open(dir.join(CRIU_MANIFEST)).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(text, 4 << 20), &mut bytes).ok()?;
    let manifest: CriuManifest = serde_json::from_slice(&bytes).ok()?;
    let from = lizard_jail::sandbox::RestoreFrom {
        criu: criu.program,
        criu_run_dir: criu.run_dir,
        netns_setup: vec![
            lizard_bin.display().to_string(),
            lizard_jail::sandbox::NETNS_SETUP_COMMAND.into(),
        ],
        images: images.to_path_buf(),
        dumped: manifest.dumped.clone(),
        deadline_ms: CRIU_DEADLINE.as_millis() as u64,
    };
    Some((manifest, from))
}

/// Give a CRIU-restored agent a listening socket of its own sandbox, and its own sandbox id: a
/// socket made in the sandbox's network namespace (`bind_unix_listener_in_netns_of`, entered
/// through a pidfd of the sandbox's PID 1 checked to be in the sandbox's cgroup, so a reused pid
/// cannot name another process), bound at `<dir>/agent.sock.new` (root-only directory), sent to
/// the agent over its current socket as one NUL byte, the sandbox id and a newline, with the socket
/// attached (`lizard_agent::relisten`); the agent takes the id for every process it starts from
/// then on (`lizard_agent::identity`: CRIU restored the source's environment), closes its old
/// listener, listens on the new one at the same descriptor and answers `k`; then the new socket
/// replaces the old at the agent's path (a `rename` in the root-only directory). Its clients'
/// `SO_PEERCRED` peer is then the agent (PID 1), as after a launch, and a later CRIU dump finds
/// the socket in the sandbox's namespace.
///
/// The whole of it is bounded by [`HANDOVER_DEADLINE`]: the parts that talk to the agent
/// (connect, send, answer) are asynchronous, a full accept queue fails the connect at once (it is
/// retried until the deadline) and no blocking thread ever waits on the agent; the blocking part
/// (pidfd, cgroup, the socket in the namespace) touches only the host. An agent that does not
/// answer harms only its own sandbox (the new socket is removed; the old one may be gone).
pub(super) async fn move_agent_socket(runtime: &Runtime, id: &str) -> Result<(), String> {
    let (pid, socket, cgroup) = (runtime.pid, runtime.socket.clone(), runtime.cgroup.clone());
    let new = socket.with_extension("sock.new");
    let moved = tokio::time::timeout(HANDOVER_DEADLINE, async {
        let new2 = new.clone();
        let sock = tokio::task::spawn_blocking(move || {
            let pidfd = pid1_pidfd(pid, &cgroup)?;
            lizard_jail::hostpath::bind_unix_listener_in_netns_of(pidfd, &new2)
                .map_err(|e| lizard_jail::error_chain(&e))
        })
        .await
        .map_err(|e| e.to_string())??;
        hand_over_socket(&socket, sock, id).await
    })
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "no answer within {} s",
            HANDOVER_DEADLINE.as_secs()
        ))
    });
    match moved {
        Ok(()) => std::fs::rename(&new, &socket).map_err(|e| e.to_string()),
        Err(e) => {
            let _ = std::fs::remove_file(&new);
            Err(e)
        }
    }
}

/// The agent-facing part of [`move_agent_socket`] (no deadline of its own: the caller's bounds
/// it; nothing here blocks a thread): connect to the agent's socket at `socket`, send `sock` with
/// the sandbox id `id`, wait for `k`.
pub(super) async fn hand_over_socket(
    socket: &Path,
    sock: std::os::fd::OwnedFd,
    id: &str,
) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncReadExt;
    let (_dir, target) = lizard_jail::hostpath::unix_socket_entry(socket)
        .map_err(|e| lizard_jail::error_chain(&e))?;
    let mut conn = loop {
        match tokio::net::UnixStream::connect(&target).await {
            Ok(c) => break c,
            // Its accept queue is full (a Unix connect never waits when non-blocking).
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => return Err(format!("connecting to the agent: {e}")),
        }
    };
    let mut msg = Vec::with_capacity(id.len() + 2);
    msg.push(0);
    msg.extend_from_slice(id.as_bytes());
    msg.push(b'\n');
    let fd = sock.as_raw_fd();
    conn.async_io(tokio::io::Interest::WRITABLE, || {
        lizard_jail::fdpass::send_with_fds(&conn, &msg, &[fd])
    })
    .await
    .map_err(|e| format!("sending the socket: {e}"))?;
    drop(sock);
    let mut ack = [0u8; 1];
    match conn.read(&mut ack).await {
        Ok(1) if ack[0] == b'k' => Ok(()),
        Ok(_) => Err("the agent did not take the new socket".to_string()),
        Err(e) => Err(format!("the agent's answer: {e}")),
    }
}

/// Why CRIU cannot checkpoint sandboxes on this server, before any attempt (`None`: it can be
/// tried).
pub(super) fn criu_refusal(tool: &CheckpointTool) -> Option<String> {
    if tool.criu.is_none() {
        return Some(format!("no usable CRIU ({})", tool.detail));
    }
    if let Some(refused) = tool.layout_refused.get() {
        return Some(refused.clone());
    }
    if !tool.exact_restore {
        return Some(criu_unused(tool));
    }
    None
}

/// Dump the tree of sandbox PID 1 `pid` (left running, or killed by CRIU once dumped) into a
/// fresh `images` directory (blocking):
/// the binds of host files and file systems (device nodes, /proc masks, the agent's binds, cgroup
/// directories), the log and the agent's listening socket (fd 3, bound at a host path) are
/// external, as CRIU does not dump the host. No images are left on an error.
pub(super) fn dump_sandbox(
    criu: &lizard_jail::checkpoint::Criu,
    pid: i32,
    images: &Path,
    freeze_cgroup: Option<&Path>,
    manage_cgroups: bool,
    leave_running: bool,
) -> Result<
    (
        lizard_jail::checkpoint::DumpSpec,
        lizard_jail::checkpoint::DumpStats,
    ),
    lizard_jail::checkpoint::CheckpointError,
> {
    let images = lizard_jail::checkpoint::ImagesDir::create(images)?;
    let mut spec = lizard_jail::checkpoint::DumpSpec::of_sandbox(pid).unwrap_or_default();
    spec.manage_cgroups = manage_cgroups;
    // A sandbox's network namespace holds what every launch makes (loopback), the generic egress
    // ruleset and route (`lizard_egress::nft`) and the host's listeners, nothing of the
    // sandbox's: the restore makes the first again, the server the others
    // (`Sandboxes::serve_egress`, `serve_packages`).
    spec.empty_netns = true;
    if let Some(ino) = std::fs::read_link(format!("/proc/{pid}/fd/3"))
        .ok()
        .and_then(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        })
    {
        spec.external_unix.push(ino);
    }
    let r = criu.dump(
        pid,
        &images,
        &spec,
        leave_running,
        freeze_cgroup,
        CRIU_DEADLINE,
    );
    if r.is_err() {
        let _ = images.remove();
    }
    r.map(|stats| (spec, stats))
}

/// What a failed dump means, remembered when it is the structural refusal (see
/// [`CRIU_LAYOUT_REFUSAL`]) of a sandbox that was launched, not restored: a sandbox restored by
/// CRIU gets that refusal from a CRIU without scripts/criu-patches (its namespace check cannot
/// open the restored, non-dumpable agent's namespaces), which says nothing about the others.
pub(super) fn criu_dump_failed(
    tool: &CheckpointTool,
    e: &lizard_jail::checkpoint::CheckpointError,
    restored: bool,
) -> String {
    let why = format!(
        "{} could not checkpoint the sandbox: {}",
        tool.detail.split(':').next().unwrap_or("CRIU"),
        lizard_jail::error_chain(e)
    );
    if !why.contains(CRIU_LAYOUT_REFUSAL) {
        return why;
    }
    if restored {
        return format!(
            "{why} (the sandbox was itself restored by CRIU: dumping it again needs the CRIU that \
             scripts/criu.sh builds, with scripts/criu-patches applied)"
        );
    }
    let _ = tool.layout_refused.set(format!(
        "{why} (this server's sandboxes all have that namespace layout: not tried again)"
    ));
    why
}

/// Whether the sandbox's agent (`pid`) holds a descriptor on a cgroup file (it was moving a kernel
/// between its cgroups, e.g. its zygote into a fresh nursery, when the freeze came). CRIU dumps
/// such a descriptor but cannot open it again at a restore, so a checkpoint taken now would not
/// restore: the caller lets the agent finish and freezes again. Reads the links of at most
/// [`MAX_AGENT_FDS`] descriptors (kernel-made strings; a false match costs one retry).
pub(super) fn agent_holds_cgroup_file(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten().take(MAX_AGENT_FDS).any(|e| {
        std::fs::read_link(e.path()).is_ok_and(|l| {
            l.as_os_str()
                .as_encoded_bytes()
                .starts_with(b"/sys/fs/cgroup/")
        })
    })
}

/// How many of the agent's descriptors [`agent_holds_cgroup_file`] looks at.
const MAX_AGENT_FDS: usize = 4096;

/// Checkpoint the running sandbox with CRIU (leaving it running) into `<dir>/criu`, kept for a
/// resume; `Err` says why not (no CRIU, what the sandbox has that a restore cannot give back,
/// CRIU's own error), with no images left.
pub(super) async fn criu_dump(tool: &CheckpointTool, sb: &Sandbox) -> Result<CriuManifest, String> {
    if let Some(why) = criu_refusal(tool) {
        return Err(why);
    }
    let Some(criu) = tool.criu.clone() else {
        return Err(format!("no usable CRIU ({})", tool.detail));
    };
    // The agent binary it runs stays on disk for the restore (a server upgrade comes between).
    if let (Some(x), Some(digest)) = (&tool.agent_exes, &sb.runtime.agent_exe) {
        x.keep(digest).await?;
    }
    // Kept connections of forwarded requests: their other ends are the server's.
    sb.agent
        .close_idle(crate::agent_client::CLOSE_IDLE_WAIT)
        .await;
    let agent = sb.agent.clone();
    let pid = sb.runtime.pid;
    let restored = sb.runtime.criu_restored;
    let dir = sb.runtime.dir.join(CRIU_IMAGES);
    // The resume restores into the same cgroups: CRIU puts every task back into its own cgroup
    // (the contexts') and the sandbox's cgroup namespace.
    let outcome = tokio::task::spawn_blocking(move || {
        let mut tries = 0;
        loop {
            tries += 1;
            match dump_sandbox(&criu, pid, &dir, None, true, false) {
                // A connection to the agent not yet accepted (its other end is the server's, in
                // the host's network namespace, which CRIU cannot find): a failed dump leaves
                // the tree running, so the agent accepts it; then again.
                Err(e)
                    if tries < crate::sandboxes::snapshot::CRIU_SNAPSHOT_TRIES
                        && lizard_jail::error_chain(&e).contains("Unix socket") =>
                {
                    // (or a forwarded request that ended meanwhile and kept its connection)
                    drop(agent.drop_idle());
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    })
    .await;
    match outcome {
        Ok(Ok((dumped, stats))) => Ok(CriuManifest {
            dumped,
            image_bytes: stats.image_bytes,
            dump_ms: stats.duration.as_millis() as u64,
            contexts: Vec::new(),
            agent_log_seq: 0,
            agent_exe: sb.runtime.agent_exe.clone(),
        }),
        Ok(Err(e)) => Err(criu_dump_failed(tool, &e, restored)),
        Err(e) => Err(format!("the CRIU attempt failed: {e}")),
    }
}

/// The report's contexts of a CRIU restore: each kernel restored as the same process.
pub(super) fn criu_contexts(manifest: &CriuManifest) -> Vec<lizard_proto::ContextReport> {
    manifest
        .contexts
        .iter()
        .map(|(id, language)| lizard_proto::ContextReport {
            id: id.clone(),
            language: *language,
            restored: vec![lizard_proto::StateItem {
                name: "the kernel process".into(),
                kind: "process".into(),
            }],
            lost: Vec::new(),
        })
        .collect()
}

/// Why CRIU is not tried at all on this server (see [`criu_dump`]).
pub(super) fn criu_unused(tool: &CheckpointTool) -> String {
    match (&tool.criu, tool.layout_refused.get()) {
        (None, _) => format!("no usable CRIU ({})", tool.detail),
        (Some(_), Some(refused)) => refused.clone(),
        (Some(_), None) => "the agents run from their sealed in-memory copy (the file copy a CRIU \
             restore needs could not be made, or a test's agent wrapper runs as PID 1), which CRIU \
             cannot restore"
            .to_string(),
    }
}

/// `method_reason` of a per-language hibernation after CRIU was not used.
pub(super) fn per_language_reason(why_not_criu: &str) -> String {
    format!("per-language: {why_not_criu}; each kernel saved and restored its own state")
}
