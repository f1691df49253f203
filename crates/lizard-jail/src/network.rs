//! Internet egress for a sandbox whose network namespace has only loopback: an nftables filter
//! installed *inside* the sandbox's network namespace, then `slirp4netns` (user-mode networking:
//! a tap device in the namespace, TCP/UDP re-originated as ordinary sockets of an unprivileged
//! host process; no bridge, no veth, no route onto the host network) attached to it.
//!
//! The filter (see [`ruleset`]) rejects, before anything leaves the namespace: the link-local range
//! 169.254.0.0/16 (cloud metadata), slirp's host alias 10.0.2.2 (slirp4netns also runs with
//! `--disable-host-loopback`), and for an allow-list everything but the allowed destinations and
//! DNS to slirp's resolver 10.0.2.3. The namespace is owned by the sandbox's user
//! namespace, but no process of the sandbox ever holds `CAP_NET_ADMIN` (it is in no bounding
//! set), and seccomp refuses non-route netlink, so the rules cannot be changed from inside.
//!
//! slirp4netns never runs as root: it is executed as a dedicated unprivileged host user
//! ([`SlirpUser`]: real, effective and saved uid and gid, no supplementary groups,
//! `no_new_privs`) holding only the capabilities it needs to set up ([`slirp_capabilities`]), as
//! *ambient* capabilities. It gets the namespace as an inherited fd (`/proc/self/fd/3`), because
//! as another uid it may not open `/proc/<pid>/ns/net` of the (non-dumpable) agent. Its
//! `--enable-sandbox` (its own mount namespace on an empty root with `/etc` and `/run` read-only)
//! then drops every capability but `CAP_NET_BIND_SERVICE` from all sets once the tap is open,
//! before it handles a single packet, and `--enable-seccomp` limits its system calls. Run as
//! non-root, slirp4netns 1.x first calls `setegid(0)`/`seteuid(0)` (it expects to be inside a
//! rootless user namespace); a seccomp filter ([`no_switch_to_root_filter`]) turns exactly those
//! two calls into no-ops, which without `CAP_SETUID`/`CAP_SETGID` would only have failed. The
//! caller puts it into the sandbox's cgroup ([`Egress::pid`]), so the cgroup's kill takes it
//! down with the sandbox and its CPU counts as the sandbox's; its log is opened here, by root,
//! and handed over as stdout/stderr.
//!
//! Not here: which destinations a sandbox may reach (the server resolves and checks that), DNS
//! configuration inside the sandbox's root file system, choosing the slirp user's ids (the
//! server's configuration).

use crate::sys::{self, cap};
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One allowed destination: `addr/prefix`, optionally one TCP/UDP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub port: Option<u16>,
}

/// The policy to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Every IPv4 destination except the blocked ranges.
    All,
    /// Only these (plus DNS to slirp's resolver).
    Allow(Vec<Destination>),
}

/// Failures of setting up egress; each names the step.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("{step}: {source}")]
    Spawn {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{step} failed: {detail}")]
    Tool { step: &'static str, detail: String },
    #[error("slirp4netns did not configure the sandbox's network within {0:?}")]
    NotReady(Duration),
}

/// The unprivileged host user slirp4netns runs as. It should be used by nothing else: not root,
/// not `nobody`, not a uid or gid of the sandboxes' mapped range (see the server's
/// configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlirpUser {
    pub uid: u32,
    pub gid: u32,
}

/// The capabilities slirp4netns is started with (bit n = capability n), as ambient capabilities
/// of `user`: `CAP_SYS_ADMIN` (join the sandbox's network namespace, which the host's user
/// namespace owns; `--enable-sandbox`'s unshare, mounts and pivot_root), `CAP_NET_ADMIN` (create
/// and configure the tap), `CAP_SETPCAP` (`--enable-sandbox` drops the bounding set),
/// `CAP_NET_BIND_SERVICE` (`--enable-sandbox` keeps it, and may only keep what it has), and
/// `CAP_DAC_OVERRIDE` only if `/dev/net/tun` is not readable and writable by `user` (it is
/// `0666` on most hosts, `0600` on some).
pub fn slirp_capabilities(user: SlirpUser) -> u64 {
    let mut caps = [
        cap::SYS_ADMIN,
        cap::NET_ADMIN,
        cap::SETPCAP,
        cap::NET_BIND_SERVICE,
    ]
    .iter()
    .fold(0u64, |m, c| m | 1 << c);
    if !tun_accessible(user) {
        caps |= 1 << cap::DAC_OVERRIDE;
    }
    caps
}

