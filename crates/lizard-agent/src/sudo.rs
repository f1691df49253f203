//! `sudo` without setuid: the sandbox user asks the agent, over a Unix socket, to run a command as
//! the sandbox's root.
//!
//! Every process of a sandbox has `no_new_privs` and the sandbox's securebits locked (see
//! `lizard_jail::sandbox::child`), so a setuid `sudo` can never raise anyone's privileges, by
//! design. Instead the agent (PID 1, the sandbox's root) serves [`SOCKET`] and installs a small
//! client at [`CLIENT`] (first on the template's `PATH`, before a real `/usr/bin/sudo`; the agent's
//! own binary is not in the sandbox's file system, so the client is a short script for the
//! kernel's Python, which every sandbox has). The client passes its stdin, stdout and stderr
//! (`SCM_RIGHTS`), its arguments, working directory and environment; the agent
//!
//! 1. checks the peer's `SO_PEERCRED` (taken by the kernel at `connect`, not forgeable): the
//!    sandbox user and root may, a context's kernel uid may not (see [`refusal`]);
//! 2. reads the request within [`REQUEST_DEADLINE`], at most [`MAX_REQUEST`] bytes and exactly
//!    three descriptors; at most [`MAX_SESSIONS`] sessions at a time (more are refused at once),
//!    so a flood of connections costs the agent nothing but a refusal each;
//! 3. parses sudo's options ([`parse`]), builds sudo's environment (`env_reset`, `secure_path`
//!    = the template's `PATH`, `HOME`, `USER`, `LOGNAME`, `SUDO_*`; `-E` keeps the caller's);
//! 4. runs the command as uid 0 with the kept capabilities (nothing more: the bounding set,
//!    `no_new_privs` and seccomp are every process's), or as the sandbox user for `-u user`, in a
//!    process group of its own in the agent's (= the caller's) cgroup, the caller's descriptors as
//!    its stdio;
//! 5. relays the signals the client forwards (`SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGTERM`,
//!    `SIGUSR1`, `SIGUSR2`, `SIGWINCH`) to that group, and answers the exit status (a signal `n`
//!    is `128 + n`, as sudo does). When the client goes away first (killed, even by `SIGKILL`:
//!    its socket closes), the command's group is killed: killing a command that ran `sudo` kills
//!    its root child too.
//!
//! Wire: the client sends a 4-byte big-endian length and that many bytes of JSON [`Request`], the
//! three fds attached; then one byte per signal to relay. The agent answers JSON lines
//! ([`Reply`]): text for the client's stdout or stderr, then `{"exit": n}`.

use crate::users::{self, RunAs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// The agent's sudo socket inside the sandbox.
pub const SOCKET: &str = "/run/lizard/sudo.sock";
/// Where the client is installed (before `/usr/bin` on the template's `PATH`).
pub const CLIENT: &str = "/usr/local/bin/sudo";
/// The first line after the client's `#!`: a client carrying it is the agent's to replace.
const MARKER: &str =
    "# lizard sudo client (written by the sandbox's agent; see lizard_agent::sudo)";
/// Largest request (arguments and environment).
pub const MAX_REQUEST: usize = 256 * 1024;
/// How long a client has to send its request.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Sessions served at a time; more are refused at once.
pub const MAX_SESSIONS: usize = 64;
/// How long the agent waits for a client to take a reply.
const REPLY_DEADLINE: Duration = Duration::from_secs(5);
/// Debian's `secure_path`, when the agent has no `PATH` of its own.
const DEFAULT_SECURE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Signals a client may ask to relay.
const RELAYED: [i32; 7] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];
/// Variables `env_reset` keeps: sudo's defaults, and the package registries' mirror and proxy
/// settings the server gives every sandbox (`lizard_packages::sandbox_env`), so that
/// `sudo apt-get install` and `sudo pip install` go through the mirror as the user's own do.
const ENV_KEEP: [&str; 27] = [
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "PIP_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INSECURE_HOST",
    "npm_config_registry",
    "npm_config_audit",
    "TERM",
    "COLORTERM",
    "COLORS",
    "DISPLAY",
    "HOSTNAME",
    "LANG",
    "LANGUAGE",
    "LINGUAS",
    "LS_COLORS",
    "PS1",
    "PS2",
    "TZ",
    "XAUTHORITY",
    "XAUTHORIZATION",
];

