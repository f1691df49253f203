//! E2B's volume content API (`Volume.list/makeDir/getInfo/exists/updateMetadata/readFile/
//! writeFile/remove`, at `E2B_VOLUME_API_URL`): `/volumecontent/{volume id}/{dir,path,file}`, with
//! the volume's token (`Authorization: Bearer`, given with the volume by `crate::e2b_resources`).
//!
//! A volume's files were written by sandboxes: they are the attacker's, and the host never
//! resolves a path among them (docs/SECURITY.md). So the host does not touch them: each operation
//! runs inside a **helper sandbox** of the volume's project that mounts the volume at
//! [`MOUNT`] — an ordinary sandbox, with its isolation — through its agent: reads and writes
//! through the agent's files API (streamed, as root of that sandbox), everything else as one
//! short Python program run by the agent as root, whose JSON answer is read bounded and checked.
//! The helper is made on the first call for a volume, labelled with [`HELPER_MARK`], kept while
//! calls come (its timeout is pushed to [`HELPER_IDLE_MS`] from each call) and killed by its
//! timeout after; a volume delete through E2B's API kills it first. It is a sandbox of the
//! project like any other: it shows in lists and counts in usage.

use crate::e2b_shared::E2bError;
use crate::sandboxes::{CreateSandbox, Sandbox};
use crate::state::AppState;
use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use lizard_http::api::ApiError;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Where the helper sandbox mounts the volume.
pub const MOUNT: &str = "/mnt/volume";

/// The metadata key that marks a volume's helper sandbox (its value: the volume's id).
pub const HELPER_MARK: &str = "lizard.e2b.volume-content";

/// A helper sandbox lives this long after the last call.
pub const HELPER_IDLE_MS: u64 = 120_000;

/// Each operation's deadline inside the helper.
const OP_DEADLINE: Duration = Duration::from_secs(60);

/// The most bytes of an operation's JSON answer read.
const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// The operations, run as root in the helper: `sys.argv[1]` is base64 JSON `{op, path, …}`
/// (`path` already below [`MOUNT`]); prints `{"ok": …}` or `{"error": kind, "message": …}`. What
/// it makes is owned by `uid`/`gid` when given, else by the sandbox user (1000), who owns the
/// volume's root.
const PROGRAM: &str = r#"
import base64, datetime, json, os, shutil, stat, sys
a = json.loads(base64.b64decode(sys.argv[1]))
M = "/mnt/volume"
MAX = 10000
class Err(Exception):
    def __init__(self, kind, message):
        self.kind, self.message = kind, message
def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")
def ent(p):
    s = os.lstat(p)
    m = s.st_mode
    t = "directory" if stat.S_ISDIR(m) else "symlink" if stat.S_ISLNK(m) else "file" if stat.S_ISREG(m) else "unknown"
    e = {"name": "" if p == M else os.path.basename(p), "type": t,
         "path": "/" if p == M else "/" + os.path.relpath(p, M), "size": s.st_size,
         "mode": stat.S_IMODE(m), "uid": s.st_uid, "gid": s.st_gid,
         "atime": iso(s.st_atime), "mtime": iso(s.st_mtime), "ctime": iso(s.st_ctime)}
    if t == "symlink":
        e["target"] = os.readlink(p)
    return e
def need(p):
    if not os.path.lexists(p):
        raise Err("not_found", "path %s not found" % a["rel"])
def owner(p):
    os.lchown(p, a.get("uid", -1) if a.get("uid") is not None else -1, a.get("gid", -1) if a.get("gid") is not None else -1)
    if a.get("mode") is not None and not os.path.islink(p):
        os.chmod(p, a["mode"])
def made(p):
    os.lchown(p, a["uid"] if a.get("uid") is not None else 1000, a["gid"] if a.get("gid") is not None else 1000)
    if a.get("mode") is not None:
        os.chmod(p, a["mode"])
