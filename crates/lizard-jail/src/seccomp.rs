//! The sandbox's seccomp filter: the profile in `seccomp.toml` (embedded at build time, documented
//! rule by rule there), compiled to classic BPF with the `seccompiler` crate, and installed.
//!
//! The profile is a deny-list: listed system calls fail with an errno (EPERM by default), optionally
//! only when their arguments match; everything else is allowed. One BPF program is compiled per
//! distinct errno (a seccompiler filter has one "match" action) and all are installed; each syscall
//! appears in one rule only, so the programs never disagree. The first program starts with an ABI
//! guard that seccompiler does not emit: x32 system calls (x86_64 audit arch, number with bit 30 set)
//! kill the process, because the rules name x86_64 numbers and x32 numbers would slip past them.
//! seccompiler itself kills on a foreign audit arch (i386 via `int 0x80`).
//!
//! Not here: `no_new_privs` (the launcher sets it before [`Filter::install`]), and policy, which
//! lives in the data file. Only x86_64 is supported; on other architectures [`Filter::compile`]
//! fails.

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The sandbox profile, `crates/lizard-jail/seccomp.toml`.
pub const PROFILE: &str = include_str!("../seccomp.toml");

/// Errors of loading, compiling or installing a seccomp profile.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("parsing the seccomp profile")]
    Parse(#[source] toml::de::Error),
    #[error("seccomp profile rule #{rule}: unknown system call `{name}` (add it to the name table in src/seccomp.rs)")]
    UnknownSyscall { rule: usize, name: String },
    #[error("seccomp profile rule #{rule}: unknown errno `{name}`")]
    UnknownErrno { rule: usize, name: String },
    #[error("seccomp profile rule #{rule}: {reason}")]
    InvalidRule { rule: usize, reason: String },
    #[error("seccomp profile: system call `{name}` appears in more than one rule")]
    Duplicate { name: String },
    #[error("seccomp filters are only supported on x86_64")]
    UnsupportedArch,
    #[error("compiling the seccomp filter")]
    Compile(#[source] seccompiler::BackendError),
    #[error("installing the seccomp filter")]
    Install(#[source] seccompiler::Error),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    rule: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    syscalls: Vec<String>,
    #[serde(default)]
    errno: Option<String>,
    #[serde(default)]
    when: Vec<Vec<ArgTest>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgTest {
    arg: u8,
    op: Op,
    value: u64,
    #[serde(default)]
    mask: Option<u64>,
    #[serde(default = "default_bits")]
    bits: u8,
}

fn default_bits() -> u8 {
    64
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    MaskedEq,
}

/// A compiled seccomp filter: one or more BPF programs, installed in order.
#[derive(Debug, Clone)]
pub struct Filter {
    programs: Vec<BpfProgram>,
}

impl Filter {
    /// The sandbox filter, compiled from [`PROFILE`].
    pub fn sandbox() -> Result<Filter, SeccompError> {
        Self::compile(PROFILE)
    }

    /// The host zygote's filter ([`crate::host_zygote`]): the sandbox's, but `setns` is allowed
    /// (its forks join sandboxes). They install the sandbox's own filter on top once joined.
    pub fn host_zygote() -> Result<Filter, SeccompError> {
        Self::compile_allowing(PROFILE, &["setns"])
    }

    /// Compile a profile in the format of `seccomp.toml`.
    pub fn compile(profile: &str) -> Result<Filter, SeccompError> {
        Self::compile_allowing(profile, &[])
    }

    /// [`Filter::compile`], leaving the system calls `allowed` out of every rule.
    fn compile_allowing(profile: &str, allowed: &[&str]) -> Result<Filter, SeccompError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(SeccompError::UnsupportedArch);
        }
        let mut file: ProfileFile = toml::from_str(profile).map_err(SeccompError::Parse)?;
        // A rule left with no system call once the allowed ones are out goes (one that had none
        // is still refused below).
        file.rule.retain_mut(|rule| {
            let before = rule.syscalls.len();
            rule.syscalls
                .retain(|name| !allowed.contains(&name.as_str()));
            before == 0 || !rule.syscalls.is_empty()
        });
        // errno → (syscall number → rules); an empty rule list denies the call unconditionally.
        let mut groups: BTreeMap<u32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
        let mut seen: BTreeMap<String, ()> = BTreeMap::new();
        for (i, rule) in file.rule.iter().enumerate() {
            let n = i + 1;
            let errno = match &rule.errno {
                None => libc::EPERM,
                Some(name) => errno_number(name).ok_or_else(|| SeccompError::UnknownErrno {
                    rule: n,
                    name: name.clone(),
                })?,
            } as u32;
            if rule.syscalls.is_empty() {
                return Err(SeccompError::InvalidRule {
                    rule: n,
                    reason: "no system calls".into(),
                });
            }
            let mut arg_rules = Vec::new();
            for alternative in &rule.when {
                let mut conditions = Vec::new();
                for t in alternative {
                    conditions.push(condition(n, t)?);
                }
                arg_rules.push(SeccompRule::new(conditions).map_err(|_| {
                    SeccompError::InvalidRule {
                        rule: n,
                        reason: "an empty list of argument tests".into(),
                    }
                })?);
            }
            for name in &rule.syscalls {
                let nr = syscall_number(name).ok_or_else(|| SeccompError::UnknownSyscall {
                    rule: n,
                    name: name.clone(),
                })?;
                if seen.insert(name.clone(), ()).is_some() {
                    return Err(SeccompError::Duplicate { name: name.clone() });
                }
                groups
                    .entry(errno)
                    .or_default()
                    .insert(nr, arg_rules.clone());
            }
        }
        let mut programs = Vec::new();
        for (errno, rules) in groups {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                TargetArch::x86_64,
            )
            .map_err(SeccompError::Compile)?;
            let program: BpfProgram = filter.try_into().map_err(SeccompError::Compile)?;
            programs.push(program);
        }
        if let Some(first) = programs.first_mut() {
            let mut guarded = x32_guard();
            guarded.append(first);
            *first = guarded;
        }
        Ok(Filter { programs })
    }

    /// Total number of BPF instructions (all programs).
    pub fn instructions(&self) -> usize {
        self.programs.iter().map(Vec::len).sum()
    }

    /// Install the filter on the calling thread (and so on everything it later executes or
    /// forks). Sets `no_new_privs` if it is not set yet. Allocates nothing, so it may run between
    /// `fork` and `exec`.
    pub fn install(&self) -> Result<(), SeccompError> {
        for program in &self.programs {
            seccompiler::apply_filter(program).map_err(SeccompError::Install)?;
        }
        Ok(())
    }
}

