//! The first bytes of a sandbox's connection, read (not `MSG_PEEK`ed: they are replayed upstream)
//! until they tell what the connection is for: a TLS ClientHello's server name (parsed by rustls's
//! `Acceptor`), an HTTP/1 request's `Host` (parsed by `httparse`), or nothing (opaque). Bounded by
//! a size and a deadline, both the caller's; a connection that says nothing in time (a protocol
//! where the server speaks first) is opaque, with the bytes read so far.

use std::io;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    /// A complete TLS ClientHello; `sni` is its server name if it has one (a DNS name: rustls
    /// ignores an IP address there).
    Tls { sni: Option<String> },
    /// A complete HTTP/1 request head; `host` is its `Host` without the port.
    Http { host: Option<String> },
    /// A request that names its destination ambiguously (two `Host` headers, a `Host` that is
    /// not UTF-8): refused, since the upstream might read another name than the proxy.
    Ambiguous(&'static str),
    /// Anything else, or not complete within the limits.
    Opaque,
}

/// The outcome of [`peek`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub protocol: Protocol,
    /// Everything read, to be written upstream first.
    pub bytes: Vec<u8>,
}

impl Peeked {
    /// The name the client gave (SNI or Host), if any.
    pub fn name(&self) -> Option<&str> {
        match &self.protocol {
            Protocol::Tls { sni } => sni.as_deref(),
            Protocol::Http { host } => host.as_deref(),
            _ => None,
        }
    }
}

enum Verdict {
    Done(Protocol),
    More,
}

/// Tracks the parse across reads: the TLS `Acceptor` gets only the new bytes each time; the HTTP
/// head is parsed again only when a new line ended (so a client trickling bytes costs one parse
/// per line, and httparse stops at 64 headers), or while the head is short (to tell garbage at
/// once).
struct Classifier {
    tls: Option<rustls::server::Acceptor>,
    fed: usize,
}

impl Classifier {
    fn new() -> Self {
        Classifier { tls: None, fed: 0 }
    }

    fn classify(&mut self, buf: &[u8]) -> Verdict {
        if buf.is_empty() {
            return Verdict::More;
        }
        // 0x16: a TLS handshake record.
        if buf[0] == 0x16 {
            let acceptor = self.tls.get_or_insert_with(Default::default);
            let mut new = &buf[self.fed..];
            while !new.is_empty() {
                match acceptor.read_tls(&mut new) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(_) => return Verdict::Done(Protocol::Opaque),
                }
            }
            self.fed = buf.len();
            return match acceptor.accept() {
                Ok(Some(accepted)) => Verdict::Done(Protocol::Tls {
                    sni: accepted.client_hello().server_name().map(str::to_owned),
                }),
                Ok(None) => Verdict::More,
                Err(_) => Verdict::Done(Protocol::Opaque),
            };
        }
        let new = &buf[self.fed..];
        let first = self.fed == 0;
        self.fed = buf.len();
        if !first && buf.len() > 64 && !new.contains(&b'\n') {
            return Verdict::More;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(_)) => {
                let mut hosts = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("host"));
                let host = match (hosts.next(), hosts.next()) {
                    (None, _) => None,
                    (Some(_), Some(_)) => {
                        return Verdict::Done(Protocol::Ambiguous("several Host headers"))
                    }
                    (Some(h), None) => match std::str::from_utf8(h.value) {
                        Ok(v) => Some(strip_port(v.trim()).to_string()),
                        Err(_) => {
                            return Verdict::Done(Protocol::Ambiguous("a Host that is not UTF-8"))
                        }
                    },
                };
                Verdict::Done(Protocol::Http { host })
            }
            Ok(httparse::Status::Partial) => Verdict::More,
            Err(_) => Verdict::Done(Protocol::Opaque),
        }
    }
}

/// `host:port` → `host` (an IPv6 literal `[..]` is left whole: no name, refused as one).
pub(crate) fn strip_port(v: &str) -> &str {
    if v.starts_with('[') {
        return v;
    }
    match v.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => v,
    }
}

/// Read from `conn` until its first bytes classify, at most `max` bytes and until `deadline`.
/// Errors are the connection's (reset); end of stream or the limits give what was read so far.
pub async fn peek<S: AsyncRead + Unpin>(
    conn: &mut S,
    max: usize,
    deadline: Instant,
) -> io::Result<Peeked> {
    let mut bytes = Vec::with_capacity(max.min(4096));
    let mut c = Classifier::new();
    let mut chunk = vec![0u8; max.min(16 * 1024)];
    loop {
        if bytes.len() >= max {
            return Ok(Peeked {
                protocol: Protocol::Opaque,
                bytes,
            });
        }
        let room = (max - bytes.len()).min(chunk.len());
        let n = match tokio::time::timeout_at(deadline, conn.read(&mut chunk[..room])).await {
            Err(_) => 0,
            Ok(r) => r?,
        };
        if n == 0 {
            // End of stream or deadline.
            return Ok(Peeked {
                protocol: Protocol::Opaque,
                bytes,
            });
        }
        bytes.extend_from_slice(&chunk[..n]);
        if let Verdict::Done(protocol) = c.classify(&bytes) {
            return Ok(Peeked { protocol, bytes });
        }
    }
}

