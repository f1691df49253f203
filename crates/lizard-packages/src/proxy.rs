//! Serving one sandbox's listener: the accept loop with its connection budget, the request
//! handler (target, checks, cache, upstream), and the streamed bodies.

use lizard_errors::error_chain;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use futures_util::stream;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Body as _, Frame, Incoming};
use hyper::ext::ReasonPhrase;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use percent_encoding::percent_decode_str;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::cache::{self, Cache, Pending};
use crate::registry::{mirror_base, Registries};
use crate::{
    Config, Counts, PackagesError, Refusal, SandboxView, Stats, Traffic, HEADER_READ_TIMEOUT,
    LISTEN_ADDR,
};

/// How many refusals a sandbox's log keeps (the newest).
const MAX_REFUSALS: usize = 64;
/// The longest destination kept in a refusal (it is the sandbox's text).
const MAX_LOGGED_DESTINATION: usize = 256;

type Body = UnsyncBoxBody<Bytes, io::Error>;
type Upstream = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// File name endings of artifacts that never change once published (cached).
const ARTIFACTS: &[&str] = &[
    ".whl",
    ".tar.gz",
    ".tgz",
    ".zip",
    ".tar.bz2",
    ".tar.xz",
    ".deb",
    ".udeb",
    ".metadata",
];

/// Request headers passed upstream (and any `npm-*` / `pacote-*`).
const FORWARDED: &[HeaderName] = &[
    header::ACCEPT,
    header::ACCEPT_LANGUAGE,
    header::USER_AGENT,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::RANGE,
    header::IF_RANGE,
    header::CACHE_CONTROL,
    header::PRAGMA,
];

/// Upstream response headers never passed back (hop-by-hop, or about upstream's origin).
const DROPPED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "set-cookie",
    "set-cookie2",
    "strict-transport-security",
    "alt-svc",
];

/// Tells whether a response came from the cache (`hit`), was fetched for it (`miss`), or neither.
const CACHE_HEADER: &str = "x-lizard-cache";

#[derive(Debug, Default)]
struct AtomicCounts {
    requests: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    upstream_bytes: AtomicU64,
    served_bytes: AtomicU64,
}

impl AtomicCounts {
    fn snapshot(&self) -> Counts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counts {
            requests: l(&self.requests),
            cache_hits: l(&self.cache_hits),
            cache_misses: l(&self.cache_misses),
            upstream_bytes: l(&self.upstream_bytes),
            served_bytes: l(&self.served_bytes),
        }
    }
}

type Field = fn(&AtomicCounts) -> &AtomicU64;

pub(crate) struct Inner {
    pub(crate) registries: Registries,
    cfg: Config,
    client: Upstream,
    cache: Arc<Cache>,
    totals: TrafficCounters,
    per_registry: Vec<AtomicCounts>,
    /// Bytes of index bodies in memory, all sandboxes together ([`Config::index_memory_total`]).
    index_memory: Arc<Semaphore>,
    index_memory_refusals: AtomicU64,
}

impl Inner {
    pub(crate) fn new(cfg: Config) -> Result<Self, PackagesError> {
        if cfg.connections_per_sandbox == 0 {
            return Err(PackagesError::NoConnections);
        }
        let registries = Registries::new(cfg.registries.clone())?;
        let cache = Cache::open(&cfg.cache_dir, cfg.cache_max_bytes).map_err(|source| {
            PackagesError::CacheDir {
                path: cfg.cache_dir.clone(),
                source,
            }
        })?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(cfg.upstream_timeout));
        http.set_nodelay(true);
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| PackagesError::Tls(e.to_string()))?
        .with_root_certificates(root_certificates())
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .pool_max_idle_per_host(8)
            .build(https);
        let per_registry = registries
            .list()
            .iter()
            .map(|_| AtomicCounts::default())
            .collect();
        Ok(Inner {
            registries,
            index_memory: Arc::new(Semaphore::new(memory_permits(cfg.index_memory_total))),
            index_memory_refusals: AtomicU64::new(0),
            cfg,
            client,
            cache: Arc::new(cache),
            totals: TrafficCounters::default(),
            per_registry,
        })
    }

    pub(crate) fn stats(&self) -> Stats {
        let (cache_entries, cache_bytes) = self.cache.usage();
        Stats {
            total: self.totals.traffic(),
            cache_entries,
            cache_bytes,
            index_memory_bytes: (memory_permits(self.cfg.index_memory_total)
                - self.index_memory.available_permits()) as u64,
            index_memory_refusals: self.index_memory_refusals.load(Ordering::Relaxed),
            per_registry: self
                .registries
                .list()
                .iter()
                .zip(&self.per_registry)
                .map(|(r, c)| (r.name.clone(), c.snapshot()))
                .collect(),
        }
    }

    fn count(&self, reg: Option<usize>, field: Field, n: u64) {
        field(&self.totals.counts).fetch_add(n, Ordering::Relaxed);
        if let Some(c) = reg.and_then(|i| self.per_registry.get(i)) {
            field(c).fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Mozilla's roots (webpki-roots) and the host's own store (`SSL_CERT_FILE`, `SSL_CERT_DIR` or the
/// system bundle): a host whose egress goes through a TLS-inspecting gateway trusts its CA there.
pub fn root_certificates() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "package proxy: reading the host's CA certificates");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "package proxy: host CA certificates");
    roots
}