fn condition(rule: usize, t: &ArgTest) -> Result<SeccompCondition, SeccompError> {
    let invalid = |reason: &str| SeccompError::InvalidRule {
        rule,
        reason: reason.to_string(),
    };
    let len = match t.bits {
        32 => SeccompCmpArgLen::Dword,
        64 => SeccompCmpArgLen::Qword,
        _ => return Err(invalid("`bits` must be 32 or 64")),
    };
    if t.bits == 32 && (t.value > u64::from(u32::MAX) || t.mask.unwrap_or(0) > u64::from(u32::MAX))
    {
        return Err(invalid("a 32-bit test with a value or mask over 32 bits"));
    }
    let op = match (t.op, t.mask) {
        (Op::MaskedEq, Some(mask)) => SeccompCmpOp::MaskedEq(mask),
        (Op::MaskedEq, None) => return Err(invalid("`masked_eq` needs a `mask`")),
        (_, Some(_)) => return Err(invalid("`mask` is only for `masked_eq`")),
        (Op::Eq, None) => SeccompCmpOp::Eq,
        (Op::Ne, None) => SeccompCmpOp::Ne,
        (Op::Gt, None) => SeccompCmpOp::Gt,
        (Op::Ge, None) => SeccompCmpOp::Ge,
        (Op::Lt, None) => SeccompCmpOp::Lt,
        (Op::Le, None) => SeccompCmpOp::Le,
    };
    SeccompCondition::new(t.arg, len, op, t.value).map_err(|_| invalid("`arg` must be 0..=5"))
}

