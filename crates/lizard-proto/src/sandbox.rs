//! The server's control-plane types: sandboxes, projects and usage.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /v1/sandboxes`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// The project that owns the sandbox; a project key's own project when absent.
    pub project: Option<String>,
    /// `code-interpreter-v1` when absent.
    pub template: Option<String>,
    /// Idle lifetime; the sandbox is killed when it passes (300000 when absent).
    pub timeout_ms: Option<u64>,
    /// Free-form labels, filterable in `GET /v1/sandboxes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Environment variables of every process in the sandbox.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Resource limits; server defaults for what is absent.
    pub limits: Option<LimitsRequest>,
    /// What happens when the timeout passes: `kill` (default), `pause` (kept in memory) or
    /// `hibernate` (checkpointed to disk, its memory freed).
    pub on_timeout: Option<TimeoutAction>,
    /// Volumes of the project to mount (fixed for the sandbox's life).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::VolumeMountRequest>,
    /// Network access; loopback only when absent. Egress needs a project with `allow_egress`.
    pub network: Option<NetworkRequest>,
    /// Start from this snapshot of the project (a clone): its template, limits, environment,
    /// network, volumes, files and kernels' state; only `timeout_ms`, `metadata` and `on_timeout`
    /// may be given with it. The answer's `restore` says what each context got back.
    pub snapshot_id: Option<String>,
}

/// The network of a sandbox: `{"egress": "none" | "all" | {"allow": [...], "deny": [...]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkRequest {
    #[serde(default)]
    pub egress: Egress,
    /// Headers the host adds to the sandbox's HTTP(S) requests to some hosts, with the project's
    /// secrets substituted (`${secret:NAME}`): the values never enter the sandbox. Each host must
    /// be allowed by `egress`. For HTTPS the host terminates TLS for these hosts only, with a
    /// certificate of the sandbox's own CA, which the sandbox trusts. At most 16 rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<InjectRequest>,
    /// Let anyone who can reach the server open the sandbox's own ports (a service started
    /// inside, not the agent) by host name, `<port>-<sandbox id>.<sandbox domain>`, without its
    /// access token: E2B's `allowPublicTraffic`. Off unless asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public_ports: bool,
    /// Resume the sandbox when a request reaches it while it is paused or hibernated (its ports,
    /// by path or host name; the agent's routes: execute, contexts, commands, files, pty; E2B's
    /// sandbox traffic), instead of answering that it is paused: E2B's `lifecycle.autoResume`.
    /// Off unless asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_resume: bool,
}

/// `PATCH /v1/sandboxes/{id}/network`: what is given replaces that part of the sandbox's network;
/// what is absent stays as it is.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateNetworkRequest {
    pub egress: Option<Egress>,
    pub inject: Option<Vec<InjectRequest>>,
    pub public_ports: Option<bool>,
    pub auto_resume: Option<bool>,
}

impl UpdateNetworkRequest {
    /// `current` with what this gives replaced.
    pub fn applied_to(&self, current: &NetworkRequest) -> NetworkRequest {
        NetworkRequest {
            egress: self
                .egress
                .clone()
                .unwrap_or_else(|| current.egress.clone()),
            inject: self
                .inject
                .clone()
                .unwrap_or_else(|| current.inject.clone()),
            public_ports: self.public_ports.unwrap_or(current.public_ports),
            auto_resume: self.auto_resume.unwrap_or(current.auto_resume),
        }
    }
}

/// One `network.inject` rule: requests to `host` (`api.example.com`, `*.example.com`, optionally
/// `:port`; without one, 443) get `headers` set (replacing any the sandbox sent with the same
/// name). A plain-HTTP port sends the secret in clear: name it only for a host on a network you
/// trust.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InjectRequest {
    pub host: String,
    /// Header name → value template, e.g. `{"Authorization": "Bearer ${secret:openai}"}`.
    pub headers: std::collections::BTreeMap<String, String>,
}

/// `POST /v1/projects/{project}/secrets`: set (create or replace) a secret. Never read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecretRequest {
    /// 1-64 letters, digits, `_` or `-`.
    pub name: String,
    /// 1-8192 bytes of visible ASCII or spaces (it is sent as, or in, an HTTP header value).
    pub value: String,
}