/// What the client sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// sudo's arguments (without `argv[0]`).
    pub argv: Vec<String>,
    /// The client's working directory.
    pub cwd: String,
    /// The client's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// What the agent answers: any number of `stdout`/`stderr` texts, then one `exit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Stdout(String),
    Stderr(String),
    Exit(i32),
}

/// What `sudo ARGS` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run a command (or a shell) as `target`.
    Run(Run),
    /// Print this text on stdout and exit 0 (`-l`, `-h`, `-V`, `-v`, `-k`).
    Print(String),
}

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Run {
    pub target: RunAs,
    /// `-E`: keep the caller's environment.
    pub preserve_all: bool,
    /// `--preserve-env=A,B`: also keep these.
    pub preserve: Vec<String>,
    /// `-i`: the target's login shell, in its home.
    pub login: bool,
    /// `-s`: a shell.
    pub shell: bool,
    /// `-H`: `HOME` is the target's (also with `-E`).
    pub set_home: bool,
    /// `-D DIR`.
    pub chdir: Option<String>,
    /// `VAR=value` words before the command: set for it (as sudo does for the command `ALL`).
    pub set_env: Vec<(String, String)>,
    /// The command and its arguments (may be empty with `-i`/`-s`).
    pub command: Vec<String>,
}

const USAGE: &str = "usage: sudo [-EHiknsSv] [-u user] [-D directory] [--preserve-env=list] \
[--] command [arg ...]\n       sudo -l [command]\n\nLizard's setuid-free sudo: runs the command \
as the sandbox's own root (or, with -u user, as the sandbox user) through the sandbox's agent. \
No password is ever asked.\n";

/// A parse failure: the message (without `sudo: `) and exit status 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage(pub String);

fn target_of(name: &str) -> Result<RunAs, Usage> {
    let sandbox_uid = users::sandbox_user().map(|i| i.uid).unwrap_or(1000);
    let n = name.strip_prefix('#').unwrap_or(name);
    if n == users::ROOT_NAME || n == "0" {
        Ok(RunAs::Root)
    } else if n == users::SANDBOX_USER_NAME || n == sandbox_uid.to_string() {
        Ok(RunAs::User)
    } else {
        Err(Usage(format!(
            "unknown user {name}: a sandbox has two users, root and {}",
            users::SANDBOX_USER_NAME
        )))
    }
}

