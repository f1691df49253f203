//! A sandbox's egress rules: `{"allow": [...], "deny": [...]}` entries parsed once, and the
//! decision for one destination (a name if the connection or DNS query carries one, the address,
//! the port).
//!
//! Entries: `example.com` (that name only), `*.example.com` (any name below it, at any depth —
//! not `example.com` itself unless listed too), `api.example.com:443`, `1.2.3.4`,
//! `1.2.3.4:8080`, `10.0.0.0/8` (optionally `:port`), `*` (every public address; `*:443` too).
//! Deny beats allow. Addresses that are not the internet ([`is_public`]) are refused unless an
//! *address* rule (IP or CIDR of at least [`SHORTEST_UNLOCKING_PREFIX`] bits) allows them: a
//! *name* rule never does, since the name's owner chooses what it resolves to (DNS rebinding onto
//! the host's network or the metadata address).

use std::net::Ipv4Addr;

/// Most entries in `allow` plus `deny`.
pub const MAX_ENTRIES: usize = 256;
/// Longest host name (RFC 1035, without the trailing dot).
pub const MAX_NAME: usize = 253;
/// An address rule opens non-public addresses only if its prefix is at least this long:
/// `0.0.0.0/0` means "the internet" like `*`, not "the host's LAN and the metadata address too".
pub const SHORTEST_UNLOCKING_PREFIX: u8 = 8;

/// Why an entry was refused. Each names the entry (cut to 80 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("too many egress rules: {count} (at most {MAX_ENTRIES} in allow and deny together)")]
    TooMany { count: usize },
    #[error("empty egress rule")]
    Empty,
    #[error("egress rule {entry:?}: host names must be ASCII; write an internationalised name in its punycode form (xn--...)")]
    NonAscii { entry: String },
    #[error("egress rule {entry:?}: host name longer than {MAX_NAME} characters")]
    NameTooLong { entry: String },
    #[error("egress rule {entry:?}: not a host name: {why}")]
    BadName { entry: String, why: &'static str },
    #[error("egress rule {entry:?}: bad port (1-65535)")]
    BadPort { entry: String },
    #[error("egress rule {entry:?}: bad CIDR: {why}")]
    BadCidr { entry: String, why: &'static str },
}

fn shown(entry: &str) -> String {
    entry.chars().take(80).collect()
}

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Exactly this (normalised) name.
    Name(String),
    /// Any name ending in `.` + this suffix (from `*.suffix`).
    Below(String),
    /// An IPv4 network (a single address is a /32).
    Net { addr: Ipv4Addr, prefix: u8 },
    /// Every public address, and every name (`*`).
    Any,
}

/// One parsed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub target: Target,
    pub port: Option<u16>,
}

/// A sandbox's rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    pub allow: Vec<Entry>,
    pub deny: Vec<Entry>,
}

/// The decision for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

