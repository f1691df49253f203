//! A create request's `network.egress` → the policy `lizard_jail::network` installs: validates
//! every allow-list entry (`1.2.3.4`, `1.2.3.4:443`, `10.0.0.0/8`, `example.com`,
//! `example.com:443`) and resolves host names to IPv4 addresses once, at create time.
//!
//! **TTL limitation:** a host name's addresses are those of create time; if they change while
//! the sandbox runs, the new ones are not allowed. The resolved names are also written to the
//! sandbox's `/etc/hosts`, so code inside connects to the addresses that are allowed.
//!
//! Not here: whether the project may have egress (the API checks), installing the rules and
//! starting slirp4netns (`lizard_jail::network`).

use crate::sandboxes::SandboxError;
use lizard_jail::network::{Destination, Policy};
use lizard_proto::Egress;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// Most entries in an allow-list.
pub const MAX_ALLOW: usize = 64;

/// How long resolving all of an allow-list's host names may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A resolved policy and the host names it resolved (for the sandbox's `/etc/hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub policy: Policy,
    pub hosts: Vec<(String, Ipv4Addr)>,
}

/// One allow-list entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Net(Destination),
    Host { name: String, port: Option<u16> },
}

fn invalid(entry: &str, why: &str) -> SandboxError {
    SandboxError::Invalid(format!("network.egress.allow: {entry:?}: {why}"))
}

