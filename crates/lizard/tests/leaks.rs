//! The create/kill (and hibernate/resume/kill) leak test, alone in its own test binary so that no concurrent test changes the
//! host's process, mount and cgroup counts while it measures them.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn host_counts() -> (usize, usize, usize) {
    let procs = std::fs::read_dir("/proc")
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .count();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count();
    let cgroups = walk_dirs(Path::new("/sys/fs/cgroup"));
    (procs, mounts, cgroups)
}

use std::path::Path;

/// Host pids of the slirp4netns attached to the network namespace of host pid `pid` (it holds
/// that namespace open as its fd 3, `--netns-type=path /proc/self/fd/3`).
fn slirp_for(pid: i64) -> Vec<i32> {
    let netns = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "slirp4netns")
                && std::fs::read_link(format!("/proc/{p}/fd/3")).is_ok_and(|l| l == netns)
        })
        .collect()
}

fn walk_dirs(p: &Path) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                n += 1 + walk_dirs(&e.path());
            }
        }
    }
    n
}

#[tokio::test]
async fn no_leaks_after_100_create_kill_and_20_hibernation_cycles() {
    // No warm pool here: its background refills would blur the counts.
    let s = Server::start_in(tempfile::tempdir().unwrap(), &["--pool-size", "0"]);
    // Warm up once (first-use caches), then count.
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    s.admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    let (p0, m0, c0) = host_counts();
    for _ in 0..100 {
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    // Hibernation stops a sandbox's processes and relaunches them on resume: 20 such lives must
    // leave nothing behind either.
    for _ in 0..20 {
        let id = s.create(&s.admin_key.clone(), json!({})).await;
        s.run(&id, json!({"code": "x = 1"})).await;
        for op in ["hibernate", "resume", "hibernate"] {
            let r = s
                .admin("POST", &format!("/v1/sandboxes/{id}/{op}"), None)
                .await;
            assert_eq!(r.status, 200, "{op}: {}", r.text);
        }
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    // With egress: slirp4netns runs in the sandbox's cgroup and goes with it.
    let mut slirps = Vec::new();
    for _ in 0..10 {
        let id = s
            .create(&s.admin_key.clone(), json!({"network": {"egress": "all"}}))
            .await;
        let rt: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                s.data_dir
                    .path()
                    .join(format!("sandboxes/{id}/runtime.json")),
            )
            .unwrap(),
        )
        .unwrap();
        let found = slirp_for(rt["pid"].as_i64().unwrap());
        assert_eq!(found.len(), 1, "one slirp4netns per sandbox with egress");
        slirps.extend(found);
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{id}"), None)
            .await;
        assert_eq!(r.status, 204);
    }
    let slirps_gone = eventually(Duration::from_secs(10), || async {
        slirps.iter().all(|p| {
            !Path::new(&format!("/proc/{p}/cmdline")).exists() || gone_or_zombie(*p as u32)
        })
    })
    .await;
    assert!(slirps_gone, "slirp4netns outlived its sandbox");
    let settled = eventually(Duration::from_secs(20), || async {
        let (p1, m1, c1) = host_counts();
        // Other tests run concurrently on this machine: allow a little process noise, none for
        // mounts and cgroups of ours.
        p1 <= p0 + 10 && m1 <= m0 && c1 <= c0
    })
    .await;
    let (p1, m1, c1) = host_counts();
    assert!(
        settled,
        "leak: processes {p0}->{p1}, mounts {m0}->{m1}, cgroups {c0}->{c1}"
    );
    let left = std::fs::read_dir(s.data_dir.path().join("sandboxes"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "sandbox directories left behind");
}
