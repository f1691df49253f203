//! The server's HTTP API (`/v1/...`): authentication, projects, sandboxes, volumes, usage, metrics,
//! and the agent routes forwarded into each sandbox.
//!
//! Handlers are thin: authenticate, parse, call `crate::sandboxes` / the store, map the error to the
//! one `{code, message}` body. A key never learns about another project's objects: they are 404s.

use crate::auth::{self, Principal};
use crate::sandboxes::metering;
use crate::sandboxes::{info, CreateSandbox};
use crate::store::{now_ms, StoredState, VolumeRow};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, patch, post};
use axum::{Json, Router};
use lizard_proto::{
    CreateProjectRequest, CreateSandboxRequest, CreateVolumeRequest, ErrorCode, ProjectCreated,
    ProjectSettings, ProjectUsage, SandboxInfo, SetTimeoutRequest, UpdateProjectRequest,
    VolumeInfo,
};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::state::{visible, AppState, Auth};
use lizard_http::api::{stream_response, Framing};
use lizard_http::api::{ApiError, ApiJson, ApiQuery};

type St = State<Arc<AppState>>;

/// Lizard's own routes: `/health`, `/metrics`, `/v1/...` and the agent routes forwarded into
/// each sandbox ([`crate::router`] adds E2B's, the fallbacks and the layers).
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/projects", get(list_projects).post(create_project))
        .route(
            "/v1/projects/{project}",
            get(get_project).patch(update_project),
        )
        .route(
            "/v1/projects/{project}/secrets",
            get(list_secrets).post(set_secret),
        )
        .route(
            "/v1/projects/{project}/secrets/{name}",
            axum::routing::delete(delete_secret),
        )
        .route("/v1/projects/{project}/usage", get(project_usage))
        .route("/v1/projects/{project}/executions", get(project_executions))
        .route("/v1/audit", get(list_audit))
        .route("/v1/volumes", get(list_volumes).post(create_volume))
        .route(
            "/v1/volumes/{volume}",
            get(get_volume).delete(delete_volume),
        )
        .route(
            "/v1/templates",
            get(list_templates)
                .post(build_template)
                // A build context of up to 64 MiB, base64-encoded in the JSON body.
                .layer(DefaultBodyLimit::max(TEMPLATE_BODY_BYTES)),
        )
        .route(
            "/v1/templates/{name}",
            get(get_template).delete(delete_template),
        )
        .route("/v1/sandboxes", get(list_sandboxes).post(create_sandbox))
        .route("/v1/sandboxes/{id}", get(get_sandbox).delete(kill_sandbox))
        .route("/v1/sandboxes/{id}/timeout", post(set_timeout))
        .route("/v1/sandboxes/{id}/network", patch(set_network))
        .route("/v1/sandboxes/{id}/network/log", get(network_log))
        .route("/v1/sandboxes/{id}/metrics", get(sandbox_metrics))
        .route("/v1/sandboxes/{id}/pause", post(pause_sandbox))
        .route("/v1/sandboxes/{id}/resume", post(resume_sandbox))
        .route("/v1/sandboxes/{id}/hibernate", post(hibernate_sandbox))
        .route("/v1/sandboxes/{id}/snapshots", post(create_snapshot))
        .route("/v1/sandboxes/{id}/fork", post(fork_sandbox))
        .route("/v1/snapshots", get(list_snapshots))
        .route(
            "/v1/snapshots/{snapshot}",
            get(get_snapshot).delete(delete_snapshot),
        )
        .route("/v1/sandboxes/{id}/execute", any(crate::proxy::forward))
        .route("/v1/sandboxes/{id}/contexts", any(crate::proxy::forward))
        .route("/v1/sandboxes/{id}/contexts/{*rest}", any(contexts_rest))
        .route("/v1/sandboxes/{id}/commands", any(crate::proxy::forward))
        .route(
            "/v1/sandboxes/{id}/commands/{*rest}",
            any(crate::proxy::forward),
        )
        .route(
            "/v1/sandboxes/{id}/ports/{port}",
            any(crate::proxy::forward),
        )
        .route(
            "/v1/sandboxes/{id}/ports/{port}/",
            any(crate::proxy::forward),
        )
        .route(
            "/v1/sandboxes/{id}/ports/{port}/{*rest}",
            any(crate::proxy::forward).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/sandboxes/{id}/pty", any(crate::proxy::forward))
        .route("/v1/sandboxes/{id}/pty/{*rest}", any(crate::proxy::forward))
        // File bodies stream through without a size limit (the proxy never buffers them).
        .route(
            "/v1/sandboxes/{id}/files",
            any(crate::proxy::forward).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/sandboxes/{id}/files/{*rest}",
            any(crate::proxy::forward),
        )
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi_json(),
    )
        .into_response()
}

