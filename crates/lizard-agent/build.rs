//! Sets `LIZARD_BUILD_FINGERPRINT`: a hash of every source the agent is built from (this crate,
//! the workspace crates it depends on, the kernels' runners, `Cargo.lock`). The server runs the
//! dedicated `lizard-agent` binary in sandboxes only when that binary says the same fingerprint as
//! the server's own copy of this crate (`lizard_agent::BUILD_FINGERPRINT`): a `lizard-agent` left
//! from an older build is never paired with a newer server.

use std::path::{Path, PathBuf};

/// The workspace crates the agent is built from (its own and its `lizard-*` dependencies').
const CRATES: [&str; 5] = [
    "lizard-agent",
    "lizard-proto",
    "lizard-jail",
    "lizard-http",
    "lizard-errors",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            // Tests are not part of the binary.
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// FNV-1a, 64 bits: stable across compilers (the fingerprint is compared between two binaries).
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("the crate is in crates/ of the workspace")
        .to_path_buf();
    let mut inputs: Vec<PathBuf> = CRATES.iter().map(|c| root.join("crates").join(c)).collect();
    inputs.push(root.join("kernels"));
    inputs.push(root.join("Cargo.lock"));
    let mut all = Vec::new();
    for input in &inputs {
        println!("cargo:rerun-if-changed={}", input.display());
        if input.is_dir() {
            files(input, &mut all);
        } else {
            all.push(input.clone());
        }
    }
    all.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for f in &all {
        let rel = f.strip_prefix(&root).unwrap_or(f);
        fnv(&mut hash, rel.as_os_str().as_encoded_bytes());
        fnv(&mut hash, &[0]);
        fnv(&mut hash, &std::fs::read(f).unwrap_or_default());
        fnv(&mut hash, &[0]);
    }
    println!("cargo:rustc-env=LIZARD_BUILD_FINGERPRINT={hash:016x}");
}