/// A secret as the API shows it: its name and times, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SecretInfo {
    pub project: String,
    pub name: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

/// Outbound (internet) access of a sandbox, enforced on the host: its TCP connections and DNS
/// queries are redirected to the host's relay and resolver, which decide by name (TLS SNI, HTTP
/// Host, the name a DNS answer was given for) and by address. Inside, a sandbox always has its own
/// loopback; it never reaches the host's loopback, its own addresses, private networks or the
/// link-local metadata range unless an address rule names them. Every sandbox also reaches the
/// package registries' mirror, whatever its egress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Egress {
    /// Loopback only (the default).
    #[default]
    None,
    /// Any public IPv4 destination, any name.
    All,
    /// Only what these rules allow.
    Rules(EgressRules),
}

/// Egress rules. Entries: `example.com` (that name), `*.example.com` (any name below it, not the
/// name itself), `api.example.com:443`, `1.2.3.4`, `1.2.3.4:8080`, `10.0.0.0/8` (optionally
/// `:port`), `*` (every public address and name; `*:443`). Deny beats allow; with no `allow` at
/// all (only `deny`), everything public is allowed but what `deny` names. At most 256 entries.
/// Names are enforced by name, when the sandbox connects, not by addresses resolved once.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressRules {
    /// Absent: `["*"]` if `deny` is given, nothing otherwise.
    pub allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl EgressRules {
    /// Allow these only.
    pub fn allow<S: Into<String>>(entries: impl IntoIterator<Item = S>) -> EgressRules {
        EgressRules {
            allow: Some(entries.into_iter().map(Into::into).collect()),
            deny: Vec::new(),
        }
    }

    /// The allow list in effect (`["*"]` when only `deny` was given).
    pub fn effective_allow(&self) -> Vec<String> {
        match &self.allow {
            Some(a) => a.clone(),
            None if !self.deny.is_empty() => vec!["*".into()],
            None => Vec::new(),
        }
    }
}

impl Egress {
    pub fn is_none(&self) -> bool {
        matches!(self, Egress::None)
    }
}

impl schemars::JsonSchema for Egress {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Egress".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let rules = g.subschema_for::<EgressRules>();
        schemars::json_schema!({
            "description": "\"none\" (default: loopback only), \"all\" (any public IPv4 address \
                and any name) or rules {\"allow\": [...], \"deny\": [...]}. Enforced on the host \
                by name and address at every connection and DNS query; change it on a running \
                sandbox with PATCH /v1/sandboxes/{id}/network.",
            "oneOf": [{"type": "string", "enum": ["none", "all"]}, rules],
            "default": "none",
        })
    }
}

impl Serialize for Egress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Egress::None => s.serialize_str("none"),
            Egress::All => s.serialize_str("all"),
            Egress::Rules(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Egress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Egress, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Egress;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#""none", "all" or {"allow": [...], "deny": [...]}"#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Egress, E> {
                match v {
                    "none" => Ok(Egress::None),
                    "all" => Ok(Egress::All),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Egress, E> {
                Ok(Egress::None)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Egress, A::Error> {
                EgressRules::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Egress::Rules)
            }
        }
        d.deserialize_any(V)
    }
}

/// What the server does with a sandbox whose timeout passed.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    /// Kill it (its writable layer is deleted).
    #[default]
    Kill,
    /// Pause it: its processes are frozen with their state, until resumed or killed.
    Pause,
    /// Hibernate it: its state is checkpointed to disk and its memory freed, until resumed or
    /// killed (E2B's pause with `keepMemory: false`).
    Hibernate,
}

/// Optional overrides of [`SandboxLimits`].
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    pub memory_mb: Option<u64>,
    pub cpu_millicores: Option<u64>,
    pub pids: Option<u64>,
    pub tmp_mb: Option<u64>,
    pub disk_mb: Option<u64>,
}