def run():
    p, op = a["path"], a["op"]
    if op == "stat":
        need(p); return ent(p)
    if op == "list":
        need(p)
        if not os.path.isdir(p) or os.path.islink(p):
            raise Err("invalid", "path %s is not a directory" % a["rel"])
        out, level, depth = [], [p], max(1, int(a.get("depth") or 1))
        for _ in range(depth):
            nxt = []
            for d in level:
                for n in sorted(os.listdir(d)):
                    q = os.path.join(d, n)
                    out.append(ent(q))
                    if len(out) > MAX:
                        raise Err("invalid", "more than %d entries: list with a smaller depth" % MAX)
                    if os.path.isdir(q) and not os.path.islink(q):
                        nxt.append(q)
            level = nxt
        return out
    if op == "mkdir":
        if os.path.lexists(p):
            if a.get("force") and os.path.isdir(p):
                return ent(p)
            raise Err("exists", "path %s already exists" % a["rel"])
        parent = os.path.dirname(p)
        if not os.path.isdir(parent):
            if not a.get("force"):
                raise Err("not_found", "the parent of %s does not exist (force creates it)" % a["rel"])
            os.makedirs(parent)
            q = parent
            while q != M:
                made(q); q = os.path.dirname(q)
        os.mkdir(p); made(p); return ent(p)
    if op == "chattr":
        need(p); owner(p); return ent(p)
    if op == "remove":
        need(p)
        if p == M:
            raise Err("invalid", "the volume's root cannot be removed")
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
        return None
    if op == "prewrite":
        if os.path.isdir(p) and not os.path.islink(p):
            raise Err("invalid", "path %s is a directory" % a["rel"])
        if os.path.lexists(p) and not a.get("force"):
            raise Err("exists", "file %s already exists (force overwrites it)" % a["rel"])
        parent = os.path.dirname(p)
        if not os.path.isdir(parent):
            raise Err("not_found", "the parent of %s does not exist" % a["rel"])
        return None
    if op == "postwrite":
        need(p); made(p); return ent(p)
    raise Err("invalid", "unknown operation")
try:
    print(json.dumps({"ok": run()}))
except Err as e:
    print(json.dumps({"error": e.kind, "message": e.message}))
except FileNotFoundError as e:
    print(json.dumps({"error": "not_found", "message": "path %s not found" % a["rel"]}))
except OSError as e:
    print(json.dumps({"error": "invalid", "message": "%s: %s" % (a["rel"], e.strerror)}))
"#;

