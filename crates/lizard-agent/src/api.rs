//! The agent's HTTP API for contexts: contexts, execute (streamed or aggregated), interrupt,
//! health, and the host-only metering and hibernation routes. `crate::router` merges these with the
//! routes of `crate::commands`, `crate::pty`, `crate::files`, `crate::ports` and `crate::e2b`.
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
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use lizard_proto::{
    Context, ContextFork, ContextId, CreateContextRequest, ErrorCode, EventFrame, ExecuteRequest,
    Execution, ForkContextRequest, Health, Language, NDJSON, SSE,
};
use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use lizard_http::api::{error_chain, stream_response, ApiError, ApiJson, Framing};

/// Largest `timeout_ms` accepted (one day).
const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

impl From<ContextError> for ApiError {
    fn from(e: ContextError) -> Self {
        match &e {
            ContextError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            ContextError::Busy(_)
            | ContextError::NoKernel(_)
            | ContextError::Kernel(crate::kernel::KernelError::ForkRefused { .. }) => {
                ApiError::new(ErrorCode::Conflict, e.to_string())
            }
            ContextError::BadCwd(_)
            | ContextError::CwdDenied(_)
            | ContextError::InvalidLimits(_) => ApiError::invalid(e.to_string()),
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

pub(crate) type AppState = Arc<Contexts>;

/// The routes of this module: health, contexts, execute; with `host`, also those only the server
/// calls (see [`crate::router::host_router`]).
pub(crate) fn routes(host: bool) -> Router<AppState> {
    let r = Router::new()
        .route("/health", get(health))
        .route("/contexts", get(list_contexts).post(create_context))
        .route("/contexts/{id}", get(get_context).delete(delete_context))
        .route("/contexts/{id}/restart", post(restart_context))
        .route("/contexts/{id}/interrupt", post(interrupt_context))
        .route("/contexts/{id}/fork", post(fork_context))
        .route("/execute", post(execute));
    if host {
        r.route("/executions", get(executions))
            // Not below /contexts: the server forwards that prefix to this socket for clients.
            .route("/context-forks/{id}/prepare", post(prepare_fork))
            .route("/context-forks/{id}/adopt", post(adopt_fork))
            .route("/context-forks/{id}/abort", post(abort_fork))
            .route("/hibernate/snapshot", post(hibernate_snapshot))
            .route("/hibernate/restore", post(hibernate_restore))
    } else {
        r
    }
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

pub(crate) async fn method_not_allowed() -> Response {
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
    if req.exact == Some(true) {
        return Err(ApiError::invalid(
            "an exact fork (a checkpoint of the kernel's processes) is made by the server: \
             POST /v1/sandboxes/{id}/contexts/{context_id}/fork",
        ));
    }
    let source = ContextId(id);
    let (h, lost) = c.fork(&source, req.limits).await?;
    Ok((
        StatusCode::CREATED,
        Json(ContextFork {
            context: h.info(),
            forked_from: source,
            lost,
            method: lizard_proto::ForkMethod::Live,
            checkpoint_error: None,
        }),
    ))
}

/// Host only: `POST /context-forks/{id}/prepare` (`Contexts::prepare_fork`): a live fork when it
/// carries everything, else the plan of an exact one.
async fn prepare_fork(
    State(c): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<lizard_proto::PreparedFork>, ApiError> {
    let req: ForkContextRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ForkContextRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?
    };
    let source = ContextId(id);
    Ok(Json(match c.prepare_fork(&source, req.limits).await? {
        crate::context::PreparedForkOut::Live(h, lost) => {
            lizard_proto::PreparedFork::Live(ContextFork {
                context: h.info(),
                forked_from: source,
                lost,
                method: lizard_proto::ForkMethod::Live,
                checkpoint_error: None,
            })
        }
        crate::context::PreparedForkOut::Checkpoint(plan) => {
            lizard_proto::PreparedFork::Checkpoint(plan)
        }
    }))
}

/// Host only: `POST /context-forks/{id}/adopt` (`Contexts::adopt_fork`), `id` the planned fork.
async fn adopt_fork(
    State(c): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<lizard_proto::AdoptFork>,
) -> Result<(StatusCode, Json<ContextFork>), ApiError> {
    let (h, source) = c.adopt_fork(&ContextId(id), req.kernel_pid).await?;
    Ok((
        StatusCode::CREATED,
        Json(ContextFork {
            context: h.info(),
            forked_from: source,
            lost: Vec::new(),
            method: lizard_proto::ForkMethod::Checkpoint,
            checkpoint_error: None,
        }),
    ))
}

/// Host only: `POST /context-forks/{id}/abort` (`Contexts::abort_fork`).
async fn abort_fork(
    State(c): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    c.abort_fork(&ContextId(id))?;
    Ok(StatusCode::NO_CONTENT)
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

async fn execute(
    State(c): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecuteRequest>,
) -> Result<Response, ApiError> {
    let (h, run) = resolve_run(&c, req).await?;
    let rx = c.run(h, run);
    Ok(respond(Framing::from_headers(&headers), rx).await)
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
            let body = coalesced(rx, |f, out| {
                let _ = serde_json::to_writer(&mut *out, f);
                out.push(b'\n');
            })
            .await;
            stream_response(NDJSON, Body::from_stream(body))
        }
        Framing::Sse => {
            let body = coalesced(rx, |f, out| {
                let _ = write!(out, "event: {}\ndata: ", f.event.kind());
                let _ = serde_json::to_writer(&mut *out, f);
                out.extend_from_slice(b"\n\n");
            })
            .await;
            stream_response(SSE, Body::from_stream(body))
        }
    }
}

/// How long a streamed answer's head waits for its `start` (see [`coalesced`]).
const HEAD_WAITS_FOR_START: Duration = Duration::from_millis(2);

/// The frames of `rx`, each written by `encode`, as body chunks: every frame already waiting when
/// one arrives goes into the same chunk, so that events that come together (a result and the
/// run's end) cost one write on each hop to the client, not one each.
///
/// The first frame (`start`, sent as soon as the cell is) is waited for a moment before the
/// answer's head goes out, so that both usually go in one write; a run that waits for its
/// context (another run, a kernel starting) gets its head at once all the same.
async fn coalesced(
    mut rx: tokio::sync::mpsc::Receiver<EventFrame>,
    encode: fn(&EventFrame, &mut Vec<u8>),
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send {
    let first = tokio::time::timeout(HEAD_WAITS_FOR_START, rx.recv())
        .await
        .ok()
        .flatten();
    futures_util::stream::unfold((first, rx), move |(first, mut rx)| async move {
        let first = match first {
            Some(f) => f,
            None => rx.recv().await?,
        };
        let mut out = Vec::with_capacity(256);
        encode(&first, &mut out);
        while let Ok(f) = rx.try_recv() {
            encode(&f, &mut out);
        }
        Some((Ok(Bytes::from(out)), (None, rx)))
    })
}
