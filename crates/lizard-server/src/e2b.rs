//! E2B compatibility on the server: E2B's control-plane REST API (`/sandboxes`, `/v2/sandboxes`,
//! connect, timeout, pause, info, list, snapshots and fork) mapped onto [`crate::sandboxes`], and E2B's sandbox traffic
//! (any request carrying `E2b-Sandbox-Id` + `E2b-Sandbox-Port`) relayed to the sandbox's agent:
//! port 49999 → the agent's E2B code interpreter, 49983 → its envd, any other port → that port's
//! service inside the sandbox. With `--e2b-debug` the server also serves E2B's debug mode: one
//! default sandbox behind `localhost:49999` and `localhost:49983`, no keys (E2B's SDKs then make no
//! control-plane calls).
//!
//! Credentials: control-plane calls carry a Lizard API key in `X-API-KEY` (the SDKs' `E2B_API_KEY`);
//! sandboxes belong to the key's project. Sandbox traffic carries the per-sandbox token the create
//! and connect answers hand out (as both `envdAccessToken` and `trafficAccessToken`, so the SDKs
//! send it on every call): an HMAC of the sandbox id under a server secret kept in
//! `<data>/e2b-secret`, so it needs no storage and survives restarts. This module owns no sandbox
//! logic: it translates and relays.

pub use crate::e2b_shared::E2b;
use crate::e2b_shared::{E2bError, E2bJson};
use crate::sandboxes::{CreateSandbox, Sandbox, SandboxError};
use crate::state::{AppState, Auth};
use crate::store::StoredState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lizard_http::api::ApiError;
use lizard_proto::e2b::{api, rfc3339_ms, CODE_INTERPRETER_PORT, DEBUG_SANDBOX_ID, ENVD_PORT};
use lizard_proto::{LimitsRequest, TimeoutAction};
use std::collections::BTreeMap;
use std::sync::Arc;

/// E2B's template names that mean "the default template" here: `base` (E2B's plain image) is a
/// subset of what Lizard's default template has.
const BASE_TEMPLATE: &str = "base";
/// Metadata key marking the debug-mode sandbox (so a restarted server finds it again).
const DEBUG_MARK: &str = "lizard.e2b.debug";
/// `clientID` in E2B's answers (E2B names the cluster node; Lizard has one).
const CLIENT_ID: &str = "lizard";
/// Metadata key of a snapshot holding the `name` E2B's `create_snapshot(name)` gave it.
const SNAPSHOT_NAME: &str = "lizard.e2b.name";
/// Metadata key of the snapshot a multi-fork is made from (named by its source; deleted once the
/// forks have started, and never listed as one of E2B's snapshots).
const FORK_MARK: &str = "lizard.e2b.fork";

/// How long `pause({ requireHealthyGuest })` waits for the agent's answer.
const HEALTH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

// ---- errors ----

fn not_found(id: &str) -> E2bError {
    E2bError(StatusCode::NOT_FOUND, format!("sandbox {id} not found"))
}

type St = State<Arc<AppState>>;
type Who = Result<Auth, ApiError>;

pub(crate) fn who(w: Who) -> Result<crate::auth::Principal, E2bError> {
    w.map(|Auth(p)| p).map_err(E2bError::from)
}

/// A sandbox the caller may see, else 404 (whether or not it exists).
fn visible(
    st: &AppState,
    who: &crate::auth::Principal,
    id: &str,
) -> Result<Arc<Sandbox>, E2bError> {
    crate::state::visible(st, who, id).map_err(|_| not_found(id))
}

// ---- control plane ----

/// E2B's control-plane routes (merged into the server's router at the root).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/sandboxes", get(list).post(create))
        .route("/v2/sandboxes", get(list).post(create))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/network", axum::routing::put(set_network))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(connect))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/metrics", get(metrics))
        // Snapshots (`create_snapshot`, `list_snapshots`, `delete_snapshot` — which E2B's SDKs
        // send to the template delete route, a snapshot being a template there) and fork.
        .route("/sandboxes/{id}/snapshots", post(create_snapshot))
        .route("/snapshots", get(list_snapshots))
        .route(
            "/templates/{template_id}",
            axum::routing::delete(delete_snapshot),
        )
        .route("/sandboxes/{id}/fork", post(fork))
        // Signed file URLs made for `E2B_SANDBOX_URL` = this server (no sandbox named).
        .route(
            "/files",
            get(signed_files)
                .post(signed_files)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
    // Template builds (`Template.build`, `Template.exists`).
}

fn sandbox_body(st: &AppState, sb: &Sandbox) -> api::Sandbox {
    let token = st.e2b.token(&sb.id);
    api::Sandbox {
        template_id: sb.template.clone(),
        sandbox_id: sb.id.clone(),
        client_id: CLIENT_ID.into(),
        envd_version: lizard_proto::e2b::ENVD_VERSION.into(),
        envd_access_token: token.clone(),
        traffic_access_token: token,
        domain: domain(st),
    }
}