/// Whether `/dev/net/tun`'s mode bits let `user` open it read-write.
fn tun_accessible(user: SlirpUser) -> bool {
    let Ok(m) = std::fs::metadata("/dev/net/tun") else {
        // slirp4netns will say what is wrong with it.
        return true;
    };
    let mode = m.mode();
    let rw = |shift: u32| (mode >> shift) & 0o6 == 0o6;
    rw(0) || (m.gid() == user.gid && rw(3)) || (m.uid() == user.uid && rw(6))
}

/// A seccomp filter (BPF) that makes `setresuid(-1, 0, -1)` and `setresgid(-1, 0, -1)` — glibc's
/// `seteuid(0)` and `setegid(0)` — return success without doing anything, and allows every other
/// call. slirp4netns 1.x, started as non-root with `--enable-sandbox`, calls those two after
/// receiving the tap (meant for a rootless user namespace, where it would be root) and gives up
/// if they fail; without `CAP_SETUID`/`CAP_SETGID` they can only fail, so the filter changes
/// nothing but their return value.
pub fn no_switch_to_root_filter() -> Result<Vec<seccompiler::sock_filter>, NetworkError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let fail = |e: String| NetworkError::Tool {
        step: "compiling slirp4netns's seccomp filter",
        detail: e,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| fail(e.to_string()))?;
    let unchanged = u64::from(u32::MAX);
    let rule = || -> Result<SeccompRule, seccompiler::BackendError> {
        let eq = |arg, value| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        };
        SeccompRule::new(vec![eq(0, unchanged)?, eq(1, 0)?, eq(2, unchanged)?])
    };
    let rules = BTreeMap::from([
        (
            libc::SYS_setresuid,
            vec![rule().map_err(|e| fail(e.to_string()))?],
        ),
        (
            libc::SYS_setresgid,
            vec![rule().map_err(|e| fail(e.to_string()))?],
        ),
    ]);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(0), arch)
        .map_err(|e| fail(e.to_string()))?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| fail(e.to_string()))?;
    Ok(program)
}

/// Make `cmd`'s program run as `user` with exactly `caps` (bit n = capability n) as ambient
/// capabilities and `filter` installed (see `sys::become_user_with_ambient_caps`). Must be
/// spawned by root.
fn run_as(cmd: &mut Command, user: SlirpUser, caps: u64, filter: Vec<seccompiler::sock_filter>) {
    let SlirpUser { uid, gid } = user;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // `become_user_with_ambient_caps`, which makes system calls and nothing else (async-signal-
    // safe, no allocation, no locks); `filter` was built before the fork and is moved into the
    // closure, so it lives as long as the hook.
    unsafe {
        cmd.pre_exec(move || sys::become_user_with_ambient_caps(uid, gid, caps, &filter));
    }
}

/// What `all` does not include: "this network" (RFC 791), the private networks (RFC 1918), the
/// shared address space of carrier-grade NAT (RFC 6598) — the host's LAN and whatever is behind
/// it are not the internet —, multicast (224.0.0.0/4: the host's LAN again, and routers'
/// protocols) and the reserved 240.0.0.0/4, which holds the limited broadcast 255.255.255.255. An
/// allow-list may name addresses there.
pub const NOT_INTERNET: [&str; 7] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// A host interface's subnet shorter than this is refused as its address alone: a /0–/7 "subnet"
/// is no LAN, and refusing it would refuse the internet.
pub const SHORTEST_HOST_SUBNET: u8 = 8;

