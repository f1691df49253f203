//! `lizard-hostile-agent`: the end-to-end tests' stand-in for a sandbox agent that code inside the
//! sandbox has taken over. Lizard's threat model says the agent is untrusted (it shares its
//! sandbox with user code, which can replace, impersonate or signal it); this program is what the
//! server meets then, so the tests can check that nothing it does reaches past its own sandbox.
//!
//! The server runs it as every sandbox's PID 1 when started with `lizard serve --agent-wrapper
//! <this binary>` (a test-only operator option). It gets the same command line and descriptors as
//! the real agent, plus the real agent's sealed executable at fd [`REAL_AGENT_FD`]:
//!
//! - without `HOSTILE_AGENT` in its environment (a sandbox created without it) it becomes the
//!   real agent at once (`exec /proc/self/fd/4` with the same argv), so a test's ordinary
//!   sandboxes are ordinary;
//! - with `HOSTILE_AGENT=<mode>` (a create's `env`) it serves the agent's socket (fd 3, bound by
//!   the launcher) itself: it answers `/health` like an agent until the server has seen it ready,
//!   then attacks in that mode (see [`Mode`]).
//!
//! It speaks just enough HTTP/1.1 by hand: the point is to send what a well-behaved HTTP stack
//! never would.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where the launcher puts the agent's (bound, not yet listening) Unix socket.
const SOCKET_FD: i32 = 3;
/// Where the server's `--agent-wrapper` hands over the real agent's sealed executable.
const REAL_AGENT_FD: i32 = 4;

/// What the hostile agent does once the server has seen it ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Accept every connection, read the request, never answer.
    Hang,
    /// Answer every request with `200` and an endless body (announced as 1 TiB).
    Flood,
    /// Answer every request with `200` and an endless chunked body.
    FloodChunked,
    /// Answer one byte every half second.
    Slow,
    /// Answer `/executions` with invented records (far too many, impossible values, a `next`
    /// that goes backwards) and everything else with empty JSON.
    Lie,
    /// Answer with redirects to the host (the server's API on loopback, a host socket).
    Redirect,
    /// Write to its stdout/stderr (the host-side `agent.log`) as fast as it can; answer health.
    LogFlood,
    /// Exit (PID 1 of the sandbox dies, and with it every process in it).
    Die,
    /// Answer every request with the request head it got: what the server forwards into a
    /// sandbox, for tests that look for a client's credentials in it.
    Eavesdrop,
    /// Answer the host-only half of a context fork (`/context-forks/{id}/prepare`) with plans
    /// that lie, a different lie each call (see [`fork_lie`]); every other request with `{}`.
    ForkLie,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "hang" => Mode::Hang,
            "flood" => Mode::Flood,
            "flood-chunked" => Mode::FloodChunked,
            "slow" => Mode::Slow,
            "lie" => Mode::Lie,
            "redirect" => Mode::Redirect,
            "log-flood" => Mode::LogFlood,
            "die" => Mode::Die,
            "fork-lie" => Mode::ForkLie,
            "eavesdrop" => Mode::Eavesdrop,
            _ => return None,
        })
    }
}

fn main() {
    let mode = match std::env::var("HOSTILE_AGENT") {
        Ok(m) if !m.is_empty() => match Mode::parse(&m) {
            Some(mode) => mode,
            None => {
                eprintln!("lizard-hostile-agent: unknown HOSTILE_AGENT mode {m:?}");
                std::process::exit(2);
            }
        },
        _ => become_the_real_agent(),
    };
    let listener = match lizard_jail::hostpath::take_unix_listener(SOCKET_FD) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lizard-hostile-agent: no agent socket at fd {SOCKET_FD}: {e}");
            std::process::exit(2);
        }
    };
    let state = Arc::new(State {
        mode,
        armed: AtomicBool::new(false),
        lies: AtomicU64::new(0),
        child: std::sync::Mutex::new(None),
    });
    eprintln!("lizard-hostile-agent: serving in mode {mode:?}");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let state = state.clone();
        std::thread::spawn(move || state.serve(conn));
    }
}