async fn create_sandbox(
    State(st): St,
    Auth(who): Auth,
    ApiJson(req): ApiJson<CreateSandboxRequest>,
) -> Result<Response, ApiError> {
    if let Some(p) = &req.project {
        if !auth::valid_project_name(p) {
            return Err(ApiError::invalid(
                "project names are 1-63 characters of letters, digits, '.', '_' and '-'",
            ));
        }
    }
    let project = who.project_for(req.project.as_deref()).ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "project not found (this API key belongs to another project)",
        )
    })?;
    let wants_egress = req.network.as_ref().is_some_and(|n| !n.egress.is_none());
    // Admin keys may grant egress to any project; a project key only to a project created with
    // `allow_egress`.
    if wants_egress
        && who != Principal::Admin
        && !st.sandboxes.store.project_allows_egress(&project)?
    {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("project {project:?} may not grant internet egress (an admin can create a project with allow_egress)"),
        ));
    }
    if let Some(snapshot_id) = &req.snapshot_id {
        return create_from_snapshot(&st, &who, project, snapshot_id.clone(), req).await;
    }
    let sb = st
        .sandboxes
        .create_detached(CreateSandbox {
            project,
            template: req.template,
            timeout_ms: req.timeout_ms,
            metadata: req.metadata,
            envs: req.env,
            limits: req.limits.unwrap_or_default(),
            on_timeout: req.on_timeout.unwrap_or_default(),
            volumes: req.volumes,
            network: req.network.unwrap_or_default(),
        })
        .await?;
    let mut r = (StatusCode::CREATED, Json(info(&sb))).into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: sb.id.clone(),
        project: Some(sb.project.clone()),
    });
    Ok(r)
}

/// A snapshot the caller may see (404 otherwise, whether it exists or not).
fn visible_snapshot(
    st: &AppState,
    who: &Principal,
    id: &str,
) -> Result<crate::store::SnapshotRow, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("snapshot {id:?} not found"));
    if !crate::sandboxes::snapshot::valid_snapshot_id(id) {
        return Err(not_found());
    }
    match st.sandboxes.store.get_snapshot(id)? {
        Some(r) if who.can_see(&r.project) => Ok(r),
        _ => Err(not_found()),
    }
}

/// `POST /v1/sandboxes` with `snapshot_id`: a clone. Only the new sandbox's own lifetime and
/// labels may be given; the rest is the snapshot's.
async fn create_from_snapshot(
    st: &Arc<AppState>,
    who: &Principal,
    project: String,
    snapshot_id: String,
    req: CreateSandboxRequest,
) -> Result<Response, ApiError> {
    if req.template.is_some()
        || !req.env.is_empty()
        || req.limits.is_some()
        || !req.volumes.is_empty()
        || req.network.is_some()
    {
        return Err(ApiError::invalid(
            "a sandbox from a snapshot takes the snapshot's template, env, limits, volumes and \
             network: only timeout_ms, metadata and on_timeout may be given with snapshot_id",
        ));
    }
    let row = visible_snapshot(st, who, &snapshot_id)?;
    if row.project != project {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("snapshot {snapshot_id:?} not found"),
        ));
    }
    let (sb, report) = st
        .sandboxes
        .clone_detached(
            row,
            crate::sandboxes::snapshot::CloneRequest {
                project,
                timeout_ms: req.timeout_ms,
                metadata: req.metadata,
                on_timeout: req.on_timeout,
            },
        )
        .await?;
    let mut r = (
        StatusCode::CREATED,
        Json(crate::sandboxes::snapshot::clone_info(&sb, report)),
    )
        .into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: sb.id.clone(),
        project: Some(sb.project.clone()),
    });
    Ok(r)
}

/// A JSON body that may be absent (empty): `T::default()` then.
fn optional_body<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))
}

/// `POST /v1/sandboxes/{id}/snapshots`: save a running or paused sandbox's memory state and disk.
async fn create_snapshot(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
    body: bytes::Bytes,
) -> Result<Response, ApiError> {
    let req: lizard_proto::CreateSnapshotRequest = optional_body(&body)?;
    let sb = visible(&st, &who, &id)?;
    let row = st.sandboxes.snapshot_detached(&sb.id, req.metadata).await?;
    let mut r = (
        StatusCode::CREATED,
        Json(crate::sandboxes::snapshot::snapshot_info(&row)),
    )
        .into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: row.id.clone(),
        project: Some(row.project.clone()),
    });
    Ok(r)
}

/// `POST /v1/sandboxes/{id}/fork`: a new running sandbox with the source's memory state and
/// files, in one call.
/// `/v1/sandboxes/{id}/contexts/{*rest}`: forwarded to the agent as it is, but for
/// `POST …/contexts/{context_id}/fork` — a live fork of the context's kernel, or an exact one (a
/// CRIU checkpoint of its processes) when the live fork would lose something, which the server
/// makes (`Sandboxes::fork_context`).
async fn contexts_rest(
    State(st): St,
    Auth(who): Auth,
    Path((id, rest)): Path<(String, String)>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let ctx = rest.strip_suffix("/fork").filter(|c| !c.contains('/'));
    let (Some(ctx), &axum::http::Method::POST) = (ctx, req.method()) else {
        return crate::proxy::forward(State(st), Auth(who), req).await;
    };
    let body = axum::body::to_bytes(req.into_body(), 64 * 1024)
        .await
        .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?;
    let fork: lizard_proto::ForkContextRequest = optional_body(&body)?;
    let sb = visible(&st, &who, &id)?;
    let f = st.sandboxes.fork_context(&sb, ctx, fork).await?;
    Ok((StatusCode::CREATED, Json(f)).into_response())
}

