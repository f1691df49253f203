//! The agent's HTTP API: contexts, execute (streamed or aggregated), interrupt, health; and the
//! routes of `crate::commands`, `crate::pty` and `crate::files`, merged in.
//!
//! Handlers are thin: parse, call `crate::context`, map the error. Every failure is an
//! [`ApiError`] with the one `{code, message}` body of `lizard-proto`; malformed JSON, unknown fields
//! and oversized bodies are rejected through the same type.
//!
//! `POST /execute` answers by the request's `Accept` header: `application/x-ndjson` streams
//! [`EventFrame`]s as JSON Lines, `text/event-stream` streams them as Server-Sent Events, anything else
//! returns the aggregated [`Execution`] as one JSON document when the run ends.

use crate::context::{ContextError, ContextHandle, Contexts, RunRequest};
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use futures_util::StreamExt;
use lizard_proto::{
    Context, ContextFork, ContextId, CreateContextRequest, ErrorBody, ErrorCode, EventFrame,
    ExecuteRequest, Execution, ForkContextRequest, Health, Language, NDJSON, SSE,
};
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

/// Largest request body accepted (a cell's source plus its env).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Largest `timeout_ms` accepted (one day).
const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// An API failure: HTTP status from the code, body `{code, message}`.
#[derive(Debug)]
pub struct ApiError(pub ErrorBody);

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError(ErrorBody::new(code, message))
    }
    fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.0)).into_response()
    }
}

impl From<ContextError> for ApiError {
    fn from(e: ContextError) -> Self {
        match &e {
            ContextError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            ContextError::Busy(_)
            | ContextError::NoKernel(_)
            | ContextError::Kernel(crate::kernel::KernelError::ForkRefused { .. }) => {
                ApiError::new(ErrorCode::Conflict, e.to_string())
            }
            ContextError::BadCwd(_) | ContextError::InvalidLimits(_) => {
                ApiError::invalid(e.to_string())
            }
            ContextError::LimitsUnsupported(_) | ContextError::NoInterpreter(_) => {
                ApiError::new(ErrorCode::Unsupported, e.to_string())
            }
            ContextError::Cgroup(c) => {
                tracing::error!(error = ?c, "context cgroup");
                ApiError::new(ErrorCode::Unavailable, format!("{e}: {}", error_chain(c)))
            }
            ContextError::Kernel(crate::kernel::KernelError::NoFreeSlot(_)) => {
                ApiError::new(ErrorCode::Conflict, e.to_string())
            }
            ContextError::Kernel(k) => {
                tracing::error!(error = ?k, "kernel start failed");
                ApiError::new(ErrorCode::Unavailable, error_chain(k))
            }
        }
    }
}

/// `e`'s message followed by each of its `source()`s, joined by `": "` (`"writing x: disk full"`):
/// the one way the agent turns an error into an API message.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `Json<T>` whose rejections are [`ApiError`]s.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // A body announced too large is read (and dropped) before the 413: a server that answers
        // before reading the request to the end closes the connection, and the client, still
        // writing, may then see a broken pipe instead of the answer.
        let announced = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            crate::files::drain(&mut req.into_body().into_data_stream()).await;
            return Err(too_large());
        }
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(json_rejection(rej)),
        }
    }
}

/// `Query<T>` whose rejections (a missing or malformed parameter) are [`ApiError`]s.
pub struct ApiQuery<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rej) => Err(ApiError::invalid(rej.body_text())),
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("request body larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn json_rejection(rej: JsonRejection) -> ApiError {
    let code = match rej.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        _ => ErrorCode::InvalidRequest,
    };
    let message = match &rej {
        JsonRejection::JsonDataError(e) => format!("invalid request body: {}", e.body_text()),
        JsonRejection::JsonSyntaxError(e) => format!("malformed JSON: {}", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => {
            "expected a request body with Content-Type: application/json".to_string()
        }
        _ if code == ErrorCode::PayloadTooLarge => return too_large(),
        other => other.body_text(),
    };
    ApiError::new(code, message)
}

type AppState = Arc<Contexts>;

/// The agent's router.
/// The API of the agent's TCP listener inside the sandbox (`127.0.0.1:8080`), which every
/// process of the sandbox can reach: everything but the host-only routes of [`host_router`].
pub fn router(contexts: Arc<Contexts>) -> Router {
    routes(contexts, false)
}

