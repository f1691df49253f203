//! What the integration tests of the workspace's crates share, in one place (a dev-dependency
//! only, never published): [`needs_root!`], the check at the top of every test that needs root
//! (it skips with one line on stderr when not root, and fails when `CI` or
//! `LIZARD_REQUIRE_ROOT=1` says every test must run); finding what the scripts built (the kernel
//! environment, the templates, CRIU, the test registries) from their environment variables or
//! their default place under `target/`; waiting for a condition with a deadline; starting,
//! signalling and killing child processes and reading their output with a limit; and a raw
//! HTTP/1.1 client for the places where a test must see the bytes (or cannot await). Each
//! crate's own harness (`tests/common/`) keeps only what is its own — a `lizard serve`, a
//! `lizard-agent`, a sandbox launched by `lizard-jail` — on top of this.

use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Root

/// What needs root, said in every skip and every failure of [`needs_root`].
const WHY_ROOT: &str = "namespaces, cgroups, mounts";

/// Whether this process runs as root (effective uid 0, from `/proc/self/status`).
pub fn is_root() -> bool {
    proc_status("self", "Uid")
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

/// Whether every test must run, none may skip: `CI` is set (to anything) or
/// `LIZARD_REQUIRE_ROOT=1`.
fn root_required() -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var_os("LIZARD_REQUIRE_ROOT").is_some_and(|v| v == "1")
}

/// The check of a test that needs root (use [`needs_root!`], which returns from the test): true as
/// root. Not root, it panics if `CI` is set or `LIZARD_REQUIRE_ROOT=1` (a skipped test there would
/// hide what it tests); otherwise it prints one line to stderr naming the test (past libtest's
/// output capture) and returns false.
pub fn needs_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        !root_required(),
        "{test} needs root ({WHY_ROOT}: what a sandbox is made of) and runs as uid {}, but {} \
         says no test may skip: run the tests as root, as the README says",
        proc_status("self", "Uid")
            .unwrap_or_default()
            .split_whitespace()
            .nth(1)
            .unwrap_or("?"),
        if std::env::var_os("CI").is_some() {
            "CI"
        } else {
            "LIZARD_REQUIRE_ROOT=1"
        }
    );
    // Straight to the descriptor, not `eprintln!`: libtest captures the macros' output of a
    // passing test, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test} needs root ({WHY_ROOT}): run the tests as root, as the README says"
    );
    false
}

/// The running test's name: libtest runs each test on a thread named after it (a test without
/// the harness runs on `main`: then the test binary's name).
pub fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => {
            let exe = std::env::args().next().unwrap_or_default();
            let file = Path::new(&exe)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "this test".to_string());
            // `target/debug/deps/<name>-<16 hex digits of cargo's hash>`.
            match file.rsplit_once('-') {
                Some((name, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    name.to_string()
                }
                _ => file,
            }
        }
    }
}

/// At the top of a test that needs root: returns from it (it passes, skipped with a line on
/// stderr) unless it runs as root; fails it instead when `CI` or `LIZARD_REQUIRE_ROOT=1` is set.
/// See [`needs_root`].
#[macro_export]
macro_rules! needs_root {
    () => {
        if !$crate::needs_root(&$crate::test_name()) {
            return;
        }
    };
}

// ---------------------------------------------------------------------------------------------
// What the scripts built

/// The workspace's `target` directory (where `scripts/` put what they build).
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target")
}

/// A built artefact: the path in the environment variable `var`, else `target/<default>`; a
/// panic saying `what` is missing and `how` to make it unless `present` holds for it.
pub fn built(
    var: &str,
    default: &str,
    present: fn(&Path) -> bool,
    what: &str,
    how: &str,
) -> PathBuf {
    let p = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join(default));
    assert!(
        present(&p),
        "{what} not found at {} (from {var} or its default target/{default}): {how}",
        p.display()
    );
    p
}

/// At the top of a test that needs root and the cached CRIU: returns from it unless both are
/// there (see [`needs_root!`] and [`cached_criu`], which say why, or fail it where no test may
/// skip); else the cached CRIU's path.
#[macro_export]
macro_rules! needs_root_and_criu {
    () => {{
        $crate::needs_root!();
        match $crate::cached_criu() {
            Some(criu) => criu,
            None => return,
        }
    }};
}

