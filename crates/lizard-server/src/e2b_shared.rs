//! What the E2B modules share ([`crate::e2b`]'s control plane and sandbox traffic,
//! [`crate::e2b_templates`]'s template builds): the server's E2B state ([`E2b`]: the token secret,
//! debug mode and the template build registry), E2B's error body ([`E2bError`]) and its JSON body
//! extractor ([`E2bJson`]).

use crate::sandboxes::SandboxError;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use hmac::Mac;
use lizard_http::api::ApiError;
use lizard_proto::e2b::api;
use lizard_proto::e2b::templates as wire;
use sha2::Digest;
use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path as FsPath;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// E2B state of the server: the token secret and, in debug mode, the default sandbox's project.
pub struct E2b {
    pub(crate) secret: [u8; 32],
    pub(crate) debug_project: Option<String>,
    pub(crate) debug_lock: tokio::sync::Mutex<()>,
    /// E2B template builds and their uploads (`crate::e2b_templates`).
    pub(crate) builds: Builds,
    /// Held while a volume's helper sandbox is found or made (`crate::e2b_volume_content`).
    pub(crate) volume_helpers: tokio::sync::Mutex<()>,
    /// The domain of host-name routing (`crate::hosts`), also the create answer's `domain`.
    sandbox_domain: String,
}

impl E2b {
    /// Load (or create, 0600) the token secret in `data_dir`. `debug_project`: serve debug mode
    /// with a default sandbox in that project.
    pub fn open(data_dir: &FsPath, debug_project: Option<String>) -> std::io::Result<E2b> {
        let path = data_dir.join("e2b-secret");
        let secret = match std::fs::read(&path) {
            Ok(b) if b.len() == 32 => b,
            _ => {
                let mut b = vec![0u8; 32];
                getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&path)?;
                f.write_all(&b)?;
                b
            }
        };
        let mut s = [0u8; 32];
        s.copy_from_slice(&secret);
        Ok(E2b {
            secret: s,
            debug_project,
            debug_lock: tokio::sync::Mutex::new(()),
            builds: Default::default(),
            volume_helpers: tokio::sync::Mutex::new(()),
            sandbox_domain: String::new(),
        })
    }

    /// Route `<port>-<sandbox id>.<domain>` to sandboxes (`crate::hosts`); `domain` is a host
    /// name, with `:port` when clients reach the server on a port of its own
    /// (`localhost:8787`). Empty: no host-name routing.
    pub fn with_sandbox_domain(mut self, domain: &str) -> E2b {
        self.sandbox_domain = domain.trim().trim_start_matches('.').to_ascii_lowercase();
        self
    }

    /// See [`E2b::with_sandbox_domain`].
    pub fn sandbox_domain(&self) -> &str {
        &self.sandbox_domain
    }

    /// The access token of a sandbox.
    pub fn token(&self, sandbox_id: &str) -> String {
        self.mac(b"lizard-e2b-token:", sandbox_id)
    }

    /// The token of E2B's volume content API for volume `id` (given with the volume, as E2B gives
    /// it: `crate::e2b_resources`, `crate::e2b_volume_content`).
    pub fn volume_token(&self, volume_id: &str) -> String {
        self.mac(b"lizard-e2b-volume:", volume_id)
    }

    /// HMAC-SHA256 of `label` + `id` under the secret, in hex.
    fn mac(&self, label: &[u8], id: &str) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.secret)
            .expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(id.as_bytes());
        let tag = mac.finalize().into_bytes();
        tag.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `given` is the sandbox's token (compared as digests, so timing says nothing).
    pub(crate) fn token_ok(&self, sandbox_id: &str, given: &str) -> bool {
        sha2::Sha256::digest(self.token(sandbox_id).as_bytes())
            == sha2::Sha256::digest(given.as_bytes())
    }

    /// Whether a request (`method`, `query`) to envd's `/files` carries a valid E2B file URL
    /// signature for `sandbox_id` (`downloadUrl`/`uploadUrl`), unexpired at `now_s` (Unix
    /// seconds). E2B's scheme: `signature` = `v1_` + base64 (unpadded) of the SHA-256 of
    /// `path:operation:username:token[:signature_expiration]`, `operation` `read` for a GET and
    /// `write` for a POST; `username` is empty when the URL has none.
    pub(crate) fn file_signature_ok(
        &self,
        sandbox_id: &str,
        method: &axum::http::Method,
        query: Option<&str>,
        now_s: u64,
    ) -> bool {
        let op = match *method {
            axum::http::Method::GET | axum::http::Method::HEAD => "read",
            axum::http::Method::POST => "write",
            _ => return false,
        };
        let q = FileQuery::parse(query);
        let (Some(path), Some(given)) = (q.path, q.signature) else {
            return false;
        };
        let mut raw = format!(
            "{path}:{op}:{}:{}",
            q.username.unwrap_or_default(),
            self.token(sandbox_id)
        );
        if let Some(exp) = q.expiration {
            match exp.parse::<u64>() {
                Ok(e) if e >= now_s => raw.push_str(&format!(":{exp}")),
                _ => return false,
            }
        }
        use base64::Engine as _;
        let want = format!(
            "v1_{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(raw))
        );
        sha2::Sha256::digest(want.as_bytes()) == sha2::Sha256::digest(given.as_bytes())
    }

    pub fn debug(&self) -> bool {
        self.debug_project.is_some()
    }
}

