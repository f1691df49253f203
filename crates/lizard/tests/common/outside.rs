//! "The internet" for egress tests: a server in a network namespace of the test's own.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A server in a network namespace of its own, reached from the host through a veth pair on
/// `10.254.<n>.0/30` (private: the host side's own network) at a routed public address
/// `203.0.113.<n>` (on the peer's loopback, one hop away as the internet is). Removed
/// (namespace, link, server) when dropped.
pub struct Outside {
    netns: String,
    link: String,
    server: Child,
    /// `203.0.113.<n>`: on none of the host's networks, public to the rules.
    pub ip: Ipv4Addr,
    pub port: u16,
    /// The veth peer's own address and the port (`10.254.<n>.2:<port>`): a private neighbour.
    pub neighbour: String,
}

impl Outside {
    /// Run the Python program `code` (with `args`) in it: it must print the port it listens on
    /// as its first line.
    pub fn start(code: &str, args: &[&str]) -> Outside {
        static N: AtomicU32 = AtomicU32::new(0);
        // The first `n` free on this host: the namespace `lz-outside-<n>` is its claim (made only
        // if it does not exist), so neither another test binary running now nor what an aborted
        // run left behind (its namespace, link or route) is taken over.
        let first = std::process::id() + N.fetch_add(1, Ordering::SeqCst);
        let (netns, link, far, ns_ip) = (0..250)
            .find_map(|i| Self::claim(1 + (first + i * 7) % 250))
            .expect("no free outside network (10.254.<n>.0/30, 203.0.113.<n>) on this host");
        let mut server = Command::new("ip")
            .args(["netns", "exec", &netns, "python3", "-c", code])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let port = lizard_test_support::first_line(&mut server);
        let port: u16 = port
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the outside server's port: {port:?}"));
        Outside {
            netns,
            link,
            server,
            ip: far,
            port,
            neighbour: format!("{ns_ip}:{port}"),
        }
    }

    /// Make outside network `n`: its namespace (the claim), veth pair, addresses and route. None,
    /// with what was made removed, if any step fails (`n` is taken).
    fn claim(n: u32) -> Option<(String, String, Ipv4Addr, String)> {
        let netns = format!("lz-outside-{n}");
        let (link, peer) = (format!("lzh-out-{n}"), format!("lzo-out-{n}"));
        let (host_ip, ns_ip) = (format!("10.254.{n}.1/30"), format!("10.254.{n}.2"));
        let far: Ipv4Addr = format!("203.0.113.{n}").parse().unwrap();
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &netns]) {
            return None;
        }
        let far_32 = format!("{far}/32");
        let made = ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &netns])
            && ip(&["addr", "add", &host_ip, "dev", &link])
            && ip(&["link", "set", &link, "up"])
            && ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{ns_ip}/30"),
                "dev",
                &peer,
            ])
            && ip(&["-n", &netns, "link", "set", &peer, "up"])
            && ip(&["-n", &netns, "link", "set", "lo", "up"])
            && ip(&["-n", &netns, "addr", "add", &far_32, "dev", "lo"])
            && ip(&["route", "add", &far_32, "via", &ns_ip, "dev", &link]);
        if !made {
            ip(&["link", "del", &link]);
            ip(&["netns", "del", &netns]);
            return None;
        }
        Some((netns, link, far, ns_ip))
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip")
            .args(["route", "del", &format!("{}/32", self.ip)])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}
