//! The agent binaries CRIU checkpoints need: a restored agent maps the very executable file it
//! was dumped with, so a checkpoint taken before a server upgrade must be restored with the old
//! binary, not the current one (a different size is refused by CRIU; the same size would run
//! other code).
//!
//! Every dump records the digest (SHA-256) of the agent file its sandbox runs
//! ([`Runtime::agent_exe`](super::Runtime)) and makes sure a content-addressed copy of that file
//! is kept on the data dir's disk, `<data>/agent-exe-kept/<digest>/lizard` (directories 0700,
//! the file 0555, root's; written under a temporary name and renamed, so a copy is whole or
//! absent). A restore binds the current file (`<data>/agent-exe/lizard`, see
//! `SealedExe::install_in_tmpfs`) when the digest is the current one; else the kept copy,
//! installed first on a tmpfs of its own (`<data>/agent-exe-old/<digest>`, like the current
//! one: the sandbox's mountinfo shows no host path) and checked against its digest. A missing or
//! damaged copy fails the restore with that reason. At server start, copies that no kept
//! checkpoint and no sandbox references are removed ([`collect_garbage`]).
//!
//! None of these paths is one a sandbox can write: all are under the data dir, root's alone.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The kept copies: `<data>/<KEPT_DIR>/<digest>/<FILE>`.
pub const KEPT_DIR: &str = "agent-exe-kept";
/// Tmpfs mounts of older copies a restore binds: `<data>/<OLD_DIR>/<digest>/<FILE>`.
pub const OLD_DIR: &str = "agent-exe-old";
/// The agent file's name in every directory above.
pub const FILE: &str = "lizard";
/// The most kept copies the garbage collection looks at (bounded work at start-up).
const MAX_KEPT: usize = 10_000;
/// The most bytes read of one manifest or runtime file by the garbage collection.
const MAX_JSON: u64 = 4 << 20;

/// Whether `d` is a digest as [`digest_of`] writes it (64 lowercase hex digits): the only names
/// ever joined to a path.
pub fn is_digest(d: &str) -> bool {
    d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// SHA-256 of the file at `path` (blocking), as 64 lowercase hex digits.
pub fn digest_of(path: &Path) -> io::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The agent file a sandbox's restore binds, and the digest of what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFile {
    pub path: PathBuf,
    pub digest: String,
}

/// The server's agent files: the current one (on its tmpfs) and the kept copies.
#[derive(Debug)]
pub struct AgentExes {
    data_dir: PathBuf,
    current_file: PathBuf,
    current: tokio::sync::OnceCell<Result<String, String>>,
    /// Older copies installed on tmpfs this run (digest → file), so each is made once.
    old: tokio::sync::Mutex<HashMap<String, PathBuf>>,
}

impl AgentExes {
    /// The agent files of data dir `data_dir`, the current one at `current_file` (its digest is
    /// computed at the first use: call [`AgentExes::current_digest`] early, in the background).
    pub fn new(data_dir: &Path, current_file: &Path) -> AgentExes {
        AgentExes {
            data_dir: data_dir.to_path_buf(),
            current_file: current_file.to_path_buf(),
            current: tokio::sync::OnceCell::new(),
            old: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The current file's path.
    pub fn current_file(&self) -> &Path {
        &self.current_file
    }

    /// The digest of the current file (hashed once, in a blocking task).
    pub async fn current_digest(&self) -> Result<String, String> {
        self.current
            .get_or_init(|| async {
                let path = self.current_file.clone();
                tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let d = digest_of(&path)
                        .map_err(|e| format!("hashing {}: {e}", path.display()))?;
                    tracing::info!(digest = %d, ms = started.elapsed().as_millis() as u64, "the agent binary's digest");
                    Ok(d)
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
            })
            .await
            .clone()
    }

    fn kept_path(&self, digest: &str) -> PathBuf {
        self.data_dir.join(KEPT_DIR).join(digest).join(FILE)
    }

    /// Make sure the kept copy of `digest` exists (at a dump of a sandbox that runs it): copied
    /// from the current file when it is the current binary; an older one must be kept already.
    pub async fn keep(&self, digest: &str) -> Result<(), String> {
        if !is_digest(digest) {
            return Err(format!("not an agent digest: {digest:?}"));
        }
        let kept = self.kept_path(digest);
        if is_kept_file(&kept) {
            return Ok(());
        }
        if self.current_digest().await? != digest {
            return Err(format!(
                "the agent binary {digest} the sandbox runs is no longer kept"
            ));
        }
        let (from, root) = (self.current_file.clone(), self.data_dir.join(KEPT_DIR));
        let digest = digest.to_string();
        tokio::task::spawn_blocking(move || write_kept(&root, &digest, &from))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("keeping a copy of the agent binary: {e}"))
    }

    /// The file to bind for the restore of a checkpoint of an agent with `digest` (`None`: a
    /// checkpoint from before digests were recorded, restored with the current file).
    pub async fn for_restore(&self, digest: Option<&str>) -> Result<AgentFile, String> {
        let current = self.current_digest().await?;
        let digest = match digest {
            None => current,
            Some(d) if d == current => current,
            Some(d) => d.to_string(),
        };
        if digest == self.current_digest().await? {
            return Ok(AgentFile {
                path: self.current_file.clone(),
                digest,
            });
        }
        if !is_digest(&digest) {
            return Err(format!(
                "the checkpoint names no valid agent binary ({digest:?})"
            ));
        }
        let mut old = self.old.lock().await;
        if let Some(p) = old.get(&digest) {
            return Ok(AgentFile {
                path: p.clone(),
                digest,
            });
        }
        let kept = self.kept_path(&digest);
        if !is_kept_file(&kept) {
            return Err(format!(
                "the checkpoint was taken with another server binary (agent {digest}), whose \
                 copy is not kept in {}",
                kept.display()
            ));
        }
        let dir = self.data_dir.join(OLD_DIR);
        let d = digest.clone();
        let path = tokio::task::spawn_blocking(move || install_old(&dir, &d, &kept))
            .await
            .map_err(|e| e.to_string())??;
        old.insert(digest.clone(), path.clone());
        Ok(AgentFile { path, digest })
    }

    /// Detach the tmpfs mounts of older copies (at server exit; sandboxes keep their binds).
    pub fn unmount_old(&self) {
        if let Ok(old) = self.old.try_lock() {
            for p in old.values() {
                if let Some(dir) = p.parent() {
                    lizard_jail::exe::remove_tmpfs_copy(dir);
                }
            }
        }
    }
}

/// Whether `path` is a kept copy: a regular file (no link followed), not writable.
fn is_kept_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.file_type().is_file() && m.permissions().mode() & 0o222 == 0)
}

