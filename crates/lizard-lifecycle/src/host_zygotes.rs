//! The shared Python zygotes (#24, `docs/design/shared-zygote.md`): one pre-imported Python per
//! built-in template, on the host, whose forks join new sandboxes of that template and serve them
//! as their agents' zygotes, so that IPython's pages are shared host-wide instead of imported
//! again in every sandbox.
//!
//! [`HostZygote::start`] makes the zygote's user namespace Z (`lizard_jail::host_zygote::joinable_userns`:
//! root's, mapping the zygote's ids and every sandbox id range), starts `lizard zygote-init` in
//! its jail and cgroup with the template's Python running `runner.py` in its host mode, hands it
//! the native entry and waits until it is warm. A launch of that template then makes the
//! sandbox's user namespace inside Z ([`HostZygote::userns_parent`]) and tells the agent where to
//! listen for the zygote to adopt; once the agent answers, [`HostZygote::join`] has a fork of the
//! zygote join the sandbox (`kernels/PROTOCOL.md`, "The host zygote").
//!
//! What the server reads from a zygote is bounded in size and time: its code is the template's
//! import-time code, which is the trust it is given (built-in templates only), but nothing it
//! does may hang a launch.
//!
//! Not here: the jail (`lizard_jail::host_zygote`), the join itself (`runner.py`), adoption
//! (the agent's `crate::adopt`).

use lizard_jail::cgroup::{Cgroup, CgroupLimits};
use lizard_jail::host_zygote::{HostZygoteSpec, JOIN_SECUREBITS};
use lizard_jail::sandbox::{Capability, UsernsParent, AGENT_CAPS};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Every sandbox's `RLIMIT_NOFILE`, and so its host zygote's (whose forks keep it).
pub const SANDBOX_NOFILE: u64 = 4096;

/// How long a zygote may take to import its modules and say `ready`.
const READY_WITHIN: Duration = Duration::from_secs(120);
/// How long one join may take.
const JOIN_WITHIN: Duration = Duration::from_secs(10);
/// The largest message read from a zygote.
const MAX_MESSAGE: usize = 4096;

/// Where the agent listens for the zygote to adopt, inside the sandbox (its run dir, which it
/// makes its own).
pub const ADOPT_SOCKET: &str = "/tmp/.lizard-agent/adopt/python.sock";

/// What a zygote is started from.
pub struct ZygoteConfig {
    /// The template's name (names the zygote's directory and cgroup).
    pub template: String,
    /// The template's layers, top first.
    pub layers: Vec<PathBuf>,
    /// Its Python, inside the layers.
    pub python: String,
    /// What the Python runs: the runner compiled into the template, if this build's
    /// (`lizard_template::compiled_runner_path`, a path inside the layers), else its source.
    pub runner: Runner,
    /// The template's environment (`template.json`'s `env`).
    pub env: BTreeMap<String, String>,
    /// The zygote's host uid and gid: its own, outside every sandbox range and host account.
    pub uid: u32,
    pub gid: u32,
    /// Host id ranges (start, count) of the sandboxes it may join.
    pub sandbox_ids: (u32, u32),
    /// A root-only directory of the server's for it (made if missing).
    pub dir: PathBuf,
    /// The `lizard` binary (runs `zygote-init`).
    pub lizard_bin: PathBuf,
}

/// The runner a zygote runs: the agent's (the joined process serves the agent with it).
pub enum Runner {
    /// The template's compiled copy, at this path inside its layers.
    Compiled(String),
    /// The source, as `-c`.
    Source,
}

impl Runner {
    /// The template's compiled runner if `layer` (a template's root file system) holds this
    /// build's, for the venv of `python` (`<venv>/bin/python`).
    pub fn for_template(layer: &Path, python: &str) -> Runner {
        let venv = Path::new(python).parent().and_then(Path::parent);
        let Some(venv) = venv.and_then(Path::to_str) else {
            return Runner::Source;
        };
        let pyc = lizard_template::compiled_runner_path(venv);
        match layer.join(pyc.trim_start_matches('/')).is_file() {
            true => Runner::Compiled(pyc),
            false => Runner::Source,
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Runner::Compiled(pyc) => vec!["-s".into(), pyc.clone()],
            Runner::Source => vec![
                "-s".into(),
                "-c".into(),
                lizard_template::PYTHON_RUNNER.into(),
            ],
        }
    }
}

