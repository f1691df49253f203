//! The zygotes: one pre-warmed runner per agent and language that forks kernels on request.
//!
//! A zygote is `runner.py` or `runner.js` started with `LIZARD_ZYGOTE_FD` (a `SOCK_SEQPACKET`
//! socket) instead of the protocol fds. It warms up exactly as a kernel does (Python: IPython
//! imported, the shell built; JavaScript: acorn and the cell compiler), says `{"ev":"ready"}` and
//! then serves fork requests (`kernels/PROTOCOL.md`, "The zygotes"): the agent sends
//! `{"op":"fork","cwd":…}` with the four pipe ends a spawned kernel would get; a double fork
//! re-parents the new kernel to the agent, and the answer `{"pid":N}` carries its pidfd. The kernel
//! shares the zygote's pages copy-on-write and needs no start-up: a create costs a fork.
//!
//! Node is started with the flags that make forking it safe ([`NODE_ZYGOTE_FLAGS`]; the rest is
//! `kernels/js/zygote.js`'s job).
//!
//! This module only talks to the zygote; `super::Launcher` decides when to use it and falls back
//! to spawning. Not here: reaping (the pump waits on the pidfd) or the kernel protocol itself.

use super::{ExitInfo, KernelConfig, KernelError};
use lizard_jail::fdpass;
use lizard_proto::Language;
use serde::Deserialize;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The most of the zygote's stderr that reaches the agent's log (the rest is read and dropped).
const STDERR_LOG_LIMIT: usize = 64 * 1024;

/// Copy the zygote's stderr into the agent's log, line by line, up to [`STDERR_LOG_LIMIT`] bytes;
/// keep reading (and dropping) after that so the zygote never blocks on a full pipe.
async fn forward_stderr(stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).split(b'\n');
    let mut logged = 0usize;
    while let Ok(Some(line)) = lines.next_segment().await {
        if logged < STDERR_LOG_LIMIT {
            let text = String::from_utf8_lossy(&line[..line.len().min(STDERR_LOG_LIMIT - logged)]);
            logged += line.len();
            tracing::warn!(target: "zygote", "{text}");
            if logged >= STDERR_LOG_LIMIT {
                tracing::warn!(target: "zygote", "more zygote stderr is dropped");
            }
        }
    }
}

/// fd number of the fork socket in the zygote.
const ZYGOTE_FD: i32 = 5;

/// Node flags of the JavaScript zygote (and so of every kernel it forks): a fork keeps only the
/// calling thread, so V8 must not depend on background threads (`--single-threaded`: no
/// concurrent marking, sweeping or compilation; one idle platform worker; no SIGUSR1 inspector
/// thread). Costs ≈ 3–5 % on CPU-bound JavaScript (compilation and marking on the main thread).
pub const NODE_ZYGOTE_FLAGS: [&str; 3] =
    ["--single-threaded", "--v8-pool-size=1", "--disable-sigusr1"];

/// How long one fork request may take (the zygote forks twice and answers; milliseconds normally).
const FORK_TIMEOUT: Duration = Duration::from_secs(10);

/// Failures of the zygote; the launcher answers them by spawning instead.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    #[error("cannot talk to the zygote")]
    Io(#[from] io::Error),
    #[error("the zygote closed its socket (it exited)")]
    Gone,
    #[error("the zygote did not answer within {0} ms")]
    Timeout(u64),
    #[error("the zygote could not fork: {0}")]
    Refused(String),
    #[error("unexpected answer from the zygote: {0}")]
    BadAnswer(String),
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    ev: Option<String>,
    #[serde(default)]
    pid: Option<i32>,
    #[serde(default)]
    error: Option<String>,
}

