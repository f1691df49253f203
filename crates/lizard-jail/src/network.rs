//! Internet egress for a sandbox whose network namespace has only loopback: an nftables filter
//! installed *inside* the sandbox's network namespace, then `slirp4netns` (user-mode networking:
//! a tap device in the namespace, TCP/UDP re-originated as ordinary sockets of an unprivileged
//! host process; no bridge, no veth, no route onto the host network) attached to it.
//!
//! The filter (see [`ruleset`]) rejects, before anything leaves the namespace: the link-local range
//! 169.254.0.0/16 (cloud metadata), slirp's host alias 10.0.2.2 (slirp4netns also runs with
//! `--disable-host-loopback`), and for an allow-list everything but the allowed destinations and
//! DNS to slirp's resolver 10.0.2.3. The namespace is owned by the host's initial user
//! namespace, so nothing inside the sandbox has `CAP_NET_ADMIN` over it and the rules cannot be
//! changed from inside.
//!
//! slirp4netns runs with `--enable-sandbox` (its own mount namespace on an empty root, all
//! capabilities dropped once the tap is open) and `--enable-seccomp`. The caller puts it into the
//! sandbox's cgroup ([`Egress::pid`]), so the cgroup's kill takes it down with the sandbox and its
//! CPU counts as the sandbox's.
//!
//! Not here: which destinations a sandbox may reach (the server resolves and checks that), DNS
//! configuration inside the sandbox's root file system.

use std::io::{self, Write};
use std::net::Ipv4Addr;
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

/// slirp's DNS forwarder inside the sandbox.
pub const RESOLVER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// The nftables ruleset (input of `nft -f -`) for `policy`.
pub fn ruleset(policy: &Policy) -> String {
    let mut s = String::from(
        "table ip lizard {\n  chain output {\n    type filter hook output priority 0; policy accept;\n    oifname \"lo\" accept\n    ip daddr 169.254.0.0/16 reject\n    ip daddr 10.0.2.2 reject\n",
    );
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

/// Install `policy` in the network namespace of host pid `pid` and attach slirp4netns to it;
/// returns once the namespace has its default route. slirp4netns's output goes to `log`.
/// Blocking. On failure slirp4netns is killed.
pub fn attach(pid: i32, policy: &Policy, log: &Path) -> Result<Egress, NetworkError> {
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
        let _ = stdin.write_all(ruleset(policy).as_bytes());
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
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|source| NetworkError::Spawn {
            step: "opening the slirp4netns log",
            source,
        })?;
    let log2 = log.try_clone().map_err(|source| NetworkError::Spawn {
        step: "opening the slirp4netns log",
        source,
    })?;
    let mut child = Command::new("slirp4netns")
        .args([
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            "--enable-sandbox",
            "--enable-seccomp",
            // By path, not by pid: given a pid, slirp4netns also joins the process's user
            // namespace, which has no power over this (host-owned) network namespace.
            "--netns-type=path",
        ])
        .arg(format!("/proc/{pid}/ns/net"))
        .arg("tap0")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Not in the server's process group: a ^C to the server does not take the network down.
        .process_group(0)
        .spawn()
        .map_err(|source| NetworkError::Spawn {
            step: "running slirp4netns (install slirp4netns)",
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
            let r = ruleset(&p);
            assert!(r.contains("ip daddr 169.254.0.0/16 reject"), "{r}");
            assert!(r.contains("ip daddr 10.0.2.2 reject"), "{r}");
        }
        assert!(!ruleset(&Policy::All).contains("accept\n    ip protocol"));
    }

    #[test]
    fn allow_lists_accept_only_their_destinations() {
        let r = ruleset(&Policy::Allow(vec![
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
        ]));
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