fn detail_body(st: &AppState, sb: &Sandbox) -> api::SandboxDetail {
    api::SandboxDetail {
        template_id: sb.template.clone(),
        sandbox_id: sb.id.clone(),
        client_id: CLIENT_ID.into(),
        started_at: rfc3339_ms(sb.created_at_ms as i64),
        end_at: rfc3339_ms(sb.timeout_at_ms() as i64),
        envd_version: lizard_proto::e2b::ENVD_VERSION.into(),
        cpu_count: (sb.limits.cpu_millicores / 1000).max(1) as u32,
        memory_mb: sb.limits.memory_mb,
        disk_size_mb: sb.limits.tmp_mb,
        state: match sb.state() {
            StoredState::Running => api::State::Running,
            _ => api::State::Paused,
        },
        metadata: sb.metadata.clone(),
        envd_access_token: Some(st.e2b.token(&sb.id)),
        lifecycle: api::Lifecycle {
            auto_resume: sb.network().auto_resume,
            on_timeout: match sb.on_timeout {
                TimeoutAction::Kill => "kill".into(),
                TimeoutAction::Pause | TimeoutAction::Hibernate => "pause".into(),
            },
        },
        domain: domain(st),
    }
}

/// The create answer's `domain`: the sandbox domain of host-name routing (`crate::hosts`).
fn domain(st: &AppState) -> Option<String> {
    Some(st.e2b.sandbox_domain().to_string()).filter(|d| !d.is_empty())
}

fn seconds_ms(s: u64) -> u64 {
    s.saturating_mul(1000)
}

async fn create(
    State(st): St,
    w: Who,
    E2bJson(req): E2bJson<api::NewSandbox>,
) -> Result<Response, E2bError> {
    let who = who(w)?;
    let project = who
        .project_for(None)
        .ok_or_else(|| E2bError(StatusCode::FORBIDDEN, "this key has no project".into()))?;
    // E2B sandboxes reach the internet unless `allow_internet_access: false`; here only a project
    // created with `allow_egress` grants it, and otherwise the sandbox gets loopback only.
    // Its `network.allowOut`/`denyOut` become name and address rules (see
    // `NetworkConfig::egress`), checked as E2B checks them.
    if let Some(why) = req.network.as_ref().and_then(|n| n.check().err()) {
        return Err(E2bError(StatusCode::BAD_REQUEST, why));
    }
    if let Some(why) = req.refused() {
        return Err(E2bError(StatusCode::BAD_REQUEST, why));
    }
    let egress = if req.allow_internet_access != Some(false)
        && st
            .sandboxes
            .store
            .project_allows_egress(&project)
            .map_err(ApiError::from)?
    {
        req.network
            .as_ref()
            .and_then(|n| n.egress())
            .unwrap_or(lizard_proto::Egress::All)
    } else {
        lizard_proto::Egress::None
    };
    // `Sandbox.create(<snapshotID>)`: a snapshot is a template to E2B.
    if crate::sandboxes::snapshot::valid_snapshot_id(&req.template_id) {
        return create_from_snapshot(&st, project, req).await;
    }
    let template = match req.template_id.as_str() {
        "" | BASE_TEMPLATE => None,
        t => Some(t.to_string()),
    };
    let on_timeout = timeout_action(&req);
    let sb = st
        .sandboxes
        .create_detached(CreateSandbox {
            project,
            template,
            timeout_ms: req.timeout.map(seconds_ms),
            metadata: req.metadata.unwrap_or_default(),
            envs: req.env_vars.unwrap_or_default(),
            limits: LimitsRequest::default(),
            on_timeout,
            volumes: req
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| lizard_proto::VolumeMountRequest {
                    name: m.name.clone(),
                    mount_path: Some(m.path.clone()),
                    read_only: false,
                })
                .collect(),
            network: lizard_proto::NetworkRequest {
                egress,
                inject: req
                    .network
                    .as_ref()
                    .and_then(|n| n.inject())
                    .unwrap_or_default(),
                public_ports: req
                    .network
                    .as_ref()
                    .is_some_and(|n| n.allow_public_traffic == Some(true)),
                auto_resume: req.auto_resume.as_ref().is_some_and(|a| a.enabled),
            },
        })
        .await?;
    Ok(created(&st, &sb))
}

/// A create's timeout action: `autoPause` pauses, in memory unless `autoPauseMemory: false`
/// (then the sandbox hibernates: its memory goes to disk, which is what E2B's filesystem-only
/// pause is for, and Lizard's keeps the processes too).
fn timeout_action(req: &api::NewSandbox) -> TimeoutAction {
    match (req.auto_pause, req.auto_pause_memory) {
        (Some(true), Some(false)) => TimeoutAction::Hibernate,
        (Some(true), _) => TimeoutAction::Pause,
        _ => TimeoutAction::Kill,
    }
}

/// The 201 answer to a create (named for the audit log).
fn created(st: &AppState, sb: &Sandbox) -> Response {
    let mut r = (StatusCode::CREATED, Json(sandbox_body(st, sb))).into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: sb.id.clone(),
        project: Some(sb.project.clone()),
    });
    r
}

