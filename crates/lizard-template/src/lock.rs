//! Version locks: the exact Debian, Python and npm package versions a build installed, the lock file
//! a spec names (`lock = "<name>.lock"`, TOML with one table per package manager), and the drift
//! between the two.
//!
//! A build always records what it installed (`template.json`'s `versions`). Debian testing moves
//! daily and old versions leave the mirror, so a Debian difference cannot be prevented; it is
//! reported (printed and recorded as `drift` in `template.json`), made an error by
//! [`LockMode::Locked`], and written as the new lock by [`LockMode::Update`]. Python and npm
//! versions are pinned by the spec's own files, so a difference there means the lock is stale.
//!
//! It parses the output of `dpkg-query`, `pip list --format=json` and npm's `package-lock.json`; it
//! runs nothing itself.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What to do with a difference between the lock and the build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LockMode {
    /// Report it (printed, and recorded in `template.json`); the build succeeds.
    #[default]
    Report,
    /// Fail the build (`lizard template build --locked`).
    Locked,
    /// Write the build's versions as the new lock (`--update-lock`); needs a spec loaded from a file.
    Update,
}

/// Exact versions by package manager, then package name (sorted, so a lock diffs well).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versions {
    /// Debian packages (`dpkg-query`): name → version.
    #[serde(default)]
    pub debian: BTreeMap<String, String>,
    /// Python distributions in the venv (`pip list`): normalized name → version.
    #[serde(default)]
    pub python: BTreeMap<String, String>,
    /// npm packages under the Node prefix (`package-lock.json`): install path → version.
    #[serde(default)]
    pub node: BTreeMap<String, String>,
}

/// One package whose built version is not the locked one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// `debian`, `python` or `node`.
    pub section: String,
    pub package: String,
    /// `None`: the build installed a package the lock does not list.
    pub locked: Option<String>,
    /// `None`: the lock lists a package the build did not install.
    pub built: Option<String>,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let locked = self.locked.as_deref().unwrap_or("(not locked)");
        let built = self.built.as_deref().unwrap_or("(not installed)");
        write!(f, "{}: {} {locked} → {built}", self.section, self.package)
    }
}

impl Versions {
    /// Every difference between `self` (the lock) and `built`, by section and package.
    pub fn drift(&self, built: &Versions) -> Vec<Drift> {
        let mut out = Vec::new();
        for (section, locked, built) in [
            ("debian", &self.debian, &built.debian),
            ("python", &self.python, &built.python),
            ("node", &self.node, &built.node),
        ] {
            out.extend(drift_of(section, locked, built));
        }
        out
    }
}

/// The differences in one section.
pub fn drift_of(
    section: &str,
    locked: &BTreeMap<String, String>,
    built: &BTreeMap<String, String>,
) -> Vec<Drift> {
    let mut names: Vec<&String> = locked.keys().chain(built.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| locked.get(*n) != built.get(*n))
        .map(|n| Drift {
            section: section.to_owned(),
            package: n.clone(),
            locked: locked.get(n).cloned(),
            built: built.get(n).cloned(),
        })
        .collect()
}

/// A drift report for people: a count and one line per package (empty when there is no drift).
pub fn report(drift: &[Drift]) -> String {
    if drift.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "{} package version(s) differ from the lock (locked → built):\n",
        drift.len()
    );
    for d in drift {
        s.push_str(&format!("  {d}\n"));
    }
    s
}

/// Parses a lock file.
pub fn parse(text: &str) -> Result<Versions, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

/// The text of a lock file for `v` (a header comment, then the tables); [`parse`] reads it back.
pub fn render(template: &str, v: &Versions) -> String {
    let body = toml::to_string(v).unwrap_or_default();
    format!(
        "# The exact versions a build of the {template} template installed: Debian packages \
         (dpkg-query),\n# Python distributions (pip list) and npm packages (package-lock.json). \
         Written by\n# `lizard template build <spec file> --update-lock`; every build compares \
         itself with it.\n\n{body}"
    )
}

