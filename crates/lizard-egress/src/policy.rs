//! One sandbox's egress state on the host: its rules and its secret injection (both replaced
//! live), DNS pins, the host's own networks, limits, counters and a bounded log of refusals.

use crate::inject::Injection;
use crate::rules::Rules;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bounds on what one sandbox may cost the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Relayed connections open at once; more are closed at once.
    pub max_connections: usize,
    /// Most bytes read before deciding (TLS ClientHello, HTTP request head).
    pub peek_bytes: usize,
    /// How long the client has to send them (a server-first protocol waits this long).
    pub peek_deadline: Duration,
    /// Host-side name resolution (DNS answers and named connections).
    pub resolve: Duration,
    /// Connecting upstream.
    pub connect: Duration,
    /// A relayed connection with no byte in either direction for this long is closed.
    pub idle: Duration,
    /// DNS queries being answered at once; more get SERVFAIL at once.
    pub dns_in_flight: usize,
    /// Host-side name lookups of this sandbox (for DNS answers and named connections) running at
    /// once, each counted until it really ends (see [`crate::Resolve::resolve_holding`]): its
    /// share of the host's resolver. More DNS queries get SERVFAIL, more named connections are
    /// refused, at once.
    pub host_lookups: usize,
    /// Addresses remembered by [`Pins`] (with at most [`Pins::NAMES_PER_ADDR`] names of at most
    /// 253 bytes each: ≈ 1 MiB at most for the default).
    pub pins: usize,
    /// Entries kept in the refusal log (the oldest go).
    pub log: usize,
    /// Let address rules open the ranges the host's relay never reaches
    /// ([`crate::rules::never_reached`]: its own loopback, the metadata range, …). Only for a
    /// relay that is not the host's — tests with an upstream on loopback; never set by the server.
    pub open_never_reached: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            peek_bytes: 16 * 1024,
            peek_deadline: Duration::from_secs(3),
            resolve: Duration::from_secs(5),
            connect: Duration::from_secs(10),
            idle: Duration::from_secs(300),
            dns_in_flight: 32,
            host_lookups: 8,
            pins: 1024,
            log: 256,
            open_never_reached: false,
        }
    }
}

/// One refused connection or DNS query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at: SystemTime,
    /// `name`, `addr:port` or `name (addr:port)`.
    pub destination: String,
    pub reason: String,
}

/// Byte and connection counters of one sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes from the sandbox to upstreams (the peeked bytes included).
    pub bytes_out: u64,
    /// Bytes from upstreams to the sandbox.
    pub bytes_in: u64,
    /// Connections relayed (upstream connected).
    pub connections: u64,
    /// Connections and DNS queries refused.
    pub refused: u64,
}

/// A sandbox's egress policy and state, shared by its relay and DNS tasks.
#[derive(Debug)]
pub struct SandboxPolicy {
    rules: RwLock<Arc<Rules>>,
    injection: RwLock<Option<Arc<Injection>>>,
    pins: Pins,
    host_nets: Vec<(Ipv4Addr, u8)>,
    limits: Limits,
    conns: Arc<Semaphore>,
    dns: Arc<Semaphore>,
    lookups: Arc<Semaphore>,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) connections: AtomicU64,
    refused: AtomicU64,
    log: Mutex<VecDeque<Refusal>>,
}

impl SandboxPolicy {
    /// `host_nets`: the host's own addresses and networks (e.g. from
    /// `lizard_jail::network::host_addresses`, each address as a /32 and its subnet), which only
    /// an address rule opens, like the private ranges.
    pub fn new(rules: Rules, limits: Limits, host_nets: Vec<(Ipv4Addr, u8)>) -> SandboxPolicy {
        SandboxPolicy {
            rules: RwLock::new(Arc::new(rules)),
            injection: RwLock::new(None),
            pins: Pins::new(limits.pins),
            host_nets,
            limits,
            conns: Arc::new(Semaphore::new(limits.max_connections)),
            dns: Arc::new(Semaphore::new(limits.dns_in_flight)),
            lookups: Arc::new(Semaphore::new(limits.host_lookups)),
            bytes_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
        }
    }

