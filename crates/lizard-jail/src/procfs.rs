//! Per-process facts read from `/proc`: CPU time, peak resident memory, zombies, the pipes a
//! process holds.
//!
//! Not here: cgroup accounting for whole sandboxes.

use std::fs;
use std::io;
use std::sync::OnceLock;

fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .map(|t| t as u64)
            .unwrap_or(100)
    })
}

/// The inode of the pipe that the link `link` (a `/proc/<pid>/fd/<n>` entry) names, if it names
/// a pipe (`pipe:[<inode>]`).
pub fn pipe_inode_of(link: &std::path::Path) -> Option<u64> {
    fs::read_link(link)
        .ok()?
        .to_str()?
        .strip_prefix("pipe:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inode of the pipe that this process's descriptor `fd` is, or 0 when it is no pipe.
pub fn own_pipe_inode(fd: std::os::fd::RawFd) -> u64 {
    pipe_inode_of(std::path::Path::new(&format!("/proc/self/fd/{fd}"))).unwrap_or(0)
}

/// User + system CPU time of `pid` plus that of its waited-for children, in milliseconds.
pub fn cpu_time_ms(pid: i32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| ticks * 1000 / clock_ticks())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/pid/stat"))
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses; fields after the last ')' are
    // fixed. utime, stime, cutime, cstime are fields 14..=17, i.e. indices 11..=14 after field 2.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let mut total = 0u64;
    for i in 11..=14 {
        total += fields.get(i)?.parse::<i64>().ok()?.max(0) as u64;
    }
    Some(total)
}

/// Peak resident set size (`VmHWM`) of `pid`, in bytes.
pub fn peak_rss_bytes(pid: i32) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmHWM in /proc/pid/status"))
}

/// Reset the peak RSS of `pid` to its current RSS (so the next [`peak_rss_bytes`] covers only what
/// happens from now on).
pub fn reset_peak_rss(pid: i32) -> io::Result<()> {
    fs::write(format!("/proc/{pid}/clear_refs"), b"5")
}

/// Set `pid`'s OOM score adjustment (-1000..=1000). Raising it is always allowed for one's own
/// processes; lowering it needs `CAP_SYS_RESOURCE`.
pub fn set_oom_score_adj(pid: i32, value: i32) -> io::Result<()> {
    fs::write(format!("/proc/{pid}/oom_score_adj"), value.to_string())
}

/// Children of `parent` that have exited and wait to be reaped (zombies), from `/proc`.
pub fn zombie_children(parent: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    let mut f = rest.split_whitespace();
                    let state = f.next()?;
                    let ppid: i32 = f.next()?.parse().ok()?;
                    Some(state == "Z" && ppid == parent)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Whether the open file `f` lives on one of the kernel's own file systems — procfs, sysfs,
/// cgroupfs (v1 or v2), debugfs, tracefs, securityfs, bpffs — whose entries describe processes
/// and the kernel rather than hold data: `/proc/self/*` of a process is that process's memory,
/// descriptors and environment.
pub fn is_kernel_fs(f: &std::fs::File) -> io::Result<bool> {
    use nix::sys::statfs::{fstatfs, FsType};
    const KERNEL_FS: &[i64] = &[
        0x9fa0,     // PROC_SUPER_MAGIC
        0x62656572, // SYSFS_MAGIC
        0x27e0eb,   // CGROUP_SUPER_MAGIC
        0x63677270, // CGROUP2_SUPER_MAGIC
        0x64626720, // DEBUGFS_MAGIC
        0x74726163, // TRACEFS_MAGIC
        0x73636673, // SECURITYFS_MAGIC
        0xcafe4a11, // BPF_FS_MAGIC
    ];
    let t: FsType = fstatfs(f).map_err(io::Error::from)?.filesystem_type();
    Ok(KERNEL_FS.iter().any(|m| FsType(*m as _) == t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let stat = "123 (a) b (c)) S 1 123 123 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 1 1 1";
        assert_eq!(parse_cpu_ticks(stat), Some(13));
    }

    #[test]
    fn finds_zombie_children() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let me = std::process::id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !zombie_children(me).contains(&pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "child never became a zombie"
            );
            std::thread::yield_now();
        }
        child.wait().unwrap();
        assert!(!zombie_children(me).contains(&pid));
    }

    #[test]
    fn reads_own_accounting() {
        let me = std::process::id() as i32;
        cpu_time_ms(me).unwrap();
        assert!(peak_rss_bytes(me).unwrap() > 0);
        reset_peak_rss(me).unwrap();
    }

    #[test]
    fn proc_is_a_kernel_fs_and_tmp_is_not() {
        let proc = std::fs::File::open("/proc/self/status").unwrap();
        assert!(super::is_kernel_fs(&proc).unwrap());
        let tmp = tempfile::tempfile().unwrap();
        assert!(!super::is_kernel_fs(&tmp).unwrap());
    }
}
