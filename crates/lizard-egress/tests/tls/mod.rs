//! TLS for the egress tests: a throwaway PKI (a CA and a server certificate for some names),
//! client configurations trusting it, and a real ClientHello. Shared by the integration tests
//! and, through `#[path]`, by `src/peek.rs`'s unit tests.

#![allow(dead_code)] // each user takes a part

use std::sync::Arc;

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA of its own and a server configuration whose certificate it signed.
pub struct Pki {
    pub ca: rustls::pki_types::CertificateDer<'static>,
    pub server: Arc<rustls::ServerConfig>,
}

/// A fresh CA and a server certificate for `names`.
pub fn pki(names: &[&str]) -> Pki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    Pki {
        ca: ca.der().clone(),
        server: Arc::new(server),
    }
}

/// A client configuration trusting `roots` only.
pub fn client_config(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A client configuration trusting the CA `root` only.
pub fn trusting(root: rustls::pki_types::CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    client_config(roots)
}

/// A real ClientHello for `name`, as rustls's client writes it.
pub fn client_hello(name: &str) -> Vec<u8> {
    let cfg = client_config(rustls::RootCertStore::empty());
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(cfg, server).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}
