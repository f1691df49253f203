//! The Lizard agent: the process that owns a sandbox's contexts and runs code in stateful kernels.
//!
//! It serves the execution API (`crate::api`) over a Unix socket (for the server) and TCP (the seed's
//! port 8080 inside a sandbox). Contexts (`crate::context`) each own one kernel process
//! (`crate::kernel`): Python through IPython, JavaScript on Node, or a persistent Bash. Besides
//! kernels it runs shell commands (`crate::commands`) and terminals (`crate::pty`), sharing one
//! process table (`crate::procs`), and serves the sandbox's files (`crate::files`). In a sandbox it also
//! serves `sudo` (`crate::sudo`): the sandbox user's way to run a command as the sandbox's root.
//!
//! The agent knows nothing about projects, API keys, billing or other sandboxes: one agent serves one
//! sandbox, and whoever can reach its sockets may use it.

pub mod adopt;

/// A hash of every source this agent is built from (`build.rs`): two binaries with the same one run
/// the same agent. The server runs a `lizard-agent` binary in its sandboxes only when it says
/// this (`lizard-agent --build-fingerprint`).
pub const BUILD_FINGERPRINT: &str = env!("LIZARD_BUILD_FINGERPRINT");

pub mod api;
pub mod cli;
pub mod commands;
pub mod context;
pub mod e2b;
pub mod files;
pub mod hibernate;
pub mod identity;
pub mod ids;
pub mod kernel;
pub mod peer;
pub mod ports;
pub mod procs;
pub mod pty;
pub mod relisten;
pub mod router;
pub mod sudo;
pub mod users;
pub mod utf8;
