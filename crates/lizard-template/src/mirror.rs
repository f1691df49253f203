//! Finding the Debian mirror to debootstrap from in the host's apt configuration, so no mirror host is
//! ever written into the repository: deb822 `.sources` files and one-line `sources.list` files.
//!
//! It only parses what debootstrap needs (types, URIs, suites, components, `Enabled`); options such
//! as `Signed-By` or `[arch=…]` are ignored. It does not contact the mirror.

use std::path::{Path, PathBuf};

use crate::error::{Result, TemplateError};

/// One apt source entry (a deb822 stanza or one `deb` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub types: Vec<String>,
    pub uris: Vec<String>,
    pub suites: Vec<String>,
    pub components: Vec<String>,
    pub enabled: bool,
}

/// Parses a deb822 `.sources` file.
pub fn parse_deb822(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    let mut fields: Vec<(String, String)> = Vec::new();
    let flush = |fields: &mut Vec<(String, String)>, out: &mut Vec<AptSource>| {
        if fields.is_empty() {
            return;
        }
        let get = |name: &str| -> Vec<String> {
            fields
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .flat_map(|(_, v)| v.split_whitespace().map(str::to_owned))
                .collect()
        };
        let enabled = get("Enabled")
            .first()
            .is_none_or(|v| !v.eq_ignore_ascii_case("no"));
        out.push(AptSource {
            types: get("Types"),
            uris: get("URIs"),
            suites: get("Suites"),
            components: get("Components"),
            enabled,
        });
        fields.clear();
    };
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut fields, &mut out);
        } else if line.starts_with([' ', '\t']) {
            // A continuation line (multi-line field such as Signed-By).
            if let Some((_, v)) = fields.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    flush(&mut fields, &mut out);
    out
}

/// Parses a one-line-style `sources.list` file (`deb [options] URI suite component…`).
pub fn parse_one_line(text: &str) -> Vec<AptSource> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace().peekable();
        let Some(kind) = words.next() else { continue };
        if words.peek().is_some_and(|w| w.starts_with('[')) {
            for w in words.by_ref() {
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(AptSource {
            types: vec![kind.to_owned()],
            uris: vec![uri.to_owned()],
            suites: vec![suite.to_owned()],
            components: words.map(str::to_owned).collect(),
            enabled: true,
        });
    }
    out
}

/// The mirror URI for `suite`: the first enabled `deb` source that lists the suite itself, else the
/// first one that lists any release suite (no `-updates`/`-security` suffix), since one archive
/// serves every release. Only `http`, `https` and `file` URIs (what debootstrap fetches) count.
pub fn pick_mirror(sources: &[AptSource], suite: &str) -> Option<String> {
    let usable = || {
        sources
            .iter()
            .filter(|s| s.enabled && s.types.iter().any(|t| t == "deb"))
    };
    let uri_of = |s: &AptSource| {
        s.uris
            .iter()
            .find(|u| {
                u.starts_with("http://") || u.starts_with("https://") || u.starts_with("file:/")
            })
            .cloned()
    };
    usable()
        .filter(|s| s.suites.iter().any(|x| x == suite))
        .find_map(uri_of)
        .or_else(|| {
            usable()
                .filter(|s| s.suites.iter().any(|x| !x.contains(['-', '/'])))
                .find_map(uri_of)
        })
}

/// Every apt source of the host, in apt's order: `sources.list`, then `sources.list.d/*.list` and
/// `*.sources` by name. Unreadable or missing files are skipped.
pub fn host_sources(apt_dir: &Path) -> (Vec<AptSource>, Vec<PathBuf>) {
    let mut files = vec![apt_dir.join("sources.list")];
    if let Ok(rd) = std::fs::read_dir(apt_dir.join("sources.list.d")) {
        let mut more: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    let mut sources = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        if f.extension().is_some_and(|e| e == "sources") {
            sources.extend(parse_deb822(&text));
        } else {
            sources.extend(parse_one_line(&text));
        }
    }
    (sources, files)
}

/// The host's mirror for `suite`, from `/etc/apt`.
pub fn host_mirror(suite: &str) -> Result<String> {
    let apt_dir = Path::new("/etc/apt");
    let (sources, files) = host_sources(apt_dir);
    pick_mirror(&sources, suite).ok_or_else(|| TemplateError::NoMirror {
        suite: suite.to_owned(),
        searched: files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----
";

    #[test]
    fn deb822_stanzas() {
        let s = parse_deb822(DEB822);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].uris, vec!["http://mirror.example/debian"]);
        assert_eq!(s[0].suites, vec!["bookworm", "bookworm-updates"]);
        assert_eq!(s[0].components, vec!["main"]);
        assert!(s[0].enabled);
        assert_eq!(s[1].suites, vec!["bookworm-security"]);
        assert_eq!(
            pick_mirror(&s, "bookworm").as_deref(),
            Some("http://mirror.example/debian")
        );
        // Another release is served by the same archive, never by the security one.
        assert_eq!(
            pick_mirror(&s, "trixie").as_deref(),
            Some("http://mirror.example/debian")
        );
        // Debian testing under its code name (built with debootstrap's `sid` script), which a
        // stable host's apt configuration never lists: the same archive as the host's release.
        assert_eq!(
            pick_mirror(&s, "forky").as_deref(),
            Some("http://mirror.example/debian")
        );
    }

    #[test]
    fn deb822_disabled_and_deb_src_are_skipped() {
        let text = "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm\nEnabled: no\n\n\
                    Types: deb-src\nURIs: http://b.example/debian\nSuites: bookworm\n\n\
                    Types: deb deb-src\nURIs: https://c.example/debian\nSuites: bookworm\n";
        let s = parse_deb822(text);
        assert_eq!(s.len(), 3);
        assert!(!s[0].enabled);
        assert_eq!(
            pick_mirror(&s, "bookworm").as_deref(),
            Some("https://c.example/debian")
        );
    }

    #[test]
    fn one_line_format() {
        let text = "\
# comment
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm-security main
deb [ arch=amd64 ] http://b.example/debian bookworm main contrib # trailing
deb cdrom:[Debian]/ bookworm main
";
        let s = parse_one_line(text);
        assert_eq!(s.len(), 4);
        assert_eq!(s[2].uris, vec!["http://b.example/debian"]);
        assert_eq!(s[2].components, vec!["main", "contrib"]);
        assert_eq!(
            pick_mirror(&s, "bookworm").as_deref(),
            Some("http://b.example/debian")
        );
        assert_eq!(pick_mirror(&s[..2], "bookworm"), None);
    }

    #[test]
    fn host_files_in_apt_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sources.list.d")).unwrap();
        std::fs::write(
            dir.path().join("sources.list.d/debian.sources"),
            "Types: deb\nURIs: http://second.example/debian\nSuites: bookworm\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("sources.list.d/x.list.disabled"),
            "deb http://never.example/debian bookworm main\n",
        )
        .unwrap();
        let (s, _) = host_sources(dir.path());
        assert_eq!(
            pick_mirror(&s, "bookworm").as_deref(),
            Some("http://second.example/debian")
        );
        std::fs::write(
            dir.path().join("sources.list"),
            "deb http://first.example/debian bookworm main\n",
        )
        .unwrap();
        let (s, files) = host_sources(dir.path());
        assert_eq!(files.len(), 2);
        assert_eq!(
            pick_mirror(&s, "bookworm").as_deref(),
            Some("http://first.example/debian")
        );
    }
}
