//! The package-registry mirror every sandbox reaches at `http://127.100.0.1:3142`.
//!
//! The server creates a TCP listener at [`LISTEN_ADDR`] inside each sandbox's network namespace and
//! hands it to [`PackageProxy::serve`]; this crate serves HTTP/1.1 on it from the host. Requests go
//! to `http://127.100.0.1:3142/<name>/<rest>` and are fetched from `<registry url>/<rest>` of the
//! operator's [`Registry`]s only. Immutable artifacts are cached on the host and shared by all
//! sandboxes; index pages and metadata have the registries' URLs rewritten to the mirror's. Absolute-form
//! requests (`GET http://deb.debian.org/debian/…`, as apt and curl send them to an `http_proxy`)
//! for an `http://` registry are mirrored the same way; everything else, `CONNECT` included, is
//! refused at once with a 403 whose reason phrase and body say why and how to get egress.
//!
//! # Hostile input and its bounds
//!
//! Everything that arrives on a served listener comes from inside a sandbox and is untrusted.
//!
//! - **Who is fetched:** only the configured registries. The sandbox picks a registry by name (or by
//!   an absolute URL that lies inside an `http://` registry URL); it never names a host, port or
//!   scheme. The path after the registry's base is checked before use: a segment that is `.` or `..`
//!   once percent-decoded (`%2e%2e`, `.%2E`, and `..` hidden behind an encoded `/` or `\`, such as
//!   `a%2f..%2fb`) is a 400, so a request cannot climb out of the registry's base path. Redirects are
//!   never followed by the proxy: a `Location` inside a registry is rewritten to the mirror (and the
//!   client's next request is checked like any other), any other one is a 502.
//! - **Requests:** GET and HEAD only (others 405, CONNECT 403); a request with a body is a 400,
//!   never read. Only a fixed set of request headers goes upstream (`Accept`, `User-Agent`, ranges and
//!   conditionals, npm's `npm-*`); never `Cookie`, `Authorization`, `Proxy-*` or the client's
//!   `Accept-Encoding` (upstream is asked for `identity`, so index bodies can be rewritten).
//! - **Connections:** at most [`Config::connections_per_sandbox`] at once per [`PackageProxy::serve`]
//!   (one sandbox's listener): a connection beyond that is closed at once, so a sandbox can spend only
//!   its own budget. Request heads have hyper's default size bounds (≈ 400 KiB buffer, 100 headers) and
//!   must arrive within [`HEADER_READ_TIMEOUT`]; the same deadline is the keep-alive idle timeout
//!   (hyper starts it whenever the connection waits for a request head). HTTP/1.1 only, no upgrades.
//! - **Upstream:** connect and response-head deadline [`Config::upstream_timeout`], and the same
//!   deadline between two body chunks (a stalled upstream ends the client's response with an error).
//!   Upstream response heads are bounded by hyper's client defaults. Index bodies (the rewritten
//!   content types) are buffered up to [`Config::max_index_bytes`], else 502. Upstream `Set-Cookie`,
//!   HSTS, `Alt-Svc` and hop-by-hop headers are not passed back.
//! - **Server memory:** index bodies in memory (buffered, then rewritten until the client has taken
//!   them) count against [`Config::index_memory_per_sandbox`] and [`Config::index_memory_total`];
//!   a page that would pass either is a 503 with `Retry-After` (pip and npm retry), so one sandbox's
//!   many parallel index requests cannot exhaust the host's memory, nor take all of it from the
//!   others. Rewriting (a scan of up to 64 MiB) runs on a blocking thread, not on the runtime's
//!   threads that serve every sandbox.
//! - **Clients that stop reading:** a connection on which the client accepts nothing for
//!   [`Config::client_stall_timeout`] is closed, and with it the upstream connection and the
//!   cache writer of that URL (which would otherwise keep the URL uncached for every sandbox).
//! - **Cache:** a root-only (0700) host directory no sandbox sees; file names are hashes of upstream
//!   URLs, never anything the sandbox wrote. An entry appears only by `rename(2)` of a complete
//!   download (byte count = `Content-Length`, or the clean end of a chunked body; a body that only the
//!   connection's end delimits is served, never cached) of at most
//!   [`Config::max_artifact_bytes`]; the total is bounded by [`Config::cache_max_bytes`], least
//!   recently used evicted first. A cache write error only drops the entry, never the download.
//!   One download per URL writes the cache at a time, and the temporary files of downloads in
//!   flight count against the same bound (they evict the oldest entries to make room; a download
//!   that does not fit beside the others in flight is served, not cached), so a sandbox that reads
//!   many large downloads slowly cannot fill the host's disk beyond the bound. URLs with a query
//!   are never cached (no new keys for the same file).
//! - **What is not bounded per sandbox:** upstream bandwidth and the shared cache's contents are
//!   not divided between sandboxes: one sandbox downloading many distinct packages can evict others' entries (they are fetched again).
//! - **What the owner sees:** [`ServeHandle::stats`] (bytes, hits, refusals of that sandbox) and
//!   [`ServeHandle::refusals`], the newest 64 refused destinations, each cut at 256 bytes.

