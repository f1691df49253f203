//! Launching a sandbox: its directories and disk, the template's layers, the `SandboxSpec`, and
//! `lizard sandbox-init` run to start it fresh or restore it from a CRIU checkpoint.

use super::*;

/// A new sandbox's place: its id, its directory (not made yet), its disk's storage reservation
/// (held while it is being made) and its own host id range (released by the caller on failure).
pub(super) struct NewPlace<'a> {
    pub id: String,
    pub dir: PathBuf,
    pub reserved: crate::storage::Reservation<'a>,
    pub id_base: u32,
}

/// What to launch (or restore into): sandbox `id` in `dir` (a new directory, or the kept one of a
/// hibernated sandbox, whose writable layer is reused) of `project`'s `template`, with its
/// environment, limits, volumes and egress; `fresh`: whether it is a new sandbox; `id_base`: the
/// first host id of its own range (`None`: the shared range of sandboxes from before per-sandbox
/// ranges); `cpu_base_ms`: CPU time of its earlier lives.
pub(super) struct Launch<'a> {
    pub id: String,
    pub dir: &'a Path,
    pub project: &'a str,
    pub template: &'a str,
    pub envs: &'a BTreeMap<String, String>,
    pub limits: SandboxLimits,
    pub volumes: &'a [SandboxVolume],
    pub egress: Option<&'a NetworkRequest>,
    pub fresh: bool,
    pub id_base: Option<u32>,
    pub cpu_base_ms: u64,
}

impl Sandboxes {
    /// A new sandbox's id, directory, disk reservation (before anything is made, the disk image
    /// must fit the data dir's file system; counted as a create in progress while held) and host
    /// id range.
    pub(super) fn new_place(&self, limits: SandboxLimits) -> Result<NewPlace<'_>, SandboxError> {
        let id = new_sandbox_id();
        let dir = self.sandboxes_dir().join(&id);
        let reserved = self.volumes.storage.reserve(
            &dir.join("disk.img"),
            limits.disk_mb * 1024 * 1024,
            "a sandbox disk",
        )?;
        let id_base = self.id_ranges.take(&id).ok_or_else(|| {
            SandboxError::Launch(format!(
                "every host id range is in use ({} sandboxes)",
                self.id_ranges.held()
            ))
        })?;
        Ok(NewPlace {
            id,
            dir,
            reserved,
            id_base,
        })
    }
}

impl Sandboxes {
    /// Launch a sandbox of `template_name` and wait until its agent answers.
    pub(super) async fn launch_new(
        &self,
        (project, template_name): (&str, &str),
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        volumes: &[SandboxVolume],
        egress: Option<&NetworkRequest>,
    ) -> Result<LaunchedSandbox, SandboxError> {
        let NewPlace {
            id,
            dir,
            reserved: _reserved,
            id_base,
        } = self.new_place(limits)?;
        let launched = self
            .launch_in(Launch {
                id: id.clone(),
                dir: &dir,
                project,
                template: template_name,
                envs,
                limits,
                volumes,
                egress,
                fresh: true,
                id_base: Some(id_base),
                cpu_base_ms: 0,
            })
            .await;
        if launched.is_err() {
            self.id_ranges.release(&id);
        }
        launched
    }

