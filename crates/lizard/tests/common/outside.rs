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
        let n = 1 + (std::process::id() % 100 + N.fetch_add(1, Ordering::SeqCst)) % 250;
        let netns = format!("lz-egress-{}-{n}", std::process::id());
        let link = format!("lzh{}{n}", std::process::id() % 10_000);
        let peer = format!("lzo{}{n}", std::process::id() % 10_000);
        let (host_ip, ns_ip) = (format!("10.254.{n}.1/30"), format!("10.254.{n}.2"));
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
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &peer,
        ]);
        ip(&["-n", &netns, "link", "set", &peer, "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        let far: Ipv4Addr = format!("203.0.113.{n}").parse().unwrap();
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{far}/32"),
            "dev",
            "lo",
        ]);
        ip(&[
            "route",
            "add",
            &format!("{far}/32"),
            "via",
            &ns_ip,
            "dev",
            &link,
        ]);
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