/// A snapshot of the E2B key's project, else 404 (whether or not it exists). Forks' passing
/// snapshots are not E2B snapshots.
fn e2b_snapshot(
    st: &AppState,
    project: &str,
    id: &str,
) -> Result<crate::store::SnapshotRow, E2bError> {
    let missing = || E2bError(StatusCode::NOT_FOUND, format!("snapshot {id} not found"));
    if !crate::sandboxes::snapshot::valid_snapshot_id(id) {
        return Err(missing());
    }
    match st
        .sandboxes
        .store
        .get_snapshot(id)
        .map_err(ApiError::from)?
    {
        Some(r) if r.project == project && !r.metadata.contains_key(FORK_MARK) => Ok(r),
        _ => Err(missing()),
    }
}

fn snapshot_body(r: &crate::store::SnapshotRow) -> api::SnapshotInfo {
    api::SnapshotInfo {
        snapshot_id: r.id.clone(),
        names: vec![r.metadata.get(SNAPSHOT_NAME).unwrap_or(&r.id).clone()],
    }
}

fn key_project(who: &crate::auth::Principal) -> Result<String, E2bError> {
    who.project_for(None)
        .ok_or_else(|| E2bError(StatusCode::FORBIDDEN, "this key has no project".into()))
}

/// `POST /sandboxes` whose template is a snapshot id: a clone of it. Its template, environment,
/// limits, volumes and network are the snapshot's; only the timeout, metadata and `autoPause`
/// are the caller's.
async fn create_from_snapshot(
    st: &Arc<AppState>,
    project: String,
    req: api::NewSandbox,
) -> Result<Response, E2bError> {
    if req.env_vars.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            "a sandbox from a snapshot has the snapshot's environment: envVars cannot be given \
             with a snapshot"
                .into(),
        ));
    }
    if req.volume_mounts.as_ref().is_some_and(|v| !v.is_empty())
        || req.network.as_ref().is_some_and(|n| n.rules.is_some())
    {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            "a sandbox from a snapshot has the snapshot's volumes and network: volumeMounts and \
             network rules cannot be given with a snapshot"
                .into(),
        ));
    }
    let row = e2b_snapshot(st, &project, &req.template_id)?;
    let on_timeout = req.auto_pause.map(|_| timeout_action(&req));
    let (sb, _report) = st
        .sandboxes
        .clone_detached(
            row,
            crate::sandboxes::snapshot::CloneRequest {
                project,
                timeout_ms: req.timeout.map(seconds_ms),
                metadata: req.metadata.unwrap_or_default(),
                on_timeout,
            },
        )
        .await?;
    Ok(created(st, &sb))
}

/// `POST /sandboxes/{id}/snapshots`: a snapshot of the sandbox (which keeps running). `memory:
/// false` is accepted, but the snapshot still keeps what memory state the host captures.
async fn create_snapshot(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::SnapshotRequest>,
) -> Result<Response, E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    let metadata: BTreeMap<String, String> = req
        .name
        .filter(|n| !n.is_empty())
        .map(|n| (SNAPSHOT_NAME.to_string(), n))
        .into_iter()
        .collect();
    let row = st.sandboxes.snapshot_detached(&sb.id, metadata).await?;
    let mut r = (StatusCode::CREATED, Json(snapshot_body(&row))).into_response();
    r.extensions_mut().insert(crate::audit::Created {
        id: row.id.clone(),
        project: Some(row.project.clone()),
    });
    Ok(r)
}

/// `GET /snapshots?sandboxID=&name=&limit=`: the key's project's snapshots, newest first, in one
/// page (no `X-Next-Token`).
async fn list_snapshots(
    State(st): St,
    w: Who,
    q: Result<Query<api::SnapshotQuery>, QueryRejection>,
) -> Result<Json<Vec<api::SnapshotInfo>>, E2bError> {
    let q = q
        .map_err(|e| E2bError(StatusCode::BAD_REQUEST, e.body_text()))?
        .0;
    let project = key_project(&who(w)?)?;
    let mut rows = st
        .sandboxes
        .store
        .list_snapshots(Some(&project), q.sandbox_id.as_deref(), false)
        .map_err(ApiError::from)?;
    rows.retain(|r| !r.metadata.contains_key(FORK_MARK));
    if let Some(n) = q.name.as_deref().filter(|n| !n.is_empty()) {
        rows.retain(|r| r.id == n || r.metadata.get(SNAPSHOT_NAME).map(String::as_str) == Some(n));
    }
    rows.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then(a.id.cmp(&b.id)));
    if let Some(l) = q.limit.filter(|l| *l > 0) {
        rows.truncate(l);
    }
    Ok(Json(rows.iter().map(snapshot_body).collect()))
}