async fn fork_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
    body: bytes::Bytes,
) -> Result<Response, ApiError> {
    let req: lizard_proto::ForkSandboxRequest = optional_body(&body)?;
    let sb = visible(&st, &who, &id)?;
    let (new, report) = st
        .sandboxes
        .fork_detached(
            &sb.id,
            crate::sandboxes::snapshot::CloneRequest {
                project: sb.project.clone(),
                timeout_ms: req.timeout_ms,
                metadata: req.metadata,
                on_timeout: None,
            },
        )
        .await?;
    let mut r = (
        StatusCode::CREATED,
        Json(crate::sandboxes::snapshot::clone_info(&new, report)),
    )
        .into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: new.id.clone(),
        project: Some(new.project.clone()),
    });
    Ok(r)
}

async fn list_snapshots(
    State(st): St,
    Auth(who): Auth,
    ApiQuery(q): ApiQuery<lizard_proto::SnapshotQuery>,
) -> Result<Json<Vec<lizard_proto::SnapshotInfo>>, ApiError> {
    let project = match (&who, q.project.as_deref()) {
        (Principal::Admin, None) => None,
        (_, named) => Some(project_of(&who, named)?),
    };
    let rows =
        st.sandboxes
            .store
            .list_snapshots(project.as_deref(), q.sandbox_id.as_deref(), false)?;
    Ok(Json(
        rows.iter()
            .map(crate::sandboxes::snapshot::snapshot_info)
            .collect(),
    ))
}

async fn get_snapshot(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<lizard_proto::SnapshotInfo>, ApiError> {
    let row = visible_snapshot(&st, &who, &id)?;
    Ok(Json(crate::sandboxes::snapshot::snapshot_info(&row)))
}

async fn delete_snapshot(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let row = visible_snapshot(&st, &who, &id)?;
    st.sandboxes.delete_snapshot(&row).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Largest `POST /v1/templates` body: the base64 of the largest context, and the rest.
const TEMPLATE_BODY_BYTES: usize = lizard_proto::template::MAX_CONTEXT_BYTES / 3 * 4 + 1024 * 1024;

/// `POST /v1/templates`: start a build (streamed with an NDJSON/SSE `Accept`, else 202). The
/// answer names the template for the audit log (`audit::Created`), so the gate never reads a
/// streamed body.
async fn build_template(
    st: St,
    auth: Auth,
    headers: axum::http::HeaderMap,
    ApiJson(req): ApiJson<lizard_proto::BuildTemplateRequest, TEMPLATE_BODY_BYTES>,
) -> Result<Response, ApiError> {
    let project = project_of(&auth.0, req.project.as_deref())?;
    let created = crate::audit::Created {
        id: req.name.clone(),
        project: Some(project.clone()),
    };
    let mut r = build_template_inner(st, auth, headers, req, project).await?;
    r.extensions_mut().insert(created);
    Ok(r)
}

async fn build_template_inner(
    State(st): St,
    Auth(who): Auth,
    headers: axum::http::HeaderMap,
    req: lizard_proto::BuildTemplateRequest,
    project: String,
) -> Result<Response, ApiError> {
    use base64::Engine as _;
    if req.public && who != Principal::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "only an admin key may publish a template to every project",
        ));
    }
    if let Some(sandbox) = &req.from_sandbox {
        if req.dockerfile.is_some() || req.context.is_some() || !req.build_args.is_empty() {
            return Err(ApiError::invalid(
                "from_sandbox takes no dockerfile, context or build_args",
            ));
        }
        // The sandbox must be the caller's (404 otherwise, like any sandbox route).
        let sb = visible(&st, &who, sandbox)?;
        if sb.project != project {
            return Err(ApiError::not_found("sandbox"));
        }
        let info = st
            .templates
            .from_sandbox(&project, &req.name, sandbox, req.public)
            .await?;
        return Ok((StatusCode::CREATED, Json(info)).into_response());
    }
    let Some(dockerfile) = req.dockerfile else {
        return Err(ApiError::invalid("a template build needs a dockerfile"));
    };
    let context = match &req.context {
        None => bytes::Bytes::new(),
        Some(b64) => {
            if b64.len() > lizard_proto::template::MAX_CONTEXT_BYTES / 3 * 4 + 4 {
                return Err(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the build context is larger than 64 MiB",
                ));
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| ApiError::invalid(format!("context: not base64: {e}")))?;
            if raw.len() > lizard_proto::template::MAX_CONTEXT_BYTES {
                return Err(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the build context is larger than 64 MiB",
                ));
            }
            bytes::Bytes::from(raw)
        }
    };
    crate::sandboxes::check_bounds("build_args", &req.build_args, crate::sandboxes::ENV_BOUNDS)?;
    let framing = Framing::from_headers(&headers);
    let started = st
        .templates
        .start(crate::templates::BuildRequest {
            project,
            name: req.name,
            dockerfile,
            context,
            build_args: req.build_args,
            public: req.public,
            cancel_on_disconnect: req.cancel_on_disconnect,
        })
        .await?;
    let (info, rx) = match started {
        crate::templates::Started::CacheHit(info) => {
            let Some(ct) = framing.content_type() else {
                return Ok((StatusCode::OK, Json(info)).into_response());
            };
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let _ = tx
                .send(lizard_proto::TemplateBuildEvent::Done {
                    template: Box::new(info),
                })
                .await;
            return Ok(event_stream(framing, ct, rx));
        }
        crate::templates::Started::Building(info, rx) => (info, rx),
    };
    match framing.content_type() {
        Some(ct) => Ok(event_stream(framing, ct, rx)),
        // The build goes on without a listener.
        None => Ok((StatusCode::ACCEPTED, Json(info)).into_response()),
    }
}

