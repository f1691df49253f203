//! Persistent volumes end to end: data outlives sandboxes, pause/resume and server restarts;
//! concurrent and read-only mounts; the size limit; project scoping; symlink escapes; delete while
//! mounted. Real server, real sandboxes, real ext4 images.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// Creates the volume `name` of `mib` MiB with `key`.
async fn create_volume(s: &Server, key: &str, name: &str, mib: u64) -> Value {
    let body = json!({"name": name, "size_limit_bytes": mib << 20});
    let r = s.post_as(key, "/v1/volumes", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

/// Whether anything is mounted at `path` in the test's (the host's) mount namespace.
fn host_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&p))
}

/// Kills the server's sandboxes and deletes its volumes when dropped, also when a test fails
/// (sandboxes outlive the server by design, and volume mounts are host state).
struct Cleanup<'a>(&'a Server);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let s = self.0;
        // Inside the test's runtime: run the requests on a runtime of their own.
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    s.kill_all().await;
                    let r = s.admin("GET", "/v1/volumes", None).await;
                    for v in r.body.as_array().cloned().unwrap_or_default() {
                        let id = v["volume_id"].as_str().unwrap_or_default();
                        s.admin("DELETE", &format!("/v1/volumes/{id}?force=true"), None)
                            .await;
                    }
                });
            });
        });
    }
}

/// Delete every volume (tests clean up after themselves: mounts are host state).
async fn delete_all_volumes(s: &Server) {
    let r = s.admin("GET", "/v1/volumes", None).await;
    for v in r.body.as_array().cloned().unwrap_or_default() {
        let id = v["volume_id"].as_str().unwrap();
        let d = s
            .admin("DELETE", &format!("/v1/volumes/{id}?force=true"), None)
            .await;
        assert_eq!(d.status, 204, "{}", d.text);
    }
}