/// The API of the agent's Unix socket, which only the server uses: [`router`]'s routes and those
/// only the server calls — `/executions` (metering) and `/hibernate/snapshot|restore` (which take
/// any directory). Code in the sandbox cannot reach these through the TCP listener; the ports
/// proxy refuses the agent's own port anyway.
pub fn host_router(contexts: Arc<Contexts>) -> Router {
    routes(contexts, true)
}

fn routes(contexts: Arc<Contexts>, host: bool) -> Router {
    let cfg = contexts.config();
    let (home, bash) = (cfg.default_cwd.clone(), cfg.kernels.bash.clone());
    let procs = crate::procs::Processes::new(home.clone(), bash);
    let r = Router::new()
        .merge(crate::e2b::routes(
            contexts.clone(),
            procs.clone(),
            home.clone(),
        ))
        .route("/health", get(health))
        .route("/contexts", get(list_contexts).post(create_context))
        .route("/contexts/{id}", get(get_context).delete(delete_context))
        .route("/contexts/{id}/restart", post(restart_context))
        .route("/contexts/{id}/interrupt", post(interrupt_context))
        .route("/contexts/{id}/fork", post(fork_context))
        .route("/execute", post(execute))
        .merge(crate::commands::routes(procs.clone()))
        .merge(crate::pty::routes(procs))
        .merge(crate::files::routes(home))
        .merge(crate::ports::routes());
    let r = if host {
        r.route("/executions", get(executions))
            .route("/hibernate/snapshot", post(hibernate_snapshot))
            .route("/hibernate/restore", post(hibernate_restore))
    } else {
        r
    };
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // A body left unread by an early answer is drained, so the kept-alive connection survives.
        .layer(axum::middleware::map_request(drain_unread_body))
        .with_state(contexts)
}

async fn drain_unread_body(req: axum::extract::Request) -> axum::extract::Request {
    lizard_http::drain::drain_unread_body(req).map(axum::body::Body::new)
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

async fn method_not_allowed() -> Response {
    let mut r = ApiError::invalid("method not allowed on this route").into_response();
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}

async fn health(State(c): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        contexts: c.len(),
    })
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// Finished runs for metering: `GET /executions?after=N&limit=M`.
async fn executions(
    State(c): State<AppState>,
    q: Result<axum::extract::Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<lizard_proto::ExecutionLog>, ApiError> {
    let q = q.map_err(|e| ApiError::invalid(e.body_text()))?.0;
    Ok(Json(c.executions_after(
        q.after,
        q.limit.unwrap_or(1000).min(10_000),
    )))
}

impl From<crate::hibernate::HibernateError> for ApiError {
    fn from(e: crate::hibernate::HibernateError) -> Self {
        use crate::hibernate::HibernateError as H;
        match &e {
            H::BadDir => ApiError::invalid(e.to_string()),
            H::Manifest { .. } => ApiError::new(ErrorCode::NotFound, error_chain(&e)),
            H::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ApiError::new(ErrorCode::NotFound, error_chain(&e))
            }
            H::Io { .. } => ApiError::new(ErrorCode::Internal, error_chain(&e)),
        }
    }
}

/// Save every context's state into `dir` (server-internal: the server does not forward this route).
async fn hibernate_snapshot(
    State(c): State<AppState>,
    ApiJson(req): ApiJson<lizard_proto::HibernateDirRequest>,
) -> Result<Json<lizard_proto::HibernationReport>, ApiError> {
    let dir = std::path::PathBuf::from(req.dir);
    Ok(Json(crate::hibernate::snapshot(&c, &dir).await?))
}

/// Recreate the contexts saved in `dir` with their state (server-internal).
async fn hibernate_restore(
    State(c): State<AppState>,
    ApiJson(req): ApiJson<lizard_proto::HibernateDirRequest>,
) -> Result<Json<lizard_proto::HibernationReport>, ApiError> {
    let dir = std::path::PathBuf::from(req.dir);
    Ok(Json(crate::hibernate::restore(&c, &dir).await?))
}

async fn list_contexts(State(c): State<AppState>) -> Json<Vec<Context>> {
    Json(c.list())
}

async fn create_context(
    State(c): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<Context>), ApiError> {
    // An empty body means "all defaults" (a Python context in the default cwd).
    let req: CreateContextRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateContextRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?
    };
    let h = c
        .create_limited(
            req.language.unwrap_or(Language::Python),
            req.cwd,
            req.limits,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(h.info())))
}