/// Build events in the stream `framing` names, until the last one.
fn event_stream(
    framing: Framing,
    content_type: &'static str,
    rx: tokio::sync::mpsc::Receiver<lizard_proto::TemplateBuildEvent>,
) -> Response {
    let stream = futures_util::stream::unfold(rx, move |mut rx| async move {
        let ev = rx.recv().await?;
        let kind = serde_json::to_value(&ev)
            .ok()
            .and_then(|v| v["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let chunk = framing.frame(&kind, &ev);
        Some((Ok::<_, std::convert::Infallible>(chunk), rx))
    });
    stream_response(content_type, axum::body::Body::from_stream(stream))
}

async fn list_templates(
    State(st): St,
    Auth(who): Auth,
    ApiQuery(q): ApiQuery<lizard_proto::TemplateQuery>,
) -> Result<Json<lizard_proto::TemplateList>, ApiError> {
    let project = match (&who, q.project.as_deref()) {
        // An admin lists every project's templates unless it names one.
        (Principal::Admin, None) => None,
        (_, named) => Some(project_of(&who, named)?),
    };
    let templates = st.templates.list(project.as_deref())?;
    Ok(Json(lizard_proto::TemplateList { templates }))
}

async fn get_template(
    State(st): St,
    Auth(who): Auth,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::TemplateQuery>,
) -> Result<Json<lizard_proto::TemplateInfo>, ApiError> {
    let project = project_of(&who, q.project.as_deref())?;
    Ok(Json(st.templates.get(&project, &name)?))
}

async fn delete_template(
    State(st): St,
    Auth(who): Auth,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::TemplateQuery>,
) -> Result<StatusCode, ApiError> {
    let project = project_of(&who, q.project.as_deref())?;
    st.templates.delete(&project, &name)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The project a request names (or the key's own), checked; 404 for another project's.
fn project_of(who: &Principal, named: Option<&str>) -> Result<String, ApiError> {
    if let Some(p) = named {
        if !auth::valid_project_name(p) {
            return Err(ApiError::invalid(
                "project names are 1-63 characters of letters, digits, '.', '_' and '-'",
            ));
        }
    }
    who.project_for(named).ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "project not found (this API key belongs to another project)",
        )
    })
}

async fn create_volume(
    State(st): St,
    Auth(who): Auth,
    ApiJson(req): ApiJson<CreateVolumeRequest>,
) -> Result<(StatusCode, Json<VolumeInfo>), ApiError> {
    let project = project_of(&who, req.project.as_deref())?;
    let v = &st.sandboxes.volumes;
    let row = v.create(&project, &req.name, req.size_limit_bytes).await?;
    Ok((StatusCode::CREATED, Json(v.info(&row, Vec::new()))))
}

fn volume_info(st: &AppState, row: &VolumeRow) -> VolumeInfo {
    st.sandboxes
        .volumes
        .info(row, st.sandboxes.volume_users(&row.id))
}

async fn list_volumes(
    State(st): St,
    Auth(who): Auth,
    ApiQuery(q): ApiQuery<lizard_proto::VolumeQuery>,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    let project = match (&who, q.project.as_deref()) {
        // An admin lists every project's volumes unless it names one.
        (Principal::Admin, None) => None,
        (_, named) => Some(project_of(&who, named)?),
    };
    let rows = st.sandboxes.store.list_volumes(project.as_deref(), false)?;
    Ok(Json(rows.iter().map(|r| volume_info(&st, r)).collect()))
}

/// A live volume the caller may see, by id (`vol_…`) or by name in the named (or the key's)
/// project; 404 otherwise.
fn find_volume(
    st: &AppState,
    who: &Principal,
    key: &str,
    project: Option<&str>,
) -> Result<VolumeRow, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("volume {key:?} not found"));
    if key.starts_with("vol_") && project.is_none() {
        return match st.sandboxes.store.get_volume(key)? {
            Some(r) if who.can_see(&r.project) => Ok(r),
            _ => Err(not_found()),
        };
    }
    let project = project_of(who, project)?;
    st.sandboxes
        .store
        .find_volume(&project, key)?
        .ok_or_else(not_found)
}

async fn get_volume(
    State(st): St,
    Auth(who): Auth,
    Path(key): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::VolumeQuery>,
) -> Result<Json<VolumeInfo>, ApiError> {
    let row = find_volume(&st, &who, &key, q.project.as_deref())?;
    Ok(Json(volume_info(&st, &row)))
}

