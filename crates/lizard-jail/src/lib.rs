//! Process isolation for Lizard: everything that talks to the Linux kernel about processes.
//!
//! - [`process`]: spawn kernel processes with extra fds mapped to fixed numbers and in their own
//!   process group, signal process groups, subreaping.
//! - [`fdpass`]: fds sent over a Unix socket pair (`SCM_RIGHTS`), waiting on a pidfd.
//! - [`procfs`]: per-process accounting from `/proc`.
//! - [`sandbox`]: launch a program as PID 1 of a fresh sandbox (namespaces, overlay root, minimal
//!   `/dev`, fresh `/proc`, cgroup, no capabilities, `no_new_privs`, seccomp).
//! - [`host_zygote`]: the jail of a template's zygote on the host, whose forks join sandboxes
//!   (its own mount, network, IPC and UTS namespaces, a read-only template root, its own uid).
//! - [`checkpoint`]: CRIU checkpoints of a sandbox's process tree (check, dump), with deadlines.
//! - [`cgroup`]: sandbox cgroups (v2, else v1): limits, freeze/thaw, kill, accounting, removal.
//! - [`delegation`]: per-context cgroups (the sub-tree of a sandbox's cgroup delegated to it).
//! - [`seccomp`]: the sandbox's seccomp profile (`seccomp.toml`), compiled to BPF.
//! - [`pty`]: pseudo-terminals (open, window size, controlling terminal of a child).
//! - [`inotify`]: filesystem change notification.
//! - [`ksm`]: the kernel's same-page merging, for clones that share their memory pages.
//! - [`volume`]: persistent volumes on the host (sparse ext4 images, loop mounts).
//! - [`disk`]: per-sandbox disk quota (a sparse ext4 image, loop-mounted).
//! - [`exe`]: a sealed in-memory copy of a program, executed in a sandbox without a mount.
//! - [`fileattrs`]: extended attributes and file-system types of a sandbox's files (the agent's
//!   E2B file metadata).
//! - [`layer`]: import a stopped sandbox's writable layer as a template layer (no symlink
//!   followed, bounded, only directories, files, symlinks and whiteouts kept).
//! - [`mounts`]: detach every mount under a host directory without following a symlink.
//! - [`network`]: a sandbox's network namespace set up for egress through the host (route,
//!   nftables redirect) and the host's listeners made inside it.
//! - [`zygote_entry`]: the shared zygote's native entry (a `cdylib` built by `build.rs` from
//!   `cdylib/zygote_entry.rs`): a fork that joined a sandbox remaps its files onto the sandbox's.
//!
//! **Architecture Invariant:** this is the only crate with `unsafe` code and raw syscalls; every
//! `unsafe` block carries a `// SAFETY:` comment. It knows nothing about HTTP, kernels' protocols,
//! projects or billing: it starts programs and hands back handles (pids, fds, paths).

pub mod cgroup;
pub mod checkpoint;
pub mod creds;
pub mod delegation;
pub mod disk;
pub mod exe;
pub mod ext4;
pub mod fdpass;
pub mod fileattrs;
pub mod host_zygote;
pub mod hostpath;
pub mod inotify;
pub mod ksm;
pub mod layer;
pub mod mounts;
pub mod network;
pub mod process;
pub mod procfs;
pub mod pty;
pub mod sandbox;
pub mod seccomp;
pub mod subtree;
mod sys;
pub mod volume;
pub mod zygote_entry;

pub use process::{cloexec_pipe, map_fds, signal_group, Signal};

pub use lizard_errors::{error_chain, StepIo};
