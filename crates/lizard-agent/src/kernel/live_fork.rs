//! Fork of a live kernel: the new kernel of a context fork (`crate::context::Contexts::fork`) is a
//! copy-on-write fork of the source context's running kernel (`kernels/PROTOCOL.md`, "Fork of a
//! live kernel").
//!
//! The source's control channel is a pipe, which cannot carry fds; the new kernel's four channels
//! are FIFOs instead, made by the agent in a fresh directory of its run dir: made as the agent's
//! (mode 0700, FIFOs 0600), the agent's ends opened, and only then given to the kernel's uid, so
//! no other uid can open them and what the agent reads is what the kernel writes. The source gets
//! the directory in a `fork` control message (Bash: a command line), forks an intermediate that
//! forks the new kernel and exits (so the agent is the new kernel's parent), and answers with its
//! pid (`forked`) and `done`. The new kernel opens the FIFOs as its fds, leads a process group of
//! its own, joins its cgroup (files the agent lends its uid for the moment) and says `ready`.
//!
//! Nothing the source answers is trusted: user code runs in that process. The pid must name a
//! live process of the context's own ids that is no other context's kernel, and every thread of
//! it must be in the new cgroup once ready (it joins through `tasks`: see
//! `ContextCgroup::set_tasks_owner`); otherwise the fork fails (and that process, if it is the
//! family's, is killed).

use super::{
    async_fd, bash, forget_pid, pump, Control, Kernel, KernelConfig, KernelError, KernelMsg,
    RunnerEvent, RunnerStatus, FORKED,
};
use crate::users::Ids;
use lizard_jail::delegation::ContextCgroup;
use lizard_jail::{signal_group, Signal};
use lizard_proto::{Language, LostItem};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

/// How long the source kernel may take to fork and answer.
const FORK_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// Names of the new kernel's channels in its fork directory.
const CHANNELS: [&str; 4] = ["stdout", "stderr", "events", "control"];

/// A forked kernel, ready, and what of its source's live state it does not have.
pub struct LiveFork {
    pub kernel: Kernel,
    pub lost: Vec<LostItem>,
}

/// The fork directory and the agent's ends of its FIFOs; removed when dropped.
struct Channels {
    dir: PathBuf,
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
    events: Option<OwnedFd>,
    control: Option<OwnedFd>,
    /// Write ends the agent holds on stdout, stderr and events until the kernel has opened its
    /// own: a FIFO without writers reads as end-of-file, which the pump would take for the end.
    keepers: Vec<std::fs::File>,
}

impl Channels {
    fn make(dir: PathBuf, owner: Option<Ids>) -> io::Result<Channels> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let mut ch = Channels {
            dir,
            out: None,
            err: None,
            events: None,
            control: None,
            keepers: Vec::new(),
        };
        for name in CHANNELS {
            lizard_jail::process::make_fifo(&ch.dir.join(name), 0o600)?;
        }
        let open_read = |name: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(ch.dir.join(name))?
                .into())
        };
        ch.out = Some(open_read("stdout")?);
        ch.err = Some(open_read("stderr")?);
        ch.events = Some(open_read("events")?);
        for name in ["stdout", "stderr", "events"] {
            ch.keepers.push(
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(ch.dir.join(name))?,
            );
        }
        // Read and write: opening a FIFO's write end alone fails without a reader (the kernel
        // opens its end later); the agent never reads from it.
        ch.control = Some(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(ch.dir.join("control"))?
                .into(),
        );
        // Only now the kernel's: whatever it does with the names, the agent's ends are these.
        if let Some(ids) = owner {
            for name in CHANNELS {
                std::os::unix::fs::chown(ch.dir.join(name), Some(ids.uid), Some(ids.gid))?;
            }
            std::os::unix::fs::chown(&ch.dir, Some(ids.uid), Some(ids.gid))?;
        }
        Ok(ch)
    }
}

