//! Host-name routing of sandbox traffic: a request whose `Host` is `<port>-<sandbox id>.<domain>`
//! is traffic for that port of that sandbox, exactly as if it carried E2B's `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port` headers ([`crate::e2b::sandbox_traffic`] takes it from there: the same
//! credentials, the same relay). The domain is `--sandbox-domain`, or `localhost:<port of the
//! listener>` when none is given: browsers resolve every `*.localhost` name to the loopback
//! address with no DNS at all, so `http://3000-<id>.localhost:8787/` opens a sandbox's web app on
//! the server's own machine. Elsewhere, point a wildcard DNS record (`*.sandboxes.example.com`) at
//! the server, or at a TLS proxy in front of it, and pass `--sandbox-domain sandboxes.example.com`.
//! It is what E2B's SDKs build with `getHost(port)` (the create answer's `domain`).
//!
//! A browser cannot send the sandbox's access token as a header, so a link may carry it once:
//! `?lizard_access_token=<token>` is answered with a redirect to the same URL without it that sets
//! it as a cookie of that host alone (`HttpOnly`, `SameSite=Lax`); later requests from the browser
//! carry the cookie, which this layer turns back into the token header. The cookie is removed from
//! what reaches the sandbox: the service inside never sees the token. A wrong token is a `401`,
//! with no cookie set.
//!
//! This layer sits outside the gate ([`crate::gate`]), so a host-routed request is rate-limited,
//! authenticated and audited as header-routed sandbox traffic is. Routing headers a client sent
//! itself are replaced: the host name decides.

use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The query parameter and cookie that carry a sandbox's access token from a browser.
pub const TOKEN_PARAM: &str = "lizard_access_token";

/// `(port, sandbox id)` of a `Host` value `<port>-<id>.<domain>` (ASCII case-insensitive; the
/// id is a Lizard sandbox id's alphabet, lower-case letters and digits). `None` for any other host.
pub fn parse_host(host: &str, domain: &str) -> Option<(u16, String)> {
    let host = host.trim().to_ascii_lowercase();
    let domain = domain.trim().trim_start_matches('.').to_ascii_lowercase();
    if domain.is_empty() {
        return None;
    }
    let label = host.strip_suffix(&domain)?.strip_suffix('.')?;
    let (port, id) = label.split_once('-')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let id_ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    id_ok.then(|| (port, id.to_string()))
}