mod cache;
mod proxy;
mod registry;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use proxy::root_certificates;
pub use registry::{default_registries, Registry, RegistryError};

/// Where the mirror listens inside every sandbox's network namespace.
pub const LISTEN_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 3142);

/// The deadline for a request head, and the keep-alive idle timeout.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the mirror serves and how much it may use.
#[derive(Debug, Clone)]
pub struct Config {
    pub registries: Vec<Registry>,
    /// A host directory for the shared artifact cache (created 0700).
    pub cache_dir: PathBuf,
    /// Bound of the cache's total size on disk.
    pub cache_max_bytes: u64,
    /// The largest artifact that is cached (larger ones are served, not kept).
    pub max_artifact_bytes: u64,
    /// The largest index body (HTML/JSON page) that is rewritten; a larger one is a 502.
    pub max_index_bytes: usize,
    /// Upstream connect + response-head deadline, and the longest pause between two body chunks.
    pub upstream_timeout: Duration,
    /// Concurrent connections of one sandbox (one `serve`).
    pub connections_per_sandbox: usize,
    /// Index bodies held in memory (buffered for rewriting, or rewritten and not yet sent) by one
    /// sandbox's requests together; a request that would go beyond it is a 503.
    pub index_memory_per_sandbox: usize,
    /// The same for all sandboxes together: the server's memory for index pages.
    pub index_memory_total: usize,
    /// The longest a client may take to accept more of a response (a sandbox that stops reading
    /// loses the connection, its upstream connection and its cache writer then).
    pub client_stall_timeout: Duration,
}

impl Config {
    /// The default registries and bounds: cache 10 GiB, artifacts 2 GiB, index pages 64 MiB,
    /// upstream deadline 30 s, 32 connections per sandbox, index memory 256 MiB per sandbox and
    /// 1 GiB in all, a client that reads nothing for 60 s is dropped.
    pub fn new(cache_dir: PathBuf) -> Config {
        Config {
            registries: default_registries(),
            cache_dir,
            cache_max_bytes: 10 << 30,
            max_artifact_bytes: 2 << 30,
            max_index_bytes: 64 << 20,
            upstream_timeout: Duration::from_secs(30),
            connections_per_sandbox: 32,
            index_memory_per_sandbox: 256 << 20,
            index_memory_total: 1 << 30,
            client_stall_timeout: Duration::from_secs(60),
        }
    }
}

/// Why a proxy cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("package cache directory {path}: {source}")]
    CacheDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("package proxy TLS setup: {0}")]
    Tls(String),
    #[error("connections_per_sandbox must be at least 1")]
    NoConnections,
}

/// The sandbox a listener belongs to, as the proxy needs it.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub id: String,
    pub project: String,
    /// The project allows the package registries (else every request is a 403).
    pub packages_allowed: bool,
    /// The sandbox has internet egress of its own (changes the text of refusals).
    pub has_egress: bool,
}

/// Counters of one registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Body bytes read from upstream.
    pub upstream_bytes: u64,
    /// Body bytes sent to sandboxes (from upstream or the cache).
    pub served_bytes: u64,
}

/// Traffic counters: the whole proxy's ([`Stats::total`]) or one sandbox's ([`ServeHandle::stats`],
/// for its usage metering).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Every request, refused ones included.
    pub requests: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Requests refused with a 403 (CONNECT, other destinations, registries turned off).
    pub refused: u64,
    /// Body bytes fetched from upstream.
    pub upstream_bytes: u64,
    /// Body bytes sent to sandboxes (from upstream or the cache).
    pub served_bytes: u64,
    /// Connections closed at once because their sandbox had `connections_per_sandbox` open.
    pub rejected_connections: u64,
}