async fn delete_volume(
    State(st): St,
    Auth(who): Auth,
    Path(key): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::VolumeQuery>,
) -> Result<StatusCode, ApiError> {
    let row = find_volume(&st, &who, &key, q.project.as_deref())?;
    st.sandboxes
        .delete_volume(&row, q.force.unwrap_or(false))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_sandboxes(
    State(st): St,
    Auth(who): Auth,
    ApiQuery(q): ApiQuery<lizard_proto::SandboxListQuery>,
) -> Result<Json<Vec<SandboxInfo>>, ApiError> {
    let mut want_meta = BTreeMap::new();
    if let Some(m) = &q.metadata {
        for pair in m.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| ApiError::invalid("metadata filter is k=v[,k=v...]"))?;
            want_meta.insert(k.to_string(), v.to_string());
        }
    }
    let state = match q.state.as_deref() {
        None => None,
        Some("running") => Some(StoredState::Running),
        Some("paused") => Some(StoredState::Paused),
        Some("hibernated") => Some(StoredState::Hibernated),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unknown state {other:?}: expected running, paused or hibernated"
            )))
        }
    };
    let mut out: Vec<SandboxInfo> = st
        .sandboxes
        .all()
        .into_iter()
        .filter(|sb| who.can_see(&sb.project))
        .filter(|sb| q.project.as_deref().is_none_or(|p| p == sb.project))
        .filter(|sb| state.is_none_or(|s| s == sb.state()))
        .filter(|sb| want_meta.iter().all(|(k, v)| sb.metadata.get(k) == Some(v)))
        .map(|sb| info(&sb))
        .collect();
    out.sort_by(|a, b| {
        b.created_at_ms
            .cmp(&a.created_at_ms)
            .then(a.sandbox_id.cmp(&b.sandbox_id))
    });
    Ok(Json(out))
}

async fn get_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let sb = visible(&st, &who, &id)?;
    Ok(Json(info(&sb)))
}

async fn kill_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    visible(&st, &who, &id)?;
    st.sandboxes.kill(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn pause_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    visible(&st, &who, &id)?;
    let sb = st.sandboxes.pause(&id).await?;
    Ok(Json(info(&sb)))
}

async fn resume_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    visible(&st, &who, &id)?;
    let (sb, restore) = st.sandboxes.resume(&id).await?;
    Ok(Json(SandboxInfo {
        restore,
        ..info(&sb)
    }))
}

async fn hibernate_sandbox(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    visible(&st, &who, &id)?;
    let (sb, hibernation) = st.sandboxes.hibernate(&id).await?;
    Ok(Json(SandboxInfo {
        hibernation,
        ..info(&sb)
    }))
}

async fn set_timeout(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SetTimeoutRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let sb = visible(&st, &who, &id)?;
    st.sandboxes.set_timeout(&id, req.timeout_ms)?;
    Ok(Json(info(&sb)))
}

/// `PATCH /v1/sandboxes/{id}/network`: replace a sandbox's egress rules and/or its inject rules,
/// live (an absent part stays). Opening anything needs the project's `allow_egress`, as at create.
async fn set_network(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
    ApiJson(update): ApiJson<lizard_proto::UpdateNetworkRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let sb = visible(&st, &who, &id)?;
    // Only what changes is checked (the sandbox's current egress was allowed when it was set).
    let opens = match &update.egress {
        None | Some(lizard_proto::Egress::None) => false,
        Some(lizard_proto::Egress::All) => true,
        Some(lizard_proto::Egress::Rules(r)) => !r.effective_allow().is_empty(),
    };
    if opens && who != Principal::Admin && !st.sandboxes.store.project_allows_egress(&sb.project)? {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!(
                "project {:?} may not grant internet egress (an admin can allow it: PATCH /v1/projects/{{project}})",
                sb.project
            ),
        ));
    }
    let sb = st.sandboxes.set_network(&id, update).await?;
    Ok(Json(info(&sb)))
}

/// What a sandbox did through the package registries' mirror and its egress, and what it was
/// refused.
async fn network_log(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> Result<Json<lizard_proto::NetworkLog>, ApiError> {
    Ok(Json(visible(&st, &who, &id)?.network_log()))
}

/// `GET /v1/sandboxes/{id}/metrics?from=&to=`: the usage sampler's samples of the sandbox
/// (every `--sample-interval-s`, the last hour), oldest first; without `from`/`to` and before the
/// sampler has two samples, one taken now.
async fn sandbox_metrics(
    State(st): St,
    Auth(who): Auth,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::MetricsQuery>,
) -> Result<Json<Vec<lizard_proto::MetricSample>>, ApiError> {
    let sb = visible(&st, &who, &id)?;
    let cores = (sb.limits.cpu_millicores as f64 / 1000.0).max(0.001);
    let mut points = sb
        .metrics
        .window(q.from.unwrap_or(0), q.to.unwrap_or(u64::MAX), cores);
    if points.is_empty() && q.from.is_none() && q.to.is_none() {
        let (memory_bytes, pct) = metering::instant(&sb).await;
        let point = metering::Point {
            at_ms: now_ms(),
            cpu_ns: 0,
            memory_bytes,
            disk_used_bytes: metering::disk_used_bytes(&sb),
        };
        points.push((point, pct));
    }
    Ok(Json(
        points
            .into_iter()
            .map(|(p, cpu_pct)| lizard_proto::MetricSample {
                at_ms: p.at_ms,
                cpu_pct,
                memory_bytes: p.memory_bytes,
                disk_used_bytes: p.disk_used_bytes,
            })
            .collect(),
    ))
}

async fn list_projects(State(st): St, Auth(who): Auth) -> Result<Json<Vec<String>>, ApiError> {
    Ok(Json(match who {
        Principal::Admin => st.sandboxes.store.list_projects()?,
        Principal::Project(p) => vec![p],
    }))
}

/// The project of a `/v1/projects/{project}/...` call, if `who` may see it (an admin key every
/// project, a project key its own) and it exists; else a 404 that does not tell which.
fn visible_project(st: &AppState, who: &Principal, project: &str) -> Result<(), ApiError> {
    let visible = match who {
        Principal::Admin => true,
        Principal::Project(p) => p == project,
    };
    if !visible || !st.sandboxes.store.project_exists(project)? {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no project {project:?}"),
        ));
    }
    Ok(())
}

