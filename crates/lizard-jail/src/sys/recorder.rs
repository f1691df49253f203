//! A [`Syscall`] that makes no system call: it writes each call down, in order, as one line, and
//! fails the one it is told to fail. The unit tests of `sandbox::child`, `sandbox::rootfs` and
//! `host_zygote` read the lines to check the order and the arguments of what the jail does,
//! without root.
//!
//! Descriptors it returns are real (of `/dev/null`), so the code under test can hold and pass them
//! as it does the kernel's; each gets a name that says where it came from (the path it was opened
//! at, `tree(...)` for a mount copy, `tmpfs` for a detached tmpfs), and every `/proc/self/fd/N`
//! of one of them in an argument is written as `{name}`. Every path exists unless [`Recorder::missing`] names it
//! (`openat2` then says `ENOENT` until a `mkdirat` or an `O_CREAT` open makes it).

use super::Syscall;
use nix::fcntl::{OFlag, ResolveFlag};
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

#[derive(Default)]
pub(crate) struct Recorder {
    calls: RefCell<Vec<String>>,
    /// The call (by its name, the line's first word) that fails with `EPERM`.
    pub fail: Option<&'static str>,
    names: RefCell<HashMap<RawFd, String>>,
    missing: RefCell<HashSet<String>>,
}

impl Recorder {
    pub fn failing(name: &'static str) -> Recorder {
        Recorder {
            fail: Some(name),
            ..Recorder::default()
        }
    }

    /// `path` (a name as the recorder writes it, e.g. `/mnt/root/proc`) does not exist yet.
    pub fn missing(self, path: &str) -> Recorder {
        self.missing.borrow_mut().insert(path.to_string());
        self
    }

    /// A descriptor named `name`, as if the caller had opened it (no call is written down).
    pub fn named_fd(&self, name: &str) -> OwnedFd {
        self.fd(name.to_string()).expect("/dev/null opens")
    }

    /// Every call so far, one line each.
    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    /// The position of the first call whose line starts with `prefix`.
    pub fn position(&self, prefix: &str) -> Option<usize> {
        self.calls
            .borrow()
            .iter()
            .position(|c| c.starts_with(prefix))
    }

    /// Every call whose line starts with `prefix`.
    pub fn matching(&self, prefix: &str) -> Vec<String> {
        let calls = self.calls.borrow();
        calls
            .iter()
            .filter(|c| c.starts_with(prefix))
            .cloned()
            .collect()
    }

    fn call(&self, name: &'static str, args: String) -> io::Result<()> {
        let line = if args.is_empty() {
            name.to_string()
        } else {
            format!("{name} {}", self.show(&args))
        };
        self.calls.borrow_mut().push(line);
        if self.fail == Some(name) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(())
    }

    /// A real descriptor named `name`.
    fn fd(&self, name: String) -> io::Result<OwnedFd> {
        let fd = OwnedFd::from(std::fs::File::open("/dev/null")?);
        self.names.borrow_mut().insert(fd.as_raw_fd(), name);
        Ok(fd)
    }

    fn name(&self, fd: BorrowedFd<'_>) -> String {
        let names = self.names.borrow();
        match names.get(&fd.as_raw_fd()) {
            Some(n) => n.clone(),
            None => format!("fd{}", fd.as_raw_fd()),
        }
    }

    /// `dir`'s name joined with `path` (`.` and the empty path: `dir` itself).
    fn under(&self, dir: BorrowedFd<'_>, path: &Path) -> String {
        let dir = self.name(dir);
        match path.to_string_lossy().as_ref() {
            "" | "." => dir,
            p => format!("{}/{p}", dir.trim_end_matches('/')),
        }
    }

    /// `s` with each `/proc/self/fd/N` written as `{name of N}`.
    fn show(&self, s: &str) -> String {
        const FD: &str = "/proc/self/fd/";
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find(FD) {
            out.push_str(&rest[..at]);
            let after = &rest[at + FD.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            match after[..digits].parse::<RawFd>() {
                Ok(n) if self.names.borrow().contains_key(&n) => {
                    out.push_str(&format!("{{{}}}", self.names.borrow()[&n]));
                }
                _ => out.push_str(&rest[at..at + FD.len() + digits]),
            }
            rest = &after[digits..];
        }
        out.push_str(rest);
        out
    }

    fn create(&self, path: &str) {
        self.missing.borrow_mut().remove(path);
    }
}

/// Flags as `A | B` (their `Debug` without the type's name around it).
fn bits(f: impl std::fmt::Debug) -> String {
    let s = format!("{f:?}");
    match (s.find('('), s.strip_suffix(')')) {
        (Some(at), Some(inner)) => inner[at + 1..].to_string(),
        _ => s,
    }
}

fn opt(s: Option<&str>) -> &str {
    s.unwrap_or("-")
}

impl Syscall for Recorder {
    fn setgroups_empty(&self) -> io::Result<()> {
        self.call("setgroups", "[]".into())
    }
    fn setresgid(&self, gid: u32) -> io::Result<()> {
        self.call("setresgid", format!("{gid}"))
    }
    fn setresuid(&self, uid: u32) -> io::Result<()> {
        self.call("setresuid", format!("{uid}"))
    }
    fn set_securebits(&self, bits: libc::c_ulong) -> io::Result<()> {
        self.call("securebits", format!("{bits:#x}"))
    }
    fn drop_bounding_set_except(&self, keep: u64) -> io::Result<()> {
        self.call("bounding_keep", format!("{keep:#x}"))
    }
    fn clear_ambient(&self) -> io::Result<()> {
        self.call("clear_ambient", String::new())
    }
    fn set_capability_sets(&self, e: u64, p: u64, i: u64) -> io::Result<()> {
        self.call("capset", format!("{e:#x},{p:#x},{i:#x}"))
    }
    fn set_no_new_privs(&self) -> io::Result<()> {
        self.call("no_new_privs", String::new())
    }

