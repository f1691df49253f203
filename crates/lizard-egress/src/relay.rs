//! One redirected connection from a sandbox: read its first bytes ([`peek`]), decide where it may
//! go, connect there, replay the bytes, relay both ways until both ends are done or nothing moves
//! for [`Limits::idle`], counting bytes.
//!
//! Where a connection goes:
//! - It carries a name (TLS SNI, HTTP Host): the name must be allowed by the rules *before* the
//!   host resolves it, must be one of the names the sandbox's DNS answers pinned to the
//!   destination address if any were (an SNI or Host other than the name the address was
//!   resolved for is refused), and the proxy connects to **its own** resolution of the name
//!   (each address checked again: no private address for a name), preferring the sandbox's
//!   destination if it is one of them — never to an address only the sandbox chose. A name the
//!   allow list does not name may still reach its destination address if an address rule allows
//!   that address (and no deny rule names the name).
//! - An IPv4 literal as SNI/Host must be the destination address and then counts as no name.
//! - No name (opaque, or a request without Host): decided as the names pinned to the destination
//!   address, else by the address rules alone.
//!
//! A TLS or HTTP connection whose name the allow rules name and the sandbox's injection has a rule
//! for (name and port) is not relayed but proxied as HTTP by [`crate::intercept::proxy`], which adds
//! the secret headers.

