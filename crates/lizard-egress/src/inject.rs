//! Secrets that never enter the sandbox (issue #19 part 3): for the hosts an [`Injection`] names,
//! the relay does not pass bytes through but proxies HTTP itself, setting the rule's headers
//! (`Authorization: Bearer …`) on each request on the way out. The sandbox only ever holds a
//! placeholder; the value lives on the host.
//!
//! For HTTPS that means terminating the sandbox's TLS: the proxy presents a leaf certificate for
//! the name, signed by the sandbox's own CA ([`SandboxCa`], whose certificate the sandbox trusts
//! and whose key stays on the host), and opens its own TLS connection to the upstream, verified
//! against the operator's roots ([`Injection::upstream_tls`]) with the name as SNI. Plain HTTP is
//! proxied the same way without TLS on either side (the secret then crosses the network in
//! clear: a rule meant for HTTPS only names the port, `Some(443)`).
//!
//! What holds against a hostile sandbox:
//! - each request on a kept-alive connection is checked again: its `Host` (and an absolute URI's
//!   authority) must be the connection's name, or it gets 421 and is not forwarded — so a secret
//!   for one name is never sent in a request the upstream reads as another's;
//! - hyper parses both sides (no hand-written HTTP here); the request head is bounded by
//!   [`Limits::peek_bytes`](crate::Limits), the TLS handshake by `peek_deadline`, a connection on
//!   which nothing moves (idle keep-alive, a stalled body) by `idle`; bodies are streamed, never
//!   buffered whole; a malformed request gets hyper's 400/431, never a panic;
//! - the secret's value is in no log line, no error and no `Debug` output ([`SecretValue`]), and
//!   its header is marked sensitive for hyper;
//! - HTTP/1.1 only (ALPN `http/1.1` on both sides): hyper's HTTP/2 would need an executor and a
//!   second code path for what is, for API keys, the same requests.

use crate::peek::{strip_port, Peeked, Protocol};
use crate::policy::SandboxPolicy;
use crate::relay::Outcome;
use crate::rules::normalize_name;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
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

/// Leaf certificates (one per name) a [`SandboxCa`] keeps; the oldest goes. Names come from the
/// injection rules, but a `*.suffix` rule lets the sandbox choose any name below the suffix.
pub const MAX_LEAVES: usize = 64;
/// A leaf is valid this long from its making…
const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// …and made again after this long in the cache, well before it expires.
const LEAF_RENEW: Duration = Duration::from_secs(24 * 3600);
/// hyper's read buffer for one connection (a request head is bounded by `peek_bytes` too).
const MAX_BUF: usize = 64 * 1024;
/// Request headers hyper accepts (more: 431).
const MAX_HEADERS: usize = 100;

/// Why a CA, a leaf or a rule could not be made. Never carries a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    #[error("the sandbox CA: {0}")]
    Ca(String),
    #[error("the sandbox CA's certificate and key do not belong together")]
    KeyMismatch,
    #[error("a leaf certificate for {name}: {why}")]
    Leaf { name: String, why: String },
    #[error("injection rule for {host:?}: not a host name: {why}")]
    Host { host: String, why: &'static str },
    #[error("injected header {name:?}: {why}")]
    Header { name: String, why: &'static str },
}

/// A header value with the secrets already substituted. Its `Debug` is `<redacted>` and it has
/// no `Display`: the value is read only where it is put into a request ([`SecretValue::expose`]).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: impl Into<String>) -> SecretValue {
        SecretValue(value.into())
    }

    /// The value itself: for the request, never for a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One header a rule sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectHeader {
    pub name: String,
    pub value: SecretValue,
    /// The names of the secrets used in `value`, for the audit ([`InjectUse::secrets`]).
    pub secrets: Vec<String>,
}

/// One rule: requests to `host` (an exact name, or `*.suffix` meaning any name below the suffix,
/// not the suffix itself — as in [`crate::rules`]), optionally only on `port`, get `headers` set,
/// replacing any the sandbox sent with the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectRule {
    pub host: String,
    pub port: Option<u16>,
    pub headers: Vec<InjectHeader>,
}

/// Headers a rule may not set: they decide where a request goes or how it is framed, which the
/// proxy has checked or hyper handles.
const RESERVED: [&str; 8] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
];

impl InjectRule {
    /// Whether the host, the header names and the values can be used (the API's check at
    /// creation; a rule that fails it is refused at use too, with 500 and the request not sent).
    pub fn check(&self) -> Result<(), InjectError> {
        let bare = self.host.strip_prefix("*.").unwrap_or(&self.host);
        normalize_name(bare).map_err(|why| InjectError::Host {
            host: self.host.chars().take(80).collect(),
            why,
        })?;
        for h in &self.headers {
            header_of(h)?;
        }
        Ok(())
    }

    fn matches(&self, name: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = self.host.strip_suffix('.').unwrap_or(&self.host);
        match host.strip_prefix("*.") {
            Some(s) => {
                name.len() > s.len() + 1
                    && name.as_bytes()[name.len() - s.len() - 1] == b'.'
                    && name[name.len() - s.len()..].eq_ignore_ascii_case(s)
            }
            None => name.eq_ignore_ascii_case(host),
        }
    }
}

