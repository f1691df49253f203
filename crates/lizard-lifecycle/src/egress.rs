//! A sandbox's egress on the host (issue #19): its `network.egress` → [`lizard_egress::Rules`],
//! and the relay and DNS responder that enforce them (`lizard-egress`), served on listeners the
//! server makes in the sandbox's network namespace (`lizard_jail::network::egress_in_netns_of`,
//! which also installs the generic ruleset that redirects the sandbox's TCP and DNS to them).
//!
//! Connections leave from the server's own network namespace, as the server: the rules refuse
//! the host's own addresses, loopback, private networks and the metadata range unless an address
//! rule names them, and a name is resolved by the host (never taken from the sandbox) — see
//! `lizard_egress::relay`.
//!
//! Not here: whether the project may have egress (the API checks), when listeners are made and
//! dropped (`crate::sandboxes`).

use lizard_egress::{HostResolver, Limits, Resolve, Rules, SandboxPolicy};
use lizard_proto::Egress;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

/// A network request that cannot be honoured (an invalid request): the message names the entry,
/// never a secret's value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidNetwork(pub String);

/// Host-side name lookups of all sandboxes at once (each sandbox has its own, smaller, budget).
const HOST_LOOKUPS: usize = 64;

/// The rules of `egress`, `None` for no egress. A bad entry is an invalid request naming it.
pub fn rules(egress: &Egress) -> Result<Option<Rules>, InvalidNetwork> {
    match egress {
        Egress::None => Ok(None),
        Egress::All => Ok(Some(Rules::all())),
        Egress::Rules(r) => Rules::parse(r.effective_allow(), &r.deny)
            .map(Some)
            .map_err(|e| InvalidNetwork(format!("network.egress: {e}"))),
    }
}

/// The host's resolver with the operator's fixed names first (`lizard serve --egress-host
/// NAME=IP`: internal services, like `/etc/hosts` for sandboxes only).
struct Resolver {
    fixed: HashMap<String, Vec<Ipv4Addr>>,
    host: HostResolver,
}

impl Resolve for Resolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        match self.fixed.get(name) {
            Some(a) => {
                let a = a.clone();
                Box::pin(async move { Ok(a) })
            }
            None => self.host.resolve(name),
        }
    }

    fn resolve_holding<'a>(
        &'a self,
        name: &'a str,
        held: tokio::sync::OwnedSemaphorePermit,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<Ipv4Addr>>> + Send + 'a>> {
        match self.fixed.get(name) {
            Some(_) => self.resolve(name),
            None => self.host.resolve_holding(name, held),
        }
    }
}

/// What every sandbox's egress shares: the resolver, the host's own networks, the limits, the
/// TLS client for upstreams of injected requests.
pub struct EgressService {
    resolver: Arc<dyn Resolve>,
    host_nets: Vec<(Ipv4Addr, u8)>,
    limits: Limits,
    upstream_tls: Arc<rustls::ClientConfig>,
    /// The host's own roots as PEM (for a sandbox's bundle).
    host_roots_pem: Arc<str>,
}