impl Decision {
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// Whether `a` is on the internet: not "this network" 0/8, private 10/8, 172.16/12, 192.168/16,
/// carrier-grade NAT 100.64/10, loopback 127/8, link-local 169.254/16 (the metadata address
/// 169.254.169.254), IETF protocol assignments 192.0.0/24, benchmarking 198.18/15, multicast
/// 224/4 or reserved 240/4 (with the broadcast 255.255.255.255). The documentation ranges
/// (192.0.2/24, 198.51.100/24, 203.0.113/24) count as public: nothing routes them, and tests use
/// them as "somewhere on the internet". The host's own addresses are the caller's to add
/// ([`Rules::decide_with`]).
pub fn is_public(a: Ipv4Addr) -> bool {
    const NOT: [(Ipv4Addr, u8); 12] = [
        (Ipv4Addr::new(0, 0, 0, 0), 8),
        (Ipv4Addr::new(10, 0, 0, 0), 8),
        (Ipv4Addr::new(100, 64, 0, 0), 10),
        (Ipv4Addr::new(127, 0, 0, 0), 8),
        (Ipv4Addr::new(169, 254, 0, 0), 16),
        (Ipv4Addr::new(172, 16, 0, 0), 12),
        (Ipv4Addr::new(192, 0, 0, 0), 24),
        (Ipv4Addr::new(192, 168, 0, 0), 16),
        (Ipv4Addr::new(198, 18, 0, 0), 15),
        (Ipv4Addr::new(224, 0, 0, 0), 4),
        (Ipv4Addr::new(240, 0, 0, 0), 4),
        (Ipv4Addr::new(255, 255, 255, 255), 32),
    ];
    !NOT.iter().any(|&(n, p)| in_net(a, n, p))
}

/// What no rule opens on the host's relay ([`crate::SandboxPolicy::decide`]), and why: the relay
/// connects from the host, where 127/8 is the host's own
/// loopback (its API and every local service), 0/8 means "this host" too, 169.254/16 holds the
/// cloud metadata address, and multicast and the reserved range (with the broadcast address)
/// reach the host's LAN as a whole.
pub fn never_reached(a: Ipv4Addr) -> Option<&'static str> {
    const NEVER: [(Ipv4Addr, u8, &str); 5] = [
        (Ipv4Addr::new(127, 0, 0, 0), 8, "the host's loopback"),
        (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this host\""),
        (
            Ipv4Addr::new(169, 254, 0, 0),
            16,
            "link-local (the cloud metadata address)",
        ),
        (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
        (
            Ipv4Addr::new(240, 0, 0, 0),
            4,
            "reserved (or the broadcast address)",
        ),
    ];
    NEVER
        .iter()
        .find(|&&(n, p, _)| in_net(a, n, p))
        .map(|&(_, _, why)| why)
}

/// Whether `a` lies in `net/prefix`.
pub fn in_net(a: Ipv4Addr, net: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(a) & mask == u32::from(net) & mask
}

/// A host name as the rules compare it: ASCII, lower-cased, one trailing dot removed, at most
/// [`MAX_NAME`] characters, labels of 1–63 letters, digits, `-` or `_`, a last label that is not
/// all digits (that would be an address, or nothing). `Err` says why not.
pub fn normalize_name(name: &str) -> Result<String, &'static str> {
    if !name.is_ascii() {
        return Err("not ASCII (use the punycode form, xn--...)");
    }
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if n.is_empty() {
        return Err("empty");
    }
    if n.len() > MAX_NAME {
        return Err("longer than 253 characters");
    }
    for label in n.split('.') {
        if label.is_empty() {
            return Err("empty label");
        }
        if label.len() > 63 {
            return Err("label longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("characters other than letters, digits, '-' and '_'");
        }
    }
    if n.rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("numeric top-level label (an incomplete IP address?)");
    }
    Ok(n)
}

fn parse_port(entry: &str, p: &str) -> Result<u16, RuleError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(RuleError::BadPort {
            entry: shown(entry),
        }),
    }
}

impl Entry {
    /// Parse one entry (see the module doc).
    pub fn parse(entry: &str) -> Result<Entry, RuleError> {
        let e = entry.trim();
        if e.is_empty() {
            return Err(RuleError::Empty);
        }
        if !e.is_ascii() {
            return Err(RuleError::NonAscii {
                entry: shown(entry),
            });
        }
        if e.len() > MAX_NAME + 8 {
            return Err(RuleError::NameTooLong {
                entry: shown(entry),
            });
        }
        let (host, port) = match e.rsplit_once(':') {
            Some((h, p)) => (h, Some(parse_port(entry, p)?)),
            None => (e, None),
        };
        if host == "*" {
            return Ok(Entry {
                target: Target::Any,
                port,
            });
        }
        if let Some((a, p)) = host.split_once('/') {
            let bad = |why| RuleError::BadCidr {
                entry: shown(entry),
                why,
            };
            let addr: Ipv4Addr = a.parse().map_err(|_| bad("not an IPv4 address"))?;
            let prefix: u8 = match p.parse() {
                Ok(n) if n <= 32 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(bad("prefix must be 0-32")),
            };
            if !host_bits_clear(addr, prefix) {
                return Err(bad("bits set after the prefix"));
            }
            return Ok(Entry {
                target: Target::Net { addr, prefix },
                port,
            });
        }
        if let Ok(addr) = host.parse::<Ipv4Addr>() {
            return Ok(Entry {
                target: Target::Net { addr, prefix: 32 },
                port,
            });
        }
        let (wild, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') {
            return Err(RuleError::BadName {
                entry: shown(entry),
                why: "'*' only as the whole first label (*.example.com) or alone",
            });
        }
        let n = normalize_name(name).map_err(|why| {
            if why.starts_with("longer") {
                RuleError::NameTooLong {
                    entry: shown(entry),
                }
            } else {
                RuleError::BadName {
                    entry: shown(entry),
                    why,
                }
            }
        })?;
        Ok(Entry {
            target: if wild {
                Target::Below(n)
            } else {
                Target::Name(n)
            },
            port,
        })
    }

