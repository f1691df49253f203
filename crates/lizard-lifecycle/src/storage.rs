//! What the data dir's file system has promised: every sandbox's writable layer and every volume
//! is a sparse disk image whose size is a promise ("full is ENOSPC for that sandbox only") that
//! only holds while the host's file system can back it. [`Storage::reserve`] refuses a new image
//! (a typed 507) unless it fits in the free space minus a reserve minus what is already
//! committed — for each image in the data dir (live, paused, hibernated and pooled sandboxes'
//! `sandboxes/<id>/disk.img`, every `volumes/<id>.img`), its size minus the blocks it already
//! holds (those are no longer free) — and counts it as committed until its image exists.
//!
//! `lizard serve --disk-overcommit RATIO` multiplies what may be promised (default 1.0 = strict);
//! above 1 the promise can break: sandboxes that all fill their disks meet ENOSPC of the host's
//! file system, which every sandbox and the server share.
//!
//! The images are the server's own files in root-owned directories (a sandbox writes into its
//! image's file system, never the image file); they are looked at with `symlink_metadata` and
//! never followed or opened. Per server: two servers on one file system do not see each other's
//! commitments.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MIB: u64 = 1024 * 1024;

/// Kept free whatever is promised: 5 % of the file system, at most 1 GiB.
pub fn reserve_bytes(total: u64) -> u64 {
    (total / 20).min(1024 * MIB)
}

/// A create that does not fit (HTTP 507 `insufficient_storage`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "not enough disk for {what} of {asked_mib} MiB: the data dir's file system has {free_mib} MiB \
     free, {reserve_mib} MiB of it are kept in reserve and {committed_mib} MiB are already \
     promised to other sandboxes and volumes (their size limits minus what they hold){}",
    if *overcommit == 1.0 { String::new() } else { format!(", with --disk-overcommit {overcommit}") }
)]
pub struct Insufficient {
    pub what: String,
    pub asked_mib: u64,
    pub free_mib: u64,
    pub reserve_mib: u64,
    pub committed_mib: u64,
    pub overcommit: f64,
}

/// The data dir's disk commitments.
#[derive(Debug)]
pub struct Storage {
    data_dir: PathBuf,
    overcommit: f64,
    /// Creates in progress: the image each will make and its size. Counted by their size
    /// (and not by what their image, once it exists, holds) until they end.
    in_flight: Mutex<Vec<(PathBuf, u64)>>,
}

/// A reservation: counted as committed until dropped (by then its image exists, or the create
/// failed).
#[derive(Debug)]
pub struct Reservation<'a> {
    storage: &'a Storage,
    image: PathBuf,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut v = self.storage.lock();
        if let Some(i) = v.iter().position(|(p, _)| *p == self.image) {
            v.swap_remove(i);
        }
    }
}

impl Storage {
    /// `overcommit`: how many times the free space (minus the reserve) may be promised; 1.0 is
    /// strict. Must be finite and positive (the caller checks its flag).
    pub fn new(data_dir: &Path, overcommit: f64) -> Storage {
        Storage {
            data_dir: data_dir.to_path_buf(),
            overcommit,
            in_flight: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PathBuf, u64)>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve `bytes` for the new image at `image` (`what` names it in the error), or refuse.
    pub fn reserve(
        &self,
        image: &Path,
        bytes: u64,
        what: &str,
    ) -> Result<Reservation<'_>, Insufficient> {
        let mut in_flight = self.lock();
        let (free, reserve, budget) = self.space();
        let pending: u64 = in_flight.iter().map(|(_, n)| n).sum();
        let skip: Vec<&Path> = in_flight.iter().map(|(p, _)| p.as_path()).collect();
        let committed = self.committed_except(&skip).saturating_add(pending);
        if committed.saturating_add(bytes) > budget {
            return Err(Insufficient {
                what: what.to_string(),
                asked_mib: bytes.div_ceil(MIB),
                free_mib: free / MIB,
                reserve_mib: reserve / MIB,
                committed_mib: committed.div_ceil(MIB),
                overcommit: self.overcommit,
            });
        }
        in_flight.push((image.to_path_buf(), bytes));
        Ok(Reservation {
            storage: self,
            image: image.to_path_buf(),
        })
    }

    /// The data dir's free bytes, the reserve kept of them, and what may be promised in all
    /// (the free bytes minus the reserve, times the overcommit). Where the data dir cannot be
    /// measured (it does not exist yet), nothing is refused: the budget is unbounded.
    fn space(&self) -> (u64, u64, u64) {
        let (free, total) = lizard_jail::disk::fs_space(&self.data_dir).unwrap_or((u64::MAX, 0));
        let reserve = reserve_bytes(total);
        let budget = (free.saturating_sub(reserve) as f64 * self.overcommit) as u64;
        (free, reserve, budget)
    }

