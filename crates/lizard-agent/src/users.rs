//! Who user code runs as. Inside a sandbox the agent is the sandbox's root (PID 1 with the few
//! capabilities the launcher let it keep) and never runs user code as itself:
//!
//! - commands, terminals and the E2B process API run as **the sandbox user** (`--sandbox-user`,
//!   e.g. 1000:1000), with no supplementary groups; the files API acts as that user
//!   ([`as_sandbox_user`]: `setfsuid`/`setfsgid` on the thread doing the path operation);
//! - each context's kernel runs as **a uid of its own** (`--context-uids BASE:COUNT`: uid
//!   `BASE + slot`, the sandbox user's group as its primary group, umask 0002), so one context
//!   cannot read another's memory, write into its pipes or signal it. A slot is taken when a
//!   context (or the spare JavaScript kernel) is made and given back only once the context is gone
//!   and its cgroup is empty ([`UidSlot`]'s drop); at most COUNT contexts exist at a time.
//!
//! - **the sandbox's root** (uid 0 of the sandbox's user namespace, with the agent's kept
//!   capabilities and nothing more) runs what asks for it: commands, terminals and E2B processes
//!   with `user: "root"`, files with `user` root ([`files_as_root`]), and `sudo` from the sandbox
//!   user (`crate::sudo`). Its home is [`ROOT_HOME`].
//!
//! Without these flags (an agent outside a sandbox) everything runs as the agent itself.
//!
//! Not here: the system calls (`lizard_jail::creds`), which process runs what (`crate::kernel`,
//! `crate::procs`).

use std::collections::BTreeSet;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

/// A uid and its primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

impl std::str::FromStr for Ids {
    type Err = String;
    /// `UID:GID`.
    fn from_str(s: &str) -> Result<Ids, String> {
        let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
        Ok(Ids {
            uid: u.parse().map_err(|_| format!("bad uid {u:?}"))?,
            gid: g.parse().map_err(|_| format!("bad gid {g:?}"))?,
        })
    }
}

/// The umask of everything user code runs: files are the group's too (contexts share them).
pub const USER_UMASK: u32 = 0o002;
/// The umask of what runs as the sandbox's root (as `sudo` gives it on Debian).
pub const ROOT_UMASK: u32 = 0o022;
/// The sandbox's root's home directory (made 0700 root's at start, see `crate::sudo::prepare`).
pub const ROOT_HOME: &str = "/root";
/// The name of the sandbox user in requests (commands, terminals, E2B).
pub const SANDBOX_USER_NAME: &str = "user";
/// The name of the sandbox's root in requests.
pub const ROOT_NAME: &str = "root";

/// Who a command, terminal or file operation acts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAs {
    /// The sandbox user (or the agent itself outside a sandbox).
    #[default]
    User,
    /// The sandbox's root: uid 0 of the sandbox's user namespace with the kept capabilities.
    Root,
}

impl RunAs {
    /// A request's `user`: absent, `user` (or the agent's own `$USER` outside a sandbox), or
    /// `root` (only in a sandbox: an agent outside one runs everything as itself, whoever that
    /// is). `Err`: the message for anything else.
    pub fn parse(name: Option<&str>) -> Result<RunAs, String> {
        match name {
            None | Some("") | Some(SANDBOX_USER_NAME) => Ok(RunAs::User),
            Some(ROOT_NAME) if sandbox_user().is_some() => Ok(RunAs::Root),
            Some(ROOT_NAME) => Err(
                "cannot run as \"root\": this agent runs outside a sandbox, as itself (leave \
                 `user` out)"
                    .into(),
            ),
            Some(u) if std::env::var("USER").ok().as_deref() == Some(u) => Ok(RunAs::User),
            Some(u) => Err(format!(
                "cannot run as {u:?}: a sandbox has two users, {SANDBOX_USER_NAME:?} (the \
                 default) and {ROOT_NAME:?} (the sandbox's own root)"
            )),
        }
    }
}

tokio::task_local! {
    /// Set (by [`files_as_root`]) while a request's file operations act as the sandbox's root.
    static FILES_AS_ROOT: bool;
}

std::thread_local! {
    /// The same, on the blocking thread doing one file operation ([`as_sandbox_user`]).
    static THREAD_AS_ROOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `fut` with its file operations ([`as_sandbox_user`], [`with_sandbox_user`]) acting as
/// `who`: as the sandbox's root they act as the agent itself (uid 0, its kept capabilities).
pub async fn files_as<F: std::future::Future>(who: RunAs, fut: F) -> F::Output {
    FILES_AS_ROOT.scope(who == RunAs::Root, fut).await
}

/// [`files_as`] with [`RunAs::Root`].
pub async fn files_as_root<F: std::future::Future>(fut: F) -> F::Output {
    files_as(RunAs::Root, fut).await
}

fn acting_as_root() -> bool {
    THREAD_AS_ROOT.with(|c| c.get()) || FILES_AS_ROOT.try_with(|r| *r).unwrap_or(false)
}

struct Users {
    sandbox: Option<Ids>,
    /// First context uid and how many there are.
    contexts: Option<(u32, u32)>,
    used: Mutex<BTreeSet<u32>>,
}

static USERS: OnceLock<Users> = OnceLock::new();

fn users() -> Option<&'static Users> {
    USERS.get()
}

