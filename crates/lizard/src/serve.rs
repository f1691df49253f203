//! `lizard serve`: open the data dir, make sure the admin key and the default template exist, raise
//! the open-file limit, bind the listener, adopt sandboxes that survived a previous server
//! (host-side checks only), and serve the API with connection caps (per client address and in
//! all) and a short deadline for request heads.

use anyhow::{Context as _, Result};
use lizard_server::router::router;
use lizard_server::sandboxes::{SandboxConfig, Sandboxes};
use lizard_server::state::AppState;
use lizard_server::store::Store;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to serve the HTTP API on (port 0 picks a free port).
    #[arg(long, env = "LIZARD_LISTEN", default_value = "127.0.0.1:8787")]
    listen: String,
    /// Where the database, templates and sandbox layers live.
    #[arg(long, env = "LIZARD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Use (and build) templates in this data dir instead of --data-dir's own, e.g. to share one
    /// template build between several servers.
    #[arg(long, env = "LIZARD_TEMPLATES_FROM")]
    templates_from: Option<PathBuf>,
    /// Template of sandboxes created without one (built at start-up if missing).
    #[arg(long, default_value = "code-interpreter-v1")]
    template: String,
    /// Default sandbox timeout in milliseconds.
    #[arg(long, default_value_t = 300_000)]
    default_timeout_ms: u64,
    /// Ready sandboxes (default template, Python kernel started) kept so that creates are instant;
    /// 0 turns the pool off. Default: one per GiB of the host's memory (≈ 10 MiB each), and at
    /// most a quarter of the disk that --disk-overcommit lets sandboxes promise (each pooled
    /// sandbox's disk is promised in full); at least 2, at most 32. A 24 GiB host holds 23 when
    /// its disk allows, so that a burst of 20 creates is 20 claims.
    #[arg(long, env = "LIZARD_POOL_SIZE")]
    pool_size: Option<usize>,
    /// The most ready sandboxes the pool grows to when bursts of creates ask for more than
    /// --pool-size: it holds as many as the largest burst of the last five minutes (the creates
    /// of any ten seconds), then shrinks back. Default: --pool-size (a fixed pool).
    #[arg(long, env = "LIZARD_POOL_MAX")]
    pool_max: Option<usize>,
    /// The most sandboxes the pool launches at once when it refills. Most of a launch is one
    /// core's work (its Python kernel's start), so one at a time refills at most ≈ 4 a second.
    /// Default: the number of cores, at most 4.
    #[arg(long, env = "LIZARD_POOL_REFILLS")]
    pool_refills: Option<usize>,
    /// Environment of every sandbox's agent, `KEY=VALUE` (repeatable): agent settings such as
    /// `LIZARD_JAVASCRIPT_ZYGOTE=false` (see `lizard agent --help`). A create's own `env` may not
    /// use `LIZARD_` names.
    #[arg(long = "agent-env", value_name = "KEY=VALUE", value_parser = parse_env_pair)]
    agent_env: Vec<(String, String)>,
    /// CRIU for exact hibernation, snapshots, clones and forks: a `criu` program (4.1 or newer),
    /// or `none` (per-language saves only). Default: the one `scripts/criu.sh` installs
    /// (`target/criu/criu`, next to this binary's build directory), else `criu` on PATH. Checked
    /// with `criu check` at start (the verdict is logged and named in the reports); each
    /// checkpoint falls back to the per-language save when CRIU is missing, fails its check, does
    /// not apply (volumes, egress) or fails.
    #[arg(long, env = "LIZARD_CRIU")]
    criu: Option<String>,
    /// Let the clones of a snapshot (and forks) share their identical memory pages: their CRIU
    /// images are marked mergeable and the kernel's same-page merging (KSM) is turned on (a
    /// host-wide setting; its scan rate stays the operator's, `/sys/kernel/mm/ksm`). Off by
    /// default: merged pages are a timing side channel between the sandboxes that hold them —
    /// turn it on where every project trusts the others (docs/SECURITY.md, "Shared clone
    /// memory").
    #[arg(long, env = "LIZARD_SHARE_CLONE_MEMORY")]
    share_clone_memory: bool,
    /// Leave the host's cgroup2 mount options as they are. By default the server sets
    /// `favordynmods` on the cgroup2 hierarchy (a host-wide setting, kept after it exits), which
    /// makes every move of a process into a cgroup ≈ 0.2 ms instead of an RCU grace period
    /// (8–24 ms here) — on the path of every sandbox launch and context start — at the price of
    /// slightly slower forks and exits host-wide (docs/PERFORMANCE.md).
    #[arg(long, env = "LIZARD_KEEP_CGROUP_OPTIONS")]
    keep_cgroup_options: bool,
    /// Run one shared Python zygote on the host for the default template: its forks join new
    /// sandboxes of that template and become their Python zygotes, so the interpreter's
    /// pre-imported pages are shared across sandboxes (`docs/design/shared-zygote.md`). `false`:
    /// every sandbox imports its own.
    #[arg(long, env = "LIZARD_HOST_ZYGOTES", default_value_t = true, action = clap::ArgAction::Set)]
    host_zygotes: bool,
    /// Hibernate sandboxes paused longer than this (e.g. `10m`, `90s`, `500ms`; a bare number is
    /// seconds); `0` = never.
    #[arg(long, env = "LIZARD_HIBERNATE_AFTER", default_value = "10m", value_parser = parse_duration)]
    hibernate_after: Duration,
    /// Under memory pressure (MemAvailable below this many MiB) hibernate paused sandboxes,
    /// longest-paused first; `0` = never.
    #[arg(long, env = "LIZARD_HIBERNATE_BELOW_MB", default_value_t = 0)]
    hibernate_below_mb: u64,
    /// How many times the data dir's free disk (minus a reserve of 5 %, at most 1 GiB) the
    /// sandboxes' disks (`limits.disk_mb`) and volumes may promise in all. 1.0 (the default) is
    /// strict: a create that does not fit is a 507 and every sandbox can fill its disk. Above 1
    /// that promise can break: when many fill their disks at once they meet the host's ENOSPC.
    #[arg(long, env = "LIZARD_DISK_OVERCOMMIT", default_value_t = 1.0, value_parser = parse_overcommit)]
    disk_overcommit: f64,
    /// Seconds between usage samples of each sandbox.
    #[arg(long, default_value_t = 5)]
    sample_interval_s: u64,
    /// Tests only: run this program as every sandbox's PID 1 in place of the agent, with the
    /// agent's command line and descriptors and the agent itself at fd 4 (the hostile agent
    /// harness, `lizard-hostile-agent`). An operator's option: no API call reaches it.
    #[arg(long, hide = true)]
    agent_wrapper: Option<PathBuf>,
    /// Also serve E2B's debug mode (`E2B_DEBUG=true` in the SDKs): one default sandbox behind the
    /// code-interpreter and envd addresses below, with no API key. Local use only.
    #[arg(long, env = "LIZARD_E2B_DEBUG")]
    e2b_debug: bool,
    /// The domain of sandbox host names: a request to `<port>-<sandbox id>.<domain>` reaches that
    /// port of the sandbox (with its access token, a key that sees it, or, for a sandbox created
    /// with public ports, nothing). Give the host name clients use, with `:port` when they reach
    /// the server on a port of its own, and a wildcard DNS record for it (`*.<domain>`). Default:
    /// `localhost:<the listener's port>`, which browsers resolve without DNS.
    #[arg(long, env = "LIZARD_SANDBOX_DOMAIN")]
    sandbox_domain: Option<String>,
    /// Project that owns the debug-mode sandbox.
    #[arg(long, default_value = "default")]
    e2b_debug_project: String,
    /// Debug mode's code-interpreter address (E2B's SDKs use localhost:49999).
    #[arg(long, default_value = "127.0.0.1:49999")]
    e2b_debug_ci_listen: String,
    /// Debug mode's envd address (E2B's SDKs use localhost:49983).
    #[arg(long, default_value = "127.0.0.1:49983")]
    e2b_debug_envd_listen: String,
    /// Requests a second per principal (API key, E2B sandbox token, or client IP address for
    /// requests without valid credentials), on average; `0` = no limit. Over it: 429 +
    /// `Retry-After`. A streamed execution or file transfer counts as one request.
    #[arg(long, env = "LIZARD_RATE_LIMIT_RPS", default_value_t = 200.0)]
    rate_limit_rps: f64,
    /// Requests a principal may send at once above the average rate.
    #[arg(long, env = "LIZARD_RATE_LIMIT_BURST", default_value_t = 400)]
    rate_limit_burst: u32,
    /// Requests a second per sandbox on its own traffic — its code, contexts, commands, files,
    /// ports and terminals, by a key that may use it (or E2B's sandbox traffic) — on average;
    /// `0` = no limit. These do not count against the key's `--rate-limit-rps`, which then
    /// limits the control plane (creates, lists, lifecycle calls) and calls on other sandboxes.
    #[arg(long, env = "LIZARD_SANDBOX_RATE_LIMIT_RPS", default_value_t = 5000.0)]
    sandbox_rate_limit_rps: f64,
    /// Requests a sandbox's own traffic may send at once above its average rate.
    #[arg(long, env = "LIZARD_SANDBOX_RATE_LIMIT_BURST", default_value_t = 10000)]
    sandbox_rate_limit_burst: u32,
    /// Largest request head (request line + headers) in bytes; larger → 431.
    #[arg(long, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1024..=16 * 1024 * 1024))]
    max_header_bytes: u64,
    /// Time a connection has to send a complete request head, counted from its accept (and, on a
    /// kept-alive connection, from the end of the previous answer): slower (or idle) connections
    /// are closed, so half-sent heads cannot pile up.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    header_read_timeout: Duration,
    /// At SIGTERM/Ctrl-C: how long requests in flight (a streamed cell, a port's WebSocket) may
    /// go on before their connections are closed and the server exits; what runs in a sandbox
    /// can never hold the shutdown longer.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Open connections from one client IP address (idle kept-alive ones included); over it a new
    /// connection is closed at once. `0` = no per-address limit.
    #[arg(long, env = "LIZARD_MAX_CONNECTIONS_PER_IP", default_value_t = 512)]
    max_connections_per_ip: usize,
    /// Open client connections in all (every listener); over it a new connection is closed at
    /// once. Default: a third of the open-file limit (the rest is for the server's own agent
    /// connections, store, logs and launches), at most 65536.
    #[arg(long, env = "LIZARD_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Deadline of the server's own small calls to an agent (health, contexts, the execution
    /// log): connect, head and body. For tests of hostile agents; the default suits production.
    #[arg(long, default_value = "3s", value_parser = parse_duration, hide = true)]
    agent_call_timeout: Duration,
    /// Deadline of a hibernation snapshot or restore call to an agent.
    #[arg(long, default_value = "300s", value_parser = parse_duration, hide = true)]
    agent_hibernate_timeout: Duration,
    /// How long the last look at an agent's execution log before a kill or pause may take.
    #[arg(long, default_value = "1s", value_parser = parse_duration, hide = true)]
    agent_final_sample_timeout: Duration,
    /// Most request headers; more → 431.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(8..=10_000))]
    max_headers: u64,
    /// Keep audit events this long (e.g. `90d`, `12h`); older ones are deleted at start-up and
    /// hourly; `0` = forever.
    #[arg(long, env = "LIZARD_AUDIT_RETENTION", default_value = "90d", value_parser = parse_duration)]
    audit_retention: Duration,
    /// Keep at most this many audit events (the newest); `0` = no limit.
    #[arg(long, env = "LIZARD_AUDIT_MAX_EVENTS", default_value_t = 1_000_000)]
    audit_max_events: u64,
    /// Keep execution records (the per-run rows of `GET /v1/projects/{project}/executions`) this long;
    /// older ones are deleted at start-up and hourly; `0` = forever. Per-sandbox usage totals are
    /// kept regardless.
    #[arg(long, env = "LIZARD_EXECUTIONS_RETENTION", default_value = "90d", value_parser = parse_duration)]
    executions_retention: Duration,
    /// Keep at most this many execution records (the newest); `0` = no limit.
    #[arg(long, env = "LIZARD_EXECUTIONS_MAX_ROWS", default_value_t = 2_000_000)]
    executions_max_rows: u64,
    /// Resolve NAME to IPv4 address IP for sandboxes' egress (like `/etc/hosts`, for sandboxes only:
    /// internal services, or a name the host's resolver does not know), as `NAME=IP`; repeat or
    /// separate with commas. The rules still decide: a private address is reached only through an
    /// address rule naming it.
    #[arg(long = "egress-host", env = "LIZARD_EGRESS_HOSTS", value_delimiter = ',', value_parser = parse_egress_host)]
    egress_hosts: Vec<(String, std::net::Ipv4Addr)>,
    /// A PEM file of CA certificates that the egress proxy also trusts when it connects upstream
    /// for a sandbox's injected requests (`network.inject`): an internal CA. Mozilla's roots and
    /// the host's store are always trusted.
    #[arg(long = "egress-ca", env = "LIZARD_EGRESS_CA")]
    egress_ca: Option<PathBuf>,
    /// A package registry that every sandbox reaches through Lizard's caching mirror at
    /// `http://127.100.0.1:3142/NAME/` (also without egress), as `NAME=URL` (`/NAME/x` is `URL/x`: a
    /// PyPI registry's URL is its root, whose `/simple/` pip uses); repeat or separate
    /// with commas; `none` for no mirror. Sandboxes are pointed at `pypi` (pip, uv) and `npm`;
    /// every registry's URLs in the index pages are rewritten to the mirror (so list a registry's
    /// file host too, as `pypi-files`). Default: pypi=https://pypi.org,
    /// pypi-files=https://files.pythonhosted.org, npm=https://registry.npmjs.org,
    /// debian=http://deb.debian.org/debian, debian-security=http://deb.debian.org/debian-security.
    #[arg(
        long = "package-registry",
        env = "LIZARD_PACKAGE_REGISTRIES",
        value_delimiter = ',',
        value_name = "NAME=URL"
    )]
    package_registries: Vec<String>,
    /// At most this many MiB of downloaded packages are kept in `<data-dir>/package-cache` (shared
    /// by every sandbox; the oldest go first).
    #[arg(long, env = "LIZARD_PACKAGE_CACHE_MB", default_value_t = 10240)]
    package_cache_mb: u64,
    /// Where template build sandboxes may connect (the package registries), comma-separated
    /// host names or addresses (see the sandbox egress allow-list), or `none`. Default: the
    /// registries of this host's pip, npm and apt configuration, else pypi.org,
    /// files.pythonhosted.org, registry.npmjs.org and deb.debian.org.
    #[arg(long, env = "LIZARD_TEMPLATE_BUILD_EGRESS", value_name = "HOST,…")]
    template_build_egress: Option<String>,
    /// Memory of a template build sandbox (MiB).
    #[arg(long, default_value_t = 2048)]
    template_build_memory_mb: u64,
    /// Disk quota of a template build sandbox (MiB): the largest layer a build can make.
    #[arg(long, default_value_t = 8192)]
    template_build_disk_mb: u64,
    /// CPU of a template build sandbox (millicores).
    #[arg(long, default_value_t = 2000)]
    template_build_cpu_millicores: u64,
    /// Deadline of one template build step.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    template_build_step_timeout: Duration,
    /// Deadline of a whole template build.
    #[arg(long, default_value = "60m", value_parser = parse_duration)]
    template_build_timeout: Duration,
    /// Most entries (files, directories, links) a template build's layer may hold.
    #[arg(long, default_value_t = 500_000)]
    template_build_max_files: u64,
}

