//! `lizard-errors`: the error vocabulary every Lizard crate shares, and nothing else. Errors are
//! typed per crate (`thiserror`); this crate holds the two things they all say the same way:
//!
//! - [`error_chain`]: an error and each of its sources as one line (`saving x: disk full`), the
//!   one form an error takes in an API message, a log line or a helper's reply;
//! - [`StepIo`]: an I/O failure at a named step on a path (`{step}: {path}`, the `io::Error` as
//!   its source), for errors that stem from a file system call.
//!
//! It depends on no Lizard crate, so every crate may depend on it.

/// `e`'s message followed by each of its `source()`s, joined by `": "` (`error: cause: cause`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// An I/O failure at a named step on a path: `{step}: {path}`, with the `io::Error` as its source.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {path}")]
pub struct StepIo {
    pub step: &'static str,
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("saving context {0}")]
    struct Outer(u32, #[source] StepIo);

    #[test]
    fn every_source_is_said_once_in_order() {
        let io = StepIo {
            step: "writing the state",
            path: "/run/x".into(),
            source: std::io::Error::other("disk full"),
        };
        assert_eq!(error_chain(&io), "writing the state: /run/x: disk full");
        assert_eq!(
            error_chain(&Outer(3, io)),
            "saving context 3: writing the state: /run/x: disk full"
        );
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