/// The CRIU that `scripts/criu.sh` caches in `target/criu`, or None (with a note on stderr) when
/// it is not installed — unless `LIZARD_REQUIRE_CRIU=1` (set by `scripts/test.sh`, which installs
/// it): then a missing CRIU fails the test instead of skipping it.
pub fn cached_criu() -> Option<PathBuf> {
    let p = target_dir().join("criu").join("criu");
    if p.is_file() {
        return Some(p);
    }
    let why = format!(
        "the cached CRIU is not installed at {} (scripts/criu.sh installs it)",
        p.display()
    );
    assert!(
        std::env::var_os("LIZARD_REQUIRE_CRIU").is_none_or(|v| v != "1"),
        "LIZARD_REQUIRE_CRIU=1 but {why}"
    );
    eprintln!("SKIPPED: {why}");
    None
}

/// A temporary directory named `lizard-<prefix>…`, removed when dropped.
pub fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lizard-{prefix}"))
        .tempdir()
        .unwrap_or_else(|e| panic!("a temporary directory: {e}"))
}

/// A string no other test process (nor another call in this one) uses.
pub fn nonce() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A TCP port on 127.0.0.1 free a moment ago (a server started on it may still race another).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Call `f` until it gives `Some` or `limit` passes (then None), pausing between calls from
/// 200 µs up to 20 ms.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_micros(200);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// [`wait_for`], a panic naming `what` at the deadline.
pub fn poll<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for(limit, f).unwrap_or_else(|| panic!("timed out waiting for {what} ({limit:?})"))
}

/// Await `f()` until it is true (true) or `timeout` passes (false), every 25 ms.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// `LIZARD_LOG` for a Lizard program a test starts: the test's own, else `warn`.
pub fn log_level() -> String {
    std::env::var("LIZARD_LOG").unwrap_or_else(|_| "warn".into())
}

/// Start `cmd` (a Lizard program that prints one line when it is ready) with [`log_level`], its
/// stdout piped and its stderr the test's: the child and that first line.
pub fn spawn_ready(cmd: &mut Command, what: &str) -> (Child, String) {
    let mut child = cmd
        .env("LIZARD_LOG", log_level())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let line = first_line(&mut child);
    (child, line)
}

/// The first line `child` writes to its (piped) stdout; empty if it closes it first.
pub fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    let out = child.stdout.take().expect("a piped stdout");
    let _ = BufReader::new(out).read_line(&mut line);
    line
}

/// Send `signal` (as `kill` spells it: `-TERM`, `-9`, …) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Send `sig` to `child` and wait at most `deadline` for it to exit: true if it did; else it is
/// SIGKILLed and reaped, and false.
pub fn stop_within(child: &mut Child, sig: &str, deadline: Duration) -> bool {
    signal(child.id(), sig);
    let exited = wait_for(deadline, || child.try_wait().ok().flatten()).is_some();
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    exited
}

/// SIGKILL the process group led by `child` (not reaped yet, so its pid is still its own) and
/// reap it.
pub fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

/// A server process in its own process group, its stdout and stderr in a file: the whole group is
/// SIGKILLed and reaped on drop.
pub struct Daemon {
    child: Child,
    /// Reaped already (its pid may then belong to another process: never signal it again).
    reaped: bool,
}

impl Daemon {
    pub fn spawn(mut cmd: Command, out: &Path) -> std::io::Result<Daemon> {
        let f = std::fs::File::create(out)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .process_group(0)
            .spawn()?;
        Ok(Daemon {
            child,
            reaped: false,
        })
    }

    /// How it exited, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let s = self.child.try_wait().ok().flatten();
        self.reaped |= s.is_some();
        s
    }

    /// Its process id (also its process group's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.reaped {
            kill_group(&mut self.child);
        }
    }
}

/// The most bytes read of a command's output or of an HTTP answer.
pub const MAX_OUTPUT: u64 = 64 << 20;