/// A running zygote. Dropping it kills it (the kernels it forked live on).
pub struct Zygote {
    sock: AsyncFd<OwnedFd>,
    /// One fork request in flight at a time (the answers are not tagged).
    busy: tokio::sync::Mutex<()>,
    /// A request failed half-way (timeout, bad answer): a late answer could be taken for the next
    /// request's, so this zygote is not asked again.
    broken: std::sync::atomic::AtomicBool,
    process: Process,
    pid: i32,
    language: Language,
}

/// How the agent holds its zygote's process.
enum Process {
    /// Started by the agent ([`Zygote::start`]); killed on drop.
    Spawned(tokio::process::Child),
    /// A host zygote's fork that joined the sandbox and connected ([`Zygote::adopt`]): a pidfd of
    /// it, killed on drop. The agent's child as well (its orphan reaper reaps it).
    Adopted(OwnedFd),
}

impl Drop for Zygote {
    fn drop(&mut self) {
        if let Process::Adopted(pidfd) = &self.process {
            let _ = lizard_jail::process::pidfd_kill(pidfd);
        }
    }
}

impl Zygote {
    /// Start the `language` zygote in `cwd` and wait until it is ready (at most the kernel start
    /// timeout). Bash has none (it is spawned in ≈ 2 ms).
    pub async fn start(
        cfg: &KernelConfig,
        language: Language,
        cwd: &Path,
    ) -> Result<Zygote, KernelError> {
        let (ours, theirs) = fdpass::seqpacket_pair().map_err(|source| KernelError::Pipe {
            what: "zygote socket",
            source,
        })?;
        // The zygote runs as the agent (the sandbox's root) and forks kernels that drop to their
        // context's uid: it must load nothing user code can write. No user site (`-s`: the
        // kernel adds it after the drop), and a HOME of its own (the agent's, not the user's:
        // IPython, Node's `~/.node_modules`).
        let mut cmd = match language {
            Language::Python => cfg.command(language, &["-s"]),
            Language::Javascript => cfg.command(language, &NODE_ZYGOTE_FLAGS),
            Language::Bash => {
                return Err(KernelError::Spawn {
                    language,
                    program: cfg.bash.display().to_string(),
                    source: io::Error::other("bash kernels have no zygote"),
                })
            }
        };
        let program = std::path::PathBuf::from(cmd.as_std().get_program());
        cmd.current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A pipe, not the agent's own stderr: that is the sandbox's log file on the host, and
            // no process of the sandbox but the (non-dumpable) agent may hold it — its path shows
            // in /proc/<pid>/fd and writes to it would bypass the sandbox's disk quota.
            .stderr(Stdio::piped())
            .env("LIZARD_ZYGOTE_FD", ZYGOTE_FD.to_string())
            .env("HOME", cwd)
            .process_group(0)
            .kill_on_drop(true);
        lizard_jail::map_fds(cmd.as_std_mut(), vec![(theirs, ZYGOTE_FD)]);
        let mut child = super::spawn(cmd, language, &program)?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr));
        }
        let pid = child.id().map(|p| p as i32).unwrap_or(-1);
        if pid > 0 {
            // Like a kernel: under memory pressure it goes before the agent.
            let _ = lizard_jail::procfs::set_oom_score_adj(pid, super::KERNEL_OOM_SCORE_ADJ);
        }
        let sock =
            super::async_fd(ours, Interest::READABLE | Interest::WRITABLE).map_err(|source| {
                KernelError::Pipe {
                    what: "zygote socket",
                    source,
                }
            })?;
        let z = Zygote {
            sock,
            busy: tokio::sync::Mutex::new(()),
            broken: std::sync::atomic::AtomicBool::new(false),
            process: Process::Spawned(child),
            pid,
            language,
        };
        // If the zygote dies, its end of the socket closes and `recv` says so.
        let ready = tokio::time::timeout(cfg.start_timeout, z.recv()).await;
        match ready {
            Ok(Ok((a, _))) if a.ev.as_deref() == Some("ready") => Ok(z),
            Ok(Ok((a, _))) => Err(KernelError::DiedAtStart {
                language,
                exit: ExitInfo::Unknown,
                stderr: format!("zygote: unexpected first message {:?}", a.error),
            }),
            Ok(Err(e)) => {
                let mut z = z;
                let exit = match &mut z.process {
                    Process::Spawned(child) => {
                        match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                            Ok(Ok(s)) => exit_info(s),
                            _ => ExitInfo::Unknown,
                        }
                    }
                    Process::Adopted(_) => ExitInfo::Unknown,
                };
                Err(KernelError::DiedAtStart {
                    language,
                    exit,
                    stderr: format!("zygote: {e}"),
                })
            }
            Err(_) => Err(KernelError::StartTimeout {
                language,
                timeout_ms: cfg.start_timeout.as_millis() as u64,
            }),
        }
    }

    /// Adopt the zygote at the other end of `conn`, a connection to the agent's adoption socket:
    /// a fork of a host zygote that joined this sandbox (`kernels/PROTOCOL.md`, "The host
    /// zygote"). It must be the agent's uid (the socket's directory is the agent's alone; the
    /// peer's credentials are checked again). It gets the environment the agent's own zygote
    /// would have (`cwd` as its `HOME`) and must say `ready` within the kernel start timeout.
    pub async fn adopt(
        cfg: &KernelConfig,
        conn: OwnedFd,
        language: Language,
        cwd: &Path,
    ) -> Result<Zygote, ZygoteError> {
        let (uid, pidfd) = fdpass::peer(&conn)?;
        if uid != lizard_jail::creds::euid() {
            return Err(ZygoteError::Refused(format!(
                "a connection from uid {uid}, not the agent's"
            )));
        }
        let pid = lizard_jail::process::pidfd_pid(&pidfd)?.ok_or(ZygoteError::Gone)?;
        let sock = super::async_fd(conn, Interest::READABLE | Interest::WRITABLE)?;
        let z = Zygote {
            sock,
            busy: tokio::sync::Mutex::new(()),
            broken: std::sync::atomic::AtomicBool::new(false),
            process: Process::Adopted(pidfd),
            pid,
            language,
        };
        // The agent's environment with what `cfg.command` sets for a kernel or zygote.
        let lossy = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
        let mut env: std::collections::BTreeMap<String, String> = std::env::vars_os()
            .map(|(k, v)| (lossy(&k), lossy(&v)))
            .collect();
        for (k, v) in cfg.command(language, &[]).as_std().get_envs() {
            match v {
                Some(v) => env.insert(lossy(k), lossy(v)),
                None => env.remove(&lossy(k)),
            };
        }
        env.insert("HOME".into(), lossy(cwd.as_os_str()));
        let msg = serde_json::to_vec(&serde_json::json!({"op": "env", "env": env}))
            .map_err(|e| ZygoteError::BadAnswer(e.to_string()))?;
        let hello = async {
            z.sock
                .async_io(Interest::WRITABLE, |s| fdpass::send_with_fds(s, &msg, &[]))
                .await?;
            z.recv().await
        };
        match tokio::time::timeout(cfg.start_timeout, hello).await {
            Ok(Ok((a, _))) if a.ev.as_deref() == Some("ready") => {
                let _ = lizard_jail::procfs::set_oom_score_adj(pid, super::KERNEL_OOM_SCORE_ADJ);
                Ok(z)
            }
            Ok(Ok((a, _))) => Err(ZygoteError::BadAnswer(format!(
                "a first message other than ready ({:?})",
                a.error
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ZygoteError::Timeout(cfg.start_timeout.as_millis() as u64)),
        }
    }

    /// pid of the zygote process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The language of the kernels it forks.
    pub fn language(&self) -> Language {
        self.language
    }

    /// Fork a kernel in `cwd` whose fds 1, 2, 3, 4 are `fds` (stdout, stderr, event, control).
    /// Returns its pid and pidfd. Concurrent calls are served one after the other.
    /// With `user`, the kernel drops to those ids (no supplementary groups, umask 0002) and
    /// makes itself non-dumpable before it says `ready`.
    pub async fn fork(
        &self,
        cwd: &Path,
        user: Option<crate::users::Ids>,
        fds: [&OwnedFd; 4],
    ) -> Result<(i32, OwnedFd), ZygoteError> {
        use std::sync::atomic::Ordering;
        let _one_at_a_time = self.busy.lock().await;
        if self.broken.load(Ordering::SeqCst) {
            return Err(ZygoteError::Gone);
        }
        let r = self.exchange(cwd, user, fds).await;
        if r.is_err() {
            self.broken.store(true, Ordering::SeqCst);
        }
        r
    }

    async fn exchange(
        &self,
        cwd: &Path,
        user: Option<crate::users::Ids>,
        fds: [&OwnedFd; 4],
    ) -> Result<(i32, OwnedFd), ZygoteError> {
        let mut req = serde_json::json!({
            "op": "fork", "cwd": cwd.display().to_string(),
        });
        // The zygote may predate a CRIU restore: the kernel takes the clone's id (`env`, set in
        // its environment after the fork; see `crate::identity`).
        let identity: serde_json::Map<String, serde_json::Value> = crate::identity::env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect();
        if !identity.is_empty() {
            req["env"] = identity.into();
        }
        if let Some(ids) = user {
            req["uid"] = ids.uid.into();
            req["gid"] = ids.gid.into();
            req["umask"] = crate::users::USER_UMASK.into();
            // The zygote's HOME is its own directory (see `Zygote::start`); the kernel's is the
            // sandbox user's.
            if let Ok(home) = std::env::var("HOME") {
                req["home"] = home.into();
            }
            if let Some(name) = crate::users::context_user_name(ids.uid) {
                req["user"] = name.into();
            }
        }
        let req = serde_json::to_vec(&req).map_err(|e| ZygoteError::BadAnswer(e.to_string()))?;
        let raw = fds.map(|f| f.as_raw_fd());
        let exchange = async {
            self.sock
                .async_io(Interest::WRITABLE, |s| fdpass::send_with_fds(s, &req, &raw))
                .await
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::EPIPE) | Some(libc::ECONNRESET) => ZygoteError::Gone,
                    _ => ZygoteError::Io(e),
                })?;
            self.recv().await
        };
        let (answer, mut got) = tokio::time::timeout(FORK_TIMEOUT, exchange)
            .await
            .map_err(|_| ZygoteError::Timeout(FORK_TIMEOUT.as_millis() as u64))??;
        match (answer.pid, answer.error, got.pop()) {
            (Some(pid), None, Some(pidfd)) if pid > 0 && got.is_empty() => Ok((pid, pidfd)),
            (_, Some(e), _) => Err(ZygoteError::Refused(e)),
            (pid, _, fd) => Err(ZygoteError::BadAnswer(format!(
                "pid {pid:?} with {} fds",
                got.len() + fd.is_some() as usize
            ))),
        }
    }

    /// The next message from the zygote and the fds that came with it.
    async fn recv(&self) -> Result<(Answer, Vec<OwnedFd>), ZygoteError> {
        let mut buf = [0u8; 4096];
        let (n, fds) = self
            .sock
            .async_io(Interest::READABLE, |s| fdpass::recv_with_fds(s, &mut buf))
            .await?;
        if n == 0 {
            return Err(ZygoteError::Gone);
        }
        let answer = serde_json::from_slice(&buf[..n]).map_err(|e| {
            ZygoteError::BadAnswer(format!("{e}: {}", String::from_utf8_lossy(&buf[..n])))
        })?;
        Ok((answer, fds))
    }
}

fn exit_info(s: std::process::ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitInfo::Code(c),
        (None, Some(sig)) => ExitInfo::Signal(sig),
        _ => ExitInfo::Unknown,
    }
}
