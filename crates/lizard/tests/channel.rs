//! The server's channel to each sandbox's agent, attacked from inside: the socket cannot be
//! redirected (to another sandbox's agent, to a host socket, to a fake listener), is not visible
//! inside, and the agent as PID 1 cannot be stopped from inside; if PID 1 dies anyway, the server
//! notices and cleans the sandbox up like a kill.

mod common;

use common::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A root-only (0600, in a 0700 directory) host socket that counts the connections it gets and
/// drops each at once.
struct HostSocket {
    path: PathBuf,
    hits: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl HostSocket {
    fn start() -> HostSocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host-root.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        });
        HostSocket {
            path,
            hits,
            _dir: dir,
        }
    }
}

async fn python(s: &Server, id: &str, code: &str) -> String {
    stdout(&s.run(id, json!({"code": code})).await)
}

/// Code in sandbox A replaces `/run/lizard/agent.sock` (where the agent's socket used to be, on
/// A's own disk) with a symlink to sandbox B's socket, then to a root-only host socket, then with a
/// fake listener of its own: A's API calls keep reaching A's agent, B never gets one, the host
/// socket is never connected to. (On the old layout the server followed the symlink: A's calls
/// ran in B.)
#[tokio::test]
async fn the_sandbox_cannot_redirect_the_servers_channel_to_its_agent() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let (key_a, key_b) = (s.project_key("alpha").await, s.project_key("beta").await);
    let a = s.create(&key_a, json!({})).await;
    let b = s.create(&key_b, json!({})).await;
    python(&s, &a, "who = 'A'").await;
    python(&s, &b, "who = 'B'").await;
    let host = HostSocket::start();
    let b_socket = runtime_json(&s, &b)["socket"].as_str().unwrap().to_string();

    // `/run/lizard` is the sandbox's root's (the agent's); user code cannot write it any more, but
    // the agent is untrusted too: plant what the sandbox's root could, in the directory's host
    // path (`disk/run`, the same directory).
    let run_dir = s
        .data_dir
        .path()
        .join("sandboxes")
        .join(&a)
        .join("disk/run");
    let (out, _) = s.sh(&a, "touch /run/lizard/x 2>&1; echo rc=$?").await;
    assert!(
        out.contains("Permission denied"),
        "user code writes /run/lizard: {out}"
    );
    let plant = |target: &str| {
        let link = run_dir.join("agent.sock");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
        std::fs::read_link(&link).unwrap().display().to_string()
    };
    // 1. A symlink to the other project's sandbox's agent.
    let out = plant(&b_socket);
    assert_eq!(out.trim(), b_socket);
    for _ in 0..3 {
        assert_eq!(python(&s, &a, "print(who); from_a = 1").await.trim(), "A");
    }
    // 2. A symlink to a root-only host socket.
    let out = plant(host.path.to_str().unwrap());
    assert_eq!(out.trim(), host.path.to_str().unwrap());
    for _ in 0..3 {
        assert_eq!(python(&s, &a, "print(who)").await.trim(), "A");
    }
    // 3. A fake agent of its own at the old path (it answers every request with "fake").
    let _ = std::fs::remove_file(run_dir.join("agent.sock"));
    fake_listener(&run_dir.join("agent.sock"), true);
    for _ in 0..3 {
        assert_eq!(python(&s, &a, "print(who)").await.trim(), "A");
    }
    let r = s
        .admin("GET", &format!("/v1/sandboxes/{a}/contexts"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.body.is_array(), "A's own agent answered: {}", r.text);

    // B is untouched: none of A's runs reached it.
    assert_eq!(
        python(&s, &b, "print(who, 'from_a' in globals())")
            .await
            .trim(),
        "B False"
    );
    assert_eq!(
        host.hits.load(Ordering::SeqCst),
        0,
        "the host socket got a connection"
    );
}

