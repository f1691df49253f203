//! Shared helpers of the sandbox tests: a tiny template rootfs assembled from host binaries (plus
//! their libraries and the dynamic loader), owned by the sandbox's shifted root like a real
//! template; a spec for a bash script; launching through the single-threaded `lizard-jail-init`
//! helper; and a guard that kills and removes a sandbox when a test ends, even by panic. What
//! every crate's tests share (the root check, waiting) is in `lizard-test-support`.

#![allow(dead_code)]

use lizard_jail::cgroup::Cgroup;
use lizard_jail::process::{try_reap, Exit};
use lizard_jail::sandbox::{
    launch_with_helper, Bind, IdMap, JailError, Launched, Limits, RootfsSpec, SandboxSpec, UserSpec,
};
#[allow(unused_imports)] // each test binary uses a part of the harness
pub use lizard_test_support::poll;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{lchown, symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const SHIFT: u32 = 100_000;
pub const USER: u32 = 1000;

/// Host programs copied into the test template (with their shared libraries).
const PROGRAMS: &[&str] = &[
    "bash", "cat", "ls", "id", "sleep", "hostname", "grep", "head", "tail", "tr", "stat", "mkdir",
    "touch", "rm", "unshare", "wc", "env", "readlink", "perl", "seq", "true", "sort",
];

/// One test's directory: a template, a sandbox layer, a run dir and a log.
pub struct TestDir {
    pub dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new() -> TestDir {
        let dir = lizard_test_support::temp_dir("jail-test");
        let t = TestDir { dir };
        build_template(&t.template());
        for d in ["upper", "work", "rootfs", "run"] {
            fs::create_dir(t.path().join(d)).unwrap();
        }
        // The agent (uid 1000 inside) creates its socket in the run dir.
        lchown(t.path().join("run"), Some(SHIFT + USER), Some(SHIFT + USER)).unwrap();
        t
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn template(&self) -> PathBuf {
        self.path().join("template")
    }
    pub fn upper(&self) -> PathBuf {
        self.path().join("upper")
    }
    pub fn log_path(&self) -> PathBuf {
        self.path().join("sandbox.log")
    }
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A spec running `bash -c script` as the unprivileged user.
    pub fn spec(&self, id: &str, script: &str) -> SandboxSpec {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), "/usr/bin:/bin".to_string());
        env.insert("HOME".to_string(), "/home/user".to_string());
        env.insert("LIZARD_TEST".to_string(), "1".to_string());
        SandboxSpec {
            id: id.to_string(),
            hostname: id.to_string(),
            rootfs: RootfsSpec {
                lower: vec![self.template()],
                upper: self.upper(),
                work: self.path().join("work"),
                mountpoint: self.path().join("rootfs"),
            },
            binds: vec![
                Bind {
                    source: PathBuf::from("/usr/bin/true"),
                    target: PathBuf::from("/opt/lizard/bin/lizard"),
                    readonly: true,
                    ..Default::default()
                },
                Bind {
                    source: self.path().join("run"),
                    target: PathBuf::from("/run/lizard"),
                    readonly: false,
                    ..Default::default()
                },
            ],
            id_map: IdMap {
                inside: 0,
                outside: SHIFT,
                count: 65536,
            },
            layer_id_base: None,
            userns_parent: None,
            user: UserSpec {
                uid: USER,
                gid: USER,
            },
            cwd: PathBuf::from("/home/user"),
            program: PathBuf::from("/bin/bash"),
            program_source: None,
            args: vec!["-c".to_string(), script.to_string()],
            env,
            limits: Limits::default(),
            keep_caps: Vec::new(),
            context_cgroups: false,
            log_path: self.log_path(),
            inherit_fds: Vec::new(),
            restore: None,
        }
    }
}

/// A unique sandbox id per test run.
pub fn unique_id(name: &str) -> String {
    format!("t-{name}-{}", std::process::id())
}

/// Copy `from` to `root/<same path>`, following symlinks for the content.
fn copy_in(root: &Path, from: &Path) {
    let to = root.join(from.strip_prefix("/").unwrap());
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    if !to.exists() {
        fs::copy(from, &to).unwrap();
    }
}

