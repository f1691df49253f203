//! The kernel's same-page merging (KSM, `/sys/kernel/mm/ksm`): a kernel thread that merges
//! identical private pages of processes that marked their memory mergeable into one read-only,
//! copy-on-write page. Lizard marks the memory of a snapshot's clones (see
//! [`crate::checkpoint::mark_mergeable`]) so that ten clones of one 200 MB state hold about one
//! copy of it; this module turns the thread on and reads what it merged. Host-wide settings of the
//! kernel's, written only when the operator asked (`lizard serve --share-clone-memory`).

use std::path::{Path, PathBuf};

/// Where the kernel exposes KSM.
pub const KSM_DIR: &str = "/sys/kernel/mm/ksm";

/// Errors of turning KSM on.
#[derive(Debug, thiserror::Error)]
pub enum KsmError {
    #[error("this kernel has no same-page merging ({0} is missing: CONFIG_KSM)")]
    Missing(PathBuf),
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What KSM has merged so far (pages of the host's page size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KsmStats {
    /// Merged pages kept (each backs several mappings).
    pub pages_shared: u64,
    /// Mappings backed by them: the pages saved are `pages_sharing`.
    pub pages_sharing: u64,
    /// Completed scans of every mergeable page.
    pub full_scans: u64,
    /// Pages scanned per wake-up of the thread (the operator's `pages_to_scan`).
    pub pages_to_scan: u64,
}

/// Turn the merging thread on (`run` = 1) unless it already is; returns whether this call did.
/// The scan rate stays the operator's (`pages_to_scan`, `sleep_millisecs`, or the kernel's
/// `advisor_mode`).
pub fn ensure_running() -> Result<bool, KsmError> {
    ensure_running_in(Path::new(KSM_DIR))
}

fn ensure_running_in(dir: &Path) -> Result<bool, KsmError> {
    let run = dir.join("run");
    let now = std::fs::read_to_string(&run).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => KsmError::Missing(run.clone()),
        _ => KsmError::Io {
            what: "reading",
            path: run.clone(),
            source,
        },
    })?;
    if now.trim() == "1" {
        return Ok(false);
    }
    std::fs::write(&run, "1").map_err(|source| KsmError::Io {
        what: "writing",
        path: run.clone(),
        source,
    })?;
    Ok(true)
}

/// Set how many pages the merging thread scans per wake-up; returns the value it had (for the
/// caller to put back: `lizard bench` raises it for one measurement).
pub fn set_pages_to_scan(pages: u64) -> Result<u64, KsmError> {
    let path = Path::new(KSM_DIR).join("pages_to_scan");
    let io = |what: &'static str| {
        let path = path.clone();
        move |source| KsmError::Io { what, path, source }
    };
    let old = std::fs::read_to_string(&path).map_err(io("reading"))?;
    std::fs::write(&path, pages.to_string()).map_err(io("writing"))?;
    Ok(old.trim().parse().unwrap_or(100))
}

/// What KSM merged; `None` without KSM.
pub fn stats() -> Option<KsmStats> {
    stats_in(Path::new(KSM_DIR))
}

fn stats_in(dir: &Path) -> Option<KsmStats> {
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(KsmStats {
        pages_shared: read("pages_shared")?,
        pages_sharing: read("pages_sharing")?,
        full_scans: read("full_scans")?,
        pages_to_scan: read("pages_to_scan")?,
    })
}

/// How many of process `pid`'s pages KSM has merged (`/proc/<pid>/ksm_merging_pages`); 0 when
/// unknown.
pub fn merging_pages(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/ksm_merging_pages"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_is_turned_on_once_and_stats_are_read() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            ensure_running_in(d.path()),
            Err(KsmError::Missing(_))
        ));
        assert_eq!(stats_in(d.path()), None);
        for (name, v) in [
            ("run", "0\n"),
            ("pages_shared", "3\n"),
            ("pages_sharing", "27\n"),
            ("full_scans", "2\n"),
            ("pages_to_scan", "100\n"),
        ] {
            std::fs::write(d.path().join(name), v).unwrap();
        }
        assert!(ensure_running_in(d.path()).unwrap());
        assert_eq!(std::fs::read_to_string(d.path().join("run")).unwrap(), "1");
        assert!(!ensure_running_in(d.path()).unwrap());
        assert_eq!(
            stats_in(d.path()),
            Some(KsmStats {
                pages_shared: 3,
                pages_sharing: 27,
                full_scans: 2,
                pages_to_scan: 100
            })
        );
    }
}
