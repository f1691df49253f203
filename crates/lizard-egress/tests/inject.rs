//! Secret injection end to end on loopback: a sandbox-side client that trusts only the sandbox's
//! CA talks through [`relay::handle`] (as the relay listener would call it) to a local upstream
//! that records the `Authorization` it receives. The rules allow the name and open 127.0.0.1 by
//! an address rule, and a static resolver maps the name there, so the relay's own decision
//! (resolve the name, connect to its address) is the one under test — no network namespace.

mod tls;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lizard_egress::dns::StaticResolver;
use lizard_egress::relay::{self, Outcome};
use lizard_egress::{
    InjectHeader, InjectRule, InjectUse, Injection, Limits, Rules, SandboxCa, SandboxPolicy,
    SecretValue,
};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tls::{client_hello, pki, trusting};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const NAME: &str = "api.example.test";

/// What the upstream saw: `(path, Authorization)` per request.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// An HTTP/1.1 upstream on loopback (TLS if `tls`), answering `upstream saw <path>`.
async fn upstream(tls: Option<Arc<rustls::ServerConfig>>) -> (SocketAddrV4, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = match l.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (c, _) = l.accept().await.unwrap();
            let (seen, tls) = (s2.clone(), tls.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_string())
                            .unwrap_or_default();
                        let path = req.uri().path().to_string();
                        // Read the body through (the proxy streams it).
                        let body = req.into_body().collect().await?.to_bytes();
                        seen.lock().unwrap().push((path.clone(), auth));
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(format!(
                            "upstream saw {path} ({} bytes)",
                            body.len()
                        )))))
                    }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(cfg) => {
                        if let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(c).await {
                            let _ = http.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(c), svc).await;
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn rule(secret: &str, port: Option<u16>) -> InjectRule {
    InjectRule {
        host: NAME.into(),
        port,
        headers: vec![InjectHeader {
            name: "Authorization".into(),
            value: SecretValue::new(format!("Bearer {secret}")),
            secrets: vec!["example".into()],
        }],
    }
}

struct Setup {
    front: SocketAddrV4,
    policy: Arc<SandboxPolicy>,
    ca: Arc<SandboxCa>,
    uses: Arc<Mutex<Vec<InjectUse>>>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    upstream_tls: Arc<rustls::ClientConfig>,
}

impl Setup {
    fn injection(&self, rules: Vec<InjectRule>) -> Arc<Injection> {
        let uses = self.uses.clone();
        Arc::new(Injection {
            rules,
            ca: self.ca.clone(),
            upstream_tls: self.upstream_tls.clone(),
            on_use: Arc::new(move |u| uses.lock().unwrap().push(u)),
        })
    }
}

/// The relay in front of `up` (its port is the destination port the sandbox "connected to").
async fn setup(
    up: SocketAddrV4,
    upstream_ca: rustls::pki_types::CertificateDer<'static>,
    lim: Limits,
) -> Setup {
    let policy = Arc::new(SandboxPolicy::new(
        Rules::parse([NAME, "127.0.0.1"], [] as [&str; 0]).unwrap(),
        lim,
        vec![],
    ));
    let mut names = HashMap::new();
    names.insert(NAME.to_string(), vec![Ipv4Addr::LOCALHOST]);
    let resolver = Arc::new(StaticResolver(names));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = match l.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let (tx, outcomes) = mpsc::unbounded_channel();
    let p = policy.clone();
    tokio::spawn(async move {
        loop {
            let (c, _) = l.accept().await.unwrap();
            let (p, r, tx) = (p.clone(), resolver.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(relay::handle(c, up, &p, &*r).await);
            });
        }
    });
    let s = Setup {
        front,
        policy,
        ca: Arc::new(SandboxCa::generate("sb-test").unwrap()),
        uses: Arc::default(),
        outcomes,
        upstream_tls: trusting(upstream_ca),
    };
    s.policy
        .set_injection(Some(s.injection(vec![rule("s3cret", None)])));
    s
}

