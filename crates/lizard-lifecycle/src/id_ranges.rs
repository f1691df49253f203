//! Host uid/gid ranges of sandboxes: every sandbox's user namespace maps its ids 0..65535 onto a
//! range of its own, `id_shift + 65536 * (1 + slot)`, so that a process that escaped its
//! namespaces would meet other sandboxes' processes and files as another user. The template (and
//! volumes) stay on disk in the shared range `id_shift..id_shift + 65536`; the jail shows them
//! through an idmapped mount (`SandboxSpec::layer_id_base`).
//!
//! This is bookkeeping only: which range each sandbox (by id) holds. A range is taken at a fresh
//! launch (pooled sandboxes included), kept across pause, hibernation and server restarts (it is
//! stored in the sandbox's `Runtime`, and registered again at adoption: its writable layer's files
//! are owned by it), and released when the sandbox is destroyed.
//!
//! Not here: launching, the id maps themselves (`lizard_jail::sandbox`).

use std::collections::HashMap;
use std::sync::Mutex;

/// Ids per sandbox (the user namespace's 0..65535).
pub const RANGE: u32 = 65536;
/// At most this many sandboxes (running, paused or hibernated) at once.
pub const MAX_RANGES: u32 = 16384;

/// The host ids any sandbox may use: from `id_shift` (the template's shared range, which
/// sandboxes see through their id map) to the end of the last sandbox range (exclusive).
pub fn span(id_shift: u32) -> (u64, u64) {
    let start = u64::from(id_shift);
    (
        start,
        start + u64::from(RANGE) * (1 + u64::from(max_ranges(id_shift))),
    )
}

/// How many ranges fit above `id_shift` below 2^32 (capped at [`MAX_RANGES`]).
fn max_ranges(id_shift: u32) -> u32 {
    let room = (u64::from(u32::MAX) + 1 - u64::from(id_shift)) / u64::from(RANGE);
    room.saturating_sub(1).min(u64::from(MAX_RANGES)) as u32
}

/// Which sandbox holds which range.
#[derive(Debug)]
pub struct IdRanges {
    id_shift: u32,
    max: u32,
    /// Sandbox id → first host id of its range.
    held: Mutex<HashMap<String, u32>>,
}

impl IdRanges {
    pub fn new(id_shift: u32) -> IdRanges {
        IdRanges {
            id_shift,
            max: max_ranges(id_shift),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn base(&self, slot: u32) -> u32 {
        self.id_shift + RANGE * (1 + slot)
    }

    /// A free range for `sandbox` (the one it holds already, if any): its first host id, or
    /// `None` when every range is in use.
    pub fn take(&self, sandbox: &str) -> Option<u32> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = held.get(sandbox) {
            return Some(*b);
        }
        let used: std::collections::HashSet<u32> = held.values().copied().collect();
        let base = (0..self.max)
            .map(|s| self.base(s))
            .find(|b| !used.contains(b))?;
        held.insert(sandbox.to_string(), base);
        Some(base)
    }

    /// Record that `sandbox` holds the range starting at `base` (adoption after a restart).
    /// False if `base` is not a range start or another sandbox holds it.
    pub fn register(&self, sandbox: &str, base: u32) -> bool {
        let valid = base
            .checked_sub(self.id_shift)
            .is_some_and(|off| off % RANGE == 0 && off / RANGE >= 1 && off / RANGE <= self.max);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !valid || held.iter().any(|(id, b)| *b == base && id != sandbox) {
            return false;
        }
        held.insert(sandbox.to_string(), base);
        true
    }

    /// `sandbox` is gone: its range is free again.
    pub fn release(&self, sandbox: &str) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(sandbox);
    }

    /// How many ranges are held.
    pub fn held(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_distinct_and_above_the_template_range() {
        let r = IdRanges::new(100000);
        let a = r.take("a").unwrap();
        let b = r.take("b").unwrap();
        assert_eq!(a, 165536);
        assert_eq!(b, 165536 + 65536);
        assert_eq!(r.take("a"), Some(a), "a sandbox keeps its range");
        r.release("a");
        assert_eq!(r.take("c"), Some(a), "a released range is reused");
        assert_eq!(r.held(), 2);
    }

    #[test]
    fn registration_checks_the_base() {
        let r = IdRanges::new(100000);
        assert!(r.register("a", 165536 + 3 * 65536));
        assert!(!r.register("b", 165536 + 3 * 65536), "held by a");
        assert!(!r.register("b", 100000), "the template's range");
        assert!(!r.register("b", 165537), "not a range start");
        assert!(!r.register("b", 5), "below the shift");
        assert_ne!(r.take("b"), Some(165536 + 3 * 65536));
    }

    #[test]
    fn ranges_stay_below_2_pow_32_and_run_out() {
        let shift = u32::MAX - 3 * RANGE;
        let r = IdRanges::new(shift);
        let a = r.take("a").unwrap();
        let b = r.take("b").unwrap();
        assert!(u64::from(a.max(b)) + u64::from(RANGE) <= u64::from(u32::MAX) + 1);
        assert_eq!(r.take("c"), None);
        assert_eq!(span(shift).1, u64::from(shift) + 3 * u64::from(RANGE));
        assert_eq!(span(100000), (100000, 100000 + 65536 * (1 + 16384)));
    }
}
