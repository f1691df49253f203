//! The sandbox side: one nftables ruleset, the same for every sandbox (no per-sandbox data, so a
//! CRIU restore recreates it as it was), installed in the sandbox's network namespace by the host.
//!
//! What it assumes of the namespace (set up by the host, which alone holds `CAP_NET_ADMIN` there):
//! - `lo` up with 127.0.0.1/8 (127.100.0.1, where the host's listeners are bound, is on it);
//! - no other interface, and the default route [`DEFAULT_ROUTE`] — `default dev lo src
//!   127.0.0.1`: a connect to a non-local address needs *some* route before any packet reaches
//!   netfilter (else `ENETUNREACH`), and the `src` is needed because `lo` has no address to pick
//!   for a non-local destination (without it the SYN leaves from 0.0.0.0 and is never answered).
//!   No packet ever leaves through it: the `nat output` hook rewrites every TCP connection and
//!   DNS query to a local address first, and the `filter output` hook rejects everything else.
//!   (No dummy interface: this kernel has none, and a route through `lo` needs no device.)
//!
//! The rules: for destinations outside 127.0.0.0/8, DNS (UDP and TCP port 53) is DNAT'ed to
//! [`crate::DNS_ADDR`] and every other TCP connection to [`crate::PROXY_ADDR`] (the host's relay
//! reads the original destination with `SO_ORIGINAL_DST`); anything else not to loopback (UDP,
//! ICMP, SCTP, ...) is rejected at once — TCP with a reset, the rest with ICMP
//! admin-prohibited (`EPERM`/`ECONNREFUSED` for the caller, not a time-out). IPv6 has only `::1`.

use crate::{DNS_ADDR, PROXY_ADDR};

/// The default route the ruleset needs, as arguments of `ip route replace`.
pub const DEFAULT_ROUTE: [&str; 5] = ["default", "dev", "lo", "src", "127.0.0.1"];

/// The name of the table (ip and ip6 families).
pub const TABLE: &str = "lizard_egress";

/// The `nft -f` script (it replaces an earlier version of itself: the tables are deleted first).
pub fn ruleset() -> String {
    let dns = DNS_ADDR;
    let proxy = PROXY_ADDR;
    format!(
        "table ip {TABLE}\n\
         delete table ip {TABLE}\n\
         table ip6 {TABLE}\n\
         delete table ip6 {TABLE}\n\
         table ip {TABLE} {{\n\
         \x20 chain nat_output {{\n\
         \x20   type nat hook output priority -100; policy accept;\n\
         \x20   ip daddr 127.0.0.0/8 return\n\
         \x20   udp dport 53 dnat to {dns}\n\
         \x20   tcp dport 53 dnat to {dns}\n\
         \x20   meta l4proto tcp dnat to {proxy}\n\
         \x20 }}\n\
         \x20 chain filter_output {{\n\
         \x20   type filter hook output priority 0; policy accept;\n\
         \x20   ip daddr 127.0.0.0/8 accept\n\
         \x20   meta l4proto tcp reject with tcp reset\n\
         \x20   reject with icmp type admin-prohibited\n\
         \x20 }}\n\
         }}\n\
         table ip6 {TABLE} {{\n\
         \x20 chain filter_output {{\n\
         \x20   type filter hook output priority 0; policy accept;\n\
         \x20   ip6 daddr ::1 accept\n\
         \x20   meta l4proto tcp reject with tcp reset\n\
         \x20   reject with icmpv6 type admin-prohibited\n\
         \x20 }}\n\
         }}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_redirects_tcp_and_dns_and_rejects_the_rest() {
        let r = ruleset();
        let nat = r.find("nat_output").unwrap();
        let lo = r.find("ip daddr 127.0.0.0/8 return").unwrap();
        let dns = r.find("udp dport 53 dnat to 127.100.0.1:53").unwrap();
        let tcp = r.find("meta l4proto tcp dnat to 127.100.0.1:3143").unwrap();
        assert!(nat < lo && lo < dns && dns < tcp, "{r}");
        assert!(r.contains("tcp dport 53 dnat to 127.100.0.1:53"));
        assert!(r.contains("reject with icmp type admin-prohibited"));
        // Nothing per sandbox in it.
        assert_eq!(r, ruleset());
    }
}