impl std::fmt::Debug for EgressService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressService")
            .field("host_nets", &self.host_nets)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl EgressService {
    /// `fixed`: names the operator resolves for sandboxes (normalised: lower case, no trailing
    /// dot). The host's own networks are read now (`host_addresses`).
    pub fn new(fixed: HashMap<String, Vec<Ipv4Addr>>) -> EgressService {
        Self::with_roots(fixed, Vec::new())
    }

    /// [`EgressService::new`] whose injected requests also trust `extra_roots` upstream (`lizard
    /// serve --egress-ca`: an internal CA), besides Mozilla's roots and the host's store.
    pub fn with_roots(
        fixed: HashMap<String, Vec<Ipv4Addr>>,
        extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> EgressService {
        let mut host_nets = Vec::new();
        for (ip, prefix) in lizard_jail::network::host_addresses() {
            host_nets.push((ip, 32));
            // A /0-/7 "subnet" is no LAN: refusing it would refuse the internet.
            if (SHORTEST_HOST_SUBNET..32).contains(&prefix) {
                host_nets.push((ip, prefix));
            }
        }
        let native = rustls_native_certs::load_native_certs();
        let host_roots_pem: String = native.certs.iter().map(|c| pem("CERTIFICATE", c)).collect();
        EgressService {
            resolver: Arc::new(Resolver {
                fixed,
                host: HostResolver::new(HOST_LOOKUPS),
            }),
            host_nets,
            limits: Limits::default(),
            upstream_tls: Arc::new(upstream_tls(extra_roots)),
            host_roots_pem: host_roots_pem.into(),
        }
    }

    /// The host's roots (its system store) as PEM: what a sandbox's bundle starts with.
    pub fn host_roots_pem(&self) -> Arc<str> {
        self.host_roots_pem.clone()
    }

    /// The injection of a sandbox: `rules` (values substituted), its `ca`, and `on_use` told of
    /// every request that got a secret.
    pub fn injection(
        &self,
        rules: Vec<lizard_egress::inject::InjectRule>,
        ca: Arc<lizard_egress::inject::SandboxCa>,
        on_use: Arc<dyn Fn(lizard_egress::inject::InjectUse) + Send + Sync>,
    ) -> lizard_egress::inject::Injection {
        lizard_egress::inject::Injection {
            rules,
            ca,
            upstream_tls: self.upstream_tls.clone(),
            on_use,
        }
    }

    /// Serve `sockets` (made in one sandbox's namespace) under `rules`, until the handle drops.
    /// Needs a tokio runtime.
    pub fn serve(
        &self,
        sockets: lizard_jail::network::EgressSockets,
        rules: Rules,
    ) -> io::Result<EgressHandle> {
        let relay = tokio::net::TcpListener::from_std(sockets.relay)?;
        let dns_udp = tokio::net::UdpSocket::from_std(sockets.dns_udp)?;
        let dns_tcp = tokio::net::TcpListener::from_std(sockets.dns_tcp)?;
        let policy = Arc::new(SandboxPolicy::new(
            rules,
            self.limits,
            self.host_nets.clone(),
        ));
        let r = &self.resolver;
        let tasks = vec![
            tokio::spawn(lizard_egress::serve(relay, policy.clone(), r.clone())).abort_handle(),
            tokio::spawn(lizard_egress::dns::serve_udp(
                dns_udp,
                policy.clone(),
                r.clone(),
            ))
            .abort_handle(),
            tokio::spawn(lizard_egress::dns::serve_tcp(
                dns_tcp,
                policy.clone(),
                r.clone(),
            ))
            .abort_handle(),
        ];
        Ok(EgressHandle { policy, tasks })
    }
}

/// A host interface's subnet shorter than this counts as its address alone.
const SHORTEST_HOST_SUBNET: u8 = 8;

/// The package mirror's roots (Mozilla's and the host's store) and `extra`: whom the proxy trusts
/// upstream.
fn upstream_tls(extra: Vec<rustls::pki_types::CertificateDer<'static>>) -> rustls::ClientConfig {
    let mut roots = lizard_packages::root_certificates();
    roots.add_parsable_certificates(extra);
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// `der` as a PEM block of `label`.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Most `network.inject` rules, and headers per rule.
pub const MAX_INJECT: usize = 16;

/// The file in a sandbox's (root-only) directory that keeps its CA (certificate and key), so
/// that its trust outlives a wake, a restart of the server and, copied, a clone.
pub const CA_FILE: &str = "egress-ca.json";

/// Where a sandbox finds its trust: the system bundle (the template's with the sandbox's CA
/// appended, written at its first launch) and the CA alone (for `NODE_EXTRA_CA_CERTS`).
pub const BUNDLE_PATH: &str = "/etc/lizard/ca-bundle.pem";
pub const CA_PATH: &str = "/etc/lizard/egress-ca.pem";
/// The directory of both, and their names in it (what the host writes in a fresh layer).
pub const TRUST_DIR: &str = "etc/lizard";
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
pub const CA_CERT_FILE: &str = "egress-ca.pem";

/// The environment that points a sandbox's TLS clients at [`BUNDLE_PATH`] (OpenSSL and Python's
/// `ssl`, `requests`, curl) and adds [`CA_PATH`] to Node's roots. The template's and the user's
/// own settings win.
pub fn trust_env() -> [(&'static str, &'static str); 4] {
    [
        ("SSL_CERT_FILE", BUNDLE_PATH),
        ("REQUESTS_CA_BUNDLE", BUNDLE_PATH),
        ("CURL_CA_BUNDLE", BUNDLE_PATH),
        ("NODE_EXTRA_CA_CERTS", CA_PATH),
    ]
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CaFile {
    cert_pem: String,
    key_pem: String,
}

/// The CA of the sandbox whose directory is `dir` (root's, 0700): read from [`CA_FILE`], or made
/// and kept there (mode 0600, never through an existing entry). Blocking.
pub fn load_or_make_ca(
    dir: &Path,
    sandbox_id: &str,
) -> Result<lizard_egress::inject::SandboxCa, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(CA_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() && m.len() < 64 * 1024 => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let f: CaFile =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            return lizard_egress::inject::SandboxCa::from_pem(&f.cert_pem, &f.key_pem)
                .map_err(|e| e.to_string());
        }
        Ok(_) => return Err(format!("{}: not a small regular file", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let ca = lizard_egress::inject::SandboxCa::generate(sandbox_id).map_err(|e| e.to_string())?;
    let text = serde_json::to_vec(&CaFile {
        cert_pem: ca.cert_pem(),
        key_pem: ca.key_pem(),
    })
    .map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(&text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ca)
}

/// The injection rules of `inject` for a sandbox of `project` whose egress is `rules`: hosts
/// checked (names, allowed by `rules`), `${secret:NAME}` replaced by the project's secrets
/// (opened with `secrets`). A bad rule, an unknown secret or a host the egress does not allow is
/// an invalid request naming it — never the value.
pub fn inject_rules(
    inject: &[lizard_proto::InjectRequest],
    rules: &Rules,
    project: &str,
    store: &crate::store::Store,
    secrets: &crate::secrets::SecretBox,
) -> Result<Vec<lizard_egress::inject::InjectRule>, InvalidNetwork> {
    use lizard_egress::inject::{InjectHeader, InjectRule, SecretValue};
    let invalid = |m: String| InvalidNetwork(format!("network.inject: {m}"));
    if inject.len() > MAX_INJECT {
        return Err(invalid(format!("at most {MAX_INJECT} rules")));
    }
    let mut out = Vec::new();
    for r in inject {
        let shown: String = r.host.chars().take(80).collect();
        let (host, port) = match r.host.rsplit_once(':') {
            Some((h, p)) => (
                h,
                Some(
                    p.parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| invalid(format!("{shown:?}: bad port")))?,
                ),
            ),
            // Without a port: HTTPS only, so that a secret never goes out in clear unless a
            // rule names the plain port.
            None => (r.host.as_str(), Some(443)),
        };
        let bare = host.strip_prefix("*.").unwrap_or(host);
        let name = lizard_egress::rules::normalize_name(bare)
            .map_err(|why| invalid(format!("{shown:?}: not a host name: {why}")))?;
        // A name below a wildcard stands for the wildcard when asking the rules.
        let probe = if host.starts_with("*.") {
            format!("lizard-inject-probe.{name}")
        } else {
            name.clone()
        };
        if let lizard_egress::Decision::Deny(why) = rules.decide_name(&probe, port) {
            return Err(invalid(format!(
                "{shown:?} is not allowed by network.egress ({why})"
            )));
        }
        if r.headers.is_empty() || r.headers.len() > MAX_INJECT {
            return Err(invalid(format!("{shown:?}: 1-{MAX_INJECT} headers")));
        }
        let mut headers = Vec::new();
        for (hname, template) in &r.headers {
            let (value, used) = substitute(template, |secret| {
                let sealed = store
                    .sealed_secret(project, secret)
                    .map_err(|e| invalid(format!("reading secret {secret:?}: {e}")))?
                    .ok_or_else(|| {
                        invalid(format!("no secret {secret:?} in project {project:?}"))
                    })?;
                secrets
                    .open_value(project, secret, &sealed)
                    .map_err(|e| invalid(format!("secret {secret:?}: {e}")))
            })
            .map_err(|e| match e {
                Subst::Syntax(why) => invalid(format!("header {hname:?}: {why}")),
                Subst::Lookup(e) => e,
            })?;
            headers.push(InjectHeader {
                name: hname.clone(),
                value: SecretValue::new(value),
                secrets: used,
            });
        }
        let rule = InjectRule {
            host: if host.starts_with("*.") {
                format!("*.{name}")
            } else {
                name
            },
            port,
            headers,
        };
        rule.check().map_err(|e| invalid(e.to_string()))?;
        out.push(rule);
    }
    Ok(out)
}

enum Subst<E> {
    Syntax(&'static str),
    Lookup(E),
}

/// `template` with each `${secret:NAME}` replaced by `lookup(NAME)`, and the names used (sorted,
/// once each). `$$` is a literal `$`.
fn substitute<E>(
    template: &str,
    mut lookup: impl FnMut(&str) -> Result<String, E>,
) -> Result<(String, Vec<String>), Subst<E>> {
    let (mut out, mut used) = (String::new(), Vec::new());
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
            continue;
        }
        let Some(r) = rest.strip_prefix("${secret:") else {
            return Err(Subst::Syntax(
                "a '$' must start ${secret:NAME} (or be written $$)",
            ));
        };
        let end = r.find('}').ok_or(Subst::Syntax("unclosed ${secret:"))?;
        let name = &r[..end];
        if !crate::secrets::valid_name(name) {
            return Err(Subst::Syntax("bad secret name in ${secret:NAME}"));
        }
        out.push_str(&lookup(name).map_err(Subst::Lookup)?);
        if !used.iter().any(|u| u == name) {
            used.push(name.to_string());
        }
        rest = &r[end + 1..];
    }
    out.push_str(rest);
    used.sort();
    Ok((out, used))
}

/// One sandbox's egress being served: dropping it closes its listeners (connections being relayed
/// end with their tasks' next step; see `lizard_egress::relay`).
pub struct EgressHandle {
    policy: Arc<SandboxPolicy>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl EgressHandle {
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }
}

impl Drop for EgressHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lizard_proto::EgressRules;

    #[test]
    fn secrets_are_substituted_into_templates() {
        let look = |n: &str| -> Result<String, ()> {
            match n {
                "a" => Ok("AAA".into()),
                "b" => Ok("B".into()),
                _ => Err(()),
            }
        };
        let (v, used) = substitute("Bearer ${secret:b}-${secret:a}$$${secret:a}", look)
            .ok()
            .unwrap();
        assert_eq!(v, "Bearer B-AAA$AAA");
        assert_eq!(used, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(
            substitute("plain", look).ok().unwrap(),
            ("plain".into(), vec![])
        );
        for bad in ["$x", "${secret:a", "${secret:a b}", "${env:a}"] {
            assert!(
                matches!(substitute(bad, look), Err(Subst::Syntax(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            substitute("${secret:zz}", look),
            Err(Subst::Lookup(()))
        ));
    }

    #[test]
    fn egress_shapes_become_rules() {
        assert_eq!(rules(&Egress::None).unwrap(), None);
        assert_eq!(rules(&Egress::All).unwrap(), Some(Rules::all()));
        let r = rules(&Egress::Rules(EgressRules::allow(["*.example.com:443"])))
            .unwrap()
            .unwrap();
        assert!(r
            .decide(Some("api.example.com"), Ipv4Addr::new(203, 0, 113, 5), 443)
            .is_allow());
        assert!(!r
            .decide(Some("example.org"), Ipv4Addr::new(203, 0, 113, 5), 443)
            .is_allow());
        // Only deny: everything public but what it names.
        let r = rules(&Egress::Rules(EgressRules {
            allow: None,
            deny: vec!["evil.example".into()],
        }))
        .unwrap()
        .unwrap();
        assert!(r
            .decide(Some("good.example"), Ipv4Addr::new(203, 0, 113, 5), 443)
            .is_allow());
        assert!(!r
            .decide(Some("evil.example"), Ipv4Addr::new(203, 0, 113, 5), 443)
            .is_allow());
        // A bad entry names itself.
        let e = rules(&Egress::Rules(EgressRules::allow(["a b.com"]))).unwrap_err();
        assert!(
            matches!(&e, InvalidNetwork(m) if m.contains("a b.com")),
            "{e}"
        );
    }
}