/// Limits of the HTTP/1 listeners.
#[derive(Debug, Clone)]
struct HttpLimits {
    max_header_bytes: usize,
    max_headers: usize,
    header_read_timeout: Duration,
    /// After shutdown: the longest wait for requests in flight (then their connections close).
    shutdown_grace: Duration,
    /// Open connections, shared by every listener.
    conns: Arc<ConnCaps>,
}

/// Caps on open client connections, per client address and in all; shared by every listener.
#[derive(Debug)]
struct ConnCaps {
    /// `0`: no per-address cap.
    per_ip: usize,
    total: usize,
    /// (open connections per address, open connections in all)
    open: std::sync::Mutex<(std::collections::HashMap<std::net::IpAddr, usize>, usize)>,
}

/// One admitted connection; its count goes when this is dropped.
struct ConnSlot {
    caps: Arc<ConnCaps>,
    ip: std::net::IpAddr,
}

impl ConnCaps {
    fn new(per_ip: usize, total: usize) -> Arc<ConnCaps> {
        Arc::new(ConnCaps {
            per_ip,
            total,
            open: Default::default(),
        })
    }

    /// Count a new connection from `ip`, unless that would pass a cap.
    fn admit(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<ConnSlot> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (per, all) = &mut *open;
        let mine = per.get(&ip).copied().unwrap_or(0);
        if *all >= self.total || (self.per_ip > 0 && mine >= self.per_ip) {
            return None;
        }
        *all += 1;
        per.insert(ip, mine + 1);
        Some(ConnSlot {
            caps: self.clone(),
            ip,
        })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = self.caps.open.lock().unwrap_or_else(|e| e.into_inner());
        let (per, all) = &mut *open;
        *all = all.saturating_sub(1);
        if let Some(n) = per.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.ip);
            }
        }
    }
}

