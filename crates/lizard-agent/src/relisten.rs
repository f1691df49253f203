//! The server's Unix socket (the host API), able to move to a new listening socket the server hands
//! over: after a CRIU restore the agent's listener is one the launcher made in the host's network
//! namespace (CRIU 4.2 cannot restore into launcher-made namespaces), which a later checkpoint
//! cannot dump and whose `SO_PEERCRED` peer is the launcher. The server then makes a socket in the
//! sandbox's own network namespace, bound at a root-only host path, and sends it over a connection
//! to this listener as one NUL byte with the socket attached (`SCM_RIGHTS`; no HTTP request starts
//! with NUL). The agent closes its old listener, puts the new socket at the same descriptor number
//! (3), calls `listen` on it itself (so its clients see the agent as their peer, as after a
//! launch) and answers one byte `k`. Any other connection is HTTP, served as before.
//!
//! Only the server can connect here (the socket's path is in a root-only host directory): code in
//! the sandbox never reaches this. Not here: the routes (`router::host_router`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// Serve `app` on `listener`, accepting a new listener from the server at any time; `moved` runs
/// after each handover, before the answer (a handover comes right after a CRIU restore: what the
/// restore did not bring back, the agent makes again there), told whether the handover named
/// another sandbox id than the agent had (a clone or fork: `crate::identity`).
pub async fn serve(
    listener: UnixListener,
    app: axum::Router,
    moved: impl Fn(bool) + Send + Sync + 'static,
) -> io::Result<()> {
    let (streams_tx, streams_rx) = mpsc::channel::<UnixStream>(64);
    tokio::spawn(accept_loop(
        listener,
        streams_tx,
        std::sync::Arc::new(moved),
    ));
    axum::serve(Streams(streams_rx), app).await
}

/// The accepted HTTP connections, as an axum listener.
struct Streams(mpsc::Receiver<UnixStream>);

impl axum::serve::Listener for Streams {
    type Io = UnixStream;
    type Addr = ();

