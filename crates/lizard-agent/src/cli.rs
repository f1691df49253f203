//! The agent's command line and main loop, shared by the `lizard-agent` binary and `lizard agent`.
//!
//! Parses the configuration (flags or `LIZARD_*` environment variables), writes the embedded kernel
//! runners into the run directory, and serves the API on TCP and, optionally, a Unix socket (one it
//! binds by path, or one inherited already bound as an fd: how the server reaches it). Prints
//! one JSON line `{"event":"listening",...}` on stdout once both listeners are bound. Uses `anyhow`:
//! this is binary code that happens to live in the library so both binaries share it.

use crate::context::{ContextConfig, Contexts};
use crate::kernel::KernelConfig;
use crate::router;
use anyhow::{bail, Context as _, Result};
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Configuration of the agent.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// TCP address to serve on (port 0 picks a free port).
    #[arg(long, env = "LIZARD_AGENT_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Also serve on this Unix socket path (an agent run outside a sandbox; the socket is created
    /// here, an old file removed first).
    #[arg(long, env = "LIZARD_AGENT_SOCKET", conflicts_with = "socket_fd")]
    pub socket: Option<PathBuf>,
    /// Also serve on the inherited, bound but not yet listening Unix stream socket at this fd
    /// number (an agent in a sandbox: the launcher made the socket in a host directory the
    /// sandbox cannot see, see `lizard_jail::sandbox::InheritFd::UnixListener`).
    #[arg(long, env = "LIZARD_AGENT_SOCKET_FD")]
    pub socket_fd: Option<i32>,
    /// The kernel environment made by `scripts/kernel-env.sh` (holds `venv/` and `node_modules/`).
    /// Sets the defaults of --python, --node (its `node/bin/node`, when there) and --node-path.
    #[arg(long, env = "LIZARD_KERNEL_ENV")]
    pub kernel_env: Option<PathBuf>,
    /// Python interpreter with IPython installed.
    #[arg(long, env = "LIZARD_PYTHON")]
    pub python: Option<PathBuf>,
    /// Node.js binary (default: the kernel environment's, else `node` in PATH).
    #[arg(long, env = "LIZARD_NODE")]
    pub node: Option<PathBuf>,
    /// Languages there is no interpreter for (a template without Python or Node, e.g. the Debian
    /// bases of `FROM debian:<suite>`): their contexts are refused with `unsupported`; commands,
    /// files and Bash still work. `--python` / `--node` are then not needed.
    #[arg(long, env = "LIZARD_WITHOUT", value_delimiter = ',')]
    pub without: Vec<lizard_proto::Language>,
    /// NODE_PATH for JavaScript kernels (where `acorn` is installed).
    #[arg(long, env = "LIZARD_NODE_PATH")]
    pub node_path: Option<PathBuf>,
    /// Bash binary.
    #[arg(long, env = "LIZARD_BASH", default_value = "bash")]
    pub bash: PathBuf,
    /// Working directory of contexts created without `cwd` (default: `work/` in the run directory).
    #[arg(long, env = "LIZARD_DEFAULT_CWD")]
    pub default_cwd: Option<PathBuf>,
    /// Directory for runner files and scratch (default: a fresh temporary directory).
    #[arg(long, env = "LIZARD_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Milliseconds an interrupted cell may take to stop before its kernel is killed.
    #[arg(long, env = "LIZARD_INTERRUPT_GRACE_MS", default_value_t = 2000)]
    pub interrupt_grace_ms: u64,
    /// Start this language's default context right away, in the background (repeatable), so the
    /// first run does not wait for the kernel to start.
    #[arg(long = "prestart", env = "LIZARD_PRESTART", value_delimiter = ',')]
    pub prestart: Vec<lizard_proto::Language>,
    /// Output bytes (stdout + stderr) one run may send before the rest is dropped with a notice.
    #[arg(long, env = "LIZARD_MAX_OUTPUT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_output_bytes: u64,
    /// Directory holding the cgroup sub-tree delegated to this agent (`memory/`, `cpu/`,
    /// `cpuacct/`; the server passes `/sys/fs/cgroup` to agents in sandboxes). Each context gets a
    /// cgroup of its own there, with optional limits. Without it (or if it is not usable) contexts
    /// share the agent's cgroup and per-context limits are refused.
    #[arg(long, env = "LIZARD_CONTEXT_CGROUPS")]
    pub context_cgroups: Option<PathBuf>,
    /// Fork Python kernels from a pre-imported zygote process (false: spawn each one).
    #[arg(long, env = "LIZARD_PYTHON_ZYGOTE", default_value_t = true, action = clap::ArgAction::Set)]
    pub python_zygote: bool,
    /// Fork JavaScript kernels from a pre-warmed Node zygote (false: spawn each one, or take the
    /// spare).
    #[arg(long, env = "LIZARD_JAVASCRIPT_ZYGOTE", default_value_t = true, action = clap::ArgAction::Set)]
    pub javascript_zygote: bool,
    /// Keep one spare JavaScript kernel, made ahead (forked from the zygote, or spawned without
    /// it), once the sandbox has used JavaScript.
    #[arg(long, env = "LIZARD_JAVASCRIPT_SPARE", default_value_t = true, action = clap::ArgAction::Set)]
    pub javascript_spare: bool,
    /// Run commands, terminals and the files API as this `UID:GID` (the sandbox user) instead of
    /// as the agent (the sandbox's root), with no supplementary groups (see `crate::users`).
    #[arg(long, env = "LIZARD_SANDBOX_USER")]
    pub sandbox_user: Option<crate::users::Ids>,
    /// Run each context's kernel as a uid of its own, `BASE + slot` for `slot < COUNT`
    /// (`BASE:COUNT`; needs --sandbox-user, whose group they share). At most COUNT contexts.
    #[arg(long, env = "LIZARD_CONTEXT_UIDS")]
    pub context_uids: Option<crate::users::Ids>,
    /// Listen here for a host zygote's fork to adopt as the Python zygote (`crate::adopt`); the
    /// first Python kernel waits for it (a while) rather than start a zygote of the agent's own.
    #[arg(long, env = "LIZARD_ADOPT_PYTHON_ZYGOTE")]
    pub adopt_python_zygote: Option<PathBuf>,
    /// Milliseconds a kernel may take to start.
    #[arg(long, env = "LIZARD_KERNEL_START_TIMEOUT_MS", default_value_t = 60000)]
    pub kernel_start_timeout_ms: u64,
}

