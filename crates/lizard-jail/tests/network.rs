//! `network::attach` for real: a network namespace owned by the host's user namespace (as a
//! sandbox's is), held by a non-dumpable process of another uid (as the agent is), gets
//! slirp4netns attached; slirp4netns must then run as the unprivileged user it was given, with
//! no capability left but the one its `--enable-sandbox` keeps. Needs root, `slirp4netns`,
//! `nft` and `python3` (as CI has).

use lizard_jail::network::{attach, slirp_capabilities, Policy, SlirpUser};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `CAP_NET_BIND_SERVICE`: slirp4netns's `--enable-sandbox` keeps it on purpose.
const NET_BIND_SERVICE: u64 = 1 << 10;

/// A process in a fresh network namespace (created by root, so owned by the host's user
/// namespace) that then becomes uid/gid 4242 and non-dumpable, like a sandbox's agent.
struct NetnsHolder(Child);

impl NetnsHolder {
    fn start() -> NetnsHolder {
        let child = Command::new("unshare")
            .args(["--net", "--", "python3", "-c"])
            .arg(
                "import os, ctypes, sys\n\
                 os.setgroups([]); os.setresgid(4242, 4242, 4242); os.setresuid(4242, 4242, 4242)\n\
                 ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n\
                 print('ready', flush=True)\n\
                 sys.stdin.read()",
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare --net python3");
        let mut h = NetnsHolder(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(h.0.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready");
        h
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for NetnsHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGKILL to a pid when dropped, so a failing test does not leave slirp4netns running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// `(key, value)` lines of `/proc/<pid>/status`.
fn status(pid: i32) -> Vec<(String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn field<'a>(st: &'a [(String, String)], key: &str) -> &'a str {
    &st.iter().find(|(k, _)| k == key).unwrap().1
}

fn hex(st: &[(String, String)], key: &str) -> u64 {
    u64::from_str_radix(field(st, key), 16).unwrap()
}

#[test]
fn slirp4netns_runs_as_the_given_unprivileged_user() {
    let holder = NetnsHolder::start();
    let user = SlirpUser {
        uid: 99_990,
        gid: 99_991,
    };
    let log = tempfile::NamedTempFile::new().unwrap();
    let egress = attach(holder.pid(), &Policy::All, log.path(), user)
        .unwrap_or_else(|e| panic!("{e}: {}", std::fs::read_to_string(log.path()).unwrap()));
    let pid = egress.pid();
    let guard = KillOnDrop(pid);
    // `--enable-sandbox` drops the capabilities after the tap is open, which may come a moment
    // after the route (the readiness signal).
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        let st = status(pid);
        if hex(&st, "CapEff") & !NET_BIND_SERVICE == 0 || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let report = format!(
        "{st:?}\nlog: {}",
        std::fs::read_to_string(log.path()).unwrap()
    );
    // Real, effective, saved and file-system ids.
    assert_eq!(field(&st, "Uid"), "99990\t99990\t99990\t99990", "{report}");
    assert_eq!(field(&st, "Gid"), "99991\t99991\t99991\t99991", "{report}");
    assert_eq!(field(&st, "Groups"), "", "{report}");
    for set in ["CapEff", "CapPrm", "CapInh", "CapBnd"] {
        assert_eq!(hex(&st, set) & !NET_BIND_SERVICE, 0, "{set}: {report}");
    }
    assert_eq!(hex(&st, "CapAmb"), 0, "{report}");
    assert_eq!(field(&st, "NoNewPrivs"), "1", "{report}");
    assert_eq!(field(&st, "Seccomp"), "2", "{report}");
    // slirp4netns's own mount namespace (--enable-sandbox), not the host's.
    assert_ne!(
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(),
        std::fs::read_link("/proc/self/ns/mnt").unwrap(),
        "{report}"
    );
    // The namespace is configured.
    let route = std::fs::read_to_string(format!("/proc/{}/net/route", holder.pid())).unwrap();
    assert!(route.contains("tap0\t00000000"), "{route}");
    // Killing it ends it (as the sandbox cgroup's kill does).
    drop(guard);
    assert!(!egress.wait().unwrap().success());
}

#[test]
fn setup_capabilities_are_the_needed_ones() {
    let caps = slirp_capabilities(SlirpUser {
        uid: 99_990,
        gid: 99_991,
    });
    // CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP, CAP_NET_BIND_SERVICE, maybe CAP_DAC_OVERRIDE;
    // never CAP_SETUID/CAP_SETGID (6, 7) or CAP_SYS_PTRACE (19).
    let base = 1 << 21 | 1 << 12 | 1 << 8 | 1 << 10;
    assert!(caps == base || caps == base | 1 << 1, "{caps:#x}");
    use std::os::unix::fs::MetadataExt;
    let tun = std::fs::metadata("/dev/net/tun").unwrap();
    assert_eq!(
        caps & (1 << 1) != 0,
        tun.mode() & 0o006 != 0o006,
        "CAP_DAC_OVERRIDE only when /dev/net/tun is not open to everyone"
    );
}