/// `if (nr >= 0x40000000) kill_process;` — x32 calls share the x86_64 audit arch.
fn x32_guard() -> Vec<sock_filter> {
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JGE | BPF_K, BPF_RET | BPF_K (linux/bpf_common.h).
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    vec![
        // Offset 0 of `struct seccomp_data` is the system call number.
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ]
}

fn errno_number(name: &str) -> Option<i32> {
    Some(match name {
        "EPERM" => libc::EPERM,
        "ENOSYS" => libc::ENOSYS,
        "EACCES" => libc::EACCES,
        "EINVAL" => libc::EINVAL,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        "EAFNOSUPPORT" => libc::EAFNOSUPPORT,
        _ => return None,
    })
}

/// The system calls a profile may name (x86_64 numbers from `libc`). Extend as needed.
#[cfg(target_arch = "x86_64")]
const SYSCALLS: &[(&str, libc::c_long)] = &[
    ("_sysctl", libc::SYS__sysctl),
    ("acct", libc::SYS_acct),
    ("add_key", libc::SYS_add_key),
    ("adjtimex", libc::SYS_adjtimex),
    ("bpf", libc::SYS_bpf),
    ("chroot", libc::SYS_chroot),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("clock_settime", libc::SYS_clock_settime),
    ("clone", libc::SYS_clone),
    ("clone3", libc::SYS_clone3),
    ("delete_module", libc::SYS_delete_module),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("finit_module", libc::SYS_finit_module),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fsopen", libc::SYS_fsopen),
    ("fspick", libc::SYS_fspick),
    ("init_module", libc::SYS_init_module),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("ioctl", libc::SYS_ioctl),
    ("ioperm", libc::SYS_ioperm),
    ("iopl", libc::SYS_iopl),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("kexec_load", libc::SYS_kexec_load),
    ("keyctl", libc::SYS_keyctl),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("memfd_secret", libc::SYS_memfd_secret),
    ("modify_ldt", libc::SYS_modify_ldt),
    ("mount", libc::SYS_mount),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("move_mount", libc::SYS_move_mount),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("nfsservctl", libc::SYS_nfsservctl),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("open_tree", libc::SYS_open_tree),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("personality", libc::SYS_personality),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("pivot_root", libc::SYS_pivot_root),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("ptrace", libc::SYS_ptrace),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("reboot", libc::SYS_reboot),
    ("request_key", libc::SYS_request_key),
    ("setdomainname", libc::SYS_setdomainname),
    ("sethostname", libc::SYS_sethostname),
    ("setns", libc::SYS_setns),
    ("settimeofday", libc::SYS_settimeofday),
    ("socket", libc::SYS_socket),
    ("swapoff", libc::SYS_swapoff),
    ("swapon", libc::SYS_swapon),
    ("syslog", libc::SYS_syslog),
    ("umount2", libc::SYS_umount2),
    ("unshare", libc::SYS_unshare),
    ("uselib", libc::SYS_uselib),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("vhangup", libc::SYS_vhangup),
];

#[cfg(not(target_arch = "x86_64"))]
const SYSCALLS: &[(&str, libc::c_long)] = &[];

