//! The shared zygote's native entry, as a shared object to load into the host-side Python zygote
//! (`docs/design/shared-zygote.md`, steps 5 and 6): `long lizard_zygote_remap(const char *prefix,
//! size_t prefix_len)` remaps every file mapping of the calling process onto the file at the same
//! path in its current root and re-points its exe link there, so that a fork which joined a
//! sandbox's namespaces maps only the sandbox's own files (CRIU refuses any other). It returns the
//! number of private pages it carried over, or `-(stage << 16 | errno)`.
//!
//! Source: `cdylib/zygote_entry.rs`, compiled by this crate's `build.rs` (no dependencies,
//! `no_std`, so `dlclose` can unmap it once the call returned).
//!
//! Not here: the zygote itself, the namespaces it joins, or when the call is made.

/// The shared object's bytes (an ELF `cdylib` for the target this crate was built for).
pub const SHARED_OBJECT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/liblizard_zygote_entry.so"));

/// The exported function's name.
pub const REMAP_SYMBOL: &str = "lizard_zygote_remap";

/// The stage of a failed call, from its negative result (`None` for a success).
pub fn failed_stage(result: i64) -> Option<(&'static str, i32)> {
    if result >= 0 {
        return None;
    }
    let v = -result;
    let stage = match v >> 16 {
        1 => "scratch memory",
        2 => "read /proc/self/maps",
        3 => "a deleted, shared or surplus file mapping",
        4 => "open a mapped file in the new root",
        5 => "open /proc/self/pagemap",
        6 => "map the new file",
        7 => "read /proc/self/pagemap",
        8 => "protect the new mapping",
        9 => "move the new mapping over the old",
        10 => "open the exe in the new root",
        11 => "read /proc/self/stat",
        12 => "PR_SET_MM_MAP",
        _ => "unknown stage",
    };
    Some((stage, (v & 0xffff) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_object_is_an_elf_shared_object() {
        assert_eq!(&SHARED_OBJECT[..4], b"\x7fELF");
        // e_type (offset 16, little-endian): ET_DYN
        assert_eq!(
            u16::from_le_bytes([SHARED_OBJECT[16], SHARED_OBJECT[17]]),
            3
        );
    }

    #[test]
    fn failures_name_their_stage_and_errno() {
        assert_eq!(failed_stage(12), None);
        assert_eq!(
            failed_stage(-((4 << 16) | 2)),
            Some(("open a mapped file in the new root", 2))
        );
        assert_eq!(
            failed_stage(-((12 << 16) | 16)),
            Some(("PR_SET_MM_MAP", 16))
        );
    }
}