/// No mode asked for: exec the real agent, keeping argv, environment and the socket at fd 3.
fn become_the_real_agent() -> ! {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let err = std::process::Command::new(format!("/proc/self/fd/{REAL_AGENT_FD}"))
        .arg0(argv0)
        .args(args)
        .exec();
    eprintln!("lizard-hostile-agent: cannot exec the real agent: {err}");
    std::process::exit(2)
}

struct State {
    mode: Mode,
    /// Set once a health check has been answered: from then on the agent attacks.
    armed: AtomicBool,
    /// Execution-log pages invented so far.
    lies: AtomicU64,
    /// A child (`sleep`) whose stdin pipe the fork lies name, once armed.
    child: std::sync::Mutex<Option<std::process::Child>>,
}

impl State {
    fn serve(&self, mut conn: UnixStream) {
        let Some((path, head)) = read_request_head(&mut conn) else {
            return;
        };
        let armed = self.armed.load(Ordering::SeqCst);
        if !armed && path.starts_with("/health") {
            // The server polls health until it answers: be an agent until then.
            let body = serde_json::json!({
                "status": "ok",
                "version": "0.0.0-hostile",
                "contexts": 0,
            })
            .to_string();
            let _ = respond(&mut conn, "200 OK", "application/json", body.as_bytes());
            self.armed.store(true, Ordering::SeqCst);
            self.arm();
            return;
        }
        match self.mode {
            Mode::Hang => hang(conn),
            Mode::Flood => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                            content-length: 1099511627776\r\n\r\n";
                if conn.write_all(head.as_bytes()).is_ok() {
                    let junk = vec![b' '; 64 * 1024];
                    while conn.write_all(&junk).is_ok() {}
                }
            }
            Mode::FloodChunked => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                if conn.write_all(head.as_bytes()).is_ok() {
                    let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
                    chunk.extend(std::iter::repeat_n(b'[', 64 * 1024));
                    chunk.extend_from_slice(b"\r\n");
                    while conn.write_all(&chunk).is_ok() {}
                }
            }
            Mode::Slow => {
                let body = br#"{"status":"ok","version":"slow","contexts":0}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                for b in head.as_bytes().iter().chain(body.iter()) {
                    if conn.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
            Mode::Lie => {
                let body = if path.starts_with("/executions") {
                    invented_execution_log(self.lies.fetch_add(1, Ordering::Relaxed))
                } else if path.starts_with("/health") {
                    br#"{"status":"ok","version":"lie","contexts":1000000000}"#.to_vec()
                } else if path.starts_with("/contexts") {
                    b"[]".to_vec()
                } else {
                    b"{}".to_vec()
                };
                let _ = respond(&mut conn, "200 OK", "application/json", &body);
            }
            Mode::Redirect => {
                let head = "HTTP/1.1 307 Temporary Redirect\r\n\
                            location: http://127.0.0.1:1/v1/sandboxes\r\n\
                            content-length: 0\r\n\r\n";
                let _ = conn.write_all(head.as_bytes());
            }
            Mode::LogFlood => {
                let body = br#"{"status":"ok","version":"log-flood","contexts":0}"#;
                let _ = respond(&mut conn, "200 OK", "application/json", body);
            }
            // Its arming thread ends the process.
            Mode::Die => {}
            Mode::Eavesdrop => {
                let _ = respond(&mut conn, "200 OK", "text/plain", &head);
            }
            Mode::ForkLie => {
                let body = if path.starts_with("/context-forks/") && path.ends_with("/prepare") {
                    self.fork_lie(self.lies.fetch_add(1, Ordering::Relaxed))
                } else {
                    b"{}".to_vec()
                };
                let _ = respond(&mut conn, "200 OK", "application/json", &body);
            }
        }
    }

    /// The `n`th lying plan of an exact context fork: the host must refuse each before it
    /// checkpoints anything (and leave nothing behind).
    fn fork_lie(&self, n: u64) -> Vec<u8> {
        let (child, pipe) = self
            .child
            .lock()
            .ok()
            .and_then(|c| {
                let c = c.as_ref()?;
                let fd = std::os::fd::AsRawFd::as_raw_fd(c.stdin.as_ref()?);
                Some((c.id() as i64, (fd, lizard_jail::procfs::own_pipe_inode(fd))))
            })
            .unwrap_or((0, (0, 0)));
        let channel =
            |inode: u64, fd: i32| serde_json::json!({"pipe_inode": inode, "agent_fd": fd});
        let four = |inode: u64, fd: i32| vec![channel(inode, fd); 4];
        let (kernel, channels, cgroup) = match n % 5 {
            // Itself (the sandbox's PID 1) as the kernel.
            0 => (1, four(pipe.1, pipe.0), serde_json::Value::Null),
            // Its listening socket (fd 3) as a pipe.
            1 => (child, four(pipe.1, SOCKET_FD), serde_json::Value::Null),
            // A pipe the kernel does not hold.
            2 => (child, four(12345, pipe.0), serde_json::Value::Null),
            // A cgroup outside its own.
            3 => (
                child,
                four(pipe.1, pipe.0),
                serde_json::json!("../../../../evil"),
            ),
            // A pid that is no child of its.
            _ => (999_999, four(pipe.1, pipe.0), serde_json::Value::Null),
        };
        serde_json::json!({"checkpoint": {
            "context_id": format!("lie{n}"),
            "kernel_pid": kernel,
            "channels": channels,
            "cgroup": cgroup,
            "lost": [],
        }})
        .to_string()
        .into_bytes()
    }

    /// Start what a mode does by itself, not in answer to a request.
    fn arm(&self) {
        match self.mode {
            Mode::LogFlood => {
                for _ in 0..2 {
                    std::thread::spawn(|| {
                        let line = format!("{}\n", "x".repeat(4095));
                        let mut out = std::io::stderr().lock();
                        loop {
                            // A full or closed log is the host's business; keep pushing.
                            let _ = out.write_all(line.as_bytes());
                        }
                    });
                }
            }
            Mode::Die => {
                std::thread::spawn(|| {
                    std::thread::sleep(Duration::from_millis(200));
                    std::process::exit(0)
                });
            }
            Mode::ForkLie => {
                let child = std::process::Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .ok();
                if let Ok(mut c) = self.child.lock() {
                    *c = child;
                }
            }
            _ => {}
        }
    }
}