/// slirp's DNS forwarder inside the sandbox.
pub const RESOLVER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// The host's own IPv4 addresses (every interface's, loopback excluded), each with its prefix
/// length: slirp4netns re-originates connections as a host process, so without a rule a sandbox
/// with `all` egress would reach every service listening on them (`0.0.0.0` binds included) and
/// every neighbour on the host's networks (the host's subnet may be public address space, e.g. a
/// /24 at a hosting provider, which [`NOT_INTERNET`] does not cover).
pub fn host_addresses() -> Vec<(Ipv4Addr, u8)> {
    let mut out: Vec<(Ipv4Addr, u8)> = nix::ifaddrs::getifaddrs()
        .map(|addrs| {
            addrs
                .filter_map(|a| {
                    let ip = a.address?.as_sockaddr_in()?.ip();
                    let prefix = a
                        .netmask
                        .and_then(|m| m.as_sockaddr_in().map(|m| u32::from(m.ip()).leading_ones()))
                        .unwrap_or(32) as u8;
                    Some((ip, prefix))
                })
                .filter(|(ip, _)| !ip.is_loopback() && !ip.is_unspecified())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// What `all` refuses besides the metadata range and slirp's host alias: each host address, its
/// subnet (unless shorter than [`SHORTEST_HOST_SUBNET`]) and [`NOT_INTERNET`], as CIDRs with the
/// ones inside another left out (nftables refuses overlapping intervals in a set; CIDRs either
/// nest or are disjoint, so what is left is disjoint), in address order.
fn refused_under_all(host: &[(Ipv4Addr, u8)]) -> Vec<(Ipv4Addr, u8)> {
    let mut nets: Vec<(Ipv4Addr, u8)> = Vec::new();
    for &(ip, prefix) in host {
        nets.push((ip, 32));
        if (SHORTEST_HOST_SUBNET..32).contains(&prefix) {
            nets.push((masked(ip, prefix), prefix));
        }
    }
    for n in NOT_INTERNET {
        let (a, p) = n.split_once('/').expect("a CIDR");
        nets.push((a.parse().expect("an address"), p.parse().expect("a prefix")));
    }
    let inside = |(a, p): (Ipv4Addr, u8), (b, q): (Ipv4Addr, u8)| q <= p && masked(a, q) == b;
    let mut out: Vec<(Ipv4Addr, u8)> = Vec::new();
    for (i, &n) in nets.iter().enumerate() {
        // Inside another (the first of equal ones is kept).
        let covered = nets
            .iter()
            .enumerate()
            .any(|(j, &m)| j != i && inside(n, m) && (n != m || j < i));
        if !covered {
            out.push(n);
        }
    }
    out.sort();
    out
}

/// The nftables ruleset (input of `nft -f -`) for `policy`; under [`Policy::All`] the addresses
/// in `host` (the host's own with their prefixes, [`host_addresses`]: the address and its subnet)
/// and [`NOT_INTERNET`] are refused too — an allow-list reaches one only if it names it.
pub fn ruleset(policy: &Policy, host: &[(Ipv4Addr, u8)]) -> String {
    let mut s = String::from(
        "table ip lizard {\n  chain output {\n    type filter hook output priority 0; policy accept;\n    oifname \"lo\" accept\n    ip daddr 169.254.0.0/16 reject\n    ip daddr 10.0.2.2 reject\n",
    );
    if matches!(policy, Policy::All) {
        // DNS to slirp's resolver (in 10.0.0.0/8, refused next), then the host's own addresses
        // and networks, and the networks that are not the internet.
        s.push_str(&format!("    ip daddr {RESOLVER} udp dport 53 accept\n"));
        s.push_str(&format!("    ip daddr {RESOLVER} tcp dport 53 accept\n"));
        let set = refused_under_all(host)
            .iter()
            .map(|&(a, p)| {
                if p == 32 {
                    a.to_string()
                } else {
                    format!("{a}/{p}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "    ip daddr {{ {set} }} ip protocol tcp reject with tcp reset\n    ip daddr {{ {set} }} reject\n"
        ));
    }
    if let Policy::Allow(dests) = policy {
        s.push_str(&format!("    ip daddr {RESOLVER} udp dport 53 accept\n"));
        s.push_str(&format!("    ip daddr {RESOLVER} tcp dport 53 accept\n"));
        for d in dests {
            let net = format!("{}/{}", masked(d.addr, d.prefix), d.prefix);
            match d.port {
                Some(p) => {
                    s.push_str(&format!("    ip daddr {net} tcp dport {p} accept\n"));
                    s.push_str(&format!("    ip daddr {net} udp dport {p} accept\n"));
                }
                None => s.push_str(&format!("    ip daddr {net} accept\n")),
            }
        }
        // Refused at once rather than a connect that hangs until its timeout.
        s.push_str("    ip protocol tcp reject with tcp reset\n    reject\n");
    }
    s.push_str("  }\n}\n");
    s
}

fn masked(a: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    Ipv4Addr::from(u32::from(a) & mask)
}

/// A running slirp4netns.
#[derive(Debug)]
pub struct Egress {
    child: Child,
}

impl Egress {
    /// Host pid of slirp4netns (put it into the sandbox's cgroup).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait for slirp4netns to exit (blocking): it does when the sandbox's cgroup is killed.
    pub fn wait(mut self) -> io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}

/// Install `policy` in the network namespace of host pid `pid` and attach slirp4netns to it, run
/// as `user` (see the module doc); returns once the namespace has its default route.
/// slirp4netns's output goes to `log`. Blocking. On failure slirp4netns is killed.
pub fn attach(
    pid: i32,
    policy: &Policy,
    log: &Path,
    user: SlirpUser,
) -> Result<Egress, NetworkError> {
    let netns = format!("--net=/proc/{pid}/ns/net");
    let mut nft = Command::new("nsenter")
        .args([netns.as_str(), "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetworkError::Spawn {
            step: "running nsenter nft (install nftables)",
            source,
        })?;
    if let Some(mut stdin) = nft.stdin.take() {
        let _ = stdin.write_all(ruleset(policy, &host_addresses()).as_bytes());
    }
    let out = nft
        .wait_with_output()
        .map_err(|source| NetworkError::Spawn {
            step: "running nft",
            source,
        })?;
    if !out.status.success() {
        return Err(NetworkError::Tool {
            step: "installing the sandbox's nftables rules",
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    // Read-write and non-blocking, like the agent's log (`SandboxSpec::log_path`): `log` may be a
    // FIFO the server drains; slirp4netns must neither block on it nor die of SIGPIPE.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(log)
        .map_err(|source| NetworkError::Spawn {
            step: "opening the slirp4netns log",
            source,
        })?;
    let log2 = log.try_clone().map_err(|source| NetworkError::Spawn {
        step: "opening the slirp4netns log",
        source,
    })?;
    let netns: OwnedFd = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|source| NetworkError::Spawn {
            step: "opening the sandbox's network namespace",
            source,
        })?
        .into();
    let caps = slirp_capabilities(user);
    let filter = no_switch_to_root_filter()?;
    let mut cmd = Command::new("slirp4netns");
    cmd.args([
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        // By path, not by pid: given a pid, slirp4netns would also join the sandbox's user
        // namespace; it keeps its own (host) capabilities instead. The path is an fd we opened,
        // so slirp4netns need not be allowed to open the agent's /proc entries.
        "--netns-type=path",
        "/proc/self/fd/3",
        "tap0",
    ])
    .stdin(Stdio::null())
    .stdout(log)
    .stderr(log2)
    // Not in the server's process group: a ^C to the server does not take the network down.
    .process_group(0);
    crate::process::map_fds(&mut cmd, vec![(netns, 3)]);
    run_as(&mut cmd, user, caps, filter);
    let spawned = cmd.spawn();
    // The parent's copy of the namespace fd closes with `cmd`.
    drop(cmd);
    let mut child = spawned.map_err(|source| NetworkError::Spawn {
        step: "starting slirp4netns as the egress user (install slirp4netns; the server must be root)",
        source,
    })?;
    let limit = Duration::from_secs(5);
    let start = Instant::now();
    let route = format!("/proc/{pid}/net/route");
    loop {
        // The default route is slirp4netns's last configuration step.
        let ready = std::fs::read_to_string(&route)
            .map(|t| {
                t.lines()
                    .skip(1)
                    .any(|l| l.split('\t').nth(1) == Some("00000000"))
            })
            .unwrap_or(false);
        if ready {
            return Ok(Egress { child });
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NetworkError::Tool {
                step: "slirp4netns",
                detail: format!("exited with {status} (see its log)"),
            });
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NetworkError::NotReady(limit));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_block_metadata_and_host_alias_always() {
        for p in [Policy::All, Policy::Allow(vec![])] {
            let r = ruleset(&p, &[]);
            assert!(r.contains("ip daddr 169.254.0.0/16 reject"), "{r}");
            assert!(r.contains("ip daddr 10.0.2.2 reject"), "{r}");
        }
        assert!(!ruleset(&Policy::All, &[]).contains("accept\n    ip protocol"));
    }

    #[test]
    fn all_refuses_the_hosts_own_addresses_and_private_networks() {
        let host = [
            (Ipv4Addr::new(10, 0, 0, 5), 24),
            (Ipv4Addr::new(192, 168, 1, 2), 24),
        ];
        let r = ruleset(&Policy::All, &host);
        // The host's addresses and subnets here lie inside private networks: left out of the set.
        let set = "{ 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 172.16.0.0/12, 192.168.0.0/16, 224.0.0.0/4, 240.0.0.0/4 }";
        assert!(
            r.contains(&format!(
                "ip daddr {set} ip protocol tcp reject with tcp reset"
            )),
            "{r}"
        );
        assert!(r.contains(&format!("ip daddr {set} reject\n")), "{r}");
        // DNS to slirp's resolver (in 10.0.0.0/8) is accepted before.
        let dns = r.find("ip daddr 10.0.2.3 udp dport 53 accept").unwrap();
        assert!(dns < r.find(set).unwrap(), "{r}");
        // An allow-list refuses everything it does not name anyway.
        let a = ruleset(&Policy::Allow(vec![]), &host);
        assert!(!a.contains("10.0.0.5"), "{a}");
    }

    #[test]
    fn all_refuses_the_hosts_public_subnets_multicast_and_broadcast() {
        // A public /24 the host sits in, a point-to-point /32, a /30 inside another public
        // network the host also has, and an absurd /4 (only its address is refused).
        let host = [
            (Ipv4Addr::new(203, 0, 113, 7), 24),
            (Ipv4Addr::new(198, 51, 100, 9), 32),
            (Ipv4Addr::new(203, 0, 113, 130), 30),
            (Ipv4Addr::new(44, 1, 2, 3), 4),
        ];
        let got = refused_under_all(&host);
        let want: Vec<(Ipv4Addr, u8)> = [
            ("0.0.0.0", 8),
            ("10.0.0.0", 8),
            ("44.1.2.3", 32),
            ("100.64.0.0", 10),
            ("172.16.0.0", 12),
            ("192.168.0.0", 16),
            ("198.51.100.9", 32),
            ("203.0.113.0", 24),
            ("224.0.0.0", 4),
            ("240.0.0.0", 4),
        ]
        .iter()
        .map(|(a, p)| (a.parse().unwrap(), *p))
        .collect();
        assert_eq!(got, want);
        let r = ruleset(&Policy::All, &host);
        assert!(
            r.contains("203.0.113.0/24, 224.0.0.0/4, 240.0.0.0/4 }"),
            "{r}"
        );
        assert!(r.contains("44.1.2.3, "), "{r}");
        // No two elements overlap (nftables would refuse the set).
        for (i, &(a, p)) in got.iter().enumerate() {
            for &(b, q) in &got[i + 1..] {
                let m = p.min(q);
                assert_ne!(masked(a, m), masked(b, m), "{a}/{p} overlaps {b}/{q}");
            }
        }
        // 255.255.255.255 and multicast are in what is refused.
        let covers = |ip: Ipv4Addr| got.iter().any(|&(n, p)| masked(ip, p) == n);
        for ip in [
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "203.0.113.200",
        ] {
            assert!(covers(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "203.0.114.1", "198.51.100.10", "44.1.2.4"] {
            assert!(!covers(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn host_addresses_are_this_hosts_non_loopback_ones() {
        let addrs = host_addresses();
        assert!(addrs
            .iter()
            .all(|(a, p)| !a.is_loopback() && !a.is_unspecified() && *p <= 32));
        // The address a route to the outside would use is one of them.
        let udp = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if udp.connect("192.0.2.200:9").is_ok() {
            if let Ok(std::net::SocketAddr::V4(me)) = udp.local_addr() {
                assert!(
                    addrs.iter().any(|(a, _)| a == me.ip()),
                    "{me} not in {addrs:?}"
                );
            }
        }
        // This host's eth0 is 192.0.2.2/24 (a documentation range, so not in NOT_INTERNET):
        // where an interface has a netmask, its prefix is read.
        assert!(
            addrs.iter().all(|(_, p)| *p > 0),
            "a prefix of 0 would mean the netmask was not read: {addrs:?}"
        );
    }

    #[test]
    fn allow_lists_accept_only_their_destinations() {
        let r = ruleset(
            &Policy::Allow(vec![
                Destination {
                    addr: Ipv4Addr::new(10, 1, 2, 3),
                    prefix: 24,
                    port: None,
                },
                Destination {
                    addr: Ipv4Addr::new(1, 2, 3, 4),
                    prefix: 32,
                    port: Some(443),
                },
            ]),
            &[(Ipv4Addr::new(10, 1, 2, 3), 24)],
        );
        assert!(r.contains("ip daddr 10.1.2.0/24 accept"), "{r}");
        assert!(
            r.contains("ip daddr 1.2.3.4/32 tcp dport 443 accept"),
            "{r}"
        );
        assert!(r.contains("ip daddr 10.0.2.3 udp dport 53 accept"), "{r}");
        // The last rules reject the rest, after every accept.
        assert!(r.contains("    reject\n  }"), "{r}");
        assert!(r.rfind("reject").unwrap() > r.rfind("accept").unwrap());
    }

    /// The credentials slirp4netns gets, on a program that reports them: all ids switched, no
    /// groups, exactly the given ambient capabilities, `no_new_privs`; `seteuid(0)`/`setegid(0)`
    /// "succeed" without changing anything, any other switch to root still fails. Needs root.
    #[test]
    fn run_as_switches_user_keeps_only_the_given_caps_and_fakes_only_seteuid_0() {
        let user = SlirpUser {
            uid: 99_990,
            gid: 99_991,
        };
        let caps = 1 << cap::NET_ADMIN;
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "import os\n\
             os.setegid(0); os.seteuid(0)\n\
             print(os.getresuid(), os.getresgid(), os.getgroups())\n\
             for f in (lambda: os.setresuid(0, 0, 0), lambda: os.setuid(0), lambda: os.setresgid(0, 0, 0), lambda: os.setresuid(-1, 1, -1)):\n\
             \x20   try: f(); print('switched')\n\
             \x20   except PermissionError: print('denied')\n\
             print(open('/proc/self/status').read())",
        ])
        .stdout(Stdio::piped());
        run_as(&mut cmd, user, caps, no_switch_to_root_filter().unwrap());
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("(99990, 99990, 99990) (99991, 99991, 99991) []"),
            "{text}"
        );
        for _ in 0..4 {
            assert_eq!(lines.next(), Some("denied"), "{text}");
        }
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {k}: {text}"))
        };
        for set in ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:", "CapBnd:"] {
            assert_eq!(field(set), format!("{caps:016x}"), "{set} {text}");
        }
        assert_eq!(field("NoNewPrivs:"), "1");
        assert_eq!(field("Seccomp:"), "2");
    }

    #[test]
    fn masks() {
        assert_eq!(masked(Ipv4Addr::new(10, 1, 2, 3), 0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(
            masked(Ipv4Addr::new(10, 1, 2, 3), 16),
            Ipv4Addr::new(10, 1, 0, 0)
        );
        assert_eq!(
            masked(Ipv4Addr::new(10, 1, 2, 3), 32),
            Ipv4Addr::new(10, 1, 2, 3)
        );
    }
}
