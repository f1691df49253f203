//! Who may use the agent's TCP listener (127.0.0.1:8080 inside a sandbox). Any process of the
//! sandbox can connect to it, and through it drive every context (`POST /execute {context: B}`
//! from context A's kernel would make contexts no boundary). So a connection is served only when
//! its peer socket belongs to the sandbox's root (the agent, its helpers) or to the sandbox user
//! (commands and terminals, which the API caller started); anything else — a context's kernel, a
//! connection from outside the sandbox's user namespace — is answered with one typed 403 and
//! closed.
//!
//! The peer's owner comes from `/proc/net/tcp` (and `tcp6`): the row whose local address is the
//! peer's and whose remote address is ours carries the uid of the process that made the socket
//! (as this user namespace sees it). The agent is the sandbox's root and may read it.
//!
//! Not here: which routes the listener serves (`crate::api`), the Unix socket (the server's,
//! checked by the launcher's design: only the host can reach it).

use std::net::{IpAddr, SocketAddr};

/// The uid that owns the TCP socket at `peer` connected to `local`, from the text of
/// `/proc/net/tcp` and `/proc/net/tcp6`.
pub fn tcp_peer_uid(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    // An IPv4 connection's row is in `tcp`, an IPv6 (or v4-mapped) one's in `tcp6`.
    let table = if peer.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    find_uid(&std::fs::read_to_string(table).ok()?, peer, local)
}

/// The uid column of the row `peer` → `local` in a `/proc/net/tcp{,6}` text.
fn find_uid(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (hex_addr(peer)?, hex_addr(local)?);
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (cols.get(1)?, cols.get(2)?, cols.get(7)?);
        (l.eq_ignore_ascii_case(&want_local) && r.eq_ignore_ascii_case(&want_remote))
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// An address as `/proc/net/tcp` writes it: the address's 32-bit words in host byte order (x86:
/// little-endian), then `:` and the port in hex.
fn hex_addr(a: SocketAddr) -> Option<String> {
    let words: Vec<u32> = match a.ip() {
        IpAddr::V4(ip) => vec![u32::from_ne_bytes(ip.octets())],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let mut s: String = words.iter().map(|w| format!("{w:08X}")).collect();
    s.push_str(&format!(":{:04X}", a.port()));
    Some(s)
}

/// Whether a connection from `peer` to the TCP listener at `local` is served: its socket is root's
/// or the sandbox user's. Outside a sandbox (no sandbox user configured) every connection is.
pub fn allowed(peer: SocketAddr, local: SocketAddr) -> bool {
    let Some(user) = crate::users::sandbox_user() else {
        return true;
    };
    match tcp_peer_uid(peer, local) {
        Some(uid) => uid == 0 || uid == user.uid,
        None => false,
    }
}

/// What a refused connection gets before it is closed: one typed 403.
pub fn refusal() -> Vec<u8> {
    let body = serde_json::json!({
        "code": lizard_proto::ErrorCode::PermissionDenied,
        "message": "the agent's TCP port serves the sandbox user (commands and terminals) only; \
                    a context's code cannot drive the agent",
    })
    .to_string();
    format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The agent's TCP listener with the check above on every accepted connection.
pub struct CheckedListener(pub tokio::net::TcpListener);

impl axum::serve::Listener for CheckedListener {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, peer) = match self.0.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // As axum's own listener: a transient error (EMFILE…) must not spin.
                    tracing::debug!(error = %e, "accept");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let local = match stream.local_addr() {
                Ok(l) => l,
                Err(_) => continue,
            };
            // Reading /proc/net/tcp is a small file read; done inline (it is the agent's own
            // loopback port, a handful of connections).
            if allowed(peer, local) {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            tracing::info!(%peer, "refused a TCP connection that is neither root's nor the sandbox user's");
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = stream;
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
                    let _ = stream.write_all(&refusal()).await;
                    let _ = stream.shutdown().await;
                    // Read what the client still sends (its request, at most 1 MiB) before
                    // closing: closing with unread data resets the connection, and the client
                    // may then lose the answer to a broken pipe.
                    let mut sink = [0u8; 16 * 1024];
                    let mut left = 1usize << 20;
                    while left > 0 {
                        match stream.read(&mut sink).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => left = left.saturating_sub(n),
                        }
                    }
                })
                .await;
            });
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_peer_row() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
           1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  2003        0 2 1\n\
           2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n";
        let peer: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(find_uid(table, peer, local), Some(2003));
        assert_eq!(find_uid(table, local, peer), Some(0));
        assert_eq!(find_uid(table, "127.0.0.1:1".parse().unwrap(), local), None);
    }

    #[test]
    fn a_real_connection_shows_our_uid() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        let me = lizard_jail::creds::euid();
        assert_eq!(tcp_peer_uid(peer, s.local_addr().unwrap()), Some(me));
        drop(c);
    }

    #[test]
    fn the_refusal_is_a_typed_403() {
        let text = String::from_utf8(refusal()).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 "));
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], "permission_denied");
    }
}