/// The default `--max-connections` for an open-file limit of `nofile`: a third of it (the rest
/// is for the server's own agent connections — one per forwarded request —, store, logs and
/// sandbox launches), at least 64 and at most 65536.
fn default_max_connections(nofile: u64) -> usize {
    (nofile / 3).clamp(64, 65_536) as usize
}

/// Serve `app` on `listener` with hyper's HTTP/1 server: connections over `limits.conns`' caps
/// closed at accept (never waited for), `TCP_NODELAY` on every connection, the request head
/// capped (431 above `limits`), `limits.header_read_timeout` to send it (from the accept, or
/// from the previous answer on a kept-alive connection), the peer address in the request's
/// extensions (`ConnectInfo<SocketAddr>`, for rate limits and the audit log), upgrades
/// (WebSockets) allowed. When `shutdown` completes: stop accepting, let every connection finish
/// its request in flight for at most `limits.shutdown_grace` (a cell streaming for hours, held by
/// the sandbox, must not hold the shutdown), close the rest, then return.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: HttpLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use axum::extract::ConnectInfo;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower_service::Service as _;
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            _ = &mut shutdown => break,
        };
        // Over a cap: closed at once (dropped), before any byte is read.
        let Some(slot) = limits.conns.admit(peer.ip()) else {
            tracing::debug!(%peer, "connection refused: too many open connections");
            continue;
        };
        // Small writes (one NDJSON frame) must leave at once, not wait for Nagle + delayed ACK.
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let svc =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { app.call(req).await }
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_header_size(limits.max_header_bytes);
        if limits.max_headers != 100 {
            // (hyper's default; another number moves the header array to the heap)
            builder.max_headers(limits.max_headers);
        }
        let mut closing = close_rx.clone();
        conns.spawn(async move {
            let _slot = slot;
            let conn = builder
                .serve_connection(TokioIo::new(tcp), svc)
                .with_upgrades();
            tokio::pin!(conn);
            let r = tokio::select! {
                r = conn.as_mut() => r,
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = r {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = close_tx.send(());
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = conns.len(),
            grace_s = limits.shutdown_grace.as_secs_f64(),
            "closing connections still busy after the shutdown grace"
        );
        conns.shutdown().await;
    }
}

/// The server's own calls to agents: production caps, the deadlines of `args`.
fn agent_limits(args: &ServeArgs) -> lizard_server::agent_client::AgentLimits {
    let mut l = lizard_server::agent_client::AgentLimits::default();
    let small = args.agent_call_timeout.max(Duration::from_millis(10));
    l.health.deadline = small;
    l.contexts.deadline = small;
    l.executions.deadline = small;
    l.hibernate.deadline = args.agent_hibernate_timeout.max(Duration::from_millis(10));
    l
}

/// `KEY=VALUE` with a valid environment variable name.
pub fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if lizard_proto::valid_env_name(k) => Ok((k.to_string(), v.to_string())),
        _ => Err(format!(
            "expected KEY=VALUE with a valid variable name, not {s:?}"
        )),
    }
}

