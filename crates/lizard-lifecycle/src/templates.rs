//! User templates: a Dockerfile built inside a **build sandbox** of its base, whose writable
//! layer becomes the new template's read-only layer (see `lizard_template::layer`).
//!
//! The flow of one build ([`Templates::start`]):
//! 1. parse the Dockerfile (`lizard_template::dockerfile`), resolve its base as the project sees
//!    it, compute the content key (base key, Dockerfile, build args, context): a ready build of
//!    that key is a cache hit;
//! 2. create the build sandbox through the normal create path (the server's isolation, the build
//!    limits, egress only to the allow-list of `--template-build-egress`);
//! 3. upload the build context (a tar) into the sandbox's `/tmp` and unpack it there; run each step
//!    through the agent's commands API (RUN as its user, root unless `USER` says otherwise;
//!    COPY/ADD as a shell script over the unpacked context; WORKDIR as `mkdir -p`), each with a
//!    deadline, its output kept in a bounded log;
//!    after the last step, list what the build installed (`dpkg-query`, `pip list`, npm's lock; as
//!    root, bounded, under a deadline) as the layer's `versions` — a description for the owner,
//!    never used by the host; a listing that fails leaves its section empty;
//! 4. stop the sandbox (every process killed, its cgroup gone — verified), import its upper
//!    directory on the host with `lizard_jail::layer::import_layer` (no symlink followed, bounded,
//!    owners shifted from the sandbox's range to the template's), write the layer's meta, rename
//!    it into place, and discard the sandbox.
//!
//! Nothing the sandbox wrote is trusted: the agent's answers are bounded and under deadlines,
//! the final user's ids are parsed and range-checked, and the layer is copied, never mounted or
//! used in place.

use crate::sandboxes::{CreateSandbox, SandboxError, Sandboxes};
use crate::store::{now_ms, Store, StoreError, TemplateRow};
use bytes::Bytes;
use lizard_jail::layer::{IdShift, ImportLimits};
use lizard_proto::{
    CommandEvent, Egress, ErrorBody, ErrorCode, LimitsRequest, LogStream, NetworkRequest,
    StartCommandRequest, TemplateBuildEvent, TemplateInfo, TemplateState, TemplateVersion,
};
use lizard_template::dockerfile::{self, Action, Base, Plan};
use lizard_template::layer::{self, BaseRef, Chain, LayerMeta};
use lizard_template::lock::{self, Versions};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How much of a build's log is kept (its end).
pub const MAX_BUILD_LOG: usize = 64 * 1024;
/// Where the build context is unpacked inside the build sandbox (its tmpfs: not in the layer).
const CONTEXT_DIR: &str = "/tmp/.lizard-build/ctx";
const CONTEXT_TAR: &str = "/tmp/.lizard-build/ctx.tar";
/// At most this much output of one package listing is kept (more: that section is left empty).
pub const MAX_PACKAGE_LISTING: usize = 4 * 1024 * 1024;
/// The deadline of one package listing.
const PACKAGE_LISTING_TIMEOUT: Duration = Duration::from_secs(120);
/// Lists the npm packages under the Node prefix: npm's own record of the installed tree
/// (`node_modules/.package-lock.json`), else the prefix's `package-lock.json`.
const NPM_LOCK_SCRIPT: &str = r#"d=$1; if [ -f "$d/.package-lock.json" ]; then cat "$d/.package-lock.json"; \
elif [ -f "$d/../package-lock.json" ]; then cat "$d/../package-lock.json"; else echo '{}'; fi"#;
/// The metadata key that marks a build sandbox.
pub const BUILD_METADATA: &str = "lizard.template_build";

/// The COPY/ADD step, run inside the build sandbox: `$1` the destination (absolute; a trailing `/`
/// means a directory), `$2` 1 for ADD (a tar archive source is unpacked), then the sources
/// (relative to the context, globs allowed). Docker's rules: a directory's contents are copied, a
/// file lands at the destination (or in it when it is a directory).
const COPY_SCRIPT: &str = r#"set -e
ctx=/tmp/.lizard-build/ctx
dest="$1"; extract="$2"; shift 2
IFS='
'
case "$dest" in */) mkdir -p "$dest";; esac
for pat in "$@"; do
  matched=0
  for src in $ctx/$pat; do
    [ -e "$src" ] || [ -L "$src" ] || continue
    matched=1
    if [ -d "$src" ] && [ ! -L "$src" ]; then
      mkdir -p "$dest"; cp -R "$src"/. "$dest"/
    elif [ "$extract" = 1 ] && tar -tf "$src" >/dev/null 2>&1; then
      mkdir -p "$dest"; tar -xf "$src" -C "$dest" --no-same-owner
    elif [ -d "$dest" ]; then
      cp -P "$src" "$dest"/
    else
      mkdir -p "$(dirname "$dest")"; cp -P "$src" "$dest"
    fi
  done
  if [ "$matched" = 0 ]; then echo "no such file in the build context: $pat" >&2; exit 66; fi
done
"#;

/// Settings of template builds (server flags).
#[derive(Debug, Clone)]
pub struct TemplateConfig {
    /// Where build sandboxes may connect (the package registries); empty: nowhere.
    pub egress: Vec<String>,
    /// The build sandbox's limits (its disk: the largest layer a build can make).
    pub limits: LimitsRequest,
    /// Deadline of one step.
    pub step_timeout: Duration,
    /// Deadline of the whole build (also the build sandbox's timeout).
    pub build_timeout: Duration,
    /// Bounds of the layer import.
    pub import: ImportLimits,
}

impl Default for TemplateConfig {
    fn default() -> Self {
        TemplateConfig {
            egress: default_egress(),
            limits: LimitsRequest {
                memory_mb: Some(2048),
                cpu_millicores: Some(2000),
                pids: Some(1024),
                tmp_mb: Some(512),
                disk_mb: Some(8192),
            },
            step_timeout: Duration::from_secs(1800),
            build_timeout: Duration::from_secs(3600),
            import: ImportLimits::default(),
        }
    }
}

/// The package registries of the host's own configuration — pip's `index-url` /
/// `extra-index-url`, npm's `registry`, apt's sources (`*.list`, `*.sources`) — each tool's
/// public registry where the host configures none.
pub fn default_egress() -> Vec<String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let pip = [
        "/etc/pip.conf",
        "/etc/xdg/pip/pip.conf",
        "/root/.config/pip/pip.conf",
        "/root/.pip/pip.conf",
    ]
    .map(read)
    .join("\n");
    let npm = ["/etc/npmrc", "/usr/etc/npmrc", "/root/.npmrc"]
        .map(read)
        .join("\n");
    let mut apt = read("/etc/apt/sources.list");
    if let Ok(d) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in d.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // Disabled files (`*.disabled`, `*.save`, …) are not sources.
            if name.ends_with(".list") || name.ends_with(".sources") {
                apt.push('\n');
                apt.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    egress_from(&pip, &npm, &apt)
}