/// Resource limits of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxLimits {
    /// Memory of all processes (including `/tmp`, a tmpfs), in MiB.
    pub memory_mb: u64,
    /// CPU time per wall second, in thousandths of a core (1000 = one core).
    pub cpu_millicores: u64,
    /// Processes and threads.
    pub pids: u64,
    /// Size of the `/tmp` tmpfs, in MiB.
    pub tmp_mb: u64,
    /// Size of the writable layer (everything written outside `/tmp` and `/dev/shm`), in MiB.
    /// Sparse: only what is written uses host disk.
    #[serde(default = "default_disk_mb")]
    pub disk_mb: u64,
}

/// 1 GiB: sparse, but every sandbox's disk is a promise the host's free space must back
/// (`lizard serve --disk-overcommit`), so the default is what a code interpreter's scratch
/// needs, not the most it could.
fn default_disk_mb() -> u64 {
    1024
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_mb: 1024,
            cpu_millicores: 1000,
            pids: 512,
            tmp_mb: 256,
            disk_mb: default_disk_mb(),
        }
    }
}

/// A sandbox's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Running,
    Paused,
    /// Saved to disk: no processes, no memory; resume relaunches it and restores its contexts.
    Hibernated,
    Killed,
}

/// A sandbox as the API reports it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxInfo {
    pub sandbox_id: String,
    pub project: String,
    pub template: String,
    pub state: SandboxState,
    pub created_at_ms: u64,
    /// When the server kills the sandbox unless its timeout is extended.
    pub timeout_at_ms: u64,
    pub metadata: BTreeMap<String, String>,
    pub limits: SandboxLimits,
    pub on_timeout: TimeoutAction,
    /// Mounted volumes.
    #[serde(default)]
    pub volumes: Vec<crate::SandboxVolume>,
    /// In the answer of `POST /hibernate`: what each context saved and what it could not.
    pub hibernation: Option<crate::HibernationReport>,
    /// In the answer of a resume from hibernation: what each context got back and what was lost.
    pub restore: Option<crate::HibernationReport>,
    /// The network the sandbox was created with.
    #[serde(default)]
    pub network: NetworkRequest,
}

/// `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTimeoutRequest {
    /// New lifetime from now.
    pub timeout_ms: u64,
}

/// `POST /v1/projects` (admin keys only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectRequest {
    pub name: String,
    /// Whether the project's sandboxes may be created with internet egress (default false).
    #[serde(default)]
    pub allow_egress: bool,
    /// Whether the project's sandboxes reach the package registries' mirror (`pip`, `npm`
    /// without egress; default true).
    #[serde(default = "yes")]
    pub package_registries: bool,
}

fn yes() -> bool {
    true
}

/// `PATCH /v1/projects/{project}` (admin keys only): the settings given change, the others stay.
/// A change reaches the project's sandboxes at their next start (create, resume, clone).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProjectRequest {
    pub allow_egress: Option<bool>,
    pub package_registries: Option<bool>,
}

/// A project's settings (`GET`/`PATCH /v1/projects/{project}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProjectSettings {
    pub project: String,
    pub allow_egress: bool,
    pub package_registries: bool,
}

/// A new project and its first key (shown once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProjectCreated {
    pub project: String,
    pub api_key: String,
}

/// Usage totals (a project's, or one sandbox's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageTotals {
    pub sandboxes: u64,
    pub running_seconds: f64,
    pub paused_seconds: f64,
    /// Time spent hibernated (on disk, no processes), metered apart from paused time.
    #[serde(default)]
    pub hibernated_seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub executions: u64,
    pub execution_wall_seconds: f64,
    pub execution_cpu_seconds: f64,
    /// Volume storage (host disk use of the project's volumes, sampled), GiB-hours; a project's
    /// total since its volumes were created, not limited to the report's time range.
    #[serde(default)]
    pub volume_gib_hours: f64,
    /// Snapshot storage (each snapshot's size × its lifetime), GiB-hours; like volumes, a
    /// project's total since its snapshots were taken.
    #[serde(default)]
    pub snapshot_gib_hours: f64,
    /// Body bytes the package registries' mirror sent to the sandboxes, and their requests to it.
    #[serde(default)]
    pub mirror_bytes: u64,
    #[serde(default)]
    pub mirror_requests: u64,
    /// Bytes the sandboxes' egress carried out and in, and their connections and DNS queries
    /// refused.
    #[serde(default)]
    pub egress_bytes_out: u64,
    #[serde(default)]
    pub egress_bytes_in: u64,
    #[serde(default)]
    pub egress_refused: u64,
}