/// `DELETE /templates/{id}` (E2B's `delete_snapshot`): deletes a snapshot of the key's project.
/// Other templates are not deleted through E2B's API here (`DELETE /v1/templates/{name}` does).
async fn delete_snapshot(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let project = key_project(&who(w)?)?;
    let row = e2b_snapshot(&st, &project, &id).map_err(|e| {
        if crate::sandboxes::snapshot::valid_snapshot_id(&id) {
            e
        } else {
            E2bError(
                StatusCode::NOT_FOUND,
                format!(
                    "snapshot {id} not found (E2B's template delete deletes snapshots here; \
                     templates are deleted with DELETE /v1/templates/{{name}})"
                ),
            )
        }
    })?;
    st.sandboxes.delete_snapshot(&row).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/fork`: `count` (1–20) new sandboxes with the source's memory state and
/// files; the source keeps running. The state is captured once; one answer entry per fork, its
/// sandbox or why it did not start. A source that cannot be captured fails the whole request.
async fn fork(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::ForkRequest>,
) -> Result<(StatusCode, Json<Vec<api::ForkResult>>), E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    let count = req.count.unwrap_or(1);
    if !(1..=api::MAX_FORK_COUNT).contains(&count) {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            format!(
                "count must be between 1 and {} (it is {count})",
                api::MAX_FORK_COUNT
            ),
        ));
    }
    let clone_req = crate::sandboxes::snapshot::CloneRequest {
        project: sb.project.clone(),
        timeout_ms: req.timeout.map(seconds_ms),
        metadata: BTreeMap::new(),
        on_timeout: None,
    };
    let ok = |new: &Sandbox| api::ForkResult {
        sandbox: Some(sandbox_body(&st, new)),
        error: None,
    };
    if count == 1 {
        // A fork of its own: no snapshot is kept, the capture's image becomes the fork's disk.
        let (new, _report) = st.sandboxes.fork_detached(&sb.id, clone_req).await?;
        return Ok((StatusCode::CREATED, Json(vec![ok(&new)])));
    }
    // Several: one snapshot, `count` clones of it, then the snapshot goes. In a task of its own
    // so that a caller that goes away leaves no snapshot behind.
    let task = {
        let st = st.clone();
        let source = sb.id.clone();
        tokio::spawn(async move {
            let row = st
                .sandboxes
                .snapshot_detached(&source, [(FORK_MARK.to_string(), source.clone())].into())
                .await?;
            let mut out = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let clone = st
                    .sandboxes
                    .clone_detached(row.clone(), clone_req.clone())
                    .await;
                // The caller may have gone: what failed is said here too.
                if let Err(e) = &clone {
                    tracing::warn!(source = %source, snapshot = %row.id, error = %e, "a multi-fork's clone failed");
                }
                out.push(clone);
            }
            if let Err(e) = st.sandboxes.delete_snapshot(&row).await {
                tracing::warn!(snapshot = %row.id, error = %e, "removing a fork's snapshot");
            }
            Ok::<_, SandboxError>(out)
        })
    };
    let out = task.await.map_err(|e| {
        E2bError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the fork task failed: {e}"),
        )
    })??;
    Ok((
        StatusCode::CREATED,
        Json(
            out.into_iter()
                .map(|r| match r {
                    Ok((new, _report)) => ok(&new),
                    Err(e) => {
                        let E2bError(code, message) = e.into();
                        api::ForkResult {
                            sandbox: None,
                            error: Some(api::Error {
                                code: code.as_u16(),
                                message,
                            }),
                        }
                    }
                })
                .collect(),
        ),
    ))
}

/// `GET /sandboxes/{id}`.
async fn detail(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<Json<api::SandboxDetail>, E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    Ok(Json(detail_body(&st, &sb)))
}

/// The filter of E2B's list query.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListFilter {
    states: Vec<String>,
    metadata: BTreeMap<String, String>,
    limit: Option<usize>,
    /// `order=asc`: oldest first (else newest first, E2B's default).
    ascending: bool,
    /// `startedAfter` (RFC 3339): only sandboxes created at or after it, in ms since the epoch.
    started_after_ms: Option<u64>,
    /// `template`: only sandboxes of this template (`base` is the default template, as at create).
    template: Option<String>,
    /// `nextToken`: the page after the sandbox it names (a previous page's `X-Next-Token`).
    after: Option<(u64, String)>,
}

/// Sandboxes per page at the most (E2B's SDKs ask for 100 unless told).
const MAX_LIST_PAGE: usize = 1000;

/// Parse E2B's list query (`state=running,paused&metadata=k%3Dv&limit=N&order=asc&startedAfter=…
/// &template=…&nextToken=…`); unknown parameters, an unparsable limit and an order other than
/// `asc` are passed over, as E2B does. A filter that cannot be read (`startedAfter`, `nextToken`)
/// is an error: ignoring it would list, and let a cleanup job kill, what it was meant to leave out.
fn list_filter(query: &str) -> Result<ListFilter, String> {
    let mut f = ListFilter::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "state" => f.states.extend(v.split(',').map(|s| s.trim().to_string())),
            // `metadata` is itself a URL-encoded query (`k1=v1&k2=v2`).
            "metadata" => f.metadata.extend(
                form_urlencoded::parse(v.as_bytes()).map(|(a, b)| (a.into_owned(), b.into_owned())),
            ),
            "limit" => f.limit = v.parse().ok(),
            "order" => f.ascending = v.eq_ignore_ascii_case("asc"),
            "startedAfter" => {
                let t =
                    time::OffsetDateTime::parse(&v, &time::format_description::well_known::Rfc3339)
                        .map_err(|e| format!("startedAfter {v:?} is not an RFC 3339 time: {e}"))?;
                f.started_after_ms = Some((t.unix_timestamp_nanos() / 1_000_000).max(0) as u64);
            }
            "template" if !v.is_empty() => f.template = Some(v.into_owned()),
            "nextToken" if !v.is_empty() => {
                f.after = Some(
                    v.split_once('_')
                        .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_string())))
                        .filter(|(_, id)| !id.is_empty())
                        .ok_or_else(|| format!("nextToken {v:?} is not one this server gave"))?,
                )
            }
            _ => {}
        }
    }
    Ok(f)
}