/// Set who user code runs as (once, at start-up). Per-context uids need a sandbox user (their
/// group is its group).
pub fn init(sandbox: Option<Ids>, contexts: Option<(u32, u32)>) {
    let contexts = contexts.filter(|(_, n)| *n > 0 && sandbox.is_some());
    let _ = USERS.set(Users {
        sandbox,
        contexts,
        used: Mutex::new(BTreeSet::new()),
    });
}

/// The sandbox user, when the agent runs user code as one.
pub fn sandbox_user() -> Option<Ids> {
    users().and_then(|u| u.sandbox)
}

/// Too many contexts: every context uid is taken.
#[derive(Debug, thiserror::Error)]
#[error("at most {0} contexts can exist in a sandbox at a time (delete one first)")]
pub struct NoFreeSlot(pub u32);

/// One context uid, taken until dropped.
#[derive(Debug)]
pub struct UidSlot {
    slot: u32,
    ids: Ids,
}

impl UidSlot {
    /// The slot number (`0..COUNT`), saved with a hibernated context.
    pub fn number(&self) -> u32 {
        self.slot
    }

    pub fn ids(&self) -> Ids {
        self.ids
    }
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        if let Some(u) = users() {
            u.used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.slot);
        }
    }
}

/// Take a context uid: `want` if it is free (a restored context gets its saved one back), else
/// the lowest free one. `Ok(None)`: contexts do not get uids of their own here.
pub fn take_slot(want: Option<u32>) -> Result<Option<Arc<UidSlot>>, NoFreeSlot> {
    let Some(u) = users() else { return Ok(None) };
    let (Some((base, count)), Some(sandbox)) = (u.contexts, u.sandbox) else {
        return Ok(None);
    };
    let mut used = u.used.lock().unwrap_or_else(|e| e.into_inner());
    let slot = match want.filter(|w| *w < count && !used.contains(w)) {
        Some(w) => w,
        None => (0..count)
            .find(|n| !used.contains(n))
            .ok_or(NoFreeSlot(count))?,
    };
    used.insert(slot);
    Ok(Some(Arc::new(UidSlot {
        slot,
        ids: Ids {
            uid: base + slot,
            gid: sandbox.gid,
        },
    })))
}

/// The `/etc/passwd` name of a context uid (`ctx<slot>`), `None` for any other uid.
pub fn context_user_name(uid: u32) -> Option<String> {
    let (base, count) = users()?.contexts?;
    let slot = uid.checked_sub(base).filter(|s| *s < count)?;
    Some(format!("ctx{slot}"))
}

/// Who a kernel runs as: its context's uid, else the sandbox user, else (outside a sandbox) the
/// agent's own ids (`None`).
pub fn kernel_ids(slot: Option<&UidSlot>) -> Option<Ids> {
    slot.map(UidSlot::ids).or_else(sandbox_user)
}

/// Run `f` (blocking file-system work) on a blocking thread that acts on files as the sandbox
/// user (see `lizard_jail::creds::FsUser`); as the agent itself when there is none.
/// Within [`files_as_root`], it acts as the agent itself (the sandbox's root).
pub async fn as_sandbox_user<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let root = acting_as_root();
    tokio::task::spawn_blocking(move || {
        THREAD_AS_ROOT.with(|c| c.set(root));
        let out = with_sandbox_user(f);
        THREAD_AS_ROOT.with(|c| c.set(false));
        out
    })
    .await
    .map_err(io::Error::other)?
}

/// [`as_sandbox_user`] on the calling thread (which must be allowed to block).
pub fn with_sandbox_user<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let _guard = match sandbox_user() {
        Some(_) if acting_as_root() => None,
        Some(ids) => Some(lizard_jail::creds::FsUser::enter(ids.uid, ids.gid)?),
        None => None,
    };
    f()
}

/// Whether file operations here act as the sandbox's root (see [`files_as_root`]); to carry
/// into a blocking task of one's own with [`with_root_flag`].
pub fn files_root_flag() -> bool {
    acting_as_root()
}

/// Run `f` on this (blocking) thread with the flag [`files_root_flag`] returned.
pub fn with_root_flag<T>(root: bool, f: impl FnOnce() -> T) -> T {
    THREAD_AS_ROOT.with(|c| c.set(root));
    let out = f();
    THREAD_AS_ROOT.with(|c| c.set(false));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse() {
        assert_eq!(
            "1000:1001".parse::<Ids>().unwrap(),
            Ids {
                uid: 1000,
                gid: 1001
            }
        );
        assert!("1000".parse::<Ids>().is_err());
        assert!("a:1".parse::<Ids>().is_err());
    }

    #[test]
    fn run_as_names() {
        assert_eq!(RunAs::parse(None).unwrap(), RunAs::User);
        assert_eq!(RunAs::parse(Some("user")).unwrap(), RunAs::User);
        // Outside a sandbox (no sandbox user set here) there is no root to become.
        assert!(RunAs::parse(Some("root"))
            .unwrap_err()
            .contains("outside a sandbox"));
        let e = RunAs::parse(Some("nobody")).unwrap_err();
        assert!(e.contains("\"root\""), "{e}");
    }
}