/// Parse sudo's arguments (options stop at the first non-option, as sudo's do).
pub fn parse(args: &[String], host: &str) -> Result<Action, Usage> {
    let mut run = Run {
        target: RunAs::Root,
        ..Run::default()
    };
    let (mut list, mut validate, mut kill) = (false, false, false);
    let mut i = 0;
    let unsupported = |o: &str| {
        Usage(format!(
            "option {o} is not supported by the sandbox's sudo (supported: -u USER, -E, \
             --preserve-env[=LIST], -i, -s, -H, -n, -D DIR, -l, -v, -k, -K, -S, -A, -p PROMPT, \
             -h, -V, --)"
        ))
    };
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let value_or_next = |i: &mut usize| -> Result<String, Usage> {
                if let Some(v) = value.clone() {
                    return Ok(v);
                }
                let v = args
                    .get(*i)
                    .cloned()
                    .ok_or_else(|| Usage(format!("option --{name} requires an argument")))?;
                *i += 1;
                Ok(v)
            };
            match name {
                "user" => run.target = target_of(&value_or_next(&mut i)?)?,
                "preserve-env" => match value {
                    Some(v) => run
                        .preserve
                        .extend(v.split(',').filter(|s| !s.is_empty()).map(String::from)),
                    None => run.preserve_all = true,
                },
                "login" => run.login = true,
                "shell" => run.shell = true,
                "set-home" => run.set_home = true,
                "non-interactive" | "stdin" | "askpass" | "reset-timestamp" => {}
                "chdir" => run.chdir = Some(value_or_next(&mut i)?),
                "prompt" => {
                    value_or_next(&mut i)?;
                }
                "list" => list = true,
                "validate" => validate = true,
                "remove-timestamp" => kill = true,
                "help" => return Ok(Action::Print(USAGE.into())),
                "version" => return Ok(Action::Print(version())),
                _ => return Err(unsupported(a)),
            }
            continue;
        }
        let Some(flags) = a.strip_prefix('-').filter(|f| !f.is_empty()) else {
            i -= 1;
            break;
        };
        let chars: Vec<char> = flags.chars().collect();
        let mut j = 0;
        while j < chars.len() {
            let c = chars[j];
            j += 1;
            // An option with a value takes the rest of this word, or the next word.
            let mut value = |i: &mut usize| -> Result<String, Usage> {
                let rest: String = chars[j..].iter().collect();
                j = chars.len();
                if !rest.is_empty() {
                    return Ok(rest);
                }
                let v = args
                    .get(*i)
                    .cloned()
                    .ok_or_else(|| Usage(format!("option requires an argument -- '{c}'")))?;
                *i += 1;
                Ok(v)
            };
            match c {
                'u' => run.target = target_of(&value(&mut i)?)?,
                'E' => run.preserve_all = true,
                'i' => run.login = true,
                's' => run.shell = true,
                'H' => run.set_home = true,
                'n' | 'S' | 'A' => {}
                'D' => run.chdir = Some(value(&mut i)?),
                'p' => {
                    value(&mut i)?;
                }
                'l' => list = true,
                'v' => validate = true,
                'k' => kill = true,
                'K' => return Ok(Action::Print(String::new())),
                'h' => return Ok(Action::Print(USAGE.into())),
                'V' => return Ok(Action::Print(version())),
                _ => return Err(unsupported(&format!("-{c}"))),
            }
        }
    }
    while let Some((k, v)) = args.get(i).and_then(|a| a.split_once('=')) {
        if !lizard_proto::valid_env_name(k) {
            break;
        }
        run.set_env.push((k.to_string(), v.to_string()));
        i += 1;
    }
    run.command = args[i..].to_vec();
    if run.login && run.shell {
        return Err(Usage(
            "you may not specify both the -i and -s options".into(),
        ));
    }
    if list {
        return Ok(Action::Print(match run.command.first() {
            None => format!(
                "User {} may run the following commands on {host}:\n    (ALL : ALL) NOPASSWD: ALL\n",
                users::SANDBOX_USER_NAME
            ),
            Some(c) => match find_program(c, &secure_path()) {
                Some(p) => {
                    let mut line = vec![p.display().to_string()];
                    line.extend(run.command[1..].iter().cloned());
                    format!("{}\n", line.join(" "))
                }
                None => return Err(Usage(format!("{c}: command not found"))),
            },
        }));
    }
    if run.command.is_empty() && !run.login && !run.shell {
        if validate || kill {
            return Ok(Action::Print(String::new()));
        }
        return Err(Usage(USAGE.trim_end().into()));
    }
    Ok(Action::Run(run))
}

