//! Kernel processes: one per context, spoken to through the runner protocol (`kernels/PROTOCOL.md`).
//!
//! A [`Kernel`] owns a running Python, JavaScript or Bash process in its own process group. A pump task
//! reads the process's stdout, stderr and event pipes and forwards them, in order, as [`KernelMsg`]s;
//! output written while no cell runs is dropped. This module does not know about HTTP, execution
//! counts or timeouts: the context layer (`crate::context`) drives it.

mod bash;
mod launch;
mod live_fork;
mod pump;
mod zygote;

pub use launch::{Adoption, Launcher};
pub use live_fork::{AdoptedChannels, LiveFork};
pub use zygote::{Zygote, ZygoteError};

use crate::users::Ids;
use lizard_jail::delegation::ContextCgroup;
use lizard_jail::process::join_cgroups_on_exec;
use lizard_jail::procfs::own_pipe_inode;
use lizard_jail::{cloexec_pipe, map_fds, signal_group, Signal};
use lizard_proto::{Language, MimeBundle};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

/// The runner sources, embedded so the agent is one self-contained binary.
pub const PYTHON_RUNNER: &str = include_str!("../../../../kernels/python/runner.py");
pub const JS_RUNNER: &str = include_str!("../../../../kernels/js/runner.js");
pub const JS_ZYGOTE: &str = include_str!("../../../../kernels/js/zygote.js");

/// The compiled `PYTHON_RUNNER` a template holds for the interpreter `python`
/// (`<venv>/lizard/runner-<first 16 hex digits of its SHA-256>.pyc`, which `lizard-template`'s
/// build compiles with that venv's interpreter), if it is there: Python compiles a script it is
/// started with every time (≈ 8–11 ms of CPU per zygote or spawned kernel), never a `.pyc`. A
/// template built from another version of the runner has another name: the source is run then.
pub fn compiled_python_runner(python: &Path) -> Option<PathBuf> {
    let venv = python.parent()?.parent()?;
    let pyc = venv.join("lizard").join(python_runner_pyc_name());
    pyc.is_file().then_some(pyc)
}

/// `runner-<first 16 hex digits of PYTHON_RUNNER's SHA-256>.pyc`.
fn python_runner_pyc_name() -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(PYTHON_RUNNER.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("runner-{hex}.pyc")
}

/// OOM score adjustment of kernel processes (the agent keeps the default 0).
const KERNEL_OOM_SCORE_ADJ: i32 = 500;

/// fd numbers of the runner protocol.
const EVENT_FD: i32 = 3;
const CONTROL_FD: i32 = 4;

/// Where the interpreters and runner files are. Built once at agent start-up.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub python: PathBuf,
    pub node: PathBuf,
    /// `NODE_PATH` for the JavaScript kernel (the kernel environment's `node_modules`).
    pub node_path: Option<PathBuf>,
    pub bash: PathBuf,
    /// What Bash kernels run instead of `bash`, when set: an unreadable copy of it
    /// ([`KernelConfig::install_unreadable_bash`]).
    pub bash_kernel: Option<PathBuf>,
    /// Languages without an interpreter here (their paths above are empty): contexts of them are
    /// refused before anything is started.
    pub without: Vec<Language>,
    /// Directory holding `runner.py`, `runner.js`, `zygote.js` and per-context scratch files.
    pub run_dir: PathBuf,
    /// What Python kernels and zygotes run instead of `run_dir/runner.py`, when set: the
    /// template's compiled runner ([`compiled_python_runner`]).
    pub python_runner: Option<PathBuf>,
    /// How long a kernel may take from spawn to `ready`.
    pub start_timeout: Duration,
}