/// `GET /sandboxes` and `GET /v2/sandboxes?state=running,paused&metadata=k%3Dv&…`: the sandboxes
/// the key sees that pass the filter, in start order (newest first unless `order=asc`), a page of
/// `limit` (100 unless asked, at most [`MAX_LIST_PAGE`]) at a time: `X-Next-Token` names the last
/// one when more follow.
async fn list(State(st): St, w: Who, req: Request) -> Result<Response, E2bError> {
    let who = who(w)?;
    let f = list_filter(req.uri().query().unwrap_or(""))
        .map_err(|m| E2bError(StatusCode::BAD_REQUEST, m))?;
    let template = f.template.as_deref().map(|t| match t {
        BASE_TEMPLATE => st.sandboxes.cfg.default_template.as_str(),
        t => t,
    });
    let key = |sb: &Sandbox| (sb.created_at_ms, sb.id.clone());
    let mut out: Vec<Arc<Sandbox>> = st
        .sandboxes
        .all()
        .into_iter()
        .filter(|sb| who.can_see(&sb.project))
        .filter(|sb| {
            let s = if sb.state() == StoredState::Running {
                "running"
            } else {
                "paused"
            };
            f.states.is_empty() || f.states.iter().any(|w| w == s)
        })
        .filter(|sb| {
            f.metadata
                .iter()
                .all(|(k, v)| sb.metadata.get(k) == Some(v))
        })
        .filter(|sb| f.started_after_ms.is_none_or(|t| sb.created_at_ms >= t))
        .filter(|sb| template.is_none_or(|t| sb.template == t))
        .filter(|sb| match &f.after {
            None => true,
            Some(after) if f.ascending => key(sb) > *after,
            Some(after) => key(sb) < *after,
        })
        .collect();
    out.sort_by_key(|sb| key(sb));
    if !f.ascending {
        out.reverse();
    }
    let limit = f.limit.filter(|l| *l > 0).unwrap_or(100).min(MAX_LIST_PAGE);
    let next = (out.len() > limit).then(|| {
        let last = &out[limit - 1];
        format!("{}_{}", last.created_at_ms, last.id)
    });
    out.truncate(limit);
    let body: Vec<api::SandboxDetail> = out.iter().map(|sb| detail_body(&st, sb)).collect();
    let mut resp = Json(body).into_response();
    if let Some(n) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", n);
    }
    Ok(resp)
}

