//! The operator's registries: `NAME=URL` parsing, the mapping between a mirror path and an upstream
//! URL, and the rewriting of registry URLs in index bodies and redirects.

use std::fmt;
use std::str::FromStr;

use crate::LISTEN_ADDR;

/// One upstream package registry the mirror serves, as `lizard serve --package-registry NAME=URL`
/// gives it: `http://127.100.0.1:3142/<name>/<rest>` is fetched from `<url>/<rest>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    pub name: String,
    /// `http://` or `https://`, a host (lower case) with an optional port and an optional base path;
    /// no trailing `/`, no query, fragment or user info.
    pub url: String,
}

/// What is wrong with a `NAME=URL` registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("a package registry is NAME=URL (e.g. pypi=https://pypi.org); {0:?} has no '='")]
    MissingEquals(String),
    #[error("registry name {0:?}: 1 to 32 characters of a-z, 0-9 and '-', not starting with '-'")]
    BadName(String),
    #[error("registry URL {0:?}: must start with http:// or https://")]
    BadScheme(String),
    #[error("registry URL {0:?}: user info (user:password@) is not allowed")]
    UserInfo(String),
    #[error("registry URL {0:?}: a query or fragment ('?', '#') is not allowed")]
    QueryOrFragment(String),
    #[error("registry URL {0:?}: the host must be a DNS name or an IP address (letters, digits, '.', '-'; IPv6 in [brackets])")]
    BadHost(String),
    #[error("registry URL {0:?}: the port must be a number from 1 to 65535")]
    BadPort(String),
    #[error("registry URL {0:?}: the path may hold only printable ASCII without spaces, '\\', '%' or '.'/'..' segments")]
    BadPath(String),
    #[error("registry name {0:?} is given twice")]
    Duplicate(String),
}

impl FromStr for Registry {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, url) = s
            .split_once('=')
            .ok_or_else(|| RegistryError::MissingEquals(s.to_owned()))?;
        if !valid_name(name) {
            return Err(RegistryError::BadName(name.to_owned()));
        }
        Ok(Registry {
            name: name.to_owned(),
            url: normalize_url(url)?,
        })
    }
}

impl fmt::Display for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.url)
    }
}

fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=32).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Checks a registry URL and returns it normalised (lower-case scheme and host, no trailing `/`).
fn normalize_url(url: &str) -> Result<String, RegistryError> {
    let bad = |e: fn(String) -> RegistryError| e(url.to_owned());
    if url.contains(['?', '#']) {
        return Err(bad(RegistryError::QueryOrFragment));
    }
    let lower = url.to_ascii_lowercase();
    let (scheme, rest) = if lower.starts_with("https://") {
        ("https", &url[8..])
    } else if lower.starts_with("http://") {
        ("http", &url[7..])
    } else {
        return Err(bad(RegistryError::BadScheme));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(bad(RegistryError::UserInfo));
    }
    let (host, port) = split_host_port(authority).ok_or_else(|| bad(RegistryError::BadHost))?;
    if let Some(port) = port {
        if !port.bytes().all(|c| c.is_ascii_digit()) || !matches!(port.parse::<u16>(), Ok(1..)) {
            return Err(bad(RegistryError::BadPort));
        }
    }
    let path = path.trim_end_matches('/');
    let path_ok = path
        .bytes()
        .all(|c| c.is_ascii_graphic() && c != b'\\' && c != b'%')
        && !path.split('/').any(|seg| seg == "." || seg == "..");
    if !path_ok {
        return Err(bad(RegistryError::BadPath));
    }
    let mut out = format!("{scheme}://{}", host.to_ascii_lowercase());
    if let Some(port) = port {
        out.push(':');
        out.push_str(port);
    }
    out.push_str(path);
    Ok(out)
}

/// `host[:port]` → (host, port). The host is a DNS name / IPv4 (letters, digits, '.', '-', not
/// starting or ending with '.' or '-') or a bracketed IPv6 address.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6.find(']')?;
        let addr = &v6[..end];
        addr.parse::<std::net::Ipv6Addr>().ok()?;
        let after = &v6[end + 1..];
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (&authority[..end + 2], port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let ok = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-')
            && !host.starts_with(['.', '-'])
            && !host.ends_with(['.', '-']);
        if !ok {
            return None;
        }
        (host, port)
    };
    Some((host, port))
}