/// `POST /contexts/{id}/fork`: a new context holding a copy of the live kernel's state
/// (`Contexts::fork`). The body is optional (`ForkContextRequest`).
async fn fork_context(
    State(c): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<ContextFork>), ApiError> {
    let req: ForkContextRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ForkContextRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?
    };
    let source = ContextId(id);
    let (h, lost) = c.fork(&source, req.limits).await?;
    Ok((
        StatusCode::CREATED,
        Json(ContextFork {
            context: h.info(),
            forked_from: source,
            lost,
        }),
    ))
}

async fn get_context(
    State(c): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Context>, ApiError> {
    Ok(Json(c.get(&ContextId(id))?.info()))
}

async fn delete_context(
    State(c): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.delete(&ContextId(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn restart_context(
    State(c): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Context>, ApiError> {
    Ok(Json(c.restart(&ContextId(id)).await?))
}

async fn interrupt_context(
    State(c): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.get(&ContextId(id))?.interrupt();
    Ok(StatusCode::NO_CONTENT)
}

/// Validate an execute request and resolve its context.
pub async fn resolve_run(
    c: &Contexts,
    req: ExecuteRequest,
) -> Result<(Arc<ContextHandle>, RunRequest), ApiError> {
    if req.context.is_some() && req.language.is_some() {
        return Err(ApiError::invalid(
            "pass either `context` or `language`, not both: a context already has a language",
        ));
    }
    for (k, v) in &req.env {
        if !lizard_proto::valid_env_name(k) {
            return Err(ApiError::invalid(format!(
                "invalid environment variable name {k:?}: use letters, digits and _"
            )));
        }
        if v.contains('\0') {
            return Err(ApiError::invalid(format!(
                "environment variable {k} contains a NUL byte"
            )));
        }
    }
    if req.code.contains('\0') {
        return Err(ApiError::invalid("code contains a NUL byte"));
    }
    let timeout = match req.timeout_ms {
        Some(0) => return Err(ApiError::invalid("timeout_ms must be positive")),
        Some(t) if t > MAX_TIMEOUT_MS => {
            return Err(ApiError::invalid(format!(
                "timeout_ms must be at most {MAX_TIMEOUT_MS}"
            )))
        }
        Some(t) => Some(Duration::from_millis(t)),
        None => None,
    };
    let h = match req.context {
        Some(id) => c.get(&id)?,
        None => {
            c.default_for(req.language.unwrap_or(Language::Python))
                .await?
        }
    };
    Ok((
        h,
        RunRequest {
            code: req.code,
            env: req.env,
            timeout,
        },
    ))
}

/// How the client wants the execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Ndjson,
    Sse,
    Aggregate,
}

pub fn framing(headers: &HeaderMap) -> Framing {
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

async fn execute(
    State(c): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Result<Response, ApiError> {
    let (h, run) = resolve_run(&c, req).await?;
    let rx = c.run(h, run);
    Ok(respond(framing(&headers), rx).await)
}

/// Turn a run's event channel into the response the client asked for.
pub async fn respond(
    framing: Framing,
    mut rx: tokio::sync::mpsc::Receiver<EventFrame>,
) -> Response {
    match framing {
        Framing::Aggregate => {
            let mut ex = Execution::default();
            while let Some(f) = rx.recv().await {
                ex.apply(f.event);
            }
            Json(ex).into_response()
        }
        Framing::Ndjson => {
            let body = ReceiverStream::new(rx).map(|f| {
                let mut line = serde_json::to_vec(&f).unwrap_or_default();
                line.push(b'\n');
                Ok::<_, Infallible>(Bytes::from(line))
            });
            stream_response(NDJSON, Body::from_stream(body))
        }
        Framing::Sse => {
            let body = ReceiverStream::new(rx).map(|f| {
                let data = serde_json::to_string(&f).unwrap_or_default();
                Ok::<_, Infallible>(Bytes::from(format!(
                    "event: {}\ndata: {data}\n\n",
                    f.event.kind()
                )))
            });
            stream_response(SSE, Body::from_stream(body))
        }
    }
}

pub(crate) fn stream_response(content_type: &'static str, body: Body) -> Response {
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

    #[test]
    fn framing_from_accept() {
        let mut h = HeaderMap::new();
        assert_eq!(framing(&h), Framing::Aggregate);
        h.insert(header::ACCEPT, HeaderValue::from_static(NDJSON));
        assert_eq!(framing(&h), Framing::Ndjson);
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        assert_eq!(framing(&h), Framing::Sse);
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
        let e = Outer(3, inner);
        assert_eq!(error_chain(&e), "saving context 3: disk full");
    }
}
