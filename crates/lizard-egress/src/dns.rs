//! The DNS responder a sandbox's port-53 traffic is redirected to. It forwards nothing: an A query
//! for a name the rules allow is resolved by the host ([`Resolve`]), the answer keeps only the
//! addresses the rules allow for that name (no private address for a name: DNS rebinding), and
//! each kept address is pinned to the name ([`Pins`](crate::policy::Pins)) so that a later connection to it that
//! carries no name (opaque TCP) is decided as that name. A denied name is REFUSED before anything
//! is looked up (the sandbox cannot make the host query names of its choosing); AAAA gets an
//! empty answer (sandboxes have no IPv6), other types NOTIMP, a malformed query FORMERR (or
//! nothing, if it is not even a DNS header). Messages are parsed and built by `hickory-proto`.

use crate::policy::SandboxPolicy;
use crate::rules::{normalize_name, Decision};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::pin::Pin;

/// The TTL of every answer: short, so that a sandbox asks again (and the rules, which may change,
/// and the pins follow) rather than keeping an address for the upstream's TTL.
pub const TTL: u32 = 60;
/// Most addresses in one answer.
pub const MAX_ANSWERS: usize = 16;

/// The host's name resolution, injectable for tests.
pub trait Resolve: Send + Sync {
    /// The IPv4 addresses of `name` (normalised); empty if it has none.
    fn resolve<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>>;

    /// [`Resolve::resolve`], keeping `held` (one of the asking sandbox's lookups) for as long as
    /// the lookup really runs — in [`HostResolver`], until `getaddrinfo` returns, even after the
    /// caller gave up at its deadline. So one sandbox holds at most its own budget of the host's
    /// lookups, however slowly its names resolve. By default `held` goes with the future.
    fn resolve_holding<'a>(
        &'a self,
        name: &'a str,
        held: tokio::sync::OwnedSemaphorePermit,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        let fut = self.resolve(name);
        Box::pin(async move {
            let _held = held;
            fut.await
        })
    }
}

/// The host's own resolver (`getaddrinfo`, in tokio's blocking pool). Shared by all sandboxes:
/// at most `max_lookups` run at once, and a lookup that would exceed it fails at once ("busy")
/// rather than queue — the permit lives in the blocking call itself, so a lookup abandoned at a
/// caller's deadline still counts until `getaddrinfo` returns, and no sandbox can fill the
/// blocking pool with slow names.
#[derive(Debug, Clone)]
pub struct HostResolver {
    lookups: std::sync::Arc<tokio::sync::Semaphore>,
}

impl HostResolver {
    pub fn new(max_lookups: usize) -> HostResolver {
        HostResolver {
            lookups: std::sync::Arc::new(tokio::sync::Semaphore::new(max_lookups)),
        }
    }
}

impl Resolve for HostResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        self.lookup(name, None)
    }

    fn resolve_holding<'a>(
        &'a self,
        name: &'a str,
        held: tokio::sync::OwnedSemaphorePermit,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        self.lookup(name, Some(held))
    }
}

impl HostResolver {
    /// One `getaddrinfo` in the blocking pool, holding the host's permit and `held` until it
    /// returns.
    fn lookup<'a>(
        &'a self,
        name: &'a str,
        held: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        Box::pin(async move {
            let permit = self
                .lookups
                .clone()
                .try_acquire_owned()
                .map_err(|_| io::Error::other("the host's resolver is busy"))?;
            let name = name.to_string();
            let addrs = tokio::task::spawn_blocking(move || {
                let _permits = (permit, held);
                std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 0))
            })
            .await
            .map_err(io::Error::other)??;
            let mut v: Vec<Ipv4Addr> = Vec::new();
            for a in addrs {
                if let std::net::IpAddr::V4(ip) = a.ip() {
                    if !v.contains(&ip) {
                        v.push(ip);
                    }
                }
            }
            Ok(v)
        })
    }
}

fn error(id: u16, op: OpCode, code: ResponseCode) -> Option<Vec<u8>> {
    Message::error_msg(id, op, code).to_vec().ok()
}

