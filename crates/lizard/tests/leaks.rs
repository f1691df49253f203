//! The create/kill (and hibernate/resume/kill) leak test, alone in its own test binary so that no concurrent test changes the
//! host's process, mount and cgroup counts while it measures them.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

/// Host processes that are not kernel threads (children of kthreadd, pid 2): kernel workers come
/// and go with the machine's load (cgroup teardown, writeback) and are none of ours.
fn user_processes() -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != 2)
        .filter_map(|pid| {
            let (comm, ppid) = comm_and_ppid(pid)?;
            (ppid != 2).then_some((pid, comm))
        })
        .collect()
}

/// `comm` and parent of `pid`, from `/proc/<pid>/stat` ("pid (comm) state ppid ...": comm may
/// hold spaces and parentheses).
fn comm_and_ppid(pid: i32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (comm, rest) = stat.split_at(stat.rfind(')')?);
    let ppid: i32 = rest[1..].split_whitespace().nth(1)?.parse().ok()?;
    Some((comm[comm.find('(')? + 1..].to_string(), ppid))
}

/// Whether `pid` is this test's or its server's: below the server (a subreaper: whatever its
/// sandboxes and helpers leave is reparented to it, never to init) or below this test process.
/// The machine may run other work meanwhile (other test binaries, builds): that is not counted.
fn ours(pid: i32, server: i32) -> bool {
    let me = std::process::id() as i32;
    let mut p = pid;
    for _ in 0..64 {
        if p == server || p == me {
            return true;
        }
        match comm_and_ppid(p) {
            Some((_, ppid)) if ppid > 1 => p = ppid,
            _ => return false,
        }
    }
    false
}

/// `pid (comm)` with its state, parent and pids cgroup, to tell a zombie nobody reaps from a
/// process that outlived its sandbox's cgroup.
fn describe(pid: i32, comm: String) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rfind(')')
        .map(|i| stat[i + 1..].split_whitespace().collect())
        .unwrap_or_default();
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains(":pids:"))
        .unwrap_or("")
        .to_string();
    format!(
        "{pid} ({comm}) state {} ppid {} {cgroup}",
        fields.first().unwrap_or(&"?"),
        fields.get(1).unwrap_or(&"?")
    )
}

/// What this test's server holds on the host: its processes, the mounts that name its data dir,
/// and the cgroup directories of the sandboxes it made (named by their ids, with everything
/// below them). Only its own: the machine is shared, and other servers (other tests, other
/// jobs) mount and make cgroups meanwhile.
fn host_counts(server: i32, data_dir: &Path, ids: &[String]) -> (usize, usize, usize) {
    let procs = user_processes()
        .into_iter()
        .filter(|(p, _)| ours(*p, server))
        .count();
    let data = data_dir.to_string_lossy().into_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&data))
        .count();
    let cgroups = walk_dirs(Path::new("/sys/fs/cgroup"), ids, false);
    (procs, mounts, cgroups)
}

use std::path::Path;

/// Directories below `p` named by one of `ids`, and everything below those (`inside`: `p` is one).
fn walk_dirs(p: &Path, ids: &[String], inside: bool) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let ours = inside || ids.iter().any(|id| e.file_name() == id.as_str());
                n += usize::from(ours) + walk_dirs(&e.path(), ids, ours);
            }
        }
    }
    n
}

#[tokio::test]
async fn no_leaks_after_100_create_kill_and_20_hibernation_cycles() {
    lizard_test_support::needs_root!();
    // No warm pool here: its background refills would blur the counts.
    let s = Server::with_flags("--pool-size 0");
    // Warm up once (first-use caches), then count.
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    let server = server_pid(s.data_dir.path());
    let mut ids: Vec<String> = vec![id.clone()];
    let (p0, m0, c0) = host_counts(server as i32, s.data_dir.path(), &ids);
    let before: std::collections::HashSet<i32> =
        user_processes().into_iter().map(|(p, _)| p).collect();
    for _ in 0..100 {
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        ids.push(id.clone());
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    // Hibernation stops a sandbox's processes and relaunches them on resume: 20 such lives must
    // leave nothing behind either.
    for _ in 0..20 {
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        ids.push(id.clone());
        s.run(&id, json!({"code": "x = 1"})).await;
        for op in ["hibernate", "resume", "hibernate"] {
            let r = s.act(&id, op).await;
            assert_eq!(r.status, 200, "{op}: {}", r.text);
        }
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    // With egress: the server's relay and DNS listeners in the sandbox's network namespace (and
    // the namespace they hold) go with the sandbox.
    let fds = || {
        std::fs::read_dir(format!("/proc/{server}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let fds0 = fds();
    for _ in 0..10 {
        let id = s
            .create(
                &s.admin_key.clone(),
                json!({"network": {"egress": {"allow": ["example.test"]}}}),
            )
            .await;
        ids.push(id.clone());
        // A refused connection: the relay was used.
        s.run(
            &id,
            json!({"code": "import socket\ntry:\n    socket.create_connection(('203.0.113.1', 80), timeout=5).recv(1)\nexcept OSError:\n    pass"}),
        )
        .await;
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    let fds_back = eventually(Duration::from_secs(10), || async { fds() <= fds0 + 4 }).await;
    assert!(
        fds_back,
        "the server holds {} descriptors after 10 egress sandboxes came and went ({fds0} before)",
        fds()
    );
    let settled = eventually(Duration::from_secs(20), || async {
        let (p1, m1, c1) = host_counts(server as i32, s.data_dir.path(), &ids);
        // Only this test's and its server's processes are counted (see `ours`); allow a little
        // noise still (a kernel's helper that is just exiting), none for mounts and cgroups.
        p1 <= p0 + 10 && m1 <= m0 && c1 <= c0
    })
    .await;
    let (p1, m1, c1) = host_counts(server as i32, s.data_dir.path(), &ids);
    let new: Vec<_> = user_processes()
        .into_iter()
        .filter(|(p, _)| !before.contains(p) && ours(*p, server as i32))
        .map(|(p, comm)| describe(p, comm))
        .collect();
    assert!(
        settled,
        "leak: processes {p0}->{p1}, mounts {m0}->{m1}, cgroups {c0}->{c1}; new processes: {new:?}"
    );
    let left = std::fs::read_dir(s.data_dir.path().join("sandboxes"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "sandbox directories left behind");
}