/// `POST /v1/projects/{project}/secrets`: set a secret (201 new, 200 replaced). The answer, like
/// every other, holds no value.
async fn set_secret(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
    ApiJson(req): ApiJson<lizard_proto::SetSecretRequest>,
) -> Result<Response, ApiError> {
    visible_project(&st, &who, &project)?;
    use crate::secrets::{valid_name, valid_value, SecretError, MAX_PER_PROJECT};
    if !valid_name(&req.name) {
        return Err(ApiError::invalid(
            SecretError::BadName(req.name).to_string(),
        ));
    }
    if !valid_value(&req.value) {
        return Err(ApiError::invalid(SecretError::BadValue.to_string()));
    }
    let sealed = st
        .sandboxes
        .cfg
        .secrets
        .seal(&project, &req.name, &req.value)
        .map_err(|e| ApiError::internal(&e))?;
    let store = &st.sandboxes.store;
    let new = store.put_secret(&project, &req.name, &sealed, MAX_PER_PROJECT)?;
    let info = secret_infos(store, &project)?
        .into_iter()
        .find(|i| i.name == req.name)
        .ok_or_else(|| ApiError::new(ErrorCode::Conflict, "the secret was deleted meanwhile"))?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)).into_response())
}

/// `GET /v1/projects/{project}/secrets`: names and times only.
async fn list_secrets(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
) -> Result<Json<Vec<lizard_proto::SecretInfo>>, ApiError> {
    visible_project(&st, &who, &project)?;
    Ok(Json(secret_infos(&st.sandboxes.store, &project)?))
}

/// The project's secrets as the API shows them (names and times).
fn secret_infos(
    store: &crate::store::Store,
    project: &str,
) -> Result<Vec<lizard_proto::SecretInfo>, ApiError> {
    Ok(store
        .list_secrets(project)?
        .into_iter()
        .map(|r| lizard_proto::SecretInfo {
            project: project.to_string(),
            name: r.name,
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
        })
        .collect())
}

/// `DELETE /v1/projects/{project}/secrets/{name}`: running sandboxes keep the value they were
/// given (until their next start); new ones that name it are refused.
async fn delete_secret(
    State(st): St,
    Auth(who): Auth,
    Path((project, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    visible_project(&st, &who, &project)?;
    if st.sandboxes.store.delete_secret(&project, &name)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no secret {name:?} in project {project:?}"),
        ))
    }
}

/// A project's settings: an admin key sees every project's, a project key its own.
async fn get_project(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
) -> Result<Json<ProjectSettings>, ApiError> {
    let visible = match &who {
        Principal::Admin => true,
        Principal::Project(p) => *p == project,
    };
    let store = &st.sandboxes.store;
    if !visible || !store.project_exists(&project)? {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no project {project:?}"),
        ));
    }
    Ok(Json(ProjectSettings {
        allow_egress: store.project_allows_egress(&project)?,
        package_registries: store.project_allows_packages(&project)?,
        project,
    }))
}

/// Change a project's settings (admin keys only): they apply to its sandboxes' next starts.
async fn update_project(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
    ApiJson(req): ApiJson<UpdateProjectRequest>,
) -> Result<Json<ProjectSettings>, ApiError> {
    if who != Principal::Admin {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "only an admin key may change a project's settings",
        ));
    }
    let store = &st.sandboxes.store;
    if !store.update_project(&project, req.allow_egress, req.package_registries)? {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no project {project:?}"),
        ));
    }
    get_project(State(st), Auth(who), Path(project)).await
}

async fn create_project(
    State(st): St,
    Auth(who): Auth,
    ApiJson(req): ApiJson<CreateProjectRequest>,
) -> Result<(StatusCode, Json<ProjectCreated>), ApiError> {
    if who != Principal::Admin {
        // Not a 403 with details: a project key simply has no such route.
        return Err(ApiError::new(ErrorCode::NotFound, "no such route"));
    }
    if !auth::valid_project_name(&req.name) {
        return Err(ApiError::invalid(
            "project names are 1-63 characters of letters, digits, '.', '_' and '-'",
        ));
    }
    let store = &st.sandboxes.store;
    store.create_project(&req.name, req.allow_egress, req.package_registries)?;
    let api_key = auth::issue_key(store, Some(&req.name))?;
    Ok((
        StatusCode::CREATED,
        Json(ProjectCreated {
            project: req.name,
            api_key,
        }),
    ))
}

