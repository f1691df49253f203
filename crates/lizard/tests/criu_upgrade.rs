//! CRIU checkpoints across a server upgrade: a sandbox hibernated exactly and a snapshot taken by
//! one `lizard` binary are restored exactly by another one (a stand-in for an upgrade) on the
//! same data dir. A restored agent maps the executable it was dumped with, so the restore binds
//! the kept copy of the old binary (`<data>/agent-exe-kept/<digest>/lizard`), not the current
//! one (see docs/ARCHITECTURE.md, "Hibernation"). Real servers, real sandboxes, real CRIU.
//!
//! Skipped, with a message, only when the cached CRIU is not installed and `LIZARD_REQUIRE_CRIU`
//! is not 1.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

async fn run_in(s: &Server, id: &str, ctx: &str, code: &str) -> Value {
    let ex = s.run(id, json!({"code": code, "context": ctx})).await;
    assert_eq!(ex["status"], "ok", "{ex}");
    ex
}

fn int(ex: &Value) -> u64 {
    stdout(ex)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {ex}"))
}

/// Another `lizard` binary that runs the same code: a copy of ours with some bytes appended
/// (trailing bytes alone would not do: the agent's copy keeps only every program header's
/// extent, see `lizard_jail::exe`), whose `PT_GNU_STACK` program header (of which nothing reads
/// the offset and size: only its flags count) is made to cover the 64 KiB after that extent, so
/// the agent's copy is larger, as an upgraded binary's would be.
fn upgraded_binary(dir: &Path) -> PathBuf {
    let mut elf = std::fs::read(env!("CARGO_BIN_EXE_lizard")).unwrap();
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let phoff = u64_at(&elf, 0x20) as usize;
    let phentsize = u16::from_le_bytes([elf[0x36], elf[0x37]]) as usize;
    let phnum = u16::from_le_bytes([elf[0x38], elf[0x39]]) as usize;
    let stack = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&at| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 0x6474_e551)
        .expect("lizard has a PT_GNU_STACK header");
    let extent = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .map(|at| u64_at(&elf, at + 8) + u64_at(&elf, at + 32))
        .max()
        .unwrap();
    let extra = 64 * 1024u64;
    elf.extend(std::iter::repeat_n(0x5a, extra as usize));
    let end = (extent + extra).min(elf.len() as u64);
    elf[stack + 8..stack + 16].copy_from_slice(&extent.to_le_bytes()); // p_offset
    elf[stack + 32..stack + 40].copy_from_slice(&(end - extent).to_le_bytes()); // p_filesz
    let path = dir.join("lizard-upgraded");
    std::fs::write(&path, &elf).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    // It runs. (A test thread of this binary that forks while the file is still open for writing
    // holds the write descriptor until its child execs: ETXTBSY for a moment. Retried.)
    let mut tries = 0;
    let out = loop {
        match std::process::Command::new(&path).arg("--help").output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    assert!(out.status.success(), "{out:?}");
    path
}

