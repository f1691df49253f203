//! The JSON API edge of both HTTP services, the server's `/v1` API and the agent's API inside a
//! sandbox: one error type with the `{code, message}` body of `lizard-proto`, the JSON body and
//! query extractors whose every rejection is that error, the stream framings (`Accept:
//! application/x-ndjson` or `text/event-stream`), and the one way an error with sources becomes
//! a message.
//!
//! What an error *means* (which code a `SandboxError` or a `ContextError` gets) stays with each
//! service: they convert their own errors into [`ApiError`].

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use lizard_proto::{ErrorBody, ErrorCode, NDJSON, SSE};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// The largest JSON request body [`ApiJson`] accepts unless a route names its own limit (a cell's
/// source plus its env; a control request).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How long a refused body is read and thrown away before the answer ([`drain`]).
pub const DRAIN_REFUSED_BODY: Duration = Duration::from_secs(10);

/// An API failure: the HTTP status comes from the code, the body is `{code, message}`.
#[derive(Debug)]
pub struct ApiError(pub ErrorBody);

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError(ErrorBody::new(code, message))
    }

    /// A 400: the request is wrong, and `message` says how.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// A 404 for `what` (`"sandbox"` → `"sandbox not found"`).
    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} not found"))
    }

    /// A 500 whose message says nothing of the cause; the cause goes to the log.
    pub fn internal(e: &dyn std::error::Error) -> Self {
        tracing::error!(error = %error_chain(e), "internal error");
        ApiError(ErrorBody::internal())
    }

    /// The answer to a body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            ErrorCode::PayloadTooLarge,
            format!("request body larger than {limit} bytes"),
        )
    }
}

/// Any error that knows its API answer (the lifecycle's, see `lizard_proto::ToErrorBody`).
/// `ApiError` itself does not implement `ToErrorBody`, so this does not overlap `From<T> for T`.
impl<E: lizard_proto::ToErrorBody> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.to_error_body())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0)).into_response()
    }
}

/// The one way an error becomes an API message or a log line (`lizard_errors`).
pub use lizard_errors::error_chain;

/// `Json<T>` whose rejections are [`ApiError`]s, for bodies of at most `LIMIT` bytes (the route's
/// `DefaultBodyLimit` must allow as much).
///
/// A body announced larger than `LIMIT` is read and dropped (for at most [`DRAIN_REFUSED_BODY`])
/// before the 413: a server that answers before reading a request to its end closes the
/// connection, and the client, still writing, may then see a broken pipe instead of the answer.
pub struct ApiJson<T, const LIMIT: usize = MAX_BODY_BYTES>(pub T);

impl<S, T, const LIMIT: usize> FromRequest<S> for ApiJson<T, LIMIT>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let announced = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > LIMIT as u64) {
            drain(&mut req.into_body().into_data_stream()).await;
            return Err(ApiError::too_large(LIMIT));
        }
        // A body sent without a length is held to `LIMIT` too, however large the route allows.
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, LIMIT).await {
            Ok(b) => b,
            Err(e) => {
                let e = e.into_inner();
                let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
                while let Some(c) = cur {
                    if c.is::<http_body_util::LengthLimitError>() {
                        return Err(ApiError::too_large(LIMIT));
                    }
                    cur = c.source();
                }
                return Err(ApiError::invalid(format!(
                    "reading the request body: {}",
                    error_chain(e.as_ref())
                )));
            }
        };
        let req = Request::from_parts(parts, Body::from(bytes));
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(json_rejection(rej, LIMIT)),
        }
    }
}

fn json_rejection(rej: JsonRejection, limit: usize) -> ApiError {
    let code = match rej.status() {
        StatusCode::PAYLOAD_TOO_LARGE => return ApiError::too_large(limit),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        _ => ErrorCode::InvalidRequest,
    };
    let message = match &rej {
        JsonRejection::JsonDataError(e) => format!("invalid request body: {}", e.body_text()),
        JsonRejection::JsonSyntaxError(e) => format!("malformed JSON: {}", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => {
            "expected a request body with Content-Type: application/json".to_string()
        }
        other => format!("invalid request body: {}", other.body_text()),
    };
    ApiError::new(code, message)
}

/// `Query<T>` whose rejections (a missing, unknown or malformed parameter) are [`ApiError`]s.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rej) => Err(ApiError::invalid(rej.body_text())),
        }
    }
}

/// Read what is left of a request body and drop it, for at most [`DRAIN_REFUSED_BODY`]: an error
/// found before or during an upload is answered after this (see [`ApiJson`]).
pub async fn drain<B, E>(body: &mut B)
where
    B: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let _ = tokio::time::timeout(DRAIN_REFUSED_BODY, async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
}

/// How a client asked for a stream of events, by its `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `application/x-ndjson`: one JSON document per line.
    Ndjson,
    /// `text/event-stream`: Server-Sent Events, `event: <kind>` and `data: <json>`.
    Sse,
    /// Anything else: no stream, one aggregated answer at the end.
    Aggregate,
}