/// The registries a server mirrors when the operator names none.
///
/// `pypi` is PyPI's root (not `/simple`), so that the mirror's `/pypi/simple/` is PyPI's simple
/// index, as `PIP_INDEX_URL` says, and relative links that climb to `/packages/…` (pypiserver's)
/// stay inside the registry.
pub fn default_registries() -> Vec<Registry> {
    [
        ("pypi", "https://pypi.org"),
        ("pypi-files", "https://files.pythonhosted.org"),
        ("npm", "https://registry.npmjs.org"),
        ("debian", "http://deb.debian.org/debian"),
        ("debian-security", "http://deb.debian.org/debian-security"),
    ]
    .into_iter()
    .map(|(name, url)| Registry {
        name: name.to_owned(),
        url: url.to_owned(),
    })
    .collect()
}

/// The mirror's own base URL for a registry, as the sandbox sees it.
pub(crate) fn mirror_base(name: &str) -> String {
    format!("http://{LISTEN_ADDR}/{name}")
}

/// The checked registries of one proxy, with their index for the per-registry counters.
#[derive(Debug)]
pub(crate) struct Registries {
    list: Vec<Registry>,
    /// Indexes into `list`, longest URL first (a rewrite or a match picks the most specific).
    by_len: Vec<usize>,
}

impl Registries {
    pub(crate) fn new(list: Vec<Registry>) -> Result<Self, RegistryError> {
        let mut checked: Vec<Registry> = Vec::with_capacity(list.len());
        for r in list {
            // Fields are public: check what was built by hand as strictly as what was parsed.
            let r: Registry = format!("{}={}", r.name, r.url).parse()?;
            if checked.iter().any(|c| c.name == r.name) {
                return Err(RegistryError::Duplicate(r.name));
            }
            checked.push(r);
        }
        let mut by_len: Vec<usize> = (0..checked.len()).collect();
        by_len.sort_by_key(|&i| std::cmp::Reverse(checked[i].url.len()));
        Ok(Registries {
            list: checked,
            by_len,
        })
    }

    pub(crate) fn list(&self) -> &[Registry] {
        &self.list
    }

    pub(crate) fn by_name(&self, name: &str) -> Option<usize> {
        self.list.iter().position(|r| r.name == name)
    }

    /// The registry an absolute URL lies in, and the rest of the URL after the registry's base
    /// (empty or starting with `/`, `?`). Scheme and host compare case-insensitively; a default port
    /// is the same as none.
    pub(crate) fn match_url(&self, url: &str) -> Option<(usize, String)> {
        let url = normalize_origin(url)?;
        self.by_len.iter().find_map(|&i| {
            let rest = url.strip_prefix(self.list[i].url.as_str())?;
            (rest.is_empty() || rest.starts_with(['/', '?'])).then(|| (i, rest.to_owned()))
        })
    }

    /// Registries whose host is `host` (for the hint in a refusal).
    pub(crate) fn on_host<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Registry> + 'a {
        self.list.iter().filter(move |r| {
            let rest = r.url.split_once("://").map_or("", |(_, rest)| rest);
            let authority = rest.split('/').next().unwrap_or("");
            let h = split_host_port(authority).map_or("", |(h, _)| h);
            h.eq_ignore_ascii_case(host)
        })
    }

    /// Replaces every registry URL in `body` by the mirror's URL for it (longest registry first, at
    /// a URL boundary only), in its plain form and in JSON's `\/`-escaped form.
    pub(crate) fn rewrite(&self, body: &[u8]) -> Vec<u8> {
        let forms: Vec<(Vec<u8>, Vec<u8>)> = self
            .by_len
            .iter()
            .flat_map(|&i| {
                let r = &self.list[i];
                let to = mirror_base(&r.name);
                [
                    (r.url.clone().into_bytes(), to.clone().into_bytes()),
                    (
                        r.url.replace('/', "\\/").into_bytes(),
                        to.replace('/', "\\/").into_bytes(),
                    ),
                ]
            })
            .collect();
        let mut out = Vec::with_capacity(body.len() + body.len() / 8);
        let mut i = 0;
        while i < body.len() {
            // Every registry URL starts with "http"; jump from one candidate to the next.
            let Some(off) = find(&body[i..], b"http") else {
                out.extend_from_slice(&body[i..]);
                break;
            };
            out.extend_from_slice(&body[i..i + off]);
            i += off;
            let hit = forms.iter().find(|(from, _)| {
                body[i..].starts_with(from) && at_boundary(body.get(i + from.len()).copied())
            });
            match hit {
                Some((from, to)) => {
                    out.extend_from_slice(to);
                    i += from.len();
                }
                None => {
                    out.extend_from_slice(b"http");
                    i += 4;
                }
            }
        }
        out
    }
}

