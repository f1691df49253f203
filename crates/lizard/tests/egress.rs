//! Egress policy: two TCP servers on a non-loopback address of the host, and one "outside" (in a
//! network namespace of its own behind a veth pair: an address that is not the host's, standing
//! in for the internet, which no test may depend on); sandboxes with no network option, an
//! allow-list of one of them, or `all`, try to reach them, the host's loopback (where the API
//! listens), slirp's host alias and the metadata address. slirp4netns itself runs as an
//! unprivileged host user with no capability left that matters.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// `CAP_NET_BIND_SERVICE`, the one capability slirp4netns's `--enable-sandbox` keeps on purpose.
const NET_BIND_SERVICE: u64 = 1 << 10;

/// The slirp4netns of sandbox `id`: the process of that name in the sandbox's cgroup (found
/// through the cgroup paths in its `runtime.json`).
fn slirp_pid(s: &Server, id: &str) -> u32 {
    let pids: Vec<u32> = sandbox_pids(s, id)
        .into_iter()
        .filter(|pid| comm(*pid) == "slirp4netns")
        .collect();
    assert_eq!(pids.len(), 1, "one slirp4netns in {id}'s cgroup: {pids:?}");
    pids[0]
}

/// A line of `/proc/<pid>/status`, e.g. `Uid` → `"0\t0\t0\t0"`.
fn status_field(pid: u32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{key}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

fn cap_set(pid: u32, key: &str) -> u64 {
    u64::from_str_radix(&status_field(pid, key), 16).unwrap()
}

/// slirp4netns of sandbox `id` runs with real, effective, saved (and file-system) uid `uid` and
/// gid `gid`, no supplementary groups, and once its `--enable-sandbox` has run (a moment after
/// the network is up) no capability but CAP_NET_BIND_SERVICE in any set and none ambient.
/// Returns its pid.
async fn assert_slirp_unprivileged(s: &Server, id: &str, uid: u32, gid: u32) -> u32 {
    let pid = slirp_pid(s, id);
    assert!(
        eventually(Duration::from_secs(10), || async {
            cap_set(pid, "CapEff") & !NET_BIND_SERVICE == 0
        })
        .await,
        "slirp4netns keeps capabilities: CapEff {:x}",
        cap_set(pid, "CapEff")
    );
    assert_eq!(
        status_field(pid, "Uid"),
        format!("{uid}\t{uid}\t{uid}\t{uid}")
    );
    assert_eq!(
        status_field(pid, "Gid"),
        format!("{gid}\t{gid}\t{gid}\t{gid}")
    );
    assert_eq!(status_field(pid, "Groups"), "");
    for set in ["CapEff", "CapPrm", "CapInh", "CapBnd"] {
        assert_eq!(
            cap_set(pid, set) & !NET_BIND_SERVICE,
            0,
            "{set} of slirp4netns: {:x}",
            cap_set(pid, set)
        );
    }
    assert_eq!(cap_set(pid, "CapAmb"), 0);
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    pid
}

/// A non-loopback IPv4 address of this host (the source address of a route to the outside,
/// else the first global address `ip` lists).
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
    let out = std::process::Command::new("ip")
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
            let _ = c.write_all(b"hello\n");
        }
    });
    port
}

/// Python that tries each `host:port` (2 s timeout each) and prints `host:port ok|fail`.
fn probe(targets: &[String]) -> Value {
    let code = format!(
        r#"import socket
for t in {targets:?}:
    h, p = t.rsplit(':', 1)
    try:
        s = socket.create_connection((h, int(p)), timeout=2)
        print(t, 'ok', flush=True)
        s.close()
    except OSError as e:
        print(t, 'fail', e.errno, flush=True)
"#
    );
    json!({"code": code, "language": "python", "timeout_ms": 60000})
}

fn reached(out: &str, target: &str) -> bool {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(target))
        .unwrap_or_else(|| panic!("{target} not probed: {out}"))
        .contains(" ok")
}

struct Fixture {
    s: Server,
    key: String,
    allowed: String,
    other: String,
    api: String,
}