impl KernelConfig {
    /// The command that runs a `language` kernel or zygote (`flags` go to the interpreter, before
    /// the runner file), with the environment every kernel needs.
    pub fn command(&self, language: Language, flags: &[&str]) -> tokio::process::Command {
        let mut cmd = match language {
            Language::Python => tokio::process::Command::new(&self.python),
            Language::Javascript => tokio::process::Command::new(&self.node),
            Language::Bash => {
                tokio::process::Command::new(self.bash_kernel.as_ref().unwrap_or(&self.bash))
            }
        };
        match language {
            Language::Python => cmd.args(flags).arg(
                self.python_runner
                    .clone()
                    .unwrap_or_else(|| self.run_dir.join("runner.py")),
            ),
            Language::Javascript => cmd.args(flags).arg(self.run_dir.join("runner.js")),
            Language::Bash => cmd.args(flags).args(["--noprofile", "--norc"]),
        };
        if let (Language::Javascript, Some(p)) = (language, &self.node_path) {
            cmd.env("NODE_PATH", p);
        }
        cmd.env("PYTHONUNBUFFERED", "1")
            .env("PAGER", "cat")
            .env("TERM", "dumb");
        // After a CRIU restore: the clone's id, not the source's (`crate::identity`).
        crate::identity::apply(&mut cmd);
        cmd
    }

    /// Write the embedded runner sources into `run_dir`. The directory must be the agent's own
    /// and writable by it alone (it is made 0755): its root-run zygotes execute what is in it.
    pub fn install_runners(&self) -> io::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        std::fs::create_dir_all(&self.run_dir)?;
        let meta = std::fs::symlink_metadata(&self.run_dir)?;
        if !meta.is_dir() || meta.uid() != lizard_jail::creds::euid() {
            return Err(io::Error::other(format!(
                "{} is not a directory of the agent's own",
                self.run_dir.display()
            )));
        }
        std::fs::set_permissions(&self.run_dir, std::fs::Permissions::from_mode(0o755))?;
        std::fs::write(self.run_dir.join("runner.py"), PYTHON_RUNNER)?;
        std::fs::write(self.run_dir.join("runner.js"), JS_RUNNER)?;
        std::fs::write(self.run_dir.join("zygote.js"), JS_ZYGOTE)?;
        Ok(())
    }

    /// A copy of `bash` that its users may execute but not read (mode 0711): the kernel the
    /// kernel's exec then makes is not dumpable (the kernel sets that for a program it may not
    /// read), so a process of any other uid cannot read its memory through
    /// `/proc/<pid>/mem`; Bash has no way to make itself non-dumpable. Used for Bash kernels
    /// that run as a user other than the agent.
    pub fn install_unreadable_bash(&mut self) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let copy = self.run_dir.join("bash-kernel");
        std::fs::copy(&self.bash, &copy)?;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o711))?;
        self.bash_kernel = Some(copy);
        Ok(())
    }
}

/// Failures to start or talk to a kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("cannot start the {language} kernel ({program})")]
    Spawn {
        language: Language,
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot create the {what} pipe")]
    Pipe {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the {language} kernel exited during start-up ({exit}){}", stderr_hint(.stderr))]
    DiedAtStart {
        language: Language,
        exit: ExitInfo,
        stderr: String,
    },
    #[error("the {language} kernel did not become ready within {timeout_ms} ms")]
    StartTimeout { language: Language, timeout_ms: u64 },
    #[error("the {language} kernel exited while saving or restoring its state ({exit})")]
    DiedInHibernateOp { language: Language, exit: ExitInfo },
    #[error("the {language} kernel did not save or restore its state within {timeout_ms} ms")]
    HibernateOpTimeout { language: Language, timeout_ms: u64 },
    #[error("cannot send the cell to the kernel")]
    Send(#[source] io::Error),
    #[error(transparent)]
    NoFreeSlot(#[from] crate::users::NoFreeSlot),
    #[error("the {language} kernel cannot be forked: {message}")]
    ForkRefused { language: Language, message: String },
    #[error("forking the {language} kernel failed: {message}")]
    ForkFailed { language: Language, message: String },
    #[error("the spare {language} kernel could not take its working directory: {message}")]
    Setup { language: Language, message: String },
}

/// Spawn a kernel's (or zygote's) command. The command is dropped right after: that closes the
/// parent's copies of the child's pipe ends, so the pump sees end-of-file when the kernel's
/// process tree is gone.
pub(crate) fn spawn(
    mut cmd: tokio::process::Command,
    language: Language,
    program: &Path,
) -> Result<tokio::process::Child, KernelError> {
    let spawned = cmd.spawn();
    drop(cmd);
    spawned.map_err(|source| KernelError::Spawn {
        language,
        program: program.display().to_string(),
        source,
    })
}

fn stderr_hint(stderr: &str) -> String {
    let tail: Vec<&str> = stderr.trim_end().lines().rev().take(5).collect();
    if tail.is_empty() {
        String::new()
    } else {
        let mut t = tail;
        t.reverse();
        format!(": {}", t.join(" | "))
    }
}

/// How a kernel process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitInfo {
    Code(i32),
    Signal(i32),
    Unknown,
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitInfo::Code(c) => write!(f, "exit code {c}"),
            ExitInfo::Signal(9) => write!(f, "killed by SIGKILL, e.g. out of memory"),
            ExitInfo::Signal(s) => write!(f, "killed by signal {s}"),
            ExitInfo::Unknown => write!(f, "unknown exit status"),
        }
    }
}