/// Write in sandbox A, kill A, read in a new sandbox B (at another path). Ownership is the sandbox
/// user's; pause/resume keeps the mount; info and list show the volumes.
#[tokio::test]
async fn data_outlives_the_sandbox_that_wrote_it() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    let v = create_volume(&s, &key, "data", 64).await;
    assert!(v["volume_id"].as_str().unwrap().starts_with("vol_"));
    assert_eq!(v["size_limit_bytes"], 64 << 20);
    assert_eq!(v["mounted_by"], json!([]));

    let r = s
        .post_as(
            &key,
            "/v1/sandboxes",
            json!({"volumes": [{"name": "data"}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let a = r.body["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(r.body["volumes"][0]["name"], "data");
    assert_eq!(r.body["volumes"][0]["mount_path"], "/home/user/data");
    assert_eq!(r.body["volumes"][0]["read_only"], false);

    let (out, ex) = s
        .sh(
            &a,
            "cd /home/user/data && stat -c '%u:%g %a' . && ls -A | wc -l && \
             echo hello > note.txt && mkdir -p sub && head -c 3000000 /dev/urandom > sub/blob && \
             sha256sum sub/blob | cut -c1-64 && stat -c '%u:%g' note.txt",
        )
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{ex}");
    // The user's, setgid and group-writable: contexts (uids of their own in group 1000) share it.
    assert_eq!(lines[0], "1000:1000 2775", "root of a volume is the user's");
    assert_eq!(lines[1], "0", "a new volume is empty (no lost+found)");
    let digest = lines[2].to_string();
    // The writing context's own uid (2000 + slot), the user's group.
    assert!(
        lines[3].starts_with("20") && lines[3].ends_with(":1000"),
        "{}",
        lines[3]
    );

    // Python sees it as an ordinary directory too.
    let ex = s
        .run(
            &a,
            json!({"code": "print(open('/home/user/data/note.txt').read().strip())"}),
        )
        .await;
    assert_eq!(stdout(&ex), "hello\n");

    // Pause/resume keeps the mount and the data.
    assert_eq!(s.act(&a, "pause").await.status, 200);
    assert_eq!(s.act(&a, "resume").await.status, 200);
    let (out, _) = s.sh(&a, "cat /home/user/data/note.txt").await;
    assert_eq!(out, "hello\n");

    let info = s.admin("GET", &format!("/v1/sandboxes/{a}"), None).await;
    assert_eq!(info.body["volumes"][0]["volume_id"], v["volume_id"]);
    let vi = s.admin("GET", "/v1/volumes/data", None).await;
    assert_eq!(vi.status, 200, "{}", vi.text);
    assert_eq!(vi.body["mounted_by"], json!([a.clone()]));
    assert!(
        vi.body["used_bytes"].as_u64().unwrap() >= 3_000_000,
        "{}",
        vi.text
    );

    assert_eq!(
        s.admin("DELETE", &format!("/v1/sandboxes/{a}"), None)
            .await
            .status,
        204
    );
    let vi = s.admin("GET", "/v1/volumes/data", None).await;
    assert_eq!(vi.body["mounted_by"], json!([]));

    let b = s
        .create(
            &key,
            json!({"volumes": [{"name": "data", "mount_path": "/workspace"}]}),
        )
        .await;
    let (out, _) = s
        .sh(
            &b,
            "cat /workspace/note.txt; sha256sum /workspace/sub/blob | cut -c1-64",
        )
        .await;
    assert_eq!(out, format!("hello\n{digest}\n"));

    // Usage: volume storage is metered per project (GiB-hours) and exported to Prometheus.
    let u = s.admin("GET", "/v1/projects/default/usage", None).await;
    assert_eq!(u.status, 200, "{}", u.text);
    assert!(
        u.body["totals"]["volume_gib_hours"].as_f64().unwrap() > 0.0,
        "{}",
        u.text
    );
    assert_eq!(u.body["volumes"][0]["name"], "data");
    assert!(u.body["volumes"][0]["used_bytes"].as_u64().unwrap() >= 3_000_000);
    let m = s.admin("GET", "/metrics", None).await;
    assert_contains(
        &m.text,
        "lizard_volume_gib_hours_total{project=\"default\"}",
    );
    assert_contains(&m.text, "lizard_volumes{project=\"default\"} 1");

    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// Two sandboxes mounting one volume read-write see each other's writes (one file system, shared
/// page cache: a write is visible to the other as soon as the writer's write() returns).
#[tokio::test]
async fn concurrent_mounts_see_each_others_writes() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    create_volume(&s, &key, "shared", 32).await;
    let body = json!({"volumes": [{"name": "shared", "mount_path": "/mnt/shared"}]});
    let a = s.create(&key, body.clone()).await;
    let b = s.create(&key, body).await;
    s.sh(&a, "echo from-a > /mnt/shared/a").await;
    let (out, _) = s
        .sh(&b, "cat /mnt/shared/a; echo from-b >> /mnt/shared/a")
        .await;
    assert_eq!(out, "from-a\n");
    let (out, _) = s.sh(&a, "cat /mnt/shared/a").await;
    assert_eq!(out, "from-a\nfrom-b\n");
    let vi = s.admin("GET", "/v1/volumes/shared", None).await;
    let mut users: Vec<String> = serde_json::from_value(vi.body["mounted_by"].clone()).unwrap();
    users.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(users, want);
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// A read-only mount refuses writes (shell, Python, the files API); a read-write one of the same
/// volume at the same time still writes.
#[tokio::test]
async fn read_only_mount_refuses_writes() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    create_volume(&s, &key, "models", 32).await;
    let rw = s
        .create(&key, json!({"volumes": [{"name": "models"}]}))
        .await;
    s.sh(&rw, "echo weights > /home/user/models/w.bin").await;
    let ro = s
        .create(
            &key,
            json!({"volumes": [{"name": "models", "mount_path": "/data/models", "read_only": true}]}),
        )
        .await;
    let info = s.admin("GET", &format!("/v1/sandboxes/{ro}"), None).await;
    assert_eq!(info.body["volumes"][0]["read_only"], true);
    let (out, ex) = s
        .sh(
            &ro,
            "cat /data/models/w.bin; touch /data/models/x 2>&1; { echo more >> /data/models/w.bin; } 2>&1; \
             rm -f /data/models/w.bin 2>&1; ls /data/models",
        )
        .await;
    assert!(out.starts_with("weights\n"), "{ex}");
    assert_eq!(out.matches("Read-only file system").count(), 3, "{out}");
    assert!(out.ends_with("w.bin\n"), "{out}");
    let ex = s
        .run(
            &ro,
            json!({"code": "try:\n    open('/data/models/y', 'w')\nexcept OSError as e:\n    print(e.errno)"}),
        )
        .await;
    assert_eq!(stdout(&ex), "30\n", "EROFS");
    let r = s
        .post(
            &format!("/v1/sandboxes/{ro}/files/mkdir"),
            json!({"path": "/data/models/newdir"}),
        )
        .await;
    assert!(r.status >= 400 && r.status < 500, "{} {}", r.status, r.text);
    // The read-write mount is unaffected.
    let (out, _) = s
        .sh(
            &rw,
            "echo ok > /home/user/models/z && cat /home/user/models/z",
        )
        .await;
    assert_eq!(out, "ok\n");
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// A write past the size limit fails with ENOSPC inside the sandbox; the sandbox, its other
/// storage and the volume keep working, and deleting files frees the space again.
#[tokio::test]
async fn size_limit_is_enforced() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    create_volume(&s, &key, "small", 16).await;
    let id = s
        .create(&key, json!({"volumes": [{"name": "small"}]}))
        .await;
    let (out, ex) = s
        .sh(
            &id,
            "dd if=/dev/zero of=/home/user/small/big bs=1M count=64 2>&1 | grep -o 'No space left on device' | head -1; \
             echo still-here > /home/user/elsewhere && cat /home/user/elsewhere",
        )
        .await;
    assert_eq!(out, "No space left on device\nstill-here\n", "{ex}");
    let ex = s
        .run(
            &id,
            json!({"code": "import errno\ntry:\n    open('/home/user/small/more', 'wb').write(b'x' * (8 << 20))\nexcept OSError as e:\n    print(e.errno == errno.ENOSPC)"}),
        )
        .await;
    assert_eq!(stdout(&ex), "True\n");
    let (out, _) = s
        .sh(
            &id,
            "rm -f /home/user/small/big /home/user/small/more && \
             head -c 4000000 /dev/zero > /home/user/small/again && stat -c %s /home/user/small/again",
        )
        .await;
    assert_eq!(out, "4000000\n");
    // Bad sizes are refused up front.
    for size in [json!(1024), json!(1u64 << 50), json!(-1), json!("big")] {
        let r = s
            .post(
                "/v1/volumes",
                json!({"name": "x", "size_limit_bytes": size}),
            )
            .await;
        r.expect_error(400, "invalid_request");
    }
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// A project key never sees, mounts or deletes another project's volume (404s, as for
/// sandboxes); names are per project.
#[tokio::test]
async fn cross_project_access_is_refused() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let k1 = s.project_key("p1").await;
    let k2 = s.project_key("p2").await;
    let v = create_volume(&s, &k1, "secret", 16).await;
    let vid = v["volume_id"].as_str().unwrap().to_string();
    assert_eq!(v["project"], "p1");
    let a = s
        .create(&k1, json!({"volumes": [{"name": "secret"}]}))
        .await;
    s.sh(&a, "echo p1-data > /home/user/secret/f").await;

    for path in [
        "/v1/volumes/secret".to_string(),
        format!("/v1/volumes/{vid}"),
        "/v1/volumes/secret?project=p1".to_string(),
    ] {
        let r = s.req(Some(&k2), "GET", &path, None).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert!(!r.text.contains("p1-data"));
        let r = s
            .req(
                Some(&k2),
                "DELETE",
                &format!(
                    "{path}{}force=true",
                    if path.contains('?') { "&" } else { "?" }
                ),
                None,
            )
            .await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
    }
    let l = s.req(Some(&k2), "GET", "/v1/volumes", None).await;
    assert_eq!(l.body, json!([]));
    let l = s
        .req(Some(&k2), "GET", "/v1/volumes?project=p1", None)
        .await;
    assert_eq!(l.status, 404);
    for vol in ["secret", vid.as_str()] {
        let r = s
            .post_as(&k2, "/v1/sandboxes", json!({"volumes": [{"name": vol}]}))
            .await;
        r.expect_error(404, "not_found");
        let r = s
            .post_as(
                &k2,
                "/v1/sandboxes",
                json!({"project": "p1", "volumes": [{"name": vol}]}),
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.text);
    }
    // p2 may have its own "secret": a different file system.
    create_volume(&s, &k2, "secret", 16).await;
    let b = s
        .create(&k2, json!({"volumes": [{"name": "secret"}]}))
        .await;
    let (out, _) = s.sh(&b, "ls -A /home/user/secret | wc -l").await;
    assert_eq!(out, "0\n");
    // p1's list shows only its own.
    let l = s.req(Some(&k1), "GET", "/v1/volumes", None).await;
    assert_eq!(l.body.as_array().unwrap().len(), 1);
    assert_eq!(l.body[0]["volume_id"], vid.as_str());
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// Symlinks planted in a volume resolve inside whichever sandbox follows them, never on the host;
/// the server never follows them; the sandbox's mount table does not show the host path.
#[tokio::test]
async fn symlinks_in_a_volume_do_not_escape() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    let v = create_volume(&s, &key, "links", 16).await;
    let vid = v["volume_id"].as_str().unwrap().to_string();
    let a = s
        .create(&key, json!({"volumes": [{"name": "links"}]}))
        .await;
    let (out, ex) = s
        .sh(
            &a,
            "cd /home/user/links && ln -s / root && ln -s /etc/shadow shadow && \
             ln -s /proc/sys/kernel/hostname hn && ln -s ../../../../../../.. up && \
             ln -s /proc/1/root pid1root && ls -l | wc -l",
        )
        .await;
    assert_eq!(out, "6\n", "{ex}");
    s.admin("DELETE", &format!("/v1/sandboxes/{a}"), None).await;

    let b = s
        .create(
            &key,
            json!({"volumes": [{"name": "links", "mount_path": "/data"}]}),
        )
        .await;
    let base = format!("/v1/sandboxes/{b}/files");
    // The hostname link leads into /proc, which the files API (running in the agent) refuses
    // however the path gets there; from code it reads B's own hostname (its id), below.
    let r = s.admin("GET", &format!("{base}?path=/data/hn"), None).await;
    r.expect_error(403, "permission_denied");
    // `/` through the link is the sandbox's root: no host directories.
    let r = s
        .admin("GET", &format!("{base}/list?path=/data/root"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let names: Vec<String> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(names.iter().any(|n| n == "opt"), "{names:?}");
    for host_only in ["work", "root-of-host"] {
        assert!(!names.iter().any(|n| n == host_only), "{names:?}");
    }
    let r = s
        .admin("GET", &format!("{base}/list?path=/data/up"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("\"work\""), "{}", r.text);
    // /etc/shadow is the template's, unreadable by the sandbox user: the link gives no more.
    let direct = s
        .admin("GET", &format!("{base}?path=/etc/shadow"), None)
        .await;
    let via = s
        .admin("GET", &format!("{base}?path=/data/shadow"), None)
        .await;
    assert_eq!(via.status, direct.status, "{}", via.text);
    assert_ne!(via.status, 200);
    let (out, _) = s
        .sh(&b, "cat /data/hn; ls /data/root/ | grep -cx work; ls /data/pid1root/ 2>&1 | grep -c 'Permission denied\\|No such' || true")
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], b);
    assert_eq!(lines[1], "0");
    // The sandbox's mount table names neither the data dir nor the volume's host path.
    let data_dir = s.data_dir.path().to_string_lossy().to_string();
    let (out, _) = s.sh(&b, "grep ' /data ' /proc/self/mountinfo").await;
    assert!(out.contains(" /data "), "{out}");
    assert!(out.contains("nosuid") && out.contains("nodev"), "{out}");
    assert!(!out.contains(&data_dir) && !out.contains(&vid), "{out}");
    // On the host, the links are still just links inside the volume's mount.
    let host_dir = s.data_dir.path().join("volumes").join(&vid);
    assert!(std::fs::symlink_metadata(host_dir.join("root"))
        .unwrap()
        .file_type()
        .is_symlink());
    s.kill_all().await;
    delete_all_volumes(&s).await;
    assert!(!host_dir.exists());
    assert!(Path::new("/etc/shadow").exists() && Path::new("/work").exists());
}

/// Deleting a mounted volume is refused with `volume_in_use` (409) naming the sandboxes;
/// `force=true` kills them, then unmounts and removes the volume.
#[tokio::test]
async fn delete_while_mounted() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    let v = create_volume(&s, &key, "busy", 16).await;
    let vid = v["volume_id"].as_str().unwrap().to_string();
    let host_dir = s.data_dir.path().join("volumes").join(&vid);
    let image = s.data_dir.path().join("volumes").join(format!("{vid}.img"));
    assert!(host_mounted(&host_dir) && image.exists());
    let a = s.create(&key, json!({"volumes": [{"name": "busy"}]})).await;
    s.sh(&a, "echo x > /home/user/busy/f").await;

    let r = s.admin("DELETE", "/v1/volumes/busy", None).await;
    r.expect_error(409, "volume_in_use");
    assert_contains(r.body["message"].as_str().unwrap(), &a);
    // Still usable.
    let (out, _) = s.sh(&a, "cat /home/user/busy/f").await;
    assert_eq!(out, "x\n");

    let r = s.admin("DELETE", "/v1/volumes/busy?force=true", None).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(
        s.admin("GET", &format!("/v1/sandboxes/{a}"), None)
            .await
            .status,
        404
    );
    assert_eq!(s.admin("GET", "/v1/volumes/busy", None).await.status, 404);
    assert_eq!(
        s.admin("GET", &format!("/v1/volumes/{vid}"), None)
            .await
            .status,
        404
    );
    assert!(!host_mounted(&host_dir) && !host_dir.exists() && !image.exists());
    // A volume nobody mounts deletes without force; the name is free again.
    create_volume(&s, &key, "busy", 16).await;
    assert_eq!(
        s.admin("DELETE", "/v1/volumes/busy", None).await.status,
        204
    );
    assert_eq!(
        s.admin("DELETE", "/v1/volumes/busy", None).await.status,
        404
    );
}

/// Volumes survive a server restart: the adopted sandbox keeps its mount, the volume still counts
/// as in use, and a new sandbox sees the data.
#[tokio::test]
async fn volumes_survive_a_server_restart() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    create_volume(&s, &key, "keep", 16).await;
    create_volume(&s, &key, "idle", 16).await;
    let a = s.create(&key, json!({"volumes": [{"name": "keep"}]})).await;
    s.sh(&a, "echo before > /home/user/keep/f").await;
    std::mem::forget(cleanup);
    let dir = s.stop("-TERM");
    let s = Server::start_in(dir, &[]);
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    let info = s.admin("GET", &format!("/v1/sandboxes/{a}"), None).await;
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(info.body["volumes"][0]["name"], "keep");
    let (out, _) = s
        .sh(&a, "cat /home/user/keep/f; echo after >> /home/user/keep/f")
        .await;
    assert_eq!(out, "before\n");
    let r = s.admin("DELETE", "/v1/volumes/keep", None).await;
    assert_eq!(r.status, 409, "{}", r.text);
    let b = s
        .create(
            &key,
            json!({"volumes": [{"name": "keep"}, {"name": "idle"}]}),
        )
        .await;
    let (out, _) = s
        .sh(&b, "cat /home/user/keep/f; ls -A /home/user/idle | wc -l")
        .await;
    assert_eq!(out, "before\nafter\n0\n");
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// Bad volume requests get typed 4xx errors: names, mount paths that would shadow system
/// directories or leave the allowed roots, overlaps, unknown volumes, duplicates.
#[tokio::test]
async fn bad_volume_requests_get_typed_errors() {
    lizard_test_support::needs_root!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    for name in ["", "Data", "../x", "a/b", "vol_x", "-a", &"a".repeat(64)] {
        let r = s.post("/v1/volumes", json!({"name": name})).await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (400, Some("invalid_request")),
            "{name}: {}",
            r.text
        );
    }
    let r = s
        .post("/v1/volumes", json!({"name": "v", "bogus": 1}))
        .await;
    assert_eq!(r.status, 400);
    create_volume(&s, &key, "v", 16).await;
    let r = s.post("/v1/volumes", json!({"name": "v"})).await;
    r.expect_error(409, "conflict");

    for path in [
        "/",
        "/etc",
        "/etc/x",
        "/proc",
        "/sys",
        "/dev/x",
        "/usr/lib/x",
        "/bin",
        "/lib",
        "/tmp/x",
        "/opt/lizard/bin",
        "/run/lizard",
        "/home/user",
        "/home/user/",
        "/home/user/../../etc",
        "/home/user/./x",
        "relative",
        "/mnt",
    ] {
        let r = s
            .post(
                "/v1/sandboxes",
                json!({"volumes": [{"name": "v", "mount_path": path}]}),
            )
            .await;
        assert_eq!(
            (r.status, r.body["code"].as_str()),
            (400, Some("invalid_request")),
            "{path}: {}",
            r.text
        );
    }
    let r = s
        .post("/v1/sandboxes", json!({"volumes": [{"name": "v", "mount_path": "/data"}, {"name": "v", "mount_path": "/data/in"}]}))
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = s
        .post("/v1/sandboxes", json!({"volumes": [{"name": "v", "mount_path": "/data"}, {"name": "v", "mount_path": "/mnt/v"}]}))
        .await;
    assert_eq!(r.status, 400, "listed twice: {}", r.text);
    let r = s
        .post("/v1/sandboxes", json!({"volumes": [{"name": "nope"}]}))
        .await;
    r.expect_error(404, "not_found");
    let r = s
        .post(
            "/v1/sandboxes",
            json!({"volumes": [{"name": "v", "size": 1}]}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = s.admin("GET", "/v1/volumes?force=maybe", None).await;
    assert_eq!(r.status, 400, "{}", r.text);
    // Nothing was left running by the refused creates.
    let l = s.admin("GET", "/v1/sandboxes", None).await;
    assert_eq!(l.body, json!([]));
    delete_all_volumes(&s).await;
}

/// Sandboxes have host id ranges of their own, but a volume's files stay in the template's
/// shared range on disk (`id_shift + uid`): what one sandbox writes, another (of another range)
/// reads and writes, and inside both it is owned by the user (1000).
#[tokio::test]
async fn volumes_are_shared_across_id_ranges() {
    lizard_test_support::needs_root!();
    use std::os::unix::fs::MetadataExt;
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    let v = create_volume(&s, &key, "across", 32).await;
    let body = json!({"volumes": [{"name": "across", "mount_path": "/mnt/v"}]});
    let a = s.create(&key, body.clone()).await;
    let b = s.create(&key, body).await;
    // The two agents run as different host uids (else this test shows nothing).
    let agent_uid = |id: &str| {
        let pid = runtime_json(&s, id)["pid"].as_u64().unwrap() as u32;
        host_ids(pid, "Uid")[0]
    };
    assert_ne!(agent_uid(&a), agent_uid(&b));
    let (out, _) = s
        .sh(
            &a,
            "mkdir /mnt/v/dir && echo from-a > /mnt/v/dir/f && stat -c %u:%g /mnt/v /mnt/v/dir/f",
        )
        .await;
    // A's context's uid (2000 + its slot), in the user's group.
    let a_uid = out
        .lines()
        .nth(1)
        .and_then(|l| l.strip_suffix(":1000"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert_eq!(out, format!("1000:1000\n{a_uid}:1000\n"));
    let (out, _) = s
        .sh(&b, "cat /mnt/v/dir/f; echo from-b >> /mnt/v/dir/f && touch /mnt/v/dir/g && stat -c %u:%g /mnt/v/dir/f; stat -c %g /mnt/v/dir/g")
        .await;
    assert_eq!(out, format!("from-a\n{a_uid}:1000\n1000\n"));
    let (out, _) = s
        .sh(&a, "cat /mnt/v/dir/f; rm /mnt/v/dir/g && echo rm-ok")
        .await;
    assert_eq!(out, "from-a\nfrom-b\nrm-ok\n");
    // On the host, in the volume's mount: the shared range (id shift 100000 + 1000).
    let host = s
        .data_dir
        .path()
        .join("volumes")
        .join(v["volume_id"].as_str().unwrap())
        .join("dir/f");
    let m = std::fs::metadata(&host).unwrap();
    let a_uid: u32 = a_uid.parse().unwrap();
    assert_eq!((m.uid(), m.gid()), (100_000 + a_uid, 101_000));
    s.kill_all().await;
    delete_all_volumes(&s).await;
}

/// A sandbox with a volume is checkpointed exactly (hibernation, a snapshot's clone): the volume
/// is an external mount of the checkpoint, given again at the restore through the restored
/// sandbox's own id map (a clone's is another range), so its files keep their owners inside and
/// stay writable; what the kernels held in memory is back.
#[tokio::test]
async fn a_sandbox_with_a_volume_is_checkpointed_exactly() {
    lizard_test_support::needs_root_and_criu!();
    let s = Server::start();
    let _cleanup = Cleanup(&s);
    let key = s.admin_key.clone();
    create_volume(&s, &key, "kept", 32).await;
    let id = s
        .create(
            &key,
            json!({"volumes": [{"name": "kept", "mount_path": "/mnt/v"}]}),
        )
        .await;
    let py = context(&s, &id, "python").await;
    let run = |id: String, code: &'static str| {
        let py = py.clone();
        let s = &s;
        async move {
            let ex = s.run(&id, json!({"code": code, "context": py})).await;
            assert_eq!(ex["status"], "ok", "{ex}");
            stdout(&ex)
        }
    };
    run(
        id.clone(),
        "x = 41\nopen('/mnt/v/before', 'w').write('b')\nimport os\nprint(os.stat('/mnt/v/before').st_uid)",
    )
    .await;
    let owners = "import os\nprint(sorted((n, os.stat('/mnt/v/' + n).st_uid, os.stat('/mnt/v/' + n).st_gid) for n in os.listdir('/mnt/v')))";
    let before = run(id.clone(), owners).await;
    let h = s.act(&id, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    assert_eq!(h.body["hibernation"]["method"], "criu", "{}", h.text);
    let r = s.act(&id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["restore"]["method"], "criu", "{}", r.text);
    assert_eq!(run(id.clone(), "print(x + 1)").await, "42\n");
    assert_eq!(run(id.clone(), owners).await, before);
    run(id.clone(), "open('/mnt/v/after', 'w').write('a')").await;
    // A clone: the same volume, seen through the clone's own id range.
    let snap = s
        .post(&format!("/v1/sandboxes/{id}/snapshots"), json!({}))
        .await;
    assert_eq!(snap.status, 201, "{}", snap.text);
    assert_eq!(snap.body["method"], "criu", "{}", snap.text);
    let c = s
        .post(
            "/v1/sandboxes",
            json!({"snapshot_id": snap.body["snapshot_id"]}),
        )
        .await;
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(c.body["restore"]["method"], "criu", "{}", c.text);
    let cid = c.body["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(run(cid.clone(), "print(x + 1)").await, "42\n");
    let both = run(cid.clone(), owners).await;
    assert!(both.contains("'after'"), "{both}");
    // The same owners inside as in the source (its files are not shown as nobody's).
    let first = before.trim().trim_start_matches('[').trim_end_matches(']');
    assert!(both.contains(first), "{both} lacks {first}");
    assert!(!both.contains("65534"), "{both}");
    run(cid.clone(), "open('/mnt/v/from-clone', 'w').write('c')").await;
    assert!(run(id.clone(), "import os\nprint(os.listdir('/mnt/v'))")
        .await
        .contains("from-clone"));
    s.kill_all().await;
    delete_all_volumes(&s).await;
}