impl Framing {
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if accept.contains(NDJSON) {
            Framing::Ndjson
        } else if accept.contains(SSE) {
            Framing::Sse
        } else {
            Framing::Aggregate
        }
    }

    /// The media type of the stream, `None` for [`Framing::Aggregate`].
    pub fn content_type(self) -> Option<&'static str> {
        match self {
            Framing::Ndjson => Some(NDJSON),
            Framing::Sse => Some(SSE),
            Framing::Aggregate => None,
        }
    }

    /// `item` as one frame of this stream: a JSON line, or an SSE event named `kind` (aggregated
    /// answers are not framed: a JSON line).
    pub fn frame<T: Serialize>(self, kind: &str, item: &T) -> Bytes {
        let json = serde_json::to_string(item).unwrap_or_default();
        match self {
            Framing::Sse => Bytes::from(format!("event: {kind}\ndata: {json}\n\n")),
            Framing::Ndjson | Framing::Aggregate => Bytes::from(json + "\n"),
        }
    }
}

/// A streamed `200` of `content_type` that no proxy should buffer.
pub fn stream_response(content_type: &'static str, body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use axum::Router;
    use http_body_util::BodyExt;
    use tower_service::Service;

    #[test]
    fn framing_from_accept() {
        let mut h = HeaderMap::new();
        assert_eq!(Framing::from_headers(&h), Framing::Aggregate);
        h.insert(header::ACCEPT, HeaderValue::from_static(NDJSON));
        assert_eq!(Framing::from_headers(&h), Framing::Ndjson);
        h.insert(header::ACCEPT, HeaderValue::from_static(SSE));
        assert_eq!(Framing::from_headers(&h), Framing::Sse);
        assert_eq!(
            Framing::Sse.frame("stdout", &1),
            "event: stdout\ndata: 1\n\n"
        );
        assert_eq!(Framing::Ndjson.frame("stdout", &[1]), "[1]\n");
    }

    #[test]
    fn error_chain_follows_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("saving context {0}")]
        struct Outer(u32, #[source] std::io::Error);
        let inner = std::io::Error::other("disk full");
        assert_eq!(
            error_chain(&inner),
            "disk full",
            "no source: the message alone"
        );
        assert_eq!(error_chain(&Outer(3, inner)), "saving context 3: disk full");
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body1 {
        n: u32,
    }

    async fn call(app: &mut Router, req: axum::http::Request<Body>) -> (StatusCode, ErrorBody) {
        let r = app.call(req).await.unwrap();
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    fn post_json(uri: &str, body: &str) -> axum::http::Request<Body> {
        axum::http::Request::post(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    /// Every way a body or a query can be wrong is the one typed body, with its code.
    #[tokio::test]
    async fn every_rejection_is_a_typed_error() {
        let mut app = Router::new()
            .route("/j", post(|ApiJson(_): ApiJson<Body1>| async { "ok" }))
            .route(
                "/small",
                post(|ApiJson(_): ApiJson<Body1, 8>| async { "ok" }),
            )
            .route("/q", get(|ApiQuery(_): ApiQuery<Body1>| async { "ok" }));
        let cases = [
            (
                post_json("/j", "{"),
                ErrorCode::InvalidRequest,
                "malformed JSON",
            ),
            (
                post_json("/j", r#"{"n":"x"}"#),
                ErrorCode::InvalidRequest,
                "invalid request body",
            ),
            (
                post_json("/j", r#"{"n":1,"m":2}"#),
                ErrorCode::InvalidRequest,
                "unknown field",
            ),
            (
                axum::http::Request::post("/j")
                    .body(Body::from("{}"))
                    .unwrap(),
                ErrorCode::UnsupportedMediaType,
                "Content-Type: application/json",
            ),
            (
                post_json("/small", r#"{"n":12345678}"#),
                ErrorCode::PayloadTooLarge,
                "larger than 8 bytes",
            ),
            (
                axum::http::Request::get("/q?n=x")
                    .body(Body::empty())
                    .unwrap(),
                ErrorCode::InvalidRequest,
                "n",
            ),
        ];
        for (req, code, text) in cases {
            let uri = req.uri().clone();
            let (status, body) = call(&mut app, req).await;
            assert_eq!(body.code, code, "{uri}: {body:?}");
            assert_eq!(status.as_u16(), code.http_status(), "{uri}");
            assert!(
                body.message.contains(text),
                "{uri}: {:?} lacks {text:?}",
                body.message
            );
        }
    }

    /// A body announced too large is read to its end before the 413 (the connection survives).
    #[tokio::test]
    async fn an_announced_oversized_body_is_drained_before_the_answer() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let sent = tokio::spawn(async move {
            for _ in 0..4 {
                tx.send(Ok(Bytes::from_static(b"0123456789")))
                    .await
                    .unwrap();
            }
        });
        let req = axum::http::Request::post("/small")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, "40")
            .body(Body::from_stream(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            ))
            .unwrap();
        let mut app = Router::new().route(
            "/small",
            post(|ApiJson(_): ApiJson<Body1, 8>| async { "ok" }),
        );
        let (_, body) = call(&mut app, req).await;
        assert_eq!(body.code, ErrorCode::PayloadTooLarge);
        sent.await
            .expect("every chunk was read: the sender finished");
    }
}