fn kept_digests(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("agent-exe-kept"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn manifest_digest(path: &Path) -> Option<String> {
    let m: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    m["agent_exe"].as_str().map(str::to_string)
}

async fn hibernate(s: &Server, id: &str) -> Value {
    let h = s.act(id, "hibernate").await;
    assert_eq!(h.status, 200, "{}", h.text);
    assert_eq!(h.body["state"], "hibernated", "{}", h.text);
    let h = h.body["hibernation"].clone();
    assert_eq!(h["method"], "criu", "{h}");
    h
}

async fn resume(s: &Server, id: &str) -> Value {
    let r = s.act(id, "resume").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["restore"].clone()
}

/// A Python context with `x = 41` and a thread counting `n`; its id.
async fn counting(s: &Server, id: &str) -> String {
    let py = context(s, id, "python").await;
    run_in(
        s,
        id,
        &py,
        "import threading, time\n\
         x = 41\n\
         n = 0\n\
         def count():\n    global n\n    while True:\n        n += 1\n        time.sleep(0.01)\n\
         threading.Thread(target=count, daemon=True).start()",
    )
    .await;
    py
}

/// `x` is still there and the thread still counts (two reads 0.2 s apart differ).
async fn still_counting(s: &Server, id: &str, py: &str) {
    let ex = run_in(s, id, py, "print(x + 1)").await;
    assert_eq!(stdout(&ex), "42\n", "{ex}");
    let a = int(&run_in(s, id, py, "print(n)").await);
    let b = int(&run_in(s, id, py, "time.sleep(0.2); print(n)").await);
    assert!(b > a, "the thread stopped counting in {id}: {a} then {b}");
}

/// From inside sandbox `id`, restored with the old binary, as its root: the agent's file is a
/// read-only bind of a tmpfs rooted at `/lizard` (no host path, nothing of the data dir), and
/// neither it nor `/proc/1/exe` can be written or unmounted.
async fn old_binary_is_sealed_from_inside(s: &Server, id: &str, data: &Path) {
    let (out, ex) = s.sh(id, "cat /proc/self/mountinfo").await;
    assert!(!out.contains(&data.display().to_string()), "{out}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("/opt/lizard/bin"))
        .collect();
    assert_eq!(lines.len(), 1, "{ex}");
    let f: Vec<&str> = lines[0].split(' ').collect();
    let sep = f.iter().position(|x| *x == "-").unwrap();
    assert_eq!(
        (f[3], f[4], f[sep + 1]),
        ("/lizard", "/opt/lizard/bin/lizard", "tmpfs"),
        "{}",
        lines[0]
    );
    assert!(f[5].split(',').any(|o| o == "ro"), "{}", lines[0]);
    let cmd = "for f in /proc/1/exe /opt/lizard/bin/lizard; do echo x >> $f 2>/dev/null || echo refused; done; \
               umount /opt/lizard/bin/lizard 2>/dev/null || echo refused";
    let out = s.root_cmd(id, cmd).await;
    assert_eq!(out["stdout"], "refused\nrefused\nrefused\n", "{out}");
}

/// The SHA-256 of `path` (host side), as `sha256sum` prints it.
fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

fn criu_flags(criu: &Path) -> [&str; 2] {
    ["--criu", criu.to_str().unwrap()]
}

/// A server of this build using `criu`, and the upgraded binary, built into `bin`.
fn before_upgrade(criu: &Path, bin: &Path) -> (Server, PathBuf) {
    let upgraded = upgraded_binary(bin);
    let s = Server::start_in(tempfile::tempdir().unwrap(), &criu_flags(criu));
    (s, upgraded)
}

#[tokio::test]
async fn checkpoints_are_restored_exactly_by_an_upgraded_server() {
    let criu = lizard_test_support::needs_root_and_criu!();
    let bin_dir = tempfile::tempdir().unwrap();
    let (s, upgraded) = before_upgrade(&criu, bin_dir.path());
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let py = counting(&s, &id).await;
    // One sandbox hibernates, another is snapshotted: CRIU checkpoints of the first binary.
    let src = s.create(&s.admin_key.clone(), json!({})).await;
    let src_py = counting(&s, &src).await;
    let r = s
        .post(&format!("/v1/sandboxes/{src}/snapshots"), json!({}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["method"], "criu", "{}", r.text);
    let snap = r.body["snapshot_id"].as_str().unwrap().to_string();
    hibernate(&s, &id).await;
    let data = s.data_dir.path().to_path_buf();
    let old_digest = manifest_digest(&data.join("sandboxes").join(&id).join("criu.json"))
        .expect("the hibernation's manifest names its agent binary");
    assert_eq!(
        manifest_digest(&data.join("snapshots").join(&snap).join("criu.json")).as_deref(),
        Some(old_digest.as_str())
    );
    assert_eq!(kept_digests(&data), vec![old_digest.clone()]);
    let kept = data.join("agent-exe-kept").join(&old_digest).join("lizard");
    let meta = std::fs::metadata(&kept).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(meta.permissions().mode() & 0o7777, 0o555);
    assert_eq!(meta.uid(), 0);
    let root = std::fs::metadata(data.join("agent-exe-kept")).unwrap();
    assert_eq!(root.permissions().mode() & 0o777, 0o700);
    let old_len = meta.len();

    // A copy no checkpoint references, which the next start removes.
    let stray = data.join("agent-exe-kept").join("0".repeat(64));
    std::fs::create_dir(&stray).unwrap();
    std::fs::copy(&kept, stray.join("lizard")).unwrap();

    // The upgrade: another binary on the same data dir.
    let dir = s.stop("-TERM");
    let s = Server::start_from(&upgraded, dir, &criu_flags(&criu));
    let current = std::fs::metadata(data.join("agent-exe").join("lizard")).unwrap();
    assert_ne!(
        current.len(),
        old_len,
        "the stand-in for an upgrade has an agent file of its own"
    );
    assert!(
        !stray.exists(),
        "an unreferenced kept copy survived the start"
    );
    assert!(kept.is_file(), "a referenced kept copy was removed");

    // The resume is exact: the thread still counts.
    let r = resume(&s, &id).await;
    assert_eq!(r["method"], "criu", "{r}");
    still_counting(&s, &id, &py).await;

    // The snapshot of the first binary clones exactly too.
    let c = s
        .post("/v1/sandboxes", json!({ "snapshot_id": snap }))
        .await;
    assert_eq!(c.status, 201, "{}", c.text);
    assert_eq!(c.body["restore"]["method"], "criu", "{}", c.text);
    let clone = c.body["sandbox_id"].as_str().unwrap().to_string();
    still_counting(&s, &clone, &src_py).await;
    // Both run the old binary from a sealed bind, and its kept copy is what it was.
    old_binary_is_sealed_from_inside(&s, &id, &data).await;
    old_binary_is_sealed_from_inside(&s, &clone, &data).await;
    assert_eq!(sha256(&kept), old_digest);
    // The source, adopted by the new server, still runs too.
    still_counting(&s, &src, &src_py).await;

    // The resumed sandbox still runs the first binary: hibernated again, its checkpoint says so,
    // and it comes back exactly once more.
    hibernate(&s, &id).await;
    assert_eq!(
        manifest_digest(&data.join("sandboxes").join(&id).join("criu.json")).as_deref(),
        Some(old_digest.as_str())
    );
    let r = resume(&s, &id).await;
    assert_eq!(r["method"], "criu", "{r}");
    still_counting(&s, &id, &py).await;

    // The source, launched by the first binary and adopted running by the second, is
    // checkpointed exactly by it too (its binary was kept at the first one's start).
    hibernate(&s, &src).await;
    assert_eq!(
        manifest_digest(&data.join("sandboxes").join(&src).join("criu.json")).as_deref(),
        Some(old_digest.as_str())
    );
    let r = resume(&s, &src).await;
    assert_eq!(r["method"], "criu", "{r}");
    still_counting(&s, &src, &src_py).await;

    for sb in [&id, &clone, &src] {
        let r = s
            .admin("DELETE", &format!("/v1/sandboxes/{sb}"), None)
            .await;
        assert!(r.status < 300, "{}", r.text);
    }
}

/// A checkpoint whose agent binary is not kept any more is not restored with another binary: the
/// resume relaunches the sandbox with fresh contexts (an exact hibernation is the checkpoint
/// alone) and says why.
#[tokio::test]
async fn a_missing_agent_binary_relaunches_with_fresh_contexts_and_the_reason() {
    let criu = lizard_test_support::needs_root_and_criu!();
    let bin_dir = tempfile::tempdir().unwrap();
    let (s, upgraded) = before_upgrade(&criu, bin_dir.path());
    let id = s.create(&s.admin_key.clone(), json!({})).await;
    let py = context(&s, &id, "python").await;
    run_in(&s, &id, &py, "x = 41").await;
    hibernate(&s, &id).await;
    let data = s.data_dir.path().to_path_buf();
    let dir = s.stop("-TERM");
    std::fs::remove_dir_all(data.join("agent-exe-kept")).unwrap();
    let s = Server::start_from(&upgraded, dir, &criu_flags(&criu));
    let r = resume(&s, &id).await;
    let why = r["method_reason"].as_str().unwrap();
    assert!(why.contains("not kept"), "{why}");
    // An exact hibernation is the checkpoint alone: the sandbox runs again, with fresh contexts.
    assert_relaunched_with_fresh_contexts(&s, &id, &r, &py).await;
}