async fn fixture() -> Fixture {
    let s = Server::start();
    let r = s
        .admin(
            "POST",
            "/v1/projects",
            Some(json!({"name": "net", "allow_egress": true})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let key = r.body["api_key"].as_str().unwrap().to_string();
    let ip = host_ipv4();
    let (a, b) = (greeter(ip), greeter(ip));
    let api = s.addr.rsplit(':').next().unwrap().to_string();
    Fixture {
        s,
        key,
        allowed: format!("{ip}:{a}"),
        other: format!("{ip}:{b}"),
        api,
    }
}

/// Without a network option a sandbox has loopback only: neither host server is reachable.
#[tokio::test]
async fn default_is_loopback_only() {
    let f = fixture().await;
    let id = f.s.create(&f.key, json!({})).await;
    let ex =
        f.s.run(&id, probe(&[f.allowed.clone(), f.other.clone()]))
            .await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(
        !reached(&out, &f.allowed) && !reached(&out, &f.other),
        "{out}"
    );
    f.s.kill_all().await;
}

/// An allow-list reaches its destination and nothing else: not the other server, not the
/// host's loopback (the API port, through slirp's alias 10.0.2.2), not the metadata address.
/// DNS points at slirp's resolver.
#[tokio::test]
async fn allow_list_reaches_only_its_destinations() {
    let f = fixture().await;
    let id =
        f.s.create(
            &f.key,
            json!({"network": {"egress": {"allow": [f.allowed.clone()]}}}),
        )
        .await;
    let info = f.s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(
        info.body["network"]["egress"]["allow"][0],
        f.allowed.as_str()
    );
    let api_alias = format!("10.0.2.2:{}", f.api);
    let api_lo = format!("127.0.0.1:{}", f.api);
    let ex =
        f.s.run(
            &id,
            probe(&[
                f.allowed.clone(),
                f.other.clone(),
                api_alias.clone(),
                api_lo.clone(),
                "169.254.169.254:80".into(),
            ]),
        )
        .await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(reached(&out, &f.allowed), "{out}\n{ex}");
    for t in [&f.other, &api_alias, &api_lo, "169.254.169.254:80"] {
        assert!(!reached(&out, t), "{t} reachable: {out}");
    }
    let (resolv, _) = f.s.sh(&id, "grep nameserver /etc/resolv.conf").await;
    assert_eq!(resolv, "nameserver 10.0.2.3\n");
    // By default slirp4netns runs as the last id of the sandbox's own host range (inside 65535,
    // which none of its processes runs as), so no two sandboxes' slirp4netns share a uid.
    let own = |id: &str| {
        let base = runtime_json(&f.s, id)["id_base"].as_u64().unwrap() as u32;
        base + 65_535
    };
    let first = own(&id);
    let slirp = assert_slirp_unprivileged(&f.s, &id, first, first).await;
    let other =
        f.s.create(&f.key, json!({"network": {"egress": "all"}}))
            .await;
    let second = own(&other);
    assert_ne!(first, second);
    assert_slirp_unprivileged(&f.s, &other, second, second).await;
    let uids: Vec<u32> = sandbox_pids(&f.s, &id)
        .into_iter()
        .filter(|p| *p != slirp)
        .filter_map(|p| {
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            line.split_whitespace().next()?.parse().ok()
        })
        .collect();
    assert!(
        !uids.is_empty() && !uids.contains(&first),
        "a process of the sandbox runs as its slirp4netns's uid: {uids:?}"
    );
    f.s.kill_all().await;
}

/// slirp4netns runs as the configured unprivileged host user (`--egress-uid/--egress-gid`), not
/// root: real/effective/saved uid and gid are those ids, no supplementary groups, no capability
/// left but CAP_NET_BIND_SERVICE, none ambient. Egress still works through it, and the
/// sandbox's kill (its cgroup's) still takes it down.
#[tokio::test]
async fn slirp4netns_runs_as_an_unprivileged_user() {
    let s = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--egress-uid", "99990", "--egress-gid", "99991"],
    );
    let ip = host_ipv4();
    let allowed = format!("{ip}:{}", greeter(ip));
    let id = s
        .create(
            &s.admin_key,
            json!({"network": {"egress": {"allow": [allowed.clone()]}}}),
        )
        .await;
    let pid = assert_slirp_unprivileged(&s, &id, 99_990, 99_991).await;
    let ex = s.run(&id, probe(std::slice::from_ref(&allowed))).await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(reached(&out, &allowed), "{out}\n{ex}");
    let r = s
        .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(
        eventually(Duration::from_secs(10), || async {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map_or(true, |c| c.trim() != "slirp4netns")
        })
        .await,
        "slirp4netns {pid} outlived its sandbox"
    );
    s.kill_all().await;
}

/// A TCP greeter in a network namespace of its own, reached from the host through a veth pair
/// on `<net>.<n>.0/30` (e.g. 198.18, the benchmarking range; 10.254, a private network): a
/// destination that is not one of the host's addresses. Removed (namespace, link, server) when
/// dropped.
struct Outside {
    netns: String,
    link: String,
    server: Child,
    /// A routed address (`<net>.<n>.6`, behind the veth peer): on no network of the host.
    addr: String,
    /// The veth peer's own address (`<net>.<n>.2`): a neighbour on the host's `<net>.<n>.0/30`.
    neighbour: String,
}

impl Outside {
    fn start(net: &str) -> Outside {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = (std::process::id() % 200) as u8 + N.fetch_add(1, Ordering::SeqCst) as u8;
        let netns = format!("lz-egress-{}-{n}", std::process::id());
        let link = format!("lzh{}{n}", std::process::id() % 10_000);
        let peer = format!("lzo{}{n}", std::process::id() % 10_000);
        let (host_ip, ns_ip) = (format!("{net}.{n}.1/30"), format!("{net}.{n}.2"));
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ip(&["netns", "add", &netns]);
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &netns]);
        ip(&["addr", "add", &host_ip, "dev", &link]);
        ip(&["link", "set", &link, "up"]);
        let ns_cidr = format!("{ns_ip}/30");
        ip(&["-n", &netns, "addr", "add", &ns_cidr, "dev", &peer]);
        ip(&["-n", &netns, "link", "set", &peer, "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        // A destination one hop away (as the internet is): on the peer's loopback, routed.
        let far_ip = format!("{net}.{n}.6");
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{far_ip}/32"),
            "dev",
            "lo",
        ]);
        ip(&[
            "route",
            "add",
            &format!("{far_ip}/32"),
            "via",
            &ns_ip,
            "dev",
            &link,
        ]);
        let code = "import socket\ns = socket.create_server(('0.0.0.0', 0))\nprint(s.getsockname()[1], flush=True)\nwhile True:\n    c, _ = s.accept()\n    c.sendall(b'hello\\n')\n    c.close()\n";
        let mut server = Command::new("ip")
            .args(["netns", "exec", &netns, "python3", "-c", code])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut port,
        )
        .unwrap();
        Outside {
            netns,
            link,
            server,
            addr: format!("{far_ip}:{}", port.trim()),
            neighbour: format!("{ns_ip}:{}", port.trim()),
        }
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// `all` reaches a destination outside the host, but not the host's own addresses (a service
/// listening there was not given to the sandbox), a neighbour on one of the host's networks
/// (even a public one: 198.18.n.0/30 here), a private network (the host's LAN is not the
/// internet), the host's loopback or the metadata address; an allow-list that names a private
/// address (or a host address, above) does reach it.
#[tokio::test]
async fn egress_all_reaches_outside_but_not_the_host() {
    let f = fixture().await;
    let outside = Outside::start("198.18");
    let private = Outside::start("10.254");
    let id =
        f.s.create(&f.key, json!({"network": {"egress": "all"}}))
            .await;
    let api_alias = format!("10.0.2.2:{}", f.api);
    let api_lo = format!("127.0.0.1:{}", f.api);
    let ex =
        f.s.run(
            &id,
            probe(&[
                outside.addr.clone(),
                outside.neighbour.clone(),
                private.addr.clone(),
                f.allowed.clone(),
                f.other.clone(),
                api_alias.clone(),
                api_lo.clone(),
                "169.254.169.254:80".into(),
                "127.0.0.1:8080".into(),
            ]),
        )
        .await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(reached(&out, &outside.addr), "{out}\n{ex}");
    for t in [
        &outside.neighbour,
        &private.addr,
        &f.allowed,
        &f.other,
        &api_alias,
        &api_lo,
        "169.254.169.254:80",
    ] {
        assert!(!reached(&out, t), "{t} reachable: {out}");
    }
    // The sandbox's own loopback still works (the agent's port), and so does DNS to slirp's
    // resolver (in 10.0.0.0/8): the answer may be an error, but it is an answer.
    assert!(reached(&out, "127.0.0.1:8080"), "{out}");
    let dns = f
        .s
        .run(
            &id,
            json!({"code": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(10)\ns.sendto(bytes.fromhex('abcd01000001000000000000096c6f63616c686f73740000010001'), ('10.0.2.3', 53))\nprint('dns answered', len(s.recv(512)) > 12)"}),
        )
        .await;
    assert_eq!(stdout(&dns), "dns answered True\n", "{dns}");
    // An allow-list may name the private destination.
    let named =
        f.s.create(
            &f.key,
            json!({"network": {"egress": {"allow": [private.addr.clone()]}}}),
        )
        .await;
    let ex =
        f.s.run(&named, probe(std::slice::from_ref(&private.addr)))
            .await;
    assert!(reached(&stdout(&ex), &private.addr), "{ex}");
    f.s.kill_all().await;
}

/// The sandbox cannot change its network: no CAP_NET_ADMIN over its namespace (interface down,
/// route delete fail), no nftables netlink socket; egress stays as configured afterwards.
#[tokio::test]
async fn network_rules_cannot_be_changed_from_inside() {
    let f = fixture().await;
    let id =
        f.s.create(
            &f.key,
            json!({"network": {"egress": {"allow": [f.allowed.clone()]}}}),
        )
        .await;
    let code = r#"
import fcntl, socket, struct
def attempt(name, fn):
    try:
        fn()
        print(name, 'ALLOWED', flush=True)
    except OSError as e:
        print(name, 'failed', e.errno, flush=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt('link-down', lambda: fcntl.ioctl(s, 0x8914, struct.pack('16sH22x', b'tap0', 0)))
attempt('route-delete', lambda: fcntl.ioctl(s, 0x890C, bytes(120)))
attempt('nft-netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12))
attempt('mtu', lambda: fcntl.ioctl(s, 0x8922, struct.pack('16si20x', b'tap0', 1280)))
"#;
    let ex = f.s.run(&id, json!({"code": code})).await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert_eq!(out.lines().count(), 4, "{out}\n{ex}");
    assert!(!out.contains("ALLOWED"), "{out}");
    let ex =
        f.s.run(&id, probe(&[f.allowed.clone(), f.other.clone()]))
            .await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(
        reached(&out, &f.allowed) && !reached(&out, &f.other),
        "{out}"
    );
    f.s.kill_all().await;
}

/// Egress is for projects the admin allowed: a project key of another project gets a typed 403;
/// bad allow-list entries are a typed 400.
#[tokio::test]
async fn egress_needs_the_projects_permission() {
    let f = fixture().await;
    let plain = f.s.project_key("plain").await;
    let r =
        f.s.req(
            Some(&plain),
            "POST",
            "/v1/sandboxes",
            Some(json!({"network": {"egress": "all"}})),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.body["code"], "permission_denied");
    // Asking for no egress is fine.
    let r =
        f.s.req(
            Some(&plain),
            "POST",
            "/v1/sandboxes",
            Some(json!({"network": {"egress": "none"}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    for bad in [
        json!({"network": {"egress": {"allow": ["::1"]}}}),
        json!({"network": {"egress": {"allow": ["1.2.3.4/40"]}}}),
        json!({"network": {"egress": {"allow": []}}}),
        json!({"network": {"egress": {"allow": ["no-such-host.invalid"]}}}),
        json!({"network": {"egress": "sometimes"}}),
    ] {
        let r =
            f.s.req(Some(&f.key), "POST", "/v1/sandboxes", Some(bad.clone()))
                .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.body["code"], "invalid_request");
    }
    f.s.kill_all().await;
}

/// slirp4netns is not tied to the server process: after a server restart the adopted sandbox
/// still has its egress (and still only its allow-list).
#[tokio::test]
async fn egress_survives_a_server_restart() {
    let f = fixture().await;
    let id =
        f.s.create(
            &f.key,
            json!({"network": {"egress": {"allow": [f.allowed.clone()]}}}),
        )
        .await;
    let (key, allowed, other) = (f.key.clone(), f.allowed.clone(), f.other.clone());
    let dir = f.s.stop("-TERM");
    let s = Server::start_in(dir, &[]);
    let info = s
        .req(Some(&key), "GET", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(info.body["network"]["egress"]["allow"][0], allowed.as_str());
    let ex = s.run(&id, probe(&[allowed.clone(), other.clone()])).await;
    let out = stdout(&ex);
    assert!(!out.is_empty(), "the probe printed nothing: {ex}");
    assert!(reached(&out, &allowed) && !reached(&out, &other), "{out}");
    s.kill_all().await;
}
