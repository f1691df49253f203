//! The mechanism for real, on this kernel, in network namespaces the tests make (needs root and
//! the host's `nft` and `ip`): the generic ruleset redirects a sandbox's connections to the host's
//! listeners with the original destination readable, and the whole relay — DNS answered by the
//! responder, TLS through the proxy to an upstream — holds against name tricks.
//!
//! Two namespaces per test, both made here (nothing of the host's network is touched):
//! - "sandbox": `lo` only, the default route and ruleset of [`lizard_egress::nft`], and the
//!   host's listeners made in it (relay at 127.100.0.1:3143, DNS at 127.100.0.1:53);
//! - "host": stands in for the host's network, where the relay's upstream connections are made;
//!   the upstream listens there on 203.0.113.10 (a documentation address, on its `lo`), which
//!   the rules count as public — so the test needs no address rule opening a private range, and
//!   the upstream is reached only by name, as on the internet.
//!
//! Sockets belong to the namespace of the thread that makes them: each is made in a short-lived
//! thread that entered the namespace (`setns`), the async runtime runs on a thread in "host".

mod tls;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use lizard_egress::dns::{self, StaticResolver};
use lizard_egress::relay::{self, Outcome};
use lizard_egress::{nft, Limits, Rules, SandboxPolicy, DNS_ADDR, PROXY_ADDR};
use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tls::{pki, trusting, Pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A network namespace of the test's own (gone when the fd closes and no thread is in it).
struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    fn new() -> NetNs {
        let fd = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare (root?)");
            OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net").unwrap())
        })
        .join()
        .unwrap();
        let ns = NetNs { fd };
        ns.cmd(&["ip", "link", "set", "lo", "up"], None);
        ns
    }

    /// Run `f` on a thread inside the namespace.
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(&self.fd, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Run a command inside (a child forked by a thread inside is inside).
    fn cmd(&self, args: &[&str], stdin: Option<&str>) {
        let out = self.run(|| {
            let mut c = Command::new(args[0])
                .args(&args[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            if let Some(s) = stdin {
                c.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
            }
            drop(c.stdin.take());
            c.wait_with_output().unwrap()
        });
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Run the future `f` to its end on a thread inside the namespace (a runtime of its own).
    fn block_on<F: std::future::Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        self.run(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f)
        })
    }

    /// The host side: [`UPSTREAM`] on its `lo`, where the upstreams listen.
    fn upstream_host() -> NetNs {
        let ns = NetNs::new();
        ns.cmd(
            &["ip", "addr", "add", &format!("{UPSTREAM}/32"), "dev", "lo"],
            None,
        );
        ns
    }

    /// The sandbox side: default route and the generic ruleset.
    fn sandbox() -> NetNs {
        let ns = NetNs::new();
        let mut route = vec!["ip", "route", "replace"];
        route.extend(nft::DEFAULT_ROUTE);
        ns.cmd(&route, None);
        ns.cmd(&["nft", "-f", "-"], Some(&nft::ruleset()));
        ns
    }
}

fn tcp_listener_in(ns: &NetNs, addr: SocketAddrV4) -> std::net::TcpListener {
    ns.run(|| {
        let l = std::net::TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    })
}

/// A blocking connect from inside `ns`, then handed to tokio.
fn connect_from(ns: &NetNs, to: SocketAddrV4) -> std::io::Result<tokio::net::TcpStream> {
    let s = ns.run(|| std::net::TcpStream::connect_timeout(&to.into(), Duration::from_secs(20)))?;
    s.set_nonblocking(true)?;
    tokio::net::TcpStream::from_std(s)
}