fn parse_overcommit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.01..=1000.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "{s:?}: a ratio between 0.01 and 1000, e.g. 1.0 or 2.5"
        )),
    }
}

/// `10m`, `90s`, `500ms`, `1h`, or a number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 10m, 90s, 500ms)"))?;
    let ms = match unit.trim() {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" | "min" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        other => {
            return Err(format!(
                "unknown duration unit {other:?} (use ms, s, m, h or d)"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// The certificates of `--egress-ca`.
fn egress_roots(path: Option<&Path>) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
    use rustls_pki_types::pem::PemObject;
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("--egress-ca {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--egress-ca {}: not PEM certificates", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--egress-ca {}: no certificate in it", path.display());
    }
    Ok(certs)
}

/// `NAME=IP` of `--egress-host`.
fn parse_egress_host(s: &str) -> Result<(String, std::net::Ipv4Addr), String> {
    let (name, ip) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=IP"))?;
    let name = lizard_egress::rules::normalize_name(name.trim())
        .map_err(|why| format!("{name:?}: {why}"))?;
    let ip = ip
        .trim()
        .parse()
        .map_err(|_| format!("{ip:?}: not an IPv4 address"))?;
    Ok((name, ip))
}

pub fn open_store(data_dir: &Path) -> Result<Store> {
    Store::open(&data_dir.join("lizard.db"))
        .with_context(|| format!("opening the store in {}", data_dir.display()))
}

/// The admin key file: created (0600) with a fresh admin key at the first start of a data dir.
fn ensure_admin_key(store: &Store, data_dir: &Path) -> Result<()> {
    if store.has_admin_key()? {
        return Ok(());
    }
    let key = lizard_server::auth::issue_key(store, None)?;
    let path = data_dir.join("admin-key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{key}")?;
    eprintln!(
        "created an admin API key (it acts on every project) and saved it in {}:\n  export LIZARD_API_KEY={key}",
        path.display()
    );
    Ok(())
}

struct Bar(indicatif::ProgressBar);

impl lizard_template::Progress for Bar {
    fn step(&mut self, index: usize, total: usize, name: &str) {
        self.0.set_length(total as u64);
        self.0.set_position(index as u64);
        self.0.set_message(name.to_string());
    }
    fn message(&mut self, line: &str) {
        self.0.println(format!("  {line}"));
    }
}

/// Build `name` unless an up-to-date build exists, drawing a progress bar on stderr.
pub fn build_template(
    data_dir: &Path,
    name: &str,
    force: bool,
) -> Result<lizard_template::Template> {
    build_template_with(
        data_dir,
        name,
        force,
        lizard_template::lock::LockMode::Report,
    )
}

/// [`build_template`] with a lock mode (`lizard template build --locked` / `--update-lock`).
pub fn build_template_with(
    data_dir: &Path,
    name: &str,
    force: bool,
    lock: lizard_template::lock::LockMode,
) -> Result<lizard_template::Template> {
    use lizard_template::lock::LockMode;
    if !force && lock != LockMode::Update {
        if let Some(t) = lizard_template::find(data_dir, name)? {
            // With --locked, a build with drift goes to the builder, which refuses it.
            if lock == LockMode::Report || t.meta.drift.is_empty() {
                return Ok(t);
            }
        }
    }
    eprintln!("building template {name} (first use; cached afterwards)");
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut progress = Bar(bar);
    let t = lizard_template::build(
        name,
        &lizard_template::BuildOptions {
            force,
            lock,
            ..lizard_template::BuildOptions::new(data_dir)
        },
        &mut progress,
    )
    .with_context(|| format!("building template {name}"))?;
    progress.0.finish_with_message("done");
    if !t.meta.drift.is_empty() {
        // Recorded in template.json too; `lizard template build --locked` refuses such a build.
        eprint!(
            "template {}: {}",
            t.name,
            lizard_template::lock::report(&t.meta.drift)
        );
    }
    Ok(t)
}

/// The package registries' mirror (`ServeArgs::package_registries`), or none.
fn package_proxy(
    args: &ServeArgs,
    data_dir: &Path,
) -> Result<Option<lizard_packages::PackageProxy>> {
    let registries = match args.package_registries.as_slice() {
        [] => lizard_packages::default_registries(),
        [none] if none == "none" => {
            tracing::info!("no package registries' mirror (--package-registry none)");
            return Ok(None);
        }
        given => given
            .iter()
            .map(|r| {
                r.parse::<lizard_packages::Registry>()
                    .with_context(|| format!("--package-registry {r:?}"))
            })
            .collect::<Result<_>>()?,
    };
    let names: Vec<&str> = registries.iter().map(|r| r.name.as_str()).collect();
    tracing::info!(registries = ?names, "package registries' mirror");
    let cfg = lizard_packages::Config {
        registries,
        cache_max_bytes: args.package_cache_mb.saturating_mul(1024 * 1024),
        ..lizard_packages::Config::new(data_dir.join("package-cache"))
    };
    Ok(Some(
        lizard_packages::PackageProxy::new(cfg).context("the package registries' mirror")?,
    ))
}

/// The CRIU to use (see `ServeArgs::criu`), checked with `criu check`; the verdict is logged.
fn checkpoint_tool(
    flag: Option<&str>,
    lizard_bin: &Path,
    run_dir: Option<PathBuf>,
) -> lizard_server::sandboxes::CheckpointTool {
    use lizard_server::sandboxes::CheckpointTool;
    let program = match flag {
        Some("none") => {
            tracing::info!("CRIU disabled (--criu none): hibernation is per-language");
            return CheckpointTool {
                criu: None,
                detail: "--criu none".into(),
                ..Default::default()
            };
        }
        Some(p) => PathBuf::from(p),
        None => match cached_criu(lizard_bin) {
            Some(p) => p,
            None => PathBuf::from("criu"),
        },
    };
    let criu = lizard_jail::checkpoint::Criu::new(&program).with_run_dir(run_dir);
    let check = criu.check(Duration::from_secs(30));
    if check.ok {
        tracing::info!(program = %program.display(), detail = %check.detail, "CRIU usable");
    } else {
        tracing::warn!(program = %program.display(), detail = %check.detail, "CRIU not usable: hibernation is per-language");
    }
    CheckpointTool {
        criu: check.ok.then_some(criu),
        detail: check.detail,
        ..Default::default()
    }
}

/// `scripts/criu.sh`'s install for a binary built in this tree: `target/criu/criu` next to
/// `target/<profile>/lizard`.
fn cached_criu(lizard_bin: &Path) -> Option<PathBuf> {
    let target = lizard_bin.parent()?.parent()?;
    let p = target.join("criu").join("criu");
    p.is_file().then_some(p)
}

pub fn serve(args: ServeArgs) -> Result<()> {
    // Sandboxes' PID 1s (launched through `sandbox-init`, which exits right away) become our
    // children: their watches reap them (see `lizard_server::sandboxes`), not the host's init.
    lizard_jail::process::set_child_subreaper().context("becoming a child subreaper")?;
    let data_dir = crate::data_dir(args.data_dir.clone())?;
    // The agents' sockets live under it (`<data>/sandboxes/<id>/agent.sock`), and the launcher
    // makes them only if every directory on the way is root's alone (or sticky).
    if let Err(e) = lizard_jail::hostpath::TrustedDir::open(&data_dir) {
        tracing::warn!(error = %e, "the data dir is not root's alone: sandboxes cannot be launched");
    }
    let store = Arc::new(open_store(&data_dir)?);
    ensure_admin_key(&store, &data_dir)?;
    let templates_data_dir = match &args.templates_from {
        Some(d) => crate::data_dir(Some(d.clone()))?,
        None => data_dir.clone(),
    };
    let template = build_template(&templates_data_dir, &args.template, false)?;
    let id_shift = template.meta.id_shift;
    let volume_owner = (
        id_shift + template.meta.user.uid,
        id_shift + template.meta.user.gid,
    );
    let mut egress_hosts: std::collections::HashMap<String, Vec<std::net::Ipv4Addr>> =
        Default::default();
    for (name, ip) in &args.egress_hosts {
        egress_hosts.entry(name.clone()).or_default().push(*ip);
    }
    let lizard_bin = std::env::current_exe().context("locating the lizard binary")?;
    let lizard_bin_for_criu = lizard_bin.clone();
    let agent_bin = agent_binary(&lizard_bin, std::time::Duration::from_secs(10));
    let agent_exe = std::sync::Arc::new(
        lizard_jail::exe::SealedExe::copy_of(&agent_bin, "lizard-agent").with_context(|| {
            format!("copying {} for the sandboxes' agents", agent_bin.display())
        })?,
    );
    // CRIU's own `/run` (its cache of kernel facts, see `Criu::run_dir`): a small tmpfs in the
    // data dir.
    let criu_run_dir = data_dir.join("criu-run");
    let criu_run_dir = match args.criu.as_deref() {
        Some("none") => Ok(None),
        _ => lizard_jail::checkpoint::mount_run_dir(&criu_run_dir).map(|()| Some(criu_run_dir)),
    };
    let criu_run_dir = match criu_run_dir {
        Ok(dir) => dir,
        Err(e) => {
            tracing::warn!(error = %lizard_jail::error_chain(&e), "CRIU's run directory: CRIU probes the kernel at every run");
            None
        }
    };
    let criu_run_dir_at_exit = criu_run_dir.clone();
    let mut checkpoint = checkpoint_tool(args.criu.as_deref(), &lizard_bin_for_criu, criu_run_dir);
    if !args.keep_cgroup_options {
        use lizard_jail::cgroup::FavorDynmods;
        match lizard_jail::cgroup::favor_dynamic_moves() {
            Ok(FavorDynmods::TurnedOn(at)) => tracing::info!(mount = %at.display(),
                "cgroup moves made cheap: favordynmods set on the cgroup2 hierarchy (--keep-cgroup-options leaves it alone)"),
            Ok(FavorDynmods::AlreadyOn(_)) => {}
            Ok(FavorDynmods::Unavailable(why)) => tracing::info!(%why,
                "cgroup moves wait for an RCU grace period (no favordynmods)"),
            Err(e) => tracing::warn!(error = %lizard_jail::error_chain(&e),
                "cgroup moves wait for an RCU grace period"),
        }
    }
    if args.share_clone_memory {
        match lizard_jail::ksm::ensure_running().context("--share-clone-memory")? {
            true => tracing::info!(
                "same-page merging (KSM) turned on for the clones' memory (--share-clone-memory)"
            ),
            false => tracing::info!("same-page merging (KSM) already on: clones' memory is shared"),
        }
        checkpoint.share_clone_memory = true;
    }
    // With a usable CRIU the agent runs from a regular file (see `SandboxConfig::agent_exe_file`):
    // CRIU restores a process's executable only from one.
    let agent_exe_file = match (&checkpoint.criu, &args.agent_wrapper) {
        (Some(_), None) => {
            let dir = data_dir.join("agent-exe");
            match agent_exe.install_in_tmpfs(&dir, "lizard") {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %lizard_jail::error_chain(&e), "the agent's file copy for CRIU restores: agents run from the memfd (checkpoints are per-language)");
                    None
                }
            }
        }
        _ => None,
    };
    let agent_exe_file_at_exit = agent_exe_file.clone();
    // The agent binaries checkpoints are taken with (kept on disk for restores after an upgrade).
    let agent_exes = agent_exe_file.as_deref().map(|f| {
        Arc::new(lizard_server::sandboxes::agent_exe::AgentExes::new(
            &data_dir, f,
        ))
    });
    let agent_exes_at_exit = agent_exes.clone();
    let agent_wrapper = match &args.agent_wrapper {
        Some(p) => Some(std::sync::Arc::new(
            lizard_jail::exe::SealedExe::copy_of(p, "agent-wrapper")
                .with_context(|| format!("copying the agent wrapper {}", p.display()))?,
        )),
        None => None,
    };

    // Client connections, agent connections and sandboxes all need descriptors: not the
    // inherited soft limit (often 1024), the hard one.
    let nofile = match lizard_jail::process::raise_nofile_to_hard() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE");
            lizard_jail::process::nofile_limit().map_or(1024, |l| l.0)
        }
    };
    let conns = ConnCaps::new(
        args.max_connections_per_ip,
        args.max_connections
            .unwrap_or_else(|| default_max_connections(nofile)),
    );
    tracing::info!(
        nofile,
        max_connections = conns.total,
        max_connections_per_ip = conns.per_ip,
        "connection limits"
    );

    let packages = package_proxy(&args, &data_dir)?;

    let pool_size = args.pool_size.unwrap_or_else(|| {
        lizard_server::sandboxes::default_pool_size(
            &data_dir,
            args.disk_overcommit,
            lizard_proto::SandboxLimits::default().disk_mb,
        )
    });
    tracing::info!(pool_size, "the warm pool");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sandboxes = Sandboxes::new(
            SandboxConfig {
                data_dir: data_dir.clone(),
                templates_data_dir,
                lizard_bin,
                agent_exe,
                agent_wrapper,
                agent_exe_file,
                default_template: args.template.clone(),
                default_timeout_ms: args.default_timeout_ms,
                max_timeout_ms: 24 * 3600 * 1000,
                default_limits: Default::default(),
                id_shift,
                ready_timeout: Duration::from_secs(30),
                pool_size,
                pool_max: args.pool_max.unwrap_or(pool_size).max(pool_size),
                pool_refills: args.pool_refills.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
                }),
                volume_owner,
                egress: std::sync::Arc::new(lizard_server::egress::EgressService::with_roots(
                    egress_hosts,
                    egress_roots(args.egress_ca.as_deref())?,
                )),
                secrets: std::sync::Arc::new(
                    lizard_server::secrets::SecretBox::open(&data_dir.join("secrets.key"))
                        .context("the projects' secrets key")?,
                ),
                hibernate_after: (!args.hibernate_after.is_zero()).then_some(args.hibernate_after),
                agent_env: args.agent_env.iter().cloned().collect(),
                hibernate_below_mb: (args.hibernate_below_mb > 0)
                    .then_some(args.hibernate_below_mb),
                agent_limits: agent_limits(&args),
                final_sample_deadline: args
                    .agent_final_sample_timeout
                    .max(Duration::from_millis(10)),
                executions_retention: lizard_server::store::Retention {
                    max_age: (!args.executions_retention.is_zero())
                        .then_some(args.executions_retention),
                    max_events: (args.executions_max_rows > 0).then_some(args.executions_max_rows),
                },
                disk_overcommit: args.disk_overcommit,
                checkpoint: lizard_server::sandboxes::CheckpointTool {
                    exact_restore: agent_exe_file_at_exit.is_some(),
                    agent_exes: agent_exes.clone(),
                    ..checkpoint
                },
                packages,
                host_zygotes: args.host_zygotes,
            },
            store,
        );
        // The listener first: the port is ours (connections wait in its backlog) while the
        // sandboxes of the previous run are taken back.
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        // Host-side checks only (no agent is asked): quick whatever the agents do; the lost
        // ones are destroyed in the background.
        let (adopted, lost) = sandboxes.adopt().await?;
        // Snapshots live in the store and their own files; what a crash left half-made goes.
        sandboxes.clean_snapshot_dirs();
        // Before any dump: the kept agent binaries no checkpoint needs go. Then, in the
        // background, the current one's digest (launches and dumps wait for it) and its kept copy
        // (so that a sandbox launched now can still be checkpointed after an upgrade).
        sandboxes.clean_kept_agent_exes().await;
        if let Some(x) = agent_exes.clone() {
            tokio::spawn(async move {
                let kept = match x.current_digest().await {
                    Ok(d) => x.keep(&d).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = kept {
                    tracing::warn!(error = %e, "the agent binary's kept copy (made at the first checkpoint instead)");
                }
            });
        }
        if adopted + lost > 0 {
            tracing::info!(adopted, lost, "sandboxes from the previous run");
        }
        tokio::spawn(sandboxes.clone().run_timeouts());
        sandboxes.start_host_zygotes();
        tokio::spawn(sandboxes.clone().run_pool());
        tokio::spawn(lizard_server::sandboxes::metering::run_sampler(
            sandboxes.clone(),
            Duration::from_secs(args.sample_interval_s.max(1)),
        ));
        let e2b = lizard_server::e2b::E2b::open(
            &data_dir,
            args.e2b_debug.then(|| args.e2b_debug_project.clone()),
        )
        .context("opening the E2B token secret")?
        .with_sandbox_domain(&match &args.sandbox_domain {
            Some(d) => d.clone(),
            None => format!("localhost:{}", listener.local_addr()?.port()),
        });
        let template_cfg = {
            let mut c = lizard_server::templates::TemplateConfig::default();
            if let Some(list) = &args.template_build_egress {
                c.egress = if list.trim() == "none" {
                    Vec::new()
                } else {
                    list.split(',')
                        .map(|h| h.trim().to_string())
                        .filter(|h| !h.is_empty())
                        .collect()
                };
            }
            c.limits.memory_mb = Some(args.template_build_memory_mb);
            c.limits.disk_mb = Some(args.template_build_disk_mb);
            c.limits.cpu_millicores = Some(args.template_build_cpu_millicores);
            c.step_timeout = args.template_build_step_timeout;
            c.build_timeout = args.template_build_timeout;
            c.import.max_entries = args.template_build_max_files;
            // The layer can be no larger than the build sandbox's disk.
            c.import.max_bytes = args.template_build_disk_mb * 1024 * 1024;
            c
        };
        let templates = lizard_server::templates::Templates::new(sandboxes.clone(), template_cfg);
        let state = Arc::new(AppState {
            templates,
            sandboxes: sandboxes.clone(),
            e2b,
            limiter: lizard_server::ratelimit::RateLimiter::new(
                args.rate_limit_rps,
                args.rate_limit_burst,
            ),
            sandbox_limiter: lizard_server::ratelimit::RateLimiter::new(
                args.sandbox_rate_limit_rps,
                args.sandbox_rate_limit_burst,
            ),
            audit_retention: lizard_server::audit::Retention {
                max_age: (!args.audit_retention.is_zero()).then_some(args.audit_retention),
                max_events: (args.audit_max_events > 0).then_some(args.audit_max_events),
            },
        });
        lizard_server::audit::prune(&sandboxes.store, state.audit_retention, true);
        lizard_server::audit::prune_executions(
            &sandboxes.store,
            sandboxes.cfg.executions_retention,
            true,
        );
        tokio::spawn(
            sandboxes
                .secret_uses
                .clone()
                .run(sandboxes.store.clone(), state.audit_retention),
        );
        tokio::spawn(lizard_server::audit::run_retention(
            sandboxes.store.clone(),
            state.audit_retention,
            sandboxes.cfg.executions_retention,
        ));
        let limits = HttpLimits {
            max_header_bytes: args.max_header_bytes as usize,
            max_headers: args.max_headers as usize,
            header_read_timeout: args.header_read_timeout.max(Duration::from_millis(100)),
            shutdown_grace: args.shutdown_grace,
            conns,
        };
        let addr = listener.local_addr()?;
        // MCP over Streamable HTTP at /mcp: its tools call this server's own API (on loopback)
        // with each request's key; a request without a valid key is refused before the session
        // (`mcp_auth`).
        let self_url = format!("http://127.0.0.1:{}", addr.port());
        let app = router(state.clone()).nest_service(
            "/mcp",
            axum::Router::new()
                .fallback_service(lizard_mcp::http_service(&self_url))
                .layer(axum::middleware::from_fn_with_state(state.clone(), mcp_auth))
                .with_state(state.clone()),
        );
        let mut e2b_debug = serde_json::Value::Null;
        if args.e2b_debug {
            let mut addrs = serde_json::Map::new();
            for (name, listen, port) in [
                (
                    "code_interpreter",
                    &args.e2b_debug_ci_listen,
                    lizard_proto::e2b::CODE_INTERPRETER_PORT,
                ),
                (
                    "envd",
                    &args.e2b_debug_envd_listen,
                    lizard_proto::e2b::ENVD_PORT,
                ),
            ] {
                let l = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding {listen} for E2B debug mode"))?;
                addrs.insert(name.into(), l.local_addr()?.to_string().into());
                let app = lizard_server::e2b::debug_router(state.clone(), port);
                tokio::spawn(serve_http(l, app, limits.clone(), std::future::pending()));
            }
            e2b_debug = addrs.into();
        }
        println!(
            "{}",
            serde_json::json!({"event": "listening", "addr": addr.to_string(),
                "data_dir": data_dir.display().to_string(), "e2b_debug": e2b_debug})
        );
        tracing::info!(%addr, data_dir = %data_dir.display(), "lizard serve listening");
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("installing the SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        // Sandboxes outlive the server on purpose: a restarted server adopts them.
        serve_http(listener, app, limits, shutdown).await;
        // A kill under way (its sandbox already gone from the API) is carried out before we go.
        if !sandboxes.finish_kills(Duration::from_secs(30)).await {
            tracing::warn!("kills still under way after 30 s; the next server's adoption ends them");
        }
        // Claimed sandboxes stay (a restarted server adopts them); unclaimed pooled ones go.
        sandboxes.drain_pool().await;
        // The host zygotes go (sandboxes keep the forks they adopted; the next server starts new
        // zygotes, and kills one a killed server left).
        sandboxes.stop_host_zygotes();
        // Volumes of sandboxes that outlive the server stay mounted (the next server adopts them).
        sandboxes.unmount_unused_volumes().await;
        // The agent's file copy (for CRIU restores): running sandboxes keep their binds of it, the
        // next server makes it again.
        if let Some(file) = agent_exe_file_at_exit
            .as_deref()
            .and_then(std::path::Path::parent)
        {
            lizard_jail::exe::remove_tmpfs_copy(file);
        }
        if let Some(x) = &agent_exes_at_exit {
            x.unmount_old();
        }
        if let Some(dir) = &criu_run_dir_at_exit {
            lizard_jail::checkpoint::unmount_run_dir(dir);
        }
        Ok(())
    })
}