/// The quoted places where index pages put links, before a root-relative path: HTML attributes
/// and the URL fields of PyPI's JSON simple API and npm's metadata.
const LINK_OPENERS: [&[u8]; 8] = [
    b"href=\"",
    b"href='",
    b"src=\"",
    b"src='",
    b"\"url\":\"",
    b"\"url\": \"",
    b"\"tarball\":\"",
    b"\"tarball\": \"",
];

impl Registries {
    /// Root-relative links (`href="/packages/…"`, as pypiserver writes them) in a page that
    /// registry `from` served: made absolute mirror URLs of that registry when they are under its
    /// path (`/debian/pool/x` of `http://host/debian` → `…/<name>/pool/x`), else left as they
    /// are (outside the registry, the mirror has nothing for them). Protocol-relative links
    /// (`//host/x`) are other origins, left alone.
    pub(crate) fn rewrite_root_relative(&self, from: usize, body: &[u8]) -> Vec<u8> {
        let r = &self.list[from];
        let base_path = r
            .url
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or("")
            .as_bytes();
        let to = mirror_base(&r.name).into_bytes();
        let mut out = Vec::with_capacity(body.len() + body.len() / 8);
        let mut i = 0;
        while i < body.len() {
            let opener = LINK_OPENERS.iter().find(|o| body[i..].starts_with(o));
            let Some(o) = opener else {
                out.push(body[i]);
                i += 1;
                continue;
            };
            out.extend_from_slice(o);
            i += o.len();
            let rest = &body[i..];
            let root_relative = rest.first() == Some(&b'/') && rest.get(1) != Some(&b'/');
            if root_relative
                && rest.starts_with(base_path)
                && matches!(
                    rest.get(base_path.len()),
                    None | Some(b'/' | b'"' | b'\'' | b'?' | b'#')
                )
            {
                out.extend_from_slice(&to);
                i += base_path.len();
            }
        }
        out
    }
}

