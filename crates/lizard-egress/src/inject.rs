//! Secrets that never enter the sandbox (issue #19 part 3): for the hosts an [`Injection`] names,
//! the relay does not pass bytes through but proxies HTTP itself, setting the rule's headers
//! (`Authorization: Bearer …`) on each request on the way out. The sandbox only ever holds a
//! placeholder; the value lives on the host.
//!
//! For HTTPS that means terminating the sandbox's TLS: the proxy presents a leaf certificate for
//! the name, signed by the sandbox's own CA ([`SandboxCa`], whose certificate the sandbox trusts
//! and whose key stays on the host), and opens its own TLS connection to the upstream, verified
//! against the operator's roots ([`Injection::upstream_tls`]) with the name as SNI. Plain HTTP is
//! proxied the same way without TLS on either side (the secret then crosses the network in
//! clear: a rule meant for HTTPS only names the port, `Some(443)`).
//!
//! What holds against a hostile sandbox:
//! - each request on a kept-alive connection is checked again: its `Host` (and an absolute URI's
//!   authority) must be the connection's name, or it gets 421 and is not forwarded — so a secret
//!   for one name is never sent in a request the upstream reads as another's;
//! - hyper parses both sides (no hand-written HTTP here); the request head is bounded by
//!   [`Limits::peek_bytes`](crate::Limits), the TLS handshake by `peek_deadline`, a connection on
//!   which nothing moves (idle keep-alive, a stalled body) by `idle`; bodies are streamed, never
//!   buffered whole; a malformed request gets hyper's 400/431, never a panic;
//! - the secret's value is in no log line, no error and no `Debug` output ([`SecretValue`]), and
//!   its header is marked sensitive for hyper;
//! - HTTP/1.1 only (ALPN `http/1.1` on both sides): hyper's HTTP/2 would need an executor and a
//!   second code path for what is, for API keys, the same requests.

use crate::rules::normalize_name;
use hyper::header::{HeaderName, HeaderValue};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Leaf certificates (one per name) a [`SandboxCa`] keeps; the oldest goes. Names come from the
/// injection rules, but a `*.suffix` rule lets the sandbox choose any name below the suffix.
pub const MAX_LEAVES: usize = 64;
/// A leaf is valid this long from its making…
const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);
/// …and made again after this long in the cache, well before it expires.
const LEAF_RENEW: Duration = Duration::from_secs(24 * 3600);

/// Why a CA, a leaf or a rule could not be made. Never carries a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    #[error("the sandbox CA: {0}")]
    Ca(String),
    #[error("the sandbox CA's certificate and key do not belong together")]
    KeyMismatch,
    #[error("a leaf certificate for {name}: {why}")]
    Leaf { name: String, why: String },
    #[error("injection rule for {host:?}: not a host name: {why}")]
    Host { host: String, why: &'static str },
    #[error("injected header {name:?}: {why}")]
    Header { name: String, why: &'static str },
}

/// A header value with the secrets already substituted. Its `Debug` is `<redacted>` and it has
/// no `Display`: the value is read only where it is put into a request ([`SecretValue::expose`]).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: impl Into<String>) -> SecretValue {
        SecretValue(value.into())
    }

    /// The value itself: for the request, never for a log.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One header a rule sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectHeader {
    pub name: String,
    pub value: SecretValue,
    /// The names of the secrets used in `value`, for the audit ([`InjectUse::secrets`]).
    pub secrets: Vec<String>,
}

/// One rule: requests to `host` (an exact name, or `*.suffix` meaning any name below the suffix,
/// not the suffix itself — as in [`crate::rules`]), optionally only on `port`, get `headers` set,
/// replacing any the sandbox sent with the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectRule {
    pub host: String,
    pub port: Option<u16>,
    pub headers: Vec<InjectHeader>,
}

/// Headers a rule may not set: they decide where a request goes or how it is framed, which the
/// proxy has checked or hyper handles.
const RESERVED: [&str; 8] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
];

impl InjectRule {
    /// Whether the host, the header names and the values can be used (the API's check at
    /// creation; a rule that fails it is refused at use too, with 500 and the request not sent).
    pub fn check(&self) -> Result<(), InjectError> {
        let bare = self.host.strip_prefix("*.").unwrap_or(&self.host);
        normalize_name(bare).map_err(|why| InjectError::Host {
            host: self.host.chars().take(80).collect(),
            why,
        })?;
        for h in &self.headers {
            header_of(h)?;
        }
        Ok(())
    }

    fn matches(&self, name: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = self.host.strip_suffix('.').unwrap_or(&self.host);
        match host.strip_prefix("*.") {
            Some(s) => {
                name.len() > s.len() + 1
                    && name.as_bytes()[name.len() - s.len() - 1] == b'.'
                    && name[name.len() - s.len()..].eq_ignore_ascii_case(s)
            }
            None => name.eq_ignore_ascii_case(host),
        }
    }
}

