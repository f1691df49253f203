//! The HTTP edge shared by Lizard's two HTTP services, the server and the agent: the typed JSON
//! API error, the body and query extractors with their limits, and stream framing ([`api`]); and
//! the plumbing of the two hops that forward a sandbox's port traffic (server → agent → service):
//! which headers cross a proxy, joining the two halves of an upgraded (WebSocket) connection, and
//! keeping a connection alive when a request was answered before its body was read ([`drain`]).
//!
//! Not here: routing, authentication, or anything about sandboxes.

pub mod api;
pub mod drain;

use http::header::{CONNECTION, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;

/// Hop-by-hop headers (RFC 9110 §7.6.1, plus the non-standard `Proxy-Connection`): never
/// forwarded as they are. `Upgrade`/`Connection` are re-added for an upgrade.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The end-to-end headers of `from`: without the hop-by-hop ones and without those its
/// `Connection` header names (they are hop-by-hop too, RFC 9110 §7.6.1); with `upgrade`, the
/// message stays an upgrade request or response (`Upgrade: <upgrade>`, `Connection: upgrade`).
pub fn end_to_end_headers(from: &HeaderMap, upgrade: Option<&HeaderValue>) -> HeaderMap {
    let named: Vec<HeaderName> = from
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|o| HeaderName::from_bytes(o.trim().as_bytes()).ok())
        .collect();
    let mut out = HeaderMap::new();
    for (k, v) in from {
        if !HOP_BY_HOP.contains(&k.as_str()) && !named.contains(k) {
            out.append(k.clone(), v.clone());
        }
    }
    if let Some(u) = upgrade {
        out.insert(UPGRADE, u.clone());
        out.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    }
    out
}

/// Once both sides have switched protocols, copy bytes both ways until either closes.
pub fn splice(client: hyper::upgrade::OnUpgrade, target: hyper::upgrade::OnUpgrade) {
    tokio::spawn(async move {
        match tokio::try_join!(client, target) {
            Ok((c, t)) => {
                let _ =
                    tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(t)).await;
            }
            Err(e) => tracing::debug!(error = %e, "upgrade failed"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, COOKIE};

    #[test]
    fn hop_by_hop_headers_are_dropped_and_upgrades_kept() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, upgrade"));
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            HeaderName::from_static("sec-websocket-key"),
            HeaderValue::from_static("k"),
        );
        h.insert(COOKIE, HeaderValue::from_static("a=b"));
        let plain = end_to_end_headers(&h, None);
        assert!(plain.get(UPGRADE).is_none() && plain.get(CONNECTION).is_none());
        assert_eq!(plain[COOKIE], "a=b");
        let up = end_to_end_headers(&h, h.get(UPGRADE));
        assert_eq!(up[UPGRADE], "websocket");
        assert_eq!(up[CONNECTION], "upgrade");
        assert_eq!(up["sec-websocket-key"], "k");
    }

    #[test]
    fn headers_named_by_connection_are_dropped() {
        let mut h = HeaderMap::new();
        h.append(CONNECTION, HeaderValue::from_static("X-Hop, close"));
        h.append(CONNECTION, HeaderValue::from_static(" x-other "));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("x-other", HeaderValue::from_static("2"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("x-kept", HeaderValue::from_static("3"));
        let out = end_to_end_headers(&h, None);
        assert!(out.get("x-hop").is_none() && out.get("x-other").is_none());
        assert!(out.get("proxy-connection").is_none());
        assert_eq!(out["x-kept"], "3");
    }
}