/// The traceback of a runner `error` event: a list of lines, or already one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Traceback {
    Lines(Vec<String>),
    Text(String),
}

impl Traceback {
    pub fn into_text(self) -> String {
        match self {
            Traceback::Lines(l) => l.join("\n"),
            Traceback::Text(t) => t,
        }
    }
}

/// An event line from a runner (fd 3).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum RunnerEvent {
    Ready,
    /// Output written through the runner's own stdout/stderr objects (framed, so it is ordered
    /// exactly with results); raw fd 1/2 output arrives as [`KernelMsg::Stdout`] directly.
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    Result {
        #[serde(default)]
        main: bool,
        data: MimeBundle,
        #[serde(default)]
        metadata: Option<serde_json::Value>,
    },
    Error {
        name: String,
        #[serde(default)]
        value: String,
        #[serde(default = "no_traceback")]
        traceback: Traceback,
    },
    Done {
        id: u64,
        status: RunnerStatus,
        /// Bash only: the cell's exit status.
        #[serde(default)]
        exit_code: Option<i32>,
    },
    ProtocolError {
        message: String,
    },
    /// The answer to a `fork` control message (before its `done`): the new kernel's pid and what
    /// of the source's live state it does not have.
    Forked {
        pid: i32,
        #[serde(default)]
        lost: Vec<lizard_proto::LostItem>,
    },
    /// The answer to a `snapshot` / `restore` control message: what was saved or restored, and
    /// what was not (with the reason).
    Report {
        #[serde(default)]
        items: Vec<lizard_proto::StateItem>,
        #[serde(default)]
        lost: Vec<lizard_proto::LostItem>,
    },
    #[serde(other)]
    Unknown,
}

fn no_traceback() -> Traceback {
    Traceback::Lines(Vec::new())
}

/// `done.status` of the runner protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerStatus {
    Ok,
    Error,
    Interrupted,
}

/// What the pump forwards from a kernel process.
#[derive(Debug)]
pub enum KernelMsg {
    Stdout(String),
    Stderr(String),
    Event(RunnerEvent),
    /// The process ended; nothing follows.
    Exited(ExitInfo),
}

/// Why [`Kernel::fork`] failed: the zygote itself (fall back to spawning), or the kernel.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error(transparent)]
    Zygote(ZygoteError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// Register `fd` with tokio's reactor. tokio deprecated its safe constructors in favour of an
/// `unsafe` one whose condition (the fd stays open and the same for the `AsyncFd`'s life) an
/// `OwnedFd` moved into it meets by construction; the crate forbids `unsafe`, so the deprecated
/// safe call is used for that one type.
pub(crate) fn async_fd(
    fd: OwnedFd,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    #[allow(deprecated)]
    tokio::io::unix::AsyncFd::with_interest(fd, interest)
}

/// pids of forked kernels not yet reaped by their pumps (the agent's orphan reaper leaves them).
static FORKED: std::sync::Mutex<std::collections::BTreeSet<i32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn forget_pid(pid: i32) {
    FORKED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&pid);
}