#[test]
fn the_ruleset_redirects_tcp_and_dns_with_the_original_destination_and_rejects_the_rest() {
    lizard_test_support::needs_root!();
    let sb = NetNs::sandbox();
    // Applying the script again replaces it (a restore, an upgrade): still one table each.
    sb.cmd(&["nft", "-f", "-"], Some(&nft::ruleset()));
    let listed = sb.run(|| {
        Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap()
    });
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "table ip lizard_egress\ntable ip6 lizard_egress\n"
    );
    let relay = tcp_listener_in(&sb, PROXY_ADDR);
    relay.set_nonblocking(false).unwrap();
    let dns_tcp = tcp_listener_in(&sb, DNS_ADDR);
    dns_tcp.set_nonblocking(false).unwrap();
    let dns_udp = sb.run(|| std::net::UdpSocket::bind(DNS_ADDR).unwrap());
    dns_udp
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    // TCP to somewhere on the internet: at the relay, with the original destination.
    let dst: SocketAddrV4 = "203.0.113.5:443".parse().unwrap();
    let c = sb
        .run(|| std::net::TcpStream::connect_timeout(&dst.into(), Duration::from_secs(20)))
        .expect("connect is redirected");
    let (a, peer) = relay.accept().unwrap();
    assert_eq!(relay::orig_dst(&a).unwrap(), dst);
    assert_eq!(peer, c.local_addr().unwrap());
    // Any port, any address.
    for d in ["198.51.100.7:22", "1.1.1.1:8080"] {
        let d: SocketAddrV4 = d.parse().unwrap();
        let _c = sb
            .run(|| std::net::TcpStream::connect_timeout(&d.into(), Duration::from_secs(20)))
            .unwrap();
        assert_eq!(relay::orig_dst(&relay.accept().unwrap().0).unwrap(), d);
    }

    // DNS over UDP to any resolver: at the responder; the reply comes back from the resolver's
    // address (conntrack undoes the DNAT).
    let client = sb.run(|| std::net::UdpSocket::bind("0.0.0.0:0").unwrap());
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    client.send_to(b"query", "10.0.2.3:53").unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = dns_udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"query");
    dns_udp.send_to(b"reply", from).unwrap();
    let (n, replier) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"reply");
    assert_eq!(replier.to_string(), "10.0.2.3:53");
    // DNS over TCP: at the DNS listener, not the relay.
    let d: SocketAddrV4 = "8.8.8.8:53".parse().unwrap();
    let _c = sb
        .run(|| std::net::TcpStream::connect_timeout(&d.into(), Duration::from_secs(20)))
        .unwrap();
    assert_eq!(relay::orig_dst(&dns_tcp.accept().unwrap().0).unwrap(), d);

    // Everything else that is not loopback: refused at once, not a time-out.
    let start = Instant::now();
    let err = sb
        .run(|| {
            std::net::UdpSocket::bind("0.0.0.0:0")
                .unwrap()
                .send_to(b"x", "8.8.8.8:123")
        })
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    let err = sb
        .run(|| {
            std::net::UdpSocket::bind("[::]:0").and_then(|u| u.send_to(b"x", "[2001:db8::1]:53"))
        })
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10), "{err}");
    // Loopback stays the sandbox's own: not redirected.
    let own = sb.run(|| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(a).unwrap();
        let (s, _) = l.accept().unwrap();
        relay::orig_dst(&s).unwrap()
    });
    assert_eq!(own.ip(), &Ipv4Addr::LOCALHOST);
}

// ---- the whole relay ----

const UPSTREAM: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);

fn tls_client(pki: &Pki) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(trusting(pki.ca.clone()))
}

/// One DNS question from inside the sandbox, to any resolver address (redirected).
async fn ask(sb: &NetNs, name: &str) -> Message {
    let sock = sb.run(|| std::net::UdpSocket::bind("0.0.0.0:0").unwrap());
    sock.set_nonblocking(true).unwrap();
    let sock = tokio::net::UdpSocket::from_std(sock).unwrap();
    let mut q = Message::query();
    q.add_query(Query::query(Name::from_str(name).unwrap(), RecordType::A));
    sock.send_to(&q.to_vec().unwrap(), "192.0.2.53:53")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), sock.recv(&mut buf))
        .await
        .expect("a DNS answer in time")
        .unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.metadata.id, q.metadata.id);
    m
}

