//! The pump: one task per kernel that reads its three output pipes and its exit status.
//!
//! Ordering rule (see `kernels/PROTOCOL.md`): on every event line, whatever stdout/stderr bytes are
//! already in the pipes are forwarded first, so output and results keep the order the cell produced.

use super::{ExitInfo, KernelMsg, RunnerEvent};
use crate::utf8::Utf8Stream;
use lizard_jail::process::Exit;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

const CHUNK: usize = 64 * 1024;
/// A runner event line longer than this is a protocol violation (results are base64 images at most).
const MAX_EVENT_LINE: usize = 256 * 1024 * 1024;

struct OutStream {
    pipe: pipe::Receiver,
    utf8: Utf8Stream,
    open: bool,
    stderr: bool,
}

impl OutStream {
    fn msg(&self, text: String) -> KernelMsg {
        if self.stderr {
            KernelMsg::Stderr(text)
        } else {
            KernelMsg::Stdout(text)
        }
    }

    /// Read everything that is available right now without waiting.
    fn drain_now(&mut self, buf: &mut [u8]) -> Vec<KernelMsg> {
        let mut out = Vec::new();
        while self.open {
            match self.pipe.try_read(buf) {
                Ok(0) => {
                    self.open = false;
                    let rest = self.utf8.finish();
                    if !rest.is_empty() {
                        out.push(self.msg(rest));
                    }
                }
                Ok(n) => {
                    let text = self.utf8.push(&buf[..n]);
                    if !text.is_empty() {
                        out.push(self.msg(text));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => self.open = false,
            }
        }
        out
    }
}

pub struct Pump {
    out: OutStream,
    err: OutStream,
    events: BufReader<pipe::Receiver>,
}

impl Pump {
    pub fn new(out: OwnedFd, err: OwnedFd, events: OwnedFd) -> io::Result<Pump> {
        let stream = |fd, stderr| -> io::Result<OutStream> {
            Ok(OutStream {
                pipe: pipe::Receiver::from_owned_fd(fd)?,
                utf8: Utf8Stream::default(),
                open: true,
                stderr,
            })
        };
        Ok(Pump {
            out: stream(out, false)?,
            err: stream(err, true)?,
            events: BufReader::with_capacity(CHUNK, pipe::Receiver::from_owned_fd(events)?),
        })
    }

    pub async fn run(
        mut self,
        mut child: Proc,
        tx: mpsc::Sender<KernelMsg>,
        forward: Arc<AtomicBool>,
    ) {
        let mut obuf = vec![0u8; CHUNK];
        let mut ebuf = vec![0u8; CHUNK];
        let mut line = Vec::new();
        let mut events_open = true;
        // Output forwarded only while a cell runs; events and the exit always.
        let send_output = |msgs: Vec<KernelMsg>| {
            let tx = tx.clone();
            let on = forward.load(Ordering::SeqCst);
            async move {
                if on {
                    for m in msgs {
                        if tx.send(m).await.is_err() {
                            return false;
                        }
                    }
                }
                true
            }
        };
        let exit = loop {
            tokio::select! {
                biased;
                r = self.events.read_until(b'\n', &mut line), if events_open => {
                    match r {
                        Ok(0) | Err(_) => events_open = false,
                        Ok(_) if line.ends_with(b"\n") || line.len() > MAX_EVENT_LINE => {
                            let mut pending = self.out.drain_now(&mut obuf);
                            pending.extend(self.err.drain_now(&mut ebuf));
                            if !send_output(pending).await {
                                break None;
                            }
                            let msg = parse_event(&line);
                            line.clear();
                            let ok = match msg {
                                Some(RunnerEvent::Stdout { text }) => {
                                    send_output(vec![KernelMsg::Stdout(text)]).await
                                }
                                Some(RunnerEvent::Stderr { text }) => {
                                    send_output(vec![KernelMsg::Stderr(text)]).await
                                }
                                Some(ev) => tx.send(KernelMsg::Event(ev)).await.is_ok(),
                                None => true,
                            };
                            if !ok {
                                break None;
                            }
                        }
                        Ok(_) => {} // partial line at EOF: wait for the rest or the end
                    }
                }
                r = self.out.pipe.read(&mut obuf), if self.out.open => {
                    let msgs = read_result(&mut self.out, r, &obuf);
                    if !send_output(msgs).await { break None; }
                }
                r = self.err.pipe.read(&mut ebuf), if self.err.open => {
                    let msgs = read_result(&mut self.err, r, &ebuf);
                    if !send_output(msgs).await { break None; }
                }
                exit = child.wait() => break Some(exit),
            }
        };
        let Some(exit) = exit else {
            // Nobody listens any more: the kernel is being dropped. Make sure it is gone and reaped.
            child.kill();
            let _ = child.wait().await;
            return;
        };
        // The process is gone; forward what it left in the pipes (grandchildren may keep the pipes
        // open, so read only what is there now, and event lines for a short moment).
        loop {
            match tokio::time::timeout(
                Duration::from_millis(20),
                self.events.read_until(b'\n', &mut line),
            )
            .await
            {
                Ok(Ok(n)) if n > 0 && line.ends_with(b"\n") => {
                    let mut pending = self.out.drain_now(&mut obuf);
                    pending.extend(self.err.drain_now(&mut ebuf));
                    send_output(pending).await;
                    match parse_event(&line) {
                        Some(RunnerEvent::Stdout { text }) => {
                            send_output(vec![KernelMsg::Stdout(text)]).await;
                        }
                        Some(RunnerEvent::Stderr { text }) => {
                            send_output(vec![KernelMsg::Stderr(text)]).await;
                        }
                        Some(ev) => {
                            let _ = tx.send(KernelMsg::Event(ev)).await;
                        }
                        None => {}
                    }
                    line.clear();
                }
                _ => break,
            }
        }
        let mut pending = self.out.drain_now(&mut obuf);
        pending.extend(self.err.drain_now(&mut ebuf));
        pending.extend(
            [self.out.utf8.finish(), self.err.utf8.finish()]
                .into_iter()
                .zip([false, true])
                .filter(|(t, _)| !t.is_empty())
                .map(|(t, is_err)| {
                    if is_err {
                        KernelMsg::Stderr(t)
                    } else {
                        KernelMsg::Stdout(t)
                    }
                }),
        );
        send_output(pending).await;
        let _ = tx.send(KernelMsg::Exited(exit)).await;
    }
}

/// The kernel process whose exit the pump waits for.
pub enum Proc {
    /// Spawned by the agent (tokio reaps it).
    Spawned(tokio::process::Child),
    /// Forked by the zygote and re-parented to the agent: its pidfd says when it ended, and
    /// `waitid(P_PIDFD)` reaps it (see `super::zygote`).
    Forked { pid: i32, pidfd: AsyncFd<OwnedFd> },
}

impl Proc {
    /// Wait until the process has ended and reap it (once; later calls return at once).
    async fn wait(&mut self) -> ExitInfo {
        match self {
            Proc::Spawned(child) => match child.wait().await {
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(c), _) => ExitInfo::Code(c),
                    (None, Some(sig)) => ExitInfo::Signal(sig),
                    _ => ExitInfo::Unknown,
                },
                Err(_) => ExitInfo::Unknown,
            },
            Proc::Forked { pid, pidfd } => {
                let exit = loop {
                    let Ok(mut guard) = pidfd.readable().await else {
                        break ExitInfo::Unknown;
                    };
                    match lizard_jail::fdpass::reap_pidfd(pidfd.get_ref()) {
                        Ok(Some(Exit::Code(c))) => break ExitInfo::Code(c),
                        Ok(Some(Exit::Signal(s))) => break ExitInfo::Signal(s),
                        Ok(None) => guard.clear_ready(),
                        // Readable means it ended; not (or no longer) our child: no status.
                        Err(_) => break ExitInfo::Unknown,
                    }
                };
                super::forget_pid(*pid);
                exit
            }
        }
    }

    fn kill(&mut self) {
        match self {
            Proc::Spawned(child) => {
                let _ = child.start_kill();
            }
            Proc::Forked { pid, .. } => {
                let _ = lizard_jail::signal_group(*pid, lizard_jail::Signal::SIGKILL);
            }
        }
    }
}

fn read_result(s: &mut OutStream, r: io::Result<usize>, buf: &[u8]) -> Vec<KernelMsg> {
    match r {
        Ok(0) | Err(_) => {
            s.open = false;
            let rest = s.utf8.finish();
            if rest.is_empty() {
                vec![]
            } else {
                vec![s.msg(rest)]
            }
        }
        Ok(n) => {
            let text = s.utf8.push(&buf[..n]);
            if text.is_empty() {
                vec![]
            } else {
                vec![s.msg(text)]
            }
        }
    }
}

fn parse_event(line: &[u8]) -> Option<RunnerEvent> {
    let trimmed = line.strip_suffix(b"\n").unwrap_or(line);
    if trimmed.is_empty() {
        return None;
    }
    match serde_json::from_slice::<RunnerEvent>(trimmed) {
        Ok(ev) => Some(ev),
        Err(e) => {
            tracing::warn!(error = %e, "unparsable runner event line");
            None
        }
    }
}
