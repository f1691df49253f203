//! E2B's project resources on Lizard's: `Volume` (`/volumes`) on Lizard's volumes and `Secret`
//! (`/secrets`) on Lizard's project secrets, in E2B's shapes, for the key's project.
//!
//! - A volume is a Lizard volume of the project (its id is `vol_…`, its size the server's default);
//!   E2B's `volumeMounts` at create mount it (`crate::e2b`). E2B's volume *content* API
//!   (`Volume.readFile`/`writeFile`/`list`/…, at `E2B_VOLUME_API_URL`) is
//!   `crate::e2b_volume_content`.
//! - A secret is a Lizard secret of the project: its value is sealed and never read back, and a
//!   sandbox gets it only through header rules (E2B's `network.rules` with
//!   `${e2b.secrets.NAME}` = Lizard's `network.inject` with `${secret:NAME}`), added on the host.
//!   Its E2B id is `sec_<name>` (E2B reserves the `sec_` prefix for ids); either spelling names
//!   it. Names are lower-cased, as E2B's are. `currentVersion` counts the values it has had.

use crate::e2b_shared::{E2bError, E2bJson};
use crate::state::{AppState, Auth};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use lizard_http::api::ApiError;
use lizard_proto::e2b::{api, rfc3339_ms};
use std::collections::BTreeMap;
use std::sync::Arc;

type St = State<Arc<AppState>>;
type Who = Result<Auth, ApiError>;

/// The routes (merged into the server's router at the root).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/volumes", get(list_volumes).post(create_volume))
        .route("/volumes/{id}", get(get_volume).delete(delete_volume))
        .route(
            "/volumecontent/{id}/{kind}",
            any(crate::e2b_volume_content::volume_content)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/secrets", get(list_secrets).post(create_secret))
        .route(
            "/secrets/{id}",
            get(get_secret).post(update_secret).delete(delete_secret),
        )
}

/// The key's project (an admin key's: `default`, as for E2B's other calls).
fn project(w: Who) -> Result<String, E2bError> {
    crate::e2b::who(w)?
        .project_for(None)
        .ok_or_else(|| E2bError(StatusCode::FORBIDDEN, "this key has no project".into()))
}

// ---- volumes ------------------------------------------------------------------------------------

fn volume_body(st: &AppState, row: &crate::store::VolumeRow) -> api::VolumeAndToken {
    api::VolumeAndToken {
        volume_id: row.id.clone(),
        name: row.name.clone(),
        token: st.e2b.volume_token(&row.id),
    }
}

fn volume(st: &AppState, project: &str, id: &str) -> Result<crate::store::VolumeRow, E2bError> {
    st.sandboxes
        .store
        .find_volume(project, id)
        .map_err(ApiError::from)?
        .ok_or_else(|| E2bError(StatusCode::NOT_FOUND, format!("volume {id} not found")))
}

/// The size of a volume made through E2B's API, which has no size: 1 GiB (a Lizard volume of
/// another size is made with Lizard's API and used by E2B's SDKs as well).
const E2B_VOLUME_BYTES: u64 = 1024 * 1024 * 1024;

/// `Volume.create(name)`: a volume of [`E2B_VOLUME_BYTES`].
async fn create_volume(
    State(st): St,
    w: Who,
    E2bJson(req): E2bJson<api::NewVolume>,
) -> Result<(StatusCode, Json<api::VolumeAndToken>), E2bError> {
    let project = project(w)?;
    let row = st
        .sandboxes
        .volumes
        .create(&project, &req.name, Some(E2B_VOLUME_BYTES))
        .await
        .map_err(ApiError::from)?;
    Ok((StatusCode::CREATED, Json(volume_body(&st, &row))))
}

async fn list_volumes(State(st): St, w: Who) -> Result<Json<Vec<api::VolumeEntry>>, E2bError> {
    let project = project(w)?;
    let rows = st
        .sandboxes
        .store
        .list_volumes(Some(&project), false)
        .map_err(ApiError::from)?;
    Ok(Json(
        rows.into_iter()
            .map(|r| api::VolumeEntry {
                volume_id: r.id,
                name: r.name,
            })
            .collect(),
    ))
}

