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
/// must be host root.
pub(crate) fn userns(inside: u32, outside: u32, count: u32) -> Result<OwnedFd, JailError> {
    let map = format!("{inside} {outside} {count}\n");
    userns_with_maps(&map, &map, "the idmapped mounts")
}

/// A user namespace with these uid and gid maps (`/proc/<pid>/uid_map` lines), made by host root
/// (who owns it), as an fd; `what` names it in errors. The helper cloned into it only closes a
/// descriptor, reads a pipe and exits, all async-signal-safe, so the caller may be multi-threaded.
pub(crate) fn userns_with_maps(
    uid_map: &str,
    gid_map: &str,
    what: &'static str,
) -> Result<OwnedFd, JailError> {
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
    let result = map_and_open(pid, uid_map, gid_map, what);
    drop(hold_write);
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    let _ = waitpid(Pid::from_raw(pid), None);
    result
}

fn map_and_open(
    pid: i32,
    uid_map: &str,
    gid_map: &str,
    what: &'static str,
) -> Result<OwnedFd, JailError> {
    for (file, map) in [("uid_map", uid_map), ("gid_map", gid_map)] {
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, map).map_err(|source| JailError::Setup {
            step: format!("writing {}", path.display()),
            detail: format!("the user namespace of {what}"),
            source,
        })?;
    }
    let path = PathBuf::from(format!("/proc/{pid}/ns/user"));
    nix::fcntl::open(&path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(|e| {
        JailError::Setup {
            step: format!("opening {}", path.display()),
            detail: format!("the user namespace of {what}"),
            source: e.into(),
        }
    })
}
