//! A sandbox's network namespace as the host sets it up for egress, and the host's sockets made
//! inside it. The namespace has only loopback; for a sandbox with egress the host installs there
//! a default route through `lo` and a generic nftables ruleset (both `lizard-egress`'s: the same
//! for every sandbox) that redirects every outbound TCP connection and DNS query to listeners of
//! the host's own, bound in the namespace ([`egress_in_netns_of`]); the package mirror's listener
//! is made the same way ([`tcp_listener_in_netns_of`]). Connections then leave from the host's
//! network namespace, made by the server after its rules decided (`lizard-egress`).
//!
//! The namespace is owned by the sandbox's user namespace, but no process of the sandbox ever
//! holds `CAP_NET_ADMIN` (it is in no bounding set), and seccomp refuses non-route netlink, so
//! neither the route nor the rules can be changed from inside; the host's listeners hold their
//! addresses, which the sandbox therefore cannot bind.
//!
//! Not here: which destinations a sandbox may reach, and serving the listeners (`lizard-egress`,
//! the server).

use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
}

/// The host's own IPv4 addresses (every interface's, loopback excluded), each with its prefix
/// length: the egress relay connects as a host process, so without a rule a sandbox with `all`
/// egress would reach every service listening on them (`0.0.0.0` binds included) and every
/// neighbour on the host's networks (the host's subnet may be public address space, e.g. a /24 at
/// a hosting provider).
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

/// A TCP listener of the host's, made inside the network namespace of the process behind `pidfd`
/// (a sandbox's PID 1, checked by the caller to be in the sandbox's cgroup) and bound to `addr`
/// there: a socket belongs to the namespace it is made in, so the sandbox's processes reach it at
/// `addr` on their own loopback while only the host holds it (the package-registry proxy,
/// `lizard-packages`). A short-lived thread of its own enters the namespace (`setns` on the pidfd;
/// host root may enter any) for the `socket`/`bind`/`listen` calls and ends: no other thread is
/// affected and none is left in the sandbox's namespace. Nothing of the sandbox is read; a port
/// already bound inside (the sandbox took it first) is an `AddrInUse` error. The listener is
/// non-blocking, for an async runtime.
pub fn tcp_listener_in_netns_of(
    pidfd: OwnedFd,
    addr: std::net::SocketAddrV4,
) -> io::Result<std::net::TcpListener> {
    std::thread::spawn(move || {
        nix::sched::setns(&pidfd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("entering the sandbox's network namespace: {e}"),
            )
        })?;
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the listener thread panicked")))
}

/// The host's egress listeners of one sandbox, made in its network namespace
/// ([`egress_in_netns_of`]): the relay's TCP listener and the DNS responder's UDP socket and TCP
/// listener. All non-blocking, for an async runtime.
#[derive(Debug)]
pub struct EgressSockets {
    pub relay: std::net::TcpListener,
    pub dns_udp: std::net::UdpSocket,
    pub dns_tcp: std::net::TcpListener,
}

/// How long `ip` or `nft` may take to configure a sandbox's namespace.
const TOOL_DEADLINE: Duration = Duration::from_secs(10);

/// Run a host tool (`ip`, `nft`) with `stdin`, within [`TOOL_DEADLINE`] (killed after it). The
/// calling thread's network namespace is the child's. Output is the tool's (not the sandbox's):
/// only its first 4 KiB of stderr are kept.
fn run_tool(step: &'static str, args: &[&str], stdin: &str) -> Result<(), NetworkError> {
    use std::io::Read;
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetworkError::Spawn { step, source })?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < TOOL_DEADLINE => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NetworkError::Tool {
                    step,
                    detail: format!("no answer within {TOOL_DEADLINE:?}"),
                });
            }
            Err(source) => return Err(NetworkError::Spawn { step, source }),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = Vec::new();
    if let Some(e) = child.stderr.take() {
        let _ = e.take(4096).read_to_end(&mut err);
    }
    Err(NetworkError::Tool {
        step,
        detail: format!("{status}: {}", String::from_utf8_lossy(&err).trim()),
    })
}

/// Configure the network namespace of the process behind `pidfd` (a sandbox's PID 1, checked by
/// the caller to be in the sandbox's cgroup) for egress through the host, and make the host's
/// listeners in it: `route` (arguments of `ip route replace`) and the nftables `ruleset` (both
/// from `lizard-egress`: the same for every sandbox) are installed by `ip` and `nft` run from a
/// short-lived thread that entered the namespace (`setns` on the pidfd; host root may enter any,
/// and no process of the sandbox holds `CAP_NET_ADMIN` there to undo them), then the sockets are
/// bound there: the relay's at `relay`, DNS (UDP and TCP) at `dns`. Nothing of the sandbox is
/// read; an address already bound inside (the sandbox took it first: possible only for a
/// restored or adopted one) is an error. Blocking, bounded by [`TOOL_DEADLINE`] per tool.
pub fn egress_in_netns_of(
    pidfd: OwnedFd,
    route: &[&str],
    ruleset: &str,
    relay: std::net::SocketAddrV4,
    dns: std::net::SocketAddrV4,
) -> Result<EgressSockets, NetworkError> {
    let mut ip = vec!["ip", "route", "replace"];
    ip.extend_from_slice(route);
    let ip: Vec<String> = ip.into_iter().map(String::from).collect();
    let ruleset = ruleset.to_string();
    let listening = |step: &'static str| move |source| NetworkError::Spawn { step, source };
    std::thread::spawn(move || {
        nix::sched::setns(&pidfd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
            NetworkError::Spawn {
                step: "entering the sandbox's network namespace",
                source: e.into(),
            }
        })?;
        let ip: Vec<&str> = ip.iter().map(String::as_str).collect();
        run_tool("adding the sandbox's default route (ip route)", &ip, "")?;
        run_tool(
            "installing the sandbox's nftables rules (nft; install nftables)",
            &["nft", "-f", "-"],
            &ruleset,
        )?;
        let relay = std::net::TcpListener::bind(relay)
            .map_err(listening("binding the egress relay in the sandbox"))?;
        let dns_udp = std::net::UdpSocket::bind(dns)
            .map_err(listening("binding the DNS responder (UDP) in the sandbox"))?;
        let dns_tcp = std::net::TcpListener::bind(dns)
            .map_err(listening("binding the DNS responder (TCP) in the sandbox"))?;
        for r in [
            relay.set_nonblocking(true),
            dns_udp.set_nonblocking(true),
            dns_tcp.set_nonblocking(true),
        ] {
            r.map_err(listening("making the egress sockets non-blocking"))?;
        }
        Ok(EgressSockets {
            relay,
            dns_udp,
            dns_tcp,
        })
    })
    .join()
    .unwrap_or_else(|_| {
        Err(NetworkError::Tool {
            step: "configuring the sandbox's network",
            detail: "the thread panicked".into(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Where an interface has a netmask, its prefix is read.
        assert!(
            addrs.iter().all(|(_, p)| *p > 0),
            "a prefix of 0 would mean the netmask was not read: {addrs:?}"
        );
    }
}
