//! The shared on-disk cache of immutable artifacts (wheels, sdists, npm tarballs, .debs).
//!
//! One file per upstream URL, named by the SHA-256 of the URL, in a root-only host directory that
//! no sandbox sees. A file is `<content-type>\n<body>`; it appears only by `rename(2)` of a complete
//! temporary file (`tmp-…` in the same directory), so a reader never sees a partial entry. The index
//! of entries and their sizes is kept in memory (rebuilt from the directory at start, oldest mtime
//! first) and bounds the total size, temporary files of downloads in flight included: a commit evicts the least recently used entries (a hit bumps
//! the entry's recency and its file's mtime, so the order survives a restart).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// The longest content type kept beside an entry.
const MAX_CONTENT_TYPE: usize = 200;

/// The cache key of an upstream URL: its SHA-256, in hex.
pub(crate) fn key(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_key(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

#[derive(Debug)]
struct Entry {
    /// The whole file: header line and body.
    size: u64,
    /// Logical clock of the last use (commit or hit).
    used: u64,
}

#[derive(Debug, Default)]
struct Index {
    entries: HashMap<String, Entry>,
    total: u64,
    /// Bytes in temporary files of downloads in flight: they count against the bound too.
    pending: u64,
    clock: u64,
}

impl Index {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.total -= e.size;
        }
    }
}

#[derive(Debug)]
pub(crate) struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    seq: AtomicU64,
    /// Keys being written now: one download per URL writes the cache at a time (others are only
    /// served), so temporary files take at most one artifact's size per URL.
    in_flight: Mutex<HashSet<String>>,
}

/// An entry found in the cache: the open file, positioned at the body.
pub(crate) struct Hit {
    pub(crate) file: tokio::fs::File,
    pub(crate) len: u64,
    pub(crate) content_type: String,
}

/// A temporary file being written; removed on drop unless committed.
pub(crate) struct Pending {
    cache: Arc<Cache>,
    file: Option<tokio::fs::File>,
    path: PathBuf,
    key: String,
    written: u64,
    /// The bytes of the temporary file counted in `Index::pending`.
    reserved: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.file.is_some() {
            // A quick unlink of our own file in our own root-only directory.
            let _ = fs::remove_file(&self.path);
        }
        if self.reserved > 0 {
            self.cache.lock().pending -= self.reserved;
        }
        let mut in_flight = self
            .cache
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        in_flight.remove(&self.key);
    }
}

impl Pending {
    /// Counts `n` more bytes of this temporary file against the cache's bound, evicting the least
    /// recently used entries to make room; `StorageFull` when downloads in flight alone would
    /// pass it (then this one is not cached).
    fn reserve(&mut self, n: u64) -> io::Result<()> {
        let cache = self.cache.clone();
        let mut index = cache.lock();
        if index.pending + n > cache.max_bytes {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "downloads in flight fill the package cache's bound",
            ));
        }
        index.pending += n;
        self.reserved += n;
        cache.evict_locked(&mut index, None);
        Ok(())
    }

    /// Body bytes written so far.
    pub(crate) fn body_len(&self) -> u64 {
        self.written
    }

    pub(crate) async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            return Err(io::Error::other("cache entry abandoned"));
        }
        self.reserve(data.len() as u64)?;
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("cache entry abandoned"))?;
        file.write_all(data).await?;
        self.written += data.len() as u64;
        Ok(())
    }
}