pub(crate) fn header_of(h: &InjectHeader) -> Result<(HeaderName, HeaderValue), InjectError> {
    let bad = |why| InjectError::Header {
        name: h.name.chars().take(80).collect(),
        why,
    };
    let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad("not a header name"))?;
    if RESERVED.contains(&name.as_str()) {
        return Err(bad("the proxy sets this header itself"));
    }
    let mut value = HeaderValue::from_str(h.value.expose())
        .map_err(|_| bad("the value has characters a header may not carry (not shown)"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// One request that got a secret, for the server's audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectUse {
    /// The connection's name (the request's Host).
    pub host: String,
    pub method: String,
    /// The path without the query (which may carry the sandbox's own data).
    pub path: String,
    /// The secrets' names, sorted, each once.
    pub secrets: Vec<String>,
}

/// A sandbox's injection: its rules, its CA, how the proxy connects upstream, and whom it tells of
/// each use. Replaced live with [`SandboxPolicy::set_injection`](crate::policy::SandboxPolicy::set_injection); each request uses the one in
/// force when it arrives (a connection keeps the leaf it was served).
pub struct Injection {
    pub rules: Vec<InjectRule>,
    pub ca: Arc<SandboxCa>,
    /// The proxy's TLS client for upstreams (the server's: webpki and native roots, and the
    /// operator's extras). Its ALPN is replaced by `http/1.1`.
    pub upstream_tls: Arc<rustls::ClientConfig>,
    /// Called once per request that got a secret header, before it is sent.
    pub on_use: Arc<dyn Fn(InjectUse) + Send + Sync>,
}

impl Injection {
    /// The first rule for `name` (normalised, as the relay has it) on `port`.
    pub fn rule_for(&self, name: &str, port: u16) -> Option<&InjectRule> {
        self.rules.iter().find(|r| r.matches(name, port))
    }

    /// [`InjectRule::check`] for every rule.
    pub fn check(&self) -> Result<(), InjectError> {
        self.rules.iter().try_for_each(InjectRule::check)
    }
}

impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("rules", &self.rules)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

struct Leaf {
    made: Instant,
    config: Arc<rustls::ServerConfig>,
}

/// A sandbox's own CA: signs leaf certificates for the hosts whose requests get secrets. The
/// sandbox trusts its certificate; its key stays on the host (the server persists both, so the
/// sandbox's trust survives a restart of the server).
pub struct SandboxCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    key_pem: String,
    leaves: Mutex<HashMap<String, Leaf>>,
}

impl fmt::Debug for SandboxCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner()).len();
        f.debug_struct("SandboxCa")
            .field("leaves", &leaves)
            .finish_non_exhaustive()
    }
}

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

