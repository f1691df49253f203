//! A sandbox's host-side log (`agent.log`: the agent's stdout and stderr) is capped **at the writer**. What goes into them is driven by what happens inside the sandbox
//! (the agent is untrusted), and they live in the sandbox's directory on the host, outside its
//! disk quota, so the sandbox never holds a host file: it writes into a FIFO (`<name>.pipe`, made
//! by [`make_pipe`], opened by the launcher read-write and non-blocking), and the server's drain
//! ([`ensure_drain`]) is the only writer of `<name>`:
//!
//! - a log file never grows past [`LIMIT`]: the drain then renames it to `<name>.1` (replacing the
//!   older one) and starts a new one, so a sandbox's logs take at most 2 × [`LIMIT`] on the host;
//! - the drain takes at most [`RATE`] bytes a second from one pipe: a sandbox that writes faster
//!   fills its pipe, and its writes then fail with `EAGAIN` (it loses its own lines), so a flood
//!   costs the server a bounded amount of work;
//! - a drain ends once its pipe is gone (the sandbox's directory removed by a kill); a server
//!   restart starts it again for every adopted sandbox, and meanwhile the pipe holds the first
//!   64 KiB and the sandbox's writes fail with `EAGAIN`.
//!
//! Not here: what is logged.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest size of a sandbox's host-side log file before it is rotated to `<name>.1`.
pub const LIMIT: u64 = 8 << 20;
/// Bytes a second that the server takes from one sandbox's log pipe.
pub const RATE: usize = 1 << 20;
/// The host-side logs of a sandbox (in its directory).
pub const FILES: [&str; 1] = ["agent.log"];

/// How often an idle drain checks that its pipe still exists.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// The FIFO that feeds the log file `log`: `<log>.pipe`.
pub fn pipe_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(".pipe");
    log.with_file_name(name)
}

/// Make the FIFO that feeds the log file `log`, unless it is there already (a relaunch from
/// hibernation keeps its pipe, and its drain); returns its path. Blocking.
pub fn make_pipe(log: &Path) -> io::Result<PathBuf> {
    let pipe = pipe_path(log);
    if !is_fifo(&pipe) {
        lizard_jail::process::make_fifo(&pipe, 0o600)?;
    }
    Ok(pipe)
}

fn is_fifo(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()))
}

/// The drains running in this process, by pipe path.
fn running() -> &'static Mutex<HashSet<PathBuf>> {
    static RUNNING: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    RUNNING.get_or_init(Default::default)
}

/// Start draining `log`'s pipe into `log` unless a drain of it already runs. Needs a Tokio
/// runtime; returns at once. A missing pipe (a sandbox from before log pipes) is left alone.
pub fn ensure_drain(log: &Path) {
    let pipe = pipe_path(log);
    if !is_fifo(&pipe) {
        return;
    }
    {
        let mut set = running().lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(pipe.clone()) {
            return;
        }
    }
    // Opened here, before this returns, so that nothing written from now on is lost.
    let rx = match open_pipe(&pipe) {
        Ok(rx) => rx,
        Err(e) => {
            tracing::warn!(pipe = %pipe.display(), error = %e, "cannot open a log pipe");
            running()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&pipe);
            return;
        }
    };
    let log = log.to_path_buf();
    tokio::spawn(async move {
        if let Err(e) = drain(rx, &pipe, &log, LIMIT, RATE).await {
            tracing::debug!(log = %log.display(), error = %e, "log drain ended");
        }
        running()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pipe);
    });
}

/// Start the drains of every host-side log of the sandbox directory `dir`.
pub fn ensure_drains(dir: &Path) {
    for name in FILES {
        ensure_drain(&dir.join(name));
    }
}

/// The drain's end of `pipe`. Read-write: the reader never sees EOF when the sandbox's writer
/// goes (hibernation; a relaunch opens the pipe again), opening never waits for a writer, and the
/// pipe (with what is in it) lives as long as the drain.
fn open_pipe(pipe: &Path) -> io::Result<tokio::net::unix::pipe::Receiver> {
    tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(pipe)
}

/// Copy what arrives on `rx` (the pipe `pipe`) into `log`, rotating at `limit` bytes and taking
/// at most `rate` bytes a second, until `pipe` is removed.
async fn drain(
    mut rx: tokio::net::unix::pipe::Receiver,
    pipe: &Path,
    log: &Path,
    limit: u64,
    rate: usize,
) -> io::Result<()> {
    let mut out = Log::open(log, limit).await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut window = Instant::now();
    let mut budget = rate;
    loop {
        if budget == 0 {
            // Over the rate: leave the rest in the pipe (the writer's next writes fail) until
            // the next second.
            tokio::time::sleep_until((window + Duration::from_secs(1)).into()).await;
            window = Instant::now();
            budget = rate;
        }
        let want = buf.len().min(budget);
        match tokio::time::timeout(IDLE_CHECK, rx.read(&mut buf[..want])).await {
            Ok(Ok(0)) => return Ok(()),
            Ok(Ok(n)) => {
                budget -= n;
                out.write(&buf[..n]).await?;
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                if !pipe.exists() {
                    return Ok(());
                }
            }
        }
        if window.elapsed() >= Duration::from_secs(1) {
            window = Instant::now();
            budget = rate;
        }
    }
}