/// A root-only (0700) directory at `dir`, made if missing; refused if it is anything else.
fn root_only_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Copy `from` to `<root>/<digest>/lizard` (0555): into a fresh temporary directory, checked
/// against `digest`, then renamed into place.
fn write_kept(root: &Path, digest: &str, from: &Path) -> io::Result<()> {
    root_only_dir(root)?;
    // A name of this call's own: concurrent dumps of the same binary each write their copy.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = root.join(format!(".tmp-{digest}-{}-{n}", std::process::id()));
    let _ = remove_kept_dir(&tmp);
    std::fs::create_dir(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))?;
    let r = (|| {
        let file = tmp.join(FILE);
        let mut src = std::fs::File::open(from)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o555)
            .open(&file)?;
        io::copy(&mut src, &mut out)?;
        out.flush()?;
        out.sync_all()?;
        drop(out);
        if digest_of(&file)? != digest {
            return Err(io::Error::other(
                "the agent binary changed while it was copied",
            ));
        }
        let dst = root.join(digest);
        match std::fs::rename(&tmp, &dst) {
            Ok(()) => Ok(()),
            // Another dump kept it meanwhile.
            Err(_) if is_kept_file(&dst.join(FILE)) => Ok(()),
            Err(e) => Err(e),
        }
    })();
    if r.is_err() || tmp.exists() {
        let _ = remove_kept_dir(&tmp);
    }
    r
}

/// Install the kept copy `kept` on a tmpfs of its own at `<dir>/<digest>` and check its digest.
fn install_old(dir: &Path, digest: &str, kept: &Path) -> Result<PathBuf, String> {
    root_only_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mount = dir.join(digest);
    let exe = lizard_jail::exe::SealedExe::copy_of(kept, "lizard-agent-old")
        .map_err(|e| lizard_jail::error_chain(&e))?;
    let path = exe
        .install_in_tmpfs(&mount, FILE)
        .map_err(|e| lizard_jail::error_chain(&e))?;
    match digest_of(&path) {
        Ok(d) if d == digest => Ok(path),
        Ok(d) => {
            lizard_jail::exe::remove_tmpfs_copy(&mount);
            Err(format!(
                "the kept agent binary {} is damaged (its digest is {d})",
                kept.display()
            ))
        }
        Err(e) => {
            lizard_jail::exe::remove_tmpfs_copy(&mount);
            Err(format!("hashing {}: {e}", path.display()))
        }
    }
}

/// Remove a kept copy's directory: its file and itself, nothing else (no link followed).
fn remove_kept_dir(dir: &Path) -> io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() {
        return std::fs::remove_file(dir);
    }
    for e in std::fs::read_dir(dir)?.take(16) {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            let _ = std::fs::remove_dir(&p);
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    std::fs::remove_dir(dir)
}

/// The `agent_exe` field of the JSON file at `path` (a manifest or a runtime), if any: read with a
/// size limit, no link followed.
pub fn agent_exe_named_in(path: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        #[serde(default)]
        agent_exe: Option<String>,
    }
    // Checked before the open: the directories are root's alone, so it cannot change between.
    if !std::fs::symlink_metadata(path).ok()?.file_type().is_file() {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_JSON).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice::<Named>(&bytes).ok()?.agent_exe
}

