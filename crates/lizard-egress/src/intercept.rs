//! The HTTP proxy of secret injection (see [`crate::inject`] for the rules, the sandbox's CA and
//! what holds against a hostile sandbox): a connection the relay routed to a name an
//! [`Injection`] names is served here — TLS terminated with the CA's leaf for the name where the
//! sandbox speaks TLS, each request checked against the connection's name, the rule's headers set,
//! and the request sent on to the upstream over the server's own verified TLS.

use crate::conn::{Counted, Outcome};
use crate::inject::{header_of, InjectUse, Injection};
use crate::peek::{strip_port, Peeked, Protocol};
use crate::policy::SandboxPolicy;
use crate::rules::normalize_name;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddrV4;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// hyper's read buffer for one connection (a request head is bounded by `peek_bytes` too).
const MAX_BUF: usize = 64 * 1024;
/// Request headers hyper accepts (more: 431).
const MAX_HEADERS: usize = 100;

/// What the proxy reads from and writes to, either side.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The peeked bytes first, then the stream: what the relay already read is read again by the TLS
/// server or hyper.
struct Replay<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type Body = Either<Incoming, Full<Bytes>>;

/// A response of the proxy's own (the request was not forwarded, or the upstream failed).
fn own(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(format!(
        "lizard: {msg}\n"
    )))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) and those the `Connection` header lists: they are for
/// one connection, and the proxy's connections are its own. `Transfer-Encoding` stays: hyper
/// frames the forwarded body by it.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .filter(|n| *n != header::TRANSFER_ENCODING)
        .collect();
    for n in listed {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// One proxied connection's state.
struct Session<'a> {
    name: &'a str,
    upstream: SocketAddrV4,
    tls: Option<Arc<rustls::ClientConfig>>,
    policy: &'a SandboxPolicy,
    sender: Mutex<Option<SendRequest<Incoming>>>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    requests: AtomicU64,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Session<'_> {
    /// The request's host name, which must be the connection's.
    fn check_host(&self, req: &Request<Incoming>) -> Result<(), String> {
        let mut hosts = req.headers().get_all(header::HOST).iter();
        let host = match (hosts.next(), hosts.next()) {
            (Some(h), None) => h
                .to_str()
                .map_err(|_| "a Host that is not text".to_string())?
                .to_string(),
            (None, _) => match req.uri().host() {
                Some(h) => h.to_string(),
                None => return Err("a request without Host".into()),
            },
            _ => return Err("several Host headers".into()),
        };
        let mut given = vec![host];
        if let Some(a) = req.uri().authority() {
            given.push(a.host().to_string());
        }
        for g in given {
            let n = normalize_name(strip_port(g.trim()))
                .map_err(|why| format!("an invalid Host: {why}"))?;
            if n != self.name {
                return Err(format!(
                    "the request is for {n}, not {}",
                    self.name.chars().take(253).collect::<String>()
                ));
            }
        }
        Ok(())
    }

    /// An upstream connection ready for a request: the one kept, unless `fresh` or it closed.
    async fn sender(&self, fresh: bool) -> Result<(SendRequest<Incoming>, bool), String> {
        if !fresh {
            let kept = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(mut s) = kept {
                if s.ready().await.is_ok() {
                    return Ok((s, true));
                }
            }
        }
        let lim = self.policy.limits();
        let up = self.upstream;
        let tcp = match tokio::time::timeout(lim.connect, TcpStream::connect(up)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(format!("connecting to {up}: {e}")),
            Err(_) => return Err(format!("connecting to {up}: timed out")),
        };
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &self.tls {
            None => Box::new(tcp),
            Some(cfg) => {
                let sni = ServerName::try_from(self.name.to_string())
                    .map_err(|e| format!("{}: {e}", self.name))?;
                let tls = tokio_rustls::TlsConnector::from(cfg.clone()).connect(sni, tcp);
                match tokio::time::timeout(lim.connect, tls).await {
                    Ok(Ok(s)) => Box::new(s),
                    Ok(Err(e)) => return Err(format!("TLS with {} ({up}): {e}", self.name)),
                    Err(_) => return Err(format!("TLS with {} ({up}): timed out", self.name)),
                }
            }
        };
        let (send, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("HTTP with {up}: {e}"))?;
        self.policy.connections.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task.abort_handle());
        Ok((send, false))
    }

    async fn serve(&self, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        Ok(match self.forward(req).await {
            Ok(r) => r,
            Err(r) => r,
        })
    }

    async fn forward(&self, mut req: Request<Incoming>) -> Result<Response<Body>, Response<Body>> {
        let shown = || format!("{} ({})", self.name, self.upstream);
        if let Err(why) = self.check_host(&req) {
            self.policy.refuse(&shown(), &why);
            return Err(own(
                StatusCode::MISDIRECTED_REQUEST,
                &format!(
                    "{why}: this connection is for {} only, open another for another host",
                    self.name
                ),
            ));
        }
        // CONNECT would make a tunnel the proxy cannot see into; TRACE has the upstream echo the
        // request — the injected headers with it — back to the sandbox.
        if req.method() == Method::CONNECT || req.method() == Method::TRACE {
            return Err(own(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{} is not proxied to hosts that get secrets", req.method()),
            ));
        }
        // Origin form for the upstream (an absolute URI's authority was checked above).
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        *req.uri_mut() = target.parse().unwrap_or_else(|_| Uri::from_static("/"));
        strip_hop_by_hop(req.headers_mut());

        let injection = self.policy.injection();
        let rule = injection
            .as_deref()
            .and_then(|i| i.rule_for(self.name, self.upstream.port()));
        let mut used: Vec<String> = Vec::new();
        for h in rule.map(|r| r.headers.as_slice()).unwrap_or_default() {
            match header_of(h) {
                Ok((n, v)) => {
                    req.headers_mut().insert(n, v);
                    used.extend(h.secrets.iter().cloned());
                }
                Err(e) => {
                    tracing::warn!(host = self.name, error = %e, "injection rule unusable");
                    return Err(own(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()));
                }
            }
        }
        let injected = rule.is_some_and(|r| !r.headers.is_empty());
        used.sort();
        used.dedup();
        let bad_gateway = |why: String| {
            tracing::debug!(destination = %shown(), %why, "proxied request failed");
            own(StatusCode::BAD_GATEWAY, &why)
        };
        let (mut send, reused) = self.sender(false).await.map_err(bad_gateway)?;
        if injected {
            if let Some(i) = &injection {
                (i.on_use)(InjectUse {
                    host: self.name.to_string(),
                    method: req.method().to_string(),
                    path: req.uri().path().chars().take(2048).collect(),
                    secrets: used,
                });
            }
        }
        let resp = match send.try_send_request(req).await {
            Ok(r) => r,
            // The kept connection closed before the request went out: once more on a new one.
            Err(mut e) if reused && e.message().is_some() => {
                let req = e.take_message().expect("checked");
                let (s, _) = self.sender(true).await.map_err(bad_gateway)?;
                send = s;
                send.try_send_request(req)
                    .await
                    .map_err(|e| bad_gateway(format!("{}: {}", shown(), e.error())))?
            }
            Err(e) => return Err(bad_gateway(format!("{}: {}", shown(), e.error()))),
        };
        *self.sender.lock().unwrap_or_else(|e| e.into_inner()) = Some(send);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut resp = resp.map(Either::Left);
        strip_hop_by_hop(resp.headers_mut());
        Ok(resp)
    }
}