    fn set_effective_ids(&self, uid: u32, gid: u32) -> io::Result<()> {
        self.call("set_effective_ids", format!("{uid}:{gid}"))
    }
    fn set_dumpable(&self, dumpable: bool) -> io::Result<()> {
        self.call("set_dumpable", format!("{dumpable}"))
    }

    /// The caller's side: the child is always pid 4242.
    fn clone_process(&self, flags: libc::c_int) -> io::Result<Option<i32>> {
        self.call("clone", format!("{flags:#x}"))?;
        Ok(Some(4242))
    }
    fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let text = String::from_utf8_lossy(bytes);
        self.call("write_file", format!("{} {text:?}", path.display()))
    }
    fn kill(&self, pid: i32) -> io::Result<()> {
        self.call("kill", format!("{pid}"))
    }
    fn reap(&self, pid: i32) -> io::Result<()> {
        self.call("reap", format!("{pid}"))
    }
    fn setns(&self, ns: BorrowedFd<'_>, flags: CloneFlags) -> io::Result<()> {
        let name = self.name(ns);
        self.call("setns", format!("{name} {}", bits(flags)))
    }
    fn unshare(&self, flags: CloneFlags) -> io::Result<()> {
        self.call("unshare", bits(flags))
    }
    fn sethostname(&self, name: &str) -> io::Result<()> {
        self.call("sethostname", name.to_string())
    }
    fn configure_sandbox_netns(&self) -> io::Result<()> {
        self.call("configure_netns", String::new())
    }

    fn open(&self, path: &Path, flags: OFlag) -> io::Result<OwnedFd> {
        self.call("open", format!("{} {}", path.display(), bits(flags)))?;
        self.fd(path.display().to_string())
    }
    fn openat(
        &self,
        dir: BorrowedFd<'_>,
        name: &Path,
        flags: OFlag,
        mode: u32,
    ) -> io::Result<OwnedFd> {
        let path = self.under(dir, name);
        self.call("openat", format!("{path} {} {mode:o}", bits(flags)))?;
        if flags.contains(OFlag::O_CREAT) {
            self.create(&path);
        }
        self.fd(path)
    }
    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlag,
        resolve: ResolveFlag,
    ) -> io::Result<OwnedFd> {
        let path = self.under(dir, path);
        self.call(
            "openat2",
            format!("{path} {} {}", bits(flags), bits(resolve)),
        )?;
        if self.missing.borrow().contains(&path) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.fd(path)
    }
    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: u32) -> io::Result<()> {
        let path = self.under(dir, name);
        self.call("mkdirat", format!("{path} {mode:o}"))?;
        self.create(&path);
        Ok(())
    }
    fn fchownat(&self, dir: BorrowedFd<'_>, name: &Path, uid: u32, gid: u32) -> io::Result<()> {
        let path = self.under(dir, name);
        self.call("fchownat", format!("{path} {uid}:{gid}"))
    }
    fn symlinkat(&self, target: &str, dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
        let path = self.under(dir, Path::new(name));
        self.call("symlinkat", format!("{path} -> {target}"))
    }
    fn write_all(&self, fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
        let name = self.name(fd);
        self.call(
            "write",
            format!("{name} {:?}", String::from_utf8_lossy(bytes)),
        )
    }

    fn mount(
        &self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()> {
        let source = source.map(|s| s.display().to_string());
        self.call(
            "mount",
            format!(
                "{} {} {} {} {}",
                opt(source.as_deref()),
                target.display(),
                opt(fstype),
                bits(flags),
                opt(data)
            ),
        )
    }
    fn umount_detach(&self, target: &Path) -> io::Result<()> {
        self.call("umount_detach", target.display().to_string())
    }
    fn open_tree_clone(&self, dir: Option<BorrowedFd<'_>>, path: &CStr) -> io::Result<OwnedFd> {
        let path = path.to_string_lossy();
        let of = match dir {
            Some(dir) => self.under(dir, Path::new(path.as_ref())),
            None => path.to_string(),
        };
        self.call("open_tree", of.clone())?;
        self.fd(format!("tree({of})"))
    }
    fn open_tree_clone_cwd_recursive(&self) -> io::Result<OwnedFd> {
        self.call("open_tree_recursive", ".".into())?;
        self.fd("tree(.)".into())
    }
    fn move_mount_onto(&self, tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
        let (tree, target) = (self.name(tree), self.name(target));
        self.call("move_mount", format!("{tree} {target}"))
    }
    fn mount_setattr(
        &self,
        tree: BorrowedFd<'_>,
        attr_set: u64,
        userns: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        let userns = userns.map(|u| self.name(u));
        let tree = self.name(tree);
        self.call(
            "mount_setattr",
            format!("{tree} {attr_set:#x} {}", opt(userns.as_deref())),
        )
    }
    fn detached_tmpfs(&self, options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
        let options: Vec<String> = options
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        self.call("fsmount", format!("tmpfs {} {attrs:#x}", options.join(",")))?;
        self.fd("tmpfs".into())
    }
    fn fchdir(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        let name = self.name(dir);
        self.call("fchdir", name)
    }
    fn chdir(&self, path: &Path) -> io::Result<()> {
        self.call("chdir", path.display().to_string())
    }
    fn pivot_root_here(&self) -> io::Result<()> {
        self.call("pivot_root", ".".into())
    }
}