/// The digests referenced by the files `names` in each directory under each of `roots` (at most
/// `MAX_KEPT` directories per root; links are not followed).
pub fn referenced_in(roots: &[PathBuf], names: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for e in entries.flatten().take(MAX_KEPT * 10) {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for name in names {
                if let Some(d) = agent_exe_named_in(&e.path().join(name)) {
                    out.insert(d);
                }
            }
        }
    }
    out
}

/// Remove the kept copies in `<data_dir>/agent-exe-kept` whose digest is not in `keep` (and
/// leftovers of interrupted copies); returns how many went. Bounded: at most `MAX_KEPT` entries
/// are looked at, links are removed, never followed.
pub fn collect_garbage(data_dir: &Path, keep: &BTreeSet<String>) -> io::Result<usize> {
    let root = data_dir.join(KEPT_DIR);
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for e in entries.take(MAX_KEPT) {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if is_digest(&name) && keep.contains(name.as_ref()) {
            continue;
        }
        if remove_kept_dir(&e.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

impl super::Sandboxes {
    /// At server start, before any dump: remove the kept agent binaries that no kept checkpoint
    /// (a hibernated sandbox's or a snapshot's manifest) and no sandbox (its runtime file)
    /// references. Bounded (see [`collect_garbage`]); failures are logged.
    pub async fn clean_kept_agent_exes(&self) {
        let data = self.cfg.data_dir.clone();
        let roots = vec![self.sandboxes_dir(), data.join("snapshots")];
        let r = tokio::task::spawn_blocking(move || {
            let keep = referenced_in(&roots, &[super::CRIU_MANIFEST, super::RUNTIME_FILE]);
            collect_garbage(&data, &keep).map(|n| (n, keep.len()))
        })
        .await;
        match r {
            Ok(Ok((0, _))) => {}
            Ok(Ok((removed, kept))) => {
                tracing::info!(
                    removed,
                    kept,
                    "kept agent binaries no checkpoint references"
                )
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cleaning the kept agent binaries"),
            Err(e) => tracing::warn!(error = %e, "cleaning the kept agent binaries"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_collection_keeps_what_is_referenced_and_nothing_else() {
        let data = tempfile::tempdir().unwrap();
        let src = data.path().join("agent");
        std::fs::write(&src, b"one agent binary").unwrap();
        let a = digest_of(&src).unwrap();
        std::fs::write(&src, b"another agent binary").unwrap();
        let b = digest_of(&src).unwrap();
        let root = data.path().join(KEPT_DIR);
        // `a` kept while the file was its content, then `b`.
        std::fs::write(&src, b"one agent binary").unwrap();
        write_kept(&root, &a, &src).unwrap();
        std::fs::write(&src, b"another agent binary").unwrap();
        write_kept(&root, &b, &src).unwrap();
        // A copy that does not match its name is refused and leaves nothing.
        assert!(write_kept(&root, &"0".repeat(64), &src).is_err());
        let kept = root.join(&a).join(FILE);
        assert!(is_kept_file(&kept));
        let m = std::fs::metadata(&kept).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o555);
        assert_eq!(
            std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
            0o700
        );

        // `a` named by a hibernated sandbox's manifest, `b` by nothing; junk beside them.
        let sandboxes = data.path().join("sandboxes");
        std::fs::create_dir_all(sandboxes.join("s1")).unwrap();
        std::fs::write(
            sandboxes.join("s1/criu.json"),
            format!(r#"{{"image_bytes":1,"agent_exe":"{a}"}}"#),
        )
        .unwrap();
        std::fs::create_dir_all(sandboxes.join("s2")).unwrap();
        std::fs::write(sandboxes.join("s2/criu.json"), b"not json").unwrap();
        // A link to a manifest elsewhere is not followed.
        std::fs::create_dir_all(sandboxes.join("s3")).unwrap();
        let elsewhere = data.path().join("elsewhere.json");
        std::fs::write(&elsewhere, format!(r#"{{"agent_exe":"{b}"}}"#)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, sandboxes.join("s3/criu.json")).unwrap();
        std::fs::write(root.join("junk"), b"x").unwrap();
        let outside = data.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep-me"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("f".repeat(64))).unwrap();

        let refs = referenced_in(&[sandboxes, data.path().join("missing")], &["criu.json"]);
        assert_eq!(refs, BTreeSet::from([a.clone()]));
        let removed = collect_garbage(data.path(), &refs).unwrap();
        assert_eq!(removed, 3, "b, the junk file and the link");
        assert!(is_kept_file(&root.join(&a).join(FILE)));
        assert!(!root.join(&b).exists());
        assert!(outside.join("keep-me").exists(), "a link is never followed");
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn digests_are_the_only_names_used() {
        assert!(is_digest(&"a".repeat(64)));
        assert!(!is_digest(&"A".repeat(64)));
        assert!(!is_digest("../../etc"));
        assert!(!is_digest(&format!("{}/", "a".repeat(63))));
    }
}