/// `/mcp` needs a valid API key (`Authorization: Bearer`), like the API its tools call: `401`
/// otherwise, before any MCP session is made.
async fn mcp_auth(
    axum::extract::State(st): axum::extract::State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let key = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match key.map(|k| lizard_server::auth::principal(&st.sandboxes.store, k)) {
        Some(Ok(Some(_))) => next.run(req).await,
        _ => (
            axum::http::StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({
                "code": "unauthenticated",
                "message": "missing or unknown API key: send `Authorization: Bearer <key>`",
            })),
        )
            .into_response(),
    }
}

/// The binary the sandboxes' agents run: the dedicated `lizard-agent` next to `lizard_bin` when
/// it is built from the very same sources (`--build-fingerprint`, asked with a deadline), else
/// `lizard_bin` itself (`lizard agent`). The dedicated one is a quarter of the size: each agent
/// writes ≈ 0.5 MiB less of relocated data and starts faster (docs/PERFORMANCE.md).
fn agent_binary(lizard_bin: &std::path::Path, wait: std::time::Duration) -> std::path::PathBuf {
    let dedicated = lizard_bin.with_file_name("lizard-agent");
    if !dedicated.is_file() {
        return lizard_bin.to_path_buf();
    }
    match build_fingerprint_of(&dedicated, wait) {
        Ok(out) if out.trim() == lizard_agent::BUILD_FINGERPRINT => {
            tracing::info!(agent = %dedicated.display(), "the sandboxes' agents run the dedicated binary");
            dedicated
        }
        Ok(out) => {
            tracing::warn!(agent = %dedicated.display(), theirs = %out.trim(), ours = lizard_agent::BUILD_FINGERPRINT,
                "lizard-agent is from another build; the sandboxes' agents run `lizard agent`");
            lizard_bin.to_path_buf()
        }
        Err(e) => {
            tracing::warn!(agent = %dedicated.display(), error = %e,
                "lizard-agent did not say its build; the sandboxes' agents run `lizard agent`");
            lizard_bin.to_path_buf()
        }
    }
}