/// The response to one DNS message from the sandbox, or `None` to send nothing (not a DNS
/// query at all). Resolution is bounded by `policy.limits().resolve`.
pub async fn answer(
    query: &[u8],
    policy: &SandboxPolicy,
    resolver: &dyn Resolve,
) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([query[0], query[1]]);
    // QR set: a response, never answered (no loops).
    if query[2] & 0x80 != 0 {
        return None;
    }
    let msg = match Message::from_vec(query) {
        Ok(m) => m,
        Err(_) => return error(id, OpCode::Query, ResponseCode::FormErr),
    };
    if msg.metadata.message_type != MessageType::Query {
        return None;
    }
    if msg.metadata.op_code != OpCode::Query {
        return error(id, msg.metadata.op_code, ResponseCode::NotImp);
    }
    if msg.queries.len() != 1 {
        return error(id, OpCode::Query, ResponseCode::FormErr);
    }
    let q = msg.queries[0].clone();
    let mut resp = Message::response(id, OpCode::Query);
    resp.metadata.recursion_desired = msg.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.add_query(q.clone());
    let reply = |mut resp: Message, code: ResponseCode| {
        resp.metadata.response_code = code;
        resp.to_vec().ok()
    };
    if q.query_class() != DNSClass::IN {
        return reply(resp, ResponseCode::NotImp);
    }
    let labels: Vec<&[u8]> = q.name().iter().collect();
    let raw = labels
        .iter()
        .map(|l| String::from_utf8_lossy(l))
        .collect::<Vec<_>>()
        .join(".");
    let name = match labels
        .iter()
        .all(|l| l.is_ascii())
        .then(|| normalize_name(&raw))
    {
        Some(Ok(n)) => n,
        _ => {
            policy.refuse(&raw, "DNS query for an invalid name");
            return reply(resp, ResponseCode::Refused);
        }
    };
    let qtype = q.query_type();
    if !matches!(qtype, RecordType::A | RecordType::AAAA) {
        return reply(resp, ResponseCode::NotImp);
    }
    let rules = policy.rules();
    if let Decision::Deny(why) = rules.decide_name(&name, None) {
        policy.refuse(&name, &format!("DNS: {why}"));
        return reply(resp, ResponseCode::Refused);
    }
    if qtype == RecordType::AAAA {
        // No IPv6 in sandboxes: "no such record", so that clients use the A answer.
        return reply(resp, ResponseCode::NoError);
    }
    let limit = policy.limits().resolve;
    let Some(lookup) = policy.lookup_permit() else {
        return reply(resp, ResponseCode::ServFail);
    };
    let addrs = match tokio::time::timeout(limit, resolver.resolve_holding(&name, lookup)).await {
        Ok(Ok(a)) => a,
        Ok(Err(_)) | Err(_) => return reply(resp, ResponseCode::ServFail),
    };
    if addrs.is_empty() {
        return reply(resp, ResponseCode::NXDomain);
    }
    let kept: Vec<Ipv4Addr> = addrs
        .iter()
        .copied()
        .filter(|&a| policy.decide(&rules, Some(&name), a, None).is_allow())
        .take(MAX_ANSWERS)
        .collect();
    if kept.is_empty() {
        policy.refuse(
            &name,
            &format!(
                "DNS: every address of {name} is refused ({}): {}",
                addrs
                    .iter()
                    .take(4)
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                match policy.decide(&rules, Some(&name), addrs[0], None) {
                    Decision::Deny(w) => w,
                    Decision::Allow => String::new(),
                }
            ),
        );
        return reply(resp, ResponseCode::Refused);
    }
    policy.pins().pin(&name, &kept);
    for a in kept {
        resp.add_answer(Record::from_rdata(q.name().clone(), TTL, RData::A(A(a))));
    }
    reply(resp, ResponseCode::NoError)
}