/// A log file written only by its drain, rotated at `limit`.
struct Log {
    path: PathBuf,
    file: tokio::fs::File,
    len: u64,
    limit: u64,
}

impl Log {
    async fn open(path: &Path, limit: u64) -> io::Result<Log> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await?;
        let len = file.metadata().await?.len();
        Ok(Log {
            path: path.to_path_buf(),
            file,
            len,
            limit,
        })
    }

    async fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.len >= self.limit {
                self.rotate().await?;
            }
            let room = (self.limit - self.len) as usize;
            let n = bytes.len().min(room);
            self.file.write_all(&bytes[..n]).await?;
            self.len += n as u64;
            bytes = &bytes[n..];
        }
        self.file.flush().await
    }

    async fn rotate(&mut self) -> io::Result<()> {
        let mut old = self.path.file_name().unwrap_or_default().to_os_string();
        old.push(".1");
        tokio::fs::rename(&self.path, self.path.with_file_name(old)).await?;
        *self = Log::open(&self.path, self.limit).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    /// The sandbox's end of the pipe, as the launcher opens it.
    fn writer(pipe: &Path) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(pipe)
            .unwrap()
    }

    #[tokio::test]
    async fn a_flood_is_bounded_at_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        let pipe = make_pipe(&log).unwrap();
        let rx = open_pipe(&pipe).unwrap();
        let task = tokio::spawn({
            let (pipe, log) = (pipe.clone(), log.clone());
            async move { drain(rx, &pipe, &log, 256 * 1024, 128 * 1024).await }
        });
        // A writer that never stops: what does not fit in the pipe is refused at once (EAGAIN),
        // never buffered on the host.
        let flood = tokio::task::spawn_blocking({
            let pipe = pipe.clone();
            move || {
                let mut w = writer(&pipe);
                let chunk = vec![b'x'; 4096];
                let (mut written, mut refused) = (0u64, 0u64);
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(3) {
                    match w.write(&chunk) {
                        Ok(n) => written += n as u64,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            refused += 1;
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                (written, refused)
            }
        });
        let mut biggest = 0;
        while !flood.is_finished() {
            let now = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            biggest = biggest.max(now);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (written, refused) = flood.await.unwrap();
        assert!(biggest <= 256 * 1024, "the log reached {biggest} bytes");
        assert!(refused > 0, "a writer faster than the drain is refused");
        // At most ~1 s of rate per second of flood (3 s, plus the pipe's 64 KiB) got through.
        assert!(
            written <= 5 * 128 * 1024 + 64 * 1024,
            "{written} bytes taken"
        );
        assert!(dir.path().join("agent.log.1").is_file(), "rotated");
        let total = std::fs::metadata(&log).unwrap().len()
            + std::fs::metadata(dir.path().join("agent.log.1"))
                .unwrap()
                .len();
        assert!(total <= 2 * 256 * 1024);
        // The drain ends once the pipe is gone.
        std::fs::remove_file(&pipe).unwrap();
        tokio::time::timeout(IDLE_CHECK * 3, task)
            .await
            .expect("the drain ends when its pipe goes")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn lines_arrive_and_a_writer_can_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        make_pipe(&log).unwrap();
        ensure_drain(&log);
        ensure_drain(&log); // once is enough: no second reader
        let pipe = pipe_path(&log);
        writer(&pipe).write_all(b"first life\n").unwrap();
        // The writer went (hibernation); another one comes (the relaunch).
        writer(&pipe).write_all(b"second life\n").unwrap();
        let t = Instant::now();
        while std::fs::read_to_string(&log).unwrap_or_default() != "first life\nsecond life\n" {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "lines did not arrive"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(running().lock().unwrap().contains(&pipe));
        std::fs::remove_file(&pipe).unwrap();
    }

    #[test]
    fn a_plain_log_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        std::fs::write(&log, b"old\n").unwrap();
        // No pipe: nothing to drain (and no runtime needed to say so).
        ensure_drain(&log);
        assert!(!running().lock().unwrap().contains(&pipe_path(&log)));
        assert_eq!(std::fs::read(&log).unwrap(), b"old\n");
    }
}