fn a_records(m: &Message) -> Vec<Ipv4Addr> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// A TLS connection from inside the sandbox to `dst` with server name `sni` (a DNS name, or an
/// IP address: then no SNI); `Ok` with what the upstream answered to "hello".
async fn tls_hello(sb: &NetNs, pki: &Pki, dst: SocketAddrV4, sni: &str) -> std::io::Result<String> {
    let tcp = connect_from(sb, dst)?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(20), tls_client(pki).connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("TLS handshake timed out"))??;
    tls.write_all(b"hello").await?;
    tls.flush().await?;
    let mut got = String::new();
    tokio::time::timeout(Duration::from_secs(20), tls.read_to_string(&mut got))
        .await
        .map_err(|_| std::io::Error::other("no answer in time"))??;
    Ok(got)
}

/// Plain HTTP from inside the sandbox; the response (the relay's 403 if refused).
async fn http_get(sb: &NetNs, dst: SocketAddrV4, host: &str) -> String {
    let mut s = connect_from(sb, dst).unwrap();
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut got)).await;
    got
}

#[test]
fn the_relay_reaches_allowed_names_and_refuses_tricks() {
    lizard_test_support::needs_root!();
    let sb = NetNs::sandbox();
    let host = NetNs::upstream_host();
    let pki = pki(&["allowed.test", "other.test", "a.wild.test"]);
    // The host's listeners in the sandbox's namespace, the upstreams in "host".
    let relay_l = tcp_listener_in(&sb, PROXY_ADDR);
    let dns_l = sb.run(|| {
        let u = std::net::UdpSocket::bind(DNS_ADDR).unwrap();
        u.set_nonblocking(true).unwrap();
        u
    });
    let tls_up = tcp_listener_in(&host, SocketAddrV4::new(UPSTREAM, 443));
    let http_up = tcp_listener_in(&host, SocketAddrV4::new(UPSTREAM, 80));

    let policy = Arc::new(SandboxPolicy::new(
        Rules::parse(
            ["allowed.test", "other.test:443", "*.wild.test"],
            ["denied.test"],
        )
        .unwrap(),
        Limits::default(),
        vec![],
    ));
    let mut names = HashMap::new();
    for n in ["allowed.test", "other.test", "denied.test", "a.wild.test"] {
        names.insert(n.to_string(), vec![UPSTREAM]);
    }
    names.insert(
        "rebind.wild.test".into(),
        vec![Ipv4Addr::new(169, 254, 169, 254)],
    );
    let resolver: Arc<dyn dns::Resolve> = Arc::new(StaticResolver(names));

    let sb = &sb;
    let pki = &pki;
    host.block_on(async move {
        // The upstreams: TLS answering "hello from <sni>", HTTP answering its Host.
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.server.clone());
        let tls_up = tokio::net::TcpListener::from_std(tls_up).unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = tls_up.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut t) = acceptor.accept(s).await else {
                        return;
                    };
                    let sni = t.get_ref().1.server_name().unwrap_or("-").to_string();
                    let mut b = [0u8; 5];
                    if t.read_exact(&mut b).await.is_ok() {
                        let _ = t.write_all(format!("hello from {sni}").as_bytes()).await;
                        let _ = t.shutdown().await;
                    }
                });
            }
        });
        let http_up = tokio::net::TcpListener::from_std(http_up).unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = http_up.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = vec![0u8; 4096];
                    let n = s.read(&mut b).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&b[..n]).to_string();
                    let body = format!("upstream saw: {}", req.lines().nth(1).unwrap_or(""));
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                    let _ = s.shutdown().await;
                });
            }
        });
        // The relay and the DNS responder, outcomes reported.
        let (otx, mut orx) = tokio::sync::mpsc::unbounded_channel::<Outcome>();
        let relay_l = tokio::net::TcpListener::from_std(relay_l).unwrap();
        let (p, r) = (policy.clone(), resolver.clone());
        tokio::spawn(async move {
            loop {
                let (c, _) = relay_l.accept().await.unwrap();
                let dst = relay::orig_dst(&c).unwrap();
                let (p, r, otx) = (p.clone(), r.clone(), otx.clone());
                tokio::spawn(async move {
                    let _ = otx.send(relay::handle(c, dst, &p, &*r).await);
                });
            }
        });
        let dns_l = tokio::net::UdpSocket::from_std(dns_l).unwrap();
        tokio::spawn(dns::serve_udp(dns_l, policy.clone(), resolver.clone()));

        // 1. DNS for an allowed name, then TLS to the answer: reaches the upstream.
        let m = ask(sb, "allowed.test").await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(a_records(&m), [UPSTREAM]);
        let dst = SocketAddrV4::new(UPSTREAM, 443);
        assert_eq!(
            tls_hello(sb, pki, dst, "allowed.test").await.unwrap(),
            "hello from allowed.test"
        );
        assert_eq!(
            orx.recv().await.unwrap(),
            Outcome::Relayed {
                upstream: dst,
                name: Some("allowed.test".into())
            }
        );
        // Plain HTTP by name.
        let r = http_get(sb, SocketAddrV4::new(UPSTREAM, 80), "allowed.test").await;
        assert!(r.contains("upstream saw: Host: allowed.test"), "{r}");
        orx.recv().await.unwrap();

        // 2. A denied name: REFUSED, not resolved, not pinned; TLS with it as SNI refused.
        let m = ask(sb, "denied.test").await;
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert!(m.answers.is_empty());
        let e = tls_hello(sb, pki, dst, "denied.test").await;
        assert!(e.is_err(), "{e:?}");
        assert!(matches!(orx.recv().await.unwrap(), Outcome::Refused(_)));
        // A name below a wildcard that resolves to the metadata address: REFUSED (rebinding).
        assert_eq!(
            ask(sb, "rebind.wild.test").await.metadata.response_code,
            ResponseCode::Refused
        );
        assert_eq!(a_records(&ask(sb, "a.wild.test").await), [UPSTREAM]);

        // 3. SNI / Host other than the name the address was resolved for: refused, even for a
        // name that is itself allowed (other.test:443) — the address is pinned to allowed.test
        // and a.wild.test.
        let e = tls_hello(sb, pki, dst, "other.test").await;
        assert!(e.is_err(), "{e:?}");
        match orx.recv().await.unwrap() {
            Outcome::Refused(w) => assert!(w.contains("not the name"), "{w}"),
            o => panic!("{o:?}"),
        }
        let r = http_get(sb, SocketAddrV4::new(UPSTREAM, 80), "denied.test").await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        assert!(!r.contains("upstream saw"), "{r}");
        orx.recv().await.unwrap();

        // 4. IP literals without a rule: TLS to an address nobody resolved, with the address
        // as server name (no SNI), and HTTP with `Host: <address>`: refused.
        let bare = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 99), 443);
        let e = tls_hello(sb, pki, bare, "203.0.113.99").await;
        assert!(e.is_err(), "{e:?}");
        assert!(matches!(orx.recv().await.unwrap(), Outcome::Refused(_)));
        let r = http_get(sb, SocketAddrV4::new(UPSTREAM, 80), &UPSTREAM.to_string()).await;
        // UPSTREAM is pinned (allowed.test): a request without a name is that name's.
        assert!(r.contains("upstream saw"), "{r}");
        orx.recv().await.unwrap();
        let r = http_get(
            sb,
            SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 99), 80),
            "203.0.113.99",
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        orx.recv().await.unwrap();

        // 5. A sandbox-chosen address for an allowed name (/etc/hosts, a stale answer): the
        // proxy connects to its own resolution of the name instead.
        let e = tls_hello(sb, pki, bare, "a.wild.test").await;
        assert_eq!(e.unwrap(), "hello from a.wild.test");
        assert_eq!(
            orx.recv().await.unwrap(),
            Outcome::Relayed {
                upstream: dst,
                name: Some("a.wild.test".into())
            }
        );

        // 6. Rules changed live: the next connection is refused, and DNS too.
        policy.set_rules(Rules::parse(["other.test"], ["allowed.test"]).unwrap());
        assert!(tls_hello(sb, pki, dst, "allowed.test").await.is_err());
        assert!(matches!(orx.recv().await.unwrap(), Outcome::Refused(_)));
        assert_eq!(
            ask(sb, "allowed.test").await.metadata.response_code,
            ResponseCode::Refused
        );

        // The counters and the refusal log.
        let t = policy.traffic();
        assert_eq!(t.connections, 4, "{t:?}");
        assert!(t.bytes_out > 0 && t.bytes_in > 0, "{t:?}");
        let log = policy.refusals();
        assert!(
            log.iter().any(|l| l.destination == "denied.test"),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.destination.starts_with("other.test (203.0.113.10:443)")),
            "{log:?}"
        );
        assert_eq!(t.refused as usize, log.len());
    });
}