/// Serve DNS over UDP on `sock` (bound in the sandbox's namespace to [`crate::DNS_ADDR`]) until
/// this future is dropped (its answers' tasks with it). At most `policy.limits().dns_in_flight`
/// queries are resolved at once; more are answered SERVFAIL at once, so a flood costs the host
/// one small reply each. A failed receive is retried after a pause.
pub async fn serve_udp(
    sock: tokio::net::UdpSocket,
    policy: std::sync::Arc<SandboxPolicy>,
    resolver: std::sync::Arc<dyn Resolve>,
) -> io::Result<()> {
    let sock = std::sync::Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    let mut tasks = crate::conn::OwnedTasks::default();
    loop {
        let what = "egress DNS: receiving";
        let Some((n, from)) = tasks.next(what, sock.recv_from(&mut buf)).await else {
            continue;
        };
        let query = buf[..n].to_vec();
        let Some(permit) = policy.dns_permit() else {
            if query.len() >= 12 && query[2] & 0x80 == 0 {
                let id = u16::from_be_bytes([query[0], query[1]]);
                if let Some(r) = error(id, OpCode::Query, ResponseCode::ServFail) {
                    let _ = sock.try_send_to(&r, from);
                }
            }
            continue;
        };
        let (sock, policy, resolver) = (sock.clone(), policy.clone(), resolver.clone());
        tasks.spawn(async move {
            if let Some(r) = answer(&query, &policy, &*resolver).await {
                let _ = sock.send_to(&r, from).await;
            }
            drop(permit);
        });
    }
}

/// Serve DNS over TCP (2-byte length prefix, RFC 1035 4.2.2) on `listener`: one query per
/// connection, read within `policy.limits().peek_deadline`, counted against the same limit as
/// UDP queries; until this future is dropped (its connections with it).
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    policy: std::sync::Arc<SandboxPolicy>,
    resolver: std::sync::Arc<dyn Resolve>,
) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tasks = crate::conn::OwnedTasks::default();
    loop {
        let Some((mut conn, _)) = tasks.next("egress DNS: accepting", listener.accept()).await
        else {
            continue;
        };
        let Some(permit) = policy.dns_permit() else {
            continue;
        };
        let (policy, resolver) = (policy.clone(), resolver.clone());
        tasks.spawn(async move {
            let deadline = policy.limits().peek_deadline;
            let read = async {
                let len = conn.read_u16().await? as usize;
                let mut q = vec![0u8; len];
                conn.read_exact(&mut q).await?;
                io::Result::Ok(q)
            };
            if let Ok(Ok(q)) = tokio::time::timeout(deadline, read).await {
                if let Some(r) = answer(&q, &policy, &*resolver).await {
                    let mut out = (r.len() as u16).to_be_bytes().to_vec();
                    out.extend_from_slice(&r);
                    let _ = tokio::time::timeout(deadline, conn.write_all(&out)).await;
                }
            }
            drop(permit);
        });
    }
}

/// A fixed map of names to addresses (like `/etc/hosts`; the tests' upstreams).
#[derive(Debug, Clone, Default)]
pub struct StaticResolver(pub HashMap<String, Vec<Ipv4Addr>>);

