//! The host-side log files of a sandbox (`agent.log`: the agent's stdout and stderr;
//! `slirp4netns.log`) are bounded. They live in the sandbox's directory on the host, outside its
//! disk quota, and what goes into them is driven by what happens inside the sandbox, so the usage
//! sampler caps them on every round: a file over [`LIMIT`] keeps its last [`KEEP`] bytes in
//! `<name>.1` and starts again empty (with a line saying so). The writers hold the files open
//! with `O_APPEND`, so they go on writing at the new end.
//!
//! Lines written between the copy and the truncation are lost; a sandbox can at most make its
//! logs `LIMIT` + one sampling interval's worth of writes long. Not here: what is logged.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Largest size of a sandbox's host-side log before it is cut.
pub const LIMIT: u64 = 8 << 20;
/// What is kept of a cut log, in `<name>.1`.
pub const KEEP: u64 = 1 << 20;
/// The host-side logs of a sandbox (in its directory).
pub const FILES: [&str; 2] = ["agent.log", "slirp4netns.log"];

/// Cut every log of the sandbox directory `dir` that is over [`LIMIT`]; returns how many were.
pub fn cap(dir: &Path) -> io::Result<usize> {
    let mut cut = 0;
    for name in FILES {
        let path = dir.join(name);
        let len = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => m.len(),
            _ => continue,
        };
        if len <= LIMIT {
            continue;
        }
        let mut f = File::open(&path)?;
        f.seek(SeekFrom::Start(len - KEEP))?;
        let mut tail = Vec::with_capacity(KEEP as usize);
        f.take(KEEP).read_to_end(&mut tail)?;
        std::fs::write(dir.join(format!("{name}.1")), &tail)?;
        let mut w = OpenOptions::new().write(true).open(&path)?;
        w.set_len(0)?;
        w.seek(SeekFrom::Start(0))?;
        writeln!(
            w,
            "[lizard: this log reached {len} bytes and was cut; its last {KEEP} bytes are in {name}.1]"
        )?;
        cut += 1;
    }
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_over_the_limit_keeps_its_tail_and_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.log");
        // The writer, as the agent holds it.
        let mut agent = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let line = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        for _ in 0..(LIMIT / line.len() as u64 + 10) {
            agent.write_all(line).unwrap();
        }
        agent.write_all(b"the last line\n").unwrap();
        std::fs::write(dir.path().join("slirp4netns.log"), b"small\n").unwrap();

        assert_eq!(cap(dir.path()).unwrap(), 1);
        let kept = std::fs::read(dir.path().join("agent.log.1")).unwrap();
        assert_eq!(kept.len() as u64, KEEP);
        assert!(kept.ends_with(b"the last line\n"));
        agent.write_all(b"after the cut\n").unwrap();
        let now = std::fs::read_to_string(&path).unwrap();
        assert!(now.starts_with("[lizard: this log reached"), "{now}");
        assert!(now.ends_with("after the cut\n"), "{now}");
        assert!((now.len() as u64) < 1024);
        assert_eq!(
            std::fs::read(dir.path().join("slirp4netns.log")).unwrap(),
            b"small\n"
        );
        assert_eq!(cap(dir.path()).unwrap(), 0, "nothing over the limit now");
    }

    #[test]
    fn missing_logs_and_symlinks_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cap(dir.path()).unwrap(), 0);
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, vec![b'x'; (LIMIT + 1) as usize]).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("agent.log")).unwrap();
        assert_eq!(cap(dir.path()).unwrap(), 0);
        assert_eq!(
            std::fs::metadata(&target).unwrap().len(),
            LIMIT + 1,
            "not followed"
        );
    }
}