    /// What may be promised in all now (before what is already committed is taken off).
    pub fn budget(&self) -> u64 {
        self.space().2
    }

    /// What the images in the data dir may still take: each one's size minus its blocks.
    pub fn committed(&self) -> u64 {
        self.committed_except(&[])
    }

    /// [`Storage::committed`] without the images at `skip` (those of creates in progress).
    fn committed_except(&self, skip: &[&Path]) -> u64 {
        let mut images = Vec::new();
        if let Ok(dirs) = std::fs::read_dir(self.data_dir.join("sandboxes")) {
            images.extend(dirs.flatten().map(|d| d.path().join("disk.img")));
        }
        if let Ok(files) = std::fs::read_dir(self.data_dir.join("volumes")) {
            images.extend(
                files
                    .flatten()
                    .map(|f| f.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "img")),
            );
        }
        images
            .iter()
            .filter(|p| !skip.contains(&p.as_path()))
            .map(|p| unbacked(p))
            .sum()
    }
}

/// A sparse image's size minus the bytes it occupies; 0 for anything but a regular file.
fn unbacked(image: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(image) {
        Ok(m) if m.file_type().is_file() => m.size().saturating_sub(m.blocks() * 512),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_five_percent_up_to_a_gib() {
        assert_eq!(reserve_bytes(100 * MIB), 5 * MIB);
        assert_eq!(reserve_bytes(1024 * 1024 * MIB), 1024 * MIB);
    }

    #[test]
    fn sparse_images_count_what_they_do_not_hold_yet() {
        let d = tempfile::tempdir().unwrap();
        let s = Storage::new(d.path(), 1.0);
        assert_eq!(s.committed(), 0);
        std::fs::create_dir_all(d.path().join("sandboxes/a")).unwrap();
        std::fs::create_dir_all(d.path().join("volumes")).unwrap();
        let img = std::fs::File::create(d.path().join("sandboxes/a/disk.img")).unwrap();
        img.set_len(64 * MIB).unwrap();
        let vol = std::fs::File::create(d.path().join("volumes/vol_x.img")).unwrap();
        vol.set_len(32 * MIB).unwrap();
        use std::io::Write;
        (&vol).write_all(&vec![1u8; MIB as usize]).unwrap();
        vol.sync_all().unwrap();
        // Not an image: ignored. A symlink named like one: not followed.
        std::fs::write(d.path().join("volumes/notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink(
            d.path().join("sandboxes/a/disk.img"),
            d.path().join("volumes/link.img"),
        )
        .unwrap();
        let c = s.committed();
        assert!((94 * MIB..=95 * MIB).contains(&c), "{c}");
    }

    #[test]
    fn creates_that_do_not_fit_are_refused_and_reservations_count() {
        let d = tempfile::tempdir().unwrap();
        let (free, total) = lizard_jail::disk::fs_space(d.path()).unwrap();
        let budget = free - reserve_bytes(total);
        let s = Storage::new(d.path(), 1.0);
        // Margins of a quarter of the budget: other processes write to this file system.
        let img = |n: &str| d.path().join(format!("sandboxes/{n}/disk.img"));
        let e = s
            .reserve(&img("a"), budget + budget / 4, "a sandbox disk")
            .unwrap_err();
        assert_eq!(e.what, "a sandbox disk");
        assert!(e.to_string().contains("MiB free"), "{e}");
        // Half now, and while it is held another three quarters do not fit.
        let half = s.reserve(&img("x"), budget / 2, "x").unwrap();
        assert!(s.reserve(&img("y"), budget / 2 + budget / 4, "y").is_err());
        // Its image, once made, is counted by the reservation, not twice.
        std::fs::create_dir_all(d.path().join("sandboxes/x")).unwrap();
        let f = std::fs::File::create(img("x")).unwrap();
        f.set_len(budget / 2).unwrap();
        assert!(s.reserve(&img("z"), budget / 4, "z").is_ok());
        drop(half);
        // Now the image alone counts.
        assert!(s.reserve(&img("y"), budget / 2 + budget / 4, "y").is_err());
        std::fs::remove_file(img("x")).unwrap();
        assert!(s.reserve(&img("y"), budget / 2 + budget / 4, "y").is_ok());
        // Overcommit multiplies what may be promised.
        let o = Storage::new(d.path(), 3.0);
        assert!(o.reserve(&img("o"), budget * 2, "o").is_ok());
    }
}