/// One sandbox's usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxUsage {
    pub sandbox_id: String,
    pub running_seconds: f64,
    pub paused_seconds: f64,
    /// Time spent hibernated (on disk, no processes), metered apart from paused time.
    #[serde(default)]
    pub hibernated_seconds: f64,
    pub cpu_seconds: f64,
    pub memory_gib_seconds: f64,
    pub executions: u64,
    pub execution_wall_seconds: f64,
    pub execution_cpu_seconds: f64,
    pub max_execution_peak_rss_bytes: u64,
    /// Body bytes the package registries' mirror sent to it, and its requests to the mirror.
    #[serde(default)]
    pub mirror_bytes: u64,
    #[serde(default)]
    pub mirror_requests: u64,
    /// Bytes its egress carried out of it and into it, and its connections and DNS queries
    /// refused.
    #[serde(default)]
    pub egress_bytes_out: u64,
    #[serde(default)]
    pub egress_bytes_in: u64,
    #[serde(default)]
    pub egress_refused: u64,
}

/// `GET /v1/projects/{project}/usage?from=&to=` (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProjectUsage {
    pub project: String,
    pub from_ms: u64,
    pub to_ms: u64,
    pub totals: UsageTotals,
    pub sandboxes: Vec<SandboxUsage>,
    /// Every volume the project has had (deleted ones included).
    #[serde(default)]
    pub volumes: Vec<crate::VolumeUsage>,
    /// Every snapshot the project has had (deleted ones included).
    #[serde(default)]
    pub snapshots: Vec<crate::SnapshotUsage>,
}

/// One finished run as the server stores it, for `GET /v1/projects/{project}/executions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionRow {
    pub sandbox_id: String,
    /// Position in the sandbox's execution log.
    pub seq: u64,
    pub context_id: String,
    pub language: String,
    /// `ok`, `error`, `interrupted`, `timeout` or `kernel_died`.
    pub status: String,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// Peak resident memory of the kernel during the run.
    pub peak_rss_bytes: u64,
    pub finished_at_ms: u64,
}

/// `GET /v1/sandboxes?project=&state=&metadata=`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxListQuery {
    /// Admin keys: only this project's sandboxes (a project key always sees its own only).
    pub project: Option<String>,
    /// Only sandboxes in this state: `running`, `paused` or `hibernated`.
    #[schemars(extend("enum" = ["running", "paused", "hibernated"]))]
    pub state: Option<String>,
    /// `k1=v1,k2=v2`: only sandboxes whose metadata has every pair.
    pub metadata: Option<String>,
}

/// `GET /v1/projects/{project}/usage?from=&to=`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Milliseconds since the epoch (inclusive); default 0.
    pub from: Option<u64>,
    /// Milliseconds since the epoch (exclusive); default now.
    pub to: Option<u64>,
}

/// `GET /v1/sandboxes/{id}/metrics?from=&to=`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    /// Milliseconds since the epoch (inclusive); default: the oldest sample kept.
    pub from: Option<u64>,
    /// Milliseconds since the epoch (inclusive); default: now.
    pub to: Option<u64>,
}

/// One sample of a sandbox's resource use (`GET /v1/sandboxes/{id}/metrics`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetricSample {
    /// When it was taken, milliseconds since the epoch.
    pub at_ms: u64,
    /// CPU used since the sample before, in percent of the sandbox's CPU limit (0-100).
    pub cpu_pct: f64,
    /// Memory charged to the sandbox (all its processes and its `/tmp`).
    pub memory_bytes: u64,
    /// Bytes in use on its writable layer, when it has one of its own.
    pub disk_used_bytes: Option<u64>,
}

