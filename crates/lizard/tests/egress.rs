//! Egress by name and address, enforced on the host (issue #19): a sandbox with egress has its
//! TCP connections and DNS queries redirected (nftables in its own network namespace) to the
//! server's relay and DNS responder, which decide by the name a connection carries (HTTP Host,
//! TLS SNI) or was resolved for, and by address.
//!
//! The "internet" here is a server in a network namespace of the test's own behind a veth pair
//! ([`Outside`]), on a documentation address (203.0.113.x, which the rules count as public) routed
//! from the host; names for it come from `lizard serve --egress-host` (the host's resolver is not
//! the test's to change). The host's own services (a greeter on its non-loopback address, the API
//! on its loopback) and the veth neighbour (a private address) stand for what a sandbox must
//! never reach unless an address rule names it.

mod common;

use common::outside::Outside;
use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, UdpSocket};
use std::process::Command;
use std::time::Duration;

fn host_ipv4() -> Ipv4Addr {
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    if udp.connect("192.0.2.200:9").is_ok() || udp.connect("8.8.8.8:53").is_ok() {
        if let Ok(a) = udp.local_addr() {
            if let IpAddr::V4(v4) = a.ip() {
                if !v4.is_loopback() && !v4.is_unspecified() {
                    return v4;
                }
            }
        }
    }
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
        .expect("this host has a non-loopback IPv4 address")
}

/// A TCP server on `ip`, port 0, that greets every connection; returns its port.
fn greeter(ip: Ipv4Addr) -> u16 {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = c.read(&mut [0u8; 512]);
            let _ = c.write_all(b"hello\n");
        }
    });
    port
}

/// What the outside server runs: for an HTTP request it answers `hello <Host header>`, for
/// anything else (or nothing within 2 s) `hello`.
const OUTSIDE_SERVER: &str = r#"
import socket, threading
s = socket.create_server(('0.0.0.0', 0))
print(s.getsockname()[1], flush=True)
def serve(c):
    try:
        c.settimeout(2)
        try:
            data = c.recv(4096)
        except OSError:
            data = b''
        if data[:4] in (b'GET ', b'HEAD'):
            host = b''
            for line in data.split(b'\r\n'):
                if line.lower().startswith(b'host:'):
                    host = line[5:].strip()
            body = b'hello ' + host
            c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
        else:
            c.sendall(b'hello\n')
    finally:
        c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Python that tries each `host:port`: connect, send a line, and count it reached if the answer
/// starts with `hello` (a redirected connection is always accepted at once, by the host's relay:
/// only the upstream's greeting says it got through). Prints `host:port ok|fail <why>`.
fn probe(targets: &[String]) -> Value {
    let code = format!(
        r#"import socket
for t in {targets:?}:
    h, p = t.rsplit(':', 1)
    try:
        s = socket.create_connection((h, int(p)), timeout=10)
        s.settimeout(10)
        s.sendall(b'ping\n')
        got = s.recv(100)
        s.close()
        print(t, 'ok' if got.startswith(b'hello') else 'fail ' + repr(got[:40]), flush=True)
    except OSError as e:
        print(t, 'fail', e.errno, e, flush=True)
"#
    );
    json!({"code": code, "language": "python", "timeout_ms": 120000})
}

/// Python that sends an HTTP request for `host` to `addr` (`ip:port`) and prints the answer's
/// status line and body (or the error).
fn http(addr: &str, host: &str) -> Value {
    let code = format!(
        r#"import socket
h, p = {addr:?}.rsplit(':', 1)
try:
    s = socket.create_connection((h, int(p)), timeout=10)
    s.settimeout(10)
    s.sendall(b'GET / HTTP/1.1\r\nHost: ' + {host:?}.encode() + b'\r\nConnection: close\r\n\r\n')
    data = b''
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b'\r\n\r\n')
    print(head.split(b'\r\n')[0].decode(), '|', body.decode(errors='replace').strip())
except OSError as e:
    print('error', e.errno, e)
"#
    );
    json!({"code": code, "language": "python", "timeout_ms": 60000})
}

/// Sandbox `id` (allowed `allowed.test`, not `other.test`) reaches the outside server by the
/// allowed name, and a request to the same address for the other name gets the relay's 403.
async fn assert_only_allowed_test(s: &Server, id: &str, outside: &Outside) {
    let ex = s
        .run(
            id,
            http(&format!("allowed.test:{}", outside.port), "allowed.test"),
        )
        .await;
    assert_eq!(
        stdout(&ex).trim(),
        "HTTP/1.1 200 OK | hello allowed.test",
        "{ex}"
    );
    let ex = s.run(id, http(&outside.addr(), "other.test")).await;
    assert!(stdout(&ex).starts_with("HTTP/1.1 403"), "{ex}");
}