/// The parameters of a signed `/files` URL.
#[derive(Default)]
struct FileQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    expiration: Option<String>,
}

impl FileQuery {
    fn parse(query: Option<&str>) -> FileQuery {
        let mut q = FileQuery::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match k.as_ref() {
                "path" => &mut q.path,
                "username" => &mut q.username,
                "signature" => &mut q.signature,
                "signature_expiration" => &mut q.expiration,
                _ => continue,
            };
            slot.get_or_insert_with(|| v.into_owned());
        }
        q
    }
}

/// E2B's error body `{code, message}` with `code` = the HTTP status.
#[derive(Debug)]
pub struct E2bError(pub StatusCode, pub String);

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let body = api::Error {
            code: self.0.as_u16(),
            message: self.1,
        };
        (self.0, Json(body)).into_response()
    }
}

impl From<ApiError> for E2bError {
    fn from(e: ApiError) -> Self {
        E2bError(
            StatusCode::from_u16(e.0.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.0.message,
        )
    }
}

impl From<SandboxError> for E2bError {
    fn from(e: SandboxError) -> Self {
        ApiError::from(e).into()
    }
}

/// A JSON body whose failures are E2B errors (an empty body is `{}`).
pub(crate) struct E2bJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for E2bJson<T> {
    type Rejection = E2bError;
    async fn from_request(req: Request, state: &S) -> Result<Self, E2bError> {
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| E2bError(StatusCode::BAD_REQUEST, e.body_text()))?;
        let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        serde_json::from_slice(body).map(E2bJson).map_err(|e| {
            E2bError(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {e}"),
            )
        })
    }
}

// ---- template builds ----

/// How long a requested build (and its log) is remembered.
pub(crate) const BUILD_TTL: Duration = Duration::from_secs(3 * 3600);
/// Builds remembered per project.
pub(crate) const MAX_BUILDS_PER_PROJECT: usize = 32;
/// Log entries kept per build (the SDKs read them by offset: the first ones are kept).
pub(crate) const MAX_LOG_ENTRIES: usize = 10_000;
/// How long uploaded files are kept for a build (and answered `present`).
pub(crate) const UPLOAD_TTL: Duration = Duration::from_secs(3600);
/// Bytes of uploads kept over all projects.
pub(crate) const MAX_STORED_UPLOADS: usize = 256 * 1024 * 1024;
/// Entries of one build context.
pub(crate) const MAX_CONTEXT_ENTRIES: usize = 100_000;
/// How long an upload link works.
pub(crate) const LINK_TTL: Duration = Duration::from_secs(3600);
/// One upload (and the merged context) at most.
pub(crate) const MAX_UPLOAD: usize = lizard_proto::template::MAX_CONTEXT_BYTES;

