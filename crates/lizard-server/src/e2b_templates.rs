//! E2B's template build API (`Template.build`, `Template.exists` of E2B's SDKs), translated onto
//! Lizard's template builds ([`crate::templates`]): E2B's steps become the same [`Plan`] the
//! Dockerfile front end makes, and run through the same engine (build sandbox, layer import).
//!
//! The flow the SDKs follow:
//! 1. `POST /v3/templates {name}` → `{templateID, buildID}`: the template id is the name (Lizard's
//!    templates are named per project; E2B's SDKs create sandboxes by either), the build is
//!    remembered here, `waiting`.
//! 2. `GET /templates/{templateID}/files/{hash}` per COPY source: `present` if that project
//!    uploaded the files of that hash (kept a while, bounded), else a one-time upload link served
//!    by this server (`PUT /e2b/uploads/{token}`, no key: the unguessable token is the credential,
//!    bound to the project and hash; the body at most `MAX_CONTEXT_BYTES`).
//! 3. `POST /v2/templates/{templateID}/builds/{buildID}` with the steps: translated
//!    ([`translate`]: `fromTemplate` / `fromImage` debian:<suite> or e2bdev/base → FROM; RUN, COPY,
//!    ENV, WORKDIR, USER → steps; anything else an E2B-shaped 400), the uploaded archives checked
//!    (paths inside the context, plain files/dirs/links only, the hash recomputed where E2B's
//!    hash can be) and merged into one build context, then `Templates::start_plan`.
//! 4. `GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N`: the build's status and
//!    its log entries from `N` (at most 100 a call), from the build's event stream.
//! 5. `GET /templates/aliases/{alias}`: 200 when the project (or a public template, or a
//!    built-in) has a ready template of that name, else 404 — `Template.exists`.
//!
//! Everything here is in memory and bounded (builds per project, log entries per build, bytes of
//! uploads kept); a restart forgets pending E2B builds (a started build goes on in
//! [`crate::templates`] and its template is there when it is done).

use crate::e2b_shared::*;
use crate::state::{AppState, Auth};
use crate::templates::{BuildRequest, Started, TemplateError};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use bytes::Bytes;
use lizard_http::api::ApiError;
use lizard_proto::e2b::templates as wire;
use lizard_proto::{TemplateBuildEvent, TemplateState};
use lizard_template::dockerfile::{Action, Base, Plan, Step, DEBIAN_SUITES};
use sha2::Digest;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

fn bad(m: impl Into<String>) -> E2bError {
    E2bError(StatusCode::BAD_REQUEST, m.into())
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the OS random source is available");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

type St = State<Arc<AppState>>;
type Who = Result<Auth, ApiError>;

fn project_of(w: Who) -> Result<String, E2bError> {
    w.map(|Auth(p)| p)
        .map_err(E2bError::from)?
        .project_for(None)
        .ok_or_else(|| E2bError(StatusCode::FORBIDDEN, "this key has no project".into()))
}

/// The routes (merged into the E2B control plane's).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v3/templates", post(request_build))
        .route("/templates/aliases/{alias}", get(alias))
        .route("/templates/{template_id}/files/{hash}", get(file_link))
        .route(
            "/e2b/uploads/{token}",
            put(upload).layer(axum::extract::DefaultBodyLimit::max(MAX_UPLOAD)),
        )
        .route(
            "/v2/templates/{template_id}/builds/{build_id}",
            post(trigger),
        )
        .route(
            "/templates/{template_id}/builds/{build_id}/status",
            get(status),
        )
}