/// [`default_egress`] from the three tools' configuration texts.
fn egress_from(pip: &str, npm: &str, apt: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (text, public) in [
        (pip, &["pypi.org", "files.pythonhosted.org"][..]),
        (npm, &["registry.npmjs.org"][..]),
        (apt, &["deb.debian.org"][..]),
    ] {
        let mut hosts = registry_hosts(text);
        if hosts.is_empty() {
            hosts = public.iter().map(|h| h.to_string()).collect();
        }
        for h in hosts {
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

/// Host names of the registry URLs in configuration text (`index-url = https://h/…`,
/// `registry=https://h/`, `deb http://h/debian …`, `URIs: http://h/…`), deduplicated, at most 32.
pub fn registry_hosts(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let keyed = [
            "index-url",
            "extra-index-url",
            "registry",
            "uris",
            "deb",
            "deb-src",
        ]
        .iter()
        .any(|k| l.to_ascii_lowercase().starts_with(k));
        if !keyed {
            continue;
        }
        for word in l.split(|c: char| c.is_whitespace() || c == '=') {
            let Some(rest) = word
                .strip_prefix("https://")
                .or_else(|| word.strip_prefix("http://"))
            else {
                continue;
            };
            let hostport = rest.split('/').next().unwrap_or("");
            let host = hostport.rsplit('@').next().unwrap_or("");
            let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
            let ok = !host.is_empty()
                && host.len() <= 253
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
            if ok && !out.contains(&host) && out.len() < 32 {
                out.push(host);
            }
        }
    }
    out
}

/// Template API failures.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Dockerfile(#[from] dockerfile::DockerfileError),
    #[error("template {0:?} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InUse(String),
    #[error("{0}")]
    Builtin(String),
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}", .0.message)]
    Failed(ErrorBody),
}

impl TemplateError {
    pub fn body(&self) -> ErrorBody {
        if let TemplateError::Store(_) = self {
            return ErrorBody::internal();
        }
        let code = match self {
            TemplateError::Invalid(_) => ErrorCode::InvalidRequest,
            TemplateError::Dockerfile(_) => ErrorCode::InvalidDockerfile,
            TemplateError::NotFound(_) => ErrorCode::NotFound,
            TemplateError::Conflict(_) => ErrorCode::Conflict,
            TemplateError::InUse(_) => ErrorCode::TemplateInUse,
            TemplateError::Builtin(_) => ErrorCode::PermissionDenied,
            TemplateError::Unsupported(_) => ErrorCode::Unsupported,
            TemplateError::Sandbox(SandboxError::UnknownTemplate(_)) => ErrorCode::NotFound,
            TemplateError::Sandbox(SandboxError::Invalid(_)) => ErrorCode::InvalidRequest,
            TemplateError::Sandbox(_) => ErrorCode::Unavailable,
            TemplateError::Store(_) => ErrorCode::Internal,
            TemplateError::Failed(e) => e.code,
        };
        ErrorBody::new(code, lizard_jail::error_chain(self))
    }
}

/// A build to start (validated by the API layer: project resolved, context decoded).
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub project: String,
    pub name: String,
    pub dockerfile: String,
    pub context: Bytes,
    pub build_args: BTreeMap<String, String>,
    pub public: bool,
    pub cancel_on_disconnect: bool,
}

/// What [`Templates::start`] gives back.
pub enum Started {
    /// The same build is ready already.
    CacheHit(TemplateInfo),
    /// The build runs; its events arrive on the receiver (dropping it does not cancel the build
    /// unless the request asked for `cancel_on_disconnect`).
    Building(TemplateInfo, mpsc::Receiver<TemplateBuildEvent>),
}

pub struct Templates {
    sandboxes: Arc<Sandboxes>,
    store: Arc<Store>,
    cfg: TemplateConfig,
    /// Templates (ids) with a build running.
    running: Mutex<HashMap<String, ()>>,
}

/// The bounded end of a build's log.
#[derive(Default)]
struct Log(String);

impl Log {
    fn push(&mut self, s: &str) {
        self.0.push_str(s);
        if self.0.len() > MAX_BUILD_LOG {
            let mut cut = self.0.len() - MAX_BUILD_LOG;
            while !self.0.is_char_boundary(cut) {
                cut += 1;
            }
            self.0.drain(..cut);
        }
    }
}

/// The host builder's progress while it builds a Debian base: each step and message a log line,
/// streamed (dropped when the client is slow) and kept (bounded).
struct BaseProgress {
    tx: mpsc::Sender<TemplateBuildEvent>,
    lines: Log,
}

impl lizard_template::Progress for BaseProgress {
    fn step(&mut self, index: usize, total: usize, name: &str) {
        self.message(&format!("base [{index}/{total}] {name}"));
    }
    fn message(&mut self, line: &str) {
        let text = format!("{line}\n");
        self.lines.push(&text);
        let _ = self.tx.try_send(TemplateBuildEvent::Log {
            stream: LogStream::Stdout,
            text,
        });
    }
}

/// A build's failure: the typed error sent to the client and stored.
struct Failure(ErrorBody);

fn failed(code: ErrorCode, m: impl Into<String>) -> Failure {
    Failure(ErrorBody::new(code, m))
}