/// E2B's base image: Lizard's default template is its counterpart (Debian with Python and Node).
pub(crate) const E2B_BASE_IMAGES: &[&str] = &["e2bdev/base", "e2bdev/base:latest"];

/// The E2B builds and uploads of the server.
#[derive(Default)]
pub struct Builds {
    pub(crate) inner: Mutex<Inner>,
}

#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) builds: HashMap<String, Build>,
    /// (project, files hash) → the uploaded archive.
    pub(crate) uploads: HashMap<(String, String), Upload>,
    /// Upload link token → (project, files hash), until it is used or expires.
    pub(crate) links: HashMap<String, Link>,
    pub(crate) stored: usize,
}

impl Inner {
    /// Build `build_id` of `project`'s template `template_id` (another project's is not found).
    pub(crate) fn of(
        &self,
        project: &str,
        template_id: &str,
        build_id: &str,
    ) -> Result<&Build, E2bError> {
        self.builds
            .get(build_id)
            .filter(|b| b.project == project && b.name == template_id)
            .ok_or_else(|| {
                E2bError(
                    axum::http::StatusCode::NOT_FOUND,
                    format!("build {build_id} of template {template_id} not found"),
                )
            })
    }
}

pub(crate) struct Build {
    pub(crate) project: String,
    pub(crate) name: String,
    pub(crate) created: Instant,
    pub(crate) started: bool,
    pub(crate) status: wire::TemplateBuildStatus,
    pub(crate) entries: Vec<wire::BuildLogEntry>,
    pub(crate) reason: Option<wire::BuildStatusReason>,
}

pub(crate) struct Upload {
    pub(crate) bytes: Bytes,
    pub(crate) at: Instant,
}

pub(crate) struct Link {
    pub(crate) project: String,
    pub(crate) hash: String,
    pub(crate) expires: Instant,
}

impl Inner {
    pub(crate) fn prune(&mut self, now: Instant) {
        self.builds
            .retain(|_, b| now.duration_since(b.created) < BUILD_TTL);
        self.links.retain(|_, l| l.expires > now);
        let mut freed = 0;
        self.uploads.retain(|_, u| {
            let keep = now.duration_since(u.at) < UPLOAD_TTL;
            if !keep {
                freed += u.bytes.len();
            }
            keep
        });
        self.stored -= freed;
    }
}

impl Builds {
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, E2bError> {
        self.inner.lock().map_err(|_| {
            E2bError(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the build registry is unavailable".into(),
            )
        })
    }

    pub(crate) fn log(&self, build_id: &str, level: &str, message: String) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(b) = g.builds.get_mut(build_id) {
                push_entry(b, level, message);
            }
        }
    }

    pub(crate) fn finish(
        &self,
        build_id: &str,
        status: wire::TemplateBuildStatus,
        reason: Option<String>,
    ) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(b) = g.builds.get_mut(build_id) {
                if let Some(m) = &reason {
                    push_entry(b, "error", m.clone());
                }
                b.status = status;
                b.reason = reason.map(|message| wire::BuildStatusReason {
                    message,
                    step: None,
                    log_entries: Vec::new(),
                });
            }
        }
    }
}

pub(crate) fn push_entry(b: &mut Build, level: &str, message: String) {
    if b.entries.len() >= MAX_LOG_ENTRIES {
        return;
    }
    let message = if b.entries.len() + 1 == MAX_LOG_ENTRIES {
        format!("… the log is longer than {MAX_LOG_ENTRIES} entries: the rest is in GET /v1/templates/{}", b.name)
    } else {
        message
    };
    b.entries.push(wire::BuildLogEntry {
        timestamp: lizard_proto::e2b::rfc3339_ms(crate::store::now_ms() as i64),
        message,
        level: level.into(),
        step: None,
    });
}
