//! E2B's code-interpreter API over Lizard's contexts: `POST /execute` (NDJSON lines of
//! `lizard_proto::e2b::ci::Line`), `GET|POST /contexts`, `DELETE /contexts/{id}`,
//! `POST /contexts/{id}/restart`, `GET /health`.
//!
//! Semantics kept from E2B's server: errors are `text/plain` with E2B's statuses (400 for
//! context + language, 404 for an unknown context); `GET /contexts` always lists the default
//! python and javascript contexts; a keepalive line is written every [`KEEPALIVE`] while a cell is
//! quiet, so a client that went away is noticed by a failing write, which drops the run's receiver
//! and interrupts the cell (E2B's SDKs time out on the client side and expect the next run to work).
//! Per-run `env_vars` are the run's `env` (set for that run only). Not here: R, Java and TypeScript
//! kernels (an error names the languages there are).

use crate::api::resolve_run;
use crate::context::Contexts;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use lizard_proto::e2b::ci::{self as wire, Line};
use lizard_proto::{ContextId, ExecuteRequest, ExecutionEvent, Language};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Interval of keepalive lines while a cell produces nothing.
pub const KEEPALIVE: Duration = Duration::from_secs(1);

type St = State<Arc<Contexts>>;

pub fn routes<S: Clone + Send + Sync + 'static>(contexts: Arc<Contexts>) -> Router<S> {
    Router::new()
        .route("/health", get(|| async { Json("OK") }))
        .route("/execute", post(execute))
        .route("/contexts", get(list).post(create))
        .route("/contexts/{id}", delete(remove))
        .route("/contexts/{id}/restart", post(restart))
        .with_state(contexts)
}

/// An E2B-style failure: a status and a plain-text message.
pub struct TextError(StatusCode, String);

impl IntoResponse for TextError {
    fn into_response(self) -> Response {
        let mut r = (self.0, self.1).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    }
}

impl From<lizard_http::api::ApiError> for TextError {
    fn from(e: lizard_http::api::ApiError) -> Self {
        let status = StatusCode::from_u16(e.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        TextError(status, e.0.message)
    }
}

fn bad_request(m: impl Into<String>) -> TextError {
    TextError(StatusCode::BAD_REQUEST, m.into())
}

fn context_not_found(id: &str) -> TextError {
    TextError(StatusCode::NOT_FOUND, format!("Context {id} not found"))
}

fn parse<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, TextError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid request body: {e}")))
}

fn now_rfc3339() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    lizard_proto::e2b::rfc3339_ms(ms)
}

async fn execute(State(c): St, body: Bytes) -> Result<Response, TextError> {
    let req: wire::ExecuteRequest = serde_json::from_slice(&body)
        .map_err(|e| bad_request(format!("invalid request body: {e}")))?;
    if req.context_id.is_some() && req.language.is_some() {
        return Err(bad_request(
            "Only one of context_id or language can be provided",
        ));
    }
    let context = match req.context_id {
        Some(id) => {
            if c.get(&ContextId(id.clone())).is_err() {
                return Err(context_not_found(&id));
            }
            Some(ContextId(id))
        }
        None => None,
    };
    let language = match (&context, req.language.as_deref()) {
        (Some(_), _) => None,
        (None, l) => Some(wire::normalize_language(l).map_err(bad_request)?),
    };
    let (h, run) = resolve_run(
        &c,
        ExecuteRequest {
            code: req.code,
            context,
            language,
            env: req.env_vars.unwrap_or_default(),
            timeout_ms: None,
        },
    )
    .await?;
    let rx = c.run(h, run);
    let body = futures_util::stream::unfold(Some(rx), |state| async move {
        let mut rx = state?;
        match tokio::time::timeout(KEEPALIVE, rx.recv()).await {
            Err(_) => Some((Ok::<_, Infallible>(Line::Keepalive.to_bytes()), Some(rx))),
            Ok(None) => None,
            Ok(Some(frame)) => {
                let last = matches!(frame.event, ExecutionEvent::End { .. });
                let bytes = wire::line(&frame.event, now_rfc3339).to_bytes();
                Some((Ok(bytes), (!last).then_some(rx)))
            }
        }
    });
    // E2B's server sends no Content-Type; the SDKs read lines whatever it is.
    let mut r = Response::new(Body::from_stream(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(lizard_proto::NDJSON),
    );
    Ok(r)
}

fn e2b_context(c: &lizard_proto::Context) -> wire::Context {
    wire::Context {
        id: c.id.0.clone(),
        language: c.language.as_str().to_string(),
        cwd: c.cwd.clone(),
    }
}

/// All contexts; the default python and javascript ones exist from the first call on.
async fn list(State(c): St) -> Result<Json<Vec<wire::Context>>, TextError> {
    for l in [Language::Python, Language::Javascript] {
        c.default_for(l)
            .await
            .map_err(|e| TextError::from(lizard_http::api::ApiError::from(e)))?;
    }
    Ok(Json(c.list().iter().map(e2b_context).collect()))
}

async fn create(State(c): St, body: Bytes) -> Result<Json<wire::Context>, TextError> {
    let req: wire::CreateContextRequest = parse(&body)?;
    let language = wire::normalize_language(req.language.as_deref()).map_err(bad_request)?;
    let h = c
        .create(language, req.cwd)
        .await
        .map_err(|e| TextError::from(lizard_http::api::ApiError::from(e)))?;
    Ok(Json(e2b_context(&h.info())))
}

async fn remove(State(c): St, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    c.delete(&ContextId(id.clone()))
        .await
        .map_err(|_| context_not_found(&id))?;
    Ok(Json(()))
}

async fn restart(State(c): St, Path(id): Path<String>) -> Result<Json<()>, TextError> {
    let cid = ContextId(id.clone());
    c.get(&cid).map_err(|_| context_not_found(&id))?;
    c.restart(&cid)
        .await
        .map_err(|e| TextError::from(lizard_http::api::ApiError::from(e)))?;
    Ok(Json(()))
}