/// Run `f` with the pids of forked kernels that their pumps will reap, holding the set's lock (so
/// a pump cannot reap one meanwhile and its pid be reused).
pub fn with_forked_pids<R>(f: impl FnOnce(&std::collections::BTreeSet<i32>) -> R) -> R {
    let g = FORKED.lock().unwrap_or_else(|e| e.into_inner());
    f(&g)
}

/// Hibernation control messages (`kernels/PROTOCOL.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HibernateOp {
    Snapshot,
    Restore,
}

/// A kernel's answer to a [`HibernateOp`].
#[derive(Debug, Default)]
pub struct HibernateAnswer {
    /// `done` said `ok`.
    pub ok: bool,
    pub items: Vec<lizard_proto::StateItem>,
    pub lost: Vec<lizard_proto::LostItem>,
}

/// Write `data` into `path` (replacing it) readable and writable by `owner` alone (mode 0600; the
/// agent's own file without an owner).
async fn write_private(path: &Path, data: Vec<u8>, owner: Option<Ids>) -> io::Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        if let Some(ids) = owner {
            std::os::unix::fs::fchown(&f, Some(ids.uid), Some(ids.gid))?;
        }
        f.write_all(&data)
    })
    .await
    .map_err(io::Error::other)?
}

/// How a control message reaches the kernel.
enum Control {
    /// Python and JavaScript: JSON lines on fd 4.
    Json(pipe::Sender),
    /// Bash: shell commands on stdin; the cell source goes through a file.
    Bash {
        /// The spawned shell's stdin pipe, or the FIFO of a forked one.
        stdin: Box<dyn tokio::io::AsyncWrite + Send + Sync + Unpin>,
        cell_file: PathBuf,
        /// The kernel's ids: the cell file is theirs alone (mode 0600), not another context's
        /// to read.
        owner: Option<Ids>,
        /// The inode of the stdin pipe (see [`Kernel::channel_inodes`]).
        inode: u64,
    },
}

use std::os::fd::AsRawFd as _;

/// A running kernel process. Dropping it kills the process group.
pub struct Kernel {
    language: Language,
    pid: i32,
    control: Control,
    msgs: mpsc::Receiver<KernelMsg>,
    forward: Arc<AtomicBool>,
    /// Inodes of its stdout, stderr, events and control (or stdin) pipes.
    pipes: [u64; 4],
    /// Its `/proc` usage files, opened at the first run.
    usage: Option<lizard_jail::procfs::UsageFiles>,
}