impl Cache {
    /// Opens (creating, mode 0700) the cache directory, removes stale temporary files and indexes
    /// the entries in it.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> io::Result<Cache> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        let mut found = Vec::new();
        for ent in fs::read_dir(dir)? {
            let ent = ent?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            let meta = ent.metadata()?;
            if name.starts_with("tmp-") && meta.is_file() {
                let _ = fs::remove_file(ent.path());
            } else if is_key(name) && meta.is_file() {
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((mtime, name.to_owned(), meta.len()));
            }
        }
        found.sort();
        let mut index = Index::default();
        for (_, key, size) in found {
            let used = index.tick();
            index.total += size;
            index.entries.insert(key, Entry { size, used });
        }
        let cache = Cache {
            dir: dir.to_owned(),
            max_bytes,
            index: Mutex::new(index),
            seq: AtomicU64::new(0),
            in_flight: Mutex::default(),
        };
        cache.evict_locked(
            &mut cache.index.lock().unwrap_or_else(|e| e.into_inner()),
            None,
        );
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (entries, bytes) in the cache now.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let index = self.lock();
        (index.entries.len() as u64, index.total)
    }

    /// The entry for `key`, if there is a complete one.
    pub(crate) async fn lookup(self: &Arc<Self>, key: &str) -> Option<Hit> {
        let seen = self.lock().entries.get(key).map(|e| e.used)?;
        let path = self.dir.join(key);
        let opened = tokio::task::spawn_blocking(move || open_entry(&path)).await;
        match opened {
            Ok(Ok(hit)) => {
                let mut index = self.lock();
                let used = index.tick();
                if let Some(e) = index.entries.get_mut(key) {
                    e.used = used;
                }
                Some(hit)
            }
            _ => {
                // Gone or damaged: forget it (a new download replaces it) — unless the entry was
                // replaced meanwhile (evicted, then committed again): forgetting that one would
                // leave its file on disk outside the bound.
                let mut index = self.lock();
                if index.entries.get(key).is_some_and(|e| e.used == seen) {
                    index.remove(key);
                }
                None
            }
        }
    }

    /// Starts a new entry for `key`; None while another download writes it.
    pub(crate) async fn begin(
        self: &Arc<Self>,
        key: &str,
        content_type: &str,
    ) -> io::Result<Option<Pending>> {
        let first = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            in_flight.insert(key.to_owned())
        };
        if !first {
            return Ok(None);
        }
        let mut pending = Pending {
            cache: self.clone(),
            file: None,
            path: PathBuf::new(),
            key: key.to_owned(),
            written: 0,
            reserved: 0,
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = self
            .dir
            .join(format!("tmp-{key}-{}-{seq}", std::process::id()));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .await?;
        pending.path = path;
        pending.file = Some(file);
        let header = format!("{}\n", clean_content_type(content_type));
        pending.reserve(header.len() as u64)?;
        if let Some(file) = pending.file.as_mut() {
            file.write_all(header.as_bytes()).await?;
        }
        Ok(Some(pending))
    }

    /// Puts a complete entry in place and evicts the least recently used entries beyond the bound.
    pub(crate) async fn commit(self: &Arc<Self>, mut pending: Pending) -> io::Result<()> {
        let mut file = pending
            .file
            .take()
            .ok_or_else(|| io::Error::other("abandoned"))?;
        let result = async {
            file.flush().await?;
            let size = file.metadata().await?.len();
            drop(file);
            let cache = self.clone();
            let (tmp, key) = (pending.path.clone(), pending.key.clone());
            // From here the bytes are the entry's (or gone), no longer in flight.
            let reserved = std::mem::take(&mut pending.reserved);
            tokio::task::spawn_blocking(move || cache.install(&tmp, &key, size, reserved))
                .await
                .map_err(io::Error::other)?
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&pending.path).await;
        }
        result
    }

    fn install(&self, tmp: &Path, key: &str, size: u64, reserved: u64) -> io::Result<()> {
        // The lock is held across the rename and the evictions so that an eviction never unlinks a
        // file another commit has just put in place.
        let mut index = self.lock();
        index.pending -= reserved;
        if size > self.max_bytes {
            drop(index);
            fs::remove_file(tmp)?;
            return Ok(());
        }
        if let Err(e) = fs::rename(tmp, self.dir.join(key)) {
            drop(index);
            let _ = fs::remove_file(tmp);
            return Err(e);
        }
        index.remove(key);
        let used = index.tick();
        index.total += size;
        index.entries.insert(key.to_owned(), Entry { size, used });
        self.evict_locked(&mut index, Some(key));
        Ok(())
    }

    fn evict_locked(&self, index: &mut Index, keep: Option<&str>) {
        while index.total + index.pending > self.max_bytes {
            let victim = index
                .entries
                .iter()
                .filter(|(k, _)| Some(k.as_str()) != keep)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else { break };
            if let Err(e) = fs::remove_file(self.dir.join(&victim)) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, "package cache: cannot evict an entry");
                }
            }
            index.remove(&victim);
        }
    }
}