fn find_in_path(name: &std::path::Path) -> Result<PathBuf> {
    if name.components().count() > 1 {
        return Ok(name.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("{} not found in PATH", name.display())
}

/// Run the agent until SIGTERM or Ctrl-C (outside a sandbox; as a sandbox's PID 1, until killed).
pub async fn run(mut args: AgentArgs) -> Result<()> {
    // Kernels run in other working directories: make every configured path absolute.
    for p in [
        &mut args.kernel_env,
        &mut args.python,
        &mut args.node_path,
        &mut args.default_cwd,
    ]
    .into_iter()
    .flatten()
    {
        *p = std::path::absolute(&*p).with_context(|| format!("resolving {}", p.display()))?;
    }

    let no_python = args.without.contains(&lizard_proto::Language::Python);
    let no_node = args.without.contains(&lizard_proto::Language::Javascript);
    let python = match (&args.python, &args.kernel_env) {
        // Never run: Python contexts are refused.
        _ if no_python => PathBuf::new(),
        (Some(p), _) => p.clone(),
        (None, Some(env)) => env.join("venv/bin/python"),
        (None, None) => bail!(
            "no Python kernel environment: pass --kernel-env DIR (see scripts/kernel-env.sh) or \
             --python PATH"
        ),
    };
    if !no_python && !python.exists() {
        bail!(
            "Python interpreter {} does not exist (prepare it with scripts/kernel-env.sh)",
            python.display()
        );
    }
    let node_path = args
        .node_path
        .clone()
        .or_else(|| args.kernel_env.as_ref().map(|e| e.join("node_modules")));

    crate::users::init(args.sandbox_user, args.context_uids.map(|r| (r.uid, r.gid)));
    if args.sandbox_user.is_some() {
        // What user code and the files API make is the group's too (contexts share files
        // through the sandbox user's group); the agent's own files stay its own (group 0).
        lizard_jail::creds::set_umask(crate::users::USER_UMASK);
    }
    let (run_dir, _tmp_guard) = match &args.run_dir {
        Some(d) => (d.clone(), None),
        None => {
            let d = std::env::temp_dir().join(format!("lizard-agent-{}", std::process::id()));
            (d.clone(), Some(RemoveOnDrop(d)))
        }
    };
    let python_for_sudo = python.clone();
    let kernels = KernelConfig {
        python_runner: crate::kernel::compiled_python_runner(&python),
        python,
        node: match (&args.node, &args.kernel_env) {
            _ if no_node => PathBuf::new(),
            (Some(n), _) => find_in_path(n).context("locating node")?,
            (None, Some(env)) if env.join("node/bin/node").exists() => env.join("node/bin/node"),
            (None, _) => find_in_path(Path::new("node")).context("locating node")?,
        },
        node_path,
        bash: find_in_path(&args.bash).context("locating bash")?,
        bash_kernel: None,
        without: args.without.clone(),
        run_dir: run_dir.clone(),
        start_timeout: Duration::from_millis(args.kernel_start_timeout_ms),
    };
    let mut kernels = kernels;
    kernels
        .install_runners()
        .with_context(|| format!("writing kernel runners into {}", run_dir.display()))?;
    if args.context_uids.is_some() && args.sandbox_user.is_some() {
        kernels
            .install_unreadable_bash()
            .context("copying bash for the kernels")?;
    }
    let default_cwd = match &args.default_cwd {
        Some(d) => d.clone(),
        None => {
            let d = run_dir.join("work");
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
    };
    let cgroups = args.context_cgroups.as_deref().and_then(|root| {
        match lizard_jail::delegation::Delegation::open(root) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(dir = %root.display(), error = %e,
                    "no delegated cgroup: contexts share the agent's cgroup, limits are refused");
                None
            }
        }
    });
    let user_home = default_cwd.clone();
    let contexts = Arc::new(Contexts::new(ContextConfig {
        kernels,
        default_cwd,
        interrupt_grace: Duration::from_millis(args.interrupt_grace_ms),
        max_output_bytes: args.max_output_bytes,
        cgroups,
        python_zygote: args.python_zygote,
        javascript_zygote: args.javascript_zygote,
        javascript_spare: args.javascript_spare,
    }));
    // TCP (inside the sandbox, reachable by its code) serves the public API; the Unix socket
    // (the server's) also the host-only routes.
    let app = router::router(contexts.clone());
    let host_app = router::host_router(contexts.clone());
    // Before the first kernel (the prestarted one) and before the server learns we are up.
    if let Some(path) = &args.adopt_python_zygote {
        let launcher = contexts.launcher().clone();
        let adoption =
            launcher.expect_adoption(lizard_proto::Language::Python, crate::adopt::ADOPT_WAIT);
        match (crate::adopt::listen(path), adoption) {
            (Ok(listener), Some(adoption)) => {
                tokio::spawn(crate::adopt::serve(
                    listener,
                    path.clone(),
                    launcher,
                    adoption,
                ));
            }
            (Err(e), _) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot listen for a zygote to adopt")
            }
            (Ok(_), None) => tracing::warn!("Python kernels are not forked: no zygote to adopt"),
        }
    }
    for lang in args.prestart.clone() {
        let contexts = contexts.clone();
        tokio::spawn(async move {
            if let Err(e) = contexts.default_for(lang).await {
                tracing::warn!(language = %lang, error = %e, "prestarting the default context");
            }
        });
    }
    // Kernels forked by the zygote are re-parented to the agent, which reaps them (their pumps
    // wait on pidfds): PID 1 of a sandbox gets them anyway, elsewhere the agent is a subreaper.
    // Orphans adopted either way (e.g. `nohup cmd &` from a kernel that exited) must be reaped.
    let subreaper = std::process::id() == 1
        || match lizard_jail::process::set_child_subreaper() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot become a subreaper; forked kernels' exit statuses will be unknown");
                false
            }
        };
    if subreaper {
        tokio::spawn(reap_orphans(contexts.clone()));
    }
    if std::process::id() == 1 {
        // PID 1 of a sandbox: code running as the same user must not read the agent's memory.
        if let Err(e) = lizard_jail::process::set_dumpable(false) {
            tracing::warn!(error = %e, "cannot make the agent non-dumpable");
        }
        // It runs from a memfd (`memfd:lizard-agent` otherwise): the name `ps` and `top` show.
        let _ = lizard_jail::process::set_name(c"lizard-agent");
    }

    // In a sandbox: `sudo` for the sandbox user (`crate::sudo`), `/root` for the sandbox's root.
    if let (Some(_), true) = (args.sandbox_user, std::process::id() == 1) {
        let cfg = crate::sudo::SudoConfig {
            user_home: user_home.clone(),
            python: python_for_sudo.clone(),
            socket: crate::sudo::SOCKET.into(),
            client: Some(crate::sudo::CLIENT.into()),
        };
        match crate::sudo::prepare(&cfg) {
            Ok(l) => {
                tokio::spawn(crate::sudo::serve(l, cfg));
            }
            Err(e) => tracing::warn!(error = %e, "no sudo: cannot bind {}", crate::sudo::SOCKET),
        }
    }
    let tcp = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let tcp_addr = tcp.local_addr()?;
    let unix = match (&args.socket, args.socket_fd) {
        (Some(p), _) => {
            let _ = std::fs::remove_file(p);
            Some(
                tokio::net::UnixListener::bind(p)
                    .with_context(|| format!("binding {}", p.display()))?,
            )
        }
        (None, Some(fd)) => {
            let l = lizard_jail::hostpath::take_unix_listener(fd)
                .with_context(|| format!("taking the inherited socket at fd {fd}"))?;
            l.set_nonblocking(true)?;
            Some(tokio::net::UnixListener::from_std(l).context("registering the socket")?)
        }
        (None, None) => None,
    };
    // Not `println!`, which panics when stdout fails: in a sandbox stdout is the host's
    // non-blocking log pipe, which may be full.
    {
        use std::io::Write as _;
        let line = serde_json::json!({
            "event": "listening",
            "tcp": tcp_addr.to_string(),
            "socket": args.socket.as_ref().map(|p| p.display().to_string()),
            "socket_fd": args.socket_fd,
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }
    tracing::info!(%tcp_addr, socket = ?args.socket, socket_fd = ?args.socket_fd,
        "lizard-agent listening");

    // As PID 1 of a sandbox the agent installs no handler for SIGTERM or SIGINT: the kernel then
    // drops those signals (and SIGKILL) sent from inside the sandbox's pid namespace, so user code's
    // `kill -TERM 1` cannot stop it. The server never signals it (it kills through the cgroup).
    let pid1 = std::process::id() == 1;
    let shutdown = async {
        if pid1 {
            return std::future::pending::<()>().await;
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    // Connections from a context's kernel (or from outside the sandbox's user namespace) are
    // refused with a 403 before any request is read (`crate::peer`).
    let tcp = crate::peer::CheckedListener(tcp);
    let tcp_server = axum::serve(tcp, app.clone()).into_future();
    // Before anything is served: `/ports` refuses the agent's own port.
    crate::ports::refuse_port(tcp_addr.port());
    let result = match unix {
        Some(u) => {
            // The server may hand it a new listener (after a CRIU restore: `relisten`).
            let restored = contexts.clone();
            let unix_server = crate::relisten::serve(u, host_app, move |renamed| {
                // CRIU restored the processes, not the contexts' cgroups.
                let n = restored.recreate_cgroups();
                tracing::info!(
                    contexts = n,
                    "the contexts' cgroups made again after a restore"
                );
                // The server named another sandbox id (a clone or fork): the spare kernel has
                // the source's.
                if renamed {
                    restored.discard_spare();
                }
            });
            tokio::select! {
                r = tcp_server => r.context("TCP server"),
                r = unix_server => r.context("Unix socket server"),
                _ = shutdown => Ok(()),
            }
        }
        None => tokio::select! {
            r = tcp_server => r.context("TCP server"),
            _ = shutdown => Ok(()),
        },
    };
    contexts.kill_all();
    crate::procs::kill_all();
    if let Some(p) = &args.socket {
        let _ = std::fs::remove_file(p);
    }
    result
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reap zombie children that are not kernels (spawned or forked), commands or terminals (those are
/// reaped by their pumps), on every SIGCHLD.
async fn reap_orphans(contexts: Arc<Contexts>) {
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        tracing::warn!("cannot watch SIGCHLD; orphans will not be reaped");
        return;
    };
    let me = std::process::id() as i32;
    while sigchld.recv().await.is_some() {
        let kernels = contexts.kernel_pids();
        crate::procs::with_owned_pids(|commands| {
            crate::kernel::with_forked_pids(|forked| {
                for pid in lizard_jail::procfs::zombie_children(me) {
                    if !kernels.contains(&pid) && !commands.contains(&pid) && !forked.contains(&pid)
                    {
                        let _ = lizard_jail::process::try_reap(pid);
                    }
                }
            })
        });
    }
}
