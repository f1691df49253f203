//! Process isolation for Lizard: everything that talks to the Linux kernel about processes.
//!
//! Today this crate spawns kernel processes with extra file descriptors mapped to fixed numbers and in
//! their own process group ([`process`]), signals process groups, and reads per-process accounting
//! from `/proc` ([`procfs`]). The sandbox machinery (namespaces, rootfs, cgroups, seccomp) lands here
//! too.
//!
//! **Architecture Invariant:** this is the only crate with `unsafe` code and raw syscalls; every
//! `unsafe` block carries a `// SAFETY:` comment. It knows nothing about HTTP, kernels' protocols,
//! projects or billing: it starts programs and hands back handles (pids, fds, paths).

pub mod process;
pub mod procfs;

pub use process::{cloexec_pipe, map_fds, signal_group, Signal};
