//! The proxy against real upstream HTTP servers on loopback, driven by a real HTTP client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Frame;
use hyper::ext::ReasonPhrase;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::*;

type Body = UnsyncBoxBody<Bytes, io::Error>;

const ARTIFACT_LEN: usize = 300_000;
const WHEEL: &str = "/packages/demo-1.0-py3-none-any.whl";
/// The length of `/packages/huge.whl`.
const HUGE: usize = 48 << 20;

fn artifact(seed: u8) -> Vec<u8> {
    (0..ARTIFACT_LEN).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|n: Infallible| match n {})
            .boxed_unsync(),
    );
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    r
}

/// A real HTTP server on 127.0.0.1:0 that counts the requests per path.
struct FakeUpstream {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FakeUpstream {
    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and every connection to it.
    fn shut_down(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// What the two upstreams serve: `a` is an index server (PyPI-like at `/`, npm-like at `/npm`,
/// Debian-like at `/debian`), `b` holds the files.
fn route(which: char, path: &str, headers: &HeaderMap, a: &str, b: &str) -> Response<Body> {
    match (which, path) {
        ('a', "/simple/demo/") => full(
            200,
            "text/html; charset=utf-8",
            format!(
                "<html><body>\n<a href=\"{b}{WHEEL}#sha256=00ff\">demo-1.0-py3-none-any.whl</a>\n\
                 <a href=\"../../packages/demo-1.0.tar.gz\">demo-1.0.tar.gz</a>\n</body></html>\n"
            ),
        ),
        ('a', "/packages/demo-1.0.tar.gz") => full(200, "application/x-tar", artifact(2)),
        ('a', "/npm/demo") => full(
            200,
            "application/json",
            format!(
                r#"{{"name":"demo","versions":{{"1.0.0":{{"dist":{{"tarball":"{a}/npm/demo/-/demo-1.0.0.tgz"}}}}}}}}"#
            ),
        ),
        ('a', "/npm/demo/-/demo-1.0.0.tgz") => full(200, "application/octet-stream", artifact(3)),
        ('a', "/debian/pool/main/h/hello/hello_1_amd64.deb") => {
            full(200, "application/vnd.debian.binary-package", artifact(4))
        }
        ('a', "/redirect-in") => {
            let mut r = full(302, "text/plain", "moved");
            r.headers_mut()
                .insert("location", format!("{b}{WHEEL}").parse().unwrap());
            r
        }
        ('a', "/redirect-relative") => {
            let mut r = full(301, "text/plain", "moved");
            r.headers_mut()
                .insert("location", "/simple/demo/".parse().unwrap());
            r
        }
        ('a', "/redirect-out") => {
            let mut r = full(302, "text/plain", "moved");
            r.headers_mut().insert(
                "location",
                "http://elsewhere.example/x.whl".parse().unwrap(),
            );
            r
        }
        ('a', "/big/") => full(200, "text/html", vec![b'x'; 4096]),
        ('a', "/echo") => {
            let mut lines: Vec<String> = headers
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap_or("?")))
                .collect();
            lines.sort();
            let mut r = full(200, "text/plain", lines.join("\n"));
            r.headers_mut()
                .insert("set-cookie", "session=upstream".parse().unwrap());
            r
        }
        ('b', WHEEL) => full(200, "application/octet-stream", artifact(1)),
        ('b', p) if p.starts_with("/packages/evict-") => {
            full(200, "application/octet-stream", artifact(5))
        }
        ('b', "/packages/partial.whl") => {
            // Announces 1000 bytes, sends 500, then the connection breaks.
            let first = stream::iter([Ok(Frame::data(Bytes::from(vec![7u8; 500])))]);
            // Pending once (hyper flushes the head and the first chunk then), then the error.
            let broken = stream::once(async {
                tokio::task::yield_now().await;
                Err(io::Error::other("upstream breaks off"))
            });
            let mut r = Response::new(StreamBody::new(first.chain(broken)).boxed_unsync());
            r.headers_mut()
                .insert("content-length", "1000".parse().unwrap());
            r
        }
        ('b', "/packages/nolen.tar.gz") => {
            // Chunked, no Content-Length: complete only at a clean end.
            let chunks: Vec<Result<Frame<Bytes>, io::Error>> = vec![
                Ok(Frame::data(Bytes::from(artifact(6)))),
                Ok(Frame::data(Bytes::from_static(b"tail"))),
            ];
            Response::new(StreamBody::new(stream::iter(chunks)).boxed_unsync())
        }
        ('b', "/packages/huge.whl") => {
            // HUGE bytes, more than the sockets between proxy and client hold.
            static MIB: [u8; 1 << 20] = [0x5a; 1 << 20];
            let chunks = (0..HUGE >> 20).map(|_| Ok(Frame::data(Bytes::from_static(&MIB))));
            let mut r = Response::new(StreamBody::new(stream::iter(chunks)).boxed_unsync());
            r.headers_mut()
                .insert("content-length", HUGE.to_string().parse().unwrap());
            r
        }
        ('b', "/packages/huge-nolen.tar.gz") => {
            // HUGE bytes, chunked: the proxy cannot know the size before the end.
            static MIB: [u8; 1 << 20] = [0x33; 1 << 20];
            let chunks = (0..HUGE >> 20).map(|_| Ok(Frame::data(Bytes::from_static(&MIB))));
            Response::new(StreamBody::new(stream::iter(chunks)).boxed_unsync())
        }
        ('a', "/packages/stall-body.whl") => {
            // One chunk, then silence with the connection open.
            let first = stream::iter([Ok(Frame::data(Bytes::from(vec![1u8; 100])))]);
            let mut r =
                Response::new(StreamBody::new(first.chain(stream::pending())).boxed_unsync());
            r.headers_mut()
                .insert("content-length", "1000".parse().unwrap());
            r
        }
        _ => full(404, "text/plain", "not found"),
    }
}

async fn start_upstream(which: char, listener: TcpListener, a: String, b: String) -> FakeUpstream {
    let addr = listener.local_addr().unwrap();
    let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counted = hits.clone();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (hits, a, b) = (counted.clone(), a.clone(), b.clone());
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let target = req.uri().path_and_query().unwrap().to_string();
                    *hits.lock().unwrap().entry(target).or_default() += 1;
                    let path = req.uri().path().to_owned();
                    let resp = route(which, &path, req.headers(), &a, &b);
                    async move {
                        if path == "/stall-head" {
                            // Accepts the request, never answers.
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    FakeUpstream {
        addr,
        hits,
        task: Some(task),
    }
}

struct World {
    proxy: PackageProxy,
    addr: SocketAddr,
    serve: Option<ServeHandle>,
    a: FakeUpstream,
    b: FakeUpstream,
    cache_dir: tempfile::TempDir,
}

fn sandbox() -> SandboxView {
    SandboxView {
        id: "sb-test".into(),
        project: "proj".into(),
        packages_allowed: true,
        has_egress: false,
    }
}

async fn world_with(tweak: impl FnOnce(&mut Config), view: SandboxView) -> World {
    let la = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lb = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a_base = format!("http://{}", la.local_addr().unwrap());
    let b_base = format!("http://{}", lb.local_addr().unwrap());
    let a = start_upstream('a', la, a_base.clone(), b_base.clone()).await;
    let b = start_upstream('b', lb, a_base.clone(), b_base.clone()).await;
    let cache_dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::new(cache_dir.path().join("cache"));
    cfg.registries = vec![
        format!("pypi={a_base}").parse().unwrap(),
        format!("files={b_base}").parse().unwrap(),
        format!("npm={a_base}/npm").parse().unwrap(),
        format!("debian={a_base}/debian").parse().unwrap(),
    ];
    cfg.upstream_timeout = Duration::from_secs(20);
    tweak(&mut cfg);
    let proxy = PackageProxy::new(cfg).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = Some(proxy.serve(listener, view));
    World {
        proxy,
        addr,
        serve,
        a,
        b,
        cache_dir,
    }
}

async fn world() -> World {
    world_with(|_| {}, sandbox()).await
}

#[derive(Debug)]
struct Got {
    status: StatusCode,
    reason: Option<String>,
    headers: HeaderMap,
    body: Result<Vec<u8>, String>,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8_lossy(self.body.as_ref().expect("a complete body")).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Assert that the answer is `status` with a body that says `want`.
    #[track_caller]
    fn assert_says(&self, status: u16, want: &str) {
        let text = self.text();
        assert_eq!(self.status, status, "{text}");
        assert!(text.contains(want), "no {want:?} in: {text}");
    }
}

/// One request on a new connection, with the request target exactly as given (origin-form,
/// absolute-form or authority-form).
async fn send_req(addr: SocketAddr, req: Request<Body>) -> Got {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = tx.send_request(req).await.unwrap();
    let reason = resp
        .extensions()
        .get::<ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .map_err(|e| e.to_string());
    Got {
        status: parts.status,
        reason,
        headers: parts.headers,
        body,
    }
}

fn request(method: Method, target: &str) -> Request<Body> {
    let host = target
        .split("://")
        .nth(1)
        .map_or("127.100.0.1:3142", |r| r.split('/').next().unwrap());
    Request::builder()
        .method(method)
        .uri(target)
        .header("host", host)
        .body(
            Empty::new()
                .map_err(|n: Infallible| match n {})
                .boxed_unsync(),
        )
        .unwrap()
}

async fn get(addr: SocketAddr, target: &str) -> Got {
    send_req(addr, request(Method::GET, target)).await
}

/// The request target for a mirror URL as the sandbox sees it (sent to the test's listener).
fn local(mirror_url: &str) -> String {
    let prefix = format!("http://{LISTEN_ADDR}");
    let path = mirror_url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{mirror_url} is not a mirror URL"));
    path.split('#').next().unwrap().to_owned()
}

fn href_values(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn index_pages_are_rewritten_to_the_mirror_and_their_links_resolve() {
    let w = world().await;
    let page = get(w.addr, "/pypi/simple/demo/").await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert_eq!(
        page.header("content-length"),
        Some(html.len().to_string().as_str())
    );
    let hrefs = href_values(&html);
    assert_eq!(
        hrefs,
        [
            format!("http://{LISTEN_ADDR}/files{WHEEL}#sha256=00ff"),
            "../../packages/demo-1.0.tar.gz".to_owned()
        ],
        "{html}"
    );
    assert!(!html.contains(&w.b.base()), "{html}");

    // The absolute link, through the mirror.
    let wheel = get(w.addr, &local(&hrefs[0])).await;
    assert_eq!(wheel.status, 200);
    assert_eq!(wheel.body.as_deref().unwrap(), artifact(1));
    assert_eq!(wheel.header("x-lizard-cache"), Some("miss"));
    // The relative one, resolved against the page's URL as pip does: /pypi/packages/….
    let sdist = get(w.addr, "/pypi/packages/demo-1.0.tar.gz").await;
    assert_eq!(sdist.status, 200);
    assert_eq!(sdist.body.as_deref().unwrap(), artifact(2));

    // npm metadata: the absolute tarball URL points back into the mirror.
    let meta = get(w.addr, "/npm/demo").await;
    assert_eq!(meta.status, 200);
    let json = meta.text();
    let tarball = format!("http://{LISTEN_ADDR}/npm/demo/-/demo-1.0.0.tgz");
    assert!(
        json.contains(&format!("\"tarball\":\"{tarball}\"")),
        "{json}"
    );
    let tgz = get(w.addr, &local(&tarball)).await;
    assert_eq!(tgz.body.as_deref().unwrap(), artifact(3));

    // Index pages are never cached.
    get(w.addr, "/pypi/simple/demo/").await;
    assert_eq!(w.a.hits("/simple/demo/"), 2);
    let stats = w.proxy.stats();
    assert_eq!(stats.per_registry["pypi"].cache_hits, 0);
    assert!(
        stats.total.served_bytes >= (3 * ARTIFACT_LEN) as u64,
        "{stats:?}"
    );
}

#[tokio::test]
async fn artifacts_are_served_from_the_cache_even_without_the_upstream() {
    let mut w = world().await;
    let first = get(w.addr, &format!("/files{WHEEL}")).await;
    assert_eq!(first.body.as_deref().unwrap(), artifact(1));
    let second = get(w.addr, &format!("/files{WHEEL}")).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("x-lizard-cache"), Some("hit"));
    assert_eq!(
        second.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(second.body.as_deref().unwrap(), artifact(1));
    assert_eq!(w.b.hits(WHEEL), 1);

    w.b.shut_down();
    let third = get(w.addr, &format!("/files{WHEEL}")).await;
    assert_eq!(third.status, 200);
    assert_eq!(third.body.as_deref().unwrap(), artifact(1));
    let head = send_req(w.addr, request(Method::HEAD, &format!("/files{WHEEL}"))).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(ARTIFACT_LEN.to_string().as_str())
    );
    assert_eq!(w.b.hits(WHEEL), 1);
    // Nothing else reaches a dead upstream: an uncached path is a 502 with the reason.
    let dead = get(w.addr, "/files/packages/other.whl").await;
    dead.assert_says(502, "could not be reached");

    let stats = w.proxy.stats();
    assert_eq!(stats.per_registry["files"].cache_hits, 3, "{stats:?}");
    assert_eq!(
        (stats.total.requests, stats.per_registry["files"].requests),
        (5, 5)
    );
    assert_eq!(stats.total.served_bytes, 3 * ARTIFACT_LEN as u64);
    let mine = w.serve.as_ref().unwrap().stats();
    assert_eq!(
        (mine.requests, mine.cache_hits, mine.cache_misses),
        (5, 3, 2)
    );
    assert_eq!(
        (mine.upstream_bytes, mine.served_bytes),
        (ARTIFACT_LEN as u64, 3 * ARTIFACT_LEN as u64)
    );
    assert_eq!(stats.cache_entries, 1);
    assert!(stats.cache_bytes > ARTIFACT_LEN as u64);
    assert_eq!(stats.total.upstream_bytes, ARTIFACT_LEN as u64);
}

#[tokio::test]
async fn concurrent_downloads_of_one_url_keep_one_complete_entry() {
    let w = world().await;
    let target = format!("/files{WHEEL}");
    let (x, y) = tokio::join!(get(w.addr, &target), get(w.addr, &target));
    assert_eq!(x.body.as_deref().unwrap(), artifact(1));
    assert_eq!(y.body.as_deref().unwrap(), artifact(1));
    assert_eq!(w.proxy.stats().cache_entries, 1);
    let z = get(w.addr, &target).await;
    assert_eq!(z.header("x-lizard-cache"), Some("hit"));
    assert_eq!(z.body.as_deref().unwrap(), artifact(1));
}

#[tokio::test]
async fn a_broken_upstream_body_is_not_cached_but_a_clean_chunked_one_is() {
    let w = world().await;
    let broken = get(w.addr, "/files/packages/partial.whl").await;
    assert!(
        broken.body.is_err(),
        "a body cut short must not look complete: {broken:?}"
    );
    let again = get(w.addr, "/files/packages/partial.whl").await;
    assert!(again.body.is_err());
    assert_eq!(
        w.b.hits("/packages/partial.whl"),
        2,
        "the partial body was not cached"
    );
    let leftovers: Vec<_> = std::fs::read_dir(w.cache_dir.path().join("cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let mut want = artifact(6);
    want.extend_from_slice(b"tail");
    for _ in 0..2 {
        let got = get(w.addr, "/files/packages/nolen.tar.gz").await;
        assert_eq!(got.body.as_deref().unwrap(), want);
    }
    assert_eq!(w.b.hits("/packages/nolen.tar.gz"), 1);
    // With a query, an artifact URL is passed through, never cached.
    for _ in 0..2 {
        let got = get(w.addr, "/files/packages/nolen.tar.gz?x=1").await;
        assert_eq!(got.body.as_deref().unwrap(), want);
    }
    assert_eq!(w.b.hits("/packages/nolen.tar.gz?x=1"), 2);
}

#[tokio::test]
async fn connect_and_other_destinations_are_refused_with_the_reason() {
    let w = world().await;
    let connect = send_req(w.addr, request(Method::CONNECT, "example.com:443")).await;
    assert_eq!(connect.status, 403);
    let reason = connect.reason.clone().expect("a reason phrase");
    assert!(reason.contains("no internet egress"), "{reason}");
    let body = connect.text();
    assert!(
        body.contains("sandbox sb-test has no internet egress"),
        "{body}"
    );
    assert!(body.contains("To reach example.com:443"), "{body}");
    assert!(
        body.contains(r#"{"network": {"egress": {"allow": ["example.com"]}}}"#),
        "{body}"
    );
    assert!(body.contains("pypi, files, npm, debian"), "{body}");

    let abs = get(w.addr, "http://example.com/x.whl").await;
    abs.assert_says(403, "To reach example.com:80");
    assert!(abs.reason.is_some());
    // https in absolute form, and an http URL on a registry's host but outside its path.
    let https = get(w.addr, "https://example.com/").await;
    assert_eq!(https.status, 403);
    let outside = get(
        w.addr,
        &format!(
            "{}/elsewhere/x.deb",
            w.a.base().replace("127.0.0.1", "localhost")
        ),
    )
    .await;
    assert_eq!(outside.status, 403);
    // CONNECT to a registry's host says where its mirror is.
    let to_registry = send_req(w.addr, request(Method::CONNECT, &format!("{}", w.b.addr))).await;
    to_registry.assert_says(403, &format!("is mirrored at http://{LISTEN_ADDR}/files/"));
    assert_eq!(w.proxy.stats().total.refused, 5);
    let handle = w.serve.as_ref().unwrap();
    assert_eq!(handle.stats().refused, 5);
    let log = handle.refusals();
    let seen: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.method.as_str(), r.destination.as_str()))
        .collect();
    assert_eq!(seen[0], ("CONNECT", "example.com:443"));
    assert_eq!(seen[1], ("GET", "example.com:80"));
    assert_eq!(seen.len(), 5);
}

#[tokio::test]
async fn the_refusal_log_is_bounded() {
    let w = world().await;
    let long = format!("{}.example:443", "a".repeat(300));
    for i in 0..70 {
        let dest = if i == 69 {
            long.clone()
        } else {
            format!("h{i}.example:443")
        };
        assert_eq!(
            send_req(w.addr, request(Method::CONNECT, &dest))
                .await
                .status,
            403
        );
    }
    let log = w.serve.as_ref().unwrap().refusals();
    assert_eq!(log.len(), 64);
    assert_eq!(log[0].destination, "h6.example:443");
    assert_eq!(log[63].destination.len(), 256);
}

#[tokio::test]
async fn with_its_own_egress_a_sandbox_is_told_to_connect_directly() {
    let view = SandboxView {
        has_egress: true,
        ..sandbox()
    };
    let w = world_with(|_| {}, view).await;
    let got = send_req(w.addr, request(Method::CONNECT, "example.com:443")).await;
    got.assert_says(403, "has its own internet egress");
    got.assert_says(403, "connect to it directly");
    // The mirror itself still works for it.
    assert_eq!(get(w.addr, "/pypi/simple/demo/").await.status, 200);
}

#[tokio::test]
async fn absolute_form_into_an_http_registry_is_mirrored_and_cached() {
    let w = world().await;
    let deb = format!("{}/debian/pool/main/h/hello/hello_1_amd64.deb", w.a.base());
    for want in ["miss", "hit"] {
        let got = get(w.addr, &deb).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("x-lizard-cache"), Some(want));
        assert_eq!(got.body.as_deref().unwrap(), artifact(4));
    }
    assert_eq!(w.a.hits("/debian/pool/main/h/hello/hello_1_amd64.deb"), 1);
    // The same file through its origin-form mirror path is the same cache entry.
    let origin = get(w.addr, "/debian/pool/main/h/hello/hello_1_amd64.deb").await;
    assert_eq!(origin.header("x-lizard-cache"), Some("hit"));
    // Absolute-form to the mirror itself is origin-form.
    let own = get(w.addr, &format!("http://{}/pypi/simple/demo/", w.addr)).await;
    assert_eq!(own.status, 200);
    let own = get(w.addr, &format!("http://{LISTEN_ADDR}/npm/demo")).await;
    assert_eq!(own.status, 200);
    assert_eq!(w.proxy.stats().per_registry["debian"].cache_hits, 2);
}

#[tokio::test]
async fn bad_paths_methods_and_bodies_are_refused() {
    let w = world().await;
    for path in [
        "/pypi/simple/../../etc/passwd",
        "/pypi/%2e%2e/x",
        "/npm/.%2E/x",
        "/npm/a%2f..%2fsecret",
        "/files/a/./b.whl",
        "/files/a%5c..%5cb",
    ] {
        let got = get(w.addr, path).await;
        assert_eq!(got.status, 400, "{path}");
        assert!(
            got.text().contains("path segments"),
            "{path}: {}",
            got.text()
        );
    }
    // An npm scoped package name has an encoded '/', and that is fine.
    assert_eq!(get(w.addr, "/npm/@types%2fnode").await.status, 404);
    assert_eq!(w.a.hits("/npm/@types%2fnode"), 1);

    let post = send_req(w.addr, request(Method::POST, "/npm/demo")).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    let put = send_req(w.addr, request(Method::PUT, "/npm/demo")).await;
    assert_eq!(put.status, 405);

    let mut with_body = Request::builder()
        .uri("/npm/demo")
        .header("host", "127.100.0.1:3142")
        .body(
            Full::new(Bytes::from_static(b"hello"))
                .map_err(|n: Infallible| match n {})
                .boxed_unsync(),
        )
        .unwrap();
    *with_body.method_mut() = Method::GET;
    let got = send_req(w.addr, with_body).await;
    got.assert_says(400, "cannot have a body");

    let unknown = get(w.addr, "/nope/x").await;
    unknown.assert_says(404, "no package registry is named \"nope\"");
    let listing = get(w.addr, "/").await;
    listing.assert_says(200, &format!("http://{LISTEN_ADDR}/npm/"));
    assert_eq!(w.a.hits("/npm/demo"), 0);
}

#[tokio::test]
async fn redirects_inside_are_rewritten_and_outside_are_a_502() {
    let w = world().await;
    let inside = get(w.addr, "/pypi/redirect-in").await;
    assert_eq!(inside.status, 302);
    assert_eq!(
        inside.header("location"),
        Some(format!("http://{LISTEN_ADDR}/files{WHEEL}").as_str())
    );
    let relative = get(w.addr, "/pypi/redirect-relative").await;
    assert_eq!(relative.status, 301);
    assert_eq!(
        relative.header("location"),
        Some(format!("http://{LISTEN_ADDR}/pypi/simple/demo/").as_str())
    );
    let outside = get(w.addr, "/pypi/redirect-out").await;
    outside.assert_says(502, "http://elsewhere.example/x.whl");
    assert_eq!(
        outside.reason.as_deref(),
        Some("Lizard: redirect outside the package registries")
    );
    assert_eq!(w.b.hits(WHEEL), 0, "the proxy follows no redirect");
}

#[tokio::test]
async fn an_index_page_over_the_limit_is_a_502() {
    let w = world_with(|c| c.max_index_bytes = 1024, sandbox()).await;
    let got = get(w.addr, "/pypi/big/").await;
    got.assert_says(502, "larger than the mirror's limit of 1024 bytes");
    // A page under the limit is fine.
    assert_eq!(get(w.addr, "/pypi/simple/demo/").await.status, 200);
}

#[tokio::test]
async fn only_safe_headers_go_upstream_and_come_back() {
    let w = world().await;
    let mut req = request(Method::GET, "/pypi/echo");
    let h = req.headers_mut();
    for (k, v) in [
        ("user-agent", "pip/25"),
        ("npm-command", "install"),
        ("accept", "text/html"),
        ("cookie", "secret=1"),
        ("authorization", "Bearer secret"),
        ("proxy-authorization", "Basic secret"),
        ("accept-encoding", "gzip"),
        ("x-forwarded-for", "10.0.0.1"),
    ] {
        h.insert(k, v.parse().unwrap());
    }
    let got = send_req(w.addr, req).await;
    let seen = got.text();
    let lines: Vec<&str> = seen.lines().collect();
    assert!(lines.contains(&"user-agent: pip/25"), "{seen}");
    assert!(lines.contains(&"npm-command: install"), "{seen}");
    assert!(lines.contains(&"accept: text/html"), "{seen}");
    assert!(lines.contains(&"accept-encoding: identity"), "{seen}");
    assert!(
        lines.contains(&format!("host: {}", w.a.addr).as_str()),
        "{seen}"
    );
    assert!(
        !seen.contains("secret") && !seen.contains("10.0.0.1"),
        "{seen}"
    );
    assert!(got.header("set-cookie").is_none());
}

#[tokio::test]
async fn a_sandbox_gets_its_connection_budget_and_no_more() {
    let w = world_with(|c| c.connections_per_sandbox = 3, sandbox()).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let stream = TcpStream::connect(w.addr).await.unwrap();
        let (mut tx, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        // A served request proves the connection holds one of the budget's slots.
        let resp = tx.send_request(request(Method::GET, "/")).await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
        open.push((tx, task));
    }
    let mut extra = TcpStream::connect(w.addr).await.unwrap();
    let _ = extra.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(30), extra.read(&mut buf))
        .await
        .expect("the connection over the budget is closed at once")
        .unwrap_or(0);
    assert_eq!(n, 0, "got {:?}", String::from_utf8_lossy(&buf[..n]));
    assert!(w.proxy.stats().total.rejected_connections >= 1);

    // Closing one frees its slot (the server notices the close a moment later: poll).
    let (tx, task) = open.pop().unwrap();
    drop(tx);
    task.await.unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stream = TcpStream::connect(w.addr).await.unwrap();
        if let Ok((mut tx, conn)) =
            hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await
        {
            tokio::spawn(conn);
            if let Ok(resp) = tx.send_request(request(Method::GET, "/")).await {
                assert_eq!(resp.status(), 200);
                break;
            }
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_cache_evicts_the_oldest_beyond_its_bound() {
    // Room for two artifacts (plus their small headers), not three.
    let w = world_with(
        |c| c.cache_max_bytes = 2 * ARTIFACT_LEN as u64 + 1000,
        sandbox(),
    )
    .await;
    for i in 1..=3 {
        let got = get(w.addr, &format!("/files/packages/evict-{i}.whl")).await;
        assert_eq!(got.body.as_deref().unwrap(), artifact(5));
    }
    let stats = w.proxy.stats();
    assert_eq!(stats.cache_entries, 2, "{stats:?}");
    assert!(stats.cache_bytes <= 2 * ARTIFACT_LEN as u64 + 1000);
    assert_eq!(
        get(w.addr, "/files/packages/evict-3.whl")
            .await
            .header("x-lizard-cache"),
        Some("hit")
    );
    assert_eq!(
        get(w.addr, "/files/packages/evict-1.whl")
            .await
            .header("x-lizard-cache"),
        Some("miss")
    );
    assert_eq!(w.b.hits("/packages/evict-1.whl"), 2);
    assert_eq!(w.b.hits("/packages/evict-3.whl"), 1);
}

#[tokio::test]
async fn an_artifact_over_the_size_bound_is_served_but_not_kept() {
    let w = world_with(|c| c.max_artifact_bytes = 1000, sandbox()).await;
    for _ in 0..2 {
        let got = get(w.addr, &format!("/files{WHEEL}")).await;
        assert_eq!(got.body.as_deref().unwrap(), artifact(1));
    }
    assert_eq!(w.b.hits(WHEEL), 2);
    assert_eq!(w.proxy.stats().cache_entries, 0);
}

#[tokio::test]
async fn registries_turned_off_refuse_everything() {
    let view = SandboxView {
        packages_allowed: false,
        ..sandbox()
    };
    let w = world_with(|_| {}, view).await;
    for req in [
        request(Method::GET, "/pypi/simple/demo/"),
        request(Method::CONNECT, "example.com:443"),
    ] {
        let got = send_req(w.addr, req).await;
        got.assert_says(403, "package registries are turned off for project proj");
    }
    assert_eq!(w.a.hits("/simple/demo/"), 0);
}

#[tokio::test]
async fn dropping_the_serve_handle_closes_the_listener() {
    let mut w = world().await;
    assert_eq!(get(w.addr, "/").await.status, 200);
    w.serve.take();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(w.addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the listener outlived its handle"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_sandbox_environment_points_the_tools_at_the_mirror() {
    let env: HashMap<String, String> = sandbox_env(false).into_iter().collect();
    assert_eq!(env["PIP_INDEX_URL"], "http://127.100.0.1:3142/pypi/simple/");
    assert_eq!(env["PIP_TRUSTED_HOST"], "127.100.0.1:3142");
    assert_eq!(env["UV_INDEX_URL"], env["PIP_INDEX_URL"]);
    assert_eq!(env["UV_DEFAULT_INDEX"], env["PIP_INDEX_URL"]);
    assert_eq!(env["npm_config_registry"], "http://127.100.0.1:3142/npm/");
    assert_eq!(env["npm_config_audit"], "false");
    assert!(!env.contains_key("HTTP_PROXY"));
    let none: HashMap<String, String> = sandbox_env(true).into_iter().collect();
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        assert_eq!(none[k], "http://127.100.0.1:3142");
    }
    assert_eq!(
        none["NO_PROXY"],
        "localhost,127.0.0.1,127.100.0.1,::1,0.0.0.0,127.0.0.0/8"
    );
    assert_eq!(none["no_proxy"], none["NO_PROXY"]);
    // The defaults parse, and the pypi mirror path above is PyPI's simple index.
    let defaults = default_registries();
    assert_eq!(
        defaults.iter().find(|r| r.name == "pypi").unwrap().url,
        "https://pypi.org"
    );
    assert_eq!(defaults.len(), 5);
}

#[tokio::test]
async fn a_bad_configuration_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::new(dir.path().join("c"));
    cfg.registries.push(Registry {
        name: "pypi".into(),
        url: "https://other.example".into(),
    });
    assert!(matches!(
        PackageProxy::new(cfg),
        Err(PackagesError::Registry(RegistryError::Duplicate(_)))
    ));
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let cfg = Config::new(file.join("sub"));
    assert!(matches!(
        PackageProxy::new(cfg),
        Err(PackagesError::CacheDir { .. })
    ));
    let mut cfg = Config::new(dir.path().join("c"));
    cfg.connections_per_sandbox = 0;
    assert!(matches!(
        PackageProxy::new(cfg),
        Err(PackagesError::NoConnections)
    ));
}

#[tokio::test]
async fn a_stalled_upstream_ends_in_an_error_not_a_hang() {
    let w = world_with(
        |c| c.upstream_timeout = Duration::from_millis(500),
        sandbox(),
    )
    .await;
    let client_deadline = Duration::from_secs(60);
    let head = tokio::time::timeout(client_deadline, get(w.addr, "/pypi/stall-head"))
        .await
        .unwrap();
    head.assert_says(504, "did not answer within 0.5 s");
    let body = tokio::time::timeout(
        client_deadline,
        get(w.addr, "/pypi/packages/stall-body.whl"),
    )
    .await
    .unwrap();
    assert_eq!(body.status, 200);
    assert!(body.body.is_err(), "{body:?}");
    assert_eq!(w.proxy.stats().cache_entries, 0);
}

/// A new connection to `addr` on which `head` (a request's bytes, maybe not all of them) was sent.
async fn sent(addr: SocketAddr, head: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(head).await.unwrap();
    c
}

/// Whether what `c` reads ends (it is closed, or fails) within `limit`.
async fn closed_within(c: &mut TcpStream, limit: Duration) -> bool {
    tokio::time::timeout(limit, read_to_close(c)).await.is_ok()
}

/// Read `c` until it is closed (or fails).
async fn read_to_close(c: &mut TcpStream) {
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = c.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

/// Read a request's head (up to its blank line) from `c`: false if the connection ended first.
async fn read_head(c: &mut TcpStream) -> bool {
    let mut buf = vec![0u8; 8192];
    let mut head = Vec::new();
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// A request sent as raw bytes on a new connection (so that what a real client library would
/// refuse to send can be sent); the status code (0: no answer) and the whole answer.
async fn raw(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "no answer to {head:?}");
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

#[tokio::test]
async fn no_request_target_makes_the_proxy_fetch_from_elsewhere() {
    let w = world().await;
    let deb = "/debian/pool/main/h/hello/hello_1_amd64.deb";
    let a = w.a.addr;
    let port = a.port();
    // Absolute-form authorities that name registry a's host and port in some other spelling, or
    // hide another host behind user info: never registry a, never anything else.
    for authority in [
        format!("127.0.0.1:{port}@example.com"),
        format!("example.com@127.0.0.1:{port}"),
        format!("127.100.0.1:3142@127.0.0.1:{port}"),
        format!("127.0.0.1.:{port}"),
        format!("127.0.0.1:0{port}"),
        format!("127.0.0.1%3a{port}"),
        format!("127.0.0.1%2e:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("0x7f.0.0.1:{port}"),
        format!("2130706433:{port}"),
        format!("127.1:{port}"),
    ] {
        let head = format!(
            "GET http://{authority}{deb} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        );
        let (code, text) = raw(w.addr, &head).await;
        assert!(matches!(code, 400 | 403), "{authority}: {text}");
    }
    // CR/LF and other bytes that could split the upstream request are refused by the parser,
    // encoded ones go upstream as the path they are.
    for target in ["/npm/demo\rHost: evil.example", "/npm/de\0mo"] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let (code, text) = raw(w.addr, &head).await;
        assert!(
            code == 400 || code == 0 || code == 404,
            "{target:?}: {text}"
        );
    }
    let (code, _) = raw(
        w.addr,
        "GET /npm/demo%0d%0aHost:%20evil HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(w.a.hits("/npm/demo%0d%0aHost:%20evil"), 1);
    // A header value cannot carry a second header either.
    let (code, _) = raw(
        w.addr,
        "GET /pypi/echo HTTP/1.1\r\nHost: x\r\nnpm-session: a\rCookie: b\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 400);
    // The Host header never picks the upstream: origin-form goes to the registry it names.
    let (code, text) = raw(
        w.addr,
        &format!(
            "GET /pypi/echo HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            w.b.addr
        ),
    )
    .await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains(&format!("host: {a}")), "{text}");
    assert_eq!(w.a.hits(deb), 0);
    assert_eq!(w.b.hits(deb), 0);
    assert_eq!(get(w.addr, deb).await.status, 200);
    assert_eq!(w.a.hits(deb), 1);
}

/// An upstream that sends `first` bytes of a `len`-byte JSON index at once, and the rest only
/// once `gate` is true.
async fn gated_index(len: usize, first: usize, gate: tokio::sync::watch::Receiver<bool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let gate = gate.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let mut gate = gate.clone();
                    async move {
                        let head =
                            stream::iter([Ok::<_, io::Error>(Frame::data(Bytes::from(vec![
                                b' ';
                                first
                            ])))]);
                        let rest = stream::once(async move {
                            let _ = gate.wait_for(|open| *open).await;
                            Ok(Frame::data(Bytes::from(vec![b' '; len - first])))
                        });
                        let mut r = Response::new(StreamBody::new(head.chain(rest)).boxed_unsync());
                        r.headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        r.headers_mut()
                            .insert("content-length", len.to_string().parse().unwrap());
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    base
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn index_pages_in_memory_are_bounded_per_sandbox_and_in_all() {
    const MIB: usize = 1 << 20;
    let (open, gate) = tokio::sync::watch::channel(false);
    let slow = gated_index(2 * MIB, 3 * MIB / 2, gate).await;
    let w = world_with(
        |c| {
            c.registries.push(format!("slow={slow}").parse().unwrap());
            c.max_index_bytes = 4 * MIB;
            c.index_memory_per_sandbox = 2 * MIB;
            c.index_memory_total = 4 * MIB;
            c.upstream_timeout = Duration::from_secs(300);
        },
        sandbox(),
    )
    .await;
    let second = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let third = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (addr2, addr3) = (second.local_addr().unwrap(), third.local_addr().unwrap());
    let other = |id: &str| SandboxView {
        id: id.into(),
        ..sandbox()
    };
    let _s2 = w.proxy.serve(second, other("sb-two"));
    let _s3 = w.proxy.serve(third, other("sb-three"));
    let held = |w: &World| w.proxy.stats().index_memory_bytes as usize;

    // Sandbox one holds 1.5 MiB of a page; a second page of its own would pass its 2 MiB.
    let addr1 = w.addr;
    let first = tokio::spawn(async move { get(addr1, "/slow/a").await });
    until("the first page in memory", || held(&w) >= 3 * MIB / 2).await;
    let over_own = get(w.addr, "/slow/b").await;
    assert_eq!(over_own.status, 503, "{}", over_own.text());
    assert_eq!(over_own.header("retry-after"), Some("1"));
    // Another sandbox has its own bound: its page fits (3 MiB in all now)...
    let fits = tokio::spawn(async move { get(addr2, "/slow/c").await });
    until("the second page in memory", || held(&w) >= 3 * MIB).await;
    // ...and a third's would pass the 4 MiB of all sandboxes together (the two whole pages fit).
    let over_all = get(addr3, "/slow/d").await;
    assert_eq!(over_all.status, 503, "{}", over_all.text());
    assert_eq!(w.proxy.stats().index_memory_refusals, 2);
    open.send(true).unwrap();
    for page in [first, fits] {
        let got = page.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.body.unwrap().len(), 2 * MIB);
    }
    until("the pages' memory given back", || held(&w) == 0).await;
    assert_eq!(get(addr3, "/slow/e").await.status, 200);
    assert_eq!(held(&w), 0);
}

#[tokio::test]
async fn a_client_that_stops_reading_loses_its_connection_and_its_cache_writer() {
    let w = world_with(
        |c| c.client_stall_timeout = Duration::from_millis(500),
        sandbox(),
    )
    .await;
    let mut stuck = sent(
        w.addr,
        b"GET /files/packages/huge.whl HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    // It reads nothing; once the proxy gives up on it, the URL can be cached by another client.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = get(w.addr, "/files/packages/huge.whl").await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body.as_ref().map(Vec::len), Ok(HUGE));
        if got.header("x-lizard-cache") == Some("hit") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a client that reads nothing still holds the cache writer"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And its connection was closed (what it reads now ends).
    assert!(
        closed_within(&mut stuck, Duration::from_secs(60)).await,
        "the stalled connection is still open"
    );
}

#[tokio::test]
async fn dropping_the_serve_handle_mid_download_stops_it_and_leaves_no_file() {
    let mut w = world().await;
    let mut client = sent(
        w.addr,
        b"GET /files/packages/huge.whl HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    let mut buf = vec![0u8; 64 * 1024];
    let n = client.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let cache = w.cache_dir.path().join("cache");
    let files = |prefix: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(prefix)
            })
            .count()
    };
    until("the download's temporary file", || files("tmp-") == 1).await;
    // The sandbox is killed: its listener's tasks go, and the download with them.
    w.serve.take();
    until("the temporary file removed", || files("tmp-") == 0).await;
    assert!(
        closed_within(&mut client, Duration::from_secs(60)).await,
        "the connection outlived the serve handle"
    );
    assert_eq!(w.proxy.stats().cache_entries, 0);
}

#[tokio::test]
async fn a_slow_or_idle_client_is_closed_at_the_header_deadline() {
    let w = world().await;
    let started = Instant::now();
    let mut slow = sent(w.addr, b"GET /pypi/simple/demo/ HTTP/1.1\r\nHost: x\r\n").await;
    let mut idle = TcpStream::connect(w.addr).await.unwrap();
    for (name, conn) in [("slow", &mut slow), ("idle", &mut idle)] {
        assert!(
            closed_within(conn, Duration::from_secs(120)).await,
            "the {name} connection is still open"
        );
    }
    assert!(started.elapsed() >= HEADER_READ_TIMEOUT);
}

#[tokio::test]
async fn a_body_ended_only_by_the_connection_closing_is_served_but_not_cached() {
    // An upstream that ends its body by closing the connection (no Content-Length, not chunked):
    // a connection cut short looks the same, so such a body is not known to be complete.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut c, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                if !read_head(&mut c).await {
                    return;
                }
                let _ = c
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\nthe first half of a wheel")
                    .await;
            });
        }
    });
    let w = world_with(
        |c| c.registries.push(format!("raw={base}").parse().unwrap()),
        sandbox(),
    )
    .await;
    for _ in 0..2 {
        let got = get(w.addr, "/raw/packages/cut-1.0-py3-none-any.whl").await;
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), "the first half of a wheel");
        assert_ne!(got.header("x-lizard-cache"), Some("hit"));
    }
    assert_eq!(w.proxy.stats().cache_entries, 0);
}