pub(crate) async fn accept_loop(
    inner: Arc<Inner>,
    listener: TcpListener,
    sandbox: SandboxView,
    mine: Arc<SandboxCounters>,
) {
    let budget = Arc::new(Semaphore::new(inner.cfg.connections_per_sandbox));
    let local = listener.local_addr().ok();
    let index_memory = Arc::new(Semaphore::new(memory_permits(
        inner.cfg.index_memory_per_sandbox,
    )));
    let ctx = Arc::new(Ctx {
        index_memory,
        inner,
        sandbox,
        local,
        mine,
    });
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = budget.clone().try_acquire_owned() else {
                        ctx.inner.totals.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        ctx.mine.traffic.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(sandbox = %ctx.sandbox.id, "package proxy: connection budget spent, closing");
                        drop(stream);
                        continue;
                    };
                    let ctx = ctx.clone();
                    conns.spawn(async move {
                        let _permit = permit;
                        serve_connection(ctx, stream).await;
                    });
                }
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::warn!(sandbox = %ctx.sandbox.id, error = %e, "package proxy: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}

async fn serve_connection(ctx: Arc<Ctx>, stream: tokio::net::TcpStream) {
    let _ = stream.set_nodelay(true);
    let stream = StallGuard::new(stream, ctx.inner.cfg.client_stall_timeout);
    let service = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(ctx.handle(req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "package proxy: connection ended");
    }
}

struct Ctx {
    inner: Arc<Inner>,
    /// Bytes of index bodies in memory for this sandbox ([`Config::index_memory_per_sandbox`]).
    index_memory: Arc<Semaphore>,
    sandbox: SandboxView,
    local: Option<SocketAddr>,
    mine: Arc<SandboxCounters>,
}

/// The counters behind a [`Traffic`].
#[derive(Debug, Default)]
pub(crate) struct TrafficCounters {
    counts: AtomicCounts,
    refused: AtomicU64,
    rejected_connections: AtomicU64,
}

impl TrafficCounters {
    fn traffic(&self) -> Traffic {
        let c = self.counts.snapshot();
        Traffic {
            requests: c.requests,
            cache_hits: c.cache_hits,
            cache_misses: c.cache_misses,
            refused: self.refused.load(Ordering::Relaxed),
            upstream_bytes: c.upstream_bytes,
            served_bytes: c.served_bytes,
            rejected_connections: self.rejected_connections.load(Ordering::Relaxed),
        }
    }
}

/// The counters and recent refusals of one served listener (one sandbox).
#[derive(Debug, Default)]
pub(crate) struct SandboxCounters {
    traffic: TrafficCounters,
    refusals: Mutex<VecDeque<Refusal>>,
}

impl SandboxCounters {
    pub(crate) fn stats(&self) -> Traffic {
        self.traffic.traffic()
    }

    pub(crate) fn refusals(&self) -> Vec<Refusal> {
        let log = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect()
    }
}

/// Where a request goes: a registry and the path (empty or from `/`) and query after its base.
struct Target {
    reg: usize,
    path: String,
    query: Option<String>,
}

impl Ctx {
    fn count(&self, reg: Option<usize>, field: Field, n: u64) {
        self.inner.count(reg, field, n);
        field(&self.mine.traffic.counts).fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a 403 and keeps it in the sandbox's bounded log of refusals.
    fn note_refusal(&self, method: &Method, destination: &str) {
        self.inner.totals.refused.fetch_add(1, Ordering::Relaxed);
        self.mine.traffic.refused.fetch_add(1, Ordering::Relaxed);
        let mut destination = destination.to_owned();
        if destination.len() > MAX_LOGGED_DESTINATION {
            let mut end = MAX_LOGGED_DESTINATION;
            while !destination.is_char_boundary(end) {
                end -= 1;
            }
            destination.truncate(end);
        }
        let mut log = self.mine.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == MAX_REFUSALS {
            log.pop_front();
        }
        log.push_back(Refusal {
            at: SystemTime::now(),
            method: method.to_string(),
            destination,
        });
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let inner = &self.inner;
        self.count(None, |c| &c.requests, 1);
        if !self.sandbox.packages_allowed {
            self.note_refusal(req.method(), &req.uri().to_string());
            return text(
                StatusCode::FORBIDDEN,
                Some("Lizard: package registries are turned off for this project"),
                format!(
                    "Lizard: package registries are turned off for project {}; sandbox {} cannot \
                     use the package mirror at http://{LISTEN_ADDR}.\n",
                    self.sandbox.project, self.sandbox.id
                ),
            );
        }
        if req.method() == Method::CONNECT {
            let dest = req
                .uri()
                .authority()
                .map_or_else(|| req.uri().to_string(), |a| a.to_string());
            return self.refuse_destination(req.method(), &dest);
        }
        let target = match self.target(req.method(), req.uri()) {
            Ok(t) => t,
            Err(resp) => return *resp,
        };
        let reg = Some(target.reg);
        inner.per_registry[target.reg]
            .requests
            .fetch_add(1, Ordering::Relaxed);
        let method = req.method().clone();
        if method != Method::GET && method != Method::HEAD {
            let mut resp = text(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                format!(
                    "Lizard: the package mirror is read-only: {method} is not allowed (GET and HEAD \
                     only; publishing to a registry needs the sandbox's own egress).\n"
                ),
            );
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        if !req.body().is_end_stream() {
            return text(
                StatusCode::BAD_REQUEST,
                None,
                "Lizard: a request to the package mirror cannot have a body.\n".into(),
            );
        }
        if let Err(why) = check_path(&target.path) {
            return text(
                StatusCode::BAD_REQUEST,
                None,
                format!("Lizard: bad path: {why}.\n"),
            );
        }
        let registry = &inner.registries.list()[target.reg];
        let mut url = format!("{}{}", registry.url, target.path);
        if let Some(q) = &target.query {
            url.push('?');
            url.push_str(q);
        }
        // With a query an artifact URL is not what pip, npm or apt fetch; not caching it also
        // keeps a sandbox from filling the cache with copies of one file under new keys.
        let artifact = is_artifact(&target.path) && target.query.is_none();
        let key = cache::key(&url);
        if artifact {
            if let Some(hit) = inner.cache.lookup(&key).await {
                self.count(reg, |c| &c.cache_hits, 1);
                return self.serve_hit(target.reg, hit, method == Method::HEAD);
            }
            self.count(reg, |c| &c.cache_misses, 1);
        }
        let cache_key = (artifact && method == Method::GET).then_some(key);
        self.fetch(target.reg, &method, &url, req.headers(), cache_key)
            .await
    }

    /// Makes `held` exactly `n` bytes of index memory, against this sandbox's bound and the
    /// global one; false (and `held` as it was) when either would be exceeded.
    fn reserve(&self, held: &mut Reservation, n: usize) -> bool {
        let have = held.bytes();
        if n <= have {
            for p in [&mut held.mine, &mut held.all].into_iter().flatten() {
                drop(p.split(have - n));
            }
            return true;
        }
        let Ok(more) = u32::try_from(n - have) else {
            return false;
        };
        let mine = self.index_memory.clone().try_acquire_many_owned(more);
        let all = self.inner.index_memory.clone().try_acquire_many_owned(more);
        let (Ok(mine), Ok(all)) = (mine, all) else {
            return false;
        };
        for (slot, p) in [(&mut held.mine, mine), (&mut held.all, all)] {
            match slot {
                Some(h) => h.merge(p),
                None => *slot = Some(p),
            }
        }
        true
    }

    /// The 503 for an index page that would go beyond an index memory bound.
    fn busy(&self) -> Response<Body> {
        self.inner
            .index_memory_refusals
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(sandbox = %self.sandbox.id, "package proxy: index memory bound reached");
        let mut resp = text(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("Lizard: package mirror busy"),
            "Lizard: the package mirror holds as many index pages in memory as it may (this \
             sandbox's, or all sandboxes'); retry in a moment, with fewer parallel requests.\n"
                .into(),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        resp
    }

    /// Parses the request target: origin-form `/<name>/<rest>`, or absolute-form to the mirror itself
    /// or into an `http://` registry. Anything else is answered here.
    fn target(&self, method: &Method, uri: &Uri) -> Result<Target, Box<Response<Body>>> {
        let regs = &self.inner.registries;
        if let Some(authority) = uri.authority() {
            let is_self = authority.as_str() == LISTEN_ADDR.to_string()
                || self
                    .local
                    .is_some_and(|l| authority.as_str() == l.to_string());
            if !is_self {
                let default_port = if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                };
                let dest = format!(
                    "{}:{}",
                    authority.host(),
                    authority.port_u16().unwrap_or(default_port)
                );
                if uri.scheme_str() != Some("http") {
                    return Err(Box::new(self.refuse_destination(method, &dest)));
                }
                let Some((reg, rest)) = regs.match_url(&uri.to_string()) else {
                    return Err(Box::new(self.refuse_destination(method, &dest)));
                };
                let (path, query) = match rest.split_once('?') {
                    Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
                    None => (rest, None),
                };
                return Ok(Target { reg, path, query });
            }
        }
        let path = uri.path();
        let after = path.strip_prefix('/').unwrap_or(path);
        let (name, rest) = match after.find('/') {
            Some(i) => after.split_at(i),
            None => (after, ""),
        };
        if name.is_empty() {
            return Err(Box::new(text(StatusCode::OK, None, self.listing())));
        }
        match regs.by_name(name) {
            Some(reg) => Ok(Target {
                reg,
                path: rest.to_owned(),
                query: uri.query().map(str::to_owned),
            }),
            None => Err(Box::new(text(
                StatusCode::NOT_FOUND,
                None,
                format!(
                    "Lizard: no package registry is named {name:?}.\n\n{}",
                    self.listing()
                ),
            ))),
        }
    }

    fn listing(&self) -> String {
        let mut s = format!("Lizard package mirror at http://{LISTEN_ADDR}; registries:\n");
        for r in self.inner.registries.list() {
            s.push_str(&format!("  {}/  ->  {}\n", mirror_base(&r.name), r.url));
        }
        s
    }

    fn registry_names(&self) -> String {
        let names: Vec<&str> = self
            .inner
            .registries
            .list()
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        names.join(", ")
    }

    /// The 403 for a destination that is not a registry (CONNECT, other hosts).
    fn refuse_destination(&self, method: &Method, dest: &str) -> Response<Body> {
        self.note_refusal(method, dest);
        let host = match dest.rfind(':') {
            Some(i) if !dest[i..].contains(']') => &dest[..i],
            _ => dest,
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let mut hint = String::new();
        for r in self.inner.registries.on_host(bare) {
            hint.push_str(&format!(
                " {} is mirrored at {}/ — use that URL instead.",
                r.url,
                mirror_base(&r.name)
            ));
        }
        let names = self.registry_names();
        let id = &self.sandbox.id;
        if self.sandbox.has_egress {
            text(
                StatusCode::FORBIDDEN,
                Some("Lizard: this proxy serves only the package registries"),
                format!(
                    "Lizard: sandbox {id} has its own internet egress; http://{LISTEN_ADDR} is only \
                     the mirror of the package registries ({names}) and does not proxy {dest}: \
                     connect to it directly (without HTTP_PROXY/HTTPS_PROXY).{hint}\n"
                ),
            )
        } else {
            text(
                StatusCode::FORBIDDEN,
                Some("Lizard: no internet egress in this sandbox, only the package registries"),
                format!(
                    "Lizard: sandbox {id} has no internet egress (network.egress is \"none\"); only \
                     the package registries ({names}) are reachable, through http://{LISTEN_ADDR}. \
                     To reach {dest}, create the sandbox with \
                     {{\"network\": {{\"egress\": {{\"allow\": [\"{host}\"]}}}}}} (the project \
                     needs allow_egress).{hint}\n"
                ),
            )
        }
    }

    fn serve_hit(self: &Arc<Self>, reg: usize, hit: cache::Hit, head: bool) -> Response<Body> {
        let len = hit.len;
        let left = if head { 0 } else { len };
        let ctx = self.clone();
        let body = stream::unfold((hit.file, left), move |(mut file, left)| {
            let ctx = ctx.clone();
            async move {
                if left == 0 {
                    return None;
                }
                let mut buf = BytesMut::zeroed(left.min(64 * 1024) as usize);
                match file.read(&mut buf).await {
                    Ok(0) => Some((Err(io::Error::other("cache entry shrank")), (file, 0))),
                    Ok(n) => {
                        buf.truncate(n);
                        ctx.count(Some(reg), |c| &c.served_bytes, n as u64);
                        Some((Ok(Frame::data(buf.freeze())), (file, left - n as u64)))
                    }
                    Err(e) => Some((Err(e), (file, 0))),
                }
            }
        });
        let mut resp = Response::new(StreamBody::new(body).boxed_unsync());
        let h = resp.headers_mut();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if let Ok(ct) = HeaderValue::from_str(&hit.content_type) {
            h.insert(header::CONTENT_TYPE, ct);
        }
        h.insert(CACHE_HEADER, HeaderValue::from_static("hit"));
        resp
    }

    async fn fetch(
        self: &Arc<Self>,
        reg: usize,
        method: &Method,
        url: &str,
        client_headers: &HeaderMap,
        cache_key: Option<String>,
    ) -> Response<Body> {
        let inner = &self.inner;
        let registry = &inner.registries.list()[reg];
        let mut up = Request::builder().method(method.clone()).uri(url);
        for (name, value) in client_headers {
            let s = name.as_str();
            if FORWARDED.contains(name) || s.starts_with("npm-") || s.starts_with("pacote-") {
                up = up.header(name, value);
            }
        }
        up = up.header(header::ACCEPT_ENCODING, "identity");
        let up = match up.body(Empty::new()) {
            Ok(r) => r,
            Err(e) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    None,
                    format!("Lizard: bad request: {e}.\n"),
                )
            }
        };
        let timeout = inner.cfg.upstream_timeout;
        let resp = match tokio::time::timeout(timeout, inner.client.request(up)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                return text(
                    StatusCode::BAD_GATEWAY,
                    Some("Lizard: package registry unreachable"),
                    format!(
                        "Lizard: package registry {} ({}) could not be reached: {}.\n",
                        registry.name,
                        registry.url,
                        error_chain(&e)
                    ),
                )
            }
            Err(_) => {
                return text(
                    StatusCode::GATEWAY_TIMEOUT,
                    Some("Lizard: package registry did not answer"),
                    format!(
                        "Lizard: package registry {} ({}) did not answer within {} s.\n",
                        registry.name,
                        registry.url,
                        timeout.as_secs_f64()
                    ),
                )
            }
        };
        let (parts, body) = resp.into_parts();
        let status = parts.status;
        let upstream_len = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let encoded = parts
            .headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        // A body that only the connection's end ends (no length, not chunked) cannot be told from
        // one cut short: it is served, never cached.
        let delimited = upstream_len.is_some()
            || parts
                .headers
                .get_all(header::TRANSFER_ENCODING)
                .iter()
                .any(|v| v.as_bytes().to_ascii_lowercase().ends_with(b"chunked"));
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut headers = response_headers(parts.headers);

        if status.is_redirection() {
            if let Some(location) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok()) {
                let absolute = resolve(url, location);
                let Some((to, rest)) = inner.registries.match_url(&absolute) else {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        Some("Lizard: redirect outside the package registries"),
                        format!(
                            "Lizard: package registry {} redirected to {absolute}, a redirect \
                             outside the package registries ({}); the mirror does not follow it.\n",
                            registry.name,
                            self.registry_names()
                        ),
                    );
                };
                let mirrored = format!("{}{rest}", mirror_base(&inner.registries.list()[to].name));
                match HeaderValue::from_str(&mirrored) {
                    Ok(v) => headers.insert(header::LOCATION, v),
                    Err(_) => headers.remove(header::LOCATION),
                };
            }
        }

        let has_body = *method != Method::HEAD
            && status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED;
        if is_index_type(&content_type) && status != StatusCode::NO_CONTENT {
            if !has_body {
                // HEAD of an index: the rewritten length is not known without the body.
                return build(status, headers, Empty::new().map_err(never).boxed_unsync());
            }
            if encoded {
                return text(
                    StatusCode::BAD_GATEWAY,
                    Some("Lizard: compressed index from the package registry"),
                    format!(
                        "Lizard: package registry {} sent a compressed index page although asked \
                         for identity encoding; the mirror cannot rewrite it.\n",
                        registry.name
                    ),
                );
            }
            let max = inner.cfg.max_index_bytes;
            let mut held = Reservation::default();
            let buffered = match self.collect(reg, body, max, &mut held).await {
                Ok(b) => b,
                Err(None) => return self.busy(),
                Err(Some(why)) => {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        Some("Lizard: bad index page from the package registry"),
                        format!(
                            "Lizard: index page from package registry {}: {why}.\n",
                            registry.name
                        ),
                    )
                }
            };
            // Up to 64 MiB of scanning: off the runtime's threads, which serve every sandbox.
            let scan = inner.clone();
            let rewritten = tokio::task::spawn_blocking(move || {
                let absolute = scan.registries.rewrite(&buffered);
                drop(buffered);
                scan.registries.rewrite_root_relative(reg, &absolute)
            })
            .await;
            let Ok(rewritten) = rewritten else {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    "Lizard: the package mirror failed to rewrite an index page.\n".into(),
                );
            };
            let rewritten = Bytes::from(rewritten);
            // From here the reservation is the rewritten body's, until it is sent.
            if !self.reserve(&mut held, rewritten.len()) {
                return self.busy();
            }
            self.count(Some(reg), |c| &c.served_bytes, rewritten.len() as u64);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(rewritten.len()));
            // Validators describe upstream's bytes, not ours.
            headers.remove(header::ETAG);
            headers.remove("content-md5");
            // In pieces: hyper asks for the next one only when the last is on its way, so the
            // reservation lasts as long as the client takes to read the page.
            let body = stream::unfold((rewritten, held), |(mut left, held)| async move {
                if left.is_empty() {
                    return None;
                }
                let piece = left.split_to(left.len().min(64 * 1024));
                Some((Ok(Frame::data(piece)), (left, held)))
            });
            return build(status, headers, StreamBody::new(body).boxed_unsync());
        }

        if let Some(len) = upstream_len {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        let mut tee = None;
        if let Some(key) = cache_key.filter(|_| status == StatusCode::OK && !encoded && delimited) {
            headers.insert(CACHE_HEADER, HeaderValue::from_static("miss"));
            let fits = upstream_len
                .is_none_or(|n| n <= inner.cfg.max_artifact_bytes && n < inner.cfg.cache_max_bytes);
            if fits {
                match inner.cache.begin(&key, &content_type).await {
                    Ok(pending) => tee = pending,
                    Err(e) => tracing::warn!(error = %e, "package cache: cannot start an entry"),
                }
            }
        }
        if !has_body {
            return build(status, headers, Empty::new().map_err(never).boxed_unsync());
        }
        let relay = Relay {
            ctx: self.clone(),
            reg,
            body,
            tee,
            expected: upstream_len,
            done: false,
        };
        build(
            status,
            headers,
            StreamBody::new(stream::unfold(relay, Relay::next)).boxed_unsync(),
        )
    }

    /// Reads a whole (index) body, at most `max` bytes, with the stall deadline between chunks,
    /// growing `held` to what it keeps in memory. `Err(None)`: an index memory bound is reached.
    async fn collect(
        &self,
        reg: usize,
        mut body: Incoming,
        max: usize,
        held: &mut Reservation,
    ) -> Result<Vec<u8>, Option<String>> {
        let stall = self.inner.cfg.upstream_timeout;
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(stall, body.frame()).await {
                Err(_) => return Err(Some(format!("stalled for {} s", stall.as_secs_f64()))),
                Ok(None) => return Ok(out),
                Ok(Some(Err(e))) => {
                    return Err(Some(format!("the body broke off: {}", error_chain(&e))))
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.count(Some(reg), |c| &c.upstream_bytes, data.len() as u64);
                        if out.len() + data.len() > max {
                            return Err(Some(format!(
                                "larger than the mirror's limit of {max} bytes for an index page"
                            )));
                        }
                        if !self.reserve(held, out.len() + data.len()) {
                            return Err(None);
                        }
                        out.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Semaphore permits for a byte bound (tokio's semaphores hold at most `MAX_PERMITS`).
fn memory_permits(bytes: usize) -> usize {
    bytes.min(Semaphore::MAX_PERMITS)
}

/// Bytes of index memory one request holds: permits of its sandbox's bound and of the global one
/// (always the same number of each).
#[derive(Default)]
struct Reservation {
    mine: Option<OwnedSemaphorePermit>,
    all: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    fn bytes(&self) -> usize {
        self.mine.as_ref().map_or(0, |p| p.num_permits())
    }
}

/// A client connection whose writes fail with `TimedOut` once the client has accepted nothing for
/// `limit` (it stopped reading): hyper then closes the connection and drops the response body,
/// and with it the upstream connection and the cache writer.
struct StallGuard {
    io: tokio::net::TcpStream,
    limit: std::time::Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl StallGuard {
    fn new(io: tokio::net::TcpStream, limit: std::time::Duration) -> Self {
        StallGuard {
            io,
            limit,
            stalled: None,
        }
    }

    /// After a write that made no progress: pending until the deadline, then the error.
    fn pending<T>(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<T>> {
        let limit = self.limit;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match std::future::Future::poll(sleep.as_mut(), cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        r: std::task::Poll<io::Result<T>>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<T>> {
        if r.is_pending() {
            return self.pending(cx);
        }
        self.stalled = None;
        r
    }
}

impl tokio::io::AsyncRead for StallGuard {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for StallGuard {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.progress(r, cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.progress(r, cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_shutdown(cx);
        self.progress(r, cx)
    }
}

/// An upstream body on its way to the client, written to the cache on the side.
struct Relay {
    ctx: Arc<Ctx>,
    reg: usize,
    body: Incoming,
    tee: Option<Pending>,
    expected: Option<u64>,
    done: bool,
}

impl Relay {
    async fn next(mut self) -> Option<(Result<Frame<Bytes>, io::Error>, Relay)> {
        if self.done {
            return None;
        }
        let stall = self.ctx.inner.cfg.upstream_timeout;
        loop {
            match tokio::time::timeout(stall, self.body.frame()).await {
                Err(_) => {
                    self.fail();
                    let e = io::Error::new(io::ErrorKind::TimedOut, "package registry stalled");
                    return Some((Err(e), self));
                }
                Ok(Some(Err(e))) => {
                    self.fail();
                    return Some((Err(io::Error::other(e)), self));
                }
                Ok(None) => {
                    // A clean end: without a Content-Length this is the only sign of completeness
                    // (with one, the entry was committed at its last byte).
                    if self.expected.is_none() {
                        self.commit().await;
                    }
                    self.tee = None;
                    return None;
                }
                Ok(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let n = data.len() as u64;
                    self.ctx.count(Some(self.reg), |c| &c.upstream_bytes, n);
                    self.ctx.count(Some(self.reg), |c| &c.served_bytes, n);
                    self.write_cache(&data).await;
                    return Some((Ok(Frame::data(data)), self));
                }
            }
        }
    }

    fn fail(&mut self) {
        self.done = true;
        self.tee = None; // removes the temporary file
    }

    async fn write_cache(&mut self, data: &[u8]) {
        let Some(pending) = self.tee.as_mut() else {
            return;
        };
        let over = pending.body_len() + data.len() as u64 > self.ctx.inner.cfg.max_artifact_bytes;
        if over {
            self.tee = None;
            return;
        }
        if let Err(e) = pending.write(data).await {
            if e.kind() == io::ErrorKind::StorageFull {
                tracing::debug!(error = %e, "package cache: not caching this download");
            } else {
                tracing::warn!(error = %e, "package cache: write failed, not caching this download");
            }
            self.tee = None;
            return;
        }
        // hyper stops polling a body once Content-Length bytes are out: commit at the last byte
        // (the upstream client has checked that no more than Content-Length arrives).
        if self.expected == Some(pending.body_len()) {
            self.commit().await;
        }
    }

    async fn commit(&mut self) {
        if let Some(pending) = self.tee.take() {
            if let Err(e) = self.ctx.inner.cache.commit(pending).await {
                tracing::warn!(error = %e, "package cache: cannot keep a download");
            }
        }
    }
}

fn build(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// A text/plain answer from the mirror itself, with an optional reason phrase (what Python's
/// `Tunnel connection failed: 403 …` and curl's `CONNECT tunnel failed` show).
fn text(status: StatusCode, reason: Option<&'static str>, body: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(never).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(reason) = reason {
        resp.extensions_mut()
            .insert(ReasonPhrase::from_static(reason.as_bytes()));
    }
    resp
}

fn never(n: Infallible) -> io::Error {
    match n {}
}

/// Upstream's headers without the hop-by-hop ones (and those named by `Connection`), cookies, HSTS.
fn response_headers(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for name in DROPPED
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
    headers
}

/// Index content types, whose bodies are rewritten (and never cached).
fn is_index_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "text/html"
        || essence == "application/json"
        || essence.starts_with("application/vnd.pypi.simple.")
        || essence.ends_with("+json")
}

fn is_artifact(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    ARTIFACTS.iter().any(|ext| lower.ends_with(ext))
}

/// The path after a registry's base must not climb out of it: no segment that is `.` or `..` once
/// percent-decoded, counting an encoded `/` or `\` as a separator too; no NUL.
fn check_path(path: &str) -> Result<(), &'static str> {
    let decoded = percent_decode_str(path).collect::<Vec<u8>>();
    if decoded.contains(&0) {
        return Err("a NUL byte in the path");
    }
    let climbs = decoded
        .split(|&c| c == b'/' || c == b'\\')
        .any(|seg| seg == b"." || seg == b"..");
    if climbs {
        return Err("'.' and '..' path segments (also percent-encoded) are not allowed");
    }
    Ok(())
}

/// Resolves a `Location` against the URL it answered.
fn resolve(base: &str, location: &str) -> String {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(net) = location.strip_prefix("//") {
        return format!("{scheme}://{net}");
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let origin = format!("{scheme}://{}", &rest[..end]);
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = rest[end..].split('?').next().unwrap_or("");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    format!("{origin}{dir}{location}")
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn paths_that_climb_are_refused() {
        for ok in [
            "",
            "/",
            "/simple/foo/",
            "/@types%2fnode",
            "/a..b/c.",
            "/%252e%252e/x",
            "/.well",
        ] {
            assert_eq!(check_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "/..",
            "/../x",
            "/a/./b",
            "/%2e%2e/x",
            "/.%2E/x",
            "/a%2f..%2fb",
            "/a%5c..%5cb",
            "/a\\..\\b",
            "/%2E",
            "/x%00",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn locations_resolve() {
        let base = "https://h.example/a/b/c?q=1";
        assert_eq!(resolve(base, "https://x/y"), "https://x/y");
        assert_eq!(resolve(base, "//x/y"), "https://x/y");
        assert_eq!(resolve(base, "/y"), "https://h.example/y");
        assert_eq!(resolve(base, "d"), "https://h.example/a/b/d");
        assert_eq!(resolve("http://h", "d"), "http://h/d");
    }

    #[test]
    fn content_types_and_artifacts() {
        assert!(is_index_type("text/html; charset=utf-8"));
        assert!(is_index_type("application/vnd.pypi.simple.v1+json"));
        assert!(is_index_type("application/vnd.pypi.simple.v1+html"));
        assert!(is_index_type("application/vnd.npm.install-v1+json"));
        assert!(is_index_type("Application/JSON"));
        assert!(!is_index_type("application/octet-stream"));
        assert!(!is_index_type("text/plain"));
        assert!(is_artifact("/packages/a-1.0-py3-none-any.whl"));
        assert!(is_artifact("/packages/a-1.0.TAR.GZ"));
        assert!(is_artifact("/pool/main/a/a_1_amd64.deb"));
        assert!(is_artifact("/a-1.0-py3-none-any.whl.metadata"));
        assert!(!is_artifact("/dists/bookworm/InRelease"));
        assert!(!is_artifact(
            "/dists/bookworm/main/binary-amd64/Packages.xz"
        ));
    }
}