/// `ANY /volumecontent/{id}/{kind}` (`kind`: `dir`, `path` or `file`).
pub async fn volume_content(
    State(st): State<Arc<AppState>>,
    Path((id, kind)): Path<(String, String)>,
    req: Request,
) -> Response {
    handle(&st, &id, &kind, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn error(status: StatusCode, message: impl Into<String>) -> E2bError {
    E2bError(status, message.into())
}

async fn handle(
    st: &Arc<AppState>,
    id: &str,
    kind: &str,
    req: Request,
) -> Result<Response, E2bError> {
    // The token first (an HMAC of the id): no lookup without it, the same 401 either way.
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .trim();
    if sha2::Sha256::digest(st.e2b.volume_token(id).as_bytes())
        != sha2::Sha256::digest(given.as_bytes())
    {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong volume token (Authorization: Bearer)",
        ));
    }
    let row = st
        .sandboxes
        .store
        .get_volume(id)
        .map_err(ApiError::from)?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("volume {id} not found")))?;
    let q = Query::parse(req.uri().query());
    let rel = q.path.clone().unwrap_or_else(|| "/".into());
    let path = inside(&rel)?;
    let mut args = serde_json::json!({"path": path, "rel": rel});
    let op = match (req.method().clone(), kind) {
        (Method::GET, "dir") => {
            args["depth"] = q.depth.into();
            "list"
        }
        (Method::POST, "dir") => "mkdir",
        (Method::GET | Method::HEAD, "path") => "stat",
        (Method::PATCH, "path") => "chattr",
        (Method::DELETE, "path") => "remove",
        (Method::GET, "file") => "read",
        (Method::PUT, "file") => "write",
        (m, k) => {
            return Err(error(
                StatusCode::NOT_FOUND,
                format!("no {m} /volumecontent/{{id}}/{k} in E2B's volume content API"),
            ))
        }
    };
    for (k, v) in [("uid", q.uid), ("gid", q.gid), ("mode", q.mode)] {
        args[k] = v.into();
    }
    args["force"] = q.force.into();
    let sb = helper(st, &row).await?;
    match op {
        "read" => {
            let uri = format!("/files?{}", files_query(&path));
            crate::proxy::send(st, &sb, req, &uri)
                .await
                .map_err(E2bError::from)
        }
        "write" => {
            run(&sb, "prewrite", &args).await?;
            let uri = format!("/files?{}", files_query(&path));
            let (parts, body) = req.into_parts();
            let mut put = Request::from_parts(parts, body);
            *put.method_mut() = Method::PUT;
            let written = crate::proxy::send(st, &sb, put, &uri)
                .await
                .map_err(E2bError::from)?;
            if !written.status().is_success() {
                return Ok(written);
            }
            let entry = run(&sb, "postwrite", &args).await?;
            Ok((StatusCode::CREATED, Json(entry)).into_response())
        }
        "chattr" => {
            let body = axum::body::to_bytes(req.into_body(), 64 * 1024)
                .await
                .map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
            let m: Attrs = serde_json::from_slice(&body).map_err(|e| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("invalid request body: {e}"),
                )
            })?;
            for (k, v) in [("uid", m.uid), ("gid", m.gid), ("mode", m.mode)] {
                args[k] = v.into();
            }
            Ok(Json(run(&sb, op, &args).await?).into_response())
        }
        "mkdir" => Ok((StatusCode::CREATED, Json(run(&sb, op, &args).await?)).into_response()),
        "remove" => {
            run(&sb, op, &args).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Ok(Json(run(&sb, op, &args).await?).into_response()),
    }
}

/// The query of the agent's `/files` for `path`, as the helper's root.
fn files_query(path: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("path", path)
        .append_pair("user", "root")
        .finish()
}

/// `?path=&depth=&uid=&gid=&mode=&force=`.
#[derive(Default)]
struct Query {
    path: Option<String>,
    depth: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    force: Option<bool>,
}

impl Query {
    fn parse(query: Option<&str>) -> Query {
        let mut q = Query::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "path" => q.path = Some(v.into_owned()),
                "depth" => q.depth = v.parse().ok(),
                "uid" => q.uid = v.parse().ok(),
                "gid" => q.gid = v.parse().ok(),
                "mode" => q.mode = v.parse().ok(),
                "force" => q.force = v.parse().ok(),
                _ => {}
            }
        }
        q
    }
}

/// `updateMetadata`'s body.
#[derive(serde::Deserialize)]
struct Attrs {
    #[serde(default)]
    uid: Option<u32>,
    #[serde(default)]
    gid: Option<u32>,
    #[serde(default)]
    mode: Option<u32>,
}

/// A volume path (`/`, `/a/b`, `a/b`) as the helper's path below [`MOUNT`]; `..` is refused.
fn inside(rel: &str) -> Result<String, E2bError> {
    let mut out = String::from(MOUNT);
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." || part.contains('\0') {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("path {rel:?}: no '..' or NUL in a volume path"),
            ));
        }
        out.push('/');
        out.push_str(part);
    }
    Ok(out)
}

