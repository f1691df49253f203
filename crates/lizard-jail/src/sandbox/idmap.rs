//! The user namespace behind the sandbox's idmapped mounts: it exists only for its id map
//! (`layer_id_base..+count` → `id_map.outside..+count`), which `mount_setattr(MOUNT_ATTR_IDMAP)`
//! applies to the template layer and to volumes, so that files owned on disk by the template's
//! shared range show up, and are written back, as the sandbox's own range.
//!
//! A short-lived helper process is cloned into a new user namespace, the launcher (host root)
//! writes its uid/gid maps, opens `/proc/<helper>/ns/user` and kills and reaps the helper: the fd
//! keeps the namespace alive as long as the mounts need it. Nothing ever runs in that namespace.
//!
//! Not here: the mounts themselves (`sandbox::rootfs`), the sandbox's own user namespace
//! (`sandbox::child`).

use super::JailError;
use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// A user namespace whose uid and gid maps are both `inside outside count`, as an fd. The caller
/// must be single-threaded (it clones) and host root.
pub(crate) fn userns(inside: u32, outside: u32, count: u32) -> Result<OwnedFd, JailError> {
    let (hold_read, hold_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| JailError::Sync {
            step: "creating the id-map helper's pipe",
            source: e.into(),
        })?;
    let pid = match crate::sys::clone_process(libc::CLONE_NEWUSER) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            // The helper: wait until the launcher is done with us (EOF, or the SIGKILL), exit.
            drop(hold_write);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(&hold_read, &mut b);
            crate::sys::exit_now(0)
        }
        Err(source) => {
            return Err(JailError::Sync {
                step: "cloning the id-map helper",
                source,
            })
        }
    };
    drop(hold_read);
    let result = map_and_open(pid, inside, outside, count);
    drop(hold_write);
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    let _ = waitpid(Pid::from_raw(pid), None);
    result
}

fn map_and_open(pid: i32, inside: u32, outside: u32, count: u32) -> Result<OwnedFd, JailError> {
    let map = format!("{inside} {outside} {count}\n");
    for file in ["uid_map", "gid_map"] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, &map).map_err(|source| {
            JailError::Io(crate::StepIo {
                step: "writing the id map of the idmapped mounts",
                path,
                source,
            })
        })?;
    }
    let path = PathBuf::from(format!("/proc/{pid}/ns/user"));
    nix::fcntl::open(
        path.as_path(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        JailError::Io(crate::StepIo {
            step: "opening the id-map user namespace",
            path,
            source: e.into(),
        })
    })
}