fn reached(out: &str, target: &str) -> bool {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(target))
        .unwrap_or_else(|| panic!("{target} not probed: {out}"))
        .contains(" ok")
}

/// A server whose sandboxes resolve `allowed.test`, `other.test` and `a.wild.test` to the
/// outside server (all three the same address: only the name tells them apart), a project with
/// `allow_egress` and its key.
struct Fixture {
    s: Server,
    key: String,
    outside: Outside,
    /// A greeter on the host's own non-loopback address.
    host_service: String,
    api_port: String,
}

impl Fixture {
    /// A sandbox of the fixture's project whose egress allows `allow` (a JSON list of rules).
    async fn allowing(&self, allow: Value) -> String {
        let network = json!({"egress": {"allow": allow}});
        self.s
            .create(&self.key, json!({ "network": network }))
            .await
    }
}

async fn fixture() -> Fixture {
    let outside = Outside::start(OUTSIDE_SERVER, &[]);
    let hosts = format!(
        "allowed.test={ip},other.test={ip},a.wild.test={ip}",
        ip = outside.ip
    );
    let s = Server::start_in(tempfile::tempdir().unwrap(), &["--egress-host", &hosts]);
    let r = s
        .post("/v1/projects", json!({"name": "net", "allow_egress": true}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let key = r.body["api_key"].as_str().unwrap().to_string();
    let ip = host_ipv4();
    let api_port = s.addr.rsplit(':').next().unwrap().to_string();
    Fixture {
        s,
        key,
        outside,
        host_service: format!("{ip}:{}", greeter(ip)),
        api_port,
    }
}

async fn network_log(s: &Server, id: &str) -> Value {
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{id}/network/log"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body
}

/// Without a network option a sandbox has loopback only: the outside server is not reachable,
/// and failing is immediate (no route), not a time-out.
#[tokio::test]
async fn default_is_loopback_only() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let id = f.s.create(&f.key, json!({})).await;
    let ex = f.s.run(&id, probe(&[f.outside.addr()])).await;
    let out = stdout(&ex);
    assert!(!reached(&out, &f.outside.addr()), "{out}\n{ex}");
    assert!(out.contains("Network is unreachable"), "{out}");
}

/// Names decide, not addresses: three names of one address, one allowed by name, one by a
/// wildcard, one not; the DNS answers follow the rules (a denied name is REFUSED before the
/// host looks it up), an HTTP request carrying a denied Host to the allowed address gets the
/// relay's 403 saying why, a connection with no name reaches the address its allowed name was
/// resolved to, and every refusal is in the network log with its reason.
#[tokio::test]
async fn rules_decide_by_name() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let port = f.outside.port;
    let id = f
        .allowing(json!(["allowed.test", format!("*.wild.test:{port}")]))
        .await;
    let (resolv, _) = f.s.sh(&id, "grep ^nameserver /etc/resolv.conf").await;
    assert_eq!(resolv, "nameserver 127.100.0.1\n");
    let dns =
        f.s.run(
            &id,
            json!({"code": r#"import socket
for n in ['allowed.test', 'a.wild.test', 'other.test', 'nowhere.invalid']:
    try:
        print(n, sorted({a[4][0] for a in socket.getaddrinfo(n, 80, socket.AF_INET)}), flush=True)
    except OSError as e:
        print(n, 'error', flush=True)
"#}),
        )
        .await;
    let ip = f.outside.ip.to_string();
    assert_eq!(
        stdout(&dns),
        format!(
            "allowed.test ['{ip}']\na.wild.test ['{ip}']\nother.test error\nnowhere.invalid error\n"
        ),
        "{dns}"
    );
    let addr = f.outside.addr();
    for (host, want) in [
        ("allowed.test", "HTTP/1.1 200 OK | hello allowed.test"),
        ("a.wild.test", "HTTP/1.1 200 OK | hello a.wild.test"),
    ] {
        let ex = f.s.run(&id, http(&format!("{host}:{port}"), host)).await;
        assert_eq!(stdout(&ex).trim(), want, "{ex}");
    }
    // The allowed address, but the request names another host: refused by name.
    let ex = f.s.run(&id, http(&addr, "other.test")).await;
    let out = stdout(&ex);
    assert!(out.starts_with("HTTP/1.1 403 Forbidden |"), "{out}");
    assert!(
        out.contains("other.test") && out.contains("PATCH /v1/sandboxes/{id}/network"),
        "{out}"
    );
    // Opaque bytes to the address its allowed names were resolved to: decided as those names.
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(reached(&stdout(&ex), &addr), "{ex}");
    let log = network_log(&f.s, &id).await;
    assert!(log["egress"]["connections"].as_u64().unwrap() >= 3, "{log}");
    let refused = log["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|r| r["method"] == "dns" && r["destination"] == "other.test"),
        "{log}"
    );
    assert!(
        refused.iter().any(|r| r["method"] == "connect"
            && r["destination"].as_str().unwrap().starts_with("other.test")
            && r["reason"].as_str().unwrap().contains("other.test")),
        "{log}"
    );
    // Metered: the kill takes the last sample; the operator sees the totals in /metrics.
    let r =
        f.s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
    assert_eq!(r.status, 204, "{}", r.text);
    let r = f.s.admin("GET", "/v1/projects/net/usage", None).await;
    let u = r.body["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sandbox_id"] == json!(id))
        .unwrap_or_else(|| panic!("no usage for {id}: {}", r.text))
        .clone();
    assert!(u["egress_bytes_out"].as_u64().unwrap() > 100, "{u}");
    assert!(u["egress_bytes_in"].as_u64().unwrap() > 100, "{u}");
    assert!(u["egress_refused"].as_u64().unwrap() >= 3, "{u}");
    let m = f.s.admin("GET", "/metrics", None).await;
    assert!(
        m.text
            .contains("lizard_sandbox_egress_bytes_in_total{project=\"net\"}"),
        "{}",
        m.text
    );
}

/// `all` reaches the outside server, but not the host's own address (a service listening there
/// was not given to the sandbox), the private neighbour, the host's loopback (the API port: the
/// sandbox's 127.0.0.1 is its own), the metadata address, nor anything over UDP but DNS; an
/// address rule naming the private neighbour does reach it.
#[tokio::test]
async fn egress_all_reaches_outside_but_not_the_host() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let id =
        f.s.create(&f.key, json!({"network": {"egress": "all"}}))
            .await;
    let api_lo = format!("127.0.0.1:{}", f.api_port);
    let targets = [
        f.outside.addr(),
        f.outside.neighbour.clone(),
        f.host_service.clone(),
        api_lo.clone(),
        "169.254.169.254:80".to_string(),
    ];
    let ex = f.s.run(&id, probe(&targets)).await;
    let out = stdout(&ex);
    assert!(reached(&out, &f.outside.addr()), "{out}\n{ex}");
    for t in &targets[1..] {
        assert!(!reached(&out, t), "{t} reachable: {out}");
    }
    // UDP other than DNS is refused at once (ICMP admin-prohibited: ECONNREFUSED on the next
    // call), never sent.
    let udp =
        f.s.run(
            &id,
            json!({"code": format!(r#"import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.connect(('{}', 9999))
try:
    s.send(b'x')
    s.recv(10)
    print('udp answered')
except OSError as e:
    print('udp refused', type(e).__name__)
"#, f.outside.ip)}),
        )
        .await;
    let out = stdout(&udp);
    assert!(
        out.starts_with("udp refused") && !out.contains("timeout"),
        "{udp}"
    );
    let named = f.allowing(json!([f.outside.neighbour.clone()])).await;
    let ex =
        f.s.run(&named, probe(std::slice::from_ref(&f.outside.neighbour)))
            .await;
    assert!(reached(&stdout(&ex), &f.outside.neighbour), "{ex}");
}

/// Rules change on a running sandbox (`PATCH /v1/sandboxes/{id}/network`), from the next
/// connection on; they stay changed across a hibernation. A sandbox created without egress
/// cannot get it later (409); a project without `allow_egress` cannot open anything (403); a bad
/// rule is a typed 400 that changes nothing.
#[tokio::test]
async fn rules_change_live() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let addr = f.outside.addr();
    let id =
        f.s.create(&f.key, json!({"network": {"egress": {"allow": []}}}))
            .await;
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(!reached(&stdout(&ex), &addr), "{ex}");
    let patch = |body: Value| {
        let (s, key, id) = (&f.s, f.key.clone(), id.clone());
        async move {
            s.req(
                Some(&key),
                "PATCH",
                &format!("/v1/sandboxes/{id}/network"),
                Some(body),
            )
            .await
        }
    };
    let r = patch(json!({"egress": {"allow": [addr.clone()]}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["network"]["egress"]["allow"][0], addr.as_str());
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(reached(&stdout(&ex), &addr), "{ex}");
    let r = patch(json!({"egress": {"allow": ["1.2.3.4/40"]}})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["code"], "invalid_request");
    assert!(r.body["message"].as_str().unwrap().contains("1.2.3.4/40"));
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(
        reached(&stdout(&ex), &addr),
        "a bad rule changed the rules: {ex}"
    );
    // Kept across a hibernation (exact or not).
    for op in ["hibernate", "resume"] {
        let r = f.s.act(&id, op).await;
        assert_eq!(r.status, 200, "{op}: {}", r.text);
    }
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(reached(&stdout(&ex), &addr), "after a resume: {ex}");
    let r = patch(json!({"egress": "none"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["network"]["egress"], json!({"allow": []}));
    let ex = f.s.run(&id, probe(std::slice::from_ref(&addr))).await;
    assert!(!reached(&stdout(&ex), &addr), "{ex}");
    // Created without egress: 409.
    let plain = f.s.create(&f.key, json!({})).await;
    let r =
        f.s.req(
            Some(&f.key),
            "PATCH",
            &format!("/v1/sandboxes/{plain}/network"),
            Some(json!({"egress": "all"})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["code"], "conflict");
    // A project without allow_egress: 403 (an admin made its sandbox with egress).
    let other = f.s.project_key("closed").await;
    let r =
        f.s.post(
            "/v1/sandboxes",
            json!({"project": "closed", "network": {"egress": {"allow": []}}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let closed = r.body["sandbox_id"].as_str().unwrap().to_string();
    let r =
        f.s.req(
            Some(&other),
            "PATCH",
            &format!("/v1/sandboxes/{closed}/network"),
            Some(json!({"egress": "all"})),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.body["code"], "permission_denied");
}

/// The sandbox cannot change its network or step around the relay: no CAP_NET_ADMIN over its
/// namespace (loopback down, route delete fail), no nftables netlink socket, not even as its
/// root; the host's listeners' addresses are taken (not bindable) and a connection straight to
/// the relay's listener is refused; egress stays as configured afterwards.
#[tokio::test]
async fn network_rules_cannot_be_changed_from_inside() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let id = f.allowing(json!(["allowed.test"])).await;
    let code = r#"
import fcntl, socket, struct
def attempt(name, fn):
    try:
        fn()
        print(name, 'ALLOWED', flush=True)
    except OSError as e:
        print(name, 'failed', e.errno, flush=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt('link-down', lambda: fcntl.ioctl(s, 0x8914, struct.pack('16sH22x', b'lo', 0)))
attempt('route-delete', lambda: fcntl.ioctl(s, 0x890C, bytes(120)))
attempt('nft-netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12))
attempt('bind-dns', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('127.100.0.1', 53)))
attempt('bind-relay', lambda: socket.socket().bind(('127.100.0.1', 3143)))
"#;
    let ex = f.s.run(&id, json!({"code": code})).await;
    let out = stdout(&ex);
    assert_eq!(out.lines().count(), 5, "{out}\n{ex}");
    assert!(!out.contains("ALLOWED"), "{out}");
    let root =
        f.s.root_cmd(&id, &format!("python3 -c {}", shell_quote(code)))
            .await;
    let out = root["stdout"].as_str().unwrap_or_default();
    assert_eq!(out.lines().count(), 5, "as root: {root}");
    assert!(!out.contains("ALLOWED"), "as root: {out}");
    // Straight to the relay's listener: not a redirected connection, closed.
    let ex = f.s.run(&id, probe(&["127.100.0.1:3143".to_string()])).await;
    assert!(!reached(&stdout(&ex), "127.100.0.1:3143"), "{ex}");
    assert_only_allowed_test(&f.s, &id, &f.outside).await;
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Egress is for projects the admin allowed: a project key of another project gets a typed 403;
/// bad rules are a typed 400 naming the entry. Names are not resolved at create: a name that
/// does not resolve (yet) is a valid rule.
#[tokio::test]
async fn egress_needs_the_projects_permission() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let plain = f.s.project_key("plain").await;
    let r =
        f.s.post_as(
            &plain,
            "/v1/sandboxes",
            json!({"network": {"egress": "all"}}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.body["code"], "permission_denied");
    let r =
        f.s.post_as(
            &plain,
            "/v1/sandboxes",
            json!({"network": {"egress": "none"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    for (bad, names) in [
        (json!({"network": {"egress": {"allow": ["::1"]}}}), "::1"),
        (
            json!({"network": {"egress": {"allow": ["1.2.3.4/40"]}}}),
            "1.2.3.4/40",
        ),
        (
            json!({"network": {"egress": {"deny": ["a b.com"]}}}),
            "a b.com",
        ),
        (
            json!({"network": {"egress": {"allow": ["x.com:0"]}}}),
            "x.com:0",
        ),
        (json!({"network": {"egress": "sometimes"}}), "sometimes"),
        (json!({"network": {"egress": {"alow": []}}}), "alow"),
    ] {
        let r = f.s.post_as(&f.key, "/v1/sandboxes", bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.body["code"], "invalid_request");
        assert!(r.text.contains(names), "{bad}: {}", r.text);
    }
    let r =
        f.s.post_as(
            &f.key,
            "/v1/sandboxes",
            json!({"network": {"egress": {"allow": ["not-yet.invalid"]}}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// After a server restart the adopted sandbox has its egress again, with the same rules (the
/// new server makes its listeners in the sandbox's namespace and reinstalls the ruleset).
#[tokio::test]
async fn egress_survives_a_server_restart() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let id = f.allowing(json!(["allowed.test"])).await;
    let Fixture {
        s, key, outside, ..
    } = f;
    let hosts = format!("allowed.test={ip},other.test={ip}", ip = outside.ip);
    let dir = s.stop("-TERM");
    let s = Server::start_in(dir, &["--egress-host", &hosts]);
    let info = s
        .req(Some(&key), "GET", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(info.body["network"]["egress"]["allow"][0], "allowed.test");
    assert_only_allowed_test(&s, &id, &outside).await;
}

/// With CRIU, a sandbox with egress hibernates exactly like any other (its network namespace
/// holds nothing of its own: the restore and the server make it again), and its egress works after the resume.
#[tokio::test]
async fn egress_sandboxes_hibernate_exactly() {
    lizard_test_support::needs_root_and_criu!();
    let f = fixture().await;
    let id = f.allowing(json!(["allowed.test"])).await;
    f.s.run(&id, json!({"code": "x = 41"})).await;
    let r = f.s.act(&id, "hibernate").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["hibernation"]["method"], "criu", "{}", r.text);
    let r = f.s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ex = f.s.run(&id, json!({"code": "x + 1"})).await;
    assert_eq!(ex["results"][0]["data"]["text/plain"], "42", "{ex}");
    assert_only_allowed_test(&f.s, &id, &f.outside).await;
}

/// E2B's `network.allowOut`/`denyOut` (as E2B's SDKs send them at create) become the same
/// rules: with `denyOut: ["0.0.0.0/0"]` only `allowOut` is reached — by name too —; without
/// a network option an E2B sandbox of a project with egress reaches everything public.
#[tokio::test]
async fn e2b_network_options_map_onto_the_rules() {
    lizard_test_support::needs_root!();
    let f = fixture().await;
    let create = |body: String| {
        let (addr, key) = (f.s.addr.clone(), f.key.clone());
        async move {
            let (status, created) = raw(
                &addr,
                "POST",
                "/sandboxes",
                &[
                    ("X-API-Key", key.as_str()),
                    ("Content-Type", "application/json"),
                    ("Connection", "close"),
                ],
                &body,
            )
            .await;
            assert_eq!(status, 201, "{created}");
            created["sandboxID"].as_str().unwrap().to_string()
        }
    };
    let id = create(
        r#"{"templateID":"base","network":{"allowOut":["allowed.test"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":true}}"#
            .into(),
    )
    .await;
    let info = f.s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(
        info.body["network"]["egress"],
        json!({"allow": ["allowed.test"]}),
        "{}",
        info.text
    );
    assert_only_allowed_test(&f.s, &id, &f.outside).await;
    let open = create(r#"{"templateID":"base"}"#.into()).await;
    let ex = f.s.run(&open, probe(&[f.outside.addr()])).await;
    assert!(reached(&stdout(&ex), &f.outside.addr()), "{ex}");
    let deny = create(format!(
        r#"{{"templateID":"base","network":{{"denyOut":["{}"]}}}}"#,
        f.outside.ip
    ))
    .await;
    let ex = f.s.run(&deny, probe(&[f.outside.addr()])).await;
    assert!(!reached(&stdout(&ex), &f.outside.addr()), "{ex}");
    // E2B's `updateNetwork` (PUT …/network) replaces the rules live, with E2B's checks.
    let put = |id: String, body: &'static str| {
        let (addr, key) = (f.s.addr.clone(), f.key.clone());
        async move {
            raw(
                &addr,
                "PUT",
                &format!("/sandboxes/{id}/network"),
                &[
                    ("X-API-Key", key.as_str()),
                    ("Content-Type", "application/json"),
                    ("Connection", "close"),
                ],
                body,
            )
            .await
        }
    };
    let (status, body) = put(deny.clone(), r#"{"allowOut":["allowed.test"]}"#).await;
    assert_eq!(status, 400, "a name without deny-all: {body}");
    let (status, body) = put(deny.clone(), r#"{"denyOut":["allowed.test"]}"#).await;
    assert_eq!(status, 400, "a name in denyOut: {body}");
    let (status, _) = put(deny.clone(), "{}").await;
    assert_eq!(status, 204);
    let ex = f.s.run(&deny, probe(&[f.outside.addr()])).await;
    assert!(
        reached(&stdout(&ex), &f.outside.addr()),
        "opened again: {ex}"
    );
    let (status, _) = put(
        deny.clone(),
        r#"{"allowOut":["allowed.test"],"denyOut":["0.0.0.0/0"]}"#,
    )
    .await;
    assert_eq!(status, 204);
    assert_only_allowed_test(&f.s, &deny, &f.outside).await;
    let (status, _) = put("nosuchsandbox0000000".into(), "{}").await;
    assert_eq!(status, 404);
}

/// With CRIU, a sandbox with egress is snapshotted, cloned and forked exactly like any other: the
/// clone and the fork have the source's state (a variable, a thread still counting) and their own
/// egress under the source's rules (their own listeners and ruleset in their own namespaces).
#[tokio::test]
async fn egress_sandboxes_are_cloned_and_forked_exactly() {
    lizard_test_support::needs_root_and_criu!();
    let f = fixture().await;
    let id = f.allowing(json!(["allowed.test"])).await;
    let code = "import threading, time\nx = 41\nticks = [0]\ndef tick():\n    while True:\n        ticks[0] += 1\n        time.sleep(0.01)\nthreading.Thread(target=tick, daemon=True).start()";
    f.s.run(&id, json!({ "code": code })).await;
    let call = |method: &'static str, path: String, body: Value| {
        let (s, key) = (&f.s, f.key.clone());
        async move { s.req(Some(&key), method, &path, Some(body)).await }
    };
    let snap = call("POST", format!("/v1/sandboxes/{id}/snapshots"), json!({})).await;
    assert_eq!(snap.status, 201, "{}", snap.text);
    let snap_id = snap.body["snapshot_id"].as_str().unwrap().to_string();
    let clone = call(
        "POST",
        "/v1/sandboxes".into(),
        json!({ "snapshot_id": snap_id }),
    )
    .await;
    assert_eq!(clone.status, 201, "{}", clone.text);
    assert_eq!(clone.body["restore"]["method"], "criu", "{}", clone.text);
    let fork = call("POST", format!("/v1/sandboxes/{id}/fork"), json!({})).await;
    assert_eq!(fork.status, 201, "{}", fork.text);
    assert_eq!(fork.body["restore"]["method"], "criu", "{}", fork.text);
    for new in [&clone.body, &fork.body] {
        let new = new["sandbox_id"].as_str().unwrap().to_string();
        assert_eq!(
            f.s.admin("GET", &format!("/v1/sandboxes/{new}"), None)
                .await
                .body["network"]["egress"],
            json!({"allow": ["allowed.test"]})
        );
        let ex =
            f.s.run(
                &new,
                json!({"code": "a = ticks[0]\ntime.sleep(0.3)\nprint(x + 1, ticks[0] > a)"}),
            )
            .await;
        assert_eq!(stdout(&ex), "42 True\n", "{ex}");
        assert_only_allowed_test(&f.s, &new, &f.outside).await;
    }
    // The source keeps its own.
    assert_only_allowed_test(&f.s, &id, &f.outside).await;
}
