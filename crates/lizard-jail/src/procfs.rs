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

/// The files of one process that say what a run of it used: `stat` (CPU time), `status` (peak
/// resident memory) and `clear_refs` (resets that peak). Opened once and read again at offset 0
/// for each measurement: no path walk and no open per read, on every cell's path. The
/// descriptors keep naming the process they were opened for: once it has exited, reads fail
/// rather than describe another process that got its pid.
///
/// `clear_refs` may not open: it is writable by the process's owner only, and a non-dumpable
/// process forked from a zygote started on the host (the shared zygote) is owned by the host's
/// root, which a sandbox's root is not. The peak is then not reset between runs.
#[derive(Debug)]
pub struct UsageFiles {
    stat: fs::File,
    status: fs::File,
    clear_refs: Option<fs::File>,
    buf: Vec<u8>,
}

/// The most of `stat` or `status` that is read (both are well under 2 KiB).
const MAX_PROC_FILE: usize = 16 * 1024;

impl UsageFiles {
    pub fn open(pid: i32) -> io::Result<UsageFiles> {
        let dir = format!("/proc/{pid}");
        Ok(UsageFiles {
            stat: fs::File::open(format!("{dir}/stat"))?,
            status: fs::File::open(format!("{dir}/status"))?,
            clear_refs: fs::OpenOptions::new()
                .write(true)
                .open(format!("{dir}/clear_refs"))
                .ok(),
            buf: vec![0; MAX_PROC_FILE],
        })
    }

    /// User + system CPU time of the process plus that of its waited-for children, in
    /// milliseconds.
    pub fn cpu_time_ms(&mut self) -> io::Result<u64> {
        let stat = read_at_start(&self.stat, &mut self.buf)?;
        parse_cpu_ticks(stat)
            .map(|ticks| ticks * 1000 / clock_ticks())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/pid/stat"))
    }

    /// Peak resident set size (`VmHWM`), in bytes.
    pub fn peak_rss_bytes(&mut self) -> io::Result<u64> {
        let status = read_at_start(&self.status, &mut self.buf)?;
        parse_peak_rss(status).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "no VmHWM in /proc/pid/status")
        })
    }

    /// Reset the peak to the current resident size (so the next [`UsageFiles::peak_rss_bytes`]
    /// covers only what happens from now on).
    /// Fails when `clear_refs` could not be opened (see the type's docs).
    pub fn reset_peak_rss(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        match &self.clear_refs {
            Some(f) => f.write_at(b"5", 0).map(|_| ()),
            None => Err(io::Error::from(io::ErrorKind::PermissionDenied)),
        }
    }
}

/// `file` from its start into `buf` (as much as it holds), as text. A `/proc` file comes whole
/// in one read when the buffer can hold it: a short read is its end.
fn read_at_start<'a>(file: &fs::File, buf: &'a mut [u8]) -> io::Result<&'a str> {
    use std::os::unix::fs::FileExt;
    let mut len = 0;
    while len < buf.len() {
        let want = buf.len() - len;
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(n) => {
                len += n;
                if n < want {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    std::str::from_utf8(&buf[..len]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses; fields after the last ')' are
    // fixed. utime, stime, cutime, cstime are fields 14..=17, i.e. indices 11..=14 after field 2.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let mut total = 0u64;
    for _ in 0..4 {
        total += fields.next()?.parse::<i64>().ok()?.max(0) as u64;
    }
    Some(total)
}

fn parse_peak_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
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
    fn parses_a_truncated_stat_as_nothing() {
        assert_eq!(
            parse_cpu_ticks("123 (a) S 1 123 123 0 -1 4194560 100 0 0 0 7 3 2"),
            None
        );
        assert_eq!(parse_cpu_ticks("123 a S"), None);
        assert_eq!(parse_peak_rss("Name: x\nVmRSS: 1 kB\n"), None);
        assert_eq!(parse_peak_rss("VmHWM:\t   42 kB\n"), Some(42 * 1024));
    }

    #[test]
    fn usage_files_are_read_again_for_each_measurement() {
        // A child of our own that burns CPU and then grows, so that both figures move between
        // two reads of the same descriptors.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; \
                 x=$(head -c 30000000 /dev/zero | tr '\\0' a); read _",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut files = UsageFiles::open(pid).unwrap();
        files.reset_peak_rss().unwrap();
        let (cpu0, peak0) = (
            files.cpu_time_ms().unwrap(),
            files.peak_rss_bytes().unwrap(),
        );
        assert!(peak0 > 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (cpu, peak) = (
                files.cpu_time_ms().unwrap(),
                files.peak_rss_bytes().unwrap(),
            );
            if cpu > cpu0 && peak > peak0 + 10 * 1024 * 1024 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "cpu {cpu0}→{cpu}, peak {peak0}→{peak}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(child.stdin.take());
        child.wait().unwrap();
        // Gone: the descriptors say so rather than read another process.
        assert!(files.cpu_time_ms().is_err());
    }

    #[test]
    fn proc_is_a_kernel_fs_and_tmp_is_not() {
        let proc = std::fs::File::open("/proc/self/status").unwrap();
        assert!(super::is_kernel_fs(&proc).unwrap());
        let tmp = tempfile::tempfile().unwrap();
        assert!(!super::is_kernel_fs(&tmp).unwrap());
    }
}