/// The agent's socket is nowhere inside: not in the mount table, not under `/run/lizard` (where
/// the only socket is the agent's in-sandbox `sudo.sock`), not in the sandbox's `/proc/net/unix`,
/// and PID 1's descriptors (where it is fd 3) cannot be read.
#[tokio::test]
async fn the_agents_socket_is_invisible_inside() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let host_socket = runtime_json(&s, &id)["socket"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        Path::new(&host_socket),
        s.data_dir
            .path()
            .join("sandboxes")
            .join(&id)
            .join("agent.sock"),
        "the socket is in the sandbox's root-only host directory"
    );
    let meta = std::fs::metadata(s.data_dir.path().join("sandboxes").join(&id)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let (out, _) = s
        .sh(
            &id,
            r#"echo "mountinfo=$(grep -c -e agent.sock -e sandboxes /proc/self/mountinfo)"
echo "sockets_in_run=$(find /run/lizard -type s ! -path /run/lizard/sudo.sock 2>/dev/null | wc -l)"
name=$(grep agent.sock /proc/net/unix | awk '{print $8}' | head -n 1)
echo "net_unix_name=$name"
echo "connect=$(python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])" "$name" 2>&1 | tail -n 1)"
echo "fd3=$(readlink /proc/1/fd/3 2>&1 || echo refused)"
echo "fds=$(ls /proc/1/fd 2>&1 | head -c 200)"
"#,
        )
        .await;
    let f: std::collections::BTreeMap<&str, &str> =
        out.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(f["mountinfo"], "0", "{out}");
    assert_eq!(f["sockets_in_run"], "0", "{out}");
    // The listening socket belongs to the sandbox's network namespace (so that a CRIU
    // checkpoint holds it), so its `/proc/net/unix` lists it — under the name the launcher bound
    // it with, `/proc/self/fd/<n>/agent.sock` (relative to a descriptor of the launcher's), which
    // names nothing inside: it cannot be connected to from there.
    let name = f["net_unix_name"];
    assert!(
        name.starts_with("/proc/self/fd/") && name.ends_with("/agent.sock"),
        "{out}"
    );
    assert!(
        f["connect"].contains("FileNotFoundError") || f["connect"].contains("ConnectionRefused"),
        "{out}"
    );
    // PID 1 is not dumpable: its fd table is not readable by the sandbox's user.
    assert_eq!(f["fd3"], "refused", "{out}");
    assert!(f["fds"].contains("Permission denied"), "{out}");
    assert!(!out.contains(s.data_dir.path().to_str().unwrap()), "{out}");
}

fn loop_devices_backing(image: &Path) -> Vec<String> {
    let want = image.to_string_lossy().into_owned();
    std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|b| b.trim().trim_end_matches(" (deleted)") == want)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A Unix listener at `path` served by a thread of the test (accepting and closing, or answering
/// every request with "fake" when `answer`), as the sandbox's root could plant one at a path in
/// its run directory.
fn fake_listener(path: &std::path::Path, answer: bool) {
    use std::io::{Read, Write};
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            if answer {
                let mut buf = [0u8; 65536];
                let _ = c.read(&mut buf);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 6\r\n\r\n\"fake\"",
                );
            }
        }
    });
}

fn stored_state(s: &Server, id: &str) -> Option<lizard_server::store::StoredState> {
    let store = lizard_server::store::Store::open(&s.data_dir.path().join("lizard.db")).ok()?;
    store.get_sandbox(id).ok().flatten().map(|r| r.state)
}