/// What `agent --build-fingerprint` prints (its first 256 bytes), within `wait` (then killed).
fn build_fingerprint_of(
    agent: &std::path::Path,
    wait: std::time::Duration,
) -> anyhow::Result<String> {
    use std::io::Read;
    let mut child = std::process::Command::new(agent)
        .arg("--build-fingerprint")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting it")?;
    let mut out = child.stdout.take().context("its stdout")?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut out).take(256).read_to_end(&mut buf);
        buf
    });
    let deadline = std::time::Instant::now() + wait;
    let status = loop {
        match child.try_wait()? {
            Some(status) => break status,
            None if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("no answer within {} ms", wait.as_millis());
            }
            None => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    };
    let said = reader.join().unwrap_or_default();
    anyhow::ensure!(status.success(), "it exited with {status}");
    Ok(String::from_utf8_lossy(&said).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{
        agent_binary, default_max_connections, parse_duration, parse_egress_host, parse_overcommit,
        ConnCaps,
    };

    /// The dedicated agent binary is used only when it says the server's own fingerprint in
    /// time; otherwise (missing, another build, silent, failing) the sandboxes run `lizard agent`.
    #[test]
    fn the_dedicated_agent_binary_is_used_only_when_it_is_this_build() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let lizard = dir.path().join("lizard");
        let agent = dir.path().join("lizard-agent");
        std::fs::write(&lizard, "").unwrap();
        let wait = std::time::Duration::from_millis(500);
        assert_eq!(agent_binary(&lizard, wait), lizard, "no lizard-agent");
        let script = |body: &str| {
            std::fs::write(&agent, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script(&format!("echo {}", lizard_agent::BUILD_FINGERPRINT));
        assert_eq!(agent_binary(&lizard, wait), agent, "this build's");
        script("echo 0123456789abcdef");
        assert_eq!(agent_binary(&lizard, wait), lizard, "another build's");
        script(&format!("echo {}; exit 3", lizard_agent::BUILD_FINGERPRINT));
        assert_eq!(agent_binary(&lizard, wait), lizard, "a failing one");
        script("exec sleep 30");
        let t = std::time::Instant::now();
        assert_eq!(agent_binary(&lizard, wait), lizard, "a silent one");
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn connections_are_capped_per_address_and_in_all() {
        let caps = ConnCaps::new(2, 3);
        let a: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        let b: std::net::IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = caps.admit(a).unwrap();
        let a2 = caps.admit(a).unwrap();
        assert!(caps.admit(a).is_none(), "per address");
        // The same address seen as IPv4-mapped IPv6 counts as the same client.
        assert!(caps.admit("::ffff:10.0.0.1".parse().unwrap()).is_none());
        let b1 = caps.admit(b).unwrap();
        assert!(caps.admit(b).is_none(), "in all");
        drop(a1);
        let b2 = caps.admit(b).unwrap();
        drop((a2, b1, b2));
        assert_eq!(caps.open.lock().unwrap().1, 0);
        assert!(caps.open.lock().unwrap().0.is_empty());
        let unlimited = ConnCaps::new(0, 5);
        let held: Vec<_> = (0..5).map(|_| unlimited.admit(a).unwrap()).collect();
        assert!(unlimited.admit(b).is_none());
        drop(held);
        assert_eq!(default_max_connections(1024), 341);
        assert_eq!(default_max_connections(1 << 20), 65_536);
        assert_eq!(default_max_connections(10), 64);
    }

    #[test]
    fn overcommit_is_a_positive_finite_ratio() {
        assert_eq!(parse_overcommit("1.0"), Ok(1.0));
        assert_eq!(parse_overcommit("2.5"), Ok(2.5));
        for bad in ["0", "-1", "NaN", "inf", "x", "1e9"] {
            assert!(parse_overcommit(bad).is_err(), "{bad}");
        }
    }
    use std::time::Duration;

    #[test]
    fn egress_hosts_parse() {
        assert_eq!(
            parse_egress_host("API.Internal.=10.1.2.3"),
            Ok((
                "api.internal".to_string(),
                std::net::Ipv4Addr::new(10, 1, 2, 3)
            ))
        );
        for bad in ["x", "a b=1.2.3.4", "a.com=1.2.3", "=1.2.3.4", "a.com=::1"] {
            assert!(parse_egress_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