/// A snapshot of the proxy's counters (since it was built) for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub total: Traffic,
    /// Entries and bytes in the cache now.
    pub cache_entries: u64,
    pub cache_bytes: u64,
    /// Bytes of index bodies held in memory now (bounded by [`Config::index_memory_total`]).
    pub index_memory_bytes: u64,
    /// Requests answered 503 because an index memory bound was reached.
    pub index_memory_refusals: u64,
    /// By registry name (requests that named a registry).
    pub per_registry: BTreeMap<String, Counts>,
}

/// One refused request (a 403), as the sandbox's owner may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at: std::time::SystemTime,
    pub method: String,
    /// `host:port` (CONNECT, absolute-form) or the request target; the sandbox's text, cut at
    /// 256 bytes.
    pub destination: String,
}

/// The mirror, shared by all sandboxes (cheap to clone).
#[derive(Clone)]
pub struct PackageProxy {
    inner: Arc<proxy::Inner>,
}

impl std::fmt::Debug for PackageProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackageProxy").finish_non_exhaustive()
    }
}

/// The tasks serving one listener; dropping it closes the listener and every connection on it.
#[derive(Debug)]
pub struct ServeHandle {
    task: tokio::task::JoinHandle<()>,
    counters: Arc<proxy::SandboxCounters>,
}

impl ServeHandle {
    /// This listener's counters since `serve`.
    pub fn stats(&self) -> Traffic {
        self.counters.stats()
    }

    /// The newest refusals on this listener (at most 64), oldest first.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.counters.refusals()
    }
}

impl Drop for ServeHandle {
    fn drop(&mut self) {
        // The accept loop owns the connections' JoinSet: aborting it aborts them all.
        self.task.abort();
    }
}

impl PackageProxy {
    /// Checks the registries and opens (creating, 0700) the cache directory.
    pub fn new(cfg: Config) -> Result<Self, PackagesError> {
        Ok(PackageProxy {
            inner: Arc::new(proxy::Inner::new(cfg)?),
        })
    }

    /// Serves the mirror on `listener` for `sandbox`: spawns the accept loop on the current tokio
    /// runtime (so it must be called inside one).
    pub fn serve(&self, listener: tokio::net::TcpListener, sandbox: SandboxView) -> ServeHandle {
        let counters = Arc::new(proxy::SandboxCounters::default());
        let task = tokio::spawn(proxy::accept_loop(
            self.inner.clone(),
            listener,
            sandbox,
            counters.clone(),
        ));
        ServeHandle { task, counters }
    }

    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The registries served (checked and normalised).
    pub fn registries(&self) -> &[Registry] {
        self.inner.registries.list()
    }
}

/// The environment the server gives every sandbox (the user's own variables override it): pip, uv
/// and npm use the mirror; with no egress at all, the proxy variables send every other HTTP(S)
/// destination to the mirror too, which refuses it at once with an explanation (instead of a DNS
/// time-out).
pub fn sandbox_env(egress_none: bool) -> Vec<(String, String)> {
    let base = format!("http://{LISTEN_ADDR}");
    let pypi = format!("{base}/pypi/simple/");
    let mut env = vec![
        ("PIP_INDEX_URL", pypi.clone()),
        ("PIP_TRUSTED_HOST", LISTEN_ADDR.to_string()),
        ("UV_INDEX_URL", pypi.clone()),
        ("UV_DEFAULT_INDEX", pypi),
        ("npm_config_registry", format!("{base}/npm/")),
        ("npm_config_audit", "false".into()),
        ("npm_config_fund", "false".into()),
        ("npm_config_update_notifier", "false".into()),
    ];
    if egress_none {
        // The sandbox's own services stay direct: every loopback spelling (curl takes the CIDR;
        // Python and Node compare host names).
        let no_proxy = "localhost,127.0.0.1,127.100.0.1,::1,0.0.0.0,127.0.0.0/8".to_owned();
        env.extend([
            ("HTTP_PROXY", base.clone()),
            ("HTTPS_PROXY", base.clone()),
            ("http_proxy", base.clone()),
            ("https_proxy", base),
            ("NO_PROXY", no_proxy.clone()),
            ("no_proxy", no_proxy),
            // Node's own `fetch` follows the proxy variables only when asked to (Node ≥ 22.21).
            ("NODE_USE_ENV_PROXY", "1".to_owned()),
        ]);
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