/// Visible ASCII only (it goes back out as a header value), bounded; else a neutral type.
fn clean_content_type(ct: &str) -> &str {
    let ok = !ct.is_empty()
        && ct.len() <= MAX_CONTENT_TYPE
        && ct.bytes().all(|c| (b' '..=b'~').contains(&c));
    if ok {
        ct
    } else {
        "application/octet-stream"
    }
}

fn open_entry(path: &Path) -> io::Result<Hit> {
    let mut file = fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut head = [0u8; MAX_CONTENT_TYPE + 1];
    let n = read_up_to(&mut file, &mut head)?;
    let nl = head[..n]
        .iter()
        .position(|&c| c == b'\n')
        .ok_or_else(|| io::Error::other("cache entry without a header"))?;
    let content_type = String::from_utf8_lossy(&head[..nl]).into_owned();
    file.seek(SeekFrom::Start(nl as u64 + 1))?;
    // Recency for the next start's index; best effort.
    let _ = file.set_modified(SystemTime::now());
    Ok(Hit {
        file: tokio::fs::File::from_std(file),
        len: size - (nl as u64 + 1),
        content_type: clean_content_type(&content_type).to_owned(),
    })
}

fn read_up_to(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn put(cache: &Arc<Cache>, url: &str, body: &[u8]) -> String {
        let k = key(url);
        let mut p = cache
            .begin(&k, "application/x-test")
            .await
            .unwrap()
            .unwrap();
        p.write(body).await.unwrap();
        cache.commit(p).await.unwrap();
        k
    }

    #[tokio::test]
    async fn stores_reads_and_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        // Each entry is 19 header bytes + 100 body bytes; three fit, four do not.
        let cache = Arc::new(Cache::open(&root, 3 * 119 + 10).unwrap());
        assert_eq!(
            fs::metadata(&root).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let a = put(&cache, "http://x/a", &[b'a'; 100]).await;
        let b = put(&cache, "http://x/b", &[b'b'; 100]).await;
        let c = put(&cache, "http://x/c", &[b'c'; 100]).await;
        assert_eq!(cache.usage(), (3, 357));
        // Use a: b is now the oldest.
        let mut hit = cache.lookup(&a).await.unwrap();
        assert_eq!(
            (hit.len, hit.content_type.as_str()),
            (100, "application/x-test")
        );
        let mut body = Vec::new();
        hit.file.read_to_end(&mut body).await.unwrap();
        assert_eq!(body, vec![b'a'; 100]);
        let d = put(&cache, "http://x/d", &[b'd'; 100]).await;
        assert!(cache.lookup(&b).await.is_none());
        assert!(!root.join(&b).exists());
        for k in [&a, &c, &d] {
            assert!(cache.lookup(k).await.is_some());
        }
        // Reopening indexes what is there and drops stale temporary files.
        fs::write(root.join("tmp-left-by-a-crash"), b"x").unwrap();
        drop(cache);
        let cache = Arc::new(Cache::open(&root, 3 * 119 + 10).unwrap());
        assert_eq!(cache.usage(), (3, 357));
        let names: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        // Bytes in flight count against the bound: a download makes room by evicting the oldest
        // (its header line alone does here), and one larger than the whole cache is not kept.
        let big = key("http://x/big");
        let mut p = cache
            .begin(&big, "application/x-test")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cache.usage(), (2, 238));
        let full = p.write(&[0; 400]).await.unwrap_err();
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        p.write(&[0; 200]).await.unwrap();
        assert_eq!(cache.usage(), (1, 119));
        drop(p);
        assert!(cache.lookup(&big).await.is_none());
        assert_eq!(cache.lock().pending, 0);
    }

    #[tokio::test]
    async fn an_abandoned_entry_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(Cache::open(dir.path(), 1 << 20).unwrap());
        let k = key("http://x/a");
        let mut p = cache.begin(&k, "bad\ntype").await.unwrap().unwrap();
        p.write(b"partial").await.unwrap();
        // One writer per key at a time.
        assert!(cache.begin(&k, "t").await.unwrap().is_none());
        drop(p);
        assert!(cache.lookup(&k).await.is_none());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        // A content type that could not go out as a header is replaced.
        let mut p = cache.begin(&k, "bad\ntype").await.unwrap().unwrap();
        p.write(b"x").await.unwrap();
        cache.commit(p).await.unwrap();
        assert_eq!(
            cache.lookup(&k).await.unwrap().content_type,
            "application/octet-stream"
        );
    }
}