impl Drop for Channels {
    fn drop(&mut self) {
        // Only the names the agent made, then the directory: the kernel's uid owns the directory
        // and may have filled it (with anything: a tree that would take long to walk); then it
        // stays, the uid's own litter in a directory only that uid can enter.
        for name in CHANNELS {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Check that `pid` is a live process (a thread group's leader) that runs with `ids` (real,
/// effective, saved and file-system uid and gid), or with the agent's own uid when contexts have
/// no uids of their own; the error says what it found instead.
fn runs_as(pid: i32, ids: Option<Ids>) -> Result<(), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("its status cannot be read: {e}"))?;
    let line = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
    };
    let field = |name: &str| -> Vec<u32> {
        line(name)
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    };
    let (uids, gids, tgid) = (field("Uid:"), field("Gid:"), field("Tgid:"));
    let found = || {
        format!(
            "Tgid {:?}, Uid {:?}, Gid {:?}, State {:?}",
            line("Tgid:").trim(),
            line("Uid:").trim(),
            line("Gid:").trim(),
            line("State:").trim()
        )
    };
    if tgid.first().copied() != Some(pid as u32) || uids.len() != 4 {
        return Err(found());
    }
    let ok = match ids {
        Some(ids) => uids.iter().all(|u| *u == ids.uid) && gids.iter().all(|g| *g == ids.gid),
        None => uids.iter().all(|u| *u == lizard_jail::creds::euid()),
    };
    if ok {
        Ok(())
    } else {
        Err(found())
    }
}

impl Kernel {
    /// Fork this (idle) kernel into a new one (see the module docs). `scratch` names the new
    /// context's files (unique per context); `user` is the context's ids (the fork keeps them:
    /// an unprivileged process cannot change its uid); `cgroup` the new context's cgroup, which
    /// the new kernel joins before `ready`; `is_other_kernel` says whether a pid is another
    /// context's kernel. Output the source writes meanwhile is dropped.
    pub async fn fork_live(
        &mut self,
        cfg: &KernelConfig,
        scratch: &str,
        user: Option<Ids>,
        cgroup: Option<&ContextCgroup>,
        is_other_kernel: impl Fn(i32) -> bool,
    ) -> Result<LiveFork, KernelError> {
        let language = self.language;
        let failed = |message: String| KernelError::ForkFailed { language, message };
        let dir = cfg.run_dir.join(format!("{scratch}.fork"));
        let mut ch = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || Channels::make(dir, user))
                .await
                .map_err(|e| failed(e.to_string()))?
                .map_err(|e| failed(format!("making the fork's channels: {e}")))?
        };
        // The new kernel joins through `tasks` (see `ContextCgroup::set_tasks_owner`).
        let joins: Vec<PathBuf> = cgroup.map(|c| c.tasks_paths()).unwrap_or_default();
        if let (Some(cg), Some(ids)) = (cgroup, user) {
            cg.set_tasks_owner(ids.uid, ids.gid)
                .map_err(|e| failed(format!("lending the new cgroup: {e}")))?;
        }
        let r = self
            .fork_in(cfg, &mut ch, &joins, user, is_other_kernel)
            .await;
        if let Some(cg) = cgroup {
            let me = (lizard_jail::creds::euid(), lizard_jail::creds::egid());
            if let Err(e) = cg.set_tasks_owner(me.0, me.1) {
                // The context's uid keeps the right to move its own threads into the fork's
                // cgroup: not a way out of the sandbox's limits, but no fork either.
                drop(r);
                return Err(failed(format!("taking the new cgroup back: {e}")));
            }
        }
        let fork = r?;
        if let Some(cg) = cgroup {
            if !cg.holds_all_threads_of(fork.kernel.pid()).unwrap_or(false) {
                return Err(failed("the new kernel did not join its cgroup".into()));
            }
        }
        Ok(fork)
    }

    async fn fork_in(
        &mut self,
        cfg: &KernelConfig,
        ch: &mut Channels,
        procs: &[PathBuf],
        user: Option<Ids>,
        is_other_kernel: impl Fn(i32) -> bool,
    ) -> Result<LiveFork, KernelError> {
        let language = self.language;
        let failed = |message: String| KernelError::ForkFailed { language, message };
        let pipe_err = |what| move |source| KernelError::Pipe { what, source };
        let id = 0u64;
        match &mut self.control {
            Control::Json(w) => {
                let mut line = serde_json::to_vec(&serde_json::json!({
                    "op": "fork", "id": id, "dir": ch.dir.display().to_string(),
                    "cgroup": procs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                }))
                .map_err(|e| KernelError::Send(io::Error::other(e)))?;
                line.push(b'\n');
                w.write_all(&line).await.map_err(KernelError::Send)?;
            }
            Control::Bash { stdin, .. } => {
                let line = bash::fork_line(id, &ch.dir, procs);
                stdin
                    .write_all(line.as_bytes())
                    .await
                    .map_err(KernelError::Send)?;
            }
        }
        let mut pid = None;
        let mut lost = Vec::new();
        let mut refused = None;
        let waiting = async {
            loop {
                match self.msgs.recv().await {
                    Some(KernelMsg::Event(RunnerEvent::Forked { pid: p, lost: l })) => {
                        pid = Some(p);
                        lost = l;
                    }
                    Some(KernelMsg::Event(RunnerEvent::Error { value, .. })) => {
                        refused = Some(value)
                    }
                    Some(KernelMsg::Event(RunnerEvent::Done {
                        id: done, status, ..
                    })) if done == id => return Ok(status),
                    Some(KernelMsg::Exited(exit)) => {
                        return Err(failed(format!("the source kernel exited ({exit})")))
                    }
                    None => return Err(failed("the source kernel exited".into())),
                    Some(_) => {}
                }
            }
        };
        let status = tokio::time::timeout(FORK_OP_TIMEOUT, waiting)
            .await
            .map_err(|_| {
                failed(format!(
                    "the source kernel did not answer within {} ms",
                    FORK_OP_TIMEOUT.as_millis()
                ))
            })??;
        let pid = match (status, pid, refused) {
            (RunnerStatus::Ok, Some(p), _) => p,
            (_, _, Some(why)) => {
                return Err(KernelError::ForkRefused {
                    language,
                    message: why,
                })
            }
            _ => return Err(failed("the source kernel gave no pid".into())),
        };
        // The pid comes from a process user code runs in: it must be a live process of the
        // context's own ids and no other context's kernel (nor this one).
        if pid <= 1 || pid == self.pid || is_other_kernel(pid) {
            return Err(failed(format!("the source kernel answered pid {pid}")));
        }
        let pidfd =
            lizard_jail::process::pidfd_open(pid).map_err(|e| failed(format!("pid {pid}: {e}")))?;
        if let Err(found) = runs_as(pid, user) {
            return Err(failed(format!(
                "pid {pid} is not a process of the context's user ({found})"
            )));
        }
        // From here on the process is the family's (same ids): killed if the fork fails.
        FORKED.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
        let proc_ = match async_fd(pidfd, tokio::io::Interest::READABLE) {
            Ok(pidfd) => pump::Proc::Forked { pid, pidfd },
            Err(source) => {
                let _ = signal_group(pid, Signal::SIGKILL);
                forget_pid(pid);
                return Err(pipe_err("pidfd")(source));
            }
        };
        let take = |fd: &mut Option<OwnedFd>| {
            fd.take()
                .ok_or_else(|| failed("the fork's channels are gone".into()))
        };
        let ctl =
            pipe::Sender::from_owned_fd(take(&mut ch.control)?).map_err(pipe_err("control"))?;
        let control = match language {
            Language::Bash => Control::Bash {
                inode: lizard_jail::procfs::own_pipe_inode(std::os::fd::AsRawFd::as_raw_fd(&ctl)),
                stdin: Box::new(ctl),
                cell_file: cfg.run_dir.join(format!("{}.cell.sh", scratch_of(&ch.dir))),
                owner: user,
            },
            _ => Control::Json(ctl),
        };
        let fds = [
            take(&mut ch.out)?,
            take(&mut ch.err)?,
            take(&mut ch.events)?,
        ];
        let kernel = Kernel::attach(cfg, language, pid, proc_, control, fds, false).await?;
        ch.keepers.clear();
        Ok(LiveFork { kernel, lost })
    }
}