fn version() -> String {
    format!(
        "Sudo version 1.9 (Lizard's setuid-free sudo, lizard {})\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// sudo's `secure_path`: the agent's own `PATH` (the template's, set by the server: not the
/// caller's), else Debian's.
fn secure_path() -> String {
    std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SECURE_PATH.into())
}

fn find_program(name: &str, path: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    path.split(':').filter(|d| !d.is_empty()).find_map(|d| {
        let p = Path::new(d).join(name);
        let m = std::fs::metadata(&p).ok()?;
        (m.is_file() && m.permissions().mode() & 0o111 != 0).then_some(p)
    })
}

/// sudo's quoting of a command for `shell -c` (`-i`, `-s`): a backslash before every character
/// but letters, digits, `_`, `-` and `$`.
fn shell_join(args: &[String]) -> String {
    let mut out = String::new();
    for (n, a) in args.iter().enumerate() {
        if n > 0 {
            out.push(' ');
        }
        for c in a.chars() {
            if !(c.is_alphanumeric() || "_-$".contains(c)) {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// The target's name, home and shell.
fn target_account(target: RunAs, user_home: &Path) -> (&'static str, PathBuf, String) {
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    match target {
        RunAs::Root => (
            users::ROOT_NAME,
            PathBuf::from(users::ROOT_HOME),
            shell.into(),
        ),
        RunAs::User => (
            users::SANDBOX_USER_NAME,
            user_home.to_path_buf(),
            shell.into(),
        ),
    }
}

/// The argv, environment and working directory of a [`Run`] from a caller of uid `caller`.
pub fn prepare_run(
    run: &Run,
    req: &Request,
    caller: u32,
    user_home: &Path,
) -> (Vec<String>, BTreeMap<String, String>, PathBuf) {
    let (name, home, target_shell) = target_account(run.target, user_home);
    let path = secure_path();
    let mut env: BTreeMap<String, String> = if run.preserve_all {
        req.env.clone()
    } else {
        req.env
            .iter()
            .filter(|(k, _)| {
                ENV_KEEP.contains(&k.as_str())
                    || k.starts_with("LC_")
                    || run.preserve.iter().any(|p| p == *k)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if !run.preserve_all || run.set_home || run.login {
        env.insert("HOME".into(), home.display().to_string());
    }
    env.insert("PATH".into(), path);
    env.insert("USER".into(), name.into());
    env.insert("LOGNAME".into(), name.into());
    let shell = if run.shell && !run.login {
        req.env
            .get("SHELL")
            .cloned()
            .unwrap_or(target_shell.clone())
    } else {
        target_shell.clone()
    };
    env.insert("SHELL".into(), target_shell);
    let (caller_name, caller_gid) = match users::sandbox_user() {
        Some(ids) if ids.uid == caller => (users::SANDBOX_USER_NAME, ids.gid),
        _ if caller == 0 => (users::ROOT_NAME, 0),
        _ => (users::SANDBOX_USER_NAME, caller),
    };
    env.insert("SUDO_USER".into(), caller_name.into());
    env.insert("SUDO_UID".into(), caller.to_string());
    env.insert("SUDO_GID".into(), caller_gid.to_string());
    env.extend(run.set_env.iter().cloned());
    let argv: Vec<String> = if run.login || run.shell {
        let mut v = vec![shell.clone()];
        if run.login {
            v.push("-l".into());
        }
        if !run.command.is_empty() {
            v.push("-c".into());
            v.push(shell_join(&run.command));
        }
        v
    } else {
        run.command.clone()
    };
    let shown = match find_program(&argv[0], &env["PATH"]) {
        Some(p) => std::iter::once(p.display().to_string())
            .chain(argv[1..].iter().cloned())
            .collect::<Vec<_>>()
            .join(" "),
        None => argv.join(" "),
    };
    env.insert("SUDO_COMMAND".into(), shown);
    let cwd = match (&run.chdir, run.login) {
        (Some(d), _) => PathBuf::from(d),
        (None, true) => home,
        (None, false) => PathBuf::from(&req.cwd),
    };
    (argv, env, cwd)
}

/// Why a peer of uid `uid` may not use sudo (`None`: it may).
pub fn refusal(uid: u32) -> Option<String> {
    let sandbox = users::sandbox_user().map(|i| i.uid);
    if uid == 0 || Some(uid) == sandbox {
        return None;
    }
    let how = "To run something as root, run it as a command with user \"root\" (HTTP: POST \
        /v1/sandboxes/{id}/commands {\"cmd\": \"...\", \"user\": \"root\"}; E2B: \
        sandbox.commands.run(cmd, user=\"root\")), or run sudo from a command or terminal.";
    Some(match users::context_user_name(uid) {
        Some(ctx) => format!(
            "sudo is not available to a context's code (this kernel runs as {ctx}, uid {uid}): \
             each context runs as a uid of its own so that contexts are isolated from each other, \
             and root inside the sandbox could read and signal every context. {how}\n"
        ),
        None => format!("uid {uid} may not use sudo in this sandbox. {how}\n"),
    })
}

/// The sudo service's configuration.
#[derive(Debug, Clone)]
pub struct SudoConfig {
    /// The sandbox user's home (its `HOME` for `-u user`).
    pub user_home: PathBuf,
    /// The Python that runs the client.
    pub python: PathBuf,
    /// The socket path (normally [`SOCKET`]).
    pub socket: PathBuf,
    /// Where to put the client (normally [`CLIENT`]); `None`: nowhere.
    pub client: Option<PathBuf>,
}

/// Make `/root` (0700, root's) if it is missing, install the client, bind the socket (mode 0666:
/// refusals are the agent's, by peer uid).
pub fn prepare(cfg: &SudoConfig) -> io::Result<UnixListener> {
    ensure_root_home(Path::new(users::ROOT_HOME));
    if let Some(c) = &cfg.client {
        if let Err(e) = install_client(c, &cfg.python, &cfg.socket) {
            tracing::warn!(path = %c.display(), error = %e, "cannot install the sudo client");
        }
    }
    let _ = std::fs::remove_file(&cfg.socket);
    if let Some(d) = cfg.socket.parent() {
        std::fs::create_dir_all(d)?;
    }
    let l = UnixListener::bind(&cfg.socket)?;
    std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

fn ensure_root_home(dir: &Path) {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let made = std::fs::create_dir(dir).and_then(|()| {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            });
            if let Err(e) = made {
                tracing::warn!(error = %e, "cannot make /root");
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot look at /root"),
    }
}

/// The client script for `python`.
pub fn client_script(python: &Path, socket: &Path) -> String {
    format!(
        "#!{python} -IS\n{MARKER}\n{body}",
        python = python.display(),
        body = CLIENT_BODY.replace("@SOCKET@", &socket.display().to_string())
    )
}

fn install_client(path: &Path, python: &Path, socket: &Path) -> io::Result<()> {
    let want = client_script(python, socket);
    // Whatever is there was put by the sandbox's root (the layer persists across pauses): only
    // a small regular file is read (never a FIFO, which would hang the agent's start), and only
    // one of ours is replaced.
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(m) if !m.is_file() || m.len() > 64 * 1024 => return Ok(()),
        Ok(_) => match std::fs::read_to_string(path) {
            Ok(have) if have == want => return Ok(()),
            Ok(have) if have.contains(MARKER) => {}
            // Somebody else's sudo (a binary, a script the user put there): leave it.
            _ => return Ok(()),
        },
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let tmp = path.with_extension("lizard-new");
    let _ = std::fs::remove_file(&tmp);
    std::fs::write(&tmp, want)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, path)
}

const CLIENT_BODY: &str = r#"import json, os, signal, socket, struct, sys
SOCK = "@SOCKET@"
def say(msg):
    try:
        os.write(2, ("sudo: %s\n" % msg).encode("utf-8", "replace"))
    except OSError:
        pass
def main():
    args = sys.argv[1:]
    try:
        args = [a.encode("utf-8").decode("utf-8") for a in args]
    except UnicodeError:
        say("arguments must be valid UTF-8")
        return 1
    env = {}
    for k, v in os.environ.items():
        try:
            k.encode("utf-8"); v.encode("utf-8")
            env[k] = v
        except UnicodeError:
            pass
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open("/dev/null", os.O_RDWR))
    body = json.dumps({"argv": args, "cwd": cwd, "env": env}).encode()
    data = struct.pack(">I", len(body)) + body
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(SOCK)
    except OSError as e:
        say("cannot reach the sandbox's agent at %s: %s" % (SOCK, e.strerror or e))
        return 1
    try:
        n = socket.send_fds(s, [data], fds)
        if n < len(data):
            s.sendall(data[n:])
    except BrokenPipeError:
        pass  # the agent answered before reading (a refusal): read it below
    def relay(sig, frame):
        try:
            s.send(bytes([sig]))
        except OSError:
            pass
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM,
                signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
        signal.signal(sig, relay)
    buf = b""
    while True:
        try:
            chunk = s.recv(65536)
        except InterruptedError:
            continue
        except OSError as e:
            say("lost the sandbox's agent: %s" % e)
            return 1
        if not chunk:
            say("the sandbox's agent closed the connection")
            return 1
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            if "stdout" in msg:
                os.write(1, msg["stdout"].encode())
            elif "stderr" in msg:
                os.write(2, msg["stderr"].encode())
            elif "exit" in msg:
                return msg["exit"]
try:
    code = main()
except KeyboardInterrupt:
    code = 130
os._exit(code & 255 if isinstance(code, int) else 1)
"#;

/// Serve the socket until the agent ends.
pub async fn serve(listener: UnixListener, cfg: SudoConfig) {
    let sessions = Arc::new(tokio::sync::Semaphore::new(MAX_SESSIONS));
    let cfg = Arc::new(cfg);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!(error = %e, "sudo socket accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = sessions.clone().try_acquire_owned();
        let cfg = cfg.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let Ok(_permit) = permit else {
                let msg =
                    format!("too many sudo sessions at once (at most {MAX_SESSIONS}); try again\n");
                reply_end(&mut stream, Some(msg), 1).await;
                return;
            };
            session(stream, &cfg).await;
        });
    }
}

async fn send(stream: &mut UnixStream, r: &Reply) -> io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(io::Error::other)?;
    line.push(b'\n');
    tokio::time::timeout(REPLY_DEADLINE, stream.write_all(&line))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

async fn reply_end(stream: &mut UnixStream, err: Option<String>, code: i32) {
    if let Some(e) = err {
        let text = if e.starts_with("sudo: ") || e.is_empty() {
            e
        } else {
            format!("sudo: {e}")
        };
        let _ = send(stream, &Reply::Stderr(text)).await;
    }
    let _ = send(stream, &Reply::Exit(code)).await;
}

/// Read the request: its JSON, the fds, and any bytes after it (signals sent early).
async fn read_request(stream: &UnixStream) -> Result<(Request, Vec<OwnedFd>, Vec<u8>), String> {
    let mut buf: Vec<u8> = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if len > MAX_REQUEST {
                return Err(format!(
                    "request too large (at most {MAX_REQUEST} bytes of arguments and environment)"
                ));
            }
            if buf.len() >= 4 + len {
                let req: Request = serde_json::from_slice(&buf[4..4 + len])
                    .map_err(|e| format!("malformed request: {e}"))?;
                let rest = buf[4 + len..].to_vec();
                return Ok((req, fds, rest));
            }
        }
        stream
            .readable()
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        let got = stream.try_io(tokio::io::Interest::READABLE, || {
            lizard_jail::fdpass::recv_with_fds(stream, &mut chunk)
        });
        match got {
            Ok((0, _)) => return Err("the client went away".into()),
            Ok((n, mut more)) => {
                buf.extend_from_slice(&chunk[..n]);
                fds.append(&mut more);
                if fds.len() > 3 {
                    return Err("a request carries exactly three descriptors".into());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
}

async fn session(mut stream: UnixStream, cfg: &SudoConfig) {
    let peer = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "sudo: no peer credentials");
            return;
        }
    };
    if let Some(msg) = refusal(peer.uid()) {
        reply_end(&mut stream, Some(msg), 1).await;
        return;
    }
    let read = tokio::time::timeout(REQUEST_DEADLINE, read_request(&stream)).await;
    let (req, fds, early) = match read {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return reply_end(&mut stream, Some(format!("{e}\n")), 1).await,
        Err(_) => {
            let msg = format!("no request within {} s\n", REQUEST_DEADLINE.as_secs());
            return reply_end(&mut stream, Some(msg), 1).await;
        }
    };
    if fds.len() != 3 {
        let msg = "a request carries exactly three descriptors (stdin, stdout, stderr)\n";
        return reply_end(&mut stream, Some(msg.into()), 1).await;
    }
    let host = crate::identity::hostname().unwrap_or_else(|| "sandbox".into());
    let run = match parse(&req.argv, &host) {
        Ok(Action::Print(text)) => {
            if !text.is_empty() {
                let _ = send(&mut stream, &Reply::Stdout(text)).await;
            }
            return reply_end(&mut stream, None, 0).await;
        }
        Ok(Action::Run(r)) => r,
        Err(Usage(m)) => return reply_end(&mut stream, Some(format!("{m}\n")), 1).await,
    };
    let (argv, env, cwd) = prepare_run(&run, &req, peer.uid(), &cfg.user_home);
    if find_program(&argv[0], &env["PATH"]).is_none() {
        let msg = format!("{}: command not found\n", argv[0]);
        return reply_end(&mut stream, Some(msg), 1).await;
    }
    if !cwd.is_dir() {
        let msg = format!("unable to change directory to {}\n", cwd.display());
        return reply_end(&mut stream, Some(msg), 1).await;
    }
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(&env)
        .current_dir(&cwd)
        .kill_on_drop(false)
        .process_group(0);
    let mut fds = fds.into_iter();
    let (i, o, e) = (fds.next(), fds.next(), fds.next());
    if let (Some(i), Some(o), Some(e)) = (i, o, e) {
        cmd.stdin(i).stdout(o).stderr(e);
    }
    match (run.target, users::sandbox_user()) {
        (RunAs::Root, _) | (_, None) => {
            lizard_jail::creds::become_user_on_exec(cmd.as_std_mut(), 0, 0, users::ROOT_UMASK)
        }
        (RunAs::User, Some(ids)) => lizard_jail::creds::become_user_on_exec(
            cmd.as_std_mut(),
            ids.uid,
            ids.gid,
            users::USER_UMASK,
        ),
    }
    let mut child = match crate::procs::spawn_owned_group(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("{}: {e}\n", argv[0]);
            return reply_end(&mut stream, Some(msg), 1).await;
        }
    };
    drop(cmd);
    let pid = child.id().unwrap_or(0) as i32;
    let _ = lizard_jail::procfs::set_oom_score_adj(pid, crate::procs::OOM_SCORE_ADJ);
    tracing::debug!(
        pid,
        caller = peer.uid(),
        root = (run.target == RunAs::Root),
        "sudo"
    );
    let relay = |b: u8| {
        if RELAYED.contains(&(b as i32)) {
            if let Ok(sig) = lizard_jail::Signal::try_from(b as i32) {
                let _ = lizard_jail::signal_group(pid, sig);
            }
        }
    };
    for b in early {
        relay(b);
    }
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = [0u8; 64];
    let mut client_gone = false;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            r = rd.read(&mut buf), if !client_gone => match r {
                Ok(0) | Err(_) => {
                    // The client is gone (killed, or its command was): so is what it ran.
                    client_gone = true;
                    let _ = lizard_jail::signal_group(pid, lizard_jail::Signal::SIGKILL);
                }
                Ok(n) => buf[..n].iter().for_each(|b| relay(*b)),
            },
        }
    };
    crate::procs::disown(pid);
    let code = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(1)
        }
        Err(_) => 1,
    };
    if !client_gone {
        let mut line = serde_json::to_vec(&Reply::Exit(code)).unwrap_or_default();
        line.push(b'\n');
        let _ = tokio::time::timeout(REPLY_DEADLINE, wr.write_all(&line)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn run(s: &[&str]) -> Run {
        match parse(&args(s), "h").unwrap() {
            Action::Run(r) => r,
            other => panic!("{s:?}: {other:?}"),
        }
    }

    #[test]
    fn options_stop_at_the_command() {
        let r = run(&["ls", "-l"]);
        assert_eq!(r.command, args(&["ls", "-l"]));
        assert_eq!(r.target, RunAs::Root);
        let r = run(&["-E", "-n", "--", "-weird"]);
        assert!(r.preserve_all);
        assert_eq!(r.command, args(&["-weird"]));
        let r = run(&["-En", "-u", "user", "id", "-u"]);
        assert_eq!(r.target, RunAs::User);
        assert_eq!(r.command, args(&["id", "-u"]));
        assert_eq!(run(&["-uroot", "id"]).target, RunAs::Root);
        assert_eq!(run(&["--user=#1000", "id"]).target, RunAs::User);
        assert_eq!(run(&["--user", "0", "id"]).target, RunAs::Root);
        let r = run(&["--preserve-env=A,B", "env"]);
        assert_eq!(r.preserve, args(&["A", "B"]));
        assert!(run(&["-i"]).login);
        assert!(run(&["-s", "echo", "x"]).shell);
        assert_eq!(run(&["-D", "/tmp", "pwd"]).chdir.as_deref(), Some("/tmp"));
        assert_eq!(run(&["-k", "id"]).command, args(&["id"]));
        let r = run(&["-E", "A=1", "B=x=y", "env", "C=2"]);
        assert_eq!(
            r.set_env,
            [("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(r.command, args(&["env", "C=2"]));
    }

    #[test]
    fn no_ops_and_errors() {
        for a in [&["-v"][..], &["-k"], &["-K"]] {
            assert_eq!(parse(&args(a), "h").unwrap(), Action::Print(String::new()));
        }
        let Action::Print(l) = parse(&args(&["-l"]), "box").unwrap() else {
            panic!()
        };
        assert!(l.contains("on box") && l.contains("NOPASSWD: ALL"), "{l}");
        assert!(parse(&args(&[]), "h").is_err());
        assert!(parse(&args(&["-u"]), "h").is_err());
        let e = parse(&args(&["-u", "nobody", "id"]), "h").unwrap_err();
        assert!(e.0.contains("unknown user nobody"), "{e:?}");
        let e = parse(&args(&["-b", "id"]), "h").unwrap_err();
        assert!(e.0.contains("-b is not supported"), "{e:?}");
        let e = parse(&args(&["--nope", "id"]), "h").unwrap_err();
        assert!(e.0.contains("--nope"), "{e:?}");
        assert!(parse(&args(&["-i", "-s"]), "h").is_err());
    }

    #[test]
    fn environment_is_reset_like_sudos() {
        let req = Request {
            argv: vec![],
            cwd: "/home/user/x".into(),
            env: [
                ("TERM", "xterm"),
                ("LC_ALL", "C"),
                ("SECRET", "s"),
                ("HOME", "/home/user"),
                ("PATH", "/evil"),
                ("SHELL", "/bin/zsh"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let home = Path::new("/home/user");
        let (argv, env, cwd) = prepare_run(&run(&["sh", "-c", "exit 7"]), &req, 1000, home);
        assert_eq!(argv, args(&["sh", "-c", "exit 7"]));
        assert_eq!(cwd, Path::new("/home/user/x"));
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["USER"], "root");
        assert_eq!(env["LOGNAME"], "root");
        assert_eq!(env["TERM"], "xterm");
        assert_eq!(env["LC_ALL"], "C");
        assert_eq!(env["SUDO_UID"], "1000");
        assert!(env["SUDO_COMMAND"].ends_with("sh -c exit 7"), "{env:?}");
        assert_ne!(env["PATH"], "/evil");
        assert!(!env.contains_key("SECRET"));
        // -E keeps everything but PATH (secure_path) and the user names; HOME too unless -H.
        let (_, env, _) = prepare_run(&run(&["-E", "env"]), &req, 1000, home);
        assert_eq!(env["SECRET"], "s");
        assert_eq!(env["HOME"], "/home/user");
        assert_ne!(env["PATH"], "/evil");
        let (_, env, _) = prepare_run(&run(&["-EH", "env"]), &req, 1000, home);
        assert_eq!(env["HOME"], "/root");
        // -i: a login shell in the target's home; -s: the caller's shell.
        let (argv, _, cwd) = prepare_run(&run(&["-i", "echo", "a b"]), &req, 1000, home);
        assert_eq!(argv[1..], args(&["-l", "-c", "echo a\\ b"]));
        assert_eq!(cwd, Path::new("/root"));
        let (argv, _, _) = prepare_run(&run(&["-s"]), &req, 1000, home);
        assert_eq!(argv, args(&["/bin/zsh"]));
        let (_, env, _) = prepare_run(&run(&["-u", "user", "id"]), &req, 0, home);
        assert_eq!(env["HOME"], "/home/user");
        assert_eq!(env["SUDO_USER"], "root");
    }

    #[test]
    fn quoting_for_a_shell() {
        assert_eq!(
            shell_join(&args(&["a", "b c", "$X", "'q'"])),
            "a b\\ c $X \\'q\\'"
        );
    }

    #[test]
    fn the_client_names_its_python_and_socket() {
        let s = client_script(Path::new("/opt/py"), Path::new("/run/x.sock"));
        assert!(s.starts_with("#!/opt/py -IS\n"), "{s}");
        assert!(s.contains(MARKER));
        assert!(s.contains("SOCK = \"/run/x.sock\""));
    }
}