fn syscall_number(name: &str) -> Option<libc::c_long> {
    SYSCALLS.iter().find(|(n, _)| *n == name).map(|(_, nr)| *nr)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::Command;

    #[test]
    fn the_host_zygotes_filter_is_the_sandboxs_without_setns() {
        let sandbox = Filter::sandbox().unwrap();
        let zygote = Filter::host_zygote().unwrap();
        assert_eq!(zygote.programs.len(), sandbox.programs.len());
        assert!(zygote.instructions() < sandbox.instructions());
        let profile = "[[rule]]\nsyscalls = [\"setns\"]\n[[rule]]\nsyscalls = [\"unshare\"]\n";
        let one = Filter::compile(profile).unwrap();
        let without = Filter::compile_allowing(profile, &["setns"]).unwrap();
        assert!(without.instructions() < one.instructions());
        let neither = Filter::compile_allowing(profile, &["setns", "unshare"]).unwrap();
        assert_eq!(neither.instructions(), 0);
    }

    #[test]
    fn the_embedded_profile_compiles() {
        let f = Filter::sandbox().unwrap();
        assert_eq!(f.programs.len(), 2, "one program for EPERM, one for ENOSYS");
        assert!(f.instructions() > 50 && f.instructions() < 1000);
    }

    #[test]
    fn profile_mistakes_are_errors() {
        let e = Filter::compile("[[rule]]\nsyscalls = [\"nope\"]\n").unwrap_err();
        assert!(matches!(e, SeccompError::UnknownSyscall { .. }), "{e}");
        let e =
            Filter::compile("[[rule]]\nsyscalls = [\"mount\"]\n[[rule]]\nsyscalls = [\"mount\"]\n")
                .unwrap_err();
        assert!(matches!(e, SeccompError::Duplicate { .. }), "{e}");
        let e = Filter::compile(
            "[[rule]]\nsyscalls = [\"socket\"]\nwhen = [[{ arg = 0, op = \"masked_eq\", value = 1 }]]\n",
        )
        .unwrap_err();
        assert!(matches!(e, SeccompError::InvalidRule { .. }), "{e}");
        let e = Filter::compile("[[rule]]\nsyscalls = [\"mount\"]\nwhy = \"x\"\n").unwrap_err();
        assert!(matches!(e, SeccompError::Parse(_)), "{e}");
    }

    /// What a probe saw: the call returned this value, failed with this errno, or the process was
    /// killed by this signal.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Outcome {
        Ok,
        Errno(i32),
        Killed(i32),
    }

    /// Install the sandbox filter in a forked child (between fork and exec, where only the child is
    /// affected) and make one raw system call there. The call's errno comes back as the spawn error.
    fn probe(call: impl Fn() -> libc::c_long + Send + Sync + 'static) -> Outcome {
        let filter = Filter::sandbox().unwrap();
        let mut cmd = Command::new("/bin/true");
        // SAFETY: the closure runs in the forked child before exec. It allocates nothing: the BPF
        // programs were compiled before the fork and are only read; `install` makes prctl/seccomp
        // system calls; `call` is a raw system call; errors are built from raw errno values.
        unsafe {
            cmd.pre_exec(move || {
                filter
                    .install()
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::ECHILD))?;
                if call() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Err(e) => Outcome::Errno(e.raw_os_error().expect("an errno")),
            Ok(mut child) => {
                let status = child.wait().unwrap();
                match status.signal() {
                    Some(sig) => Outcome::Killed(sig),
                    None => Outcome::Ok,
                }
            }
        }
    }

    /// A raw system call with integer arguments.
    fn raw(nr: libc::c_long, args: [libc::c_long; 5]) -> libc::c_long {
        // SAFETY: the probes below pass only integers and null pointers; every call they make either
        // takes no pointer or gets null, which the kernel rejects with EFAULT (or the filter
        // rejects before), so no memory of the process is read or written.
        unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4]) }
    }

    #[test]
    fn denied_calls_fail_with_their_errno() {
        use libc::*;
        let eperm = Outcome::Errno(EPERM);
        assert_eq!(probe(|| raw(SYS_getpid, [0; 5])), Outcome::Ok);
        assert_eq!(probe(|| raw(SYS_unshare, [0; 5])), eperm);
        assert_eq!(probe(|| raw(SYS_mount, [0; 5])), eperm);
        assert_eq!(probe(|| raw(SYS_bpf, [0; 5])), eperm);
        assert_eq!(probe(|| raw(SYS_ptrace, [0; 5])), eperm);
        assert_eq!(probe(|| raw(SYS_keyctl, [0; 5])), eperm);
        // CLONE_NEWUSER | CLONE_FS is invalid, so the kernel would say EINVAL: EPERM is the filter.
        let newuser = (CLONE_NEWUSER | CLONE_FS) as c_long;
        assert_eq!(probe(move || raw(SYS_clone, [newuser, 0, 0, 0, 0])), eperm);
        let newnet = (CLONE_NEWNET | CLONE_FS) as c_long;
        assert_eq!(probe(move || raw(SYS_clone, [newnet, 0, 0, 0, 0])), eperm);
        // CLONE_SIGHAND without CLONE_VM is invalid: EINVAL means the filter let it through.
        let sighand = CLONE_SIGHAND as c_long;
        assert_eq!(
            probe(move || raw(SYS_clone, [sighand, 0, 0, 0, 0])),
            Outcome::Errno(EINVAL)
        );
        assert_eq!(probe(|| raw(SYS_clone3, [0; 5])), Outcome::Errno(ENOSYS));
        // ADDR_NO_RANDOMIZE is denied; 0xffffffff (query) is allowed.
        assert_eq!(
            probe(|| raw(SYS_personality, [0x0040000, 0, 0, 0, 0])),
            eperm
        );
        assert_eq!(
            probe(|| raw(SYS_personality, [0xffff_ffff, 0, 0, 0, 0])),
            Outcome::Ok
        );
        // NETLINK_AUDIT (9) is denied; route netlink (getifaddrs) and ordinary sockets are not.
        let sockets = [
            (AF_VSOCK, SOCK_STREAM, 0, eperm),
            (AF_PACKET, SOCK_DGRAM, 0, eperm),
            (AF_INET, SOCK_RAW, 1, eperm),
            (AF_NETLINK, SOCK_RAW, 9, eperm),
            (AF_NETLINK, SOCK_RAW, 0, Outcome::Ok),
            (AF_INET, SOCK_STREAM, 0, Outcome::Ok),
        ];
        for (family, ty, proto, want) in sockets {
            let args = [family as c_long, ty as c_long, proto, 0, 0];
            let got = probe(move || raw(SYS_socket, args));
            assert_eq!(got, want, "socket({family}, {ty}, {proto})");
        }
        assert_eq!(
            probe(|| raw(SYS_ioctl, [0, TIOCSTI as c_long, 0, 0, 0])),
            eperm
        );
        assert_eq!(
            probe(|| raw(SYS_memfd_secret, [0; 5])),
            Outcome::Errno(ENOSYS)
        );
        // MPTCP and UDP-Lite over IPv4 and IPv6 are denied; TCP and UDP by number are not.
        for family in [AF_INET, AF_INET6] {
            for (ty, proto) in [(SOCK_STREAM, 262), (SOCK_DGRAM, IPPROTO_UDPLITE)] {
                let args = [family as c_long, ty as c_long, proto as c_long, 0, 0];
                assert_eq!(
                    probe(move || raw(SYS_socket, args)),
                    eperm,
                    "{family} {proto}"
                );
            }
            for (ty, proto) in [(SOCK_STREAM, IPPROTO_TCP), (SOCK_DGRAM, IPPROTO_UDP)] {
                let args = [family as c_long, ty as c_long, proto as c_long, 0, 0];
                assert_eq!(probe(move || raw(SYS_socket, args)), Outcome::Ok);
            }
        }
    }

    #[test]
    fn foreign_abis_are_killed() {
        // x32: the x86_64 getpid number with the x32 bit.
        assert_eq!(
            probe(|| raw(0x4000_0000 | libc::SYS_getpid, [0; 5])),
            Outcome::Killed(libc::SIGSYS)
        );
        // i386: getpid (20) through the 32-bit entry point.
        fn int80_getpid() -> libc::c_long {
            let mut eax: u32 = 20;
            // SAFETY: `int 0x80` with eax = 20 is the i386 getpid system call: no arguments, no
            // memory access; it only writes eax (and the filter kills the process before that).
            unsafe { std::arch::asm!("int 0x80", inlateout("eax") eax) };
            eax as libc::c_long
        }
        assert_eq!(probe(int80_getpid), Outcome::Killed(libc::SIGSYS));
    }
}