/// `POST /v3/templates`.
async fn request_build(
    State(st): St,
    w: Who,
    E2bJson(req): E2bJson<wire::TemplateBuildRequestV3>,
) -> Result<Response, E2bError> {
    let project = project_of(w)?;
    let name = req.name.or(req.alias).unwrap_or_default();
    let name = name.trim().to_string();
    let tagged = name.contains(':')
        || req
            .tags
            .as_ref()
            .is_some_and(|t| t.iter().any(|t| t != "default"));
    if tagged {
        return Err(bad(
            "template tags are not supported: a Lizard template has one version per name (build \
             it again to replace it)",
        ));
    }
    if !lizard_template::layer::valid_name(&name) {
        return Err(bad(format!(
            "invalid template name {name:?} (1-64 of A-Z a-z 0-9 . _ -, not starting with .)"
        )));
    }
    let build_id = {
        let mut g = st.e2b.builds.lock()?;
        let now = Instant::now();
        g.prune(now);
        if g.builds.values().filter(|b| b.project == project).count() >= MAX_BUILDS_PER_PROJECT {
            return Err(E2bError(
                StatusCode::TOO_MANY_REQUESTS,
                format!("at most {MAX_BUILDS_PER_PROJECT} template builds per project at a time"),
            ));
        }
        let id = format!(
            "{}-{}-{}-{}-{}",
            random_hex(4),
            random_hex(2),
            random_hex(2),
            random_hex(2),
            random_hex(6)
        );
        g.builds.insert(
            id.clone(),
            Build {
                project,
                name: name.clone(),
                created: now,
                started: false,
                status: wire::TemplateBuildStatus::Waiting,
                entries: Vec::new(),
                reason: None,
            },
        );
        id
    };
    let body = wire::TemplateRequestResponseV3 {
        template_id: name.clone(),
        build_id,
        public: false,
        names: vec![name.clone()],
        tags: Vec::new(),
        aliases: vec![name],
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// The origin the client reached this server at (`Host`, `X-Forwarded-Proto`), for links.
fn origin(headers: &HeaderMap) -> Result<String, E2bError> {
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .ok_or_else(|| bad("a Host header is needed for the upload link"))?;
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    Ok(format!("{}://{host}", if https { "https" } else { "http" }))
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `GET /templates/{templateID}/files/{hash}` (201, as E2B answers).
async fn file_link(
    State(st): St,
    w: Who,
    headers: HeaderMap,
    Path((template_id, hash)): Path<(String, String)>,
) -> Result<(StatusCode, Json<wire::TemplateBuildFileUpload>), E2bError> {
    let project = project_of(w)?;
    if !valid_hash(&hash) {
        return Err(bad("a files hash is 64 lower-case hex digits (SHA-256)"));
    }
    let origin = origin(&headers)?;
    let mut g = st.e2b.builds.lock()?;
    let now = Instant::now();
    g.prune(now);
    let known = g
        .builds
        .values()
        .any(|b| b.project == project && b.name == template_id && !b.started);
    if !known {
        return Err(E2bError(
            StatusCode::NOT_FOUND,
            format!("no pending build of template {template_id}"),
        ));
    }
    if g.uploads.contains_key(&(project.clone(), hash.clone())) {
        return Ok((
            StatusCode::CREATED,
            Json(wire::TemplateBuildFileUpload {
                present: true,
                url: None,
                headers: None,
            }),
        ));
    }
    let token = random_hex(32);
    g.links.insert(
        token.clone(),
        Link {
            project,
            hash,
            expires: now + LINK_TTL,
        },
    );
    Ok((
        StatusCode::CREATED,
        Json(wire::TemplateBuildFileUpload {
            present: false,
            url: Some(format!("{origin}/e2b/uploads/{token}")),
            headers: None,
        }),
    ))
}

/// `PUT /e2b/uploads/{token}`: the files of one COPY (a tar or tar.gz), once per link.
async fn upload(
    State(st): St,
    Path(token): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let mut g = st.e2b.builds.lock()?;
    let now = Instant::now();
    g.prune(now);
    let link = g.links.remove(&token).ok_or_else(|| {
        E2bError(
            StatusCode::NOT_FOUND,
            "unknown, used or expired upload link".into(),
        )
    })?;
    if body.is_empty() {
        return Err(bad("an empty upload"));
    }
    if g.stored + body.len() > MAX_STORED_UPLOADS {
        return Err(E2bError(
            StatusCode::INSUFFICIENT_STORAGE,
            "too many uploaded files are kept: start the builds that use them, or retry later"
                .into(),
        ));
    }
    g.stored += body.len();
    if let Some(old) = g.uploads.insert(
        (link.project, link.hash),
        Upload {
            bytes: body,
            at: now,
        },
    ) {
        g.stored -= old.bytes.len();
    }
    Ok(StatusCode::OK)
}

/// `POST /v2/templates/{templateID}/builds/{buildID}`.
async fn trigger(
    State(st): St,
    w: Who,
    Path((template_id, build_id)): Path<(String, String)>,
    E2bJson(req): E2bJson<wire::TemplateBuildStartV2>,
) -> Result<StatusCode, E2bError> {
    let project = project_of(w)?;
    let archives = {
        let mut g = st.e2b.builds.lock()?;
        g.prune(Instant::now());
        let b = g.of(&project, &template_id, &build_id)?;
        if b.started {
            return Err(E2bError(
                StatusCode::CONFLICT,
                format!("build {build_id} was started already"),
            ));
        }
        let mut archives = BTreeMap::new();
        for s in &req.steps {
            if let Some(h) = &s.files_hash {
                if let Some(u) = g.uploads.get(&(project.clone(), h.clone())) {
                    archives.insert(h.clone(), u.bytes.clone());
                }
            }
        }
        archives
    };
    let translated = {
        let req = req.clone();
        tokio::task::spawn_blocking(move || translate(&req, &archives))
            .await
            .map_err(|e| E2bError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??
    };
    {
        let mut g = st.e2b.builds.lock()?;
        let b = g
            .builds
            .get_mut(&build_id)
            .filter(|b| !b.started)
            .ok_or_else(|| {
                E2bError(
                    StatusCode::CONFLICT,
                    format!("build {build_id} was started already"),
                )
            })?;
        b.started = true;
        b.status = wire::TemplateBuildStatus::Building;
    }
    let breq = BuildRequest {
        project: project.clone(),
        name: template_id.clone(),
        dockerfile: translated.key_text,
        context: Bytes::from(translated.context),
        build_args: BTreeMap::new(),
        public: false,
        cancel_on_disconnect: false,
    };
    let started = match st.templates.start_plan(breq, translated.plan).await {
        Ok(s) => s,
        Err(e) => {
            let body = e.body();
            st.e2b.builds.finish(
                &build_id,
                wire::TemplateBuildStatus::Error,
                Some(body.message.clone()),
            );
            return Err(template_error(e));
        }
    };
    match started {
        Started::CacheHit(_) => {
            st.e2b.builds.log(
                &build_id,
                "info",
                "the same build is ready already (cached)".into(),
            );
            st.e2b
                .builds
                .finish(&build_id, wire::TemplateBuildStatus::Ready, None);
        }
        Started::Building(_, mut rx) => {
            let st = st.clone();
            tokio::spawn(async move {
                while let Some(ev) = rx.recv().await {
                    match ev {
                        TemplateBuildEvent::Step { index, total, name } => {
                            st.e2b.builds.log(
                                &build_id,
                                "info",
                                format!("[{index}/{total}] {name}"),
                            );
                        }
                        TemplateBuildEvent::Log { text, .. } => {
                            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                                st.e2b.builds.log(&build_id, "info", line.to_string());
                            }
                        }
                        TemplateBuildEvent::Done { .. } => {
                            st.e2b
                                .builds
                                .finish(&build_id, wire::TemplateBuildStatus::Ready, None);
                            return;
                        }
                        TemplateBuildEvent::Error { error } => {
                            st.e2b.builds.finish(
                                &build_id,
                                wire::TemplateBuildStatus::Error,
                                Some(error.message),
                            );
                            return;
                        }
                    }
                }
                st.e2b.builds.finish(
                    &build_id,
                    wire::TemplateBuildStatus::Error,
                    Some("the build ended without a result (see GET /v1/templates)".into()),
                );
            });
        }
    }
    Ok(StatusCode::ACCEPTED)
}

fn template_error(e: TemplateError) -> E2bError {
    let body = e.body();
    E2bError(
        StatusCode::from_u16(body.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST),
        body.message,
    )
}

#[derive(serde::Deserialize)]
struct StatusQuery {
    #[serde(default, rename = "logsOffset")]
    logs_offset: Option<usize>,
}

/// `GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N`.
async fn status(
    State(st): St,
    w: Who,
    Path((template_id, build_id)): Path<(String, String)>,
    q: Result<Query<StatusQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<wire::TemplateBuildInfo>, E2bError> {
    let project = project_of(w)?;
    let offset = q.ok().and_then(|Query(q)| q.logs_offset).unwrap_or(0);
    let g = st.e2b.builds.lock()?;
    let b = g.of(&project, &template_id, &build_id)?;
    let from = offset.min(b.entries.len());
    let to = (from + wire::MAX_STATUS_ENTRIES).min(b.entries.len());
    Ok(Json(wire::TemplateBuildInfo {
        logs: b.entries[from..to]
            .iter()
            .map(|e| e.message.clone())
            .collect(),
        log_entries: b.entries[from..to].to_vec(),
        template_id,
        build_id,
        status: b.status,
        reason: b.reason.clone(),
    }))
}

/// `GET /templates/aliases/{alias}`: 200 for a ready template the project may use.
async fn alias(
    State(st): St,
    w: Who,
    Path(alias): Path<String>,
) -> Result<Json<wire::TemplateAliasResponse>, E2bError> {
    let project = project_of(w)?;
    let name = if alias == "base" {
        lizard_template::DEFAULT_TEMPLATE.to_string()
    } else {
        alias.clone()
    };
    let missing = || {
        E2bError(
            StatusCode::NOT_FOUND,
            format!("template alias {alias} not found"),
        )
    };
    match st.templates.get(&project, &name) {
        Ok(t)
            if t.state == TemplateState::Ready
                || t.versions.iter().any(|v| v.state == TemplateState::Ready) =>
        {
            Ok(Json(wire::TemplateAliasResponse {
                template_id: alias,
                public: t.public,
            }))
        }
        Ok(_) | Err(TemplateError::NotFound(_)) => Err(missing()),
        Err(e) => Err(template_error(e)),
    }
}

/// E2B's steps as a build: the plan, the text the cache key covers, the merged context.
struct Translated {
    plan: Plan,
    key_text: String,
    context: Vec<u8>,
}

/// `fromImage` → a base Lizard builds, or a clear error.
fn image_base(image: &str) -> Result<Base, E2bError> {
    let img = image
        .strip_prefix("docker.io/")
        .unwrap_or(image)
        .strip_prefix("library/")
        .unwrap_or(image.strip_prefix("docker.io/").unwrap_or(image));
    if E2B_BASE_IMAGES.contains(&img) {
        return Ok(Base::Template(lizard_template::DEFAULT_TEMPLATE.into()));
    }
    if let Some(tag) = img.strip_prefix("debian:") {
        let suite = tag.strip_suffix("-slim").unwrap_or(tag);
        if DEBIAN_SUITES.contains(&suite) {
            return Ok(Base::Debian(suite.to_string()));
        }
    }
    Err(bad(format!(
        "fromImage {image:?} is not supported: Lizard builds templates from debian:{} (its \
         built-in Debian bases), e2bdev/base (Lizard's code-interpreter-v1) or an existing \
         template (fromTemplate), not from container images",
        DEBIAN_SUITES.join("|debian:")
    )))
}

fn env_name_ok(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with("LIZARD_")
}

/// A step's user: E2B's default is `user`; `root` is the build sandbox's root (`None`).
fn step_user(u: &str) -> Option<String> {
    (u != "root").then(|| u.to_string())
}

fn short(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 120 {
        format!("{}…", one.chars().take(120).collect::<String>())
    } else {
        one
    }
}

/// Translate E2B's build start into a [`Plan`] and a context (pure, blocking: archives are
/// decompressed and checked here).
fn translate(
    req: &wire::TemplateBuildStartV2,
    archives: &BTreeMap<String, Bytes>,
) -> Result<Translated, E2bError> {
    if req.from_image_registry.is_some() {
        return Err(bad(
            "fromImageRegistry is not supported: Lizard does not pull container images",
        ));
    }
    for (what, v) in [("startCmd", &req.start_cmd), ("readyCmd", &req.ready_cmd)] {
        if v.as_deref().is_some_and(|c| !c.trim().is_empty()) {
            return Err(bad(format!(
                "{what} is not supported: a Lizard template holds files, not a running process \
                 (start it in the sandbox instead)"
            )));
        }
    }
    let from = match (req.from_image.as_deref(), req.from_template.as_deref()) {
        (Some(i), None) if !i.is_empty() => image_base(i)?,
        (None, Some(t)) if !t.is_empty() => {
            let t = if t == "base" {
                lizard_template::DEFAULT_TEMPLATE
            } else {
                t
            };
            if !lizard_template::layer::valid_name(t) {
                return Err(bad(format!("fromTemplate {t:?}: not a template name")));
            }
            Base::Template(t.to_string())
        }
        _ => return Err(bad("exactly one of fromImage and fromTemplate is needed")),
    };
    let mut user = "user".to_string();
    let mut workdir: Option<String> = None;
    let mut env = BTreeMap::new();
    let mut final_user: Option<String> = None;
    let mut steps = Vec::new();
    let mut used: Vec<(String, String, String)> = Vec::new();
    for (i, s) in req.steps.iter().enumerate() {
        let line = i + 1;
        let a = &s.args;
        let arg = |n: usize| a.get(n).map(String::as_str).unwrap_or("");
        let step = |text: String,
                    action: Action,
                    user: Option<String>,
                    env: &BTreeMap<String, String>,
                    workdir: &Option<String>| Step {
            line,
            text,
            action,
            env: env.clone(),
            workdir: workdir.clone(),
            user,
        };
        match s.kind.to_ascii_uppercase().as_str() {
            "RUN" => {
                let cmd = arg(0);
                if cmd.is_empty() {
                    return Err(bad(format!("step {line}: RUN without a command")));
                }
                let u = if arg(1).is_empty() { user.as_str() } else { arg(1) };
                steps.push(step(
                    format!("RUN {}", short(cmd)),
                    Action::Run(vec!["/bin/sh".into(), "-c".into(), cmd.to_string()]),
                    step_user(u),
                    &env,
                    &workdir,
                ));
            }
            "COPY" => {
                let (src, dest) = (arg(0), arg(1));
                if src.is_empty() || dest.is_empty() {
                    return Err(bad(format!("step {line}: COPY needs a source and a destination")));
                }
                if !arg(3).is_empty() {
                    return Err(bad(format!(
                        "step {line}: COPY with a mode is not supported: chmod in a runCmd after it"
                    )));
                }
                let hash = s.files_hash.as_deref().unwrap_or("");
                if !archives.contains_key(hash) {
                    return Err(bad(format!(
                        "step {line}: COPY {src}: its files (hash {hash:?}) were not uploaded"
                    )));
                }
                used.push((hash.to_string(), src.to_string(), dest.to_string()));
                // A relative destination is under the working directory (E2B's default: the
                // user's home).
                let dest = if dest.starts_with('/') {
                    dest.to_string()
                } else {
                    format!(
                        "{}/{dest}",
                        workdir.as_deref().unwrap_or("/home/user").trim_end_matches('/')
                    )
                };
                let u = if arg(2).is_empty() { user.as_str() } else { arg(2) };
                let u = u.split(':').next().unwrap_or(u);
                steps.push(step(
                    format!("COPY {} {}", short(src), short(&dest)),
                    Action::Copy {
                        sources: vec![src.to_string()],
                        dest,
                        chown: None,
                        extract: false,
                    },
                    step_user(u),
                    &env,
                    &workdir,
                ));
            }
            "ENV" => {
                if a.is_empty() || a.len() % 2 != 0 {
                    return Err(bad(format!("step {line}: ENV takes name, value pairs")));
                }
                for kv in a.chunks(2) {
                    if !env_name_ok(&kv[0]) || kv[1].contains('\0') {
                        return Err(bad(format!(
                            "step {line}: ENV {:?}: not a variable name (or a reserved LIZARD_ one)",
                            kv[0]
                        )));
                    }
                    env.insert(kv[0].clone(), kv[1].clone());
                }
            }
            "WORKDIR" => {
                let d = arg(0);
                if d.is_empty() || d.contains('\0') {
                    return Err(bad(format!("step {line}: WORKDIR needs a directory")));
                }
                let d = if d.starts_with('/') {
                    d.to_string()
                } else {
                    format!(
                        "{}/{d}",
                        workdir.as_deref().unwrap_or("/home/user").trim_end_matches('/')
                    )
                };
                steps.push(step(
                    format!("WORKDIR {}", short(&d)),
                    Action::Workdir(d.clone()),
                    step_user(&user),
                    &env,
                    &workdir,
                ));
                workdir = Some(d);
            }
            "USER" => {
                let u = arg(0);
                let ok = !u.is_empty()
                    && u.len() <= 32
                    && u.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !ok {
                    return Err(bad(format!("step {line}: USER {u:?}: not a user name")));
                }
                user = u.to_string();
                final_user = Some(u.to_string());
            }
            other => {
                return Err(bad(format!(
                    "step {line}: step type {other:?} is not supported (RUN, COPY, ENV, WORKDIR and USER are)"
                )))
            }
        }
    }
    let context = merge_context(archives, &used)?;
    // A forced build is never a cache hit.
    let nonce = if req.force == Some(true) || req.steps.iter().any(|s| s.force == Some(true)) {
        random_hex(8)
    } else {
        String::new()
    };
    let canonical = serde_json::json!({
        "fromImage": req.from_image,
        "fromTemplate": req.from_template,
        "steps": req.steps.iter().map(|s| serde_json::json!({"type": s.kind, "args": s.args, "filesHash": s.files_hash})).collect::<Vec<_>>(),
        "nonce": nonce,
    });
    Ok(Translated {
        plan: Plan {
            from,
            from_line: 0,
            steps,
            env,
            workdir,
            // The last USER is the template's user; root stays the base's (sandboxes reach root
            // with sudo or `user: "root"`).
            user: final_user.filter(|u| u != "root"),
        },
        key_text: format!("e2b-template-build-v1\n{canonical}"),
        context,
    })
}

/// One archive entry, as far as E2B's files hash covers it.
struct Entry {
    path: String,
    /// `st_mode` as the SDK saw it (type bits and permissions).
    mode: u32,
    size: u64,
    /// File contents or a symlink's target.
    data: Vec<u8>,
    dir: bool,
}

/// E2B's files hash of one COPY (both SDKs: `sha256("COPY src dest")`, then per entry its path,
/// mode, size and contents or link target), or `None` when the archive holds a directory (the
/// JavaScript SDK hashes a directory's on-disk size, which a tar does not record).
fn files_hash(src: &str, dest: &str, entries: &[Entry]) -> Option<String> {
    if entries.iter().any(|e| e.dir) {
        return None;
    }
    let mut h = sha2::Sha256::new();
    h.update(format!("COPY {src} {dest}").as_bytes());
    for e in entries {
        h.update(e.path.as_bytes());
        h.update(e.mode.to_string().as_bytes());
        h.update(e.size.to_string().as_bytes());
        h.update(&e.data);
    }
    Some(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Read an uploaded archive (tar, or tar.gz by its magic) into entries: paths inside the context
/// only, files, directories and symlinks only, bounded in bytes and entries.
fn read_archive(bytes: &[u8], budget: &mut usize) -> Result<Vec<Entry>, E2bError> {
    let reader: Box<dyn Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let limited = reader.take(MAX_UPLOAD as u64 + 1024 * 1024);
    let mut ar = tar::Archive::new(limited);
    let mut out = Vec::new();
    let broken =
        |e: std::io::Error| bad(format!("an uploaded archive is not a valid tar(.gz): {e}"));
    for entry in ar.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        if out.len() >= MAX_CONTEXT_ENTRIES {
            return Err(bad(format!(
                "more than {MAX_CONTEXT_ENTRIES} files to copy"
            )));
        }
        let path = entry.path().map_err(broken)?.to_string_lossy().into_owned();
        let rel = std::path::Path::new(&path);
        let inside = !path.is_empty()
            && !rel.is_absolute()
            && rel.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            });
        if !inside {
            return Err(bad(format!(
                "an uploaded archive names {path:?}: outside the context"
            )));
        }
        let header = entry.header();
        let perm = header.mode().map_err(broken)? & 0o7777;
        let kind = header.entry_type();
        let (mode, dir, data) = if kind.is_file() {
            let size = header.size().map_err(broken)? as usize;
            if size > *budget {
                return Err(E2bError(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the files to copy are larger than {MAX_UPLOAD} bytes"),
                ));
            }
            *budget -= size;
            let mut data = Vec::with_capacity(size);
            (&mut entry)
                .take(size as u64)
                .read_to_end(&mut data)
                .map_err(broken)?;
            (0o100000 | perm, false, data)
        } else if kind.is_dir() {
            (0o040000 | perm, true, Vec::new())
        } else if kind.is_symlink() {
            let target = entry
                .link_name()
                .map_err(broken)?
                .map(|t| t.to_string_lossy().into_owned().into_bytes())
                .unwrap_or_default();
            (0o120000 | perm, false, target)
        } else {
            return Err(bad(format!(
                "an uploaded archive holds {path:?}, which is not a file, directory or symlink"
            )));
        };
        out.push(Entry {
            path: path.trim_end_matches('/').to_string(),
            mode,
            size: data.len() as u64,
            data,
            dir,
        });
    }
    Ok(out)
}

/// The build context: every COPY's archive checked against its hash (where it can be) and merged
/// into one tar.
fn merge_context(
    archives: &BTreeMap<String, Bytes>,
    used: &[(String, String, String)],
) -> Result<Vec<u8>, E2bError> {
    if used.is_empty() {
        return Ok(Vec::new());
    }
    let mut budget = MAX_UPLOAD;
    let mut merged = tar::Builder::new(Vec::new());
    let mut done: Vec<&str> = Vec::new();
    // Two COPYs of one context may share files: each path once.
    let mut paths = std::collections::HashSet::new();
    for (hash, src, dest) in used {
        let entries = read_archive(&archives[hash], &mut budget)?;
        if let Some(h) = files_hash(src, dest, &entries) {
            if &h != hash {
                return Err(bad(format!(
                    "COPY {src}: the uploaded files do not match their hash {hash}"
                )));
            }
        }
        if done.contains(&hash.as_str()) {
            continue;
        }
        done.push(hash);
        for e in entries {
            if !paths.insert(e.path.clone()) {
                continue;
            }
            let mut hd = tar::Header::new_gnu();
            hd.set_mode(e.mode & 0o7777);
            hd.set_mtime(0);
            let io =
                |err: std::io::Error| E2bError(StatusCode::INTERNAL_SERVER_ERROR, err.to_string());
            if e.dir {
                hd.set_entry_type(tar::EntryType::Directory);
                hd.set_size(0);
                merged
                    .append_data(&mut hd, &e.path, std::io::empty())
                    .map_err(io)?;
            } else if e.mode & 0o170000 == 0o120000 {
                hd.set_entry_type(tar::EntryType::Symlink);
                hd.set_size(0);
                let target = String::from_utf8_lossy(&e.data).into_owned();
                merged.append_link(&mut hd, &e.path, &target).map_err(io)?;
            } else {
                hd.set_entry_type(tar::EntryType::Regular);
                hd.set_size(e.data.len() as u64);
                merged
                    .append_data(&mut hd, &e.path, e.data.as_slice())
                    .map_err(io)?;
            }
        }
    }
    merged
        .into_inner()
        .map_err(|e| E2bError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: &str, args: &[&str]) -> wire::TemplateStep {
        wire::TemplateStep {
            kind: kind.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// A tar(.gz) like the SDKs' (`tarfile` with `arcname` relative to the context).
    fn archive(files: &[(&str, &[u8])], gzip: bool) -> Bytes {
        let mut b = tar::Builder::new(Vec::new());
        for (p, d) in files {
            let mut h = tar::Header::new_ustar();
            h.set_mode(0o644);
            h.set_size(d.len() as u64);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, p, *d).unwrap();
        }
        let raw = b.into_inner().unwrap();
        if !gzip {
            return Bytes::from(raw);
        }
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &raw).unwrap();
        Bytes::from(e.finish().unwrap())
    }

    fn e2b_hash(src: &str, dest: &str, files: &[(&str, &[u8])]) -> String {
        let mut h = sha2::Sha256::new();
        h.update(format!("COPY {src} {dest}"));
        for (p, d) in files {
            h.update(p.as_bytes());
            h.update(format!("{}", 0o100644));
            h.update(d.len().to_string());
            h.update(d);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn steps_translate_to_the_dockerfile_engines_plan() {
        let files: &[(&str, &[u8])] = &[("data.txt", b"hello\n")];
        let hash = e2b_hash("data.txt", "/home/user/", files);
        let mut archives = BTreeMap::new();
        archives.insert(hash.clone(), archive(files, true));
        archives.insert(e2b_hash("data.txt", "rel/", files), archive(files, false));
        let mut copy = step("COPY", &["data.txt", "/home/user/", "", ""]);
        copy.files_hash = Some(hash.clone());
        let req = wire::TemplateBuildStartV2 {
            from_template: Some("code-interpreter-v1".into()),
            steps: vec![
                step("ENV", &["A", "1", "B", "two words"]),
                copy,
                step("RUN", &["apt-get update", "root"]),
                step("RUN", &["echo hi"]),
                step("WORKDIR", &["app"]),
                step("USER", &["root"]),
                step("RUN", &["id"]),
                {
                    let mut c = step("COPY", &["data.txt", "rel/", "", ""]);
                    c.files_hash = Some(e2b_hash("data.txt", "rel/", files));
                    c
                },
            ],
            ..Default::default()
        };
        let t = translate(&req, &archives).unwrap();
        let p = &t.plan;
        assert_eq!(p.from, Base::Template("code-interpreter-v1".into()));
        assert_eq!(p.env["B"], "two words");
        assert_eq!(p.steps.len(), 6);
        assert_eq!(p.steps[0].user.as_deref(), Some("user"));
        assert_eq!(p.steps[0].env["A"], "1");
        assert!(
            matches!(&p.steps[0].action, Action::Copy { sources, dest, .. } if sources == &["data.txt"] && dest == "/home/user/")
        );
        assert_eq!(p.steps[1].user, None, "root");
        assert_eq!(p.steps[2].user.as_deref(), Some("user"));
        assert_eq!(p.steps[3].action, Action::Workdir("/home/user/app".into()));
        assert_eq!(
            (p.steps[4].user.as_deref(), p.steps[4].workdir.as_deref()),
            (None, Some("/home/user/app"))
        );
        assert_eq!(p.user, None, "a last USER root keeps the base's user");
        assert!(
            matches!(&p.steps[5].action, Action::Copy { dest, .. } if dest == "/home/user/app/rel/")
        );
        // The merged context holds the file.
        let mut ar = tar::Archive::new(t.context.as_slice());
        let names: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["data.txt"]);
        // The same steps, the same key; forced: another.
        assert_eq!(translate(&req, &archives).unwrap().key_text, t.key_text);
        let forced = wire::TemplateBuildStartV2 {
            force: Some(true),
            ..req.clone()
        };
        assert_ne!(translate(&forced, &archives).unwrap().key_text, t.key_text);
        // Files that do not match their hash are refused.
        let mut wrong = archives.clone();
        wrong.insert(hash, archive(&[("data.txt", b"other\n")], false));
        let e = translate(&req, &wrong).err().unwrap();
        assert!(e.1.contains("do not match"), "{}", e.1);
    }

    #[test]
    fn unsupported_bases_and_steps_are_clear_errors() {
        let base = |img: &str| wire::TemplateBuildStartV2 {
            from_image: Some(img.into()),
            ..Default::default()
        };
        let none = BTreeMap::new();
        assert_eq!(
            translate(&base("debian:bookworm"), &none)
                .unwrap()
                .plan
                .from,
            Base::Debian("bookworm".into())
        );
        assert_eq!(
            translate(&base("debian:trixie-slim"), &none)
                .unwrap()
                .plan
                .from,
            Base::Debian("trixie".into())
        );
        assert_eq!(
            translate(&base("e2bdev/base"), &none).unwrap().plan.from,
            Base::Template("code-interpreter-v1".into())
        );
        for (req, word) in [
            (base("ubuntu:24.04"), "not from container images"),
            (base("python:3.12"), "not supported"),
            (
                wire::TemplateBuildStartV2 {
                    from_image: Some("debian:bookworm".into()),
                    from_template: Some("x".into()),
                    ..Default::default()
                },
                "exactly one",
            ),
            (
                wire::TemplateBuildStartV2 {
                    start_cmd: Some("node server.js".into()),
                    ..base("e2bdev/base")
                },
                "startCmd",
            ),
            (
                wire::TemplateBuildStartV2 {
                    from_image_registry: Some(serde_json::json!({"type": "aws"})),
                    ..base("e2bdev/base")
                },
                "fromImageRegistry",
            ),
            (
                wire::TemplateBuildStartV2 {
                    steps: vec![step("COPY", &["a", "/b", "", "0755"])],
                    ..base("e2bdev/base")
                },
                "mode",
            ),
            (
                wire::TemplateBuildStartV2 {
                    steps: vec![step("COPY", &["a", "/b", "", ""])],
                    ..base("e2bdev/base")
                },
                "were not uploaded",
            ),
            (
                wire::TemplateBuildStartV2 {
                    steps: vec![step("ENV", &["LIZARD_X", "1"])],
                    ..base("e2bdev/base")
                },
                "reserved",
            ),
            (
                wire::TemplateBuildStartV2 {
                    steps: vec![step("HEALTHCHECK", &["x"])],
                    ..base("e2bdev/base")
                },
                "not supported",
            ),
        ] {
            let e = translate(&req, &none).err().unwrap();
            assert_eq!(e.0, StatusCode::BAD_REQUEST);
            assert!(e.1.contains(word), "{word}: {}", e.1);
        }
    }

    #[test]
    fn archives_stay_inside_the_context_and_are_bounded() {
        for bad_path in ["../x", "/etc/passwd", "a/../../x"] {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(1);
            h.set_entry_type(tar::EntryType::Regular);
            // Bypass the builder's own path checks: write the name into the header directly.
            let name = h.as_gnu_mut().unwrap();
            name.name[..bad_path.len()].copy_from_slice(bad_path.as_bytes());
            h.set_cksum();
            let mut raw = h.as_bytes().to_vec();
            raw.extend_from_slice(&[b'x'; 512]);
            raw.extend_from_slice(&[0; 1024]);
            let mut budget = MAX_UPLOAD;
            let e = read_archive(&raw, &mut budget).err().unwrap();
            assert!(e.1.contains("outside the context"), "{bad_path}: {}", e.1);
        }
        let big = archive(&[("a", &[0u8; 2048])], true);
        let mut budget = 1024;
        assert_eq!(
            read_archive(&big, &mut budget).err().unwrap().0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let mut budget = MAX_UPLOAD;
        assert!(read_archive(b"not a tar at all, not at all", &mut budget).is_err());
    }
}