    fn port_matches(&self, port: Option<u16>) -> bool {
        match (self.port, port) {
            (None, _) => true,
            (Some(p), Some(q)) => p == q,
            // "Some port": an entry for one port may match.
            (Some(_), None) => true,
        }
    }

    /// Whether the entry names `name` (normalised).
    fn names(&self, name: &str) -> bool {
        match &self.target {
            Target::Name(n) => n == name,
            Target::Below(s) => {
                name.len() > s.len() + 1
                    && name.ends_with(s.as_str())
                    && name.as_bytes()[name.len() - s.len() - 1] == b'.'
            }
            Target::Any => true,
            Target::Net { .. } => false,
        }
    }

    fn covers(&self, addr: Ipv4Addr) -> bool {
        match self.target {
            Target::Net { addr: n, prefix } => in_net(addr, n, prefix),
            Target::Any => true,
            _ => false,
        }
    }
}

fn host_bits_clear(a: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(a) & !mask == 0
}

/// A name as given by a connection or a query.
enum Given {
    Name(String),
    Literal(Ipv4Addr),
    Invalid(&'static str),
}

fn classify_name(name: &str) -> Given {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if let Ok(ip) = bare.parse::<Ipv4Addr>() {
        return Given::Literal(ip);
    }
    match normalize_name(name) {
        Ok(n) => Given::Name(n),
        Err(why) => Given::Invalid(why),
    }
}

impl Rules {
    /// Parse the API's lists. At most [`MAX_ENTRIES`] entries in all.
    pub fn parse<A, D>(allow: A, deny: D) -> Result<Rules, RuleError>
    where
        A: IntoIterator,
        A::Item: AsRef<str>,
        D: IntoIterator,
        D::Item: AsRef<str>,
    {
        // Counted before anything is parsed: a huge list costs no work.
        let allow: Vec<A::Item> = allow.into_iter().take(MAX_ENTRIES + 1).collect();
        let deny: Vec<D::Item> = deny.into_iter().take(MAX_ENTRIES + 1).collect();
        let count = allow.len() + deny.len();
        if count > MAX_ENTRIES {
            return Err(RuleError::TooMany { count });
        }
        Ok(Rules {
            allow: allow
                .iter()
                .map(|e| Entry::parse(e.as_ref()))
                .collect::<Result<_, _>>()?,
            deny: deny
                .iter()
                .map(|e| Entry::parse(e.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Egress `all`: every public address, any name, any port.
    pub fn all() -> Rules {
        Rules {
            allow: vec![Entry {
                target: Target::Any,
                port: None,
            }],
            deny: vec![],
        }
    }

    /// No egress at all.
    pub fn none() -> Rules {
        Rules::default()
    }

    /// The decision for a connection to `addr:port`, carrying `name` if it has one (TLS SNI, HTTP
    /// Host, or the name the address was resolved for). An IPv4 literal as `name` must be `addr`
    /// and is then no name.
    pub fn decide(&self, name: Option<&str>, addr: Ipv4Addr, port: u16) -> Decision {
        self.decide_with(name, addr, Some(port), &[])
    }

    /// [`Rules::decide`] with `port` `None` meaning "some port" (a DNS answer, before any
    /// connection) and `host_nets` the host's own addresses and networks, which like the
    /// non-public ranges only an address rule opens (the proxy connects from the host: its own
    /// address would reach its own services).
    pub fn decide_with(
        &self,
        name: Option<&str>,
        addr: Ipv4Addr,
        port: Option<u16>,
        host_nets: &[(Ipv4Addr, u8)],
    ) -> Decision {
        let name = match name.map(classify_name) {
            None => None,
            Some(Given::Name(n)) => Some(n),
            Some(Given::Literal(ip)) if ip == addr => None,
            Some(Given::Invalid(why)) => return Decision::Deny(format!("invalid name: {why}")),
            Some(Given::Literal(ip)) => {
                return Decision::Deny(format!(
                    "the address {ip} given as the host name is not the destination {addr}"
                ))
            }
        };
        let name = name.as_deref();
        let exact_port = |e: &Entry| match (e.port, port) {
            (None, _) => true,
            (Some(p), Some(q)) => p == q,
            (Some(_), None) => false,
        };
        // A deny entry applies when it certainly matches: for "some port", only portless ones.
        for e in &self.deny {
            let hit = match e.target {
                Target::Net { .. } | Target::Any => e.covers(addr),
                _ => name.is_some_and(|n| e.names(n)),
            };
            if hit && exact_port(e) {
                return Decision::Deny(format!("denied by the rule {}", show_entry(e)));
            }
        }
        let local = !is_public(addr) || host_nets.iter().any(|&(n, p)| in_net(addr, n, p));
        if local {
            let unlocked = self.allow.iter().any(|e| {
                matches!(e.target, Target::Net { prefix, .. } if prefix >= SHORTEST_UNLOCKING_PREFIX)
                    && e.covers(addr)
                    && e.port_matches(port)
            });
            return if unlocked {
                Decision::Allow
            } else {
                Decision::Deny(format!(
                    "{addr} is not a public internet address (private, loopback, link-local, metadata or the host's own); only an IP/CIDR allow rule opens it"
                ))
            };
        }
        let allowed = self.allow.iter().any(|e| {
            let hit = match e.target {
                Target::Net { .. } | Target::Any => e.covers(addr),
                _ => name.is_some_and(|n| e.names(n)),
            };
            hit && e.port_matches(port)
        });
        if allowed {
            Decision::Allow
        } else {
            Decision::Deny(match name {
                Some(n) => format!("{n} ({addr}) is not in the sandbox's egress allow list"),
                None => format!("{addr} is not in the sandbox's egress allow list"),
            })
        }
    }

    /// The decision for `name` before it is resolved (a DNS query; TLS SNI or HTTP Host before the
    /// proxy resolves it): denied if a deny entry names it (for `port` `None`, a portless one), or
    /// if no allow entry names it (a name entry or `*`). An allowed name still has each of its
    /// addresses checked by [`Rules::decide_with`]. Nothing is resolved for a denied name, so
    /// that a sandbox cannot make the host look up names of its choosing.
    pub fn decide_name(&self, name: &str, port: Option<u16>) -> Decision {
        let n = match classify_name(name) {
            Given::Name(n) => n,
            Given::Invalid(why) => return Decision::Deny(format!("invalid name: {why}")),
            Given::Literal(ip) => return Decision::Deny(format!("{ip} is an address, not a name")),
        };
        for e in &self.deny {
            let port_hit = match (e.port, port) {
                (None, _) => true,
                (Some(p), Some(q)) => p == q,
                (Some(_), None) => false,
            };
            if e.names(&n) && port_hit {
                return Decision::Deny(format!("denied by the rule {}", show_entry(e)));
            }
        }
        if self
            .allow
            .iter()
            .any(|e| e.names(&n) && e.port_matches(port))
        {
            Decision::Allow
        } else {
            Decision::Deny(format!("{n} is not in the sandbox's egress allow list"))
        }
    }

    /// Whether some address rule could allow a connection (then a name not in the allow list
    /// may still reach an address the rules name).
    pub fn has_address_rules(&self) -> bool {
        self.allow
            .iter()
            .any(|e| matches!(e.target, Target::Net { .. } | Target::Any))
    }
}

fn show_entry(e: &Entry) -> String {
    let t = match &e.target {
        Target::Name(n) => n.clone(),
        Target::Below(s) => format!("*.{s}"),
        Target::Net { addr, prefix: 32 } => addr.to_string(),
        Target::Net { addr, prefix } => format!("{addr}/{prefix}"),
        Target::Any => "*".into(),
    };
    match e.port {
        Some(p) => format!("{t}:{p}"),
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn rules(allow: &[&str], deny: &[&str]) -> Rules {
        Rules::parse(allow, deny).unwrap()
    }

    #[test]
    fn parses_every_kind_of_entry() {
        // Shown as given, but for the first, which is normalized.
        let as_given = [
            "*.github.com",
            "api.openai.com:443",
            "1.2.3.4",
            "1.2.3.4:8080",
            "10.0.0.0/8",
            "192.168.1.0/24:22",
            "*",
            "*:443",
            "_dmarc.x-y.org",
        ];
        let r = rules(&[&["Example.COM."][..], &as_given].concat(), &[]);
        let t: Vec<_> = r.allow.iter().map(show_entry).collect();
        assert_eq!(t, [&["example.com"][..], &as_given].concat());
    }

    #[test]
    fn refuses_bad_entries_with_typed_errors() {
        let err = |e: &str| Entry::parse(e).unwrap_err();
        assert_eq!(err(""), RuleError::Empty);
        assert_eq!(err("  "), RuleError::Empty);
        assert!(matches!(err("bücher.de"), RuleError::NonAscii { .. }));
        assert!(err("bücher.de").to_string().contains("punycode"));
        assert!(matches!(
            err(&format!("{}.com", "a".repeat(250))),
            RuleError::NameTooLong { .. }
        ));
        assert!(matches!(
            err(&"a.".repeat(200)),
            RuleError::NameTooLong { .. }
        ));
        for bad in [
            "a..b",
            "a b.com",
            "exa*mple.com",
            "*example.com",
            "a.*.com",
            "1.2.3",
            "300.1.1.1",
            "a/b",
            "[::1]",
            "a.com:1:2",
        ] {
            assert!(
                matches!(
                    err(bad),
                    RuleError::BadName { .. }
                        | RuleError::BadCidr { .. }
                        | RuleError::BadPort { .. }
                ),
                "{bad}: {:?}",
                Entry::parse(bad)
            );
        }
        for bad in ["a.com:0", "a.com:65536", "a.com:", "a.com:+1", "1.2.3.4:x"] {
            assert!(matches!(err(bad), RuleError::BadPort { .. }), "{bad}");
        }
        for bad in [
            "10.0.0.0/33",
            "10.0.0.1/8",
            "10.0.0.0/",
            "10.0.0/8",
            "10.0.0.0/+8",
        ] {
            assert!(matches!(err(bad), RuleError::BadCidr { .. }), "{bad}");
        }
        let many: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("h{i}.com")).collect();
        assert!(matches!(
            Rules::parse(&many, &[] as &[&str]),
            Err(RuleError::TooMany { .. })
        ));
        assert!(Rules::parse(&many[..200], &many[..56]).is_ok());
        assert!(matches!(
            Rules::parse(&many[..200], &many[..57]),
            Err(RuleError::TooMany { .. })
        ));
        // A long entry's message is bounded.
        let long = format!("{}é", "x".repeat(10_000));
        assert!(err(&long).to_string().len() < 300);
    }

    #[test]
    fn names_match_exactly_or_below_and_tricks_do_not() {
        let r = rules(&["example.com", "*.github.com"], &[]);
        let pubip = ip("93.184.216.34");
        let ok = |n: &str| r.decide(Some(n), pubip, 443).is_allow();
        assert!(ok("example.com"));
        assert!(ok("EXAMPLE.com"));
        assert!(ok("example.com."));
        assert!(!ok("www.example.com"), "an exact rule has no subdomains");
        assert!(!ok("example.com.evil.com"));
        assert!(!ok("evilexample.com"));
        assert!(!ok("example.co"));
        assert!(!ok("example.com.."));
        assert!(ok("api.github.com"));
        assert!(ok("a.b.c.github.com"), "any depth");
        assert!(!ok("github.com"), "not the apex");
        assert!(!ok("evilgithub.com"));
        assert!(!ok("github.com.evil.com"));
        assert!(!ok(".github.com"));
        assert!(!ok("ex\u{e4}mple.com"), "non-ASCII");
        // No name at all: only address rules.
        assert!(!r.decide(None, pubip, 443).is_allow());
    }

    #[test]
    fn an_ip_literal_as_the_name_is_only_the_address() {
        let r = rules(&["93.184.216.34", "example.com"], &[]);
        assert!(r
            .decide(Some("93.184.216.34"), ip("93.184.216.34"), 443)
            .is_allow());
        // An SNI/Host that is another address than the destination.
        let d = r.decide(Some("93.184.216.34"), ip("1.1.1.1"), 443);
        assert!(!d.is_allow(), "{d:?}");
        // An allowed address literal does not open an unlisted destination, nor a name rule an
        // address literal.
        assert!(!r.decide(Some("1.1.1.1"), ip("1.1.1.1"), 443).is_allow());
        assert!(!r.decide_name("93.184.216.34", None).is_allow());
    }

    #[test]
    fn odd_address_spellings_are_no_names() {
        // What inet_aton would read as 127.0.0.1 or 10.0.0.1: neither an address (Rust's parser
        // is strict) nor a name (a numeric last label), so refused, never matched by a rule.
        let r = Rules::all();
        for n in [
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "010.0.0.1",
            "1.2.3.4.5",
        ] {
            assert!(
                !r.decide(Some(n), ip("93.184.216.34"), 80).is_allow(),
                "{n}"
            );
            assert!(!r.decide_name(n, None).is_allow(), "{n}");
            assert!(Entry::parse(n).is_err(), "{n}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_and_deciding_never_panic(
            entries in proptest::collection::vec("[a-z0-9.*:/_ -]{0,40}|\\PC{0,20}", 0..8),
            name in "[a-zA-Z0-9.*:_-]{0,30}|\\PC{0,10}",
            addr in proptest::prelude::any::<u32>(),
            port in proptest::prelude::any::<u16>(),
        ) {
            let a = Ipv4Addr::from(addr);
            if let Ok(r) = Rules::parse(&entries, &entries[..entries.len() / 2]) {
                let _ = r.decide(Some(&name), a, port);
                let _ = r.decide(None, a, port);
                let _ = r.decide_name(&name, None);
                // Deny beats allow: an entry in both lists never allows.
                let both = Rules::parse(&entries, &entries).unwrap();
                for e in &both.deny {
                    if let Target::Net { addr, .. } = e.target {
                        proptest::prop_assert!(!both.decide(None, addr, e.port.unwrap_or(port)).is_allow());
                    }
                }
            }
        }
    }

    #[test]
    fn ports_restrict() {
        let r = rules(&["api.example.com:443", "1.2.3.4:8080", "*.x.org:22"], &[]);
        let a = ip("93.184.216.34");
        assert!(r.decide(Some("api.example.com"), a, 443).is_allow());
        assert!(!r.decide(Some("api.example.com"), a, 80).is_allow());
        assert!(r.decide(None, ip("1.2.3.4"), 8080).is_allow());
        assert!(!r.decide(None, ip("1.2.3.4"), 8081).is_allow());
        assert!(r.decide(Some("b.x.org"), a, 22).is_allow());
        // For DNS (some port) a port rule counts.
        assert!(r.decide_name("api.example.com", None).is_allow());
        assert!(!r.decide_name("api.example.com", Some(80)).is_allow());
    }

    #[test]
    fn deny_beats_allow() {
        let r = rules(
            &["*", "10.0.0.0/8"],
            &[
                "*.evil.com",
                "bad.example.com:443",
                "1.1.1.0/24",
                "10.9.0.0/16",
            ],
        );
        let a = ip("93.184.216.34");
        assert!(r.decide(Some("good.com"), a, 443).is_allow());
        assert!(r.decide(None, a, 443).is_allow());
        assert!(!r.decide(Some("x.evil.com"), a, 443).is_allow());
        assert!(!r.decide_name("x.evil.com", None).is_allow());
        assert!(r.decide(Some("evil.com"), a, 443).is_allow(), "only below");
        assert!(!r.decide(Some("bad.example.com"), a, 443).is_allow());
        assert!(r.decide(Some("bad.example.com"), a, 80).is_allow());
        // A deny rule for one port does not refuse the name in DNS.
        assert!(r.decide_name("bad.example.com", None).is_allow());
        assert!(!r.decide(None, ip("1.1.1.1"), 53).is_allow());
        assert!(!r.decide(Some("good.com"), ip("1.1.1.1"), 53).is_allow());
        assert!(r.decide(None, ip("10.1.0.1"), 22).is_allow());
        assert!(!r.decide(None, ip("10.9.0.1"), 22).is_allow());
    }

    #[test]
    fn private_and_special_addresses_need_an_address_rule() {
        let special = [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "127.100.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.168.1.1",
            "198.18.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ];
        let names = rules(
            &[
                "*",
                "*.example.com",
                "example.com",
                "0.0.0.0/0",
                "0.0.0.0/7",
            ],
            &[],
        );
        for s in special {
            assert!(!is_public(ip(s)), "{s}");
            // Names (DNS rebinding), `*` and a CIDR wider than /8 open none of them.
            let d = names.decide(Some("a.example.com"), ip(s), 443);
            assert!(!d.is_allow(), "{s}: {d:?}");
            assert!(
                !names.decide(Some("example.com"), ip(s), 80).is_allow(),
                "{s}"
            );
            assert!(!names.decide(None, ip(s), 80).is_allow(), "{s}");
            // An address rule naming it does (the relay's policy then refuses the ranges no rule
            // opens: see `SandboxPolicy::decide`).
            let by_ip = rules(&[s], &[]);
            assert!(by_ip.decide(None, ip(s), 80).is_allow(), "{s}");
        }
        for s in [
            "127.0.0.1",
            "127.100.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(never_reached(ip(s)).is_some(), "{s}");
        }
        for s in ["10.1.2.3", "192.168.1.1", "203.0.113.5", "8.8.8.8"] {
            assert!(never_reached(ip(s)).is_none(), "{s}");
        }
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "203.0.113.5",
            "11.0.0.1",
        ] {
            assert!(is_public(ip(s)), "{s}");
            assert!(names.decide(None, ip(s), 80).is_allow(), "{s}");
        }
        let lan = rules(&["10.0.0.0/8", "192.168.1.1:80"], &[]);
        assert!(lan
            .decide(Some("whatever.internal"), ip("10.2.3.4"), 5432)
            .is_allow());
        assert!(lan.decide(None, ip("192.168.1.1"), 80).is_allow());
        assert!(!lan.decide(None, ip("192.168.1.1"), 443).is_allow());
        assert!(!lan.decide(None, ip("192.168.1.2"), 80).is_allow());
    }

    #[test]
    fn the_hosts_own_networks_count_as_private() {
        let host = [(ip("203.0.113.0"), 24)];
        let r = Rules::all();
        assert!(!r
            .decide_with(Some("x.com"), ip("203.0.113.7"), Some(443), &host)
            .is_allow());
        assert!(r
            .decide_with(Some("x.com"), ip("203.0.114.7"), Some(443), &host)
            .is_allow());
        let named = rules(&["203.0.113.7"], &[]);
        assert!(named
            .decide_with(None, ip("203.0.113.7"), Some(443), &host)
            .is_allow());
    }

    #[test]
    fn none_allows_nothing_and_all_every_public_destination() {
        let n = Rules::none();
        assert!(!n.decide(Some("example.com"), ip("1.1.1.1"), 443).is_allow());
        assert!(!n.decide_name("example.com", None).is_allow());
        let a = Rules::all();
        assert!(a.decide(Some("example.com"), ip("1.1.1.1"), 443).is_allow());
        assert!(a.decide_name("anything.example", None).is_allow());
        assert!(!a.decide_name("bad name", None).is_allow());
    }
}