/// The last `lines` lines of the file at `path` (empty if unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Run `cmd` to its end within `deadline`, its stdin empty, in its own process group (killed whole
/// at the deadline, which is a panic): its exit status and its stdout and stderr together (at most
/// [`MAX_OUTPUT`] bytes).
pub fn run_within(cmd: &mut Command, deadline: Duration) -> (ExitStatus, String) {
    let f = tempfile::tempfile().unwrap();
    cmd.stdin(Stdio::null());
    let status = run_to_files(cmd, deadline, &f, None);
    (status, read_back(&f))
}

/// [`run_within`] `deadline`, a panic with its output unless it succeeds: its output.
pub fn run_ok(cmd: &mut Command, deadline: Duration) -> String {
    let (status, out) = run_within(cmd, deadline);
    assert!(status.success(), "{cmd:?}: {status}; output:\n{out}");
    out
}

/// Run `cmd` to its end within `deadline` as [`run_within`] does, with `stdin` as its standard
/// input: its exit status, stdout and stderr (each at most [`MAX_OUTPUT`] bytes).
pub fn output_within(
    cmd: &mut Command,
    stdin: &[u8],
    deadline: Duration,
) -> (ExitStatus, String, String) {
    let mut input = tempfile::tempfile().unwrap();
    input.write_all(stdin).unwrap();
    input.rewind().unwrap();
    cmd.stdin(input);
    let (out, err) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
    let status = run_to_files(cmd, deadline, &out, Some(&err));
    (status, read_back(&out), read_back(&err))
}

/// [`output_within`] `deadline`, a panic with its stderr unless it succeeds: its stdout, read as
/// JSON (a panic with it if it is not).
pub fn json_within(cmd: &mut Command, deadline: Duration) -> serde_json::Value {
    let (status, out, err) = output_within(cmd, b"", deadline);
    assert!(status.success(), "{cmd:?}: {status}; stderr:\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{cmd:?}: {e}; stdout:\n{out}"))
}

/// `cmd` (its stdin set) spawned with its stdout into `out` and its stderr into `err` (`None`:
/// into `out` too), waited for up to `deadline`.
fn run_to_files(
    cmd: &mut Command,
    deadline: Duration,
    out: &std::fs::File,
    err: Option<&std::fs::File>,
) -> ExitStatus {
    let mut child = cmd
        .stdout(out.try_clone().unwrap())
        .stderr(err.unwrap_or(out).try_clone().unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let status = wait_for(deadline, || child.try_wait().unwrap());
    let Some(status) = status else {
        kill_group(&mut child);
        let err = err.map(read_back).unwrap_or_default();
        panic!(
            "{cmd:?} still running after {deadline:?}; output:\n{}{err}",
            read_back(out)
        );
    };
    status
}

/// What a command wrote into `f` (at most [`MAX_OUTPUT`] bytes).
fn read_back(f: &std::fs::File) -> String {
    let mut f = f.try_clone().unwrap();
    f.rewind().unwrap();
    let mut s = String::new();
    let _ = f.take(MAX_OUTPUT).read_to_string(&mut s);
    s
}

// ---------------------------------------------------------------------------------------------
// /proc

/// The value of line `key:` of `/proc/<pid>/status` (`pid` may be `self`), trimmed.
pub fn proc_status(pid: impl std::fmt::Display, key: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .strip_prefix(':')
                .map(|v| v.trim().to_string())
        })
}

/// Whether host process `pid` is gone or a zombie (it has exited; its parent may reap it late).
pub fn gone_or_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// An HTTP/1.1 answer read to its end: status, the head (status line and headers) in lower
/// case, the body (chunked transfer decoded).
pub struct RawAnswer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

/// Parse a whole HTTP/1.1 answer; None if it is not one (or a chunked body is cut).
pub fn parse_answer(raw: &[u8]) -> Option<RawAnswer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut rest = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        let body = rest.to_vec();
        return Some(RawAnswer { status, head, body });
    }
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_field = std::str::from_utf8(&rest[..eol]).ok()?;
        let size = usize::from_str_radix(size_field.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(RawAnswer { status, head, body });
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// One blocking HTTP/1.1 request to `addr` on a fresh connection (`Connection: close`; a `Host:
/// <addr>` header unless `headers` has one), the answer read to its end (at most
/// [`MAX_OUTPUT`] bytes); `None` if nothing answered (connecting within 5 s, each read and write
/// within 30 s) or not with HTTP.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<RawAnswer> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    s.take(MAX_OUTPUT).read_to_end(&mut raw).ok()?;
    parse_answer(&raw)
}