fn parse(entry: &str) -> Result<Entry, SandboxError> {
    let e = entry.trim();
    if e.is_empty() || e.len() > 260 {
        return Err(invalid(entry, "empty or too long"));
    }
    if e.contains('[') || e.matches(':').count() > 1 {
        return Err(invalid(
            entry,
            "IPv6 is not supported (egress is IPv4 only)",
        ));
    }
    if let Some((addr, prefix)) = e.split_once('/') {
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| invalid(entry, "a CIDR needs an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| invalid(entry, "the prefix length must be 0-32"))?;
        return Ok(Entry::Net(Destination {
            addr,
            prefix,
            port: None,
        }));
    }
    if let Ok(sa) = e.parse::<SocketAddrV4>() {
        if sa.port() == 0 {
            return Err(invalid(entry, "port 0"));
        }
        return Ok(Entry::Net(Destination {
            addr: *sa.ip(),
            prefix: 32,
            port: Some(sa.port()),
        }));
    }
    if let Ok(addr) = e.parse::<Ipv4Addr>() {
        return Ok(Entry::Net(Destination {
            addr,
            prefix: 32,
            port: None,
        }));
    }
    let (name, port) = match e.rsplit_once(':') {
        Some((n, p)) => {
            let p: u16 = p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| invalid(entry, "the port must be 1-65535"))?;
            (n, Some(p))
        }
        None => (e, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.len() > 253 || !name.split('.').all(label_ok) || name.parse::<Ipv4Addr>().is_ok() {
        return Err(invalid(entry, "not a host name, IPv4 address or CIDR"));
    }
    Ok(Entry::Host {
        name: name.to_ascii_lowercase(),
        port,
    })
}

/// Validate and resolve `egress`; `None` for no egress. Host names that do not resolve to any
/// IPv4 address are an invalid request.
pub async fn resolve(egress: &Egress) -> Result<Option<Resolved>, SandboxError> {
    let list = match egress {
        Egress::None => return Ok(None),
        Egress::All => {
            return Ok(Some(Resolved {
                policy: Policy::All,
                hosts: Vec::new(),
            }))
        }
        Egress::Allow(list) => list,
    };
    if list.is_empty() || list.len() > MAX_ALLOW {
        return Err(SandboxError::Invalid(format!(
            "network.egress.allow must have 1-{MAX_ALLOW} entries"
        )));
    }
    let entries = list
        .iter()
        .map(|e| parse(e))
        .collect::<Result<Vec<_>, _>>()?;
    // All names at once, within one deadline (not 5 s per name).
    let mut lookups = tokio::task::JoinSet::new();
    for (i, entry) in entries.iter().enumerate() {
        if let Entry::Host { name, .. } = entry {
            let name = name.clone();
            lookups.spawn(async move {
                let addrs: Vec<Ipv4Addr> = match tokio::net::lookup_host((name.as_str(), 0)).await {
                    Ok(it) => it
                        .filter_map(|a| match a.ip() {
                            std::net::IpAddr::V4(v4) => Some(v4),
                            std::net::IpAddr::V6(_) => None,
                        })
                        .collect(),
                    Err(_) => Vec::new(),
                };
                (i, addrs)
            });
        }
    }
    let mut resolved: Vec<Vec<Ipv4Addr>> = vec![Vec::new(); entries.len()];
    let collect = async {
        while let Some(Ok((i, addrs))) = lookups.join_next().await {
            resolved[i] = addrs;
        }
    };
    if tokio::time::timeout(RESOLVE_TIMEOUT, collect)
        .await
        .is_err()
    {
        return Err(SandboxError::Invalid(format!(
            "network.egress.allow: resolving the host names took over {RESOLVE_TIMEOUT:?}"
        )));
    }
    let (mut dests, mut hosts) = (Vec::new(), Vec::new());
    for ((entry, raw), addrs) in entries.into_iter().zip(list).zip(resolved) {
        match entry {
            Entry::Net(d) => dests.push(d),
            Entry::Host { name, port } => {
                if addrs.is_empty() {
                    return Err(invalid(raw, "the host name has no IPv4 address"));
                }
                for a in addrs {
                    if !hosts.iter().any(|(n, _)| n == &name) {
                        hosts.push((name.clone(), a));
                    }
                    dests.push(Destination {
                        addr: a,
                        prefix: 32,
                        port,
                    });
                }
            }
        }
    }
    Ok(Some(Resolved {
        policy: Policy::Allow(dests),
        hosts,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(a: [u8; 4], prefix: u8, port: Option<u16>) -> Entry {
        Entry::Net(Destination {
            addr: Ipv4Addr::from(a),
            prefix,
            port,
        })
    }

    #[test]
    fn entries_parse() {
        assert_eq!(parse("1.2.3.4").unwrap(), net([1, 2, 3, 4], 32, None));
        assert_eq!(
            parse("1.2.3.4:443").unwrap(),
            net([1, 2, 3, 4], 32, Some(443))
        );
        assert_eq!(parse("10.1.2.0/24").unwrap(), net([10, 1, 2, 0], 24, None));
        assert_eq!(
            parse("Example.COM:8443").unwrap(),
            Entry::Host {
                name: "example.com".into(),
                port: Some(8443)
            }
        );
        assert_eq!(
            parse("pypi.org").unwrap(),
            Entry::Host {
                name: "pypi.org".into(),
                port: None
            }
        );
    }

    #[test]
    fn bad_entries_are_invalid() {
        for bad in [
            "",
            "1.2.3.4/33",
            "1.2.3/8",
            "::1",
            "[::1]:80",
            "1.2.3.4:0",
            "a.com:70000",
            "a b.com",
            "-a.com",
            "a..com",
            "a.com/8",
            "1.2.3.4:80/24",
        ] {
            assert!(
                matches!(parse(bad), Err(SandboxError::Invalid(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[tokio::test]
    async fn resolve_checks_the_list() {
        assert_eq!(resolve(&Egress::None).await.unwrap(), None);
        assert_eq!(
            resolve(&Egress::All).await.unwrap().unwrap().policy,
            Policy::All
        );
        assert!(resolve(&Egress::Allow(vec![])).await.is_err());
        let many = Egress::Allow(vec!["1.1.1.1".into(); MAX_ALLOW + 1]);
        assert!(resolve(&many).await.is_err());
        let r = resolve(&Egress::Allow(vec![
            "localhost:80".into(),
            "10.0.0.0/8".into(),
        ]))
        .await
        .unwrap()
        .unwrap();
        assert_eq!(
            r.hosts,
            vec![("localhost".to_string(), Ipv4Addr::LOCALHOST)]
        );
        assert!(resolve(&Egress::Allow(vec!["no-such-host.invalid".into()]))
            .await
            .is_err());
    }
}
