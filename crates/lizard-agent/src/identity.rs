//! The sandbox's identity as the processes the agent starts see it: `LIZARD_SANDBOX_ID` and
//! `HOSTNAME` in their environment.
//!
//! The server puts both in the agent's own environment at launch, and every child inherits them.
//! A CRIU clone or fork, though, restores the source's agent as it was — with the source's
//! environment in its memory. The server's socket handover after the restore (`crate::relisten`)
//! then names the clone's own id; it is kept here (the agent is multi-threaded: its environment is
//! never changed with `set_var`) and every process the agent starts from then on gets it
//! ([`apply`], [`env`]): kernels and zygotes, forked kernels (the zygote's fork request carries
//! it), commands, terminals and E2B processes. Processes that ran before the checkpoint (a
//! restored kernel, a running command) are exact copies and keep the source's value in their
//! own memory.

use std::sync::RwLock;

/// The id the server named in the last handover, if any.
static OVERRIDE: RwLock<Option<String>> = RwLock::new(None);

/// Longest sandbox id taken (the server's are 20 characters).
pub const MAX_ID: usize = 64;

/// Whether `id` looks like a sandbox id: 1 to [`MAX_ID`] characters of `[a-z0-9]`, starting with
/// a letter (usable as a hostname and in an environment variable as is).
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Take `id` as this sandbox's id from now on (checked with [`valid_id`]; an invalid one is
/// refused and the old identity stays). Returns whether it differs from the id the agent's
/// children had until now (the last one named, or the agent's own `LIZARD_SANDBOX_ID`): a resume
/// names the same one, a clone or fork another.
pub fn set(id: &str) -> Result<bool, String> {
    if !valid_id(id) {
        return Err(format!(
            "not a sandbox id: {:?}",
            id.escape_debug().to_string()
        ));
    }
    let mut current = OVERRIDE.write().unwrap_or_else(|e| e.into_inner());
    let before = current
        .clone()
        .or_else(|| std::env::var("LIZARD_SANDBOX_ID").ok());
    *current = Some(id.to_string());
    Ok(before.as_deref() != Some(id))
}

/// The sandbox id named by the server after a restore (`None`: the agent's environment is true).
pub fn sandbox_id() -> Option<String> {
    OVERRIDE.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The variables a new process gets in place of the inherited ones (empty unless a handover named
/// an id).
pub fn env() -> Vec<(&'static str, String)> {
    match sandbox_id() {
        Some(id) => vec![("LIZARD_SANDBOX_ID", id.clone()), ("HOSTNAME", id)],
        None => Vec::new(),
    }
}

/// The host name to show (the override, or the agent's `HOSTNAME`).
pub fn hostname() -> Option<String> {
    sandbox_id().or_else(|| std::env::var("HOSTNAME").ok())
}

/// Give `cmd` the current identity (before any per-process variables the caller adds).
pub fn apply(cmd: &mut tokio::process::Command) {
    for (k, v) in env() {
        cmd.env(k, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sandbox_ids_are_taken() {
        assert!(valid_id("abc0123456789xyz0000"));
        for bad in [
            "",
            "0abc",
            "Abc",
            "a-b",
            "a b",
            "a\nb",
            "a\0",
            "é",
            &"a".repeat(MAX_ID + 1),
        ] {
            assert!(!valid_id(bad), "{bad:?}");
            assert!(set(bad).is_err(), "{bad:?}");
        }
        assert!(valid_id(&"a".repeat(MAX_ID)));
        set("clonezzz").unwrap();
        assert!(!set("clonezzz").unwrap(), "the same id again is no change");
        assert_eq!(sandbox_id().as_deref(), Some("clonezzz"));
        assert_eq!(hostname().as_deref(), Some("clonezzz"));
        assert_eq!(
            env(),
            vec![
                ("LIZARD_SANDBOX_ID", "clonezzz".to_string()),
                ("HOSTNAME", "clonezzz".to_string())
            ]
        );
        // A bad one later leaves the good one.
        assert!(set("x/y").is_err());
        assert_eq!(sandbox_id().as_deref(), Some("clonezzz"));
    }
}