/// Parses `dpkg-query -W -f '${Package}\t${Version}\n'`.
pub fn parse_dpkg(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// PEP 503 name normalization: lower case, runs of `-`, `_`, `.` as one `-`.
pub fn normalize_python(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if "-_.".contains(c) {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Parses `pip list --format=json` (`[{"name": …, "version": …}, …]`).
pub fn parse_pip_list(json: &str) -> Result<BTreeMap<String, String>, String> {
    #[derive(Deserialize)]
    struct Row {
        name: String,
        version: String,
    }
    let rows: Vec<Row> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    Ok(rows
        .into_iter()
        .map(|r| (normalize_python(&r.name), r.version))
        .collect())
}

/// Parses npm's `package-lock.json` (lockfile version 2 or 3): every installed package by its path
/// under `node_modules` (`lodash`, `@scope/pkg`, `a/node_modules/b`), the root itself left out.
pub fn parse_package_lock(json: &str) -> Result<BTreeMap<String, String>, String> {
    #[derive(Deserialize)]
    struct Lock {
        #[serde(default)]
        packages: BTreeMap<String, Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        version: Option<String>,
    }
    let lock: Lock = serde_json::from_str(json).map_err(|e| e.to_string())?;
    Ok(lock
        .packages
        .into_iter()
        .filter_map(|(path, e)| {
            let name = path.strip_prefix("node_modules/")?.to_owned();
            Some((name, e.version?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_drift_when_equal() {
        let v = Versions {
            debian: map(&[("bash", "5.2.37-2"), ("libc6", "2.41-12")]),
            python: map(&[("numpy", "2.4.6")]),
            node: map(&[("lodash", "4.18.1")]),
        };
        assert!(v.drift(&v.clone()).is_empty());
        assert_eq!(report(&[]), "");
    }

    #[test]
    fn drift_names_changed_added_and_missing_packages() {
        let locked = Versions {
            debian: map(&[("bash", "5.2.37-2"), ("gone", "1.0"), ("libc6", "2.41-12")]),
            python: map(&[("numpy", "2.4.6")]),
            node: BTreeMap::new(),
        };
        let built = Versions {
            debian: map(&[("bash", "5.2.37-3"), ("libc6", "2.41-12"), ("new", "0.1")]),
            python: map(&[("numpy", "2.4.6")]),
            node: map(&[("zod", "4.6.7")]),
        };
        let d = locked.drift(&built);
        let lines: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            vec![
                "debian: bash 5.2.37-2 → 5.2.37-3",
                "debian: gone 1.0 → (not installed)",
                "debian: new (not locked) → 0.1",
                "node: zod (not locked) → 4.6.7",
            ]
        );
        let r = report(&d);
        assert!(r.starts_with("4 package version(s) differ"));
        assert!(r.contains("  debian: bash 5.2.37-2 → 5.2.37-3\n"));
        // The other way round, every difference is reported too.
        assert_eq!(built.drift(&locked).len(), 4);
    }

    #[test]
    fn lock_file_round_trips() {
        let v = Versions {
            debian: map(&[("libstdc++6", "15.2.0-4"), ("python3.14", "3.14.8-1")]),
            python: map(&[("scikit-learn", "1.9.1")]),
            node: map(&[("@scope/pkg", "1.0.0"), ("a/node_modules/b", "2.0.0")]),
        };
        let text = render("t", &v);
        assert!(text.starts_with("# The exact versions"));
        assert_eq!(parse(&text).unwrap(), v);
        // A section may be missing; an unknown one is an error (a typo must not silently unlock).
        assert_eq!(
            parse("[python]\nsix = \"1.17.0\"\n").unwrap().debian.len(),
            0
        );
        assert!(parse("[pyhton]\nsix = \"1.17.0\"\n").is_err());
        assert!(parse("[python]\nsix = 1\n").is_err());
    }

    #[test]
    fn parses_the_tools_outputs() {
        let dpkg = "bash\t5.2.37-2\nlibc6\t2.41-12\n\nbroken line\n";
        assert_eq!(
            parse_dpkg(dpkg),
            map(&[("bash", "5.2.37-2"), ("libc6", "2.41-12")])
        );
        let pip = r#"[{"name": "Jinja2", "version": "3.1.6"}, {"name": "typing_extensions", "version": "4.16.0"}, {"name": "ruamel.yaml", "version": "0.18"}]"#;
        assert_eq!(
            parse_pip_list(pip).unwrap(),
            map(&[
                ("jinja2", "3.1.6"),
                ("ruamel-yaml", "0.18"),
                ("typing-extensions", "4.16.0")
            ])
        );
        assert!(parse_pip_list("not json").is_err());
        let npm = r#"{"lockfileVersion": 3, "packages": {
            "": {"name": "root", "dependencies": {"lodash": "4.18.1"}},
            "node_modules/lodash": {"version": "4.18.1"},
            "node_modules/@s/p": {"version": "1.0.0"},
            "node_modules/a/node_modules/b": {"version": "2.0.0"},
            "node_modules/linked": {"link": true}}}"#;
        assert_eq!(
            parse_package_lock(npm).unwrap(),
            map(&[
                ("@s/p", "1.0.0"),
                ("a/node_modules/b", "2.0.0"),
                ("lodash", "4.18.1")
            ])
        );
    }

    #[test]
    fn python_names_are_normalized() {
        assert_eq!(normalize_python("Foo.Bar__baz"), "foo-bar-baz");
        assert_eq!(normalize_python("PyYAML"), "pyyaml");
        assert_eq!(
            normalize_python("opencv-python-headless"),
            "opencv-python-headless"
        );
    }
}