/// After a matched registry URL: the URL must go on with a path, query or fragment or end here;
/// `https://pypi.org.example` or `https://pypi.org:8443` are other origins.
fn at_boundary(next: Option<u8>) -> bool {
    match next {
        None => true,
        Some(c) => {
            !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b':' | b'@' | b'%'))
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `scheme://host[:port]/path?query` with scheme and host lower-cased and a default port removed;
/// None when it is not an http(s) URL or has user info.
fn normalize_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return None;
    }
    let (host, port) = split_host_port(authority)?;
    let mut out = format!("{scheme}://{}", host.to_ascii_lowercase());
    if let Some(port) = port.filter(|p| *p != default_port) {
        out.push(':');
        out.push_str(port);
    }
    out.push_str(tail);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(s: &str) -> Result<Registry, RegistryError> {
        s.parse()
    }

    #[test]
    fn parses_and_normalises() {
        let r = reg("pypi=HTTPS://PyPI.org/simple/").unwrap();
        assert_eq!(r.name, "pypi");
        assert_eq!(r.url, "https://pypi.org/simple");
        assert_eq!(
            reg("a-1=http://10.0.0.1:8080").unwrap().url,
            "http://10.0.0.1:8080"
        );
        assert_eq!(reg("v6=http://[::1]:9/x").unwrap().url, "http://[::1]:9/x");
        assert_eq!(reg("x=http://h/a/b//").unwrap().url, "http://h/a/b");
        for r in default_registries() {
            assert_eq!(reg(&r.to_string()).unwrap(), r);
        }
    }

    #[test]
    fn rejects_what_is_wrong() {
        use RegistryError::*;
        type Variant = fn(String) -> RegistryError;
        let cases: &[(&str, Variant)] = &[
            ("pypi", MissingEquals),
            ("=http://h", BadName),
            ("-x=http://h", BadName),
            ("Pypi=http://h", BadName),
            ("a_b=http://h", BadName),
            (&format!("{}=http://h", "a".repeat(33)), BadName),
            ("x=ftp://h", BadScheme),
            ("x=h/path", BadScheme),
            ("x=http://u:p@h/", UserInfo),
            ("x=http://h/?q=1", QueryOrFragment),
            ("x=http://h/#f", QueryOrFragment),
            ("x=http://", BadHost),
            ("x=http://h_h", BadHost),
            ("x=http://-h", BadHost),
            ("x=http://[zz]:1", BadHost),
            ("x=http://h:0", BadPort),
            ("x=http://h:70000", BadPort),
            ("x=http://h:+80", BadPort),
            ("x=http://h:", BadPort),
            ("x=http://h/a/../b", BadPath),
            ("x=http://h/a b", BadPath),
            ("x=http://h/%2e%2e", BadPath),
        ];
        for (input, want) in cases {
            let err = reg(input).unwrap_err();
            let want = want(String::new());
            assert_eq!(
                std::mem::discriminant(&err),
                std::mem::discriminant(&want),
                "{input}: {err}"
            );
            assert!(
                err.to_string().starts_with("registry") || err.to_string().contains("NAME=URL")
            );
        }
        let dup = Registries::new(vec![reg("a=http://h").unwrap(), reg("a=http://i").unwrap()]);
        assert_eq!(dup.unwrap_err(), Duplicate("a".into()));
        let by_hand = Registries::new(vec![Registry {
            name: "a".into(),
            url: "http://h/../x".into(),
        }]);
        assert!(matches!(by_hand, Err(BadPath(_))));
    }

    #[test]
    fn matches_urls_longest_first() {
        let regs = Registries::new(vec![
            reg("d=http://deb.example/debian").unwrap(),
            reg("ds=http://deb.example/debian-security").unwrap(),
            reg("root=http://deb.example").unwrap(),
        ])
        .unwrap();
        let m = |u: &str| {
            regs.match_url(u)
                .map(|(i, rest)| (regs.list()[i].name.clone(), rest))
        };
        assert_eq!(
            m("http://deb.example/debian/pool/a.deb"),
            Some(("d".into(), "/pool/a.deb".into()))
        );
        assert_eq!(
            m("HTTP://Deb.Example:80/debian-security/x"),
            Some(("ds".into(), "/x".into()))
        );
        assert_eq!(
            m("http://deb.example/debianx/y"),
            Some(("root".into(), "/debianx/y".into()))
        );
        assert_eq!(m("http://deb.example:81/debian/"), None);
        assert_eq!(m("https://deb.example/debian/"), None);
        assert_eq!(m("http://user@deb.example/debian/"), None);
        assert_eq!(m("http://other.example/debian/"), None);
    }

    #[test]
    fn rewrites_root_relative_links_of_the_registry_that_served_them() {
        let regs = Registries::new(vec![
            reg("pypi=http://127.0.0.1:8080").unwrap(),
            reg("debian=http://deb.example/debian").unwrap(),
        ])
        .unwrap();
        let m = format!("http://{LISTEN_ADDR}");
        let page = br#"<a href="/packages/a.whl#sha256=1">a</a> <a href='/x'>x</a> <a href="//cdn.example/y">y</a> {"url": "/packages/b.whl"} <a href="rel/z">"#;
        let out = String::from_utf8(regs.rewrite_root_relative(0, page)).unwrap();
        assert_eq!(
            out,
            format!(
                r#"<a href="{m}/pypi/packages/a.whl#sha256=1">a</a> <a href='{m}/pypi/x'>x</a> <a href="//cdn.example/y">y</a> {{"url": "{m}/pypi/packages/b.whl"}} <a href="rel/z">"#
            )
        );
        let page = br#"<a href="/debian/pool/x.deb"> <a href="/debianx/y"> <a href="/other/z"> <a href="/debian">"#;
        let out = String::from_utf8(regs.rewrite_root_relative(1, page)).unwrap();
        assert_eq!(
            out,
            format!(
                r#"<a href="{m}/debian/pool/x.deb"> <a href="/debianx/y"> <a href="/other/z"> <a href="{m}/debian">"#
            )
        );
    }

    #[test]
    fn rewrites_at_url_boundaries() {
        let regs = Registries::new(vec![
            reg("pypi=https://pypi.org").unwrap(),
            reg("files=https://files.example").unwrap(),
            reg("simple=https://pypi.org/simple").unwrap(),
        ])
        .unwrap();
        let body = concat!(
            r#"<a href="https://files.example/p/a.whl#sha256=1">a</a> https://pypi.org/simple/x/"#,
            r#" https://pypi.org/other https://files.example.evil/x https://files.example:8443/x"#,
            r#" {"u":"https:\/\/files.example\/t.tgz"} https://files.example"#
        );
        let out = String::from_utf8(regs.rewrite(body.as_bytes())).unwrap();
        let m = format!("http://{LISTEN_ADDR}");
        let esc = m.replace('/', "\\/");
        let want = format!(
            concat!(
                r#"<a href="{m}/files/p/a.whl#sha256=1">a</a> {m}/simple/x/"#,
                r#" {m}/pypi/other https://files.example.evil/x https://files.example:8443/x"#,
                r#" {{"u":"{esc}\/files\/t.tgz"}} {m}/files"#
            ),
            m = m,
            esc = esc
        );
        assert_eq!(out, want);
    }
}