fn new_template_id() -> String {
    let mut b = [0u8; 10];
    getrandom::fill(&mut b).expect("the OS random source is available");
    format!(
        "tpl_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

impl Templates {
    pub fn new(sandboxes: Arc<Sandboxes>, cfg: TemplateConfig) -> Arc<Templates> {
        let store = sandboxes.store.clone();
        let t = Arc::new(Templates {
            sandboxes,
            store,
            cfg,
            running: Mutex::new(HashMap::new()),
        });
        // A server that stopped mid-build left rows `building`: those builds are gone.
        if let Ok(rows) = t.store.list_templates(None) {
            for mut r in rows {
                if r.state == TemplateState::Building {
                    r.state = if r.key.is_some() {
                        TemplateState::Ready
                    } else {
                        TemplateState::Failed
                    };
                    r.building_key = None;
                    r.error = Some(ErrorBody::new(
                        ErrorCode::BuildFailed,
                        "the server stopped during the build",
                    ));
                    let _ = t.store.put_template(&r);
                }
            }
        }
        // Their build sandboxes too (adopted after a restart like any sandbox): nothing will
        // import them any more.
        let stale: Vec<String> = t
            .sandboxes
            .all()
            .iter()
            .filter(|sb| sb.metadata.contains_key(BUILD_METADATA))
            .map(|sb| sb.id.clone())
            .collect();
        if !stale.is_empty() {
            let sandboxes = t.sandboxes.clone();
            tokio::spawn(async move {
                for id in stale {
                    tracing::info!(sandbox = %id, "killing the build sandbox of an interrupted template build");
                    let _ = sandboxes.kill(&id).await;
                }
            });
        }
        t.sweep();
        t
    }

    /// User templates live in the server's own data dir (built-ins may come from another).
    fn data(&self) -> &Path {
        &self.sandboxes.cfg.data_dir
    }

    /// Whether `name` is a built-in's (or a host-built template's): reserved.
    fn is_builtin(&self, name: &str) -> bool {
        lizard_template::builtin_names().contains(&name)
            || self.sandboxes.find_builtin(name).is_ok()
    }

    /// The info of a user template row (`with_log`: its build log too).
    pub fn info(&self, r: &TemplateRow, with_log: bool) -> TemplateInfo {
        TemplateInfo {
            name: r.name.clone(),
            project: Some(r.project.clone()),
            builtin: false,
            public: r.public,
            state: r.state,
            base: Some(r.base.clone()),
            key: r.key.clone().or_else(|| r.building_key.clone()),
            size_bytes: r.size_bytes,
            created_at: r.created_at_ms,
            updated_at: r.updated_at_ms,
            error: r.error.clone(),
            versions: r.versions.clone(),
            build_log: if with_log {
                r.build_log.clone()
            } else {
                String::new()
            },
            packages: match (&r.key, with_log) {
                (Some(key), true) => {
                    layer::read_build_dir(&layer::user_dir(self.data(), &r.id).join(key))
                        .and_then(|(t, _)| t.meta.versions)
                        .map(packages_of)
                }
                _ => None,
            },
        }
    }

    /// A built-in's info (`full`: with what it installed, as in `GET /v1/templates/{name}`).
    fn builtin_info(&self, name: &str, full: bool) -> Option<TemplateInfo> {
        let t = self.sandboxes.find_builtin(name).ok()?;
        let created = std::fs::metadata(t.dir.join(lizard_template::store::MARKER))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Some(TemplateInfo {
            name: name.to_string(),
            project: None,
            builtin: true,
            public: true,
            state: TemplateState::Ready,
            base: None,
            key: Some(t.key.clone()),
            size_bytes: t.meta.disk_bytes,
            created_at: created,
            updated_at: created,
            error: None,
            versions: vec![TemplateVersion {
                key: t.key.clone(),
                state: TemplateState::Ready,
                created_at: created,
                size_bytes: t.meta.disk_bytes,
            }],
            build_log: String::new(),
            packages: if full {
                t.meta.versions.clone().map(packages_of)
            } else {
                None
            },
        })
    }

    /// What `project` sees (`None`: an admin, every project's).
    pub fn list(&self, project: Option<&str>) -> Result<Vec<TemplateInfo>, TemplateError> {
        let mut out: Vec<TemplateInfo> = self
            .store
            .list_templates(project)?
            .iter()
            .map(|r| self.info(r, false))
            .collect();
        for b in lizard_template::builtin_names() {
            if let Some(i) = self.builtin_info(b, false) {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// The template `name` as `project` sees it.
    pub fn get(&self, project: &str, name: &str) -> Result<TemplateInfo, TemplateError> {
        if let Some(r) = self.store.find_template(project, name)? {
            return Ok(self.info(&r, true));
        }
        self.builtin_info(name, true)
            .ok_or_else(|| TemplateError::NotFound(name.to_string()))
    }

    /// Delete `project`'s template `name`: its builds go once no sandbox uses them (running ones
    /// keep working); refused while another template is a layer over it, or while it builds.
    pub fn delete(&self, project: &str, name: &str) -> Result<(), TemplateError> {
        let row = match self.store.find_template(project, name)? {
            Some(r) if r.project == project => r,
            _ if self.is_builtin(name) => {
                return Err(TemplateError::Builtin(format!(
                    "{name} is a built-in template: it cannot be deleted"
                )))
            }
            _ => return Err(TemplateError::NotFound(name.to_string())),
        };
        if self.is_running(&row.id) {
            return Err(TemplateError::Conflict(format!(
                "template {name:?} is being built"
            )));
        }
        let dir = layer::user_dir(self.data(), &row.id);
        if let Some(user) = base_users(&dir).first() {
            return Err(TemplateError::InUse(format!(
                "template {name:?} is the base of another template ({user}): delete that first"
            )));
        }
        self.store.delete_template(&row.id)?;
        self.sweep();
        Ok(())
    }

    fn is_running(&self, id: &str) -> bool {
        self.running
            .lock()
            .map(|m| m.contains_key(id))
            .unwrap_or(false)
    }

    /// Remove the builds no template row names and no sandbox or layer uses (deleted templates,
    /// replaced versions). Host-side: the tree is the host's own copy, never a sandbox's.
    pub fn sweep(&self) {
        let root = self.data().join("templates").join(layer::USER_DIR);
        let Ok(rows) = self.store.list_templates(None) else {
            return;
        };
        let Ok(dirs) = std::fs::read_dir(&root) else {
            return;
        };
        for d in dirs.flatten() {
            let id = d.file_name().to_string_lossy().into_owned();
            let row = rows.iter().find(|r| r.id == id);
            if row.is_some_and(|r| r.state == TemplateState::Building) || self.is_running(&id) {
                continue;
            }
            let Ok(versions) = std::fs::read_dir(d.path()) else {
                continue;
            };
            for v in versions.flatten() {
                let name = v.file_name().to_string_lossy().into_owned();
                let kept = row.is_some_and(|r| r.key.as_deref() == Some(name.as_str()));
                if kept || lizard_template::store::in_use(&v.path()) {
                    continue;
                }
                remove_build(&v.path());
            }
            let _ = std::fs::remove_dir(d.path());
        }
    }

    /// A template from a running (or paused) sandbox of `project`: its writable layer, copied
    /// with every process frozen, becomes a layer over the sandbox's template. Nothing of its
    /// memory is kept. Synchronous: returns the ready template.
    pub async fn from_sandbox(
        self: &Arc<Self>,
        project: &str,
        name: &str,
        sandbox_id: &str,
        public: bool,
    ) -> Result<TemplateInfo, TemplateError> {
        if !layer::valid_name(name) {
            return Err(TemplateError::Invalid(format!(
                "invalid template name {name:?}"
            )));
        }
        if self.is_builtin(name) {
            return Err(TemplateError::Conflict(format!(
                "{name:?} is the name of a built-in template"
            )));
        }
        let sb = self
            .sandboxes
            .get(sandbox_id)
            .filter(|sb| sb.project == project)
            .ok_or_else(|| TemplateError::NotFound(format!("sandbox {sandbox_id}")))?;
        let base = sb
            .runtime
            .template_dir
            .as_deref()
            .and_then(layer::read_build_dir)
            .ok_or_else(|| TemplateError::Conflict("the sandbox's template build is gone".into()))?
            .0;
        let base = layer::resolve(&base).map_err(TemplateError::Conflict)?;
        if base.lower.len() >= layer::MAX_CHAIN {
            return Err(TemplateError::Invalid(format!(
                "the sandbox's template already has {} layers (at most {})",
                base.lower.len(),
                layer::MAX_CHAIN
            )));
        }
        // Never a cache hit: the sandbox's files are whatever they are now.
        let key = layer::build_key(
            &base.top.key,
            &format!("from_sandbox {sandbox_id} {}", now_ms()),
            &BTreeMap::new(),
            &[],
        );
        let row = match self.claim_row(project, name, &sb.template, &key, public)? {
            Ok(r) => r,
            Err(info) => return Ok(info),
        };
        let mut log = Log::default();
        log.push(&format!("a template from sandbox {sandbox_id}\n"));
        let inputs = LayerInputs {
            env: BTreeMap::new(),
            workdir: None,
            user: None,
            description: format!("{} + the files of sandbox {sandbox_id}", sb.template),
            packages: None,
        };
        let outcome = self
            .import(
                &row,
                &base,
                &key,
                &sb.runtime,
                inputs,
                Some(sandbox_id),
                &mut log,
            )
            .await;
        let id = row.id.clone();
        let event = self.finish(row, &key, outcome, &log);
        if let Ok(mut m) = self.running.lock() {
            m.remove(&id);
        }
        self.sweep();
        match event {
            TemplateBuildEvent::Done { template } => Ok(*template),
            TemplateBuildEvent::Error { error } => Err(TemplateError::Failed(error)),
            _ => Err(TemplateError::Invalid("unexpected build outcome".into())),
        }
    }

    /// Start a build; see the module docs.
    pub async fn start(self: &Arc<Self>, req: BuildRequest) -> Result<Started, TemplateError> {
        let plan = dockerfile::parse(&req.dockerfile, &req.build_args)?;
        self.start_plan(req, plan).await
    }

    /// Start the build of a parsed plan (the Dockerfile's, or E2B's steps translated into one:
    /// `crate::e2b_templates`); `req.dockerfile` is the text its key covers.
    pub async fn start_plan(
        self: &Arc<Self>,
        req: BuildRequest,
        plan: Plan,
    ) -> Result<Started, TemplateError> {
        if !layer::valid_name(&req.name) {
            return Err(TemplateError::Invalid(format!(
                "invalid template name {:?} (1-64 of A-Z a-z 0-9 . _ -, not starting with .)",
                req.name
            )));
        }
        if self.is_builtin(&req.name) {
            return Err(TemplateError::Conflict(format!(
                "{:?} is the name of a built-in template",
                req.name
            )));
        }
        let base_name = match &plan.from {
            Base::Template(n) => n.clone(),
            Base::Debian(suite) => dockerfile::debian_base(suite),
        };
        // `FROM debian:<suite>` whose base is not built yet: the build task builds it first (on
        // the host, from our own fixed spec, like code-interpreter-v1), then goes on.
        if matches!(plan.from, Base::Debian(_)) && self.sandboxes.find_builtin(&base_name).is_err()
        {
            let spec = lizard_template::spec::load_builtin(&base_name)
                .ok_or_else(|| TemplateError::NotFound(base_name.clone()))?
                .map_err(|e| {
                    TemplateError::Failed(ErrorBody::new(ErrorCode::Internal, e.to_string()))
                })?;
            let key = layer::build_key(&spec.key, &req.dockerfile, &req.build_args, &req.context);
            return self.spawn(req, plan, base_name, None, key);
        }
        let base = self
            .sandboxes
            .find_template(&req.project, &base_name)
            .map_err(|e| match e {
                SandboxError::UnknownTemplate(_) => {
                    TemplateError::Dockerfile(dockerfile::DockerfileError {
                        line: plan.from_line,
                        message: format!("FROM {base_name}: no such template"),
                    })
                }
                e => e.into(),
            })?;
        if base.lower.len() >= layer::MAX_CHAIN {
            return Err(TemplateError::Invalid(format!(
                "{base_name} already has {} layers: a template can have at most {}",
                base.lower.len(),
                layer::MAX_CHAIN
            )));
        }
        let key = layer::build_key(
            &base.top.key,
            &req.dockerfile,
            &req.build_args,
            &req.context,
        );
        self.spawn(req, plan, base_name, Some(base), key)
    }

    /// Claim the row and start the build task (`base` `None`: a Debian base to build first).
    fn spawn(
        self: &Arc<Self>,
        req: BuildRequest,
        plan: Plan,
        base_name: String,
        base: Option<Chain>,
        key: String,
    ) -> Result<Started, TemplateError> {
        let row = match self.claim_row(&req.project, &req.name, &base_name, &key, req.public)? {
            Ok(row) => row,
            Err(hit) => return Ok(Started::CacheHit(hit)),
        };
        let info = self.info(&row, false);
        let (tx, rx) = mpsc::channel(256);
        let this = self.clone();
        tokio::spawn(async move {
            let id = row.id.clone();
            this.clone().run(row, req, plan, base, key, tx).await;
            if let Ok(mut m) = this.running.lock() {
                m.remove(&id);
            }
        });
        Ok(Started::Building(info, rx))
    }

    /// Build the built-in Debian base `name` with the host builder (our fixed spec, never the
    /// client's input), its progress into the stream; then its chain.
    async fn build_debian_base(
        &self,
        name: &str,
        tx: &mpsc::Sender<TemplateBuildEvent>,
        log: &mut Log,
    ) -> Result<Chain, Failure> {
        log.push(&format!(
            "building the base template {name} (first use; cached afterwards)\n"
        ));
        let _ = tx.try_send(TemplateBuildEvent::Log {
            stream: LogStream::Stdout,
            text: format!("building the base template {name} (first use; cached afterwards)\n"),
        });
        let opts = lizard_template::BuildOptions::new(&self.sandboxes.cfg.templates_data_dir);
        let (n, tx2) = (name.to_string(), tx.clone());
        let built = tokio::task::spawn_blocking(move || {
            let mut progress = BaseProgress {
                tx: tx2,
                lines: Log::default(),
            };
            let r = lizard_template::build(&n, &opts, &mut progress);
            (r, progress.lines)
        })
        .await
        .map_err(|e| failed(ErrorCode::Internal, e.to_string()))?;
        log.push(&built.1 .0);
        let t = built.0.map_err(|e| {
            failed(
                ErrorCode::BuildFailed,
                format!("building the base template {name}: {e}"),
            )
        })?;
        layer::resolve(&t).map_err(|e| failed(ErrorCode::BuildFailed, format!("{name}: {e}")))
    }

    /// The row of `project`'s template `name` for a build of `key`, marked `building` and
    /// registered as running; `Err(info)`: a ready build of that key exists (a cache hit).
    fn claim_row(
        &self,
        project: &str,
        name: &str,
        base_name: &str,
        key: &str,
        public: bool,
    ) -> Result<Result<TemplateRow, TemplateInfo>, TemplateError> {
        let now = now_ms();
        let existing = self
            .store
            .find_template(project, name)?
            .filter(|r| r.project == project);
        let row = match existing {
            Some(r) if r.key.as_deref() == Some(key) && !self.is_running(&r.id) => {
                return Ok(Err(self.info(&r, false)));
            }
            Some(mut r) => {
                if self.is_running(&r.id) {
                    return Err(TemplateError::Conflict(format!(
                        "template {:?} is being built",
                        name
                    )));
                }
                r.state = TemplateState::Building;
                r.building_key = Some(key.to_string());
                r.base = base_name.to_string();
                r.public = public;
                r.updated_at_ms = now;
                r.error = None;
                self.store.put_template(&r)?;
                r
            }
            None => {
                let r = TemplateRow {
                    id: new_template_id(),
                    project: project.to_string(),
                    name: name.to_string(),
                    public,
                    state: TemplateState::Building,
                    base: base_name.to_string(),
                    key: None,
                    building_key: Some(key.to_string()),
                    size_bytes: 0,
                    created_at_ms: now,
                    updated_at_ms: now,
                    error: None,
                    versions: Vec::new(),
                    build_log: String::new(),
                };
                self.store.insert_template(&r).map_err(|e| match e {
                    StoreError::TemplateExists(n) => {
                        TemplateError::Conflict(format!("template {n:?} is being built"))
                    }
                    e => e.into(),
                })?;
                r
            }
        };
        {
            let mut m = self
                .running
                .lock()
                .map_err(|_| TemplateError::Conflict("the build registry is unavailable".into()))?;
            if m.insert(row.id.clone(), ()).is_some() {
                return Err(TemplateError::Conflict(format!(
                    "template {:?} is being built",
                    name
                )));
            }
        }
        Ok(Ok(row))
    }

    /// Record a build's outcome in its row; the event that tells the client.
    fn finish(
        &self,
        mut row: TemplateRow,
        key: &str,
        outcome: Result<(u64, u64), Failure>,
        log: &Log,
    ) -> TemplateBuildEvent {
        // The row may have changed (public flag) since: start from the stored one.
        if let Ok(Some(r)) = self.store.find_template(&row.project, &row.name) {
            if r.id == row.id {
                row = r;
            }
        }
        row.updated_at_ms = now_ms();
        row.building_key = None;
        row.build_log = log.0.clone();
        let event = match outcome {
            Ok((size, created)) => {
                row.state = TemplateState::Ready;
                row.key = Some(key.to_string());
                row.size_bytes = size;
                row.error = None;
                row.versions.retain(|v| v.key != key);
                row.versions.push(TemplateVersion {
                    key: key.to_string(),
                    state: TemplateState::Ready,
                    created_at: created,
                    size_bytes: size,
                });
                // Older builds go once unused (`sweep`); the list says what is kept.
                let dir = layer::user_dir(self.data(), &row.id);
                row.versions
                    .retain(|v| dir.join(&v.key).is_dir() || v.key == key);
                let _ = self.store.put_template(&row);
                TemplateBuildEvent::Done {
                    template: Box::new(self.info(&row, false)),
                }
            }
            Err(Failure(e)) => {
                tracing::info!(template = %row.name, project = %row.project, error = %e.message,
                    "template build failed");
                // The last build failed; an earlier ready build (if any) stays in use.
                row.state = TemplateState::Failed;
                row.error = Some(e.clone());
                let _ = self.store.put_template(&row);
                TemplateBuildEvent::Error { error: e }
            }
        };
        event
    }

    /// The build task: runs it, records the outcome, sends the last event.
    async fn run(
        self: Arc<Self>,
        row: TemplateRow,
        req: BuildRequest,
        plan: Plan,
        base: Option<Chain>,
        key: String,
        tx: mpsc::Sender<TemplateBuildEvent>,
    ) {
        let mut log = Log::default();
        let outcome = {
            let work = async {
                let base = match base {
                    Some(b) => b,
                    None => self.build_debian_base(&row.base, &tx, &mut log).await?,
                };
                self.build(&row, &req, &plan, &base, &key, &tx, &mut log)
                    .await
            };
            match tokio::time::timeout(self.cfg.build_timeout, work).await {
                Ok(r) => r,
                Err(_) => Err(failed(
                    ErrorCode::BuildFailed,
                    format!(
                        "the build took longer than {} s",
                        self.cfg.build_timeout.as_secs()
                    ),
                )),
            }
        };
        let event = self.finish(row, &key, outcome, &log);
        self.sweep();
        let _ = tokio::time::timeout(Duration::from_secs(5), tx.send(event)).await;
    }

    /// Everything between the checks and the outcome: returns the layer's size and creation time.
    #[allow(clippy::too_many_arguments)]
    async fn build(
        &self,
        row: &TemplateRow,
        req: &BuildRequest,
        plan: &Plan,
        base: &Chain,
        key: &str,
        tx: &mpsc::Sender<TemplateBuildEvent>,
        log: &mut Log,
    ) -> Result<(u64, u64), Failure> {
        let total = plan.steps.len() + 4 + usize::from(plan.user.is_some());
        let mut index = 0;
        let mut step = |name: &str, log: &mut Log| {
            index += 1;
            log.push(&format!("#{index}/{total} {name}\n"));
            let _ = tx.try_send(TemplateBuildEvent::Step {
                index,
                total,
                name: name.to_string(),
            });
        };
        let cancelled = || req.cancel_on_disconnect && tx.is_closed();
        step("start the build sandbox", log);
        let egress = if self.cfg.egress.is_empty() {
            Egress::None
        } else {
            Egress::Rules(lizard_proto::EgressRules::allow(self.cfg.egress.clone()))
        };
        let mut metadata = BTreeMap::new();
        metadata.insert(BUILD_METADATA.to_string(), row.name.clone());
        let sb = self
            .sandboxes
            .create_detached(CreateSandbox {
                project: row.project.clone(),
                template: Some(row.base.clone()),
                timeout_ms: Some(self.cfg.build_timeout.as_millis() as u64 + 60_000),
                metadata,
                limits: self.cfg.limits.clone(),
                network: NetworkRequest {
                    egress,
                    ..Default::default()
                },
                ..Default::default()
            })
            .await
            .map_err(|e| {
                failed(
                    ErrorCode::BuildFailed,
                    format!(
                        "starting the build sandbox: {}",
                        lizard_jail::error_chain(&e)
                    ),
                )
            })?;
        let sid = sb.id.clone();
        let result = async {
            // The sandbox must be on the base the key was made for.
            let on_base = sb
                .runtime
                .template_dir
                .as_ref()
                .is_some_and(|d| *d == base.top.dir);
            if !on_base {
                return Err(failed(
                    ErrorCode::Conflict,
                    format!("the base template {} changed during the build", row.base),
                ));
            }
            step("unpack the build context", log);
            self.unpack_context(&sb.agent, req, log).await?;
            for s in &plan.steps {
                if cancelled() {
                    return Err(failed(
                        ErrorCode::BuildFailed,
                        "cancelled: the client went away",
                    ));
                }
                step(&s.text, log);
                let (argv, user, env, cwd) = match &s.action {
                    Action::Run(argv) => (
                        argv.clone(),
                        s.user.clone(),
                        s.env.clone(),
                        s.workdir.clone(),
                    ),
                    Action::Copy {
                        sources,
                        dest,
                        chown,
                        extract,
                    } => {
                        let mut dest = if dest.starts_with('/') {
                            dest.clone()
                        } else {
                            let wd = s.workdir.clone().unwrap_or_else(|| "/".into());
                            format!("{}/{dest}", wd.trim_end_matches('/'))
                        };
                        if dest.ends_with("/.") {
                            dest.pop();
                        }
                        let mut argv: Vec<String> = vec![
                            "/bin/sh".into(),
                            "-c".into(),
                            COPY_SCRIPT.into(),
                            "copy".into(),
                            dest,
                            if *extract { "1" } else { "0" }.into(),
                        ];
                        for src in sources {
                            argv.push(context_pattern(s.line, src)?);
                        }
                        // `--chown`'s user does the copy (so it owns the files); else the
                        // step's user.
                        let user = chown
                            .as_ref()
                            .map(|c| c.split(':').next().unwrap_or(c).to_string())
                            .or_else(|| s.user.clone());
                        (argv, user, BTreeMap::new(), Some("/".to_string()))
                    }
                    Action::Workdir(dir) => (
                        vec!["mkdir".into(), "-p".into(), dir.clone()],
                        s.user.clone(),
                        BTreeMap::new(),
                        Some("/".to_string()),
                    ),
                };
                let end = self
                    .command(
                        &sb.agent,
                        argv,
                        user,
                        env,
                        cwd,
                        tx,
                        log,
                        req.cancel_on_disconnect,
                    )
                    .await
                    .map_err(|e| {
                        failed(
                            ErrorCode::BuildFailed,
                            format!("line {}: {}: {e}", s.line, s.text),
                        )
                    })?;
                if end.exit_code != Some(0) {
                    let how = match (&end.exit_code, &end.signal, end.timed_out) {
                        (_, _, true) => {
                            format!("timed out after {} s", self.cfg.step_timeout.as_secs())
                        }
                        (Some(c), _, _) => format!("exit code {c}"),
                        (_, Some(sig), _) => format!("killed by {sig}"),
                        _ => "failed".to_string(),
                    };
                    let code =
                        if end.exit_code == Some(66) && matches!(s.action, Action::Copy { .. }) {
                            ErrorCode::InvalidDockerfile
                        } else {
                            ErrorCode::BuildFailed
                        };
                    return Err(failed(code, format!("line {}: {}: {how}", s.line, s.text)));
                }
            }
            let user = match &plan.user {
                Some(u) => {
                    step(&format!("look up USER {u}"), log);
                    Some(self.lookup_user(&sb.agent, u).await?)
                }
                None => None,
            };
            step("record the installed packages", log);
            let home = user.as_ref().unwrap_or(&base.top.meta.user).home.clone();
            let packages = self
                .installed_packages(&sb.agent, &base.top.meta, &home, log)
                .await;
            Ok((user, packages))
        }
        .await;
        let (user, packages) = match result {
            Ok(u) => u,
            Err(f) => {
                let _ = self.sandboxes.kill(&sid).await;
                return Err(f);
            }
        };
        step("import the layer", log);
        let rt = self.sandboxes.stop_keep_layer(&sid).await.map_err(|e| {
            failed(
                ErrorCode::BuildFailed,
                format!(
                    "stopping the build sandbox: {}",
                    lizard_jail::error_chain(&e)
                ),
            )
        })?;
        let layer = LayerInputs {
            env: plan.env.clone(),
            workdir: plan.workdir.clone(),
            user,
            description: format!("{} + a Dockerfile layer", row.base),
            packages: Some(packages),
        };
        let imported = self.import(row, base, key, &rt, layer, None, log).await;
        self.sandboxes.discard_stopped(&sid, rt).await;
        imported
    }

    /// Upload the context archive and unpack it (as the sandbox user) in the sandbox's /tmp.
    async fn unpack_context(
        &self,
        agent: &crate::agent_client::AgentClient,
        req: &BuildRequest,
        log: &mut Log,
    ) -> Result<(), Failure> {
        if req.context.is_empty() {
            return Ok(());
        }
        agent
            .put_file(CONTEXT_TAR, req.context.clone(), Duration::from_secs(120))
            .await
            .map_err(|e| {
                failed(
                    ErrorCode::BuildFailed,
                    format!("uploading the context: {e}"),
                )
            })?;
        let script = format!(
            "set -e; mkdir -p {CONTEXT_DIR}; tar -xf {CONTEXT_TAR} -C {CONTEXT_DIR} --no-same-owner; \
             rm -f {CONTEXT_TAR}; chmod -R a+rX {CONTEXT_DIR}"
        );
        let (tx, _rx) = mpsc::channel(1);
        let end = self
            .command(
                agent,
                vec!["/bin/sh".into(), "-c".into(), script],
                Some("user".into()),
                BTreeMap::new(),
                Some("/".into()),
                &tx,
                log,
                false,
            )
            .await
            .map_err(|e| {
                failed(
                    ErrorCode::BuildFailed,
                    format!("unpacking the context: {e}"),
                )
            })?;
        if end.exit_code != Some(0) {
            return Err(failed(
                ErrorCode::InvalidRequest,
                "the build context is not a tar or tar.gz archive",
            ));
        }
        Ok(())
    }

    /// Run one command in the build sandbox, its output into the log and the event stream.
    #[allow(clippy::too_many_arguments)]
    async fn command(
        &self,
        agent: &crate::agent_client::AgentClient,
        argv: Vec<String>,
        user: Option<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
        tx: &mpsc::Sender<TemplateBuildEvent>,
        log: &mut Log,
        cancel_on_disconnect: bool,
    ) -> Result<lizard_proto::CommandEnd, String> {
        let req = StartCommandRequest {
            argv: Some(argv),
            cwd,
            env,
            timeout_ms: Some(self.cfg.step_timeout.as_millis() as u64),
            // RUN runs as root unless USER says otherwise.
            user: Some(user.unwrap_or_else(|| "root".into())),
            ..Default::default()
        };
        let mut on_event = |ev: &CommandEvent| {
            let (stream, text) = match ev {
                CommandEvent::Stdout { text, .. } => (LogStream::Stdout, text),
                CommandEvent::Stderr { text, .. } => (LogStream::Stderr, text),
                _ => return,
            };
            log.push(text);
            let _ = tx.try_send(TemplateBuildEvent::Log {
                stream,
                text: text.clone(),
            });
        };
        // A step's own deadline, plus a margin for the agent to report it.
        let deadline = self.cfg.step_timeout + Duration::from_secs(30);
        let run = agent.run_command(&req, deadline, 1024 * 1024, &mut on_event);
        if cancel_on_disconnect {
            tokio::select! {
                r = run => r.map_err(|e| lizard_jail::error_chain(&e)),
                _ = tx.closed() => Err("cancelled: the client went away".into()),
            }
        } else {
            run.await.map_err(|e| lizard_jail::error_chain(&e))
        }
    }

    /// What the build installed, listed inside the build sandbox after the last step, as root,
    /// each listing under [`PACKAGE_LISTING_TIMEOUT`] and at most [`MAX_PACKAGE_LISTING`] bytes:
    /// Debian packages always, Python distributions when the template has Python, npm packages
    /// when it has Node (the venv's and the user site of `home`, where `pip install` in the
    /// sandbox puts them and the kernels find them). The answers are untrusted and only describe the template to its owner:
    /// a listing that fails or does not parse leaves its section empty (with a log line), never
    /// fails the build.
    async fn installed_packages(
        &self,
        agent: &crate::agent_client::AgentClient,
        base: &lizard_template::meta::TemplateMeta,
        home: &str,
        log: &mut Log,
    ) -> Versions {
        let mut v = Versions::default();
        let dpkg = vec![
            "dpkg-query".to_string(),
            "-W".into(),
            "-f".into(),
            "${Package}\t${Version}\n".into(),
        ];
        match self.capture(agent, dpkg, BTreeMap::new()).await {
            Ok(out) => v.debian = lock::parse_dpkg(&out),
            Err(e) => log.push(&format!("listing the Debian packages: {e}\n")),
        }
        if let Some(python) = &base.python {
            let argv = vec![
                python.clone(),
                "-m".into(),
                "pip".into(),
                "list".into(),
                "--format=json".into(),
            ];
            let env = BTreeMap::from([
                ("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into()),
                (
                    "PYTHONUSERBASE".into(),
                    format!("{}/.local", home.trim_end_matches('/')),
                ),
            ]);
            match self
                .capture(agent, argv, env)
                .await
                .and_then(|out| lock::parse_pip_list(out.trim()))
            {
                Ok(p) => v.python = p,
                Err(e) => log.push(&format!("listing the Python packages: {e}\n")),
            }
        }
        if let (Some(_), Some(modules)) = (&base.node, &base.node_path) {
            let argv = vec![
                "/bin/sh".to_string(),
                "-c".into(),
                NPM_LOCK_SCRIPT.into(),
                "sh".into(),
                modules.clone(),
            ];
            match self
                .capture(agent, argv, BTreeMap::new())
                .await
                .and_then(|out| lock::parse_package_lock(&out))
            {
                Ok(p) => v.node = p,
                Err(e) => log.push(&format!("listing the npm packages: {e}\n")),
            }
        }
        log.push(&format!(
            "recorded {} Debian, {} Python and {} npm packages\n",
            v.debian.len(),
            v.python.len(),
            v.node.len()
        ));
        v
    }

    /// Run `argv` as the build sandbox's root and return its stdout (at most
    /// [`MAX_PACKAGE_LISTING`] bytes; more, a failure to exit 0, or a missed deadline is an
    /// error).
    async fn capture(
        &self,
        agent: &crate::agent_client::AgentClient,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    ) -> Result<String, String> {
        let req = StartCommandRequest {
            argv: Some(argv),
            cwd: Some("/".into()),
            env,
            timeout_ms: Some(PACKAGE_LISTING_TIMEOUT.as_millis() as u64),
            user: Some("root".into()),
            ..Default::default()
        };
        let mut out = String::new();
        let mut over = false;
        let mut on_event = |ev: &CommandEvent| match ev {
            CommandEvent::Stdout { text, .. } => {
                if out.len() + text.len() > MAX_PACKAGE_LISTING {
                    over = true;
                } else {
                    out.push_str(text);
                }
            }
            // The agent lost output: the listing is incomplete.
            CommandEvent::Start {
                dropped_stdout_bytes,
                ..
            } if *dropped_stdout_bytes > 0 => over = true,
            _ => {}
        };
        let end = agent
            .run_command(
                &req,
                PACKAGE_LISTING_TIMEOUT + Duration::from_secs(30),
                1024 * 1024,
                &mut on_event,
            )
            .await
            .map_err(|e| lizard_jail::error_chain(&e))?;
        if over {
            return Err(format!(
                "more than {MAX_PACKAGE_LISTING} bytes of output, or output lost"
            ));
        }
        match end.exit_code {
            Some(0) => Ok(out),
            Some(c) => Err(format!("exit code {c}")),
            None => Err(if end.timed_out {
                "timed out".to_string()
            } else {
                "killed".to_string()
            }),
        }
    }

    /// The final USER's uid, gid and home, asked inside the sandbox (its answer is untrusted:
    /// parsed and range-checked).
    async fn lookup_user(
        &self,
        agent: &crate::agent_client::AgentClient,
        user: &str,
    ) -> Result<lizard_template::meta::UserMeta, Failure> {
        let name = user.split(':').next().unwrap_or(user).to_string();
        let script = r#"u=$(getent passwd "$1") || exit 3; echo "$u""#;
        let mut out = String::new();
        let mut tmp = Log::default();
        let (tx2, mut rx2) = mpsc::channel(64);
        let end = self
            .command(
                agent,
                vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    script.into(),
                    "sh".into(),
                    name.clone(),
                ],
                Some("user".into()),
                BTreeMap::new(),
                Some("/".into()),
                &tx2,
                &mut tmp,
                false,
            )
            .await
            .map_err(|e| failed(ErrorCode::BuildFailed, format!("USER {user}: {e}")))?;
        while let Ok(ev) = rx2.try_recv() {
            if let TemplateBuildEvent::Log {
                stream: LogStream::Stdout,
                text,
            } = ev
            {
                out.push_str(&text);
            }
        }
        if end.exit_code != Some(0) {
            return Err(failed(
                ErrorCode::InvalidDockerfile,
                format!("USER {user}: no such user in the template"),
            ));
        }
        parse_passwd_line(out.lines().next().unwrap_or("")).ok_or_else(|| {
            failed(
                ErrorCode::BuildFailed,
                format!("USER {user}: bad passwd entry"),
            )
        })
    }

    /// Import the stopped sandbox's upper directory as the new layer and commit it.
    #[allow(clippy::too_many_arguments)]
    async fn import(
        &self,
        row: &TemplateRow,
        base: &Chain,
        key: &str,
        rt: &crate::sandboxes::Runtime,
        inputs: LayerInputs,
        frozen: Option<&str>,
        log: &mut Log,
    ) -> Result<(u64, u64), Failure> {
        let bm = &base.top.meta;
        let (Some(disk), Some(from_base)) = (rt.disk.clone(), rt.id_base) else {
            return Err(failed(
                ErrorCode::BuildFailed,
                "the build sandbox has no writable layer of its own",
            ));
        };
        let data = self.data().to_path_buf();
        let udir = layer::user_dir(&data, &row.id);
        let build_dir = udir.join(format!(".build-{key}-{}", std::process::id()));
        let ids = IdShift {
            from_base,
            to_base: bm.id_shift,
            count: lizard_template::shift::ID_RANGE,
        };
        let limits = self.cfg.import;
        let upper = disk.join("upper");
        let bd = build_dir.clone();
        let copy = move || {
            let _ = std::fs::remove_dir_all(&bd);
            std::fs::create_dir_all(bd.join(layer::LAYER_DIR))
                .map_err(|e| format!("creating the layer: {e}"))?;
            let r =
                lizard_jail::layer::import_layer(&upper, &bd.join(layer::LAYER_DIR), ids, limits)
                    .map_err(|e| e.to_string())?;
            // The build sandbox's resolver and trust files (written by the server for its egress,
            // `crate::egress`) are not part of the template: its sandboxes get their own. (Its
            // `/etc/hosts` is the build's own: egress writes none.)
            // Removed without following a link the build planted (`etc` a symlink to the host's
            // `/etc` would otherwise make this remove the host's files).
            let layer_dir = bd.join(layer::LAYER_DIR);
            use crate::egress::{BUNDLE_FILE, CA_CERT_FILE, TRUST_DIR};
            for f in [
                "etc/resolv.conf".to_string(),
                format!("{TRUST_DIR}/{CA_CERT_FILE}"),
                format!("{TRUST_DIR}/{BUNDLE_FILE}"),
            ] {
                remove_beneath(&layer_dir, &f);
            }
            if real_dirs_beneath(&layer_dir, TRUST_DIR) {
                let _ = std::fs::remove_dir(layer_dir.join(TRUST_DIR));
            }
            Ok::<_, String>(r)
        };
        let report = match frozen {
            // A running sandbox: copied with its processes frozen and its lifecycle held.
            Some(id) => self
                .sandboxes
                .with_frozen(id, move |_| copy())
                .await
                .map_err(|e| failed(ErrorCode::Conflict, lizard_jail::error_chain(&e)))?,
            None => tokio::task::spawn_blocking(copy)
                .await
                .map_err(|e| failed(ErrorCode::Internal, e.to_string()))?,
        };
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                remove_build(&build_dir);
                return Err(failed(
                    ErrorCode::BuildFailed,
                    format!("importing the layer: {e}"),
                ));
            }
        };
        for d in &report.dropped {
            log.push(&format!("dropped {d}\n"));
        }
        if report.dropped_count as usize > report.dropped.len() {
            log.push(&format!(
                "… and {} more dropped\n",
                report.dropped_count as usize - report.dropped.len()
            ));
        }
        log.push(&format!(
            "layer: {} entries, {} bytes\n",
            report.entries, report.bytes
        ));
        let mut env = bm.env.clone();
        env.extend(inputs.env);
        let created = now_ms();
        let mut meta = bm.clone();
        meta.name = row.name.clone();
        meta.key = key.to_string();
        meta.created = lizard_template::meta::rfc3339(created / 1000);
        meta.description = inputs.description;
        meta.env = env;
        meta.disk_bytes = report.bytes;
        if let Some(p) = inputs.packages {
            meta.versions = Some(p);
            // Drift is a built-in build's comparison with its lock: not this layer's.
            meta.drift = Vec::new();
        }
        if let Some(u) = inputs.user {
            meta.env.insert("HOME".into(), u.home.clone());
            meta.env.insert("USER".into(), u.name.clone());
            meta.env.insert("LOGNAME".into(), u.name.clone());
            meta.user = u;
        }
        let lm = LayerMeta {
            meta,
            base: BaseRef {
                name: row.base.clone(),
                key: base.top.key.clone(),
                dir: base.top.dir.clone(),
            },
            workdir: inputs.workdir.or(base.workdir.clone()),
        };
        let bd = build_dir.clone();
        let base_dir = base.top.dir.clone();
        let pin = format!("layer-{}-{key}", row.id);
        let committed = tokio::task::spawn_blocking(move || {
            // The base keeps its build while this layer is over it.
            lizard_template::store::pin(&base_dir, &pin)?;
            let final_dir = bd.parent().map(|p| p.join(&lm.meta.key));
            if let Some(f) = &final_dir {
                if f.exists() {
                    // The same key built before (a cache hit missed by a concurrent delete).
                    let _ = std::fs::remove_dir_all(f);
                }
            }
            layer::commit(&bd, &lm)
        })
        .await
        .map_err(|e| failed(ErrorCode::Internal, e.to_string()))?;
        if let Err(e) = committed {
            remove_build(&build_dir);
            return Err(failed(
                ErrorCode::Internal,
                format!("committing the layer: {e}"),
            ));
        }
        Ok((report.bytes, created))
    }
}

/// The wire form of a build's recorded versions.
fn packages_of(v: Versions) -> lizard_proto::TemplatePackages {
    lizard_proto::TemplatePackages {
        debian: v.debian,
        python: v.python,
        node: v.node,
    }
}

/// What a new layer's meta takes from its build (over its base's).
struct LayerInputs {
    env: BTreeMap<String, String>,
    workdir: Option<String>,
    user: Option<lizard_template::meta::UserMeta>,
    /// What the build sandbox listed after the last step (`None`: the base's, unchanged).
    packages: Option<Versions>,
    description: String,
}

/// The pins of a template's builds by layers over them (`layer-…` entries of `.users`).
fn base_users(template_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(versions) = std::fs::read_dir(template_dir) else {
        return out;
    };
    for v in versions.flatten() {
        if let Ok(users) = std::fs::read_dir(v.path().join(".users")) {
            for u in users.flatten() {
                let n = u.file_name().to_string_lossy().into_owned();
                if n.starts_with("layer-") {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// Remove one layered build (and its pin on its base). The tree is the host's own copy.
fn remove_build(dir: &Path) {
    if let Some((_, Some(lm))) = layer::read_build_dir(dir) {
        let id = dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        lizard_template::store::unpin(&lm.base.dir, &format!("layer-{id}-{}", lm.meta.key));
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "removing a template build");
        }
    }
}

/// A COPY source as a pattern relative to the context: no `..`, no absolute path, no newline.
fn context_pattern(line: usize, src: &str) -> Result<String, Failure> {
    let p = src.trim_start_matches("./").trim_start_matches('/');
    let bad = src.contains('\n')
        || Path::new(p)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if bad {
        return Err(failed(
            ErrorCode::InvalidDockerfile,
            format!("line {line}: {src}: a source outside the build context"),
        ));
    }
    Ok(if p.is_empty() || p == "." {
        ".".into()
    } else {
        p.trim_end_matches('/').to_string()
    })
}

/// A `getent passwd` line → the user (ids inside the sandbox: below 65536, not root, not a
/// context uid), or `None`.
fn parse_passwd_line(line: &str) -> Option<lizard_template::meta::UserMeta> {
    let f: Vec<&str> = line.trim_end().split(':').collect();
    if f.len() != 7 {
        return None;
    }
    let uid: u32 = f[2].parse().ok()?;
    let gid: u32 = f[3].parse().ok()?;
    let ctx = lizard_template::meta::CONTEXT_UID_BASE
        ..lizard_template::meta::CONTEXT_UID_BASE + lizard_template::meta::CONTEXT_UIDS;
    let ok_name = !f[0].is_empty()
        && f[0].len() <= 32
        && f[0]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let ok_path = |p: &str| p.starts_with('/') && p.len() < 256 && !p.contains(['\0', '\n']);
    if !ok_name || uid == 0 || uid >= 65536 || gid >= 65536 || ctx.contains(&uid) {
        return None;
    }
    if !ok_path(f[5]) || !ok_path(f[6]) {
        return None;
    }
    Some(lizard_template::meta::UserMeta {
        name: f[0].to_string(),
        uid,
        gid,
        home: f[5].to_string(),
        shell: f[6].to_string(),
    })
}

/// Whether every component of `rel` below `root` (a host directory no sandbox can reach, such as
/// an imported layer) is a real directory, not a symlink. Blocking.
fn real_dirs_beneath(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    for c in rel.split('/') {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// Remove the file (or symlink) `rel` below `root` if every directory on the way is a real one
/// (the layer's content is the sandbox's: a symlinked directory is never followed). Blocking.
fn remove_beneath(root: &Path, rel: &str) {
    let (dirs, _) = rel.rsplit_once('/').unwrap_or(("", rel));
    if !dirs.is_empty() && !real_dirs_beneath(root, dirs) {
        return;
    }
    let path = root.join(rel);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_dir()) {
        let _ = std::fs::remove_file(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_build_files_never_follows_a_planted_link() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("resolv.conf"), "the host's").unwrap();
        let layer = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), layer.path().join("etc")).unwrap();
        remove_beneath(layer.path(), "etc/resolv.conf");
        assert!(
            outside.path().join("resolv.conf").exists(),
            "followed etc -> outside"
        );
        assert!(!real_dirs_beneath(layer.path(), "etc"));
        // A real one goes; a link at the file's place goes as a link.
        let real = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(real.path().join("etc/lizard")).unwrap();
        std::fs::write(real.path().join("etc/resolv.conf"), "x").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("resolv.conf"),
            real.path().join("etc/lizard/ca-bundle.pem"),
        )
        .unwrap();
        remove_beneath(real.path(), "etc/resolv.conf");
        remove_beneath(real.path(), "etc/lizard/ca-bundle.pem");
        assert!(!real.path().join("etc/resolv.conf").exists());
        assert!(std::fs::symlink_metadata(real.path().join("etc/lizard/ca-bundle.pem")).is_err());
        assert!(outside.path().join("resolv.conf").exists());
    }

    #[test]
    fn registry_hosts_come_from_pip_npm_and_apt_configuration() {
        let text = "\
[global]
index-url = https://mirror.example.org/simple
extra-index-url=http://user:pw@other.example:8080/x
# index-url = https://commented.example
registry=https://npm.example.com/
deb http://deb.debian.org/debian bookworm main
deb [arch=amd64] https://security.debian.org/debian-security bookworm-security main
URIs: http://ftp.example.net/debian
timeout = 60
";
        assert_eq!(
            registry_hosts(text),
            [
                "mirror.example.org",
                "other.example",
                "npm.example.com",
                "deb.debian.org",
                "security.debian.org",
                "ftp.example.net"
            ]
        );
        assert!(registry_hosts("index-url = file:///x").is_empty());
        // Each tool's public registry where the host configures none.
        assert_eq!(
            egress_from(
                "[global]\ncert = /x\n",
                "",
                "URIs: http://deb.debian.org/debian\n"
            ),
            [
                "pypi.org",
                "files.pythonhosted.org",
                "registry.npmjs.org",
                "deb.debian.org"
            ]
        );
        assert_eq!(
            egress_from(
                "index-url=https://m.example/simple",
                "registry=https://n.example/",
                ""
            ),
            ["m.example", "n.example", "deb.debian.org"]
        );
    }

    #[test]
    fn passwd_lines_are_checked() {
        let u = parse_passwd_line("app:x:1001:1001:,,,:/home/app:/bin/bash").unwrap();
        assert_eq!((u.uid, u.gid, u.home.as_str()), (1001, 1001, "/home/app"));
        assert!(parse_passwd_line("root:x:0:0:root:/root:/bin/bash").is_none());
        assert!(parse_passwd_line("c:x:2001:1000::/home/c:/bin/sh").is_none());
        assert!(parse_passwd_line("big:x:70000:1::/h:/bin/sh").is_none());
        assert!(parse_passwd_line("rel:x:1002:1::home:/bin/sh").is_none());
        assert!(parse_passwd_line("a:b").is_none());
    }

    #[test]
    fn copy_sources_stay_in_the_context() {
        assert_eq!(context_pattern(1, "./a/b/").ok().unwrap(), "a/b");
        assert_eq!(context_pattern(1, ".").ok().unwrap(), ".");
        assert_eq!(context_pattern(1, "*.whl").ok().unwrap(), "*.whl");
        assert!(context_pattern(1, "../x").is_err());
        assert!(context_pattern(1, "a/../../x").is_err());
    }

    #[test]
    fn the_log_keeps_its_end() {
        let mut l = Log::default();
        l.push(&"a".repeat(MAX_BUILD_LOG));
        l.push("é tail");
        assert!(l.0.len() <= MAX_BUILD_LOG && l.0.ends_with("é tail"));
    }
}
