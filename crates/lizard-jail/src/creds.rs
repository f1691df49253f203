//! Credentials inside a sandbox: how the agent (the sandbox's root, with the few capabilities of
//! `SandboxSpec::keep_caps`) runs everything else as users without any capability.
//!
//! - [`become_user_on_exec`]: a `pre_exec` step that turns the child into `uid`/`gid` with no
//!   supplementary groups (all three ids of each, so nothing can switch back; the change away
//!   from uid 0 clears every capability, the launcher having locked `SECBIT_KEEP_CAPS` and
//!   `SECBIT_NO_SETUID_FIXUP` off) and sets its umask. Registered *after* any step that must
//!   still run as root (joining a cgroup: cgroup v1 lets a writer that is not the host's root
//!   move only processes of its own uid), unlike `Command::uid`, which std applies before every
//!   `pre_exec` closure.
//! - [`FsUser`]: the calling thread acts on files as another user (`setfsuid`/`setfsgid`) until
//!   the guard is dropped. While the fs uid is not 0 the kernel drops the file-system
//!   capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`, `CAP_FOWNER`, …) from the thread's effective
//!   set, so a path operation is checked exactly as that user's, and what it creates is that
//!   user's.
//!
//! Not here: which user runs what (the agent decides), or the sandbox's own set-up
//! (`sandbox::child`).

use std::io;
use std::os::unix::process::CommandExt;

/// Run the program of `cmd` as `uid`/`gid` with no supplementary groups and `umask`: see the
/// module docs. Call it after every `pre_exec` step that needs root.
pub fn become_user_on_exec(cmd: &mut std::process::Command, uid: u32, gid: u32, umask: u32) {
    // SAFETY: the closure runs in the forked child before exec and makes only raw system calls
    // (setgroups, setresgid, setresuid, umask), which are async-signal-safe; it allocates nothing
    // and takes no locks. Raw calls rather than glibc's wrappers, which would broadcast the change
    // to every thread through a signal handler (the child has one thread).
    unsafe {
        cmd.pre_exec(move || drop_to(uid, gid, umask));
    }
}

/// The child's side of [`become_user_on_exec`].
fn drop_to(uid: u32, gid: u32, umask: u32) -> io::Result<()> {
    crate::sys::set_ids(uid, gid)?;
    // SAFETY: umask(2) takes an integer and cannot fail.
    unsafe { libc::umask(umask as libc::mode_t) };
    Ok(())
}

/// The calling process's effective uid.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The calling process's effective gid.
pub fn egid() -> u32 {
    nix::unistd::getegid().as_raw()
}

/// Set the calling process's umask.
pub fn set_umask(mask: u32) {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(
        mask as libc::mode_t,
    ));
}

/// The calling thread acts on files as `uid`/`gid` while this lives (see the module docs); the
/// previous fs ids come back when it is dropped. It must be dropped on the thread that made it
/// (it is neither `Send` nor `Sync`): hold it across blocking file-system calls only, never
/// across an `.await`.
#[derive(Debug)]
pub struct FsUser {
    old_uid: u32,
    old_gid: u32,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl FsUser {
    /// Switch the calling thread's fs ids to `uid`/`gid` (group first: once the fs uid is not 0,
    /// changing the fs gid would need CAP_SETGID, which the thread then no longer has).
    /// Fails (changing nothing) if the thread cannot take those ids.
    pub fn enter(uid: u32, gid: u32) -> io::Result<FsUser> {
        let old_gid = set_fsgid(gid);
        if set_fsgid(u32::MAX) != gid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let old_uid = set_fsuid(uid);
        if set_fsuid(u32::MAX) != uid {
            set_fsgid(old_gid);
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(FsUser {
            old_uid,
            old_gid,
            _not_send: std::marker::PhantomData,
        })
    }
}

/// Whether the calling thread's fs ids may search (enter) directory `path`: `faccessat(X_OK,
/// AT_EACCESS)`, which checks with the fs ids — call it inside an [`FsUser`] to ask for that user.
pub fn can_search(path: &std::path::Path) -> io::Result<()> {
    nix::unistd::faccessat(
        nix::fcntl::AT_FDCWD,
        path,
        nix::unistd::AccessFlags::X_OK,
        nix::fcntl::AtFlags::AT_EACCESS,
    )
    .map_err(io::Error::from)
}

impl Drop for FsUser {
    fn drop(&mut self) {
        // The fs uid first: back at 0 the thread has CAP_SETGID again for the fs gid.
        set_fsuid(self.old_uid);
        set_fsgid(self.old_gid);
    }
}

/// `setfsuid(uid)`: returns the previous fs uid (`u32::MAX`, an invalid id, changes nothing:
/// the query form).
fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid(2) takes an integer and changes only the calling thread's fs uid; it always
    // returns the previous one.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

/// `setfsgid(gid)`, as [`set_fsuid`].
fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: as for setfsuid(2).
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_search_asks_as_the_fs_user() {
        lizard_test_support::needs_root!();
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (open, closed) = (dir.path().join("open"), dir.path().join("closed"));
        for (d, mode) in [(&open, 0o755), (&closed, 0o700)] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        assert!(can_search(&closed).is_ok(), "root may");
        let _nobody = FsUser::enter(65534, 65534).unwrap();
        assert!(can_search(&open).is_ok());
        let e = can_search(&closed).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }

    #[test]
    fn a_command_becomes_the_user_and_files_are_made_as_the_fs_user() {
        lizard_test_support::needs_root!();
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                "id -u; id -g; id -G; umask; grep CapEff /proc/self/status",
            ])
            .output_with(|cmd| become_user_on_exec(cmd, 4321, 4322, 0o002))
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(&lines[..4], &["4321", "4322", "4322", "0002"], "{text}");
        assert!(lines[4].ends_with("0000000000000000"), "{text}");

        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let root_only = dir.path().join("root-only");
        std::fs::write(&root_only, "x").unwrap();
        std::fs::set_permissions(
            &root_only,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let made = dir.path().join("made");
        std::thread::spawn(move || {
            let guard = FsUser::enter(4321, 4322).unwrap();
            std::fs::write(&made, "y").unwrap();
            // CAP_DAC_OVERRIDE is gone while the fs uid is not 0.
            let denied = std::fs::read(&root_only).unwrap_err();
            assert_eq!(denied.kind(), io::ErrorKind::PermissionDenied);
            drop(guard);
            std::fs::read(&root_only).unwrap();
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&made).unwrap();
            assert_eq!((m.uid(), m.gid()), (4321, 4322));
        })
        .join()
        .unwrap();
    }

    trait OutputWith {
        fn output_with(
            &mut self,
            f: impl FnOnce(&mut std::process::Command),
        ) -> io::Result<std::process::Output>;
    }

    impl OutputWith for std::process::Command {
        fn output_with(
            &mut self,
            f: impl FnOnce(&mut std::process::Command),
        ) -> io::Result<std::process::Output> {
            f(self);
            self.output()
        }
    }
}