/// One request with hyper's HTTP/1.1 client over `io` (a TCP or Unix stream just connected): the
/// answer, its body still to read.
pub async fn send_over<S, B>(
    io: S,
    req: hyper::Request<B>,
) -> hyper::Result<hyper::Response<hyper::body::Incoming>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    tokio::spawn(conn);
    sender.send_request(req).await
}

// ---------------------------------------------------------------------------------------------
// What the API answers, read back

/// A path for a query string (`/files?path=…`): unreserved bytes and `/` as they are, every
/// other byte percent-encoded.
pub fn url_path(p: &str) -> String {
    p.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Terminal output as plain lines: escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL`,
/// others `ESC` + one character) and carriage returns removed.
pub fn terminal_lines(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                let end: fn(char) -> bool = match chars.next() {
                    Some('[') => |c: char| ('@'..='~').contains(&c),
                    Some(']') => |c: char| c == '\x07',
                    _ => continue,
                };
                chars.by_ref().find(|&c| end(c));
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out.lines().map(str::to_string).collect()
}

/// The item names in a hibernation or restore report's `contexts[id = ctx][key]` (`restored`
/// or `lost`).
pub fn report_names(report: &serde_json::Value, ctx: &str, key: &str) -> Vec<String> {
    let c = report["contexts"]
        .as_array()
        .unwrap_or_else(|| panic!("no contexts in {report}"))
        .iter()
        .find(|c| c["id"] == ctx)
        .unwrap_or_else(|| panic!("context {ctx} not in {report}"));
    c[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} for {ctx} in {report}"))
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_plain_and_chunked() {
        let a = parse_answer(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nhi").unwrap();
        assert_eq!((a.status, a.body.as_slice()), (201, &b"hi"[..]));
        assert!(a.head.contains("content-length: 2"), "{}", a.head);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                        3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked).unwrap().body, b"abcde");
        // A chunked body cut short, and no HTTP at all.
        assert!(
            parse_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_none()
        );
        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n").is_none());
    }

    #[test]
    fn waiting_gives_the_first_value_or_none_at_the_deadline() {
        let mut n = 0;
        let got = wait_for(Duration::from_secs(60), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, Some(3));
        assert_eq!(wait_for(Duration::ZERO, || None::<()>), None);
        let e = std::panic::catch_unwind(|| poll(Duration::ZERO, "nothing", || None::<()>));
        let msg = e.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("timed out waiting for nothing"), "{msg}");
    }

    #[test]
    fn a_command_s_status_and_output_are_returned() {
        let (status, out) = run_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(60),
        );
        assert_eq!(status.code(), Some(3));
        assert!(out.contains("out\n") && out.contains("err\n"), "{out:?}");
    }

    #[test]
    fn a_test_is_named_after_its_thread() {
        assert_eq!(test_name(), "tests::a_test_is_named_after_its_thread");
    }

    #[test]
    fn this_process_s_status_is_read() {
        let pid = proc_status("self", "Pid").unwrap();
        assert_eq!(pid, std::process::id().to_string());
        assert!(!gone_or_zombie(std::process::id()));
        assert_eq!(proc_status("self", "NoSuchKey"), None);
    }

    #[test]
    fn terminal_lines_drop_escapes_and_carriage_returns() {
        let raw = b"\x1b[1;32mgreen\x1b[0m\r\n\x1b]0;title\x07plain\x1b=\r\n";
        assert_eq!(terminal_lines(raw), vec!["green", "plain"]);
    }

    #[test]
    fn url_path_keeps_slashes_and_encodes_the_rest() {
        assert_eq!(url_path("/home/user/a b&c.txt"), "/home/user/a%20b%26c.txt");
    }
}
