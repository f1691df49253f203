//! The server's embedded SQLite store: projects, API keys (hashed), sandboxes and usage.
//!
//! Everything the server must not lose across a restart lives here, written at every lifecycle
//! transition and by the metering sampler. Not here: anything about how sandboxes run.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the database {path}")]
    Open {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("database query failed")]
    Sql(#[from] rusqlite::Error),
    #[error("corrupt JSON column")]
    Json(#[from] serde_json::Error),
    #[error("project {0:?} already exists")]
    ProjectExists(String),
    #[error("volume {0:?} already exists in this project")]
    VolumeExists(String),
    #[error("template {0:?} already exists in this project")]
    TemplateExists(String),
    #[error("{0}")]
    TooMany(String),
}

/// One user template (a project's; see `crate::templates`). Its builds live in
/// `<data_dir>/templates/.user/<id>/<key>/` (see `lizard_template::layer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub public: bool,
    pub state: lizard_proto::TemplateState,
    /// The base template's name.
    pub base: String,
    /// The ready build's key, if any.
    pub key: Option<String>,
    /// The key being built, if a build runs.
    #[serde(default)]
    pub building_key: Option<String>,
    pub size_bytes: u64,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    #[serde(default)]
    pub error: Option<lizard_proto::ErrorBody>,
    #[serde(default)]
    pub versions: Vec<lizard_proto::TemplateVersion>,
    /// The end of the last build's log (bounded by the writer).
    #[serde(default)]
    pub build_log: String,
}

/// A sandbox's lifecycle state as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredState {
    Running,
    Paused,
    /// Saved to disk, no processes: its directory (writable layer, saved state) is kept.
    Hibernated,
    Killed,
}

impl StoredState {
    fn as_str(self) -> &'static str {
        match self {
            StoredState::Running => "running",
            StoredState::Paused => "paused",
            StoredState::Hibernated => "hibernated",
            StoredState::Killed => "killed",
        }
    }
    fn parse(s: &str) -> StoredState {
        match s {
            "running" => StoredState::Running,
            "paused" => StoredState::Paused,
            "hibernated" => StoredState::Hibernated,
            _ => StoredState::Killed,
        }
    }
}

/// One sandbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRow {
    pub id: String,
    pub project: String,
    pub template: String,
    pub state: StoredState,
    pub created_at_ms: u64,
    pub timeout_at_ms: u64,
    pub ended_at_ms: Option<u64>,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    /// Launch details the server needs to find the sandbox again (pid, cgroup, paths), as JSON.
    pub runtime: serde_json::Value,
    pub limits: serde_json::Value,
    /// While paused: the timeout left when it was paused.
    pub paused_remaining_ms: u64,
    pub on_timeout: lizard_proto::TimeoutAction,
    /// The sandbox's lifetime, as last set.
    pub timeout_ms: u64,
    /// Volumes mounted in the sandbox.
    pub volumes: Vec<lizard_proto::SandboxVolume>,
    /// The `network` of the create request, as JSON (`{}` for loopback only).
    pub network: serde_json::Value,
}

/// A project's secret as the store lists it: never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRow {
    pub name: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// 1 when set first, one more at each change of its value.
    pub version: u64,
    /// Labels (E2B's secret metadata); empty unless set.
    pub metadata: BTreeMap<String, String>,
}

/// One volume row (deleted volumes keep theirs, for usage).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub size_limit_bytes: u64,
    pub created_at_ms: u64,
    pub deleted_at_ms: Option<u64>,
    /// Host disk use integrated over time.
    pub gib_hours: f64,
    /// Host disk use at the last sample.
    pub used_bytes: u64,
    /// When `gib_hours` was last brought up to date.
    pub updated_at_ms: u64,
}

/// Usage totals of one sandbox.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    pub sandbox_id: String,
    pub project: String,
    pub running_ms: u64,
    pub paused_ms: u64,
    pub hibernated_ms: u64,
    pub cpu_ms: u64,
    pub memory_gib_seconds: f64,
    pub executions: u64,
    pub execution_wall_ms: u64,
    pub execution_cpu_ms: u64,
    pub max_execution_peak_rss_bytes: u64,
    /// The agent log position already counted.
    pub agent_log_seq: u64,
    pub updated_at_ms: u64,
    /// Body bytes the package registries' mirror sent to the sandbox, and its requests to it.
    pub mirror_bytes: u64,
    pub mirror_requests: u64,
    /// Bytes its egress relay carried out of the sandbox and into it, and its connections and
    /// DNS queries refused.
    pub egress_bytes_out: u64,
    pub egress_bytes_in: u64,
    pub egress_refused: u64,
}

/// One snapshot (deleted ones keep their row, for usage). Stored as JSON in `snapshots.data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRow {
    pub id: String,
    pub project: String,
    pub sandbox_id: String,
    pub template: String,
    pub created_at_ms: u64,
    #[serde(default)]
    pub deleted_at_ms: Option<u64>,
    /// Host disk its image holds.
    pub size_bytes: u64,
    /// What was captured, per context, and how.
    pub report: lizard_proto::HibernationReport,
    /// How long the source was frozen for it (None: a row of an older server).
    #[serde(default)]
    pub frozen_ms: Option<u64>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// What a clone is launched with: the source's settings and lower layers.
    pub source: SnapshotSource,
}