/// Keep the connection open, reading whatever comes, never answering.
fn hang(mut conn: UnixStream) {
    let mut buf = [0u8; 4096];
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
    // The peer closed; hold nothing.
}

/// Read up to the end of the request head (at most 64 KiB); the request's path.
/// The request's path and its whole head (as received).
fn read_request_head(conn: &mut UnixStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\r').next()?;
    let line = String::from_utf8_lossy(line);
    let path = line.split_whitespace().nth(1)?.to_string();
    Some((path, head))
}

fn respond(conn: &mut UnixStream, status: &str, ctype: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)
}

/// An execution log page no honest agent could produce, new on every call (the server asks for
/// new records every sample): 10,000 records never seen before, with runs longer than the sandbox
/// has lived, more memory than it may use, finished in the future, and `dropped` in the
/// quintillions; `next` goes backwards every other call.
fn invented_execution_log(call: u64) -> Vec<u8> {
    const PAGE: u64 = 10_000;
    let first = 1 + call * PAGE;
    let records: Vec<serde_json::Value> = (first..first + PAGE)
        .map(|seq| {
            serde_json::json!({
                "seq": seq,
                "context_id": format!("ctx-{seq}"),
                "language": "python",
                "status": "ok",
                "wall_ms": u64::MAX / 4,
                "cpu_ms": u64::MAX / 4,
                "peak_rss_bytes": u64::MAX / 4,
                "finished_at_ms": u64::MAX / 4,
            })
        })
        .collect();
    let next = if call.is_multiple_of(2) {
        first + PAGE
    } else {
        1
    };
    serde_json::json!({"next": next, "records": records, "dropped": u64::MAX / 4})
        .to_string()
        .into_bytes()
}