    async fn accept(&mut self) -> (UnixStream, ()) {
        match self.0.recv().await {
            Some(s) => (s, ()),
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A listener the server sent, the connection to answer on once it is in place, and the sandbox
/// id it named (`None`: a server that sends none).
type Swap = (OwnedFd, UnixStream, Option<String>);

/// Longest handover message: NUL, a sandbox id, a newline.
const MAX_MESSAGE: usize = crate::identity::MAX_ID + 2;

/// How long the rest of a handover message may take to arrive once its first byte has.
const MESSAGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

async fn accept_loop(
    mut listener: UnixListener,
    streams: mpsc::Sender<UnixStream>,
    on_moved: std::sync::Arc<dyn Fn(bool) + Send + Sync>,
) {
    let (swap_tx, mut swap_rx) = mpsc::channel::<Swap>(1);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => {
                    let (streams, swap_tx) = (streams.clone(), swap_tx.clone());
                    tokio::spawn(async move {
                        let _ = classify(s, streams, swap_tx).await;
                    });
                }
                // Out of descriptors and the like: try again shortly.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            },
            Some((sock, mut conn, id)) = swap_rx.recv() => {
                let mut renamed = false;
                if let Some(id) = &id {
                    // Checked by `classify` already: cannot fail.
                    match crate::identity::set(id) {
                        Ok(changed) => renamed = changed,
                        Err(e) => {
                            tracing::error!(error = %e, "the handover's sandbox id");
                            continue;
                        }
                    }
                    tracing::info!(sandbox = %id, renamed, "the sandbox's id after a restore");
                }
                let fd = listener.as_raw_fd();
                drop(listener);
                let moved = lizard_jail::hostpath::unix_listener_onto(sock, fd).and_then(|l| {
                    l.set_nonblocking(true)?;
                    UnixListener::from_std(l)
                });
                match moved {
                    Ok(l) => {
                        listener = l;
                        let on_moved = on_moved.clone();
                        let _ = tokio::task::spawn_blocking(move || on_moved(renamed)).await;
                        let _ = conn.write_all(b"k").await;
                        tracing::info!(fd, "the host socket moved to the server's new listener");
                    }
                    Err(e) => {
                        // The old one is closed already: nothing more can reach this agent.
                        tracing::error!(error = %e, "taking the server's new listener");
                        return;
                    }
                }
            }
        }
    }
}

/// A new connection: a listener handover (a first byte NUL with one descriptor) or HTTP.
async fn classify(
    s: UnixStream,
    streams: mpsc::Sender<UnixStream>,
    swap: mpsc::Sender<Swap>,
) -> io::Result<()> {
    let first = loop {
        s.readable().await?;
        match s.try_io(Interest::READABLE, || {
            lizard_jail::fdpass::peek_first_byte(&s)
        }) {
            Ok(b) => break b,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    };
    match first {
        None => Ok(()),
        Some(0) => {
            let mut b = [0u8; MAX_MESSAGE];
            let (n, mut fds) = s.try_io(Interest::READABLE, || {
                lizard_jail::fdpass::recv_with_fds(&s, &mut b)
            })?;
            if n == 0 || fds.len() != 1 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a handover without exactly one socket",
                ));
            }
            let sock = fds.remove(0);
            let id = if n == 1 {
                // NUL alone: a server that names no id (it waits for the answer), or the rest is
                // on its way.
                let more = std::time::Duration::from_millis(50);
                match tokio::time::timeout(more, read_some(&s, &mut b[1..])).await {
                    Ok(Ok(got)) if got > 0 => read_id(&s, &mut b, 1 + got).await?,
                    Ok(Err(e)) => return Err(e),
                    _ => None,
                }
            } else {
                read_id(&s, &mut b, n).await?
            };
            if test_fault() == Some("hang") {
                // Test servers only (`LIZARD_TEST_RELISTEN_FAULT`, see `test_fault`): take the
                // handover and never answer.
                tracing::warn!("LIZARD_TEST_RELISTEN_FAULT=hang: never answering the handover");
                let _held = (s, sock);
                return std::future::pending().await;
            }
            swap.send((sock, s, id))
                .await
                .map_err(|_| io::Error::other("the accept loop is gone"))
        }
        Some(_) => streams
            .send(s)
            .await
            .map_err(|_| io::Error::other("the server is gone")),
    }
}

/// The rest of a handover message whose first `n` bytes are in `b`: the sandbox id up to a
/// newline, checked (`crate::identity::valid_id`), at most [`MAX_MESSAGE`] bytes in all, within
/// [`MESSAGE_DEADLINE`]. `None` when the message is NUL alone (closed after it).
async fn read_id(
    s: &UnixStream,
    b: &mut [u8; MAX_MESSAGE],
    mut n: usize,
) -> io::Result<Option<String>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("handover: {why}"));
    let deadline = tokio::time::Instant::now() + MESSAGE_DEADLINE;
    while !b[1..n].contains(&b'\n') {
        if n == b.len() {
            return Err(bad("no sandbox id of a valid length"));
        }
        let got = tokio::time::timeout_at(deadline, read_some(s, &mut b[n..]))
            .await
            .map_err(|_| bad("the sandbox id did not arrive"))??;
        if got == 0 {
            return if n == 1 {
                Ok(None)
            } else {
                Err(bad("the sandbox id ended early"))
            };
        }
        n += got;
    }
    let end = 1 + b[1..n].iter().position(|c| *c == b'\n').unwrap_or(0);
    if end + 1 != n {
        return Err(bad("bytes after the sandbox id"));
    }
    let id = std::str::from_utf8(&b[1..end]).map_err(|_| bad("a sandbox id that is not text"))?;
    if !crate::identity::valid_id(id) {
        return Err(bad("not a sandbox id"));
    }
    Ok(Some(id.to_string()))
}

