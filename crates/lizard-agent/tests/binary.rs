//! The `lizard-agent` binary's own arguments: what the server asks before it runs it in sandboxes.

use std::process::Command;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lizard-agent"))
}

/// It says the fingerprint of the sources it was built from, the one the library compiled into
/// the server has.
#[test]
fn it_says_its_build_fingerprint() {
    let out = agent().arg("--build-fingerprint").output().unwrap();
    assert!(out.status.success());
    let said = String::from_utf8(out.stdout).unwrap();
    assert_eq!(said.trim(), lizard_agent::BUILD_FINGERPRINT);
    assert_eq!(said.trim().len(), 16);
}

/// `lizard-agent agent …` is `lizard-agent …`: the server gives either binary `agent` first.
#[test]
fn a_leading_agent_argument_is_the_subcommand_of_lizard() {
    let with = agent().args(["agent", "--help"]).output().unwrap();
    let without = agent().arg("--help").output().unwrap();
    assert!(with.status.success(), "{with:?}");
    assert_eq!(with.stdout, without.stdout);
    let bad = agent().args(["agent", "--no-such-flag"]).output().unwrap();
    assert!(!bad.status.success());
}