#[tokio::test]
async fn downloads_in_flight_count_against_the_cache_bound() {
    const MIB: usize = 1 << 20;
    let w = world_with(|c| c.cache_max_bytes = 4 * MIB as u64, sandbox()).await;
    let mut client = sent(
        w.addr,
        b"GET /files/packages/huge-nolen.tar.gz HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    // The client takes 16 MiB, then keeps the rest waiting (well within its stall deadline).
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0;
    while got < 16 * MIB {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got += n;
    }
    let cache = w.cache_dir.path().join("cache");
    let on_disk: u64 = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        on_disk <= 4 * MIB as u64,
        "{on_disk} bytes in the cache directory, bound 4 MiB"
    );
    // Smaller downloads are cached as before.
    for want in ["miss", "hit"] {
        let got = get(
            w.addr,
            WHEEL.replace("/packages", "/files/packages").as_str(),
        )
        .await;
        assert_eq!(got.header("x-lizard-cache"), Some(want));
    }
}

#[tokio::test]
async fn only_a_complete_get_of_the_exact_url_makes_a_cache_entry() {
    let w = world().await;
    let wheel = format!("/files{WHEEL}");
    // HEAD fetches no body: it leaves no entry, and the GET after it gets the whole file.
    let head = send_req(w.addr, request(Method::HEAD, &wheel)).await;
    assert_eq!(head.status, 200);
    assert_eq!(w.proxy.stats().cache_entries, 0);
    // Another spelling of the path is another upstream URL: upstream's answer for it (a 404
    // here) is never stored, nor served for the real one.
    let upper = get(w.addr, &wheel.replace("demo", "DEMO")).await;
    assert_eq!(upper.status, 404);
    let encoded = get(w.addr, &wheel.replace("demo-1.0", "%64emo-1.0")).await;
    assert_eq!(encoded.status, 404);
    assert_eq!(w.proxy.stats().cache_entries, 0);
    for want in ["miss", "hit"] {
        let got = get(w.addr, &wheel).await;
        assert_eq!(got.header("x-lizard-cache"), Some(want));
        assert_eq!(got.body.as_deref().unwrap(), artifact(1));
    }
    // A HEAD of the cached file answers from the entry, with its length and no body.
    let head = send_req(w.addr, request(Method::HEAD, &wheel)).await;
    assert_eq!(head.header("x-lizard-cache"), Some("hit"));
    assert_eq!(head.header("content-length"), Some("300000"));
    assert_eq!(head.body.as_deref().unwrap(), b"");
    assert_eq!(w.b.hits(WHEEL), 2);
}

#[tokio::test]
async fn dropping_the_serve_handle_while_upstream_has_not_answered_closes_the_upstream_connection()
{
    // An upstream that reads the request and never answers; it reports when the proxy's
    // connection to it ends.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (asked_tx, asked) = tokio::sync::oneshot::channel::<()>();
    let (closed_tx, closed) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut c, _) = listener.accept().await.unwrap();
        if !read_head(&mut c).await {
            return;
        }
        let _ = asked_tx.send(());
        read_to_close(&mut c).await;
        let _ = closed_tx.send(());
    });
    let mut w = world_with(
        |c| {
            c.registries.push(format!("hang={base}").parse().unwrap());
            c.upstream_timeout = Duration::from_secs(600);
        },
        sandbox(),
    )
    .await;
    let addr = w.addr;
    let client = tokio::spawn(async move { get(addr, "/hang/packages/x.whl").await });
    tokio::time::timeout(Duration::from_secs(60), asked)
        .await
        .expect("the request reached the upstream")
        .unwrap();
    w.serve.take();
    tokio::time::timeout(Duration::from_secs(60), closed)
        .await
        .expect("the upstream connection outlived the serve handle")
        .unwrap();
    client.abort();
}