#[cfg(test)]
#[path = "../tests/tls/mod.rs"]
mod tls;

#[cfg(test)]
mod tests {
    use super::tls::client_hello;
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    async fn peek_bytes(chunks: Vec<Vec<u8>>, max: usize) -> Peeked {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            for c in chunks {
                a.write_all(&c).await.unwrap();
                a.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
            // Keep the stream open until the reader is done (no end of stream).
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let p = peek(&mut b, max, Instant::now() + Duration::from_secs(10))
            .await
            .unwrap();
        writer.abort();
        p
    }

    #[tokio::test]
    async fn tls_sni_even_in_pieces() {
        let hello = client_hello("api.Example.com");
        let whole = peek_bytes(vec![hello.clone()], 16384).await;
        assert_eq!(
            whole.protocol,
            Protocol::Tls {
                sni: Some("api.example.com".into())
            }
        );
        assert_eq!(whole.bytes, hello);
        let pieces: Vec<Vec<u8>> = hello.chunks(7).map(|c| c.to_vec()).collect();
        let split = peek_bytes(pieces, 16384).await;
        assert_eq!(split.protocol, whole.protocol);
        assert_eq!(split.bytes, hello);
        // An IP address as the server name: rustls sends no SNI.
        let ip = peek_bytes(vec![client_hello("192.0.2.7")], 16384).await;
        assert_eq!(ip.protocol, Protocol::Tls { sni: None });
    }

    #[tokio::test]
    async fn http_host_without_port() {
        let req = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST: Example.com:8080\r\n\r\nbody".to_vec();
        let p = peek_bytes(vec![req[..10].to_vec(), req[10..].to_vec()], 16384).await;
        assert_eq!(
            p.protocol,
            Protocol::Http {
                host: Some("Example.com".into())
            }
        );
        assert_eq!(p.bytes, req);
        let p = peek_bytes(vec![b"GET / HTTP/1.0\r\n\r\n".to_vec()], 16384).await;
        assert_eq!(p.protocol, Protocol::Http { host: None });
        let two = b"GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n".to_vec();
        assert!(matches!(
            peek_bytes(vec![two], 16384).await.protocol,
            Protocol::Ambiguous(_)
        ));
        let v6 = b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n".to_vec();
        assert_eq!(peek_bytes(vec![v6], 16384).await.name(), Some("[::1]:80"));
    }

    #[tokio::test]
    async fn opaque_bounded_and_deadline() {
        // Binary: opaque at once.
        let p = peek_bytes(vec![b"\x00\x01SSH".to_vec()], 16384).await;
        assert_eq!(p.protocol, Protocol::Opaque);
        // A never-ending header: opaque at the size limit, not more read.
        let endless = [b"GET / HTTP/1.1\r\nX: ".to_vec(), vec![b'a'; 40_000]].concat();
        let p = peek_bytes(vec![endless], 1000).await;
        assert_eq!(p.protocol, Protocol::Opaque);
        assert_eq!(p.bytes.len(), 1000);
        // More headers than httparse takes: opaque, not an endless parse.
        let many = [
            b"GET / HTTP/1.1\r\n".to_vec(),
            b"X: y\r\n".repeat(100),
            b"Host: a.test\r\n\r\n".to_vec(),
        ]
        .concat();
        let p = peek_bytes(vec![many], 16384).await;
        assert_eq!(p.protocol, Protocol::Opaque);
        // Trickled a byte at a time: still found.
        let req = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let p = peek_bytes(req.iter().map(|b| vec![*b]).collect(), 16384).await;
        assert_eq!(p.name(), Some("a.test"));
        // A truncated ClientHello: opaque at the limit.
        let hello = client_hello("example.com");
        let p = peek_bytes(vec![hello[..hello.len() - 1].to_vec()], hello.len() - 1).await;
        assert_eq!(p.protocol, Protocol::Opaque);
        // A silent client: opaque at the deadline, with nothing read.
        let (_a, mut b) = tokio::io::duplex(1024);
        let p = peek(&mut b, 16384, Instant::now() + Duration::from_millis(50))
            .await
            .unwrap();
        assert_eq!(p.protocol, Protocol::Opaque);
        assert!(p.bytes.is_empty());
        // Garbage after a TLS record type byte.
        let p = peek_bytes(vec![b"\x16\x03\x01\x00\x05hello".to_vec()], 16384).await;
        assert_eq!(p.protocol, Protocol::Opaque);
    }
}