/// Read what is there (waiting until something is, or the peer closed).
async fn read_some(s: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// A fault the operator of a test server injects (`lizard serve --agent-env
/// LIZARD_TEST_RELISTEN_FAULT=hang`; users cannot set `LIZARD_*` names): `hang` takes a handover
/// and never answers (the server's deadline is what the test checks).
fn test_fault() -> Option<&'static str> {
    match std::env::var("LIZARD_TEST_RELISTEN_FAULT").ok().as_deref() {
        Some("hang") => Some("hang"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// One `GET /` over a fresh connection to `path`: the body, or the error.
    fn get(path: &std::path::Path) -> io::Result<String> {
        let mut c = std::os::unix::net::UnixStream::connect(path)?;
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
        c.write_all(b"GET / HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http_is_served_and_a_handed_over_listener_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old.sock"), dir.path().join("new.sock"));
        let listener = UnixListener::bind(&old).unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "agent" }));
        tokio::spawn(serve(listener, app, |_| {}));
        let (old2, new2, dir2) = (old.clone(), new.clone(), dir.path().to_path_buf());
        tokio::task::spawn_blocking(move || {
            assert!(get(&old2).unwrap().ends_with("agent"));
            // The handover: a socket bound (not listening) at the new path, NUL + the socket.
            let sock = std::os::unix::net::UnixListener::bind(&new2).unwrap();
            let fd: OwnedFd = sock.into();
            // (`bind` of std listens already; the agent's listen again is harmless.)
            let mut c = std::os::unix::net::UnixStream::connect(&old2).unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            lizard_jail::fdpass::send_with_fds(&c, &[0], &[fd.as_raw_fd()]).unwrap();
            drop(fd);
            let mut ack = [0u8; 1];
            assert_eq!(c.read(&mut ack).unwrap(), 1);
            assert_eq!(&ack, b"k");
            assert!(get(&new2).unwrap().ends_with("agent"));
            // The old listener is closed.
            assert!(get(&old2).is_err());
            // A handover naming the sandbox's id: taken, checked (the same id as
            // `identity::tests`, which shares this process's identity).
            let third = dir2.join("third.sock");
            let fd: OwnedFd = std::os::unix::net::UnixListener::bind(&third)
                .unwrap()
                .into();
            let mut c = std::os::unix::net::UnixStream::connect(&new2).unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            lizard_jail::fdpass::send_with_fds(&c, b"\0clonezzz\n", &[fd.as_raw_fd()]).unwrap();
            drop(fd);
            let mut ack = [0u8; 1];
            assert_eq!(c.read(&mut ack).unwrap(), 1);
            assert_eq!(&ack, b"k");
            assert_eq!(crate::identity::sandbox_id().as_deref(), Some("clonezzz"));
            assert!(get(&third).unwrap().ends_with("agent"));
            // A bad id (or too long, or no end) refuses the handover: the listener stays.
            for bad in [
                b"\0Bad-id\n".to_vec(),
                [&[0u8][..], &[b'a'; 80], b"\n"].concat(),
                b"\0abc\nmore".to_vec(),
            ] {
                let fourth = dir2.join("fourth.sock");
                let _ = std::fs::remove_file(&fourth);
                let fd: OwnedFd = std::os::unix::net::UnixListener::bind(&fourth)
                    .unwrap()
                    .into();
                let mut c = std::os::unix::net::UnixStream::connect(&third).unwrap();
                c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .unwrap();
                lizard_jail::fdpass::send_with_fds(&c, &bad, &[fd.as_raw_fd()]).unwrap();
                drop(fd);
                let mut ack = [0u8; 1];
                assert!(!matches!(c.read(&mut ack), Ok(1)), "{bad:?}");
                assert!(get(&third).unwrap().ends_with("agent"), "{bad:?}");
                assert_eq!(crate::identity::sandbox_id().as_deref(), Some("clonezzz"));
            }
            let new2 = third;
            // A handover without a socket is dropped; HTTP goes on.
            let mut c = std::os::unix::net::UnixStream::connect(&new2).unwrap();
            c.write_all(&[0]).unwrap();
            drop(c);
            assert!(get(&new2).unwrap().ends_with("agent"));
        })
        .await
        .unwrap();
    }
}