pub struct Store {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY,
    created_at_ms INTEGER NOT NULL,
    allow_egress INTEGER NOT NULL DEFAULT 0,
    package_registries INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS secrets (
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    sealed BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    metadata TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (project, name)
);
CREATE TABLE IF NOT EXISTS api_keys (
    hash TEXT PRIMARY KEY,
    prefix TEXT NOT NULL,
    project TEXT,               -- NULL: an admin key
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    template TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    timeout_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    metadata TEXT NOT NULL,
    envs TEXT NOT NULL,
    runtime TEXT NOT NULL,
    limits TEXT NOT NULL,
    paused_remaining_ms INTEGER,
    on_timeout TEXT NOT NULL DEFAULT 'kill',
    timeout_ms INTEGER NOT NULL DEFAULT 300000,
    volumes TEXT NOT NULL DEFAULT '[]',
    network TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS sandboxes_project ON sandboxes(project, state);
CREATE TABLE IF NOT EXISTS usage (
    sandbox_id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    running_ms INTEGER NOT NULL DEFAULT 0,
    paused_ms INTEGER NOT NULL DEFAULT 0,
    hibernated_ms INTEGER NOT NULL DEFAULT 0,
    cpu_ms INTEGER NOT NULL DEFAULT 0,
    memory_gib_seconds REAL NOT NULL DEFAULT 0,
    executions INTEGER NOT NULL DEFAULT 0,
    execution_wall_ms INTEGER NOT NULL DEFAULT 0,
    execution_cpu_ms INTEGER NOT NULL DEFAULT 0,
    max_execution_peak_rss_bytes INTEGER NOT NULL DEFAULT 0,
    agent_log_seq INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL DEFAULT 0,
    mirror_bytes INTEGER NOT NULL DEFAULT 0,
    mirror_requests INTEGER NOT NULL DEFAULT 0,
    egress_bytes_out INTEGER NOT NULL DEFAULT 0,
    egress_bytes_in INTEGER NOT NULL DEFAULT 0,
    egress_refused INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS usage_project ON usage(project);
CREATE TABLE IF NOT EXISTS executions (
    sandbox_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    project TEXT NOT NULL,
    context_id TEXT NOT NULL,
    language TEXT NOT NULL,
    status TEXT NOT NULL,
    wall_ms INTEGER NOT NULL,
    cpu_ms INTEGER NOT NULL,
    peak_rss_bytes INTEGER NOT NULL,
    finished_at_ms INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, seq)
);
CREATE INDEX IF NOT EXISTS executions_project ON executions(project, finished_at_ms);
CREATE INDEX IF NOT EXISTS executions_finished ON executions(finished_at_ms);
CREATE TABLE IF NOT EXISTS volumes (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    size_limit_bytes INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    deleted_at_ms INTEGER,
    gib_hours REAL NOT NULL DEFAULT 0,
    used_bytes INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS volumes_live_name ON volumes(project, name)
    WHERE deleted_at_ms IS NULL;
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    project TEXT,
    key_prefix TEXT,
    action TEXT NOT NULL,
    object TEXT,
    status INTEGER NOT NULL,
    client TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS templates (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    name TEXT NOT NULL,
    public INTEGER NOT NULL DEFAULT 0,
    data TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS templates_name ON templates(project, name);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    sandbox_id TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    deleted_at_ms INTEGER,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_project ON snapshots(project, created_at_ms);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at_ms);
CREATE INDEX IF NOT EXISTS audit_project ON audit(project, at_ms);
";

/// Columns added after the first release of a table: added to older databases on open.
const ADDED_COLUMNS: [(&str, &str, &str); 15] = [
    ("sandboxes", "paused_remaining_ms", "INTEGER"),
    ("sandboxes", "on_timeout", "TEXT NOT NULL DEFAULT 'kill'"),
    ("sandboxes", "timeout_ms", "INTEGER NOT NULL DEFAULT 300000"),
    ("sandboxes", "volumes", "TEXT NOT NULL DEFAULT '[]'"),
    ("usage", "hibernated_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("sandboxes", "network", "TEXT NOT NULL DEFAULT '{}'"),
    ("projects", "allow_egress", "INTEGER NOT NULL DEFAULT 0"),
    (
        "projects",
        "package_registries",
        "INTEGER NOT NULL DEFAULT 1",
    ),
    ("usage", "mirror_bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("usage", "mirror_requests", "INTEGER NOT NULL DEFAULT 0"),
    ("usage", "egress_bytes_out", "INTEGER NOT NULL DEFAULT 0"),
    ("usage", "egress_bytes_in", "INTEGER NOT NULL DEFAULT 0"),
    ("usage", "egress_refused", "INTEGER NOT NULL DEFAULT 0"),
    ("secrets", "version", "INTEGER NOT NULL DEFAULT 1"),
    ("secrets", "metadata", "TEXT NOT NULL DEFAULT '{}'"),
];

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    for (table, column, decl) in ADDED_COLUMNS {
        let mut st = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let exists = st
            .query_map([], |r| r.get::<_, String>(1))?
            .collect::<rusqlite::Result<Vec<_>>>()?
            .iter()
            .any(|c| c == column);
        if !exists {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The append-only tables that have a retention ([`Retention`]): rows are only ever added, and
/// deleted oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// `audit`: aged by `at_ms`.
    Audit,
    /// `executions`: aged by `finished_at_ms` (clamped to the server's clock when recorded).
    Executions,
}

/// How long and how many rows of a [`Log`] are kept; `None` = no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_age: Option<std::time::Duration>,
    pub max_events: Option<u64>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        migrate(&conn).map_err(open_err)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (statements are atomic).
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    // --- projects and keys ----------------------------------------------------------------------

    /// A new project; `allow_egress`: its sandboxes may be given internet egress;
    /// `package_registries`: its sandboxes reach the package registries' mirror.
    pub fn create_project(
        &self,
        name: &str,
        allow_egress: bool,
        package_registries: bool,
    ) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "INSERT OR IGNORE INTO projects (name, created_at_ms, allow_egress, package_registries) \
             VALUES (?1, ?2, ?3, ?4)",
            params![name, now_ms() as i64, allow_egress, package_registries],
        )?;
        if n == 0 {
            return Err(StoreError::ProjectExists(name.to_string()));
        }
        Ok(())
    }

    // --- secrets --------------------------------------------------------------------------------

    /// Set secret `name` of `project` to the sealed `value` (see `crate::secrets`); true if it
    /// is new. At most `max` per project (a new one beyond is `TooMany`).
    pub fn put_secret(
        &self,
        project: &str,
        name: &str,
        sealed: &[u8],
        max: usize,
    ) -> Result<bool, StoreError> {
        let conn = self.conn();
        let now = now_ms() as i64;
        let updated = conn.execute(
            "UPDATE secrets SET sealed = ?3, updated_at_ms = ?4, version = version + 1
             WHERE project = ?1 AND name = ?2",
            params![project, name, sealed, now],
        )?;
        if updated > 0 {
            return Ok(false);
        }
        let count: i64 = conn.query_row(
            "SELECT COUNT(*) FROM secrets WHERE project = ?1",
            [project],
            |r| r.get(0),
        )?;
        if count as usize >= max {
            return Err(StoreError::TooMany(format!(
                "project {project:?} has {count} secrets (at most {max})"
            )));
        }
        conn.execute(
            "INSERT INTO secrets (project, name, sealed, created_at_ms, updated_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![project, name, sealed, now],
        )?;
        Ok(true)
    }

    /// The project's secrets (never their values), by name.
    pub fn list_secrets(&self, project: &str) -> Result<Vec<SecretRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(
            "SELECT name, created_at_ms, updated_at_ms, version, metadata FROM secrets
             WHERE project = ?1 ORDER BY name",
        )?;
        let rows = st.query_map([project], |r| {
            Ok(SecretRow {
                name: r.get(0)?,
                created_at_ms: r.get::<_, i64>(1)? as u64,
                updated_at_ms: r.get::<_, i64>(2)? as u64,
                version: r.get::<_, i64>(3)? as u64,
                metadata: serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Replace the labels of one secret; false if there is no such secret.
    pub fn set_secret_metadata(
        &self,
        project: &str,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<bool, StoreError> {
        Ok(self.conn().execute(
            "UPDATE secrets SET metadata = ?3 WHERE project = ?1 AND name = ?2",
            params![project, name, serde_json::to_string(metadata)?],
        )? > 0)
    }

    /// The sealed value of one secret.
    pub fn sealed_secret(&self, project: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT sealed FROM secrets WHERE project = ?1 AND name = ?2",
                params![project, name],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Delete one secret; false if there was none.
    pub fn delete_secret(&self, project: &str, name: &str) -> Result<bool, StoreError> {
        Ok(self.conn().execute(
            "DELETE FROM secrets WHERE project = ?1 AND name = ?2",
            params![project, name],
        )? > 0)
    }

    /// Change a project's settings (`None`: unchanged); false if there is no such project.
    pub fn update_project(
        &self,
        name: &str,
        allow_egress: Option<bool>,
        package_registries: Option<bool>,
    ) -> Result<bool, StoreError> {
        let n = self.conn().execute(
            "UPDATE projects SET allow_egress = COALESCE(?2, allow_egress), \
             package_registries = COALESCE(?3, package_registries) WHERE name = ?1",
            params![name, allow_egress, package_registries],
        )?;
        Ok(n > 0)
    }

    pub fn ensure_project(&self, name: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO projects (name, created_at_ms) VALUES (?1, ?2)",
            params![name, now_ms() as i64],
        )?;
        Ok(())
    }

    pub fn project_exists(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT 1 FROM projects WHERE name = ?1", [name], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Whether the project's sandboxes may have internet egress (false for unknown projects).
    pub fn project_allows_egress(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT allow_egress FROM projects WHERE name = ?1",
                [name],
                |r| r.get::<_, bool>(0),
            )
            .optional()?
            .unwrap_or(false))
    }

    /// Whether the project's sandboxes reach the package registries' mirror (false for unknown
    /// projects).
    pub fn project_allows_packages(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT package_registries FROM projects WHERE name = ?1",
                [name],
                |r| r.get::<_, bool>(0),
            )
            .optional()?
            .unwrap_or(false))
    }

    pub fn list_projects(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare("SELECT name FROM projects ORDER BY name")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn add_key(
        &self,
        hash: &KeyHash,
        prefix: &str,
        project: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO api_keys (hash, prefix, project, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![hash.0, prefix, project, now_ms() as i64],
        )?;
        Ok(())
    }

    /// `Some(None)`: an admin key; `Some(Some(p))`: a key of project `p`; `None`: unknown key.
    pub fn key_project(&self, hash: &KeyHash) -> Result<Option<Option<String>>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT project FROM api_keys WHERE hash = ?1",
                [&hash.0],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()?)
    }

    /// A key's project (`Some(None)` = admin) and its stored prefix, by hash. On every request:
    /// the statement is prepared once per connection (SQLite's cache), not parsed each time.
    pub fn key_lookup(
        &self,
        hash: &KeyHash,
    ) -> Result<Option<(Option<String>, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT project, prefix FROM api_keys WHERE hash = ?1")?;
        Ok(stmt
            .query_row(params![hash.0], |r| {
                Ok((r.get::<_, Option<String>>(0)?, r.get::<_, String>(1)?))
            })
            .optional()?)
    }

    /// Append one audit event (its `id` is assigned here); returns the id.
    pub fn add_audit(&self, e: &lizard_proto::AuditEvent) -> Result<u64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO audit (at_ms, actor, project, key_prefix, action, object, status, client)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                e.at_ms as i64,
                e.actor,
                e.project,
                e.key_prefix,
                e.action,
                e.object,
                e.status,
                e.client
            ],
        )?;
        Ok(conn.last_insert_rowid() as u64)
    }

    /// Delete audit events older than `before_ms`, then the oldest beyond the newest
    /// `keep_at_most` (`None`: no count limit). Returns how many were deleted.
    pub fn prune_audit(
        &self,
        before_ms: u64,
        keep_at_most: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.prune_log(Log::Audit, before_ms, keep_at_most)
    }

    /// Delete rows of `log` from before `before_ms`, then the oldest beyond the newest
    /// `keep_at_most` (`None`: no count limit). Returns how many were deleted.
    pub fn prune_log(
        &self,
        log: Log,
        before_ms: u64,
        keep_at_most: Option<u64>,
    ) -> Result<u64, StoreError> {
        let (table, at) = match log {
            Log::Audit => ("audit", "at_ms"),
            Log::Executions => ("executions", "finished_at_ms"),
        };
        let conn = self.conn();
        let mut n = conn.execute(
            &format!("DELETE FROM {table} WHERE {at} < ?1"),
            params![before_ms.min(i64::MAX as u64) as i64],
        )? as u64;
        if let Some(keep) = keep_at_most {
            // Rowids grow by one per row and only the oldest are ever deleted, so the newest
            // `keep` are those above `MAX(rowid) - keep`: a rowid lookup, not a scan of `keep`
            // rows (this runs after every write).
            n += conn.execute(
                &format!(
                    "DELETE FROM {table} WHERE rowid <= (SELECT MAX(rowid) FROM {table}) - ?1"
                ),
                params![keep.min(i64::MAX as u64) as i64],
            )? as u64;
        }
        Ok(n)
    }

    /// Audit events in `[from_ms, to_ms)`, newest first, of one project (`None`: all, including
    /// events of no project such as authentication failures).
    pub fn audit(
        &self,
        project: Option<&str>,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<lizard_proto::AuditEvent>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(
            "SELECT id, at_ms, actor, project, key_prefix, action, object, status, client
             FROM audit
             WHERE (?1 IS NULL OR project = ?1) AND at_ms >= ?2 AND at_ms < ?3
             ORDER BY id DESC LIMIT ?4",
        )?;
        let rows = st.query_map(
            params![
                project,
                from_ms.min(i64::MAX as u64) as i64,
                to_ms.min(i64::MAX as u64) as i64,
                limit.min(i64::MAX as usize) as i64
            ],
            |r| {
                Ok(lizard_proto::AuditEvent {
                    id: r.get::<_, i64>(0)? as u64,
                    at_ms: r.get::<_, i64>(1)? as u64,
                    actor: r.get(2)?,
                    project: r.get(3)?,
                    key_prefix: r.get(4)?,
                    action: r.get(5)?,
                    object: r.get(6)?,
                    status: r.get(7)?,
                    client: r.get(8)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn has_admin_key(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT 1 FROM api_keys WHERE project IS NULL LIMIT 1",
                [],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    // --- sandboxes ------------------------------------------------------------------------------

    pub fn insert_sandbox(&self, s: &SandboxRow) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO sandboxes (id, project, template, state, created_at_ms, timeout_at_ms,
                 ended_at_ms, metadata, envs, runtime, limits, on_timeout, timeout_ms, volumes,
                 network)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                s.id,
                s.project,
                s.template,
                s.state.as_str(),
                s.created_at_ms as i64,
                s.timeout_at_ms as i64,
                s.ended_at_ms.map(|v| v as i64),
                serde_json::to_string(&s.metadata)?,
                serde_json::to_string(&s.envs)?,
                s.runtime.to_string(),
                s.limits.to_string(),
                match s.on_timeout {
                    lizard_proto::TimeoutAction::Kill => "kill",
                    lizard_proto::TimeoutAction::Pause => "pause",
                    lizard_proto::TimeoutAction::Hibernate => "hibernate",
                },
                s.timeout_ms as i64,
                serde_json::to_string(&s.volumes)?,
                s.network.to_string(),
            ],
        )?;
        conn.execute(
            "INSERT OR IGNORE INTO usage (sandbox_id, project, updated_at_ms) VALUES (?1, ?2, ?3)",
            params![s.id, s.project, now_ms() as i64],
        )?;
        Ok(())
    }

    pub fn set_state(
        &self,
        id: &str,
        state: StoredState,
        ended_at_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET state = ?2, ended_at_ms = COALESCE(?3, ended_at_ms) WHERE id = ?1",
            params![id, state.as_str(), ended_at_ms.map(|v| v as i64)],
        )?;
        Ok(())
    }

    pub fn set_timeout(&self, id: &str, timeout_at_ms: u64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET timeout_at_ms = ?2 WHERE id = ?1",
            params![id, timeout_at_ms as i64],
        )?;
        Ok(())
    }

    /// Replace a sandbox's network request (its egress rules, as JSON).
    pub fn set_network(&self, id: &str, network: &serde_json::Value) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET network = ?2 WHERE id = ?1",
            params![id, network.to_string()],
        )?;
        Ok(())
    }