use crate::conn::Counted;
pub use crate::conn::Outcome;
use crate::dns::Resolve;
use crate::peek::{peek, Protocol};
pub use crate::policy::{Limits, Refusal, SandboxPolicy, Traffic};
use crate::rules::{normalize_name, Decision};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The destination the sandbox connected to before the redirect (`SO_ORIGINAL_DST`, from the
/// connection's conntrack entry; needs the `nat` redirect of [`crate::nft::ruleset`]).
pub fn orig_dst<S: std::os::fd::AsFd>(conn: &S) -> io::Result<SocketAddrV4> {
    let sa = nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::OriginalDst)
        .map_err(io::Error::from)?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

/// Decide where the connection goes: `(upstream, name)` or why not.
async fn route(
    protocol: &Protocol,
    name: Option<&str>,
    orig_dst: SocketAddrV4,
    policy: &SandboxPolicy,
    resolver: &dyn Resolve,
) -> Result<(SocketAddrV4, Option<String>), String> {
    let dst = *orig_dst.ip();
    let port = orig_dst.port();
    let rules = policy.rules();
    if let Protocol::Ambiguous(why) = protocol {
        return Err(format!("refused: {why}"));
    }
    let pinned = policy.pins().names(dst);
    let literal = name.and_then(|n| n.strip_suffix('.').unwrap_or(n).parse::<Ipv4Addr>().ok());
    match (name, literal) {
        (Some(_), Some(ip)) if ip != dst => {
            return Err(format!(
                "the address {ip} given as the host name is not the destination {dst}"
            ))
        }
        (Some(raw), None) => {
            let name = normalize_name(raw).map_err(|why| format!("invalid host name: {why}"))?;
            if !pinned.is_empty() && !pinned.contains(&name) {
                return Err(format!(
                    "the host name {name} is not the name {dst} was resolved for ({})",
                    pinned.join(", ")
                ));
            }
            return match rules.decide_name(&name, Some(port)) {
                Decision::Allow => {
                    // Counted with the DNS responder's lookups.
                    let Some(lookup) = policy.lookup_permit() else {
                        return Err(format!("too many name lookups at once (resolving {name})"));
                    };
                    let addrs = match tokio::time::timeout(
                        policy.limits().resolve,
                        resolver.resolve_holding(&name, lookup),
                    )
                    .await
                    {
                        Ok(Ok(a)) => a,
                        Ok(Err(e)) => return Err(format!("{name} did not resolve: {e}")),
                        Err(_) => return Err(format!("{name} did not resolve in time")),
                    };
                    // The sandbox's destination first if the proxy's own resolution has it.
                    let ordered = addrs
                        .iter()
                        .filter(|&&a| a == dst)
                        .chain(addrs.iter().filter(|&&a| a != dst));
                    let mut first_no = None;
                    for &a in ordered {
                        match policy.decide(&rules, Some(&name), a, Some(port)) {
                            Decision::Allow => return Ok((SocketAddrV4::new(a, port), Some(name))),
                            Decision::Deny(w) => {
                                first_no.get_or_insert(w);
                            }
                        }
                    }
                    Err(first_no.unwrap_or_else(|| format!("{name} has no IPv4 address")))
                }
                Decision::Deny(why) => {
                    match policy.decide(&rules, Some(&name), dst, Some(port)) {
                        // An address rule allows the destination itself.
                        Decision::Allow if rules.has_address_rules() => Ok((orig_dst, Some(name))),
                        _ => Err(why),
                    }
                }
            };
        }
        _ => {}
    }
    for n in pinned.iter().rev() {
        if policy.decide(&rules, Some(n), dst, Some(port)).is_allow() {
            return Ok((orig_dst, Some(n.clone())));
        }
    }
    match policy.decide(&rules, None, dst, Some(port)) {
        Decision::Allow => Ok((orig_dst, None)),
        Decision::Deny(why) => Err(why),
    }
}

/// Relay one connection the sandbox made to `orig_dst` (see the module doc). Never fails: what
/// happened is the [`Outcome`] (and the policy's counters and refusal log). A refused plain HTTP
/// request gets a `403` saying why; anything else refused is closed at once.
pub async fn handle(
    mut conn: TcpStream,
    orig_dst: SocketAddrV4,
    policy: &SandboxPolicy,
    resolver: &dyn Resolve,
) -> Outcome {
    let Some(_permit) = policy.connection_permit() else {
        let why = format!(
            "too many connections open at once (limit {})",
            policy.limits().max_connections
        );
        policy.refuse(&orig_dst.to_string(), &why);
        return Outcome::Refused(why);
    };
    let lim = *policy.limits();
    let peeked = match peek(
        &mut conn,
        lim.peek_bytes,
        Instant::now() + lim.peek_deadline,
    )
    .await
    {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("reading from the sandbox: {e}")),
    };
    let name = peeked.name();
    let shown = match name {
        Some(n) => format!("{} ({orig_dst})", n.chars().take(253).collect::<String>()),
        None => orig_dst.to_string(),
    };
    let (upstream, name) = match route(&peeked.protocol, name, orig_dst, policy, resolver).await {
        Ok(r) => r,
        Err(why) => {
            policy.refuse(&shown, &why);
            if matches!(
                peeked.protocol,
                Protocol::Http { .. } | Protocol::Ambiguous(_)
            ) {
                let body = format!(
                        "lizard: egress to {shown} refused: {why}. The sandbox's network rules decide where it may connect (PATCH /v1/sandboxes/{{id}}/network).\n"
                    );
                let resp = format!(
                        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                let _ = tokio::time::timeout(lim.peek_deadline, async {
                    conn.write_all(resp.as_bytes()).await?;
                    conn.shutdown().await
                })
                .await;
            }
            return Outcome::Refused(why);
        }
    };
    // A name with an injection rule: HTTP proxied, not bytes relayed — if the name itself is
    // allowed (the proxy connects to its own resolution of it: an address rule letting an
    // unlisted name through leaves the sandbox choosing the address, which gets no secret).
    if let (Some(n), Protocol::Tls { .. } | Protocol::Http { .. }) = (&name, &peeked.protocol) {
        if let Some(inj) = policy.injection() {
            if inj.rule_for(n, upstream.port()).is_some()
                && policy
                    .rules()
                    .decide_name(n, Some(upstream.port()))
                    .is_allow()
            {
                return crate::intercept::proxy(conn, peeked, upstream, n, &inj, policy).await;
            }
        }
    }
    let mut up = match tokio::time::timeout(lim.connect, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Outcome::Failed(format!("connecting to {upstream}: {e}")),
        Err(_) => return Outcome::Failed(format!("connecting to {upstream}: timed out")),
    };
    let _ = up.set_nodelay(true);
    let _ = conn.set_nodelay(true);
    policy.connections.fetch_add(1, Ordering::Relaxed);
    match tokio::time::timeout(lim.idle, up.write_all(&peeked.bytes)).await {
        Ok(Ok(())) => {}
        _ => return Outcome::Failed(format!("writing to {upstream}")),
    }
    policy
        .bytes_out
        .fetch_add(peeked.bytes.len() as u64, Ordering::Relaxed);
    relay(conn, up, policy, lim.idle).await;
    Outcome::Relayed { upstream, name }
}

/// Accept redirected connections on `listener` (the relay's, made in the sandbox's namespace at
/// [`crate::PROXY_ADDR`]) until this future is dropped (the sandbox's processes went): each is
/// handled in a task this future owns, so dropping it ends every connection of the sandbox at
/// once, whatever its upstream does. A failed accept (out of descriptors) is retried after a
/// pause rather than ending egress for the sandbox's life.
pub async fn serve(
    listener: tokio::net::TcpListener,
    policy: Arc<SandboxPolicy>,
    resolver: Arc<dyn Resolve>,
) -> io::Result<()> {
    let mut tasks = crate::conn::OwnedTasks::default();
    loop {
        let what = "egress relay: accepting a connection";
        let Some((conn, _)) = tasks.next(what, listener.accept()).await else {
            continue;
        };
        // A loopback destination was not redirected (the ruleset leaves 127/8 alone): the
        // sandbox connected to the listener itself. The host's loopback is never a destination.
        let dst = match orig_dst(&conn) {
            Ok(d) if !d.ip().is_loopback() => d,
            _ => {
                policy.refuse(
                    &crate::PROXY_ADDR.to_string(),
                    "not a redirected connection",
                );
                continue;
            }
        };
        let (policy, resolver) = (policy.clone(), resolver.clone());
        tasks.spawn(async move {
            handle(conn, dst, &policy, &*resolver).await;
        });
    }
}

/// `copy_bidirectional` between the sandbox's connection and the upstream until both are done or
/// neither has sent a byte for `idle`.
async fn relay(conn: TcpStream, up: TcpStream, policy: &SandboxPolicy, idle: std::time::Duration) {
    let base = Instant::now();
    let last = AtomicU64::new(0);
    // Reads from the sandbox go upstream (`bytes_out`), writes to it came from upstream
    // (`bytes_in`); either moves the idle deadline.
    let mut a = Counted {
        inner: conn,
        out: &policy.bytes_out,
        inn: &policy.bytes_in,
        last: &last,
        base,
    };
    let mut b = up;
    let watchdog = async {
        loop {
            let at = base + std::time::Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
            if Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
        _ = watchdog => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::StaticResolver;
    use crate::rules::Rules;
    use std::collections::HashMap;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn policy(allow: &[&str], deny: &[&str]) -> SandboxPolicy {
        SandboxPolicy::new(
            Rules::parse(allow, deny).unwrap(),
            Limits::default(),
            vec![],
        )
    }

    fn resolver() -> StaticResolver {
        let mut m = HashMap::new();
        m.insert(
            "good.test".into(),
            vec![ip("203.0.113.5"), ip("203.0.113.6")],
        );
        m.insert("other.test".into(), vec![ip("203.0.113.8")]);
        m.insert("rebind.test".into(), vec![ip("127.0.0.1")]);
        StaticResolver(m)
    }

    async fn route_of(
        p: &SandboxPolicy,
        proto: Protocol,
        dst: &str,
    ) -> Result<(SocketAddrV4, Option<String>), String> {
        let name = match &proto {
            Protocol::Tls { sni } => sni.clone(),
            Protocol::Http { host } => host.clone(),
            _ => None,
        };
        route(
            &proto,
            name.as_deref(),
            dst.parse().unwrap(),
            p,
            &resolver(),
        )
        .await
    }

    fn tls(n: &str) -> Protocol {
        Protocol::Tls {
            sni: Some(n.into()),
        }
    }

    #[tokio::test]
    async fn a_named_connection_goes_to_the_proxys_own_resolution() {
        let p = policy(&["good.test", "other.test"], &[]);
        // The sandbox's destination is one of the name's addresses: kept.
        assert_eq!(
            route_of(&p, tls("good.test"), "203.0.113.6:443").await,
            Ok(("203.0.113.6:443".parse().unwrap(), Some("good.test".into())))
        );
        // An address the sandbox chose (not pinned, not the name's): the name's own address.
        assert_eq!(
            route_of(&p, tls("GOOD.test."), "198.51.100.1:443").await,
            Ok(("203.0.113.5:443".parse().unwrap(), Some("good.test".into())))
        );
        // A name resolving to loopback: refused (rebinding) even though the name is allowed.
        let p2 = policy(&["rebind.test"], &[]);
        assert!(route_of(&p2, tls("rebind.test"), "203.0.113.5:443")
            .await
            .is_err());
        // A name not allowed, to an address not allowed.
        assert!(route_of(&p, tls("evil.test"), "203.0.113.5:443")
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_name_other_than_the_pinned_one_is_refused() {
        let p = policy(&["good.test", "other.test"], &[]);
        p.pins().pin("good.test", &[ip("203.0.113.5")]);
        let e = route_of(&p, tls("other.test"), "203.0.113.5:443")
            .await
            .unwrap_err();
        assert!(e.contains("not the name"), "{e}");
        let host = Protocol::Http {
            host: Some("other.test".into()),
        };
        assert!(route_of(&p, host, "203.0.113.5:80").await.is_err());
        // The pinned name itself, and opaque connections as the pinned name.
        assert!(route_of(&p, tls("good.test"), "203.0.113.5:443")
            .await
            .is_ok());
        assert_eq!(
            route_of(&p, Protocol::Opaque, "203.0.113.5:22").await,
            Ok(("203.0.113.5:22".parse().unwrap(), Some("good.test".into())))
        );
        // Unpinned opaque: the address rules alone (none here).
        assert!(route_of(&p, Protocol::Opaque, "203.0.113.6:22")
            .await
            .is_err());
        // Rules changed live: the pin no longer opens anything.
        p.set_rules(Rules::parse(["other.test"], [] as [&str; 0]).unwrap());
        assert!(route_of(&p, Protocol::Opaque, "203.0.113.5:22")
            .await
            .is_err());
        assert!(route_of(&p, tls("good.test"), "203.0.113.5:443")
            .await
            .is_err());
    }

    #[tokio::test]
    async fn ip_literals_and_address_rules() {
        let p = policy(&["203.0.113.9:443"], &["bad.test"]);
        let lit = Protocol::Http {
            host: Some("203.0.113.9".into()),
        };
        assert_eq!(
            route_of(&p, lit.clone(), "203.0.113.9:443").await,
            Ok(("203.0.113.9:443".parse().unwrap(), None))
        );
        // The literal is not the destination.
        assert!(route_of(&p, lit, "203.0.113.10:443").await.is_err());
        // An unlisted name to an allowed address: the address rule holds; a denied name does not.
        assert_eq!(
            route_of(&p, tls("cdn.test"), "203.0.113.9:443").await,
            Ok(("203.0.113.9:443".parse().unwrap(), Some("cdn.test".into())))
        );
        assert!(route_of(&p, tls("bad.test"), "203.0.113.9:443")
            .await
            .is_err());
        // Another port, no name, no rule.
        assert!(route_of(&p, Protocol::Opaque, "203.0.113.9:80")
            .await
            .is_err());
        assert!(route_of(&p, Protocol::Ambiguous("x"), "203.0.113.9:443")
            .await
            .is_err());
    }

    /// The relay on loopback, with the decision made for an address rule naming the upstream:
    /// bytes replayed and relayed both ways, counted; a refused HTTP request gets a 403 that says
    /// why; the connection limit closes the excess at once; an idle connection is closed.
    #[tokio::test]
    async fn relays_counts_refuses_and_limits() {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_addr = match up.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        tokio::spawn(async move {
            loop {
                let (mut s, _) = up.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    loop {
                        let n = s.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        let _ = s.write_all(&buf[..n]).await;
                    }
                });
            }
        });
        let lim = Limits {
            max_connections: 1,
            idle: Duration::from_millis(300),
            peek_deadline: Duration::from_millis(200),
            // The upstream is on loopback here.
            open_never_reached: true,
            ..Limits::default()
        };
        let p = Arc::new(SandboxPolicy::new(
            Rules::parse(["127.0.0.1"], [] as [&str; 0]).unwrap(),
            lim,
            vec![],
        ));
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel();
        let pp = p.clone();
        tokio::spawn(async move {
            loop {
                let (c, _) = front.accept().await.unwrap();
                let (pp, ptx) = (pp.clone(), ptx.clone());
                tokio::spawn(async move {
                    let o = handle(c, up_addr, &pp, &StaticResolver::default()).await;
                    let _ = ptx.send(o);
                });
            }
        });
        // Echoed: the first bytes (peeked, replayed) and later ones.
        let mut c = TcpStream::connect(front_addr).await.unwrap();
        c.write_all(b"\x00hello").await.unwrap();
        let mut got = [0u8; 6];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"\x00hello");
        // A second connection while the first is open: closed at once, unread.
        let mut c2 = TcpStream::connect(front_addr).await.unwrap();
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(20), c2.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert!(matches!(prx.recv().await.unwrap(), Outcome::Refused(w) if w.contains("too many")));
        c.write_all(b"world!").await.unwrap();
        let mut got = [0u8; 6];
        c.read_exact(&mut got).await.unwrap();
        // Idle: closed by the relay after `idle`.
        let n = tokio::time::timeout(Duration::from_secs(20), c.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert_eq!(
            prx.recv().await.unwrap(),
            Outcome::Relayed {
                upstream: up_addr,
                name: None
            }
        );
        let t = p.traffic();
        assert_eq!(
            (t.bytes_out, t.bytes_in, t.connections),
            (12, 12, 1),
            "{t:?}"
        );
        // A refused HTTP request (a Host the rules do not allow, at a port no rule allows) gets a
        // 403 with the reason.
        p.set_rules(Rules::parse(["127.0.0.1:1"], [] as [&str; 0]).unwrap());
        let mut c = TcpStream::connect(front_addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
            .await
            .unwrap();
        let mut resp = String::new();
        tokio::time::timeout(Duration::from_secs(20), c.read_to_string(&mut resp))
            .await
            .unwrap()
            .unwrap();
        assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
        assert!(resp.contains("evil.test"), "{resp}");
        assert!(matches!(prx.recv().await.unwrap(), Outcome::Refused(_)));
        let log = p.refusals();
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log[1].destination.starts_with("evil.test ("), "{log:?}");
        assert_eq!(p.traffic().refused, 2);
    }
}