async fn kill(State(st): St, w: Who, Path(id): Path<String>) -> Result<StatusCode, E2bError> {
    visible(&st, &who(w)?, &id)?;
    st.sandboxes.kill(&id).await.map_err(|e| match e {
        SandboxError::NotFound(_) => not_found(&id),
        e => e.into(),
    })?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_timeout(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::TimeoutRequest>,
) -> Result<StatusCode, E2bError> {
    visible(&st, &who(w)?, &id)?;
    // E2B's `setTimeout(0)` ends the sandbox's time now (its timeout action follows at once).
    st.sandboxes
        .set_timeout(&id, seconds_ms(req.timeout).max(1))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /sandboxes/{id}/network` (E2B's `updateNetwork`): replace the sandbox's rules, live, with
/// E2B's checks (a name only in `allowOut`, and only with `denyOut` denying everything). An empty
/// body opens everything public again. Needs a project that may have egress, like a create.
async fn set_network(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::NetworkConfig>,
) -> Result<StatusCode, E2bError> {
    let who = who(w)?;
    let sb = visible(&st, &who, &id)?;
    if let Err(why) = req.check() {
        return Err(E2bError(StatusCode::BAD_REQUEST, why));
    }
    if let Some(why) = req.refused() {
        return Err(E2bError(StatusCode::BAD_REQUEST, why));
    }
    // `allowInternetAccess: false` closes it (no permission needed for that).
    let egress = if req.allow_internet_access == Some(false) {
        lizard_proto::Egress::None
    } else {
        req.egress().unwrap_or(lizard_proto::Egress::All)
    };
    if egress != lizard_proto::Egress::None
        && who != crate::auth::Principal::Admin
        && !st
            .sandboxes
            .store
            .project_allows_egress(&sb.project)
            .map_err(ApiError::from)?
    {
        return Err(E2bError(
            StatusCode::FORBIDDEN,
            format!("project {:?} may not have internet egress", sb.project),
        ));
    }
    let update = lizard_proto::UpdateNetworkRequest {
        egress: Some(egress),
        inject: req.inject(),
        public_ports: req.allow_public_traffic,
        auto_resume: None,
    };
    st.sandboxes.set_network(&id, update).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn refresh(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::RefreshRequest>,
) -> Result<StatusCode, E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    let extra = seconds_ms(req.duration.unwrap_or(0).min(3600));
    let left = sb.timeout_at_ms().saturating_sub(crate::store::now_ms());
    st.sandboxes.set_timeout(&id, (left + extra).max(1))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `pause({ keepMemory })`: in memory (the cgroup freezer), or, with `keepMemory: false`,
/// hibernated (its memory to disk and freed; Lizard keeps its processes' state there too).
async fn pause(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::PauseRequest>,
) -> Result<StatusCode, E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    if sb.state() != StoredState::Running {
        return Err(E2bError(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    if req.require_healthy_guest == Some(true)
        && tokio::time::timeout(HEALTH_DEADLINE, sb.agent.health())
            .await
            .map_or(true, |r| r.is_err())
    {
        return Err(E2bError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("sandbox {id}'s agent does not answer: not paused (requireHealthyGuest)"),
        ));
    }
    if req.memory == Some(false) {
        st.sandboxes.hibernate(&id).await?;
    } else {
        st.sandboxes.pause(&id).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `connect` (and the older `resume`): a paused sandbox is resumed (201), a running one is
/// returned as it is (200); `timeout` (seconds) moves its timeout.
async fn connect(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::ConnectSandbox>,
) -> Result<(StatusCode, Json<api::Sandbox>), E2bError> {
    let sb = visible(&st, &who(w)?, &id)?;
    if req.memory == Some(false) && sb.state() != StoredState::Running {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            "a fresh resume (memory: false, on_resume=\"fresh\") is not offered by this server: \
             a paused sandbox resumes with its memory"
                .into(),
        ));
    }
    let status = if sb.state() == StoredState::Running {
        StatusCode::OK
    } else {
        st.sandboxes.resume(&id).await?;
        StatusCode::CREATED
    };
    // E2B's connect only ever extends a sandbox's time, never shortens it.
    if let Some(t) = req.timeout.filter(|t| *t > 0) {
        st.sandboxes.extend_timeout(&id, seconds_ms(t))?;
    }
    Ok((status, Json(sandbox_body(&st, &sb))))
}

/// `GET /sandboxes/{id}/metrics?start=&end=`: the usage sampler's samples of the sandbox (every
/// `--sample-interval-s`, the last hour; CPU is what was used since the sample before), oldest
/// first. Without `start`/`end` and before the sampler has two samples, one sample taken now.
async fn metrics(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    q: Result<Query<api::MetricsQuery>, QueryRejection>,
) -> Result<Json<Vec<api::SandboxMetric>>, E2bError> {
    let q = q
        .map_err(|e| E2bError(StatusCode::BAD_REQUEST, e.body_text()))?
        .0;
    let sb = visible(&st, &who(w)?, &id)?;
    let cores = (sb.limits.cpu_millicores as f64 / 1000.0).max(0.001);
    let from_ms = q.start.map_or(0, |s| s.saturating_mul(1000));
    let to_ms = q
        .end
        .map_or(u64::MAX, |s| s.saturating_mul(1000).saturating_add(999));
    let mut points = sb.metrics.window(from_ms, to_ms, cores);
    if points.is_empty() && q.start.is_none() && q.end.is_none() {
        let (memory_bytes, pct) = crate::sandboxes::metering::instant(&sb).await;
        let point = crate::sandboxes::metering::Point {
            at_ms: crate::store::now_ms(),
            cpu_ns: 0,
            memory_bytes,
            disk_used_bytes: crate::sandboxes::metering::disk_used_bytes(&sb),
        };
        points.push((point, pct));
    }
    let mem_total = sb.limits.memory_mb * 1024 * 1024;
    let disk_total = sb.limits.disk_mb * 1024 * 1024;
    Ok(Json(
        points
            .into_iter()
            .map(|(p, cpu_pct)| api::SandboxMetric {
                timestamp: rfc3339_ms(p.at_ms as i64),
                timestamp_unix: p.at_ms / 1000,
                cpu_count: (sb.limits.cpu_millicores / 1000).max(1),
                cpu_used_pct: cpu_pct,
                mem_used: p.memory_bytes,
                mem_total,
                mem_cache: 0,
                disk_used: p.disk_used_bytes.unwrap_or(0),
                disk_total,
            })
            .collect(),
    ))
}

// ---- sandbox traffic ----

/// Middleware: a request with `E2b-Sandbox-Id` is sandbox traffic, whatever its path.
pub async fn sandbox_traffic(State(st): St, req: Request, next: Next) -> Response {
    let Some(id) = header(req.headers(), "e2b-sandbox-id") else {
        return next.run(req).await;
    };
    let port = match header(req.headers(), "e2b-sandbox-port").map(|p| p.parse::<u16>()) {
        Some(Ok(p)) => p,
        _ => {
            return E2bError(
                StatusCode::BAD_REQUEST,
                "E2b-Sandbox-Port must name the sandbox port (49999 or 49983)".into(),
            )
            .into_response()
        }
    };
    relay(&st, &id, port, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The router of a debug-mode listener: everything goes to the debug sandbox, on the port of the
/// `E2b-Sandbox-Port` header or else `port` (the listener's role).
pub fn debug_router(st: Arc<AppState>, port: u16) -> Router {
    Router::new()
        .fallback(move |State(st): St, req: Request| async move {
            let port = header(req.headers(), "e2b-sandbox-port")
                .and_then(|p| p.parse().ok())
                .unwrap_or(port);
            relay(&st, DEBUG_SANDBOX_ID, port, req)
                .await
                .unwrap_or_else(IntoResponse::into_response)
        })
        .with_state(st)
}

async fn relay(
    st: &Arc<AppState>,
    id: &str,
    port: u16,
    req: Request,
) -> Result<Response, E2bError> {
    let sb = if id == DEBUG_SANDBOX_ID && st.e2b.debug() {
        debug_sandbox(st).await?
    } else {
        // The token first: it is an HMAC of the id, so it is checked without a lookup, and a
        // caller without the right one learns nothing about whether the sandbox exists (the
        // same 401 either way). Only a token holder hears that its sandbox is gone.
        let given = header(req.headers(), "x-access-token")
            .or_else(|| header(req.headers(), "e2b-traffic-access-token"))
            .unwrap_or_default();
        let gone = || {
            E2bError(
                StatusCode::BAD_GATEWAY,
                format!("sandbox {id} is not running (it was killed or timed out)"),
            )
        };
        if st.e2b.token_ok(id, &given) {
            st.sandboxes.get(id).ok_or_else(gone)?
        } else {
            match st.sandboxes.get(id) {
                Some(sb) if other_credentials_ok(st, &sb, port, &req) => sb,
                _ => {
                    return Err(E2bError(
                        StatusCode::UNAUTHORIZED,
                        "missing or wrong access token for this sandbox (X-Access-Token)".into(),
                    ))
                }
            }
        }
    };
    crate::proxy::refuse_agent_port(port)?;
    let sb = crate::proxy::auto_resumed(st, sb).await?;
    if sb.state() != StoredState::Running {
        return Err(E2bError(
            StatusCode::BAD_GATEWAY,
            format!("sandbox {} is paused: connect() resumes it", sb.id),
        ));
    }
    let path = req.uri().path();
    let mut uri = match port {
        CODE_INTERPRETER_PORT | ENVD_PORT => format!("/e2b/{port}{path}"),
        p => format!("/ports/{p}{path}"),
    };
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    // The tokens and routing headers read above stay here (`crate::proxy::upstream_headers`).
    crate::proxy::send(st, &sb, req, &uri)
        .await
        .map_err(E2bError::from)
}

/// Sandbox traffic without the sandbox's token may still pass with: a key that sees the sandbox
/// (Lizard's own callers: `Authorization: Bearer`), for its own services; E2B's signed file URL for envd's
/// `/files` (`downloadUrl`/`uploadUrl`); or nothing at all for a port of a sandbox created with
/// public ports (E2B's `allowPublicTraffic`) — a service inside, never envd or the code
/// interpreter, which always need the token.
fn other_credentials_ok(st: &AppState, sb: &Sandbox, port: u16, req: &Request) -> bool {
    // Lizard's own spelling of a key only: E2B's SDKs send theirs (`X-API-Key`) on sandbox
    // traffic too, where E2B does not take it for the sandbox's token. And only for the
    // sandbox's own services: envd and the code interpreter always want the token (a key
    // reaches them through `/v1/sandboxes/{id}/…`).
    let bearer = header(req.headers(), "authorization");
    let service = !matches!(port, ENVD_PORT | CODE_INTERPRETER_PORT);
    if let Some(key) = bearer.as_deref().and_then(|v| v.strip_prefix("Bearer ")) {
        if let (true, Ok(Some(p))) = (
            service,
            crate::auth::principal(&st.sandboxes.store, key.trim()),
        ) {
            return p.can_see(&sb.project);
        }
    }
    match port {
        ENVD_PORT => {
            req.uri().path() == "/files"
                && st.e2b.file_signature_ok(
                    &sb.id,
                    req.method(),
                    req.uri().query(),
                    crate::store::now_ms() / 1000,
                )
        }
        CODE_INTERPRETER_PORT => false,
        _ => sb.network().public_ports,
    }
}

/// `GET|POST /files?…&signature=…` without a sandbox named (E2B's `downloadUrl`/`uploadUrl` when
/// the SDK's sandbox URL is this server's own address, `E2B_SANDBOX_URL`): the running sandbox
/// whose token signed it, as envd's `/files` of that sandbox; `401` when none did.
async fn signed_files(State(st): St, req: Request) -> Response {
    let now_s = crate::store::now_ms() / 1000;
    let signer = st.sandboxes.all().into_iter().find(|sb| {
        st.e2b
            .file_signature_ok(&sb.id, req.method(), req.uri().query(), now_s)
    });
    let Some(sb) = signer else {
        return E2bError(
            StatusCode::UNAUTHORIZED,
            "missing, wrong or expired file URL signature".into(),
        )
        .into_response();
    };
    let sb = match crate::proxy::auto_resumed(&st, sb).await {
        Ok(sb) => sb,
        Err(e) => return E2bError::from(e).into_response(),
    };
    if sb.state() != StoredState::Running {
        return E2bError(
            StatusCode::BAD_GATEWAY,
            format!("sandbox {} is paused: connect() resumes it", sb.id),
        )
        .into_response();
    }
    let mut uri = format!("/e2b/{ENVD_PORT}/files");
    if let Some(q) = req.uri().query() {
        uri.push('?');
        uri.push_str(q);
    }
    crate::proxy::send(&st, &sb, req, &uri)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The debug-mode sandbox: found by its metadata mark, created when there is none, resumed when
/// paused; its timeout is pushed to the maximum on each use (E2B's debug sandbox lives as long as
/// its server).
async fn debug_sandbox(st: &Arc<AppState>) -> Result<Arc<Sandbox>, E2bError> {
    let _g = st.e2b.debug_lock.lock().await;
    let project = st.e2b.debug_project.clone().unwrap_or_default();
    let found = st
        .sandboxes
        .all()
        .into_iter()
        .find(|sb| sb.project == project && sb.metadata.contains_key(DEBUG_MARK));
    let max = st.sandboxes.cfg.max_timeout_ms;
    let sb = match found {
        Some(sb) => {
            if sb.state() != StoredState::Running {
                st.sandboxes.resume(&sb.id).await?;
            }
            sb
        }
        None => {
            st.sandboxes
                .create(CreateSandbox {
                    project,
                    template: None,
                    timeout_ms: Some(max),
                    metadata: [(DEBUG_MARK.to_string(), "true".to_string())].into(),
                    envs: BTreeMap::new(),
                    limits: LimitsRequest::default(),
                    on_timeout: TimeoutAction::Kill,
                    volumes: Vec::new(),
                    network: Default::default(),
                })
                .await?
        }
    };
    if sb.timeout_at_ms().saturating_sub(crate::store::now_ms()) < max / 2 {
        st.sandboxes.set_timeout(&sb.id, max)?;
    }
    Ok(sb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_per_sandbox_and_secret() {
        let dir = tempfile::tempdir().unwrap();
        let a = E2b::open(dir.path(), None).unwrap();
        let b = E2b::open(dir.path(), None).unwrap();
        assert_eq!(a.token("sbx1"), b.token("sbx1"), "the secret persists");
        assert_ne!(a.token("sbx1"), a.token("sbx2"));
        assert!(a.token_ok("sbx1", &a.token("sbx1")));
        assert!(!a.token_ok("sbx1", &a.token("sbx2")));
        assert!(!a.token_ok("sbx1", ""));
        let other = tempfile::tempdir().unwrap();
        let c = E2b::open(other.path(), None).unwrap();
        assert_ne!(
            a.token("sbx1"),
            c.token("sbx1"),
            "another server, another token"
        );
    }

    #[test]
    fn list_queries_read_order_start_template_and_page() {
        let f = list_filter(
            "order=ASC&startedAfter=2026-12-06T10%3A00%3A00.5%2B01%3A00&template=base&nextToken=17_abc&limit=2",
        )
        .unwrap();
        assert!(f.ascending);
        // 09:00:00.5 UTC on 2026-12-06.
        assert_eq!(f.started_after_ms, Some(1_796_547_600_500));
        assert_eq!(f.template.as_deref(), Some("base"));
        assert_eq!(f.after, Some((17, "abc".to_string())));
        assert_eq!(f.limit, Some(2));
        assert!(!list_filter("order=sideways").unwrap().ascending);
        for bad in [
            "startedAfter=yesterday",
            "nextToken=nope",
            "nextToken=12_",
            "nextToken=x_y",
        ] {
            assert!(list_filter(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        /// Any query string parses (never panics); a query built from a filter parses back to it.
        #[test]
        fn list_queries_parse_totally_and_round_trip(
            junk in ".{0,200}",
            states in proptest::collection::vec("[a-z]{1,8}", 0..4),
            meta in proptest::collection::btree_map(".{1,10}", ".{0,10}", 0..4),
            limit in proptest::option::of(0usize..10_000),
        ) {
            let _ = list_filter(&junk);
            let inner: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(meta.iter())
                .finish();
            let mut q = form_urlencoded::Serializer::new(String::new());
            if !states.is_empty() {
                q.append_pair("state", &states.join(","));
            }
            if !meta.is_empty() {
                q.append_pair("metadata", &inner);
            }
            if let Some(l) = limit {
                q.append_pair("limit", &l.to_string());
            }
            q.append_pair("unknown", "ignored");
            let f = list_filter(&q.finish()).unwrap();
            proptest::prop_assert_eq!(f, ListFilter { states, metadata: meta, limit, ..Default::default() });
        }
    }
}