/// The agent's ends of the pipes an exact fork's kernel got in place of its source's
/// (`crate::context::Contexts::prepare_fork`): what it writes on stdout, stderr and events, and
/// what the agent writes to it (control, or Bash's stdin).
pub struct AdoptedChannels {
    pub out: OwnedFd,
    pub err: OwnedFd,
    pub events: OwnedFd,
    pub control: OwnedFd,
}

impl Kernel {
    /// Take on a kernel the host restored from a checkpoint of another (an exact fork): `pid` in
    /// the sandbox's pid namespace, not the agent's child (its init is), already past `ready`
    /// and waiting for its next message. Checked like a live fork's answer: a live process of the
    /// context's ids, no other context's kernel.
    pub async fn adopt(
        cfg: &KernelConfig,
        language: Language,
        pid: i32,
        scratch: &str,
        user: Option<Ids>,
        ch: AdoptedChannels,
        is_other_kernel: impl Fn(i32) -> bool,
    ) -> Result<Kernel, KernelError> {
        let failed = |message: String| KernelError::ForkFailed { language, message };
        let pipe_err = |what| move |source| KernelError::Pipe { what, source };
        if pid <= 1 || is_other_kernel(pid) {
            return Err(failed(format!("the restored kernel has pid {pid}")));
        }
        let pidfd =
            lizard_jail::process::pidfd_open(pid).map_err(|e| failed(format!("pid {pid}: {e}")))?;
        if let Err(found) = runs_as(pid, user) {
            return Err(failed(format!(
                "pid {pid} is not a process of the context's user ({found})"
            )));
        }
        let proc_ = pump::Proc::Forked {
            pid,
            pidfd: async_fd(pidfd, tokio::io::Interest::READABLE).map_err(pipe_err("pidfd"))?,
        };
        let ctl = pipe::Sender::from_owned_fd(ch.control).map_err(pipe_err("control"))?;
        let control = match language {
            Language::Bash => Control::Bash {
                inode: lizard_jail::procfs::own_pipe_inode(std::os::fd::AsRawFd::as_raw_fd(&ctl)),
                stdin: Box::new(ctl),
                cell_file: cfg.run_dir.join(format!("{scratch}.cell.sh")),
                owner: user,
            },
            _ => Control::Json(ctl),
        };
        Kernel::attach_running(language, pid, proc_, control, [ch.out, ch.err, ch.events])
    }
}