async fn get_volume(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<Json<api::VolumeAndToken>, E2bError> {
    let row = volume(&st, &project(w)?, &id)?;
    Ok(Json(volume_body(&st, &row)))
}

/// `Volume.destroy(id)`: refused (`409`) while a sandbox mounts it, as Lizard's delete without
/// `force`.
async fn delete_volume(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let row = volume(&st, &project(w)?, &id)?;
    // Its content API's helper sandbox is the server's, not a user of the volume.
    crate::e2b_volume_content::kill_helpers(&st, &row.id).await;
    st.sandboxes.delete_volume(&row, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- secrets ------------------------------------------------------------------------------------

/// E2B's limits on a secret's metadata.
const MAX_META_ENTRIES: usize = 32;
const MAX_META_KEY: usize = 128;
const MAX_META_VALUE: usize = 1024;
const MAX_META_TOTAL: usize = 8192;

/// The prefix of a secret's E2B id.
const ID_PREFIX: &str = "sec_";

fn check_metadata(m: &BTreeMap<String, String>) -> Result<(), E2bError> {
    let bad = |why: String| Err(E2bError(StatusCode::BAD_REQUEST, why));
    if m.len() > MAX_META_ENTRIES {
        return bad(format!("at most {MAX_META_ENTRIES} metadata entries"));
    }
    if let Some(k) = m.keys().find(|k| k.is_empty() || k.len() > MAX_META_KEY) {
        return bad(format!("metadata key {k:?}: 1 to {MAX_META_KEY} bytes"));
    }
    if let Some(k) = m
        .iter()
        .find(|(_, v)| v.len() > MAX_META_VALUE)
        .map(|e| e.0)
    {
        return bad(format!(
            "metadata value of {k:?}: at most {MAX_META_VALUE} bytes"
        ));
    }
    if m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_META_TOTAL {
        return bad(format!("metadata: at most {MAX_META_TOTAL} bytes in all"));
    }
    Ok(())
}

fn secret_body(r: crate::store::SecretRow) -> api::SecretInfo {
    api::SecretInfo {
        secret_id: format!("{ID_PREFIX}{}", r.name),
        name: r.name,
        current_version: r.version,
        metadata: r.metadata,
        created_at: rfc3339_ms(r.created_at_ms as i64),
        updated_at: rfc3339_ms(r.updated_at_ms as i64),
    }
}

/// The secret an id (`sec_<name>`) or a name names, in `project`; 404 otherwise.
fn secret(st: &AppState, project: &str, id: &str) -> Result<crate::store::SecretRow, E2bError> {
    let name = id
        .strip_prefix(ID_PREFIX)
        .unwrap_or(id)
        .to_ascii_lowercase();
    st.sandboxes
        .store
        .list_secrets(project)
        .map_err(ApiError::from)?
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| E2bError(StatusCode::NOT_FOUND, format!("secret {id} not found")))
}

/// Seal and store `value` as secret `name` of `project` (new or replaced), and its metadata
/// when given.
fn put_secret(
    st: &AppState,
    project: &str,
    name: &str,
    value: &str,
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<crate::store::SecretRow, E2bError> {
    use crate::secrets::{valid_value, SecretError, MAX_PER_PROJECT};
    if !valid_value(value) {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            SecretError::BadValue.to_string(),
        ));
    }
    if let Some(m) = metadata {
        check_metadata(m)?;
    }
    let sealed = st
        .sandboxes
        .cfg
        .secrets
        .seal(project, name, value)
        .map_err(|e| ApiError::internal(&e))?;
    let store = &st.sandboxes.store;
    store
        .put_secret(project, name, &sealed, MAX_PER_PROJECT)
        .map_err(ApiError::from)?;
    if let Some(m) = metadata {
        store
            .set_secret_metadata(project, name, m)
            .map_err(ApiError::from)?;
    }
    secret(st, project, name)
}

/// `Secret.create(name, value, { metadata })`: `409` if the project has it already.
async fn create_secret(
    State(st): St,
    w: Who,
    E2bJson(req): E2bJson<api::NewSecret>,
) -> Result<(StatusCode, Json<api::SecretInfo>), E2bError> {
    let project = project(w)?;
    let name = req.name.to_ascii_lowercase();
    if name.starts_with(ID_PREFIX) || !crate::secrets::valid_name(&name) {
        return Err(E2bError(
            StatusCode::BAD_REQUEST,
            format!(
                "secret name {:?}: 1-64 letters, digits, '_' or '-', not starting with {ID_PREFIX:?}",
                req.name
            ),
        ));
    }
    if secret(&st, &project, &name).is_ok() {
        return Err(E2bError(
            StatusCode::CONFLICT,
            format!("secret {name:?} already exists: update it instead"),
        ));
    }
    let row = put_secret(
        &st,
        &project,
        &name,
        &req.value,
        Some(&req.metadata.unwrap_or_default()),
    )?;
    Ok((StatusCode::CREATED, Json(secret_body(row))))
}

/// `Secret.update(id, value, { metadata })`: a new value (its version + 1), and new metadata
/// when given.
async fn update_secret(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
    E2bJson(req): E2bJson<api::SecretUpdate>,
) -> Result<Json<api::SecretInfo>, E2bError> {
    let project = project(w)?;
    let name = secret(&st, &project, &id)?.name;
    let row = put_secret(&st, &project, &name, &req.value, req.metadata.as_ref())?;
    Ok(Json(secret_body(row)))
}

async fn get_secret(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<Json<api::SecretInfo>, E2bError> {
    Ok(Json(secret_body(secret(&st, &project(w)?, &id)?)))
}

async fn delete_secret(
    State(st): St,
    w: Who,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let project = project(w)?;
    let name = secret(&st, &project, &id)?.name;
    st.sandboxes
        .store
        .delete_secret(&project, &name)
        .map_err(ApiError::from)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `Secret.list({ limit, nextToken })`: by name, `limit` (100 unless asked, at most 1,000) at a
/// time; `X-Next-Token` is the last name of a page that has more after it.
async fn list_secrets(
    State(st): St,
    w: Who,
    Query(q): Query<api::ListQuery>,
) -> Result<Response, E2bError> {
    let project = project(w)?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000) as usize;
    let mut rows: Vec<_> = st
        .sandboxes
        .store
        .list_secrets(&project)
        .map_err(ApiError::from)?
        .into_iter()
        .filter(|r| {
            q.next_token
                .as_deref()
                .is_none_or(|after| r.name.as_str() > after)
        })
        .take(limit + 1)
        .collect();
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = more.then(|| rows.last().map(|r| r.name.clone())).flatten();
    let mut resp = Json(rows.into_iter().map(secret_body).collect::<Vec<_>>()).into_response();
    if let Some(n) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        resp.headers_mut().insert("x-next-token", n);
    }
    Ok(resp)
}