async fn project_usage(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::UsageQuery>,
) -> Result<Json<ProjectUsage>, ApiError> {
    let store = &st.sandboxes.store;
    if !who.can_see(&project) || !store.project_exists(&project)? {
        return Err(ApiError::not_found("project"));
    }
    // Bring live sandboxes' numbers up to date first.
    for sb in st.sandboxes.all() {
        if sb.project == project {
            metering::sample(&st.sandboxes, &sb).await;
        }
    }
    let from = q.from.unwrap_or(0);
    let to = q.to.unwrap_or_else(|| now_ms() + 1);
    let rows = store.usage_rows(Some(&project), from, to)?;
    let s = st.sandboxes.clone();
    let p = project.clone();
    let _ = tokio::task::spawn_blocking(move || s.volumes.sample(Some(&p))).await;
    let volumes = store.list_volumes(Some(&project), true)?;
    let mut totals = metering::totals(&rows);
    totals.volume_gib_hours = volumes.iter().fold(0.0, |t, v| t + v.gib_hours);
    let now = now_ms();
    let snapshots: Vec<lizard_proto::SnapshotUsage> = store
        .list_snapshots(Some(&project), None, true)?
        .iter()
        .map(|r| lizard_proto::SnapshotUsage {
            snapshot_id: r.id.clone(),
            sandbox_id: r.sandbox_id.clone(),
            size_bytes: r.size_bytes,
            gib_hours: crate::sandboxes::snapshot::gib_hours(r, now),
            deleted: r.deleted_at_ms.is_some(),
        })
        .collect();
    totals.snapshot_gib_hours = snapshots.iter().fold(0.0, |t, s| t + s.gib_hours);
    Ok(Json(ProjectUsage {
        project,
        from_ms: from,
        to_ms: to,
        totals,
        sandboxes: rows.iter().map(Into::into).collect(),
        volumes: volumes.iter().map(Into::into).collect(),
        snapshots,
    }))
}

/// Per-execution usage (wall, CPU, peak RSS) of a project's sandboxes.
async fn project_executions(
    State(st): St,
    Auth(who): Auth,
    Path(project): Path<String>,
    ApiQuery(q): ApiQuery<lizard_proto::ExecutionsQuery>,
) -> Result<Json<Vec<lizard_proto::ExecutionRow>>, ApiError> {
    let store = &st.sandboxes.store;
    if !who.can_see(&project) || !store.project_exists(&project)? {
        return Err(ApiError::not_found("project"));
    }
    for sb in st.sandboxes.all() {
        if sb.project == project && q.sandbox.as_deref().is_none_or(|id| id == sb.id) {
            metering::sample(&st.sandboxes, &sb).await;
        }
    }
    Ok(Json(store.executions(
        &project,
        q.sandbox.as_deref(),
        q.from.unwrap_or(0),
        q.to.unwrap_or_else(|| now_ms() + 1),
        q.limit.unwrap_or(1000).min(10_000),
    )?))
}

