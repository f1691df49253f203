//! `network::egress_in_netns_of` for real: a network namespace held by another process (as a
//! sandbox's is, by its PID 1) gets the route and the ruleset, and the host's sockets are bound
//! inside it — reachable from a process in that namespace, not from the host's; a second setup
//! while the first's sockets live fails on the taken address. Needs root, `ip`, `nft` and
//! `python3` (as CI has).

use lizard_jail::network::egress_in_netns_of;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};

/// A process in a fresh network namespace, waiting on its stdin.
struct NetnsHolder(Child);

impl NetnsHolder {
    fn start() -> NetnsHolder {
        let mut child = Command::new("unshare")
            .args(["--net", "--", "python3", "-c"])
            .arg("import sys\nprint('ready', flush=True)\nsys.stdin.read()")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (root?)");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready");
        NetnsHolder(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Run `args` inside its network namespace; its stdout, or the failure.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", self.pid()))
            .args(args)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for NetnsHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const RULESET: &str = "table ip lizard_test\ndelete table ip lizard_test\ntable ip lizard_test {\n  chain out {\n    type filter hook output priority 0; policy accept;\n  }\n}\n";
const RELAY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 3143);
const DNS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 53);

#[test]
fn egress_setup_configures_the_namespace_and_binds_inside_it() {
    lizard_test_support::needs_root!();
    let holder = NetnsHolder::start();
    holder.run(&["ip", "link", "set", "lo", "up"]).unwrap();
    let pidfd = lizard_jail::process::pidfd_open(holder.pid()).unwrap();
    let sockets = egress_in_netns_of(
        pidfd,
        &["default", "dev", "lo", "src", "127.0.0.1"],
        RULESET,
        RELAY,
        DNS,
    )
    .expect("egress setup");
    let route = holder.run(&["ip", "route", "show", "default"]).unwrap();
    assert!(route.contains("default dev lo"), "{route}");
    let rules = holder
        .run(&["nft", "list", "table", "ip", "lizard_test"])
        .unwrap();
    assert!(rules.contains("chain out"), "{rules}");
    // Inside, the relay's address answers (the host holds the listener); in the host's own
    // namespace nothing listens there.
    std::thread::spawn(move || {
        let _ = sockets.relay.set_nonblocking(false);
        for c in sockets.relay.incoming().flatten() {
            use std::io::Write;
            let mut c = c;
            let _ = c.write_all(b"host\n");
        }
    });
    let got = holder
        .run(&[
            "python3",
            "-c",
            "import socket\ns = socket.create_connection(('127.100.0.1', 3143), timeout=5)\nprint(s.recv(10).decode().strip())",
        ])
        .unwrap();
    assert_eq!(got.trim(), "host");
    assert!(std::net::TcpStream::connect(RELAY).is_err());
    // The DNS address is taken inside: a second setup (or a sandbox process) cannot bind it.
    let pidfd = lizard_jail::process::pidfd_open(holder.pid()).unwrap();
    let second = egress_in_netns_of(
        pidfd,
        &["default", "dev", "lo", "src", "127.0.0.1"],
        RULESET,
        SocketAddrV4::new(Ipv4Addr::new(127, 100, 0, 1), 3144),
        DNS,
    );
    let e = second.expect_err("the address is in use").to_string();
    assert!(e.contains("DNS responder (UDP)"), "{e}");
}

#[test]
fn a_bad_ruleset_is_an_error_naming_nft() {
    lizard_test_support::needs_root!();
    let holder = NetnsHolder::start();
    holder.run(&["ip", "link", "set", "lo", "up"]).unwrap();
    let pidfd = lizard_jail::process::pidfd_open(holder.pid()).unwrap();
    let e = egress_in_netns_of(
        pidfd,
        &["default", "dev", "lo", "src", "127.0.0.1"],
        "table ip x { nonsense }",
        RELAY,
        DNS,
    )
    .expect_err("nft refuses it")
    .to_string();
    assert!(e.contains("nftables rules (nft"), "{e}");
}