/// The scratch name a fork directory was made for (`<scratch>.fork`).
fn scratch_of(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".fork"))
        .unwrap_or("fork")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channels_are_fifos_of_the_agent_until_handed_over_and_go_with_the_drop() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let base = std::env::temp_dir().join(format!("lz-fork-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join("ctx-x.fork");
        let ch = Channels::make(dir.clone(), None).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        for name in CHANNELS {
            let m = std::fs::metadata(dir.join(name)).unwrap();
            assert!(m.file_type().is_fifo(), "{name}");
            assert_eq!(m.permissions().mode() & 0o777, 0o600, "{name}");
            assert_eq!(m.uid(), lizard_jail::creds::euid());
        }
        assert_eq!(scratch_of(&dir), "ctx-x");
        // A second fork into the same directory is refused (never reuse what is there).
        assert!(Channels::make(dir.clone(), None).is_err());
        drop(ch);
        assert!(!dir.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_pid_must_run_as_the_contexts_ids() {
        let me = std::process::id() as i32;
        assert_eq!(runs_as(me, None), Ok(()));
        let other = Ids {
            uid: lizard_jail::creds::euid() + 12345,
            gid: 1,
        };
        let found = runs_as(me, Some(other)).unwrap_err();
        assert!(found.contains(&format!("Tgid \"{me}\"")), "{found}");
        assert!(runs_as(i32::MAX, None).is_err());
    }
}