/// A running host zygote. Dropping it kills it.
pub struct HostZygote {
    template: String,
    layers: Vec<PathBuf>,
    uid: u32,
    gid: u32,
    userns: OwnedFd,
    /// The server's end of its control socket; one request at a time.
    control: Mutex<OwnedFd>,
    child: Mutex<std::process::Child>,
    cgroup: Cgroup,
    /// It failed to answer (in time, or at all): launches stop using it.
    broken: std::sync::atomic::AtomicBool,
}

impl Drop for HostZygote {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.cgroup.kill_all();
        let _ = self.cgroup.remove();
    }
}

impl HostZygote {
    /// Start a zygote and wait until it is warm. Blocking (seconds: it imports IPython).
    pub fn start(cfg: &ZygoteConfig) -> Result<HostZygote, String> {
        let err = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| format!("{what}: {e}")
        };
        private_dir(&cfg.dir).map_err(err("the zygote's directory"))?;
        let mountpoint = cfg.dir.join("root");
        private_dir(&mountpoint).map_err(err("the zygote's mount point"))?;
        let log = cfg.dir.join("zygote.log");
        let log_pipe = crate::host_logs::make_pipe(&log).map_err(err("the zygote's log pipe"))?;
        // Read before the zygote opens it for writing (an open of a FIFO waits for a reader).
        crate::host_logs::ensure_drain(&log);
        let userns =
            lizard_jail::host_zygote::joinable_userns(cfg.uid, cfg.gid, &[cfg.sandbox_ids])
                .map_err(|e| lizard_jail::error_chain(&e))?;
        let cgroup = Cgroup::create(
            &cgroup_name(&cfg.template, &cfg.dir),
            &CgroupLimits {
                memory_bytes: Some(1 << 30),
                pids_max: Some(64),
                cpu_millicores: None,
            },
        )
        .map_err(|e| format!("the zygote's cgroup: {}", lizard_jail::error_chain(&e)))?;
        // A zygote a previous server of this data dir left running (it outlives a killed server:
        // nothing else ends it).
        let _ = cgroup.kill_all();
        let (ours, theirs) =
            lizard_jail::fdpass::seqpacket_pair().map_err(err("the zygote's socket"))?;
        let mut env = cfg.env.clone();
        for (k, v) in [
            ("HOME", "/tmp"),
            ("PYTHONUNBUFFERED", "1"),
            ("LIZARD_ZYGOTE_FD", "3"),
            ("LIZARD_HOST_ZYGOTE", "1"),
        ] {
            env.insert(k.into(), v.into());
        }
        env.entry("PATH".into())
            .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
        let spec = HostZygoteSpec {
            layers: cfg.layers.clone(),
            mountpoint,
            uid: cfg.uid,
            gid: cfg.gid,
            hostname: "zygote".into(),
            tmp_bytes: 64 << 20,
            log_path: log_pipe,
            program: cfg.python.clone().into(),
            args: cfg.runner.args(),
            env,
            cwd: "/".into(),
            userns: Some(fd_path(userns.as_fd())),
            nofile: SANDBOX_NOFILE,
        };
        let mut helper = std::process::Command::new(&cfg.lizard_bin);
        helper.arg("zygote-init");
        let child = lizard_jail::host_zygote::spawn(helper, &spec, Some(theirs), Some(&cgroup))
            .map_err(|e| {
                let _ = cgroup.remove();
                format!("starting the zygote: {}", lizard_jail::error_chain(&e))
            })?;
        let z = HostZygote {
            template: cfg.template.clone(),
            layers: cfg.layers.clone(),
            uid: cfg.uid,
            gid: cfg.gid,
            userns,
            control: Mutex::new(ours),
            child: Mutex::new(child),
            cgroup,
            broken: Default::default(),
        };
        // The native entry, by descriptor (the zygote's root does not show the server's files).
        let entry = cfg.dir.join("entry.so");
        std::fs::write(&entry, lizard_jail::zygote_entry::SHARED_OBJECT)
            .map_err(err("writing the native entry"))?;
        let entry = std::fs::File::open(&entry).map_err(err("opening the native entry"))?;
        let ready = z.ask(
            &serde_json::json!({"op": "entry"}),
            &[entry.as_raw_fd()],
            READY_WITHIN,
        )?;
        if ready.get("ev").and_then(|v| v.as_str()) != Some("ready") {
            return Err(format!("the zygote's first answer: {ready}"));
        }
        Ok(z)
    }

    pub fn template(&self) -> &str {
        &self.template
    }

    /// The template layers it runs on, top first.
    pub fn layers(&self) -> &[PathBuf] {
        &self.layers
    }

    /// What a sandbox this zygote is to join is made in (`SandboxSpec::userns_parent`).
    pub fn userns_parent(&self) -> UsernsParent {
        UsernsParent {
            path: fd_path(self.userns.as_fd()),
            uid: self.uid,
            gid: self.gid,
        }
    }

    /// Its host pid.
    pub fn pid(&self) -> u32 {
        self.child.lock().map(|c| c.id()).unwrap_or(0)
    }

    /// Whether its process still runs and has answered every request so far.
    pub fn alive(&self) -> bool {
        !self.broken.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .child
                .lock()
                .map(|mut c| matches!(c.try_wait(), Ok(None)))
                .unwrap_or(false)
    }

    /// Have a fork of the zygote join the sandbox whose PID 1 is `pid` (made in
    /// [`Self::userns_parent`]) and in `cgroup`, and connect to its agent at [`ADOPT_SOCKET`].
    /// Returns the joined process's pid in the sandbox. Blocking (milliseconds).
    pub fn join(&self, pid: i32, cgroup: &Cgroup) -> Result<i32, String> {
        let pidfd = lizard_jail::process::pidfd_open(pid).map_err(|e| format!("pidfd: {e}"))?;
        let procs = cgroup
            .paths()
            .dirs()
            .into_iter()
            .map(|(_, d)| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("cgroup.procs"))
                    .map_err(|e| format!("{}: {e}", d.display()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut fds: Vec<RawFd> = vec![pidfd.as_raw_fd()];
        fds.extend(procs.iter().map(|f| f.as_raw_fd()));
        let answer = self.ask(
            &serde_json::json!({
                "op": "join",
                "socket": ADOPT_SOCKET,
                "caps": Capability::mask(&AGENT_CAPS),
                "securebits": JOIN_SECUREBITS,
            }),
            &fds,
            JOIN_WITHIN,
        )?;
        match (
            answer.get("pid").and_then(|p| p.as_i64()),
            answer.get("error"),
        ) {
            (Some(pid), None) if pid > 0 => Ok(pid as i32),
            (_, Some(e)) => Err(format!("the zygote could not join: {e}")),
            _ => Err(format!("the zygote's answer: {answer}")),
        }
    }

    /// Send `msg` with `fds` and read one answer within `limit`.
    fn ask(
        &self,
        msg: &serde_json::Value,
        fds: &[RawFd],
        limit: Duration,
    ) -> Result<serde_json::Value, String> {
        let sock = self
            .control
            .lock()
            .map_err(|_| "the zygote's socket is poisoned")?;
        let bytes = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        if let Err(e) = lizard_jail::fdpass::send_with_fds(&*sock, &bytes, fds) {
            self.broken
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(format!("writing to the zygote: {e}"));
        }
        let mut buf = [0u8; MAX_MESSAGE];
        // Descriptors it might send along are closed right here (dropped).
        let answer = lizard_jail::fdpass::recv_within(&*sock, &mut buf, limit);
        if !matches!(answer, Ok((n, _)) if n > 0) {
            // A late answer would be taken for the next request's, and a zygote that does not
            // answer makes every launch wait: no more requests to it.
            self.broken
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        match answer {
            Ok((0, _)) => Err("the zygote closed its socket (it exited)".into()),
            Ok((n, _fds)) => {
                serde_json::from_slice(&buf[..n]).map_err(|e| format!("the zygote's answer: {e}"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(format!(
                "the zygote did not answer within {} s",
                limit.as_secs()
            )),
            Err(e) => Err(format!("reading from the zygote: {e}")),
        }
    }
}

/// The zygote's cgroup: one per template and data dir (servers of other data dirs on the host
/// have their own), `zygote-<template>-<FNV-1a of the directory, hex>`.
fn cgroup_name(template: &str, dir: &Path) -> String {
    let hash = dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("zygote-{template}-{hash:016x}")
}

/// `/proc/<our pid>/fd/<n>`: how a helper we start opens our descriptor `fd`.
fn fd_path(fd: std::os::fd::BorrowedFd<'_>) -> PathBuf {
    format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd()).into()
}

/// Make `dir` (if missing) root's alone: mode 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}