    /// Mark paused with the timeout left (`Some`), or running again (`None`).
    pub fn set_paused(&self, id: &str, remaining_ms: Option<u64>) -> Result<(), StoreError> {
        let state = if remaining_ms.is_some() {
            StoredState::Paused
        } else {
            StoredState::Running
        };
        self.conn().execute(
            "UPDATE sandboxes SET state = ?2, paused_remaining_ms = ?3 WHERE id = ?1",
            params![id, state.as_str(), remaining_ms.map(|v| v as i64)],
        )?;
        Ok(())
    }

    /// Mark hibernated, with the timeout left when it was hibernated.
    pub fn set_hibernated(&self, id: &str, remaining_ms: u64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET state = 'hibernated', paused_remaining_ms = ?2 WHERE id = ?1",
            params![id, remaining_ms as i64],
        )?;
        Ok(())
    }

    pub fn set_timeout_ms(&self, id: &str, timeout_ms: u64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET timeout_ms = ?2 WHERE id = ?1",
            params![id, timeout_ms as i64],
        )?;
        Ok(())
    }

    pub fn set_runtime(&self, id: &str, runtime: &serde_json::Value) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sandboxes SET runtime = ?2 WHERE id = ?1",
            params![id, runtime.to_string()],
        )?;
        Ok(())
    }

    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
        let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
            let s: String = r.get(i)?;
            Ok(serde_json::from_str(&s).unwrap_or(serde_json::Value::Null))
        };
        let map = |i: usize| -> rusqlite::Result<BTreeMap<String, String>> {
            let s: String = r.get(i)?;
            Ok(serde_json::from_str(&s).unwrap_or_default())
        };
        Ok(SandboxRow {
            id: r.get(0)?,
            project: r.get(1)?,
            template: r.get(2)?,
            state: StoredState::parse(&r.get::<_, String>(3)?),
            created_at_ms: r.get::<_, i64>(4)? as u64,
            timeout_at_ms: r.get::<_, i64>(5)? as u64,
            ended_at_ms: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
            metadata: map(7)?,
            envs: map(8)?,
            runtime: json(9)?,
            limits: json(10)?,
            paused_remaining_ms: r.get::<_, Option<i64>>(11)?.unwrap_or(0) as u64,
            on_timeout: match r.get::<_, String>(12)?.as_str() {
                "pause" => lizard_proto::TimeoutAction::Pause,
                "hibernate" => lizard_proto::TimeoutAction::Hibernate,
                _ => lizard_proto::TimeoutAction::Kill,
            },
            timeout_ms: r.get::<_, i64>(13)? as u64,
            volumes: serde_json::from_str(&r.get::<_, String>(14)?).unwrap_or_default(),
            network: json(15)?,
        })
    }

    const COLUMNS: &'static str = "id, project, template, state, created_at_ms, timeout_at_ms, \
         ended_at_ms, metadata, envs, runtime, limits, paused_remaining_ms, on_timeout, timeout_ms, \
         volumes, network";

    pub fn get_sandbox(&self, id: &str) -> Result<Option<SandboxRow>, StoreError> {
        let conn = self.conn();
        let sql = format!("SELECT {} FROM sandboxes WHERE id = ?1", Self::COLUMNS);
        Ok(conn.query_row(&sql, [id], Self::row).optional()?)
    }

    /// Sandboxes of `project` (all projects when `None`), newest first, not killed unless
    /// `include_killed`.
    pub fn list_sandboxes(
        &self,
        project: Option<&str>,
        include_killed: bool,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {} FROM sandboxes WHERE (?1 IS NULL OR project = ?1) AND (?2 OR state != 'killed')
             ORDER BY created_at_ms DESC, id",
            Self::COLUMNS
        );
        let mut st = conn.prepare(&sql)?;
        let rows = st.query_map(params![project, include_killed], Self::row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // --- volumes --------------------------------------------------------------------------------

    /// Insert a new volume; `VolumeExists` when the project already has a live one of that name.
    pub fn insert_volume(&self, v: &VolumeRow) -> Result<(), StoreError> {
        let r = self.conn().execute(
            "INSERT INTO volumes (id, project, name, size_limit_bytes, created_at_ms, updated_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            params![
                v.id,
                v.project,
                v.name,
                v.size_limit_bytes as i64,
                v.created_at_ms as i64
            ],
        );
        match r {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(StoreError::VolumeExists(v.name.clone()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Forget a volume whose creation failed.
    pub fn remove_volume_row(&self, id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM volumes WHERE id = ?1", [id])?;
        Ok(())
    }

    pub fn mark_volume_deleted(&self, id: &str, at_ms: u64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE volumes SET deleted_at_ms = ?2 WHERE id = ?1",
            params![id, at_ms as i64],
        )?;
        Ok(())
    }

    pub fn put_volume_usage(
        &self,
        id: &str,
        gib_hours: f64,
        used_bytes: u64,
        updated_at_ms: u64,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE volumes SET gib_hours = ?2, used_bytes = ?3, updated_at_ms = ?4 WHERE id = ?1",
            params![id, gib_hours, used_bytes as i64, updated_at_ms as i64],
        )?;
        Ok(())
    }

    const VOLUME_COLUMNS: &'static str = "id, project, name, size_limit_bytes, created_at_ms, \
         deleted_at_ms, gib_hours, used_bytes, updated_at_ms";

    fn volume_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<VolumeRow> {
        Ok(VolumeRow {
            id: r.get(0)?,
            project: r.get(1)?,
            name: r.get(2)?,
            size_limit_bytes: r.get::<_, i64>(3)? as u64,
            created_at_ms: r.get::<_, i64>(4)? as u64,
            deleted_at_ms: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
            gib_hours: r.get(6)?,
            used_bytes: r.get::<_, i64>(7)? as u64,
            updated_at_ms: r.get::<_, i64>(8)? as u64,
        })
    }

    /// A live (not deleted) volume of `project` by name, or by id when `key` starts with `vol_`.
    pub fn find_volume(&self, project: &str, key: &str) -> Result<Option<VolumeRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM volumes WHERE project = ?1 AND (name = ?2 OR id = ?2)
             AND deleted_at_ms IS NULL",
            Self::VOLUME_COLUMNS
        );
        Ok(self
            .conn()
            .query_row(&sql, params![project, key], Self::volume_row)
            .optional()?)
    }

    /// A live volume by id, whatever its project.
    pub fn get_volume(&self, id: &str) -> Result<Option<VolumeRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM volumes WHERE id = ?1 AND deleted_at_ms IS NULL",
            Self::VOLUME_COLUMNS
        );
        Ok(self
            .conn()
            .query_row(&sql, [id], Self::volume_row)
            .optional()?)
    }

    /// Volumes of `project` (every project when `None`), by name; deleted ones only when
    /// `include_deleted`.
    pub fn list_volumes(
        &self,
        project: Option<&str>,
        include_deleted: bool,
    ) -> Result<Vec<VolumeRow>, StoreError> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {} FROM volumes WHERE (?1 IS NULL OR project = ?1)
               AND (?2 OR deleted_at_ms IS NULL)
             ORDER BY project, name, created_at_ms",
            Self::VOLUME_COLUMNS
        );
        let mut st = conn.prepare(&sql)?;
        let rows = st.query_map(params![project, include_deleted], Self::volume_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // --- snapshots ------------------------------------------------------------------------------

    pub fn insert_snapshot(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO snapshots (id, project, sandbox_id, created_at_ms, deleted_at_ms, data)
             VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
            params![
                s.id,
                s.project,
                s.sandbox_id,
                s.created_at_ms as i64,
                serde_json::to_string(s)?
            ],
        )?;
        Ok(())
    }

    pub fn mark_snapshot_deleted(&self, id: &str, at_ms: u64) -> Result<(), StoreError> {
        let row = self.snapshot_rows(
            "SELECT data, deleted_at_ms FROM snapshots WHERE id = ?1",
            params![id],
        )?;
        let Some(mut row) = row.into_iter().next() else {
            return Ok(());
        };
        row.deleted_at_ms = Some(at_ms);
        self.conn().execute(
            "UPDATE snapshots SET deleted_at_ms = ?2, data = ?3 WHERE id = ?1",
            params![id, at_ms as i64, serde_json::to_string(&row)?],
        )?;
        Ok(())
    }

    fn snapshot_rows(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(sql)?;
        let rows = st.query_map(args, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (data, deleted) = r?;
            let mut row: SnapshotRow = serde_json::from_str(&data)?;
            row.deleted_at_ms = deleted.map(|d| d as u64);
            out.push(row);
        }
        Ok(out)
    }

    /// A live (not deleted) snapshot by id, whatever its project.
    pub fn get_snapshot(&self, id: &str) -> Result<Option<SnapshotRow>, StoreError> {
        Ok(self
            .snapshot_rows(
                "SELECT data, deleted_at_ms FROM snapshots WHERE id = ?1 AND deleted_at_ms IS NULL",
                params![id],
            )?
            .into_iter()
            .next())
    }

    /// Snapshots of `project` (every project's when `None`), of one sandbox when `sandbox_id`,
    /// oldest first; deleted ones only when `include_deleted`.
    pub fn list_snapshots(
        &self,
        project: Option<&str>,
        sandbox_id: Option<&str>,
        include_deleted: bool,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        self.snapshot_rows(
            "SELECT data, deleted_at_ms FROM snapshots
             WHERE (?1 IS NULL OR project = ?1) AND (?2 IS NULL OR sandbox_id = ?2)
               AND (?3 OR deleted_at_ms IS NULL)
             ORDER BY created_at_ms, id",
            params![project, sandbox_id, include_deleted],
        )
    }

    // --- templates ------------------------------------------------------------------------------

    /// Insert a new template; `TemplateExists` when the project has one of that name.
    pub fn insert_template(&self, t: &TemplateRow) -> Result<(), StoreError> {
        let r = self.conn().execute(
            "INSERT INTO templates (id, project, name, public, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![t.id, t.project, t.name, t.public, serde_json::to_string(t)?],
        );
        match r {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(StoreError::TemplateExists(t.name.clone()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Write a template's row (by id).
    pub fn put_template(&self, t: &TemplateRow) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE templates SET public = ?2, data = ?3 WHERE id = ?1",
            params![t.id, t.public, serde_json::to_string(t)?],
        )?;
        Ok(())
    }

    pub fn delete_template(&self, id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM templates WHERE id = ?1", [id])?;
        Ok(())
    }

    fn template_rows(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<TemplateRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(sql)?;
        let rows = st.query_map(p, |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(serde_json::from_str(&r?)?);
        }
        Ok(out)
    }

    /// The template `name` as `project` sees it: its own, else the oldest public one of that name.
    pub fn find_template(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<TemplateRow>, StoreError> {
        let rows = self.template_rows(
            "SELECT data FROM templates WHERE name = ?2 AND (project = ?1 OR public)
             ORDER BY project = ?1 DESC, rowid",
            params![project, name],
        )?;
        Ok(rows.into_iter().next())
    }

    /// Templates `project` sees (its own and the public ones); every template when `None`.
    pub fn list_templates(&self, project: Option<&str>) -> Result<Vec<TemplateRow>, StoreError> {
        self.template_rows(
            "SELECT data FROM templates WHERE ?1 IS NULL OR project = ?1 OR public
             ORDER BY name, project",
            params![project],
        )
    }

    // --- usage ----------------------------------------------------------------------------------

    pub fn get_usage(&self, sandbox_id: &str) -> Result<Option<UsageRow>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT sandbox_id, project, running_ms, paused_ms, cpu_ms, memory_gib_seconds,
                        executions, execution_wall_ms, execution_cpu_ms,
                        max_execution_peak_rss_bytes, agent_log_seq, updated_at_ms, hibernated_ms,
                        mirror_bytes, mirror_requests, egress_bytes_out, egress_bytes_in,
                        egress_refused
                 FROM usage WHERE sandbox_id = ?1",
                [sandbox_id],
                usage_row,
            )
            .optional()?)
    }

    pub fn put_usage(&self, u: &UsageRow) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO usage (sandbox_id, project, running_ms, paused_ms, cpu_ms,
                 memory_gib_seconds, executions, execution_wall_ms, execution_cpu_ms,
                 max_execution_peak_rss_bytes, agent_log_seq, updated_at_ms, hibernated_ms,
                 mirror_bytes, mirror_requests, egress_bytes_out, egress_bytes_in, egress_refused)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18)
             ON CONFLICT(sandbox_id) DO UPDATE SET
                 running_ms = excluded.running_ms, paused_ms = excluded.paused_ms,
                 cpu_ms = excluded.cpu_ms, memory_gib_seconds = excluded.memory_gib_seconds,
                 executions = excluded.executions, execution_wall_ms = excluded.execution_wall_ms,
                 execution_cpu_ms = excluded.execution_cpu_ms,
                 max_execution_peak_rss_bytes = excluded.max_execution_peak_rss_bytes,
                 agent_log_seq = excluded.agent_log_seq, updated_at_ms = excluded.updated_at_ms,
                 hibernated_ms = excluded.hibernated_ms,
                 mirror_bytes = excluded.mirror_bytes, mirror_requests = excluded.mirror_requests,
                 egress_bytes_out = excluded.egress_bytes_out,
                 egress_bytes_in = excluded.egress_bytes_in,
                 egress_refused = excluded.egress_refused",
            params![
                u.sandbox_id,
                u.project,
                u.running_ms as i64,
                u.paused_ms as i64,
                u.cpu_ms as i64,
                u.memory_gib_seconds,
                u.executions as i64,
                u.execution_wall_ms as i64,
                u.execution_cpu_ms as i64,
                u.max_execution_peak_rss_bytes as i64,
                u.agent_log_seq as i64,
                u.updated_at_ms as i64,
                u.hibernated_ms as i64,
                u.mirror_bytes as i64,
                u.mirror_requests as i64,
                u.egress_bytes_out as i64,
                u.egress_bytes_in as i64,
                u.egress_refused as i64,
            ],
        )?;
        Ok(())
    }

    /// Record finished runs of a sandbox (idempotent per `(sandbox, seq)`).
    pub fn add_executions(
        &self,
        sandbox_id: &str,
        project: &str,
        records: &[lizard_proto::ExecutionRecord],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut st = tx.prepare(
                "INSERT OR IGNORE INTO executions (sandbox_id, seq, project, context_id, language,
                     status, wall_ms, cpu_ms, peak_rss_bytes, finished_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for r in records {
                st.execute(params![
                    sandbox_id,
                    r.seq as i64,
                    project,
                    r.context_id.as_str(),
                    r.language.as_str(),
                    serde_json::to_value(r.status)?
                        .as_str()
                        .unwrap_or("unknown"),
                    r.wall_ms as i64,
                    r.cpu_ms as i64,
                    r.peak_rss_bytes as i64,
                    r.finished_at_ms as i64,
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Finished runs of `project` in `[from_ms, to_ms)`, optionally of one sandbox, oldest first.
    pub fn executions(
        &self,
        project: &str,
        sandbox_id: Option<&str>,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<lizard_proto::ExecutionRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(
            "SELECT sandbox_id, seq, context_id, language, status, wall_ms, cpu_ms,
                    peak_rss_bytes, finished_at_ms
             FROM executions
             WHERE project = ?1 AND (?2 IS NULL OR sandbox_id = ?2)
               AND finished_at_ms >= ?3 AND finished_at_ms < ?4
             ORDER BY finished_at_ms, sandbox_id, seq LIMIT ?5",
        )?;
        let rows = st.query_map(
            params![
                project,
                sandbox_id,
                from_ms as i64,
                to_ms as i64,
                limit as i64
            ],
            |r| {
                Ok(lizard_proto::ExecutionRow {
                    sandbox_id: r.get(0)?,
                    seq: r.get::<_, i64>(1)? as u64,
                    context_id: r.get(2)?,
                    language: r.get(3)?,
                    status: r.get(4)?,
                    wall_ms: r.get::<_, i64>(5)? as u64,
                    cpu_ms: r.get::<_, i64>(6)? as u64,
                    peak_rss_bytes: r.get::<_, i64>(7)? as u64,
                    finished_at_ms: r.get::<_, i64>(8)? as u64,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Usage rows of `project` (every project when `None`) for sandboxes that existed at some point
    /// in `[from_ms, to_ms)`.
    pub fn usage_rows(
        &self,
        project: Option<&str>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let conn = self.conn();
        let mut st = conn.prepare(
            "SELECT u.sandbox_id, u.project, u.running_ms, u.paused_ms, u.cpu_ms,
                    u.memory_gib_seconds, u.executions, u.execution_wall_ms, u.execution_cpu_ms,
                    u.max_execution_peak_rss_bytes, u.agent_log_seq, u.updated_at_ms,
                    u.hibernated_ms, u.mirror_bytes, u.mirror_requests, u.egress_bytes_out,
                    u.egress_bytes_in, u.egress_refused
             FROM usage u JOIN sandboxes s ON s.id = u.sandbox_id
             WHERE (?1 IS NULL OR u.project = ?1)
               AND s.created_at_ms < ?3 AND COALESCE(s.ended_at_ms, ?3) >= ?2
             ORDER BY s.created_at_ms, u.sandbox_id",
        )?;
        let rows = st.query_map(params![project, from_ms as i64, to_ms as i64], usage_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn usage_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UsageRow> {
    Ok(UsageRow {
        sandbox_id: r.get(0)?,
        project: r.get(1)?,
        running_ms: r.get::<_, i64>(2)? as u64,
        paused_ms: r.get::<_, i64>(3)? as u64,
        cpu_ms: r.get::<_, i64>(4)? as u64,
        memory_gib_seconds: r.get(5)?,
        executions: r.get::<_, i64>(6)? as u64,
        execution_wall_ms: r.get::<_, i64>(7)? as u64,
        execution_cpu_ms: r.get::<_, i64>(8)? as u64,
        max_execution_peak_rss_bytes: r.get::<_, i64>(9)? as u64,
        agent_log_seq: r.get::<_, i64>(10)? as u64,
        updated_at_ms: r.get::<_, i64>(11)? as u64,
        hibernated_ms: r.get::<_, i64>(12)? as u64,
        mirror_bytes: r.get::<_, i64>(13)? as u64,
        mirror_requests: r.get::<_, i64>(14)? as u64,
        egress_bytes_out: r.get::<_, i64>(15)? as u64,
        egress_bytes_in: r.get::<_, i64>(16)? as u64,
        egress_refused: r.get::<_, i64>(17)? as u64,
    })
}

/// SHA-256 of a key, hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHash(pub String);

impl KeyHash {
    pub fn of(key: &str) -> KeyHash {
        let d = <sha2::Sha256 as sha2::Digest>::digest(key.as_bytes());
        KeyHash(d.iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// What a clone is launched with: the source's settings and lower layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotSource {
    pub limits: lizard_proto::SandboxLimits,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default)]
    pub network: lizard_proto::NetworkRequest,
    #[serde(default)]
    pub on_timeout: lizard_proto::TimeoutAction,
    pub timeout_ms: u64,
    #[serde(default)]
    pub volumes: Vec<lizard_proto::SandboxVolume>,
    /// The template build (and its bases) the layer was made on: pinned while the snapshot lives.
    pub template_dir: std::path::PathBuf,
    #[serde(default)]
    pub template_bases: Vec<std::path::PathBuf>,
    /// First host id of the source's range: the image's files are owned from there.
    pub id_base: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("db")).unwrap();
        (d, s)
    }

    #[test]
    fn older_databases_are_migrated() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE sandboxes (id TEXT PRIMARY KEY, project TEXT NOT NULL,
                 template TEXT NOT NULL, state TEXT NOT NULL, created_at_ms INTEGER NOT NULL,
                 timeout_at_ms INTEGER NOT NULL, ended_at_ms INTEGER, metadata TEXT NOT NULL,
                 envs TEXT NOT NULL, runtime TEXT NOT NULL, limits TEXT NOT NULL);
                 INSERT INTO sandboxes VALUES ('old', 'p', 't', 'killed', 1, 2, 3, '{}', '{}', '{}', '{}');",
            )
            .unwrap();
        }
        let s = Store::open(&path).unwrap();
        let row = s.get_sandbox("old").unwrap().unwrap();
        assert_eq!(row.timeout_ms, 300000);
        assert_eq!(row.on_timeout, lizard_proto::TimeoutAction::Kill);
        assert!(row.volumes.is_empty());
        assert!(
            s.audit(None, 0, u64::MAX, 10).unwrap().is_empty(),
            "the audit table is added"
        );
    }

    fn ev(at_ms: u64, project: Option<&str>, action: &str) -> lizard_proto::AuditEvent {
        lizard_proto::AuditEvent {
            id: 0,
            at_ms,
            actor: "project".into(),
            project: project.map(str::to_string),
            key_prefix: Some("lz_12345".into()),
            action: action.into(),
            object: Some("sbx_1".into()),
            status: 201,
            client: "127.0.0.1:1".into(),
        }
    }

    #[test]
    fn audit_retention_by_age_and_count() {
        let (_d, s) = store();
        for at in [10, 20, 30, 40, 50] {
            s.add_audit(&ev(at, Some("a"), "sandbox.create")).unwrap();
        }
        let ages = |s: &Store| -> Vec<u64> {
            s.audit(None, 0, u64::MAX, 100)
                .unwrap()
                .iter()
                .map(|e| e.at_ms)
                .collect()
        };
        assert_eq!(s.prune_audit(25, None).unwrap(), 2);
        assert_eq!(ages(&s), vec![50, 40, 30]);
        assert_eq!(s.prune_audit(0, Some(2)).unwrap(), 1);
        assert_eq!(ages(&s), vec![50, 40], "the newest are kept");
        assert_eq!(s.prune_audit(0, Some(5)).unwrap(), 0);
        assert_eq!(s.prune_audit(0, Some(0)).unwrap(), 2);
        assert!(ages(&s).is_empty());
    }

    #[test]
    fn executions_retention_by_age_and_count() {
        let (_d, s) = store();
        let rec = |seq: u64, finished_at_ms: u64| lizard_proto::ExecutionRecord {
            seq,
            context_id: lizard_proto::ContextId("c".into()),
            language: lizard_proto::Language::Python,
            status: lizard_proto::ExecutionStatus::Ok,
            wall_ms: 1,
            cpu_ms: 1,
            peak_rss_bytes: 1,
            finished_at_ms,
        };
        s.add_executions("a", "p", &[rec(1, 10), rec(2, 20), rec(3, 30)])
            .unwrap();
        s.add_executions("b", "p", &[rec(1, 40), rec(2, 50)])
            .unwrap();
        let seen = |s: &Store| -> Vec<u64> {
            s.executions("p", None, 0, i64::MAX as u64, 100)
                .unwrap()
                .iter()
                .map(|r| r.finished_at_ms)
                .collect()
        };
        assert_eq!(s.prune_log(Log::Executions, 25, None).unwrap(), 2);
        assert_eq!(seen(&s), vec![30, 40, 50]);
        assert_eq!(s.prune_log(Log::Executions, 0, Some(2)).unwrap(), 1);
        assert_eq!(seen(&s), vec![40, 50], "the newest are kept");
        // Written after a prune: still counted from the newest.
        s.add_executions("b", "p", &[rec(3, 60)]).unwrap();
        assert_eq!(s.prune_log(Log::Executions, 0, Some(2)).unwrap(), 1);
        assert_eq!(seen(&s), vec![50, 60]);
        assert_eq!(s.prune_log(Log::Executions, 0, Some(0)).unwrap(), 2);
        assert!(seen(&s).is_empty());
        // The audit log is untouched by the executions' retention.
        s.add_audit(&ev(10, Some("a"), "sandbox.create")).unwrap();
        s.prune_log(Log::Executions, u64::MAX, Some(0)).unwrap();
        assert_eq!(s.audit(None, 0, u64::MAX, 10).unwrap().len(), 1);
    }

    #[test]
    fn audit_events_by_project_and_time() {
        let (_d, s) = store();
        let a = s.add_audit(&ev(10, Some("a"), "sandbox.create")).unwrap();
        let b = s.add_audit(&ev(20, Some("b"), "sandbox.kill")).unwrap();
        let c = s.add_audit(&ev(30, None, "auth.failed")).unwrap();
        assert!(a < b && b < c);
        let all = s.audit(None, 0, u64::MAX, 100).unwrap();
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), vec![c, b, a]);
        assert_eq!(
            all[2],
            lizard_proto::AuditEvent {
                id: a,
                ..ev(10, Some("a"), "sandbox.create")
            }
        );
        let only_a = s.audit(Some("a"), 0, u64::MAX, 100).unwrap();
        assert_eq!(only_a.len(), 1);
        assert_eq!(only_a[0].action, "sandbox.create");
        assert_eq!(
            s.audit(None, 15, 30, 100).unwrap().len(),
            1,
            "from inclusive, to exclusive"
        );
        assert_eq!(
            s.audit(None, 0, u64::MAX, 1).unwrap()[0].id,
            c,
            "newest first"
        );
    }

    #[test]
    fn volume_names_are_unique_per_project_until_deleted() {
        let (_d, s) = store();
        let v = |id: &str, project: &str| VolumeRow {
            id: id.into(),
            project: project.into(),
            name: "data".into(),
            size_limit_bytes: 1 << 30,
            created_at_ms: 1,
            ..Default::default()
        };
        s.insert_volume(&v("vol_a", "p")).unwrap();
        assert!(matches!(
            s.insert_volume(&v("vol_b", "p")),
            Err(StoreError::VolumeExists(_))
        ));
        s.insert_volume(&v("vol_c", "q")).unwrap();
        assert_eq!(s.find_volume("p", "data").unwrap().unwrap().id, "vol_a");
        assert_eq!(s.find_volume("p", "vol_a").unwrap().unwrap().id, "vol_a");
        assert!(s.find_volume("p", "vol_c").unwrap().is_none());
        s.mark_volume_deleted("vol_a", 5).unwrap();
        assert!(s.find_volume("p", "data").unwrap().is_none());
        s.insert_volume(&v("vol_b", "p")).unwrap();
        s.put_volume_usage("vol_b", 1.5, 10, 9).unwrap();
        let all = s.list_volumes(Some("p"), true).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(s.list_volumes(Some("p"), false).unwrap()[0].gib_hours, 1.5);
    }

    #[test]
    fn snapshot_rows_survive_reopen_and_keep_their_deletion() {
        let d = tempfile::tempdir().unwrap();
        let row = |id: &str, project: &str, sandbox: &str, at: u64| SnapshotRow {
            id: id.into(),
            project: project.into(),
            sandbox_id: sandbox.into(),
            template: "t".into(),
            created_at_ms: at,
            deleted_at_ms: None,
            size_bytes: 10,
            frozen_ms: Some(7),
            report: lizard_proto::HibernationReport {
                method: lizard_proto::HibernationMethod::PerLanguage,
                method_reason: "r".into(),
                contexts: vec![],
            },
            metadata: BTreeMap::new(),
            source: SnapshotSource {
                limits: lizard_proto::SandboxLimits::default(),
                envs: BTreeMap::new(),
                network: lizard_proto::NetworkRequest::default(),
                on_timeout: lizard_proto::TimeoutAction::Kill,
                timeout_ms: 1,
                volumes: vec![],
                template_dir: "/t".into(),
                template_bases: vec![],
                id_base: 165_536,
            },
        };
        {
            let s = Store::open(&d.path().join("db")).unwrap();
            s.insert_snapshot(&row("snap_a", "p", "sa", 1)).unwrap();
            s.insert_snapshot(&row("snap_b", "p", "sb", 2)).unwrap();
            s.insert_snapshot(&row("snap_c", "q", "sa", 3)).unwrap();
            s.mark_snapshot_deleted("snap_b", 9).unwrap();
        }
        let s = Store::open(&d.path().join("db")).unwrap();
        assert_eq!(
            s.get_snapshot("snap_a").unwrap().unwrap(),
            row("snap_a", "p", "sa", 1)
        );
        assert!(s.get_snapshot("snap_b").unwrap().is_none());
        let live: Vec<String> = s
            .list_snapshots(Some("p"), None, false)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(live, ["snap_a"]);
        let all = s.list_snapshots(Some("p"), None, true).unwrap();
        assert_eq!(all[1].deleted_at_ms, Some(9));
        assert_eq!(s.list_snapshots(None, Some("sa"), false).unwrap().len(), 2);
    }

    #[test]
    fn projects_and_keys() {
        let (_d, s) = store();
        s.create_project("a", false, true).unwrap();
        s.create_project("b", true, false).unwrap();
        assert!(!s.project_allows_egress("a").unwrap());
        assert!(s.project_allows_egress("b").unwrap());
        assert!(!s.project_allows_egress("nope").unwrap());
        assert!(s.project_allows_packages("a").unwrap());
        assert!(!s.project_allows_packages("b").unwrap());
        assert!(!s.project_allows_packages("nope").unwrap());
        s.ensure_project("c").unwrap();
        assert!(s.project_allows_packages("c").unwrap(), "on by default");
        assert!(s.update_project("a", None, Some(false)).unwrap());
        assert!(!s.project_allows_packages("a").unwrap());
        assert!(!s.project_allows_egress("a").unwrap(), "unchanged");
        assert!(s.update_project("a", Some(true), None).unwrap());
        assert!(s.project_allows_egress("a").unwrap());
        assert!(!s.project_allows_packages("a").unwrap(), "unchanged");
        assert!(!s.update_project("nope", Some(true), None).unwrap());
        assert!(matches!(
            s.create_project("a", true, true),
            Err(StoreError::ProjectExists(_))
        ));
        let h = KeyHash("h1".into());
        s.add_key(&h, "lz_ab", Some("a")).unwrap();
        assert_eq!(s.key_project(&h).unwrap(), Some(Some("a".into())));
        assert_eq!(s.key_project(&KeyHash("nope".into())).unwrap(), None);
        assert!(!s.has_admin_key().unwrap());
        s.add_key(&KeyHash("h2".into()), "lz_cd", None).unwrap();
        assert!(s.has_admin_key().unwrap());
    }

    #[test]
    fn sandbox_rows_and_usage_survive_reopen() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("db");
        {
            let s = Store::open(&path).unwrap();
            s.insert_sandbox(&SandboxRow {
                id: "sb1".into(),
                project: "p".into(),
                template: "t".into(),
                state: StoredState::Running,
                created_at_ms: 10,
                timeout_at_ms: 20,
                ended_at_ms: None,
                metadata: [("k".to_string(), "v".to_string())].into(),
                envs: BTreeMap::new(),
                runtime: serde_json::json!({"pid": 5}),
                limits: serde_json::json!({}),
                paused_remaining_ms: 0,
                on_timeout: lizard_proto::TimeoutAction::Kill,
                timeout_ms: 10,
                volumes: vec![lizard_proto::SandboxVolume {
                    volume_id: "vol_x".into(),
                    name: "x".into(),
                    mount_path: "/data".into(),
                    read_only: true,
                }],
                network: serde_json::json!({"egress": "all"}),
            })
            .unwrap();
            let mut u = s.get_usage("sb1").unwrap().unwrap();
            u.cpu_ms = 42;
            s.put_usage(&u).unwrap();
        }
        let s = Store::open(&path).unwrap();
        let row = s.get_sandbox("sb1").unwrap().unwrap();
        assert_eq!(row.metadata["k"], "v");
        assert_eq!(row.runtime["pid"], 5);
        assert_eq!(row.volumes[0].volume_id, "vol_x");
        assert_eq!(row.network["egress"], "all");
        assert_eq!(s.get_usage("sb1").unwrap().unwrap().cpu_ms, 42);
        assert_eq!(s.usage_rows(Some("p"), 0, 100).unwrap().len(), 1);
        assert_eq!(s.usage_rows(Some("p"), 0, 5).unwrap().len(), 0);
        s.set_state("sb1", StoredState::Killed, Some(30)).unwrap();
        assert!(s.list_sandboxes(Some("p"), false).unwrap().is_empty());
        assert_eq!(s.list_sandboxes(Some("p"), true).unwrap().len(), 1);
    }
}
