//! The web console: the static files of `console/dist` (built from `console/src` with npm and
//! committed, so a cargo build never needs npm), embedded in the binary and served at `/` and
//! `/console/…` without a key — they are public; the console's API calls carry the key the person
//! signed in with. The console uses the public `/v1` API only, and routes its pages by the URL's
//! fragment (`/#/sandboxes`), so no page of it is a path of the API (or of E2B's, also at the root).

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// One embedded file: its path in `console/dist`, media type and bytes.
struct Asset {
    file: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($file:literal, $ct:literal) => {
        Asset {
            file: $file,
            content_type: $ct,
            bytes: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../console/dist/",
                $file
            )),
        }
    };
}

/// Every file of `console/dist` (a test fails when the directory has one that is not here).
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.js", "text/javascript; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
];

/// The page's Content-Security-Policy: its own scripts, styles and API only. Images may be
/// `data:` URLs (a cell's PNG charts); HTML a sandbox returns is shown in a frame with `sandbox`
/// and no `allow-scripts` (console/src/output.tsx), which inherits this policy as well. No frame
/// may embed the console.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; connect-src 'self'; frame-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// `GET /` (the page) and `GET /console/{file}` (its script and stylesheet).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { serve(INDEX) }))
        .route("/console/{file}", get(asset))
}

const INDEX: &str = "index.html";

async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    // The page is at `/` only (its relative links are to `console/…`).
    if file == INDEX {
        return not_found(&file);
    }
    serve(&file)
}

fn not_found(file: &str) -> Response {
    lizard_http::api::ApiError::new(
        lizard_proto::ErrorCode::NotFound,
        format!("the console has no file {file:?}"),
    )
    .into_response()
}

fn serve(file: &str) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.file == file) else {
        return not_found(file);
    };
    let mut r = a.bytes.into_response();
    let h = r.headers_mut();
    let page = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    let every = [
        (header::CONTENT_TYPE, a.content_type),
        // The files change with the binary, under the same names: revalidate each time.
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    let page = if a.file == INDEX { &page[..] } else { &[] };
    for (name, value) in every.iter().chain(page) {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower_service::Service;

    async fn get(uri: &str) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
        let mut app: Router = routes();
        let r = app
            .call(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = r.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes().to_vec();
        (parts.status, parts.headers, bytes)
    }

    #[test]
    fn every_file_of_console_dist_is_embedded() {
        let dist = concat!(env!("CARGO_MANIFEST_DIR"), "/../../console/dist");
        let mut on_disk: Vec<String> = std::fs::read_dir(dist)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.file.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "console/dist and ASSETS differ");
    }

    #[tokio::test]
    async fn the_page_and_its_files_are_served_with_their_types() {
        let (status, h, page) = get("/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(h[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("script-src 'self'"));
        let page = String::from_utf8(page).unwrap();
        // What the page links to is served, with its type.
        for (file, ct) in [
            ("console.js", "text/javascript; charset=utf-8"),
            ("console.css", "text/css; charset=utf-8"),
        ] {
            assert!(page.contains(&format!("\"console/{file}\"")), "{page}");
            let (status, h, body) = get(&format!("/console/{file}")).await;
            assert_eq!(status, StatusCode::OK, "{file}");
            assert_eq!(h[header::CONTENT_TYPE], ct, "{file}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert!(!body.is_empty());
        }
        for missing in ["/console/nothing.js", "/console/index.html"] {
            let (status, h, _) = get(missing).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
            assert!(h[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/json"));
        }
    }
}