/// The shared libraries (and loader) `ldd` lists for `program`.
fn libraries(program: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(program).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// A merged-/usr root with a few programs, /etc/passwd, and the directories of a real template;
/// every file owned by the sandbox's root (host uid SHIFT), /home/user by the user.
pub fn build_template(root: &Path) {
    for d in [
        "usr/bin",
        "usr/lib",
        "usr/lib64",
        "usr/sbin",
        "etc",
        "proc",
        "dev",
        "tmp",
        "run",
        "home/user",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("sbin", "usr/sbin"),
    ] {
        symlink(to, root.join(link)).unwrap();
    }
    for p in PROGRAMS {
        let path = PathBuf::from("/usr/bin").join(p);
        copy_in(root, &path);
        for lib in libraries(&path) {
            copy_in(root, &lib);
        }
    }
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/group"),
        "root:x:0:\ntty:x:5:\nuser:x:1000:\n",
    )
    .unwrap();
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    chown_tree(root, SHIFT);
    lchown(
        root.join("home/user"),
        Some(SHIFT + USER),
        Some(SHIFT + USER),
    )
    .unwrap();
}

fn chown_tree(path: &Path, id: u32) {
    lchown(path, Some(id), Some(id)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for e in fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), id);
        }
    }
}

/// The helper binary: single-threaded, so it may clone().
pub fn helper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lizard-jail-init"))
}

/// A launched sandbox, killed and removed when dropped.
pub struct Running {
    pub launched: Launched,
    reaped: Option<Exit>,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.launched.pid
    }
    pub fn cgroup(&self) -> &Cgroup {
        &self.launched.cgroup
    }

    /// Wait (polling, up to `limit`) until PID 1 exits; returns how it ended.
    pub fn wait(&mut self, limit: Duration) -> Exit {
        if let Some(e) = self.reaped {
            return e;
        }
        let exit = poll(limit, "the sandbox's PID 1 to exit", || {
            try_reap(self.launched.pid).unwrap()
        });
        self.reaped = Some(exit);
        exit
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.launched.cgroup.kill_all();
        if self.reaped.is_none() {
            let pid = self.launched.pid;
            lizard_test_support::wait_for(Duration::from_secs(5), || {
                (!matches!(try_reap(pid), Ok(None))).then_some(())
            });
        }
        let _ = self.launched.cgroup.remove();
    }
}

/// Launch through the helper. The test process becomes a subreaper first, so the sandbox's PID 1
/// is re-parented to it (and can be waited for) when the helper exits.
pub fn launch(spec: &SandboxSpec) -> Result<Running, JailError> {
    lizard_jail::process::set_child_subreaper().unwrap();
    let launched = launch_with_helper(helper(), spec)?;
    Ok(Running {
        launched,
        reaped: None,
    })
}

/// Launches `spec` (a probe whose output goes to `t`'s log), waits up to `secs` for it to exit
/// with 0, and returns the `key=value` lines it printed.
pub fn probe_facts(t: &TestDir, spec: &SandboxSpec, secs: u64) -> BTreeMap<String, String> {
    let mut sb = launch(spec).unwrap();
    assert_eq!(
        sb.wait(Duration::from_secs(secs)),
        Exit::Code(0),
        "{}",
        t.log()
    );
    facts(&t.log())
}

/// `key=value` lines of a probe's output.
pub fn facts(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Where `scripts/criu.sh` installs CRIU.
/// Whether process `pid` has ended: a zombie (not reaped yet) counts as gone.
pub fn gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rsplit(')').next().unwrap_or("").trim().starts_with('Z'),
    }
}

/// What the launcher restores `dump` from: the images in `images`, with the CRIU of
/// [`criu_path`] and its run directory `run_dir`.
pub fn restore_from(
    images: &lizard_jail::checkpoint::ImagesDir,
    run_dir: &Path,
    dump: lizard_jail::checkpoint::DumpSpec,
) -> lizard_jail::sandbox::RestoreFrom {
    lizard_jail::sandbox::RestoreFrom {
        criu: criu_path(),
        criu_run_dir: Some(run_dir.to_path_buf()),
        images: images.path.clone(),
        dumped: dump,
        deadline_ms: 60_000,
        netns_setup: Vec::new(),
    }
}

pub fn criu_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/criu/criu")
}

/// The CRIU of `scripts/criu.sh`, or `None` (a test skips, saying so) when it is not installed;
/// with `LIZARD_REQUIRE_CRIU=1` (`scripts/test.sh`) a missing CRIU fails the test instead.
pub fn criu() -> Option<lizard_jail::checkpoint::Criu> {
    let p = criu_path();
    if !p.is_file() {
        // scripts/test.sh installs it and sets LIZARD_REQUIRE_CRIU=1: fail rather than skip.
        assert!(
            std::env::var_os("LIZARD_REQUIRE_CRIU").is_none_or(|v| v != "1"),
            "LIZARD_REQUIRE_CRIU=1 but CRIU is not installed at {}",
            p.display()
        );
        eprintln!(
            "SKIPPED: CRIU is not installed at {} (scripts/criu.sh installs it)",
            p.display()
        );
        return None;
    }
    Some(lizard_jail::checkpoint::Criu::new(p))
}