impl Resolve for StaticResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        let r = self.0.get(name).cloned().unwrap_or_default();
        Box::pin(async move { Ok(r) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Pins;
    use crate::rules::Rules;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn query(name: &str, t: RecordType) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 0x4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_str(name).unwrap(), t));
        m.to_vec().unwrap()
    }

    /// Counts lookups, so tests can tell that a denied name was never resolved.
    struct Counting(StaticResolver, AtomicUsize);
    impl Resolve for Counting {
        fn resolve<'a>(
            &'a self,
            name: &'a str,
        ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.resolve(name)
        }
    }

    fn resolver() -> Counting {
        let mut m = HashMap::new();
        m.insert(
            "good.test".into(),
            vec![ip("203.0.113.5"), ip("203.0.113.6")],
        );
        m.insert("api.good.test".into(), vec![ip("203.0.113.7")]);
        m.insert(
            "rebind.good.test".into(),
            vec![ip("127.0.0.1"), ip("169.254.169.254"), ip("10.0.0.1")],
        );
        m.insert(
            "mixed.good.test".into(),
            vec![ip("10.0.0.1"), ip("203.0.113.9")],
        );
        m.insert("evil.test".into(), vec![ip("203.0.113.66")]);
        Counting(StaticResolver(m), AtomicUsize::new(0))
    }

    fn policy(allow: &[&str], deny: &[&str]) -> SandboxPolicy {
        SandboxPolicy::new(
            Rules::parse(allow, deny).unwrap(),
            Default::default(),
            vec![],
        )
    }

    async fn ask(p: &SandboxPolicy, r: &dyn Resolve, name: &str, t: RecordType) -> Message {
        let out = answer(&query(name, t), p, r).await.expect("an answer");
        let m = Message::from_vec(&out).unwrap();
        assert_eq!(m.metadata.id, 0x4242);
        assert_eq!(m.metadata.message_type, MessageType::Response);
        m
    }

    fn addrs(m: &Message) -> Vec<Ipv4Addr> {
        m.answers
            .iter()
            .map(|r| match &r.data {
                RData::A(a) => a.0,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn allowed_names_are_resolved_filtered_pinned_and_capped() {
        let p = policy(&["good.test", "*.good.test"], &[]);
        let r = resolver();
        let m = ask(&p, &r, "Good.Test.", RecordType::A).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.recursion_available);
        assert_eq!(addrs(&m), [ip("203.0.113.5"), ip("203.0.113.6")]);
        assert!(m.answers.iter().all(|a| a.ttl == TTL));
        assert_eq!(p.pins().names(ip("203.0.113.5")), ["good.test"]);
        // Private answers are dropped (rebinding), a mix keeps the public ones.
        let m = ask(&p, &r, "mixed.good.test", RecordType::A).await;
        assert_eq!(addrs(&m), [ip("203.0.113.9")]);
        assert!(p.pins().names(ip("10.0.0.1")).is_empty());
        let m = ask(&p, &r, "rebind.good.test", RecordType::A).await;
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert!(m.answers.is_empty());
        assert!(p.pins().names(ip("127.0.0.1")).is_empty());
        assert!(p.pins().names(ip("169.254.169.254")).is_empty());
        // Unless an address rule names them.
        let lan = policy(&["*.good.test", "10.0.0.0/8"], &[]);
        let m = ask(&lan, &r, "rebind.good.test", RecordType::A).await;
        assert_eq!(addrs(&m), [ip("10.0.0.1")]);
        // Unknown: NXDOMAIN.
        let m = ask(&p, &r, "nowhere.good.test", RecordType::A).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    }

    #[tokio::test]
    async fn denied_names_are_refused_without_a_lookup() {
        let p = policy(&["*.good.test"], &["api.good.test"]);
        let r = resolver();
        for (name, t) in [
            ("evil.test", RecordType::A),
            ("api.good.test", RecordType::A),
            ("good.test", RecordType::A),
            ("good.test.evil.test", RecordType::A),
            ("evil.test", RecordType::AAAA),
        ] {
            let m = ask(&p, &r, name, t).await;
            assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{name}");
        }
        assert_eq!(r.1.load(Ordering::SeqCst), 0, "nothing was looked up");
        assert!(p.refusals().iter().any(|l| l.destination == "evil.test"));
    }

    #[tokio::test]
    async fn aaaa_is_empty_other_types_notimp_garbage_formerr() {
        let p = policy(&["*"], &[]);
        let r = resolver();
        let m = ask(&p, &r, "good.test", RecordType::AAAA).await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.answers.is_empty());
        for t in [
            RecordType::MX,
            RecordType::TXT,
            RecordType::HTTPS,
            RecordType::ANY,
        ] {
            let m = ask(&p, &r, "good.test", t).await;
            assert_eq!(m.metadata.response_code, ResponseCode::NotImp, "{t:?}");
        }
        assert_eq!(r.1.load(Ordering::SeqCst), 0);
        // Too short for a header: nothing. A response: nothing.
        assert!(answer(b"\x00\x01", &p, &r).await.is_none());
        let mut resp = query("good.test", RecordType::A);
        resp[2] |= 0x80;
        assert!(answer(&resp, &p, &r).await.is_none());
        // A header and garbage: FORMERR with the id.
        let mut bad = query("good.test", RecordType::A);
        bad.truncate(15);
        let out = Message::from_vec(&answer(&bad, &p, &r).await.unwrap()).unwrap();
        assert_eq!(out.metadata.response_code, ResponseCode::FormErr);
        assert_eq!(out.metadata.id, 0x4242);
        // Two questions: FORMERR.
        let mut two = Message::query();
        two.add_query(Query::query(
            Name::from_str("a.test").unwrap(),
            RecordType::A,
        ));
        two.add_query(Query::query(
            Name::from_str("b.test").unwrap(),
            RecordType::A,
        ));
        let out =
            Message::from_vec(&answer(&two.to_vec().unwrap(), &p, &r).await.unwrap()).unwrap();
        assert_eq!(out.metadata.response_code, ResponseCode::FormErr);
        // A name with non-ASCII bytes (legal on the wire): REFUSED.
        let n = Name::from_labels(vec![b"g\xc3\xa4od".to_vec(), b"test".to_vec()]).unwrap();
        let mut m = Message::query();
        m.metadata.id = 0x4242;
        m.add_query(Query::query(n, RecordType::A));
        let out = Message::from_vec(&answer(&m.to_vec().unwrap(), &p, &r).await.unwrap()).unwrap();
        assert_eq!(out.metadata.response_code, ResponseCode::Refused);
    }

    #[tokio::test]
    async fn the_host_resolver_resolves_and_is_bounded() {
        let r = HostResolver::new(1);
        assert_eq!(r.resolve("localhost").await.unwrap(), [Ipv4Addr::LOCALHOST]);
        // With the only permit taken, a lookup fails at once.
        let held = r.lookups.clone().try_acquire_owned().unwrap();
        let e = r.resolve("localhost").await.unwrap_err();
        assert!(e.to_string().contains("busy"), "{e}");
        drop(held);
        assert!(r.resolve("localhost").await.is_ok());
    }

    #[tokio::test]
    async fn dns_over_tcp_and_udp_serve_and_bound_in_flight_queries() {
        let p = std::sync::Arc::new(SandboxPolicy::new(
            Rules::parse(["*.good.test", "good.test"], [] as [&str; 0]).unwrap(),
            crate::Limits {
                dns_in_flight: 1,
                ..Default::default()
            },
            vec![],
        ));
        let r: std::sync::Arc<dyn Resolve> = std::sync::Arc::new(resolver().0);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve_tcp(l, p.clone(), r.clone()));
        let u = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let uaddr = u.local_addr().unwrap();
        tokio::spawn(serve_udp(u, p.clone(), r.clone()));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let q = query("good.test", RecordType::A);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        c.write_all(&framed).await.unwrap();
        let len = c.read_u16().await.unwrap() as usize;
        let mut resp = vec![0u8; len];
        c.read_exact(&mut resp).await.unwrap();
        let m = Message::from_vec(&resp).unwrap();
        assert_eq!(addrs(&m), [ip("203.0.113.5"), ip("203.0.113.6")]);
        let c2 = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c2.send_to(&query("api.good.test", RecordType::A), uaddr)
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = c2.recv(&mut buf).await.unwrap();
        assert_eq!(
            addrs(&Message::from_vec(&buf[..n]).unwrap()),
            [ip("203.0.113.7")]
        );
        // The one in-flight slot held (a TCP client that says nothing): UDP gets SERVFAIL at once.
        let _slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            c2.send_to(&query("api.good.test", RecordType::A), uaddr)
                .await
                .unwrap();
            let n = c2.recv(&mut buf).await.unwrap();
            let m = Message::from_vec(&buf[..n]).unwrap();
            if m.metadata.response_code == ResponseCode::ServFail {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never SERVFAIL");
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn pins_are_bounded() {
        let pins = Pins::new(3);
        for i in 0..10u8 {
            pins.pin("a.test", &[Ipv4Addr::new(1, 1, 1, i)]);
        }
        assert_eq!(pins.len(), 3);
        assert_eq!(pins.names(Ipv4Addr::new(1, 1, 1, 9)), ["a.test"]);
        assert!(pins.names(Ipv4Addr::new(1, 1, 1, 0)).is_empty());
        for i in 0..20 {
            pins.pin(&format!("n{i}.test"), &[Ipv4Addr::new(1, 1, 1, 9)]);
        }
        let names = pins.names(Ipv4Addr::new(1, 1, 1, 9));
        assert_eq!(names.len(), Pins::NAMES_PER_ADDR);
        assert_eq!(names.last().unwrap(), "n19.test");
    }
}