/// The sandbox's client: trusts only the sandbox's CA, offers h2 and HTTP/1.1 as curl does.
fn sandbox_client(ca: &SandboxCa) -> tokio_rustls::TlsConnector {
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(ca.cert_pem().as_bytes()).unwrap();
    let mut cfg = (*trusting(der)).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn http_over<S>(io: S) -> Sender
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

async fn get(send: &mut Sender, host: &str, path: &str) -> (u16, String) {
    send.ready().await.unwrap();
    let req = Request::get(path)
        .header("host", host)
        .header("authorization", "Bearer fake")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), send.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn https_requests_get_the_secret_and_only_for_the_name() {
    let pki = pki(&[NAME]);
    let (up, seen) = upstream(Some(pki.server.clone())).await;
    let lim = Limits {
        // The upstream is on loopback here.
        open_never_reached: true,
        ..Limits::default()
    };
    let mut s = setup(up, pki.ca.clone(), lim).await;

    let tcp = TcpStream::connect(s.front).await.unwrap();
    let sni = rustls::pki_types::ServerName::try_from(NAME).unwrap();
    // The leaf the proxy presents verifies against the sandbox's CA (and nothing else is trusted).
    let tls = sandbox_client(&s.ca).connect(sni, tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut send = http_over(tls).await;
    // Two requests on one connection: both get the injected value, not the sandbox's.
    assert_eq!(
        get(&mut send, NAME, "/one").await,
        (200, "upstream saw /one (0 bytes)".into())
    );
    assert_eq!(
        get(&mut send, "API.example.test:443", "/two?q=1").await.0,
        200
    );
    // Changed live: the next request on the same connection has the new value.
    s.policy
        .set_injection(Some(s.injection(vec![rule("rotated", None)])));
    assert_eq!(get(&mut send, NAME, "/three").await.0, 200);
    // Another Host on the same connection: not forwarded.
    let (status, body) = get(&mut send, "other.test", "/four").await;
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("other.test"), "{body}");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("/one".to_string(), "Bearer s3cret".to_string()),
            ("/two".to_string(), "Bearer s3cret".to_string()),
            ("/three".to_string(), "Bearer rotated".to_string()),
        ]
    );
    let uses = s.uses.lock().unwrap().clone();
    assert_eq!(uses.len(), 3, "{uses:?}");
    assert_eq!(
        uses[1],
        InjectUse {
            host: NAME.into(),
            method: "GET".into(),
            path: "/two".into(),
            secrets: vec!["example".into()],
        }
    );
    drop(send);
    assert!(matches!(
        tokio::time::timeout(Duration::from_secs(20), s.outcomes.recv()).await.unwrap().unwrap(),
        Outcome::Injected { requests: 3, ref name, .. } if name == NAME
    ));
    let t = s.policy.traffic();
    assert!(t.bytes_out > 500 && t.bytes_in > 500, "{t:?}");
    assert_eq!(t.connections, 1, "{t:?}");
    assert_eq!(s.policy.refusals().len(), 1);

    // A port the rule does not name: relayed as bytes, so the sandbox sees the upstream's own
    // certificate, which it does not trust.
    s.policy
        .set_injection(Some(s.injection(vec![rule("s3cret", Some(1))])));
    let tcp = TcpStream::connect(s.front).await.unwrap();
    let sni = rustls::pki_types::ServerName::try_from(NAME).unwrap();
    let e = sandbox_client(&s.ca).connect(sni, tcp).await.unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn plain_http_the_same_and_hostile_clients_end_within_the_limits() {
    let pki = pki(&[NAME]);
    let (up, seen) = upstream(None).await;
    let lim = Limits {
        peek_deadline: Duration::from_millis(500),
        idle: Duration::from_millis(800),
        // The upstream is on loopback here.
        open_never_reached: true,
        ..Limits::default()
    };
    let mut s = setup(up, pki.ca.clone(), lim).await;

    let mut send = http_over(TcpStream::connect(s.front).await.unwrap()).await;
    assert_eq!(get(&mut send, NAME, "/a").await.0, 200);
    assert_eq!(get(&mut send, NAME, "/b").await.0, 200);
    assert_eq!(get(&mut send, "other.test", "/c").await.0, 421);
    // TRACE would have the upstream echo the secret back: not forwarded.
    send.ready().await.unwrap();
    let trace = Request::builder()
        .method("TRACE")
        .uri("/t")
        .header("host", NAME)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send.send_request(trace).await.unwrap().status(), 405);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("/a".to_string(), "Bearer s3cret".to_string()),
            ("/b".to_string(), "Bearer s3cret".to_string()),
        ]
    );
    assert_eq!(s.uses.lock().unwrap().len(), 2);
    drop(send);
    s.outcomes.recv().await.unwrap();

    let request = format!("GET /x HTTP/1.1\r\nHost: {NAME}\r\n\r\n");
    // A huge header block after a first request: 431 from hyper, the connection closed.
    let started = Instant::now();
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(request.as_bytes()).await.unwrap();
    let huge = format!(
        "GET /y HTTP/1.1\r\nHost: {NAME}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let _ = c.write_all(huge.as_bytes()).await;
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    let all = String::from_utf8_lossy(&all);
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(all.contains("HTTP/1.1 431"), "{all}");
    s.outcomes.recv().await.unwrap();

    // A malformed request after a first one: 400 from hyper.
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(format!("{request}NOT HTTP AT ALL\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    let all = String::from_utf8_lossy(&all);
    assert!(all.contains("HTTP/1.1 400"), "{all}");
    s.outcomes.recv().await.unwrap();

    // A stalled body: closed after `idle`.
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(
        format!("POST /z HTTP/1.1\r\nHost: {NAME}\r\nContent-Length: 1000\r\n\r\nonly a little")
            .as_bytes(),
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    s.outcomes.recv().await.unwrap();

    // An idle keep-alive connection: closed after `idle` too.
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(request.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&all).starts_with("HTTP/1.1 200"));
    s.outcomes.recv().await.unwrap();

    // TLS: a ClientHello for the name, then garbage instead of the rest of the handshake; and a
    // ClientHello, then silence (closed at the peek deadline).
    let hello = client_hello(NAME);
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(&hello).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.write_all(b"\x16\x03\x03\x00\x05hello").await.unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    assert!(
        matches!(s.outcomes.recv().await.unwrap(), Outcome::Failed(w) if w.contains("TLS with the sandbox"))
    );
    let mut c = TcpStream::connect(s.front).await.unwrap();
    c.write_all(&hello).await.unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .unwrap();
    assert!(
        matches!(s.outcomes.recv().await.unwrap(), Outcome::Failed(w) if w.contains("timed out"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // Still usable.
    let mut send = http_over(TcpStream::connect(s.front).await.unwrap()).await;
    assert_eq!(get(&mut send, NAME, "/after").await.0, 200);
    assert_eq!(seen.lock().unwrap().last().unwrap().1, "Bearer s3cret");
}