/// Run one operation of [`PROGRAM`] in the helper; its `ok` value, or its error as E2B's.
async fn run(
    sb: &Sandbox,
    op: &str,
    args: &serde_json::Value,
) -> Result<serde_json::Value, E2bError> {
    let mut args = args.clone();
    args["op"] = op.into();
    let req = lizard_proto::StartCommandRequest {
        argv: Some(vec![
            "python3".into(),
            "-c".into(),
            PROGRAM.into(),
            base64::engine::general_purpose::STANDARD.encode(args.to_string()),
        ]),
        user: Some("root".into()),
        timeout_ms: Some(OP_DEADLINE.as_millis() as u64),
        ..Default::default()
    };
    let mut out = String::new();
    let mut over = false;
    let mut on_event = |ev: &lizard_proto::CommandEvent| {
        if let lizard_proto::CommandEvent::Stdout { text, .. } = ev {
            if out.len() + text.len() > MAX_ANSWER {
                over = true;
            } else {
                out.push_str(text);
            }
        }
    };
    let end = sb
        .agent
        .run_command(
            &req,
            OP_DEADLINE + Duration::from_secs(10),
            MAX_ANSWER,
            &mut on_event,
        )
        .await
        .map_err(|e| {
            error(
                StatusCode::BAD_GATEWAY,
                format!("the volume's helper sandbox did not answer: {e}"),
            )
        })?;
    let broken = |why: &str| {
        error(
            StatusCode::BAD_GATEWAY,
            format!("the volume's helper sandbox gave no answer ({why})"),
        )
    };
    if over {
        return Err(broken("too large"));
    }
    if end.exit_code != Some(0) {
        return Err(broken("the operation failed"));
    }
    let answer: Answer = serde_json::from_str(out.trim()).map_err(|_| broken("not JSON"))?;
    match answer {
        Answer::Ok { ok } => Ok(ok),
        Answer::Err {
            error: kind,
            message,
        } => Err(error(
            match kind.as_str() {
                "not_found" => StatusCode::NOT_FOUND,
                "exists" => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            },
            message,
        )),
    }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Answer {
    Ok { ok: serde_json::Value },
    Err { error: String, message: String },
}

/// The volume's helper sandbox: running, its timeout pushed on; made (and waited for) on first
/// use, one at a time per server.
async fn helper(
    st: &Arc<AppState>,
    row: &crate::store::VolumeRow,
) -> Result<Arc<Sandbox>, E2bError> {
    let _g = st.e2b.volume_helpers.lock().await;
    let found = st.sandboxes.all().into_iter().find(|sb| {
        sb.project == row.project
            && sb.metadata.get(HELPER_MARK).map(String::as_str) == Some(row.id.as_str())
            && sb.state() != crate::store::StoredState::Killed
    });
    let sb = match found {
        Some(sb) => {
            let (sb, _) = st.sandboxes.resume(&sb.id).await?;
            st.sandboxes.set_timeout(&sb.id, HELPER_IDLE_MS)?;
            sb
        }
        None => {
            st.sandboxes
                .create(CreateSandbox {
                    project: row.project.clone(),
                    timeout_ms: Some(HELPER_IDLE_MS),
                    metadata: BTreeMap::from([(HELPER_MARK.to_string(), row.id.clone())]),
                    volumes: vec![lizard_proto::VolumeMountRequest {
                        name: row.id.clone(),
                        mount_path: Some(MOUNT.into()),
                        read_only: false,
                    }],
                    ..Default::default()
                })
                .await?
        }
    };
    Ok(sb)
}

/// Kill the helper sandboxes of volume `id` (before the volume is deleted).
pub async fn kill_helpers(st: &AppState, id: &str) {
    for sb in st.sandboxes.all() {
        if sb.metadata.get(HELPER_MARK).map(String::as_str) == Some(id) {
            let _ = st.sandboxes.kill(&sb.id).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_paths_stay_below_the_mount() {
        assert_eq!(inside("/").unwrap(), MOUNT);
        assert_eq!(inside("").unwrap(), MOUNT);
        assert_eq!(inside("/a//b/./c").unwrap(), format!("{MOUNT}/a/b/c"));
        assert_eq!(inside("a/b").unwrap(), format!("{MOUNT}/a/b"));
        assert!(inside("/a/../../etc").is_err());
        assert!(inside("..").is_err());
    }

    #[test]
    fn queries_are_read_leniently() {
        let q = Query::parse(Some(
            "path=%2Fx%20y&depth=2&uid=5&gid=x&mode=420&force=true",
        ));
        assert_eq!(q.path.as_deref(), Some("/x y"));
        assert_eq!(
            (q.depth, q.uid, q.gid, q.mode, q.force),
            (Some(2), Some(5), None, Some(420), Some(true))
        );
    }
}
