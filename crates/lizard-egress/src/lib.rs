//! Host-side egress by name for sandboxes (issue #19 part 2). Inside a sandbox's network
//! namespace a generic nftables ruleset ([`nft::ruleset`]) redirects every outbound TCP connection
//! to a listener of the host's ([`PROXY_ADDR`]) and DNS to another ([`DNS_ADDR`]), both made in
//! that namespace by the host. The host side, here:
//!
//! - [`rules`]: the sandbox's allow/deny entries and the decision for one destination;
//! - [`peek`]: the first bytes of a connection → TLS SNI, HTTP/1 Host, or opaque;
//! - [`dns`]: the DNS responder — A queries for allowed names resolved on the host, answers
//!   filtered and remembered ([`policy::Pins`]), everything else refused;
//! - [`relay`]: one connection: peek, decide, connect upstream to the proxy's own resolution of
//!   the name, replay, relay with an idle deadline, count; refusals logged;
//! - [`inject`]: a sandbox's injection rules and its own CA; [`intercept`]: for the names those
//!   rules cover, HTTP(S) proxied instead of relayed, with the secret headers added on the way out
//!   (TLS terminated with a leaf of the sandbox's CA), so a secret's value never enters the sandbox;
//! - [`conn`]: what the relay and the proxy share about a connection (its outcome, its counters).
//!
//! Nothing here trusts the sandbox: every read is bounded in size and time, names are checked
//! before the host resolves them, and the sandbox never chooses the address a named connection
//! goes to.

pub mod conn;
pub mod dns;
pub mod inject;
pub mod intercept;
pub mod nft;
pub mod peek;
pub mod policy;
pub mod relay;
pub mod rules;

pub use dns::{HostResolver, Resolve};
pub use inject::{
    InjectError, InjectHeader, InjectRule, InjectUse, Injection, SandboxCa, SecretValue,
};
pub use peek::{peek, Peeked, Protocol};
pub use policy::{Limits, Pins, Refusal, SandboxPolicy, Traffic};
pub use relay::{handle, orig_dst, serve, Outcome};
pub use rules::{Decision, Entry, RuleError, Rules, Target};

use std::net::{Ipv4Addr, SocketAddrV4};

/// Where the ruleset sends a sandbox's outbound TCP: the host's relay listener, made in the
/// sandbox's namespace (next to the package mirror's 127.100.0.1:3142).
pub const PROXY_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 3143);
/// Where the ruleset sends a sandbox's DNS (UDP and TCP port 53, any destination).
pub const DNS_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 53);