    /// The template build a sandbox directory's last launch used (from its `runtime.json`), with
    /// its layers.
    pub(super) fn previous_build(&self, dir: &Path) -> Option<Chain> {
        let rt: Option<Runtime> = std::fs::read(dir.join(RUNTIME_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        // A clone's first launch: the build its snapshot was taken on (`snapshot`).
        let build = match rt {
            Some(rt) => rt.template_dir?,
            None => Self::clone_build(dir)?,
        };
        let (top, _) = lizard_template::layer::read_build_dir(&build)?;
        lizard_template::layer::resolve(&top).ok()
    }

    /// The template `template_name` as `project` sees it, with its chain of layers: the
    /// project's own user template, else a public one (see `crate::templates`), else a built-in
    /// or a host-built one. Another project's private template is unknown (a 404, like any
    /// unknown name).
    pub(crate) fn find_template(
        &self,
        project: &str,
        template_name: &str,
    ) -> Result<Chain, SandboxError> {
        if !project.is_empty() {
            if let Some(row) = self.store.find_template(project, template_name)? {
                let unknown = || SandboxError::UnknownTemplate(template_name.to_string());
                let key = row.key.as_deref().ok_or_else(unknown)?;
                // User templates live in the server's own data dir.
                let dir = lizard_template::layer::user_dir(&self.cfg.data_dir, &row.id).join(key);
                let (top, _) = lizard_template::layer::read_build_dir(&dir).ok_or_else(unknown)?;
                return lizard_template::layer::resolve(&top)
                    .map_err(|e| SandboxError::Launch(format!("template {template_name}: {e}")));
            }
        }
        let top = self.find_builtin(template_name)?;
        lizard_template::layer::resolve(&top)
            .map_err(|e| SandboxError::Launch(format!("template {template_name}: {e}")))
    }

    /// A built-in or host-built template by name.
    pub(crate) fn find_builtin(&self, template_name: &str) -> Result<Template, SandboxError> {
        let dir = &self.cfg.templates_data_dir;
        let template = match lizard_template::find(dir, template_name) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(SandboxError::UnknownTemplate(template_name.to_string())),
            // Not a built-in: a user's own template, built from its spec file into this data dir.
            Err(lizard_template::TemplateError::UnknownTemplate { .. }) => {
                lizard_template::find_built(dir, template_name)
                    .ok_or_else(|| SandboxError::UnknownTemplate(template_name.to_string()))?
            }
            Err(e) => return Err(SandboxError::Launch(format!("looking up template: {e}"))),
        };
        Ok(template)
    }

    /// Launch `l` and wait until its agent answers. On failure a new sandbox's directory is
    /// removed, a hibernated one's kept.
    pub(super) async fn launch_in(&self, l: Launch<'_>) -> Result<LaunchedSandbox, SandboxError> {
        self.launch_or_restore_in(l, None).await
    }

    /// [`Self::launch_in`], or with `restore` a CRIU restore of the sandbox into the same host
    /// side (`SandboxSpec::restore`).
    pub(super) async fn launch_or_restore_in(
        &self,
        l: Launch<'_>,
        restore: Option<(lizard_jail::sandbox::RestoreFrom, Option<String>)>,
    ) -> Result<LaunchedSandbox, SandboxError> {
        let Launch {
            id,
            dir,
            project,
            template: template_name,
            envs,
            limits,
            volumes,
            egress,
            fresh,
            id_base,
            cpu_base_ms,
        } = l;
        // The agent binary it will run: a restore's is the checkpoint's (its digest, second).
        let agent_file = match (&self.cfg.checkpoint.agent_exes, &restore) {
            (None, _) => None,
            (Some(x), None) => x
                .current_digest()
                .await
                .ok()
                .map(|digest| agent_exe::AgentFile {
                    path: x.current_file().to_path_buf(),
                    digest,
                }),
            (Some(x), Some((_, digest))) => Some(
                x.for_restore(digest.as_deref())
                    .await
                    .map_err(SandboxError::Launch)?,
            ),
        };
        let restore = restore.map(|(from, _)| from);
        // Where a launch spends its time (debug log at the end): the figures behind a cold create.
        let t0 = std::time::Instant::now();
        let mut phases: Vec<(&str, u128)> = Vec::new();
        let mut phase = |name| phases.push((name, t0.elapsed().as_micros()));
        // A relaunch keeps the lower layer its writable layer was made on, when it is still there.
        let chain = match (!fresh).then(|| self.previous_build(dir)).flatten() {
            Some(c) => c,
            None => self.find_template(project, template_name)?,
        };
        let template = chain.top.clone();
        let meta = template.meta.clone();
        // A template without Python or Node (the Debian bases) serves commands, files and Bash;
        // its agent refuses contexts of the missing language with a typed error.
        let (python, node) = (meta.python.clone(), meta.node.clone());
        let dir = dir.to_path_buf();
        let disk = dir.join("disk");
        let cleanup = |dir: &Path| {
            if fresh {
                remove_files(dir, Some(&dir.join("disk")));
            }
        };
        // The sandbox's host ids; the template's files are `meta.id_shift + id` on disk.
        let host_base = id_base.unwrap_or(meta.id_shift);
        let layer_map = IdMap {
            inside: 0,
            outside: host_base,
            count: 65536,
        };
        let prepared = {
            // The top layer that has an `/etc` (a layer may not: it holds only what its build
            // changed).
            let root = chain
                .lower
                .iter()
                .find(|l| l.join("etc").is_dir())
                .unwrap_or(&template.rootfs)
                .clone();
            let (dir, disk) = (dir.clone(), disk.clone());
            let layer_base = meta.id_shift;
            let bytes = limits.disk_mb * 1024 * 1024;
            // With egress: the sandbox's CA (kept in its directory) and the host's roots, which
            // its layer's trust files are made of.
            let trust = egress.map(|_| (id.clone(), self.cfg.egress.host_roots_pem()));
            tokio::task::spawn_blocking(move || {
                if fresh {
                    prepare_dirs(&dir, &disk, bytes, &root, trust, |id| {
                        layer_map.layer_to_outside(layer_base, id)
                    })
                } else {
                    reopen_dirs(&dir, &disk)
                }
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))
            .and_then(|r| r)
        };
        if let Err(e) = prepared {
            cleanup(&dir);
            return Err(e);
        }
        phase("disk");
        // The sandbox's host-side logs: it writes into pipes the server drains (capped at the
        // writer, see `crate::host_logs`), never into a host file.
        for name in crate::host_logs::FILES {
            let log = dir.join(name);
            if let Err(e) = crate::host_logs::make_pipe(&log) {
                cleanup(&dir);
                return Err(io_err(&log)(e));
            }
        }
        crate::host_logs::ensure_drains(&dir);
        // The run dir (hibernation's saved state) lives on the sandbox's own disk image: a bind
        // from there shows `/run` in the sandbox's mountinfo, not a host path. The agent (the
        // sandbox's root) writes there; the host changes only the directory itself, through a
        // descriptor opened without following links (the disk's root is not the sandbox's).
        let owned_run = {
            let disk = disk.clone();
            // The agent's: it runs as the sandbox's root (user code cannot write there).
            let owner = (host_base, host_base);
            tokio::task::spawn_blocking(move || {
                lizard_jail::hostpath::TrustedDir::open(&disk)
                    .and_then(|d| d.own_subdir("run".as_ref(), owner.0, owner.1, 0o755))
            })
            .await
            .map_err(|e| SandboxError::Launch(e.to_string()))
            .and_then(|r| {
                r.map_err(|e| {
                    SandboxError::Launch(format!(
                        "the sandbox's run dir: {}",
                        lizard_jail::error_chain(&e)
                    ))
                })
            })
        };
        if let Err(e) = owned_run {
            cleanup(&dir);
            return Err(e);
        }

        let mut spec = self.spec(
            &id,
            &chain,
            (python.as_deref(), node.as_deref()),
            &dir,
            envs,
            limits,
            fresh,
            egress.is_none(),
        );
        spec.id_map = layer_map;
        // The template layer (and the volumes) are shown through the sandbox's own range.
        spec.layer_id_base = id_base.map(|_| meta.id_shift);
        // Volumes: their host mount directories, bound at their mount paths (no symlink followed),
        // through the id map: their files stay in the template's range on disk, shared by
        // sandboxes of every range.
        spec.binds.extend(volumes.iter().map(|v| Bind {
            source: self.volumes.mount_dir(&v.volume_id),
            target: PathBuf::from(&v.mount_path),
            readonly: v.read_only,
            no_symlinks: true,
            idmapped: true,
        }));
        if let (Some(file), Some(current)) = (&agent_file, &self.cfg.agent_exe_file) {
            // The agent's bind (see `spec`) from the file of the binary it runs.
            for b in spec.binds.iter_mut().filter(|b| &b.source == current) {
                b.source = file.path.clone();
            }
        }
        let agent_exe = agent_file.map(|f| f.digest);
        let restoring = restore.is_some();
        // The template's shared Python zygote, when it runs and was made from this very build
        // (the joined process moves onto the sandbox's files at the same paths): the sandbox's
        // user namespace is made where it can join, and the agent waits for it.
        let zygote = if !restoring && python.is_some() {
            // Right after the server's start: its first launches wait for the zygote's start
            // (a fraction of a second) rather than each import a Python of their own.
            self.host_zygotes_started(std::time::Duration::from_secs(30))
                .await;
            self.host_zygote(&template.dir)
                .filter(|z| z.layers() == chain.lower.as_slice())
        } else {
            None
        };
        if let Some(z) = &zygote {
            spec.userns_parent = Some(z.userns_parent());
            spec.args.push("--adopt-python-zygote".into());
            spec.args.push(crate::host_zygotes::ADOPT_SOCKET.into());
        }
        spec.restore = restore;
        phase("prepared");
        let launched = match launch(&self.cfg.lizard_bin, &spec).await {
            Ok(l) => l,
            Err(e) => {
                cleanup(&dir);
                return Err(e);
            }
        };
        phase("jail");
        let runtime = Runtime {
            pid: launched.pid,
            cgroup: launched.cgroup,
            dir: dir.clone(),
            socket: dir.join(AGENT_SOCKET),
            cpu_base_ms,
            disk: Some(disk),
            template_dir: Some(template.dir.clone()),
            template_bases: chain.builds[1..].to_vec(),
            id_base,
            agent_peer: restoring.then_some(launched.helper_pid),
            criu_restored: restoring,
            agent_exe,
        };
        for build in &chain.builds {
            if let Err(e) = lizard_template::store::pin(build, &id) {
                tracing::warn!(sandbox = %id, error = %e, "cannot pin the template build");
            }
        }
        // Written before anything can fail, so a server that dies now still finds and removes
        // this sandbox at its next start (see `adopt`).
        let rt_file = dir.join(RUNTIME_FILE);
        if let Err(e) = std::fs::write(&rt_file, serde_json::to_vec(&runtime).unwrap_or_default()) {
            destroy_unwatched(&runtime, fresh);
            return Err(io_err(&rt_file)(e));
        }
        // The shared zygote joins while the agent starts (its process waits, inside the
        // sandbox, for the agent's socket): the first kernel does not wait for both in turn.
        if let Some(z) = zygote {
            super::zygote::join_in_background(z, &id, runtime.pid, runtime.cgroup.clone());
        }
        let egress = match egress {
            Some(network) => match self.serve_egress((&id, project), &runtime, network).await {
                Ok(h) => Some(h),
                Err(e) => {
                    destroy_unwatched(&runtime, fresh);
                    return Err(SandboxError::Launch(e));
                }
            },
            None => None,
        };
        let agent = AgentClient::with_limits(
            runtime.socket.clone(),
            runtime.agent_peer(),
            self.cfg.agent_limits,
        );
        phase("egress");
        if let Err(e) = agent.wait_ready(self.cfg.ready_timeout).await {
            tracing::warn!(sandbox = %id, error = %e, log = %dir.join("agent.log").display(),
                "agent not ready; killing the sandbox");
            destroy_unwatched(&runtime, fresh);
            return Err(SandboxError::NotReady(
                self.cfg.ready_timeout.as_millis() as u64
            ));
        }
        let (mut runtime, mut agent) = (runtime, agent);
        if runtime.agent_peer.is_some() {
            // Restored by CRIU: its listener is the launcher's, in the host's network namespace.
            // Hand it one of its own (see `move_agent_socket`); should that fail, it keeps the
            // launcher's (and is not checkpointed by CRIU again: `criu_refusal`).
            match move_agent_socket(&runtime, &id).await {
                Ok(()) => {
                    runtime.agent_peer = None;
                    agent = AgentClient::with_limits(
                        runtime.socket.clone(),
                        runtime.pid,
                        self.cfg.agent_limits,
                    );
                    let moved = agent.health().await.map(drop).map_err(|e| e.to_string());
                    let written = moved.and_then(|()| {
                        std::fs::write(&rt_file, serde_json::to_vec(&runtime).unwrap_or_default())
                            .map_err(|e| e.to_string())
                    });
                    if let Err(e) = written {
                        tracing::warn!(sandbox = %id, error = %e,
                            "the restored agent's new socket; killing the sandbox");
                        destroy_unwatched(&runtime, fresh);
                        return Err(SandboxError::Launch(format!(
                            "the restored agent's new socket: {e}"
                        )));
                    }
                }
                Err(e) => tracing::warn!(sandbox = %id, error = %e,
                    "the restored agent keeps the launcher's socket"),
            }
        }
        phase("ready");
        tracing::debug!(sandbox = %id, restoring, phases_us = ?phases, "launched");
        Ok(LaunchedSandbox {
            id,
            runtime,
            agent,
            exited: None,
            egress,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn spec(
        &self,
        id: &str,
        chain: &Chain,
        (python, node): (Option<&str>, Option<&str>),
        dir: &Path,
        envs: &BTreeMap<String, String>,
        limits: SandboxLimits,
        prestart: bool,
        no_egress: bool,
    ) -> SandboxSpec {
        let meta = &chain.top.meta;
        // A layered template's WORKDIR is where code runs by default.
        let cwd = chain
            .workdir
            .clone()
            .unwrap_or_else(|| meta.user.home.clone());
        // The package registries' mirror (`lizard-packages`): pip, uv and npm point at it, and
        // without egress the proxy variables too, so that any other destination gets its
        // explanation at once. The template's and the user's own settings win.
        let mut env: BTreeMap<String, String> = match &self.cfg.packages {
            Some(_) => lizard_packages::sandbox_env(no_egress)
                .into_iter()
                .collect(),
            None => BTreeMap::new(),
        };
        if !no_egress {
            // Its TLS clients trust its own CA too (secret injection terminates TLS with it).
            env.extend(
                crate::egress::trust_env()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string())),
            );
        }
        env.extend(meta.env.clone());
        env.extend(envs.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(self.cfg.agent_env.clone());
        env.insert("LIZARD_SANDBOX_ID".into(), id.to_string());
        env.insert("HOSTNAME".into(), id.to_string());
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--listen".into(),
            "127.0.0.1:8080".into(),
            // The socket the launcher bound at `<dir>/agent.sock` (see `inherit_fds` below).
            "--socket-fd".into(),
            "3".into(),
            "--default-cwd".into(),
            cwd.clone(),
            "--run-dir".into(),
            "/tmp/.lizard-agent".into(),
            "--context-cgroups".into(),
            lizard_jail::delegation::MOUNT_DIR.into(),
            // The agent is the sandbox's root (`user` and `keep_caps` below); everything user code
            // runs, it runs as the sandbox user, each context's kernel as a uid of its own.
            "--sandbox-user".into(),
            format!("{}:{}", meta.user.uid, meta.user.gid),
            "--context-uids".into(),
            format!(
                "{}:{}",
                lizard_template::meta::CONTEXT_UID_BASE,
                lizard_template::meta::CONTEXT_UIDS
            ),
        ];
        let mut without = Vec::new();
        match python {
            Some(p) => args.extend(["--python".into(), p.to_string()]),
            None => without.push("python"),
        }
        match node {
            Some(n) => args.extend(["--node".into(), n.to_string()]),
            None => without.push("javascript"),
        }
        if !without.is_empty() {
            args.push("--without".into());
            args.push(without.join(","));
        }
        if prestart && python.is_some() {
            // Most first runs are Python: start that kernel while the client is still talking.
            // (Not after hibernation: the restore recreates the saved contexts instead.)
            args.push("--prestart".into());
            args.push("python".into());
        }
        if let Some(p) = &meta.node_path {
            args.push("--node-path".into());
            args.push(p.clone());
        }
        SandboxSpec {
            id: id.to_string(),
            hostname: id.to_string(),
            rootfs: RootfsSpec {
                lower: chain.lower.clone(),
                upper: dir.join("disk/upper"),
                work: dir.join("disk/work"),
                mountpoint: dir.join("rootfs"),
            },
            binds: {
                let mut binds = vec![Bind {
                    source: dir.join("disk").join("run"),
                    target: PathBuf::from("/run/lizard"),
                    readonly: false,
                    ..Default::default()
                }];
                if let (None, Some(file)) = (&self.cfg.agent_wrapper, &self.cfg.agent_exe_file) {
                    // The agent's regular-file copy over the template's placeholder.
                    binds.push(Bind {
                        source: file.clone(),
                        target: PathBuf::from(&meta.lizard_bin),
                        readonly: true,
                        ..Default::default()
                    });
                }
                binds
            },
            id_map: IdMap {
                inside: 0,
                outside: self.cfg.id_shift,
                count: 65536,
            },
            layer_id_base: None,
            userns_parent: None,
            // PID 1, the agent, is the sandbox's root with only the capabilities it needs to run
            // user code as other users (see SECURITY.md, "The agent is the sandbox's root").
            user: UserSpec { uid: 0, gid: 0 },
            cwd: PathBuf::from(&cwd),
            // argv[0] only (the template's placeholder path): the agent runs from the sealed copy.
            program: PathBuf::from(&meta.lizard_bin),
            program_source: match (&self.cfg.agent_wrapper, &self.cfg.agent_exe_file) {
                // Run from the bind of the tmpfs copy (added below).
                (None, Some(_)) => None,
                (wrapper, _) => Some(wrapper.as_ref().unwrap_or(&self.cfg.agent_exe).proc_path()),
            },
            args,
            env,
            limits: Limits {
                memory_bytes: Some(limits.memory_mb * 1024 * 1024),
                pids_max: Some(limits.pids),
                cpu_millicores: Some(limits.cpu_millicores),
                tmp_bytes: Some(limits.tmp_mb * 1024 * 1024),
                nofile: Some(crate::host_zygotes::SANDBOX_NOFILE),
                ptys_max: Some(lizard_jail::sandbox::DEFAULT_PTYS_MAX),
            },
            keep_caps: AGENT_CAPS.to_vec(),
            context_cgroups: true,
            log_path: crate::host_logs::pipe_path(&dir.join("agent.log")),
            // fd 3: the agent's socket, in the sandbox's root-only directory on the host.
            inherit_fds: {
                let mut fds = vec![InheritFd::UnixListener {
                    path: dir.join(AGENT_SOCKET),
                }];
                if self.cfg.agent_wrapper.is_some() {
                    // fd 4: the real agent, for a wrapper to run (see `agent_wrapper`).
                    fds.push(InheritFd::ReadOnlyFile {
                        path: self.cfg.agent_exe.proc_path(),
                    });
                }
                fds
            },
            restore: None,
        }
    }
}

pub(super) async fn launch(
    lizard_bin: &Path,
    spec: &SandboxSpec,
) -> Result<Launched, SandboxError> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(lizard_bin)
        .arg("sandbox-init")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            SandboxError::Launch(format!(
                "running {} sandbox-init: {e}",
                lizard_bin.display()
            ))
        })?;
    let helper_pid = child.id().map_or(0, |p| p as i32);
    let input = serde_json::to_vec(spec).map_err(|e| SandboxError::Launch(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .await
            .map_err(|e| SandboxError::Launch(format!("writing the sandbox spec: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| SandboxError::Launch(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    match serde_json::from_str::<InitReply>(line) {
        Ok(InitReply::Ok(l)) => Ok(Launched { helper_pid, ..l }),
        Ok(InitReply::Error(e)) => Err(SandboxError::Launch(e)),
        Err(_) => Err(SandboxError::Launch(format!(
            "sandbox-init exited with {} and said {:?} {:?}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// The sandbox's directory is root's alone (0700): it holds the agent's socket, which the launcher
/// refuses to make in a directory anyone else can write, and nothing in it is anyone else's.
pub(super) fn private_dir(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_err(dir))
}

/// Reopen a hibernated sandbox's directories for its relaunch: its disk image mounted again
/// (unless it still is) and an empty overlay work dir (the last mount's leftovers go). Blocking.
pub(super) fn reopen_dirs(dir: &Path, disk: &Path) -> Result<(), SandboxError> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    private_dir(dir)?;
    lizard_jail::disk::ensure_mounted(&dir.join("disk.img"), disk)
        .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
    // `disk/run` (owned by the sandbox's user) is made sure of by `launch_in`, without following
    // links. `disk/work` is the overlay's own (never visible inside).
    let work = disk.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir(&work).map_err(io_err(&work))
}

/// Make a new sandbox's directories: `rootfs/`, and on its own disk image of `disk_bytes` mounted on
/// `disk` the writable layer (`disk/upper`, `disk/work`) and the run dir (`disk/run`); with egress
/// (`trust`: the sandbox's id and the host's roots as PEM) the sandbox's CA
/// ([`crate::egress::load_or_make_ca`], in `dir`) and the layer's `/etc/resolv.conf` (the host's
/// DNS responder in the sandbox's namespace, `lizard_egress::DNS_ADDR`), `/etc/lizard/egress-ca.pem`
/// (the CA's certificate) and `/etc/lizard/ca-bundle.pem` (the host's roots and the CA, for
/// `SSL_CERT_FILE` & co.), owned by `shown_as(the template's owner on disk)`. Nothing of the
/// template is read but the metadata of its `/etc`. Blocking.
pub(super) fn prepare_dirs(
    dir: &Path,
    disk: &Path,
    disk_bytes: u64,
    template_root: &Path,
    trust: Option<(String, Arc<str>)>,
    shown_as: impl Fn(u32) -> u32,
) -> Result<(), SandboxError> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).map_err(io_err(&rootfs))?;
    private_dir(dir)?;
    lizard_jail::disk::create(&dir.join("disk.img"), disk, disk_bytes)
        .map_err(|e| SandboxError::Launch(lizard_jail::error_chain(&e)))?;
    let upper = disk.join("upper");
    // A fresh file system: nothing of the sandbox's yet (`run` gets its owner in `launch_in`).
    for d in [upper.clone(), disk.join("work"), disk.join("run")] {
        std::fs::create_dir(&d).map_err(io_err(&d))?;
    }
    let Some((sandbox_id, host_roots)) = trust else {
        return Ok(());
    };
    let ca = crate::egress::load_or_make_ca(dir, &sandbox_id)
        .map_err(|e| SandboxError::Launch(format!("the sandbox's egress CA: {e}")))?;
    // Files of the template's owner (its shifted root, as the sandbox's range shows it: the
    // upper layer is not idmapped) and mode, like the ones they hide.
    let lower_etc = template_root.join("etc");
    let meta = std::fs::metadata(&lower_etc).map_err(io_err(&lower_etc))?;
    let (uid, gid) = (
        shown_as(std::os::unix::fs::MetadataExt::uid(&meta)),
        shown_as(std::os::unix::fs::MetadataExt::gid(&meta)),
    );
    let etc = upper.join("etc");
    std::fs::create_dir(&etc).map_err(io_err(&etc))?;
    std::fs::set_permissions(&etc, meta.permissions()).map_err(io_err(&etc))?;
    std::os::unix::fs::chown(&etc, Some(uid), Some(gid)).map_err(io_err(&etc))?;
    let resolv = format!(
        "# Written by Lizard: the host's DNS responder for this sandbox, which answers what its\n\
         # egress rules allow (any other nameserver is redirected to it).\nnameserver {}\n",
        lizard_egress::DNS_ADDR.ip()
    );
    let lizard_etc = upper.join(crate::egress::TRUST_DIR);
    std::fs::create_dir(&lizard_etc).map_err(io_err(&lizard_etc))?;
    std::fs::set_permissions(&lizard_etc, meta.permissions()).map_err(io_err(&lizard_etc))?;
    std::os::unix::fs::chown(&lizard_etc, Some(uid), Some(gid)).map_err(io_err(&lizard_etc))?;
    let ca_pem = ca.cert_pem();
    let bundle = format!("{host_roots}{ca_pem}");
    for (path, text) in [
        (etc.join("resolv.conf"), resolv.as_str()),
        (
            lizard_etc.join(crate::egress::CA_CERT_FILE),
            ca_pem.as_str(),
        ),
        (lizard_etc.join(crate::egress::BUNDLE_FILE), bundle.as_str()),
    ] {
        // New files in the fresh layer (`create_new`: never through an existing entry).
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io_err(&path))?;
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(io_err(&path))?;
    }
    Ok(())
}