/// Proxy one sandbox connection to `name` (normalised, allowed by the rules, with an injection
/// rule) at `upstream` (the relay's own resolution), as HTTP over TLS (`Protocol::Tls`) or plain
/// HTTP (`Protocol::Http`); `peeked` are the bytes the relay already read. Returns when the
/// sandbox closes, on an error, or when nothing moved for [`Limits::idle`](crate::Limits).
pub async fn proxy<S>(
    conn: S,
    peeked: Peeked,
    upstream: SocketAddrV4,
    name: &str,
    injection: &Injection,
    policy: &SandboxPolicy,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let lim = *policy.limits();
    let tls = match peeked.protocol {
        Protocol::Tls { .. } => true,
        Protocol::Http { .. } => false,
        _ => return Outcome::Failed("not HTTP: nothing to inject into".into()),
    };
    let upstream_tls = tls.then(|| {
        let mut c = (*injection.upstream_tls).clone();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(c)
    });
    let server = if tls {
        match injection.ca.server_config(name) {
            Ok(c) => Some(c),
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    } else {
        None
    };
    policy
        .bytes_out
        .fetch_add(peeked.bytes.len() as u64, Ordering::Relaxed);
    let base = Instant::now();
    let last = AtomicU64::new(0);
    let replay = Replay {
        prefix: peeked.bytes,
        at: 0,
        inner: Counted {
            inner: conn,
            out: &policy.bytes_out,
            inn: &policy.bytes_in,
            last: &last,
            base,
        },
    };
    let io: Box<dyn Io + '_> = match server {
        None => Box::new(replay),
        Some(cfg) => {
            let accept = tokio_rustls::TlsAcceptor::from(cfg).accept(replay);
            match tokio::time::timeout(lim.peek_deadline, accept).await {
                Ok(Ok(s)) => Box::new(s),
                Ok(Err(e)) => return Outcome::Failed(format!("TLS with the sandbox: {e}")),
                Err(_) => return Outcome::Failed("TLS with the sandbox: timed out".into()),
            }
        }
    };
    let session = Session {
        name,
        upstream,
        tls: upstream_tls,
        policy,
        sender: Mutex::new(None),
        tasks: Mutex::new(Vec::new()),
        requests: AtomicU64::new(0),
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(lim.idle)
        .max_buf_size(MAX_BUF)
        .max_header_size(lim.peek_bytes.clamp(1024, MAX_BUF))
        .max_headers(MAX_HEADERS);
    let served = http.serve_connection(
        TokioIo::new(io),
        hyper::service::service_fn(|req| session.serve(req)),
    );
    let watchdog = async {
        loop {
            let at = base + Duration::from_millis(last.load(Ordering::Relaxed)) + lim.idle;
            if Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    };
    tokio::select! {
        r = served => if let Err(e) = r {
            tracing::debug!(destination = name, error = %e, "proxied connection ended");
        },
        _ = watchdog => {}
    }
    Outcome::Injected {
        upstream,
        name: name.to_string(),
        requests: session.requests.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn replay_gives_the_prefix_then_the_stream() {
        let (mut a, b) = tokio::io::duplex(1024);
        let mut r = Replay {
            prefix: b"hello ".to_vec(),
            at: 0,
            inner: b,
        };
        a.write_all(b"world").await.unwrap();
        drop(a);
        let mut got = Vec::new();
        let mut small = [0u8; 4];
        // A small buffer: the prefix in pieces.
        let n = r.read(&mut small).await.unwrap();
        got.extend_from_slice(&small[..n]);
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello world");
    }
}