impl SandboxCa {
    /// A new CA (ECDSA P-256) named `Lizard sandbox <id> CA`, valid for ten years; it may sign
    /// leaves only (path length 0).
    pub fn generate(sandbox_id: &str) -> Result<SandboxCa, InjectError> {
        let ca = |e: rcgen::Error| InjectError::Ca(e.to_string());
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(ca)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("Lizard sandbox {sandbox_id} CA"),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let t = now();
        params.not_before = t - time::Duration::days(1);
        params.not_after = t + time::Duration::days(3650);
        let cert = params.self_signed(&key).map_err(ca)?;
        Ok(SandboxCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA as [`SandboxCa::cert_pem`] and [`SandboxCa::key_pem`] gave it (the key must be the
    /// certificate's).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<SandboxCa, InjectError> {
        let ca = |e: rcgen::Error| InjectError::Ca(e.to_string());
        let key = KeyPair::from_pem(key_pem).map_err(ca)?;
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| InjectError::Ca(format!("the certificate: {e}")))?;
        // The certificate carries its public key as this very SubjectPublicKeyInfo.
        let spki = key.subject_public_key_info();
        if !der.windows(spki.len()).any(|w| w == spki.as_slice()) {
            return Err(InjectError::KeyMismatch);
        }
        Ok(SandboxCa {
            issuer: Issuer::from_ca_cert_der(&der, key).map_err(ca)?,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The certificate the sandbox trusts.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// The key: the server keeps it host-side only.
    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// The TLS server configuration presenting a leaf for `name` (made on first use, kept in a
    /// cache of [`MAX_LEAVES`], made again after a day).
    pub fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, InjectError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = leaves.get(name) {
            if l.made.elapsed() < LEAF_RENEW {
                return Ok(l.config.clone());
            }
        }
        let config = self.make_leaf(name)?;
        if leaves.len() >= MAX_LEAVES && !leaves.contains_key(name) {
            let oldest = leaves
                .iter()
                .min_by_key(|(_, l)| l.made)
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                leaves.remove(&n);
            }
        }
        leaves.insert(
            name.to_string(),
            Leaf {
                made: Instant::now(),
                config: config.clone(),
            },
        );
        Ok(config)
    }

    fn make_leaf(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, InjectError> {
        let leaf = |why: String| InjectError::Leaf {
            name: name.chars().take(253).collect(),
            why,
        };
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| leaf(e.to_string()))?;
        let mut params =
            CertificateParams::new(vec![name.to_string()]).map_err(|e| leaf(e.to_string()))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let t = now();
        params.not_before = t - time::Duration::hours(1);
        params.not_after = t + LEAF_VALIDITY;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| leaf(e.to_string()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(ring())
            .with_safe_default_protocol_versions()
            .map_err(|e| leaf(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| leaf(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::SandboxPolicy;
    use rustls::pki_types::ServerName;

    fn header(name: &str, value: &str) -> InjectHeader {
        InjectHeader {
            name: name.into(),
            value: SecretValue::new(value),
            secrets: vec!["example".into()],
        }
    }

    fn rule(host: &str, port: Option<u16>) -> InjectRule {
        InjectRule {
            host: host.into(),
            port,
            headers: vec![header("Authorization", "Bearer s3cret")],
        }
    }

    #[test]
    fn the_secret_is_in_no_debug_output_and_no_error() {
        let ca = Arc::new(SandboxCa::generate("sb1").unwrap());
        let inj = Injection {
            rules: vec![rule("api.example.test", None)],
            ca: ca.clone(),
            upstream_tls: Arc::new(
                rustls::ClientConfig::builder_with_provider(ring())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
            on_use: Arc::new(|_| {}),
        };
        let shown = format!("{inj:?} {:?} {:#?}", inj.rules[0], inj.rules[0].headers[0]);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        // A value a header may not carry: the error names the header, not the value.
        let bad = InjectRule {
            headers: vec![header("X-Key", "s3cret\nInjected: yes")],
            ..rule("api.example.test", None)
        };
        let e = bad.check().unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(
            shown.contains("X-Key") && !shown.contains("s3cret"),
            "{shown}"
        );
        let policy = SandboxPolicy::new(Default::default(), Default::default(), vec![]);
        policy.set_injection(Some(Arc::new(inj)));
        let shown = format!("{policy:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn rules_match_names_ports_and_are_checked() {
        let inj_rules = [
            rule("api.example.test", Some(443)),
            rule("*.wild.test", None),
        ];
        let m = |n: &str, p| inj_rules.iter().position(|r| r.matches(n, p));
        assert_eq!(m("api.example.test", 443), Some(0));
        assert_eq!(m("api.example.test", 80), None);
        assert_eq!(m("a.b.wild.test", 80), Some(1));
        assert_eq!(m("wild.test", 80), None);
        assert_eq!(m("xwild.test", 80), None);
        assert_eq!(m("API.Example.test", 443), Some(0));
        assert!(inj_rules.iter().all(|r| r.check().is_ok()));
        for (name, why) in [
            ("Host", "itself"),
            ("Content-Length", "itself"),
            ("a b", "name"),
        ] {
            let r = InjectRule {
                headers: vec![header(name, "v")],
                ..rule("a.test", None)
            };
            assert!(r.check().unwrap_err().to_string().contains(why), "{name}");
        }
        assert!(rule("*.*.test", None).check().is_err());
        assert!(rule("1.2.3.4", None).check().is_err());
    }

    #[test]
    fn the_ca_round_trips_and_a_foreign_key_is_refused() {
        let ca = SandboxCa::generate("sb-7").unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let again = SandboxCa::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        let other = SandboxCa::generate("sb-8").unwrap();
        assert_eq!(
            SandboxCa::from_pem(&ca.cert_pem(), &other.key_pem()).unwrap_err(),
            InjectError::KeyMismatch
        );
        assert!(SandboxCa::from_pem("junk", &ca.key_pem()).is_err());
    }

    async fn handshake(
        server: Arc<rustls::ServerConfig>,
        root_pem: &str,
        sni: &str,
    ) -> Result<(), String> {
        let der = CertificateDer::from_pem_slice(root_pem.as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(ring())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let srv = tokio::spawn(async move {
            let _ = tokio_rustls::TlsAcceptor::from(server).accept(b).await;
        });
        let r = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from(sni.to_string()).unwrap(), a)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        srv.abort();
        r
    }

    /// The leaf verifies against the sandbox's CA for its name only, and not against another
    /// sandbox's CA; leaves are cached, bounded.
    #[tokio::test]
    async fn leaves_verify_for_their_name_only_and_are_cached_bounded() {
        let ca = SandboxCa::generate("sb1").unwrap();
        let cfg = ca.server_config("api.example.test").unwrap();
        assert!(Arc::ptr_eq(
            &cfg,
            &ca.server_config("api.example.test").unwrap()
        ));
        handshake(cfg.clone(), &ca.cert_pem(), "api.example.test")
            .await
            .unwrap();
        let e = handshake(cfg.clone(), &ca.cert_pem(), "other.example.test")
            .await
            .unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        let other = SandboxCa::generate("sb2").unwrap();
        let e = handshake(cfg, &other.cert_pem(), "api.example.test")
            .await
            .unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        for i in 0..MAX_LEAVES + 5 {
            ca.server_config(&format!("n{i}.wild.test")).unwrap();
        }
        assert_eq!(ca.leaves.lock().unwrap().len(), MAX_LEAVES);
    }
}