    /// The rules now (connections already relayed keep going under the rules they started with).
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the rules (`PATCH /v1/sandboxes/{id}/network`): the next connection and DNS query
    /// are decided by `rules`.
    pub fn set_rules(&self, rules: Rules) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
    }

    /// The secret injection now, if the sandbox has one.
    pub fn injection(&self) -> Option<Arc<Injection>> {
        self.injection
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the injection (secrets or their rules changed): the next connection is decided by
    /// it, and so is the next request on a connection already proxied (its headers, its audit);
    /// `None` ends injection — connections then relay bytes as any other.
    pub fn set_injection(&self, injection: Option<Arc<Injection>>) {
        *self.injection.write().unwrap_or_else(|e| e.into_inner()) = injection;
    }

    /// The decision of `rules` for `name` at `addr:port` from this sandbox (see
    /// [`Rules::decide_with`]), with the host's own networks, and refusing first what no rule
    /// opens ([`crate::rules::never_reached`]).
    pub fn decide(
        &self,
        rules: &Rules,
        name: Option<&str>,
        addr: Ipv4Addr,
        port: Option<u16>,
    ) -> crate::rules::Decision {
        if !self.limits.open_never_reached {
            if let Some(why) = crate::rules::never_reached(addr) {
                return crate::rules::Decision::Deny(format!("{addr} is {why}: no rule opens it"));
            }
        }
        rules.decide_with(name, addr, port, &self.host_nets)
    }

    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    pub fn host_nets(&self) -> &[(Ipv4Addr, u8)] {
        &self.host_nets
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn traffic(&self) -> Traffic {
        Traffic {
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// The refusal log, oldest first.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Count and log a refusal (both strings are cut to 300 characters: they may come from the
    /// sandbox).
    pub fn refuse(&self, destination: &str, reason: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(destination, reason, "egress refused");
        let cut = |s: &str| s.chars().take(300).collect::<String>();
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= self.limits.log.max(1) {
            log.pop_front();
        }
        log.push_back(Refusal {
            at: SystemTime::now(),
            destination: cut(destination),
            reason: cut(reason),
        });
    }

    pub(crate) fn connection_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.conns.clone().try_acquire_owned().ok()
    }

    /// One of its [`Limits::host_lookups`], if it has one left.
    pub(crate) fn lookup_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.lookups.clone().try_acquire_owned().ok()
    }

    pub(crate) fn dns_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.dns.clone().try_acquire_owned().ok()
    }
}

/// Which names a sandbox's DNS answers gave for each address: bounded (at most `cap` addresses,
/// [`Pins::NAMES_PER_ADDR`] names each; the least recently pinned go first).
#[derive(Debug)]
pub struct Pins {
    cap: usize,
    map: Mutex<HashMap<Ipv4Addr, Pin_>>,
}

#[derive(Debug)]
struct Pin_ {
    names: Vec<String>,
    at: Instant,
}

impl Pins {
    pub const NAMES_PER_ADDR: usize = 4;

    pub fn new(cap: usize) -> Pins {
        Pins {
            cap: cap.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Remember that `name` resolved to `addrs`.
    pub fn pin(&self, name: &str, addrs: &[Ipv4Addr]) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        for &a in addrs {
            if !map.contains_key(&a) && map.len() >= self.cap {
                if let Some(oldest) = map.iter().min_by_key(|(_, p)| p.at).map(|(k, _)| *k) {
                    map.remove(&oldest);
                }
            }
            let p = map.entry(a).or_insert_with(|| Pin_ {
                names: Vec::new(),
                at: now,
            });
            p.at = now;
            p.names.retain(|n| n != name);
            p.names.push(name.to_string());
            if p.names.len() > Self::NAMES_PER_ADDR {
                p.names.remove(0);
            }
        }
    }

    /// The names pinned to `addr`, most recent last.
    pub fn names(&self, addr: Ipv4Addr) -> Vec<String> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&addr).map(|p| p.names.clone()).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_ranges_are_never_reached() {
        let rules = Rules::parse(
            [
                "127.0.0.1",
                "169.254.169.254",
                "0.0.0.0/8",
                "224.0.0.0/4",
                "10.0.0.0/8",
            ],
            [] as [&str; 0],
        )
        .unwrap();
        let p = SandboxPolicy::new(rules.clone(), Limits::default(), vec![]);
        for a in ["127.0.0.1", "169.254.169.254", "0.0.0.1", "224.0.0.251"] {
            let d = p.decide(&rules, None, a.parse().unwrap(), Some(80));
            assert!(
                matches!(&d, crate::rules::Decision::Deny(w) if w.contains("no rule opens it")),
                "{a}: {d:?}"
            );
            // Nor by name (a name never opens a non-public address anyway).
            assert!(!p
                .decide(&rules, Some("x.example"), a.parse().unwrap(), Some(80))
                .is_allow());
        }
        // An ordinary private address is opened by its rule.
        assert!(p
            .decide(&rules, None, "10.1.2.3".parse().unwrap(), Some(80))
            .is_allow());
        // Only a relay that is not the host's (tests) lets the rules open them.
        let lim = Limits {
            open_never_reached: true,
            ..Limits::default()
        };
        let t = SandboxPolicy::new(rules.clone(), lim, vec![]);
        assert!(t
            .decide(&rules, None, "127.0.0.1".parse().unwrap(), Some(80))
            .is_allow());
    }
}