/// A sandbox's answer given at the server's own address, the origin of the web console (where a
/// signed-in person's key is) and of the API: whatever the sandbox says, a browser never runs it
/// as a page of that origin (an opaque origin, no script, nothing loaded), never sniffs it into
/// something else, and takes from it no cookie, no service-worker scope and no order to clear the
/// origin's data. (At a sandbox's own host name it is that host's origin, and passes as it is.)
fn confine(h: &mut axum::http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    for name in ["service-worker-allowed", "clear-site-data", "set-cookie"] {
        h.remove(name);
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`), outside the gate.
pub async fn host_routing(
    State(st): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    let Some((port, id)) = host.and_then(|h| parse_host(&h, st.e2b.sandbox_domain())) else {
        let mut resp = next.run(req).await;
        if resp
            .extensions()
            .get::<crate::proxy::FromSandbox>()
            .is_some()
        {
            confine(resp.headers_mut());
        }
        return resp;
    };
    // A link with the token: check it, then set it as this host's cookie and send the browser on
    // to the same URL without it (so it is not left in the address bar, history or logs).
    if let Some(token) = query_value(req.uri().query(), TOKEN_PARAM) {
        if !st.e2b.token_ok(&id, &token) {
            return crate::e2b_shared::E2bError(
                StatusCode::UNAUTHORIZED,
                "wrong access token for this sandbox".into(),
            )
            .into_response();
        }
        let rest = query_without(req.uri().query(), TOKEN_PARAM);
        let location = if rest.is_empty() {
            req.uri().path().to_string()
        } else {
            format!("{}?{rest}", req.uri().path())
        };
        let cookie = format!("{TOKEN_PARAM}={token}; Path=/; HttpOnly; SameSite=Lax");
        let mut r = StatusCode::SEE_OTHER.into_response();
        if let (Ok(l), Ok(c)) = (
            HeaderValue::from_str(&location),
            HeaderValue::from_str(&cookie),
        ) {
            r.headers_mut().insert(header::LOCATION, l);
            r.headers_mut().insert(header::SET_COOKIE, c);
        }
        return r;
    }
    let headers = req.headers_mut();
    let (cookies, token) = split_cookie(headers);
    headers.remove(header::COOKIE);
    if let Some(c) = cookies.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::COOKIE, c);
    }
    let has_token =
        headers.contains_key("x-access-token") || headers.contains_key("e2b-traffic-access-token");
    if let (false, Some(t)) = (
        has_token,
        token.and_then(|t| HeaderValue::from_str(&t).ok()),
    ) {
        headers.insert("e2b-traffic-access-token", t);
    }
    if let (Ok(i), Ok(p)) = (
        HeaderValue::from_str(&id),
        HeaderValue::from_str(&port.to_string()),
    ) {
        headers.insert("e2b-sandbox-id", i);
        headers.insert("e2b-sandbox-port", p);
    }
    next.run(req).await
}

/// The first value of `name` in a query string (percent-decoded).
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The query string without `name`, its other pairs as they were sent.
fn query_without(query: Option<&str>, name: &str) -> String {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or("");
            !key.is_empty()
                && form_urlencoded::parse(key.as_bytes())
                    .next()
                    .is_none_or(|(k, _)| k != name)
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The request's cookies without [`TOKEN_PARAM`] (`None` when nothing is left), and that
/// cookie's value.
fn split_cookie(headers: &axum::http::HeaderMap) -> (Option<String>, Option<String>) {
    let mut kept = Vec::new();
    let mut token = None;
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for c in v.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            match c.split_once('=') {
                Some((k, val)) if k.trim() == TOKEN_PARAM => token = Some(val.trim().to_string()),
                _ => kept.push(c.to_string()),
            }
        }
    }
    ((!kept.is_empty()).then(|| kept.join("; ")), token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_name_a_port_and_a_sandbox_of_the_domain_only() {
        let d = "localhost:8787";
        assert_eq!(
            parse_host("3000-abc123.localhost:8787", d),
            Some((3000, "abc123".into()))
        );
        assert_eq!(
            parse_host("49983-ABC.LocalHost:8787", d),
            Some((49983, "abc".into()))
        );
        assert_eq!(
            parse_host("3000-abc.sandboxes.example.com", "sandboxes.example.com"),
            Some((3000, "abc".into()))
        );
        for bad in [
            "localhost:8787",
            "3000-abc.localhost:9999",
            "3000-abc.evil-localhost:8787",
            "x3000-abc.localhost:8787",
            "0-abc.localhost:8787",
            "70000-abc.localhost:8787",
            "3000-.localhost:8787",
            "3000-a_b.localhost:8787",
            "3000-a.b.localhost:8787",
            "3000abc.localhost:8787",
        ] {
            assert_eq!(parse_host(bad, d), None, "{bad}");
        }
        assert_eq!(parse_host("3000-abc.", ""), None);
    }

    #[test]
    fn the_token_parameter_is_taken_out_of_the_query() {
        let q = Some("a=1&lizard_access_token=t0k&b=two%20words");
        assert_eq!(query_value(q, TOKEN_PARAM).as_deref(), Some("t0k"));
        assert_eq!(query_without(q, TOKEN_PARAM), "a=1&b=two%20words");
        assert_eq!(
            query_without(Some("lizard_access_token=x"), TOKEN_PARAM),
            ""
        );
        assert_eq!(query_value(None, TOKEN_PARAM), None);
    }

    #[test]
    fn the_token_cookie_is_split_from_the_others() {
        let mut h = axum::http::HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("app=1; lizard_access_token=secret"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("other=2"));
        assert_eq!(
            split_cookie(&h),
            (Some("app=1; other=2".into()), Some("secret".into()))
        );
        let mut only = axum::http::HeaderMap::new();
        only.insert(
            header::COOKIE,
            HeaderValue::from_static("lizard_access_token=s"),
        );
        assert_eq!(split_cookie(&only), (None, Some("s".into())));
    }
}