/// `kill -TERM 1` (and -INT, -KILL) from user code do not stop the agent; when PID 1 dies anyway
/// (here: SIGKILL from the host), the server notices, says `killed` and leaves nothing behind.
#[tokio::test]
async fn pid_1_ignores_signals_from_inside_and_its_death_is_cleaned_up() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    python(&s, &id, "kept = 42").await;
    let (out, _) = s
        .sh(
            &id,
            "kill -TERM 1; echo term=$?; kill -INT 1; echo int=$?; kill -KILL 1; echo kill=$?; \
             sleep 1",
        )
        .await;
    // The agent is the sandbox's root, user code is not: the signals are refused outright.
    assert!(
        out.contains("term=1") && out.contains("int=1") && out.contains("kill=1"),
        "{out}"
    );
    for _ in 0..3 {
        assert_eq!(python(&s, &id, "print(kept)").await.trim(), "42");
    }
    let r = s.admin("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(r.body["state"], "running", "{}", r.text);

    // Now PID 1 dies for real.
    let rt = runtime_json(&s, &id);
    let pid = rt["pid"].as_i64().unwrap() as i32;
    let dir = s.data_dir.path().join("sandboxes").join(&id);
    let image = dir.join("disk.img");
    assert_eq!(loop_devices_backing(&image).len(), 1);
    assert!(host_cgroup("/sys/fs/cgroup/memory", &id).is_some());
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let gone = eventually(Duration::from_secs(60), || async {
        s.admin("GET", &format!("/v1/sandboxes/{id}"), None)
            .await
            .status
            == 404
    })
    .await;
    assert!(gone, "the API still shows the sandbox whose PID 1 died");
    // Recorded as killed once the cleanup is done (the API forgets it first).
    let recorded = eventually(Duration::from_secs(30), || async {
        stored_state(&s, &id) == Some(lizard_server::store::StoredState::Killed)
    })
    .await;
    assert!(recorded, "store says {:?}", stored_state(&s, &id));
    let clean = eventually(Duration::from_secs(30), || async {
        !dir.exists()
            && loop_devices_backing(&image).is_empty()
            && host_cgroup("/sys/fs/cgroup/memory", &id).is_none()
            && host_cgroup("/sys/fs/cgroup/pids", &id).is_none()
            && !std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .contains(&*id)
            // Reaped (by the server, its subreaper), not left a zombie.
            && !Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    assert!(
        clean,
        "left behind: dir {}, loops {:?}, cgroup {:?}, pid {}",
        dir.exists(),
        loop_devices_backing(&image),
        host_cgroup("/sys/fs/cgroup/memory", &id),
        Path::new(&format!("/proc/{pid}")).exists()
    );
    // Other sandboxes work as before.
    let other = s.create(&s.admin_key.clone(), json!({})).await;
    assert_eq!(python(&s, &other, "print(1 + 1)").await.trim(), "2");
}

/// A sandbox whose stored socket is inside its own disk (what servers before the host-side socket
/// stored) is not adopted after a restart: killed and cleaned up. Sandboxes with the new layout are
/// adopted as before, and their PID 1 is watched again.
#[tokio::test]
async fn a_sandbox_with_its_socket_inside_is_not_adopted() {
    lizard_test_support::needs_root!();
    let s = Server::with_flags("--pool-size 0");
    let old = s.create(&s.admin_key.clone(), json!({})).await;
    let keep = s.create(&s.admin_key.clone(), json!({})).await;
    python(&s, &keep, "v = 7").await;
    let old_dir = s.data_dir.path().join("sandboxes").join(&old);
    // A listener where the old layout's socket was, as the sandbox's root (a compromised agent)
    // could plant: in the directory's host path.
    fake_listener(&old_dir.join("disk/run/agent.sock"), false);
    let data = s.stop("-TERM");
    {
        let store = lizard_server::store::Store::open(&data.path().join("lizard.db")).unwrap();
        let mut rt = store.get_sandbox(&old).unwrap().unwrap().runtime;
        let inside = old_dir.join("disk/run/agent.sock");
        rt["socket"] = inside.to_string_lossy().into_owned().into();
        store.set_runtime(&old, &rt).unwrap();
        std::fs::write(old_dir.join("runtime.json"), rt.to_string()).unwrap();
    }
    let s = Server::start_in(data, &["--pool-size", "0"]);
    let r = s.admin("GET", &format!("/v1/sandboxes/{old}"), None).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(
        stored_state(&s, &old),
        Some(lizard_server::store::StoredState::Killed)
    );
    let clean = eventually(Duration::from_secs(30), || async {
        !old_dir.exists() && host_cgroup("/sys/fs/cgroup/memory", &old).is_none()
    })
    .await;
    assert!(clean, "the old-layout sandbox was left behind");
    assert_eq!(python(&s, &keep, "print(v)").await.trim(), "7");
    // The adopted one's PID 1 is watched too.
    let pid = runtime_json(&s, &keep)["pid"].as_i64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let noticed = eventually(Duration::from_secs(60), || async {
        stored_state(&s, &keep) == Some(lizard_server::store::StoredState::Killed)
    })
    .await;
    assert!(noticed, "the adopted sandbox's PID 1 death went unnoticed");
}