/// `GET /v1/projects/{project}/executions?sandbox=&from=&to=&limit=`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionsQuery {
    /// Only this sandbox's runs.
    pub sandbox: Option<String>,
    /// Milliseconds since the epoch (inclusive); default 0.
    pub from: Option<u64>,
    /// Milliseconds since the epoch (exclusive); default now.
    pub to: Option<u64>,
    /// At most this many runs.
    pub limit: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_shapes() {
        let n: NetworkRequest = serde_json::from_str(r#"{"egress":"all"}"#).unwrap();
        assert_eq!(n.egress, Egress::All);
        let n: NetworkRequest = serde_json::from_str(r#"{"egress":"none"}"#).unwrap();
        assert!(n.egress.is_none());
        let n: NetworkRequest =
            serde_json::from_str(r#"{"egress":{"allow":["example.com","10.0.0.0/8"]}}"#).unwrap();
        assert_eq!(
            n.egress,
            Egress::Rules(EgressRules::allow(["example.com", "10.0.0.0/8"]))
        );
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"egress":{"allow":["example.com","10.0.0.0/8"]}}"#
        );
        let n: NetworkRequest =
            serde_json::from_str(r#"{"egress":{"deny":["evil.example"]}}"#).unwrap();
        let Egress::Rules(r) = &n.egress else {
            panic!("{n:?}")
        };
        assert_eq!(r.effective_allow(), vec!["*".to_string()]);
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"egress":{"deny":["evil.example"]}}"#
        );
        let e = serde_json::from_str::<NetworkRequest>(r#"{"egress":{"alow":[]}}"#).unwrap_err();
        assert!(e.to_string().contains("alow"), "{e}");
        let e = serde_json::from_str::<NetworkRequest>(r#"{"egress":3}"#).unwrap_err();
        assert!(e.to_string().contains(r#""none", "all""#), "{e}");
        assert!(serde_json::from_str::<NetworkRequest>(r#"{"egress":"some"}"#).is_err());
        assert!(serde_json::from_str::<NetworkRequest>(r#"{"egres":"all"}"#).is_err());
        let n: NetworkRequest = serde_json::from_str("{}").unwrap();
        assert!(n.egress.is_none());
    }
}

/// `GET /v1/sandboxes/{id}/network/log`: what the sandbox did through the package registries'
/// mirror and its egress since its processes last started (a create, resume, clone or server
/// restart begins anew), and the requests refused (the mirror's newest 64, then egress's newest
/// 256, each oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetworkLog {
    pub sandbox_id: String,
    pub mirror: MirrorTraffic,
    /// Its egress (connections relayed by name and address); zero without egress.
    #[serde(default)]
    pub egress: EgressTraffic,
    pub refused: Vec<RefusedRequest>,
}

/// A sandbox's traffic through its egress relay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EgressTraffic {
    /// Connections relayed (upstream reached).
    pub connections: u64,
    /// Bytes from the sandbox to upstreams.
    pub bytes_out: u64,
    /// Bytes from upstreams to the sandbox.
    pub bytes_in: u64,
    /// Connections and DNS queries refused.
    pub refused: u64,
}

/// A sandbox's traffic through the package registries' mirror.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MirrorTraffic {
    /// Every request, refused ones included.
    pub requests: u64,
    /// Downloads served from the host's cache.
    pub cache_hits: u64,
    /// Downloads fetched from a registry.
    pub cache_misses: u64,
    /// Requests refused (another destination, registries turned off).
    pub refused: u64,
    /// Body bytes fetched from registries for it.
    pub upstream_bytes: u64,
    /// Body bytes sent to it.
    pub served_bytes: u64,
    /// Connections closed at once: it had its budget open.
    pub rejected_connections: u64,
}

/// One refused request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefusedRequest {
    /// Milliseconds since the epoch.
    pub at_ms: u64,
    pub method: String,
    /// `host:port` or the request target, as the sandbox sent it (at most 256 bytes).
    pub destination: String,
    /// Why, for egress refusals (`method` `connect` or `dns`).
    pub reason: Option<String>,
}
