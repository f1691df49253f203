//! Adopting a host zygote: a template's pre-imported Python that lives on the host, one fork of
//! which joins this sandbox and serves it as the agent's own zygote would
//! (`docs/design/shared-zygote.md`; `kernels/PROTOCOL.md`, "The host zygote").
//!
//! With `--adopt-python-zygote PATH` the agent listens at `PATH` (a `SOCK_SEQPACKET` socket in a
//! directory it makes its own, mode 0700) before it serves anything, and its first Python kernel
//! waits up to [`ADOPT_WAIT`] for a zygote to arrive rather than start one of its own. The server
//! has the host zygote join the sandbox and connect there. The first connection whose peer is the
//! agent's uid and that says `ready` is adopted ([`crate::kernel::Zygote::adopt`]); then the socket
//! is closed and removed. Nothing about the connection is trusted beyond that: the joined process
//! is a process of the sandbox like any other, and the worst a sandbox's root can do by
//! connecting first is serve its own kernels to itself.
//!
//! Not here: the fork protocol (`crate::kernel`), the join (the host zygote's, `runner.py`).

use crate::kernel::{Adoption, Launcher, Zygote};
use lizard_proto::Language;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long the first Python kernel waits for the zygote to adopt before the agent starts its own.
pub const ADOPT_WAIT: Duration = Duration::from_secs(10);

/// How long the socket stays open for a zygote that comes late (it is adopted then all the same:
/// later kernels share its pages).
pub const LISTEN_FOR: Duration = Duration::from_secs(120);

/// Make `path`'s directory the agent's alone (mode 0700) and listen at `path`.
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("the adoption socket's path has no directory"))?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != lizard_jail::creds::euid() {
        return Err(io::Error::other(format!(
            "{} is not a directory of the agent's own",
            dir.display()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    // A socket left by an earlier agent of this sandbox (a relaunch): the directory is ours.
    let _ = std::fs::remove_file(path);
    lizard_jail::fdpass::seqpacket_listener(path)
}

/// Accept connections on `listener` until a zygote is adopted for Python or [`LISTEN_FOR`] has
/// passed; then close the socket and remove `path`. `adoption` ends the first kernel's wait.
pub async fn serve(listener: OwnedFd, path: PathBuf, launcher: Arc<Launcher>, adoption: Adoption) {
    let Ok(listener) = crate::kernel::async_fd(listener, tokio::io::Interest::READABLE) else {
        return;
    };
    let adopt = async {
        loop {
            let conn = listener
                .async_io(tokio::io::Interest::READABLE, |l| {
                    lizard_jail::fdpass::accept(l)
                })
                .await;
            let conn = match conn {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a zygote to adopt");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let cwd = launcher.zygote_dir(Language::Python);
            let _ = std::fs::create_dir_all(&cwd);
            match Zygote::adopt(launcher.config(), conn, Language::Python, &cwd).await {
                Ok(z) => return Some(z),
                Err(e) => tracing::warn!(error = %e, "a connection to the adoption socket"),
            }
        }
    };
    let adopted = tokio::time::timeout(LISTEN_FOR, adopt).await.ok().flatten();
    drop(listener);
    let _ = std::fs::remove_file(&path);
    match adopted {
        Some(z) => {
            tracing::info!(
                pid = z.pid(),
                "adopted the host zygote's fork as the Python zygote"
            );
            launcher.adopt(z, adoption).await;
        }
        None => tracing::warn!("no zygote to adopt came; the agent's own serves"),
    }
}