async fn metrics(State(st): St, Auth(who): Auth) -> Result<Response, ApiError> {
    let store = &st.sandboxes.store;
    let project = match &who {
        Principal::Admin => None,
        Principal::Project(p) => Some(p.as_str()),
    };
    let rows = store.usage_rows(project, 0, now_ms() + 1)?;
    let live: Vec<(String, StoredState)> = st
        .sandboxes
        .all()
        .into_iter()
        .filter(|sb| who.can_see(&sb.project))
        .map(|sb| (sb.project.clone(), sb.state()))
        .collect();
    let mut text = metering::prometheus(&rows, &live, &store.list_volumes(project, true)?);
    // The package registries' mirror is the server's, shared by every project: admins only.
    if let (Principal::Admin, Some(proxy)) = (&who, &st.sandboxes.cfg.packages) {
        text.push_str(&package_metrics(&proxy.stats()));
    }
    // The warm pool is the server's too.
    if who == Principal::Admin {
        text.push_str(&pool_metrics(&st.sandboxes));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// The warm pool's gauges in Prometheus' text format.
fn pool_metrics(sandboxes: &lizard_lifecycle::sandboxes::Sandboxes) -> String {
    format!(
        "# HELP lizard_pool_ready Ready sandboxes in the warm pool.\n\
         # TYPE lizard_pool_ready gauge\nlizard_pool_ready {}\n\
         # HELP lizard_pool_target The warm pool's size now (--pool-size, or the largest recent \
         burst up to --pool-max).\n# TYPE lizard_pool_target gauge\nlizard_pool_target {}\n",
        sandboxes.pool_ready(),
        sandboxes.pool_target()
    )
}

/// The package registries' mirror's counters in Prometheus' text format.
fn package_metrics(st: &lizard_packages::Stats) -> String {
    use std::fmt::Write as _;
    let t = &st.total;
    let mut out = String::new();
    for (name, help, kind, value) in [
        (
            "lizard_package_requests_total",
            "Requests to the package registries' mirror, refused ones included.",
            "counter",
            t.requests,
        ),
        (
            "lizard_package_cache_hits_total",
            "Mirror downloads served from the host's package cache.",
            "counter",
            t.cache_hits,
        ),
        (
            "lizard_package_cache_misses_total",
            "Mirror downloads fetched from a registry (and kept if cacheable).",
            "counter",
            t.cache_misses,
        ),
        (
            "lizard_package_refused_total",
            "Mirror requests refused (other destinations, registries turned off).",
            "counter",
            t.refused,
        ),
        (
            "lizard_package_upstream_bytes_total",
            "Body bytes the mirror fetched from registries.",
            "counter",
            t.upstream_bytes,
        ),
        (
            "lizard_package_served_bytes_total",
            "Body bytes the mirror sent to sandboxes.",
            "counter",
            t.served_bytes,
        ),
        (
            "lizard_package_rejected_connections_total",
            "Connections closed at once: their sandbox had its budget open.",
            "counter",
            t.rejected_connections,
        ),
        (
            "lizard_package_cache_entries",
            "Files in the host's package cache.",
            "gauge",
            st.cache_entries,
        ),
        (
            "lizard_package_cache_bytes",
            "Bytes in the host's package cache.",
            "gauge",
            st.cache_bytes,
        ),
        (
            "lizard_package_index_memory_bytes",
            "Index pages the mirror holds in memory now.",
            "gauge",
            st.index_memory_bytes,
        ),
        (
            "lizard_package_index_memory_refusals_total",
            "Index requests answered 503: the mirror's memory bound was reached.",
            "counter",
            st.index_memory_refusals,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP lizard_package_registry_requests_total Mirror requests by registry.\n\
         # TYPE lizard_package_registry_requests_total counter"
    );
    for (reg, c) in &st.per_registry {
        let _ = writeln!(
            out,
            "lizard_package_registry_requests_total{{registry=\"{reg}\"}} {}",
            c.requests
        );
    }
    out
}

/// `GET /v1/audit?from=&to=&limit=`: newest first; an admin sees every event, a project key its
/// own project's.
async fn list_audit(
    State(st): St,
    Auth(who): Auth,
    ApiQuery(q): ApiQuery<lizard_proto::AuditQuery>,
) -> Result<Json<Vec<lizard_proto::AuditEvent>>, ApiError> {
    let project = match &who {
        Principal::Admin => None,
        Principal::Project(p) => Some(p.as_str()),
    };
    Ok(Json(st.sandboxes.store.audit(
        project,
        q.from.unwrap_or(0),
        q.to.unwrap_or_else(|| now_ms() + 1),
        q.limit.unwrap_or(1000).min(10_000),
    )?))
}

#[cfg(test)]
mod query_tests {
    //! The query strings of Lizard's own routes, parsed the way the handlers parse them.
    use super::*;
    use axum::extract::rejection::QueryRejection;
    use axum::extract::Query;
    use axum::http::Uri;

    fn parse<T: DeserializeOwned>(q: &str) -> Option<Result<T, QueryRejection>> {
        let uri: Uri = format!("/x?{q}").parse().ok()?;
        Some(Query::<T>::try_from_uri(&uri).map(|Query(t)| t))
    }

    proptest::proptest! {
        /// Arbitrary (percent-encoded) query strings never panic a parser: each is a value or a
        /// rejection (which the handlers turn into a typed 400).
        #[test]
        fn query_parsers_are_total(q in proptest::prop_oneof![
            ".{0,100}",
            "((from|to|limit|project|state|metadata|force|sandbox|x)=[-0-9a-z%,=&.]{0,12}&?){0,6}",
        ]) {
            let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>()
                .replace("%3D", "=").replace("%26", "&");
            let _ = parse::<lizard_proto::VolumeQuery>(&q);
            let _ = parse::<lizard_proto::SandboxListQuery>(&q);
            let _ = parse::<lizard_proto::UsageQuery>(&q);
            let _ = parse::<lizard_proto::ExecutionsQuery>(&q);
            let _ = parse::<lizard_proto::AuditQuery>(&q);
        }

        /// Numbers parse as numbers (u64 bounds included), everything else is a rejection.
        #[test]
        fn usage_bounds_parse_exactly(from in proptest::option::of(proptest::prelude::any::<u64>()), junk in "[a-z]{1,5}") {
            proptest::prop_assume!(junk != "from" && junk != "to");
            let q = from.map(|f| format!("from={f}")).unwrap_or_default();
            let u: lizard_proto::UsageQuery = parse(&q).unwrap().unwrap();
            proptest::prop_assert_eq!(u.from, from);
            let bad_number = parse::<lizard_proto::UsageQuery>(&format!("from={junk}")).unwrap();
            proptest::prop_assert!(bad_number.is_err());
            let unknown = parse::<lizard_proto::UsageQuery>(&format!("{junk}=1")).unwrap();
            proptest::prop_assert!(unknown.is_err(), "unknown fields are refused");
        }
    }
}
