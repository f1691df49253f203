//! The ids the server makes for the objects it keeps: sandboxes (and, prefixed, snapshots and
//! volumes).

/// A new sandbox id: 20 characters of `[a-z0-9]` from 100+ random bits; usable as a hostname.
pub fn new_sandbox_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut b = [0u8; 20];
    getrandom::fill(&mut b).expect("the OS random source is available");
    // The first character is a letter, so ids never look like numbers.
    b.iter()
        .enumerate()
        .map(|(i, x)| {
            let n = if i == 0 { 26 } else { 36 };
            ALPHABET[(*x as usize) % n] as char
        })
        .collect()
}
