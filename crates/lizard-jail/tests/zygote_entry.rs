//! The shared zygote's native entry (`lizard_jail::zygote_entry`) loaded into a real Python
//! interpreter, as the host-side zygote will load it: after the process entered a new mount
//! namespace, every file mapping and the exe link must come from that namespace's mounts, with
//! the private pages (the interpreter's and the program's state) carried over; a file the new
//! root lacks must fail the call before anything moved. Needs root (a mount namespace) and
//! `python3`, as CI has.

use lizard_jail::zygote_entry::{failed_stage, SHARED_OBJECT};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Runs `zygote_entry/check.py` with the entry written to a temporary file; its JSON report.
fn check(mode: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("liblizard_zygote_entry.so");
    std::fs::write(&so, SHARED_OBJECT).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zygote_entry/check.py");
    lizard_test_support::json_within(
        Command::new("python3").arg(script).arg(&so).arg(mode),
        Duration::from_secs(60),
    )
}

#[test]
fn every_file_mapping_and_the_exe_move_to_the_new_root_with_their_private_pages() {
    lizard_test_support::needs_root!();
    let r = check("move");
    let copied = r["copied"].as_i64().unwrap();
    assert!(
        copied > 0,
        "no private page carried over: {r} ({:?})",
        failed_stage(copied)
    );
    assert!(r["mappings"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["same_paths"], true, "{r}");
    // Every mapping's mount is now one of the new namespace's (the root's, on a machine whose
    // interpreter and libraries live on one file system), none of the old namespace's.
    let old = r["old_mounts"].as_array().unwrap();
    let new = r["new_mounts"].as_array().unwrap();
    assert!(new.iter().all(|m| !old.contains(m)), "{r}");
    if old.len() == 1 {
        assert_eq!(new, &vec![r["new_root"].clone()], "{r}");
    }
    assert_ne!(r["exe"][0], r["exe"][1], "{r}");
    assert_eq!(r["state_intact"], true, "{r}");
    assert_eq!(r["still_runs"], true, "{r}");
    // sha256 of str(Decimal(1) / 7), computed by extension modules loaded after the move.
    assert_eq!(
        r["imports"],
        "f6b820fdd2df7b7ddbd375441225fa0af8c4a912d6d21fae1e15cdd83f2dee92"
    );
}

#[test]
fn a_file_missing_in_the_new_root_fails_before_anything_moved() {
    lizard_test_support::needs_root!();
    let r = check("hide");
    let result = r["copied"].as_i64().unwrap();
    assert_eq!(
        failed_stage(result),
        Some(("open a mapped file in the new root", libc::ENOENT)),
        "{r}"
    );
    assert_eq!(
        r["new_mounts"], r["old_mounts"],
        "nothing may have moved: {r}"
    );
    assert_eq!(r["exe"][0], r["exe"][1], "{r}");
    assert_eq!(r["state_intact"], true, "{r}");
    assert_eq!(r["still_runs"], true, "{r}");
}