/// Throughput of the relay (through [`relay::serve`]), sandbox → relay → upstream and back (echo), on this machine; printed,
/// not asserted (`--nocapture` to see it).
#[test]
fn relay_throughput() {
    lizard_test_support::needs_root!();
    let sb = NetNs::sandbox();
    let host = NetNs::upstream_host();
    let relay_l = tcp_listener_in(&sb, PROXY_ADDR);
    let up = tcp_listener_in(&host, SocketAddrV4::new(UPSTREAM, 9000));
    let policy = Arc::new(SandboxPolicy::new(
        Rules::parse([format!("{UPSTREAM}:9000")], [] as [&str; 0]).unwrap(),
        Limits::default(),
        vec![],
    ));
    let sb = &sb;
    host.block_on(async move {
        let up = tokio::net::TcpListener::from_std(up).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = up.accept().await.unwrap();
            let (mut r, mut w) = s.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
        let relay_l = tokio::net::TcpListener::from_std(relay_l).unwrap();
        tokio::spawn(relay::serve(
            relay_l,
            policy.clone(),
            Arc::new(StaticResolver::default()),
        ));
        let total: usize = 64 << 20;
        let s = connect_from(sb, SocketAddrV4::new(UPSTREAM, 9000)).unwrap();
        let (mut r, mut w) = s.into_split();
        let start = Instant::now();
        let writer = tokio::spawn(async move {
            let chunk = vec![7u8; 64 * 1024];
            let mut sent = 0;
            while sent < total {
                w.write_all(&chunk).await.unwrap();
                sent += chunk.len();
            }
            w.shutdown().await.unwrap();
        });
        let mut got = 0usize;
        let mut buf = vec![0u8; 256 * 1024];
        while got < total {
            let n = r.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {got} bytes");
            got += n;
        }
        writer.await.unwrap();
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "relay throughput: {} MiB each way in {secs:.2} s = {:.0} MiB/s each way ({} build, shared machine)",
            total >> 20,
            (total >> 20) as f64 / secs,
            if cfg!(debug_assertions) { "debug" } else { "release" }
        );
        let t = policy.traffic();
        assert_eq!(t.bytes_out, total as u64);
        assert_eq!(t.bytes_in, total as u64);
        // A connection to the relay's own address was not redirected: closed, not relayed
        // (its "original destination" would be the host's loopback).
        let mut direct = connect_from(sb, PROXY_ADDR).unwrap();
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(20), direct.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
        let log = policy.refusals();
        assert!(log.iter().any(|l| l.reason == "not a redirected connection"), "{log:?}");
    });
}