impl Kernel {
    /// Start a kernel for `language` in `cwd` and wait until it is ready. `scratch` names files the
    /// kernel may need (the Bash cell file) and must be unique per context. With `cgroup` the
    /// process joins that cgroup before it executes (its context's own, see `crate::context`).
    ///
    /// With `user` the kernel runs as those ids (no supplementary groups, no capabilities, umask
    /// 0002), dropped to after the cgroup join (which needs the agent's root, see
    /// `lizard_jail::creds`).
    pub async fn start(
        cfg: &KernelConfig,
        language: Language,
        cwd: &Path,
        scratch: &str,
        cgroup: Option<&ContextCgroup>,
        user: Option<Ids>,
    ) -> Result<Kernel, KernelError> {
        let pipe_err = |what| move |source| KernelError::Pipe { what, source };
        let (out_r, out_w) = cloexec_pipe().map_err(pipe_err("stdout"))?;
        let (err_r, err_w) = cloexec_pipe().map_err(pipe_err("stderr"))?;
        let (evt_r, evt_w) = cloexec_pipe().map_err(pipe_err("event"))?;

        let mut cmd = cfg.command(language, &[]);
        let program = PathBuf::from(cmd.as_std().get_program());
        cmd.current_dir(cwd)
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w))
            .env("LIZARD_EVENT_FD", EVENT_FD.to_string())
            .env("LIZARD_CONTROL_FD", CONTROL_FD.to_string())
            .process_group(0)
            .kill_on_drop(false);
        let mut fds: Vec<(OwnedFd, i32)> = vec![(evt_w, EVENT_FD)];
        let ctl_sender = if language == Language::Bash {
            cmd.stdin(Stdio::piped());
            None
        } else {
            cmd.stdin(Stdio::null());
            let (ctl_r, ctl_w) = cloexec_pipe().map_err(pipe_err("control"))?;
            fds.push((ctl_r, CONTROL_FD));
            Some(ctl_w)
        };
        map_fds(cmd.as_std_mut(), fds);
        if let Some(cg) = cgroup {
            let files = cg.procs_files().map_err(|e| KernelError::Spawn {
                language,
                program: program.display().to_string(),
                source: io::Error::other(format!("opening the context's cgroup: {e}")),
            })?;
            join_cgroups_on_exec(cmd.as_std_mut(), files);
        }
        if let Some(ids) = user {
            // After the join: registered later, so it runs later in the child.
            lizard_jail::creds::become_user_on_exec(
                cmd.as_std_mut(),
                ids.uid,
                ids.gid,
                crate::users::USER_UMASK,
            );
            if let Some(name) = crate::users::context_user_name(ids.uid) {
                cmd.env("USER", &name).env("LOGNAME", &name);
            }
        }

        let mut child = spawn(cmd, language, &program)?;
        let pid = child.id().map(|p| p as i32).unwrap_or(-1);
        // Under memory pressure the OOM killer should take a kernel (its context reports the death),
        // never the agent.
        if pid > 0 {
            let _ = lizard_jail::procfs::set_oom_score_adj(pid, KERNEL_OOM_SCORE_ADJ);
        }

        let control = match ctl_sender {
            Some(w) => Control::Json(pipe::Sender::from_owned_fd(w).map_err(pipe_err("control"))?),
            None => {
                let stdin = child
                    .stdin
                    .take()
                    .ok_or_else(|| pipe_err("stdin")(io::Error::other("stdin not piped")))?;
                Control::Bash {
                    inode: own_pipe_inode(std::os::fd::AsRawFd::as_raw_fd(&stdin)),
                    stdin: Box::new(stdin),
                    cell_file: cfg.run_dir.join(format!("{scratch}.cell.sh")),
                    owner: user,
                }
            }
        };

        Kernel::attach(
            cfg,
            language,
            pid,
            pump::Proc::Spawned(child),
            control,
            [out_r, err_r, evt_r],
            true,
        )
        .await
    }

    /// Fork a kernel from `zygote` in `cwd` and wait until it is ready. The kernel is then
    /// exactly like a spawned one (own process group, protocol fds, re-parented to the agent).
    /// `forked` runs once the zygote has answered (the kernel exists, it is not ready yet).
    /// Fails with [`ForkError::Zygote`] when the zygote cannot be used (the caller spawns instead).
    /// With `user` the forked kernel drops to those ids before it says `ready`.
    pub async fn fork(
        cfg: &KernelConfig,
        zygote: &Zygote,
        cwd: &Path,
        user: Option<Ids>,
        forked: impl FnOnce(),
    ) -> Result<Kernel, ForkError> {
        let pipe_err = |what| move |source| KernelError::Pipe { what, source };
        let (out_r, out_w) = cloexec_pipe().map_err(pipe_err("stdout"))?;
        let (err_r, err_w) = cloexec_pipe().map_err(pipe_err("stderr"))?;
        let (evt_r, evt_w) = cloexec_pipe().map_err(pipe_err("event"))?;
        let (ctl_r, ctl_w) = cloexec_pipe().map_err(pipe_err("control"))?;
        let (pid, pidfd) = zygote
            .fork(cwd, user, [&out_w, &err_w, &evt_w, &ctl_r])
            .await
            .map_err(ForkError::Zygote)?;
        forked();
        // The kernel has its copies; ours must go so the pump sees end-of-file when it is gone.
        drop((out_w, err_w, evt_w, ctl_r));
        FORKED.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
        let _ = lizard_jail::procfs::set_oom_score_adj(pid, KERNEL_OOM_SCORE_ADJ);
        let proc_ = match async_fd(pidfd, tokio::io::Interest::READABLE) {
            Ok(pidfd) => pump::Proc::Forked { pid, pidfd },
            Err(source) => {
                let _ = signal_group(pid, Signal::SIGKILL);
                forget_pid(pid);
                return Err(pipe_err("pidfd")(source).into());
            }
        };
        let control =
            Control::Json(pipe::Sender::from_owned_fd(ctl_w).map_err(pipe_err("control"))?);
        Ok(Kernel::attach(
            cfg,
            zygote.language(),
            pid,
            proc_,
            control,
            [out_r, err_r, evt_r],
            true,
        )
        .await?)
    }

    /// Start the pump for a started process and wait for its `ready`. `prelude`: a new Bash
    /// shell gets the prelude first (a forked one has it already).
    async fn attach(
        cfg: &KernelConfig,
        language: Language,
        pid: i32,
        proc_: pump::Proc,
        control: Control,
        [out_r, err_r, evt_r]: [OwnedFd; 3],
        prelude: bool,
    ) -> Result<Kernel, KernelError> {
        let mut kernel =
            Kernel::attach_running(language, pid, proc_, control, [out_r, err_r, evt_r])?;
        // During start-up stderr is forwarded too, so a failing start can say why.
        kernel.forward.store(true, Ordering::SeqCst);
        if let (Control::Bash { stdin, .. }, true) = (&mut kernel.control, prelude) {
            stdin
                .write_all(bash::PRELUDE.as_bytes())
                .await
                .map_err(KernelError::Send)?;
        }
        kernel.wait_ready(cfg.start_timeout).await?;
        kernel.forward.store(false, Ordering::SeqCst);
        Ok(kernel)
    }

    /// Start the pump of a started process (its output not forwarded between cells).
    fn attach_running(
        language: Language,
        pid: i32,
        proc_: pump::Proc,
        control: Control,
        [out_r, err_r, evt_r]: [OwnedFd; 3],
    ) -> Result<Kernel, KernelError> {
        let forward = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(256);
        let pipes = [
            own_pipe_inode(out_r.as_raw_fd()),
            own_pipe_inode(err_r.as_raw_fd()),
            own_pipe_inode(evt_r.as_raw_fd()),
            match &control {
                Control::Json(w) => own_pipe_inode(w.as_raw_fd()),
                Control::Bash { inode, .. } => *inode,
            },
        ];
        let pump = match pump::Pump::new(out_r, err_r, evt_r) {
            Ok(p) => p,
            Err(e) => {
                if pid > 0 {
                    let _ = signal_group(pid, Signal::SIGKILL);
                }
                return Err(KernelError::Pipe {
                    what: "pump",
                    source: e,
                });
            }
        };
        tokio::spawn(pump.run(proc_, tx, forward.clone()));
        Ok(Kernel {
            language,
            pid,
            control,
            msgs: rx,
            forward,
            pipes,
            usage: None,
        })
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), KernelError> {
        let language = self.language;
        let mut stderr = String::new();
        let waiting = async {
            loop {
                match self.msgs.recv().await {
                    Some(KernelMsg::Event(RunnerEvent::Ready)) => return Ok(()),
                    Some(KernelMsg::Stderr(s)) | Some(KernelMsg::Stdout(s)) => {
                        if stderr.len() < 64 * 1024 {
                            stderr.push_str(&s)
                        }
                    }
                    Some(KernelMsg::Event(_)) => {}
                    Some(KernelMsg::Exited(exit)) => {
                        return Err(KernelError::DiedAtStart {
                            language,
                            exit,
                            stderr: std::mem::take(&mut stderr),
                        })
                    }
                    None => {
                        return Err(KernelError::DiedAtStart {
                            language,
                            exit: ExitInfo::Unknown,
                            stderr: std::mem::take(&mut stderr),
                        })
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(r) => r,
            Err(_) => Err(KernelError::StartTimeout {
                language,
                timeout_ms: timeout.as_millis() as u64,
            }),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// What a run used is measured with these (`None` if the process's `/proc` files cannot be
    /// opened: it has exited).
    pub fn usage_files(&mut self) -> Option<&mut lizard_jail::procfs::UsageFiles> {
        if self.usage.is_none() {
            self.usage = lizard_jail::procfs::UsageFiles::open(self.pid).ok();
        }
        self.usage.as_mut()
    }

    /// Inodes of the pipes the kernel has for stdout, stderr, events and control (Bash: stdin),
    /// whatever descriptors it holds them at (an exact fork gets new pipes in their place).
    pub fn channel_inodes(&self) -> [u64; 4] {
        self.pipes
    }

    pub fn language(&self) -> Language {
        self.language
    }

    /// Forward (true) or drop (false) output from now on. On while a cell runs.
    pub fn set_forwarding(&self, on: bool) {
        self.forward.store(on, Ordering::SeqCst);
    }

    /// Send one cell. The kernel answers with events ending in `done` (or exits).
    pub async fn send_exec(
        &mut self,
        id: u64,
        code: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<(), KernelError> {
        match &mut self.control {
            Control::Json(w) => {
                let mut line = serde_json::to_vec(&serde_json::json!({
                    "op": "exec", "id": id, "code": code, "env": env,
                }))
                .map_err(|e| KernelError::Send(io::Error::other(e)))?;
                line.push(b'\n');
                w.write_all(&line).await.map_err(KernelError::Send)
            }
            Control::Bash {
                stdin,
                cell_file,
                owner,
                ..
            } => {
                write_private(cell_file, code.as_bytes().to_vec(), *owner)
                    .await
                    .map_err(KernelError::Send)?;
                let line = bash::exec_line(id, cell_file, env);
                stdin
                    .write_all(line.as_bytes())
                    .await
                    .map_err(KernelError::Send)
            }
        }
    }

    /// Save (`snapshot`) or load (`restore`) the kernel's state in `dir` (a path the kernel can
    /// reach) and wait for its `report` and `done`, at most `timeout`. Output written meanwhile is
    /// dropped.
    pub async fn hibernate_op(
        &mut self,
        op: HibernateOp,
        id: u64,
        dir: &Path,
        timeout: Duration,
    ) -> Result<HibernateAnswer, KernelError> {
        let op_name = match op {
            HibernateOp::Snapshot => "snapshot",
            HibernateOp::Restore => "restore",
        };
        match &mut self.control {
            Control::Json(w) => {
                let mut line = serde_json::to_vec(&serde_json::json!({
                    "op": op_name, "id": id, "dir": dir.display().to_string(),
                }))
                .map_err(|e| KernelError::Send(io::Error::other(e)))?;
                line.push(b'\n');
                w.write_all(&line).await.map_err(KernelError::Send)?;
            }
            Control::Bash { stdin, .. } => {
                let line = bash::hibernate_line(op_name, id, dir);
                stdin
                    .write_all(line.as_bytes())
                    .await
                    .map_err(KernelError::Send)?;
            }
        }
        let language = self.language;
        let mut answer = HibernateAnswer::default();
        let waiting = async {
            loop {
                match self.msgs.recv().await {
                    Some(KernelMsg::Event(RunnerEvent::Report { items, lost })) => {
                        answer.items = items;
                        answer.lost = lost;
                    }
                    Some(KernelMsg::Event(RunnerEvent::Done {
                        id: done, status, ..
                    })) if done == id => {
                        answer.ok = status == RunnerStatus::Ok;
                        return Ok(());
                    }
                    Some(KernelMsg::Exited(exit)) => {
                        return Err(KernelError::DiedInHibernateOp { language, exit })
                    }
                    None => {
                        return Err(KernelError::DiedInHibernateOp {
                            language,
                            exit: ExitInfo::Unknown,
                        })
                    }
                    Some(_) => {}
                }
            }
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(r) => r.map(|()| answer),
            Err(_) => Err(KernelError::HibernateOpTimeout {
                language,
                timeout_ms: timeout.as_millis() as u64,
            }),
        }
    }

    /// Make a spare kernel (started ahead in another directory) a context's kernel: the runner's
    /// `setup` message moves it into `cwd` (JavaScript only; `kernels/PROTOCOL.md`).
    pub async fn setup(&mut self, cwd: &Path, timeout: Duration) -> Result<(), KernelError> {
        let language = self.language;
        let failed = |message: String| KernelError::Setup { language, message };
        let Control::Json(w) = &mut self.control else {
            return Err(failed("not supported by this kernel".into()));
        };
        let mut line = serde_json::to_vec(&serde_json::json!({
            "op": "setup", "id": 0, "cwd": cwd.display().to_string(),
        }))
        .map_err(|e| KernelError::Send(io::Error::other(e)))?;
        line.push(b'\n');
        w.write_all(&line).await.map_err(KernelError::Send)?;
        let waiting = async {
            let mut why = String::from("no answer");
            loop {
                match self.msgs.recv().await {
                    Some(KernelMsg::Event(RunnerEvent::Error { value, .. })) => why = value,
                    Some(KernelMsg::Event(RunnerEvent::Done { id: 0, status, .. })) => {
                        return if status == RunnerStatus::Ok {
                            Ok(())
                        } else {
                            Err(failed(why))
                        };
                    }
                    Some(KernelMsg::Exited(exit)) => {
                        return Err(failed(format!("it exited ({exit})")))
                    }
                    None => return Err(failed("it exited".into())),
                    Some(_) => {}
                }
            }
        };
        tokio::time::timeout(timeout, waiting)
            .await
            .unwrap_or_else(|_| {
                Err(failed(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                )))
            })
    }

    /// The next message from the kernel; `None` once the pump has ended.
    pub async fn recv(&mut self) -> Option<KernelMsg> {
        self.msgs.recv().await
    }

    /// The next message if one is already here (`None` also when the pump has ended: `recv`
    /// says so).
    pub fn try_recv(&mut self) -> Option<KernelMsg> {
        self.msgs.try_recv().ok()
    }

    /// Signal the kernel's whole process group.
    pub fn signal(&self, signal: Signal) {
        if self.pid > 0 {
            if let Err(e) = signal_group(self.pid, signal) {
                tracing::warn!(pid = self.pid, error = %e, "cannot signal kernel");
            }
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // The pump task reaps the process once it is gone.
        self.signal(Signal::SIGKILL);
        if let Control::Bash { cell_file, .. } = &self.control {
            let _ = std::fs::remove_file(cell_file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_runner_is_the_one_named_for_this_runner() {
        let venv = tempfile::tempdir().unwrap();
        let python = venv.path().join("bin/python");
        std::fs::create_dir_all(venv.path().join("lizard")).unwrap();
        assert_eq!(compiled_python_runner(&python), None, "none compiled");
        // Another runner's (an older template's) is not taken.
        std::fs::write(venv.path().join("lizard/runner-0000000000000000.pyc"), b"x").unwrap();
        assert_eq!(compiled_python_runner(&python), None);
        let ours = venv.path().join("lizard").join(python_runner_pyc_name());
        std::fs::write(&ours, b"x").unwrap();
        assert_eq!(compiled_python_runner(&python), Some(ours));
    }
}
