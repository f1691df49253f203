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
//! the sandbox never reaches this. Not here: the routes (`api::host_router`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// Serve `app` on `listener`, accepting a new listener from the server at any time; `moved` runs
/// after each handover, before the answer (a handover comes right after a CRIU restore: what the
/// restore did not bring back, the agent makes again there).
pub async fn serve(
    listener: UnixListener,
    app: axum::Router,
    moved: impl Fn() + Send + Sync + 'static,
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

/// A listener the server sent, and the connection to answer on once it is in place.
type Swap = (OwnedFd, UnixStream);

async fn accept_loop(
    mut listener: UnixListener,
    streams: mpsc::Sender<UnixStream>,
    on_moved: std::sync::Arc<dyn Fn() + Send + Sync>,
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
            Some((sock, mut conn)) = swap_rx.recv() => {
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
                        let _ = tokio::task::spawn_blocking(move || on_moved()).await;
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
            let mut b = [0u8; 1];
            let (n, mut fds) = s.try_io(Interest::READABLE, || {
                lizard_jail::fdpass::recv_with_fds(&s, &mut b)
            })?;
            if n != 1 || fds.len() != 1 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a handover without exactly one socket",
                ));
            }
            let sock = fds.remove(0);
            swap.send((sock, s))
                .await
                .map_err(|_| io::Error::other("the accept loop is gone"))
        }
        Some(_) => streams
            .send(s)
            .await
            .map_err(|_| io::Error::other("the server is gone")),
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
        tokio::spawn(serve(listener, app, || {}));
        let (old2, new2) = (old.clone(), new.clone());
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