fn header_of(h: &InjectHeader) -> Result<(HeaderName, HeaderValue), InjectError> {
    let bad = |why| InjectError::Header {
        name: h.name.chars().take(80).collect(),
        why,
    };
    let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad("not a header name"))?;
    if RESERVED.contains(&name.as_str()) {
        return Err(bad("the proxy sets this header itself"));
    }
    let mut value = HeaderValue::from_str(h.value.expose())
        .map_err(|_| bad("the value has characters a header may not carry (not shown)"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// One request that got a secret, for the server's audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectUse {
    /// The connection's name (the request's Host).
    pub host: String,
    pub method: String,
    /// The path without the query (which may carry the sandbox's own data).
    pub path: String,
    /// The secrets' names, sorted, each once.
    pub secrets: Vec<String>,
}

/// A sandbox's injection: its rules, its CA, how the proxy connects upstream, and whom it tells of
/// each use. Replaced live with [`SandboxPolicy::set_injection`]; each request uses the one in
/// force when it arrives (a connection keeps the leaf it was served).
pub struct Injection {
    pub rules: Vec<InjectRule>,
    pub ca: Arc<SandboxCa>,
    /// The proxy's TLS client for upstreams (the server's: webpki and native roots, and the
    /// operator's extras). Its ALPN is replaced by `http/1.1`.
    pub upstream_tls: Arc<rustls::ClientConfig>,
    /// Called once per request that got a secret header, before it is sent.
    pub on_use: Arc<dyn Fn(InjectUse) + Send + Sync>,
}

impl Injection {
    /// The first rule for `name` (normalised, as the relay has it) on `port`.
    pub fn rule_for(&self, name: &str, port: u16) -> Option<&InjectRule> {
        self.rules.iter().find(|r| r.matches(name, port))
    }

    /// [`InjectRule::check`] for every rule.
    pub fn check(&self) -> Result<(), InjectError> {
        self.rules.iter().try_for_each(InjectRule::check)
    }
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("rules", &self.rules)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

struct Leaf {
    made: Instant,
    config: Arc<rustls::ServerConfig>,
}

/// A sandbox's own CA: signs leaf certificates for the hosts whose requests get secrets. The
/// sandbox trusts its certificate; its key stays on the host (the server persists both, so the
/// sandbox's trust survives a restart of the server).
pub struct SandboxCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
    leaves: Mutex<HashMap<String, Leaf>>,
}

impl fmt::Debug for SandboxCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner()).len();
        f.debug_struct("SandboxCa")
            .field("leaves", &leaves)
            .finish_non_exhaustive()
    }
}

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

