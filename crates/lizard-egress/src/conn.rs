//! What the relay, the injection proxy and the DNS server share about the connections of a
//! sandbox: the tasks that serve them ([`OwnedTasks`]), how one ended ([`Outcome`]) and the
//! counted stream that meters it (`Counted`).

use std::io;
use std::net::SocketAddrV4;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What [`crate::relay::handle`] did with a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Relayed to `upstream` as `name`, until done or idle.
    Relayed {
        upstream: SocketAddrV4,
        name: Option<String>,
    },
    /// Proxied as HTTP to `upstream` as `name` with secrets injected ([`crate::inject`]):
    /// `requests` forwarded.
    Injected {
        upstream: SocketAddrV4,
        name: String,
        requests: u64,
    },
    /// Refused (logged in the policy's refusals).
    Refused(String),
    /// Allowed but failed: the client went away while being read, or the upstream could not be
    /// reached in time.
    Failed(String),
}

/// How long a listener waits after a failed accept or receive before it tries again.
pub(crate) const ACCEPT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// The tasks serving a sandbox's connections or queries, owned by the future of the service:
/// dropping it ends them all at once, whatever their peers do.
#[derive(Default)]
pub(crate) struct OwnedTasks(tokio::task::JoinSet<()>);

impl OwnedTasks {
    /// What `next` (an accept, a receive) gives, while finished tasks are reaped. A failure (out
    /// of descriptors) is logged as `what` and paused on for [`ACCEPT_RETRY`], then `None`: the
    /// caller tries again rather than ending the service for the sandbox's life.
    pub(crate) async fn next<T>(
        &mut self,
        what: &'static str,
        next: impl std::future::Future<Output = io::Result<T>>,
    ) -> Option<T> {
        tokio::pin!(next);
        loop {
            tokio::select! {
                got = &mut next => return match got {
                    Ok(item) => Some(item),
                    Err(e) => {
                        tracing::debug!(error = %e, "{what}");
                        tokio::time::sleep(ACCEPT_RETRY).await;
                        None
                    }
                },
                Some(_) = self.0.join_next(), if !self.0.is_empty() => {}
            }
        }
    }

    pub(crate) fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.0.spawn(task);
    }
}

/// The sandbox's connection: counts what is read (to the upstreams: `bytes_out`) and written
/// (`bytes_in`), and notes when a byte last moved (the idle deadline).
pub(crate) struct Counted<'a, S> {
    pub(crate) inner: S,
    pub(crate) out: &'a AtomicU64,
    pub(crate) inn: &'a AtomicU64,
    pub(crate) last: &'a AtomicU64,
    pub(crate) base: Instant,
}

impl<S> Counted<'_, S> {
    fn moved(&self, counter: &AtomicU64, n: usize) {
        if n > 0 {
            counter.fetch_add(n as u64, Ordering::Relaxed);
            let ms = self.base.elapsed().as_millis() as u64;
            self.last.store(ms, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.moved(self.out, n);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.moved(self.inn, n);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
