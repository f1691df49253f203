//! `template.json`: what a sandbox launcher needs to know about a built template (where Python and
//! Node are inside it, the default environment, the sandbox user, the id shift), written next to the
//! `rootfs` directory. Paths in it are paths *inside* the sandbox.
//!
//! It holds no host paths: the launcher knows where the build lives from [`crate::Template`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::spec::LoadedSpec;

/// Where the sandbox launcher bind-mounts the real `lizard` binary (an empty file in the template).
pub const LIZARD_BIN: &str = "/opt/lizard/bin/lizard";
/// Where the launcher bind-mounts the agent's socket directory (an empty directory, the sandbox
/// root's).
pub const AGENT_DIR: &str = "/run/lizard";
/// Where the Node binary is installed.
pub const NODE_BIN: &str = "/usr/local/bin/node";
/// The first of the uids the agent runs context kernels as (one per context: `CONTEXT_UID_BASE + slot`,
/// slot `0..CONTEXT_UIDS`), each with the sandbox user's group as its primary group. The template
/// lists them in `/etc/passwd` as `ctx<slot>` with the sandbox user's home.
pub const CONTEXT_UID_BASE: u32 = 2000;
/// How many context uids there are: at most this many contexts per sandbox.
pub const CONTEXT_UIDS: u32 = 64;
/// The hostname written into the template (a sandbox sets its own in its UTS namespace).
pub const HOSTNAME: &str = "lizard";
/// The default PATH after the venv's `bin` (Debian's usual order).
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The contents of `template.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateMeta {
    pub name: String,
    /// The cache key the build was made for.
    pub key: String,
    /// [`crate::BUILDER_VERSION`] of the builder that made it.
    pub builder_version: u32,
    /// When the build finished, RFC 3339 UTC.
    pub created: String,
    pub description: String,
    /// The Debian base: suite, variant and the mirror it was fetched from.
    pub debian: DebianMeta,
    /// The unprivileged user code runs as.
    pub user: UserMeta,
    /// Every owner in the rootfs was moved up by this much (see `shift`); the sandbox's user
    /// namespace must map inside ids `0..65536` to `id_shift..id_shift + 65536`.
    pub id_shift: u32,
    /// `bash` inside the template.
    pub bash: String,
    /// The venv's python (`/opt/lizard/venv/bin/python`), if the template has Python.
    pub python: Option<String>,
    /// `python --version` output, e.g. `3.11.2`.
    pub python_version: Option<String>,
    /// The Node binary, if the template has Node.
    pub node: Option<String>,
    /// `node --version` output without the `v`, e.g. `26.10.0`.
    pub node_version: Option<String>,
    /// `NODE_PATH` for JavaScript kernels (where the spec's npm packages are).
    pub node_path: Option<String>,
    /// Mount target of the real `lizard` binary.
    pub lizard_bin: String,
    /// Mount target of the agent's socket directory.
    pub agent_dir: String,
    /// The default environment of processes in the sandbox (also in `/etc/profile.d/lizard.sh`).
    pub env: BTreeMap<String, String>,
    /// Disk usage of the rootfs in bytes.
    pub disk_bytes: u64,
    /// The exact versions the build installed (Debian, Python, npm); absent in builds of older
    /// builders.
    #[serde(default)]
    pub versions: Option<crate::lock::Versions>,
    /// How `versions` differ from the spec's lock at build time (empty: no lock, or no difference).
    #[serde(default)]
    pub drift: Vec<crate::lock::Drift>,
}

/// The Debian part of [`TemplateMeta`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebianMeta {
    pub suite: String,
    pub variant: String,
    pub mirror: String,
}

/// The user part of [`TemplateMeta`] (ids as seen inside the sandbox).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMeta {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
}

/// The template's default environment: `PATH` (venv first), `HOME`, `USER`, `LOGNAME`, `SHELL`,
/// `LANG=C.UTF-8`, `NODE_PATH` when there is Node, then the spec's `[env]` (which may override).
pub fn default_env(spec: &LoadedSpec) -> BTreeMap<String, String> {
    let s = &spec.spec;
    let mut env = BTreeMap::new();
    let path = match &s.python {
        Some(py) => format!("{}/bin:{SYSTEM_PATH}", py.venv),
        None => SYSTEM_PATH.to_owned(),
    };
    env.insert("PATH".to_owned(), path);
    env.insert("HOME".to_owned(), s.user.home.clone());
    env.insert("USER".to_owned(), s.user.name.clone());
    env.insert("LOGNAME".to_owned(), s.user.name.clone());
    env.insert("SHELL".to_owned(), s.user.shell.clone());
    env.insert("LANG".to_owned(), "C.UTF-8".to_owned());
    if let Some(node) = &s.node {
        env.insert("NODE_PATH".to_owned(), node.node_modules());
    }
    for (k, v) in &s.env {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// `/etc/profile.d/lizard.sh`: exports the default environment for login shells (except the
/// per-login variables `HOME`, `USER`, `LOGNAME`, `SHELL`, which login sets itself).
pub fn profile_script(env: &BTreeMap<String, String>) -> String {
    let mut s = String::from(
        "# Written by the Lizard template builder: the template's default environment.\n",
    );
    for (k, v) in env {
        if ["HOME", "USER", "LOGNAME", "SHELL"].contains(&k.as_str()) {
            continue;
        }
        s.push_str(&format!("export {k}='{}'\n", v.replace('\'', r"'\''")));
    }
    s
}

/// Formats seconds since the Unix epoch as RFC 3339 UTC (`1970-01-01T00:00:00Z`).
pub fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86400) as i64;
    let secs = unix_secs % 86400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A minimal meta for unit tests (a bookworm minbase template without Python or Node).
#[cfg(test)]
pub(crate) fn test_meta(name: &str, key: &str) -> TemplateMeta {
    TemplateMeta {
        name: name.into(),
        key: key.into(),
        builder_version: crate::BUILDER_VERSION,
        created: "2026-01-01T00:00:00Z".into(),
        description: String::new(),
        debian: DebianMeta {
            suite: "bookworm".into(),
            variant: "minbase".into(),
            mirror: "http://mirror.example/debian".into(),
        },
        user: UserMeta {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            shell: "/bin/bash".into(),
        },
        id_shift: 100000,
        bash: "/bin/bash".into(),
        python: None,
        python_version: None,
        node: None,
        node_version: None,
        node_path: None,
        lizard_bin: LIZARD_BIN.into(),
        agent_dir: AGENT_DIR.into(),
        env: Default::default(),
        disk_bytes: 0,
        versions: None,
        drift: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn env_of_the_builtin_template() {
        let spec = crate::spec::load("code-interpreter-v1", None).unwrap();
        let env = default_env(&spec);
        assert_eq!(
            env["PATH"],
            "/opt/lizard/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(env["HOME"], "/home/user");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["NODE_PATH"], "/opt/lizard/node_modules");
        let script = profile_script(&env);
        assert!(script.contains("export PATH='/opt/lizard/venv/bin:"));
        assert!(!script.contains("HOME="));
        let mut odd = BTreeMap::new();
        odd.insert("X".to_owned(), "it's".to_owned());
        assert!(profile_script(&odd).contains(r"export X='it'\''s'"));
    }
}