impl SandboxCa {
    /// A new CA (ECDSA P-256) named `Lizard sandbox <id> CA`, valid for ten years; it may sign
    /// leaves only (path length 0).
    pub fn generate(sandbox_id: &str) -> Result<SandboxCa, InjectError> {
        let ca = |e: rcgen::Error| InjectError::Ca(e.to_string());
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(ca)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("Lizard sandbox {sandbox_id} CA"),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let t = now();
        params.not_before = t - time::Duration::days(1);
        params.not_after = t + time::Duration::days(3650);
        let cert = params.self_signed(&key).map_err(ca)?;
        Ok(SandboxCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA as [`SandboxCa::cert_pem`] and [`SandboxCa::key_pem`] gave it (the key must be the
    /// certificate's).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<SandboxCa, InjectError> {
        let ca = |e: rcgen::Error| InjectError::Ca(e.to_string());
        let key = KeyPair::from_pem(key_pem).map_err(ca)?;
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| InjectError::Ca(format!("the certificate: {e}")))?;
        // The certificate carries its public key as this very SubjectPublicKeyInfo.
        let spki = key.subject_public_key_info();
        if !der.windows(spki.len()).any(|w| w == spki.as_slice()) {
            return Err(InjectError::KeyMismatch);
        }
        Ok(SandboxCa {
            issuer: Issuer::from_ca_cert_der(&der, key).map_err(ca)?,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The certificate the sandbox trusts.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// The key: the server keeps it host-side only.
    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// The TLS server configuration presenting a leaf for `name` (made on first use, kept in a
    /// cache of [`MAX_LEAVES`], made again after a day).
    pub fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, InjectError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = leaves.get(name) {
            if l.made.elapsed() < LEAF_RENEW {
                return Ok(l.config.clone());
            }
        }
        let config = self.make_leaf(name)?;
        if leaves.len() >= MAX_LEAVES && !leaves.contains_key(name) {
            let oldest = leaves
                .iter()
                .min_by_key(|(_, l)| l.made)
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                leaves.remove(&n);
            }
        }
        leaves.insert(
            name.to_string(),
            Leaf {
                made: Instant::now(),
                config: config.clone(),
            },
        );
        Ok(config)
    }

    fn make_leaf(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, InjectError> {
        let leaf = |why: String| InjectError::Leaf {
            name: name.chars().take(253).collect(),
            why,
        };
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| leaf(e.to_string()))?;
        let mut params =
            CertificateParams::new(vec![name.to_string()]).map_err(|e| leaf(e.to_string()))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let t = now();
        params.not_before = t - time::Duration::hours(1);
        params.not_after = t + LEAF_VALIDITY;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| leaf(e.to_string()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(ring())
            .with_safe_default_protocol_versions()
            .map_err(|e| leaf(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| leaf(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

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
        inner: crate::relay::Counted {
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

    fn header(name: &str, value: &str) -> InjectHeader {
        InjectHeader {
            name: name.into(),
            value: SecretValue::new(value),
            secrets: vec!["example".into()],
        }
    }

    fn rule(host: &str, port: Option<u16>) -> InjectRule {
        InjectRule {
            host: host.into(),
            port,
            headers: vec![header("Authorization", "Bearer s3cret")],
        }
    }

    #[test]
    fn the_secret_is_in_no_debug_output_and_no_error() {
        let ca = Arc::new(SandboxCa::generate("sb1").unwrap());
        let inj = Injection {
            rules: vec![rule("api.example.test", None)],
            ca: ca.clone(),
            upstream_tls: Arc::new(
                rustls::ClientConfig::builder_with_provider(ring())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
            on_use: Arc::new(|_| {}),
        };
        let shown = format!("{inj:?} {:?} {:#?}", inj.rules[0], inj.rules[0].headers[0]);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        // A value a header may not carry: the error names the header, not the value.
        let bad = InjectRule {
            headers: vec![header("X-Key", "s3cret\nInjected: yes")],
            ..rule("api.example.test", None)
        };
        let e = bad.check().unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(
            shown.contains("X-Key") && !shown.contains("s3cret"),
            "{shown}"
        );
        let policy = SandboxPolicy::new(Default::default(), Default::default(), vec![]);
        policy.set_injection(Some(Arc::new(inj)));
        let shown = format!("{policy:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn rules_match_names_ports_and_are_checked() {
        let inj_rules = [
            rule("api.example.test", Some(443)),
            rule("*.wild.test", None),
        ];
        let m = |n: &str, p| inj_rules.iter().position(|r| r.matches(n, p));
        assert_eq!(m("api.example.test", 443), Some(0));
        assert_eq!(m("api.example.test", 80), None);
        assert_eq!(m("a.b.wild.test", 80), Some(1));
        assert_eq!(m("wild.test", 80), None);
        assert_eq!(m("xwild.test", 80), None);
        assert_eq!(m("API.Example.test", 443), Some(0));
        assert!(inj_rules.iter().all(|r| r.check().is_ok()));
        for (name, why) in [
            ("Host", "itself"),
            ("Content-Length", "itself"),
            ("a b", "name"),
        ] {
            let r = InjectRule {
                headers: vec![header(name, "v")],
                ..rule("a.test", None)
            };
            assert!(r.check().unwrap_err().to_string().contains(why), "{name}");
        }
        assert!(rule("*.*.test", None).check().is_err());
        assert!(rule("1.2.3.4", None).check().is_err());
    }

    #[test]
    fn the_ca_round_trips_and_a_foreign_key_is_refused() {
        let ca = SandboxCa::generate("sb-7").unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let again = SandboxCa::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        let other = SandboxCa::generate("sb-8").unwrap();
        assert_eq!(
            SandboxCa::from_pem(&ca.cert_pem(), &other.key_pem()).unwrap_err(),
            InjectError::KeyMismatch
        );
        assert!(SandboxCa::from_pem("junk", &ca.key_pem()).is_err());
    }

    async fn handshake(
        server: Arc<rustls::ServerConfig>,
        root_pem: &str,
        sni: &str,
    ) -> Result<(), String> {
        let der = CertificateDer::from_pem_slice(root_pem.as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(ring())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let srv = tokio::spawn(async move {
            let _ = tokio_rustls::TlsAcceptor::from(server).accept(b).await;
        });
        let r = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from(sni.to_string()).unwrap(), a)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        srv.abort();
        r
    }

    /// The leaf verifies against the sandbox's CA for its name only, and not against another
    /// sandbox's CA; leaves are cached, bounded.
    #[tokio::test]
    async fn leaves_verify_for_their_name_only_and_are_cached_bounded() {
        let ca = SandboxCa::generate("sb1").unwrap();
        let cfg = ca.server_config("api.example.test").unwrap();
        assert!(Arc::ptr_eq(
            &cfg,
            &ca.server_config("api.example.test").unwrap()
        ));
        handshake(cfg.clone(), &ca.cert_pem(), "api.example.test")
            .await
            .unwrap();
        let e = handshake(cfg.clone(), &ca.cert_pem(), "other.example.test")
            .await
            .unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        let other = SandboxCa::generate("sb2").unwrap();
        let e = handshake(cfg, &other.cert_pem(), "api.example.test")
            .await
            .unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        for i in 0..MAX_LEAVES + 5 {
            ca.server_config(&format!("n{i}.wild.test")).unwrap();
        }
        assert_eq!(ca.leaves.lock().unwrap().len(), MAX_LEAVES);
    }

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
