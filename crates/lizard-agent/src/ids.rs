//! Ids the agent makes: contexts, spare and nursery kernels' cgroups, upload temporaries, E2B
//! watchers.

use std::sync::atomic::{AtomicU64, Ordering};

/// A new unguessable id: 16 random bytes as lowercase hex.
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // getrandom failing means the OS has no entropy source; fall back to time+counter, which is
        // unique (ids here are namespaced per sandbox, not secrets).
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b[..8].copy_from_slice(&(t as u64).to_le_bytes());
        b[8..].copy_from_slice(&N.fetch_add(1, Ordering::SeqCst).to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
