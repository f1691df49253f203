//! E2B's control-plane bodies (`POST /v2/sandboxes`, `/connect`, `GET /sandboxes/{id}`, lists,
//! timeouts) and its error body. Field names are E2B's (`templateID`, `sandboxID`, …). Request
//! fields Lizard does not implement (`mcp`, `volumeMounts`, …) are accepted and ignored
//! only where ignoring them is harmless; see `docs/E2B.md`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `POST /sandboxes` and `POST /v2/sandboxes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds until the sandbox times out (E2B's default 15 s; the SDKs send 300).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Pause instead of kill on timeout.
    #[serde(default, rename = "autoPause")]
    pub auto_pause: Option<bool>,
    /// With `autoPause`: `false` pauses without keeping the memory (`keepMemory: false`), which
    /// Lizard does by hibernating (the memory goes to disk).
    #[serde(default, rename = "autoPauseMemory")]
    pub auto_pause_memory: Option<bool>,
    /// Resume a paused sandbox when traffic reaches it: Lizard's `network.auto_resume`.
    #[serde(default, rename = "autoResume")]
    pub auto_resume: Option<AutoResume>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default, rename = "envVars")]
    pub env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub allow_internet_access: Option<bool>,
    /// E2B's network: egress (`allowOut`, `denyOut`), header rules (`rules`), public ports.
    #[serde(default)]
    pub network: Option<NetworkConfig>,
    /// E2B's MCP gateway configuration: not offered (a `400` when given).
    #[serde(default)]
    pub mcp: Option<serde_json::Value>,
    /// E2B's workload identity (`iam.tokens`): not offered (a `400` when it names a token).
    #[serde(default)]
    pub iam: Option<Iam>,
    /// Volumes of the project to mount: `[{name, path}]`.
    #[serde(default, rename = "volumeMounts")]
    pub volume_mounts: Option<Vec<VolumeMount>>,
}

/// `iam` of a create: only whether it names tokens matters (a `400`: not offered).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Iam {
    #[serde(default)]
    pub tokens: Option<BTreeMap<String, serde_json::Value>>,
}

/// One of `volumeMounts`: a volume of the project by name, at `path` in the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    pub name: String,
    pub path: String,
}

impl NewSandbox {
    /// What E2B's create may ask that Lizard does not offer, as the message of a `400` (never
    /// silently ignored).
    pub fn refused(&self) -> Option<String> {
        if self.mcp.as_ref().is_some_and(|m| !m.is_null()) {
            return Some(
                "the MCP gateway (mcp) is not offered by this server: use Lizard's own MCP server"
                    .into(),
            );
        }
        if self
            .iam
            .as_ref()
            .and_then(|i| i.tokens.as_ref())
            .is_some_and(|t| !t.is_empty())
        {
            return Some("workload identity (iam.tokens) is not offered by this server".into());
        }
        self.network.as_ref().and_then(NetworkConfig::refused)
    }
}

/// E2B's `SandboxNetworkConfig`: CIDRs, addresses (and, in newer SDKs, domains) allowed and denied
/// outbound; an allowed entry beats a denied one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_out: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_out: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_public_traffic: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_request_host: Option<String>,
    /// Headers set on the sandbox's HTTPS requests to a host (`{"api.example.com": [{"transform":
    /// {"headers": {...}}}]}`): Lizard's `network.inject`, the values taken literally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<BTreeMap<String, Vec<NetworkRule>>>,
    /// DNS servers the sandbox may reach for names in `allowOut`: nothing to do here (the
    /// sandbox's names are resolved on the host, by its own egress relay); accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_servers: Option<Vec<String>>,
    /// A SOCKS5 proxy for the sandbox's egress: not offered (a `400`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<serde_json::Value>,
    /// Ports that serve HTTPS: not offered (a `400`; the ports proxy speaks HTTP to them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_ports: Option<Vec<u16>>,
    /// `updateNetwork`'s `allowInternetAccess` (spelt as at create).
    #[serde(
        default,
        rename = "allow_internet_access",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_internet_access: Option<bool>,
}

/// A header value of E2B's rules as a Lizard inject template: E2B's secret placeholder
/// `${e2b.secrets.NAME}` (`Secret.fill(NAME)`) becomes Lizard's `${secret:NAME}` (the project's
/// secret, which E2B's `/secrets` API sets), and every other `$` is taken literally (`$$`).
pub fn inject_template(value: &str) -> String {
    const OPEN: &str = "${e2b.secrets.";
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match tail
            .strip_prefix(OPEN)
            .and_then(|t| t.split_once('}'))
            .filter(|(name, _)| !name.is_empty())
        {
            Some((name, after)) => {
                out.push_str("${secret:");
                out.push_str(name);
                out.push('}');
                rest = after;
            }
            None => {
                out.push_str("$$");
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// One rule of [`NetworkConfig::rules`].
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkRule {
    pub transform: Option<NetworkTransform>,
}

/// What a [`NetworkRule`] does: headers set (replacing the sandbox's own of the same name).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkTransform {
    pub headers: Option<BTreeMap<String, String>>,
}

impl NetworkConfig {
    /// What of it Lizard does not offer, as the message of a `400`.
    pub fn refused(&self) -> Option<String> {
        if self.egress_proxy.as_ref().is_some_and(|p| !p.is_null()) {
            return Some(
                "an egress proxy (network.egressProxy) is not offered by this server".into(),
            );
        }
        if self.https_ports.as_ref().is_some_and(|p| !p.is_empty()) {
            return Some(
                "HTTPS ports (network.httpsPorts) are not offered by this server: its ports proxy \
                 speaks plain HTTP to the sandbox's services"
                    .into(),
            );
        }
        if self
            .mask_request_host
            .as_ref()
            .is_some_and(|m| !m.is_empty())
        {
            return Some("network.maskRequestHost is not offered by this server".into());
        }
        None
    }

    /// `rules` as Lizard's `network.inject`: per host, the headers of its rules in order (a later
    /// one wins), each value translated by [`inject_template`]. `None`: no `rules` given.
    pub fn inject(&self) -> Option<Vec<crate::InjectRequest>> {
        let rules = self.rules.as_ref()?;
        Some(
            rules
                .iter()
                .filter_map(|(host, list)| {
                    let mut headers = BTreeMap::new();
                    for h in list
                        .iter()
                        .filter_map(|r| r.transform.as_ref()?.headers.as_ref())
                    {
                        for (k, v) in h {
                            headers.insert(k.clone(), inject_template(v));
                        }
                    }
                    (!headers.is_empty()).then(|| crate::InjectRequest {
                        host: host.to_ascii_lowercase(),
                        headers,
                    })
                })
                .collect(),
        )
    }

    /// E2B's own checks of the lists: `denyOut` holds addresses and CIDRs only, and a host name
    /// in `allowOut` needs `denyOut` to deny everything (`0.0.0.0/0`).
    pub fn check(&self) -> Result<(), String> {
        let is_name = |e: &str| {
            let host = e.rsplit_once(':').map_or(e, |(h, _)| h);
            let ip = host.split('/').next().unwrap_or(host);
            ip.parse::<std::net::Ipv4Addr>().is_err()
        };
        let deny = self.deny_out.as_deref().unwrap_or_default();
        if let Some(d) = deny.iter().find(|d| is_name(d)) {
            return Err(format!(
                "denyOut takes IP addresses and CIDRs only, not {d:?}"
            ));
        }
        let deny_all = deny.iter().any(|d| d.trim() == "0.0.0.0/0");
        if let Some(a) = self
            .allow_out
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|a| is_name(a))
        {
            if !deny_all {
                return Err(format!(
                    "allowOut host name {a:?} needs denyOut to deny all traffic (0.0.0.0/0)"
                ));
            }
        }
        Ok(())
    }

    /// Lizard's rules for these (deny beats allow there, allow beats deny here): with a deny of
    /// everything (`0.0.0.0/0`, `*`), only `allowOut`; otherwise everything public but `denyOut`
    /// (an `allowOut` entry then adds nothing: it was allowed already), so a `denyOut` entry
    /// that an `allowOut` entry overlaps denies it here. `None`: no rule given.
    pub fn egress(&self) -> Option<crate::Egress> {
        let allow = self.allow_out.clone().unwrap_or_default();
        let deny = self.deny_out.clone().unwrap_or_default();
        if allow.is_empty() && deny.is_empty() {
            return None;
        }
        let everything = |e: &String| matches!(e.trim(), "0.0.0.0/0" | "*");
        let rules = if deny.iter().any(everything) {
            crate::EgressRules {
                allow: Some(allow),
                deny: Vec::new(),
            }
        } else {
            crate::EgressRules {
                allow: Some(vec!["*".into()]),
                deny,
            }
        };
        Some(crate::Egress::Rules(rules))
    }
}

/// `POST /v2/sandboxes/{id}/connect` (and the older `/resume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectSandbox {
    #[serde(default)]
    pub timeout: Option<u64>,
    /// `false` (`connect(on_resume="fresh")`): resume a paused sandbox from its disk only, its
    /// memory dropped. Not offered: a `400` (a paused sandbox resumes with its memory).
    #[serde(default)]
    pub memory: Option<bool>,
}

/// `POST /sandboxes/{id}/timeout`: seconds from now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeoutRequest {
    pub timeout: u64,
}

/// `POST /sandboxes/{id}/refreshes`: extend by seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RefreshRequest {
    #[serde(default)]
    pub duration: Option<u64>,
}

/// `autoResume` of a create.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoResume {
    #[serde(default)]
    pub enabled: bool,
}

/// `POST /sandboxes/{id}/pause` (E2B's `pause({ keepMemory })`; an empty body keeps it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRequest {
    /// `false`: pause without keeping the memory, which Lizard does by hibernating.
    #[serde(default)]
    pub memory: Option<bool>,
    /// Refuse (`503`) rather than pause a sandbox whose agent does not answer.
    #[serde(default, rename = "requireHealthyGuest")]
    pub require_healthy_guest: Option<bool>,
}

/// The answer to create and connect.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    #[serde(rename = "envdVersion")]
    pub envd_version: String,
    /// Sent back as `X-Access-Token` on envd calls and `/execute`.
    #[serde(rename = "envdAccessToken")]
    pub envd_access_token: String,
    /// Sent back as `E2B-Traffic-Access-Token` on every code-interpreter call.
    #[serde(rename = "trafficAccessToken")]
    pub traffic_access_token: String,
    /// The domain of the sandbox's host names (`getHost(port)` = `<port>-<id>.<domain>`).
    pub domain: Option<String>,
}

/// `running` or `paused` (a hibernated Lizard sandbox is `paused` to E2B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Running,
    Paused,
}

/// `GET /sandboxes/{id}` and the items of `GET /v2/sandboxes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxDetail {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// RFC 3339.
    #[serde(rename = "startedAt")]
    pub started_at: String,
    /// When the sandbox times out (RFC 3339).
    #[serde(rename = "endAt")]
    pub end_at: String,
    #[serde(rename = "envdVersion")]
    pub envd_version: String,
    #[serde(rename = "cpuCount")]
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub state: State,
    pub metadata: BTreeMap<String, String>,
    #[serde(
        default,
        rename = "envdAccessToken",
        skip_serializing_if = "Option::is_none"
    )]
    pub envd_access_token: Option<String>,
    pub lifecycle: Lifecycle,
    /// See [`Sandbox::domain`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// What happens at the timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    #[serde(rename = "autoResume")]
    pub auto_resume: bool,
    /// `kill` or `pause`.
    #[serde(rename = "onTimeout")]
    pub on_timeout: String,
}

/// The query of `GET /sandboxes/{id}/metrics`: Unix seconds, both ends inclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    #[serde(default)]
    pub start: Option<u64>,
    #[serde(default)]
    pub end: Option<u64>,
}

/// One sample of `GET /sandboxes/{id}/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    /// RFC 3339.
    pub timestamp: String,
    pub timestamp_unix: u64,
    pub cpu_count: u64,
    /// CPU used since the previous sample, as a percentage of `cpu_count` cores.
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

/// `POST /sandboxes/{id}/snapshots` (`Sandbox.create_snapshot` / `sandbox.createSnapshot`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// E2B's snapshot template name: kept as the snapshot's label (`names`), not resolvable as
    /// a template (a sandbox starts from the `snapshotID`).
    pub name: Option<String>,
    /// `false` asks for a filesystem-only snapshot. Lizard's snapshots always keep the memory
    /// state the host can capture (see `docs/E2B.md`).
    pub memory: Option<bool>,
}

/// E2B's `SnapshotInfo`: the answer to a snapshot and the items of `GET /snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// What `Sandbox.create(<snapshotID>)` takes as its template (Lizard's `snap_…` id).
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// The snapshot's names: its `name` when it was given one, else its id.
    pub names: Vec<String>,
}

/// The query of `GET /snapshots` (E2B's parameters; unknown ones are ignored, as E2B does).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotQuery {
    #[serde(default, rename = "sandboxID")]
    pub sandbox_id: Option<String>,
    /// Only the snapshot with this name or id.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    /// Accepted; Lizard answers one page with everything (no `X-Next-Token`).
    #[serde(default, rename = "nextToken")]
    pub next_token: Option<String>,
}

/// The most forks one `POST /sandboxes/{id}/fork` makes (E2B's bound).
pub const MAX_FORK_COUNT: u32 = 20;

/// `POST /sandboxes/{id}/fork` (`sandbox.fork({count})`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRequest {
    /// Seconds the forks live (the source's timeout when absent).
    pub timeout: Option<u64>,
    /// 1 to [`MAX_FORK_COUNT`] (1 when absent).
    pub count: Option<u32>,
}

/// One entry of the fork answer: exactly one of `sandbox` and `error`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkResult {
    pub sandbox: Option<Sandbox>,
    pub error: Option<Error>,
}

/// E2B's error body. `code` is the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    pub code: u16,
    pub message: String,
}

/// `POST /volumes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewVolume {
    pub name: String,
}

/// A volume in `GET /volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntry {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
}

/// A volume with the token of E2B's volume content API (`POST /volumes`, `GET /volumes/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAndToken {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
    pub token: String,
}

/// `POST /secrets`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSecret {
    pub name: String,
    pub value: String,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `POST /secrets/{id}`: a new value, and new metadata when given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretUpdate {
    pub value: String,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A secret as E2B's API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    #[serde(rename = "secretID")]
    pub secret_id: String,
    pub name: String,
    pub current_version: u64,
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// `?limit=&nextToken=` of a paged list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub next_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rules_become_inject_templates() {
        assert_eq!(
            inject_template("Bearer ${e2b.secrets.openai-key}"),
            "Bearer ${secret:openai-key}"
        );
        assert_eq!(inject_template("a$b ${x} $"), "a$$b $${x} $$");
        assert_eq!(inject_template("${e2b.secrets.}"), "$${e2b.secrets.}");
        assert_eq!(inject_template("${e2b.secrets.k"), "$${e2b.secrets.k");
        let n: NetworkConfig = serde_json::from_str(
            r#"{"rules":{"API.example.com":[{"transform":{"headers":{"A":"1","B":"x$"}}},
                {"transform":{"headers":{"A":"2"}}},{}],"empty.example.com":[{}]}}"#,
        )
        .unwrap();
        let inject = n.inject().unwrap();
        assert_eq!(inject.len(), 1);
        assert_eq!(inject[0].host, "api.example.com");
        assert_eq!(
            inject[0].headers,
            [
                ("A".to_string(), "2".to_string()),
                ("B".into(), "x$$".into())
            ]
            .into()
        );
        assert_eq!(NetworkConfig::default().inject(), None);
    }

    #[test]
    fn what_is_not_offered_is_refused_not_ignored() {
        let refused = |j: &str| serde_json::from_str::<NewSandbox>(j).unwrap().refused();
        assert_eq!(refused(r#"{"templateID":"base"}"#), None);
        assert_eq!(
            refused(r#"{"templateID":"base","mcp":null,"iam":{"tokens":{}}}"#),
            None
        );
        for j in [
            r#"{"templateID":"base","mcp":{"github":{}}}"#,
            r#"{"templateID":"base","iam":{"tokens":{"t":{"audience":"a","tokenType":"jwt"}}}}"#,
            r#"{"templateID":"base","network":{"egressProxy":{"address":"p:1080"}}}"#,
            r#"{"templateID":"base","network":{"httpsPorts":[8443]}}"#,
            r#"{"templateID":"base","network":{"maskRequestHost":"localhost:${PORT}"}}"#,
        ] {
            assert!(refused(j).is_some(), "{j}");
        }
        let n: NewSandbox = serde_json::from_str(
            r#"{"templateID":"base","volumeMounts":[{"name":"data","path":"/data"}],
                "network":{"dnsServers":["8.8.8.8"]}}"#,
        )
        .unwrap();
        assert_eq!(n.refused(), None);
        assert_eq!(n.volume_mounts.unwrap()[0].path, "/data");
    }

    #[test]
    fn e2b_network_rules_map_onto_lizards() {
        let n: NetworkConfig =
            serde_json::from_str(r#"{"allowOut":["1.1.1.1","api.example.com"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false}"#)
                .unwrap();
        assert_eq!(
            n.egress(),
            Some(crate::Egress::Rules(crate::EgressRules::allow([
                "1.1.1.1",
                "api.example.com"
            ])))
        );
        let n: NetworkConfig = serde_json::from_str(r#"{"denyOut":["8.8.8.8"]}"#).unwrap();
        assert_eq!(
            n.egress(),
            Some(crate::Egress::Rules(crate::EgressRules {
                allow: Some(vec!["*".into()]),
                deny: vec!["8.8.8.8".into()]
            }))
        );
        assert_eq!(NetworkConfig::default().egress(), None);
        // E2B's checks.
        let cfg = |a: &[&str], d: &[&str]| NetworkConfig {
            allow_out: Some(a.iter().map(|s| s.to_string()).collect()),
            deny_out: Some(d.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        for (a, d) in [
            (&[][..], &["example.com"][..]),
            (&[], &["0.0.0.0/0", "example.com"]),
            (&["google.com"], &[]),
            (&["*.example.com"], &["10.0.0.0/8"]),
        ] {
            assert!(cfg(a, d).check().is_err(), "{a:?} {d:?}");
        }
        for (a, d) in [
            (&[][..], &[][..]),
            (&["8.8.8.8"], &[]),
            (&["8.8.8.8:443"], &["10.0.0.0/8"]),
            (&["google.com", "1.1.1.1"], &["0.0.0.0/0"]),
            (&["*.example.com"], &["0.0.0.0/0"]),
        ] {
            assert!(cfg(a, d).check().is_ok(), "{a:?} {d:?}");
        }
    }

    #[test]
    fn sdk_create_bodies_parse() {
        let js: NewSandbox =
            serde_json::from_str(r#"{"templateID":"code-interpreter-v1","timeout":120}"#).unwrap();
        assert_eq!(js.timeout, Some(120));
        let py: NewSandbox = serde_json::from_str(
            r#"{"templateID":"code-interpreter-v1","timeout":120,"metadata":{},"envVars":{},"secure":true,"mcp":null}"#,
        )
        .unwrap();
        assert_eq!(py.env_vars, Some(BTreeMap::new()));
        let c: ConnectSandbox = serde_json::from_str("{}").unwrap();
        assert_eq!(c.timeout, None);
    }

    #[test]
    fn sdk_snapshot_and_fork_bodies() {
        // What E2B's SDKs send (Python 2.63 always sends `memory`; JS 2.51 an empty body).
        let s: SnapshotRequest = serde_json::from_str(r#"{"name":"n","memory":true}"#).unwrap();
        assert_eq!(s.name.as_deref(), Some("n"));
        let s: SnapshotRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(s, SnapshotRequest::default());
        let f: ForkRequest = serde_json::from_str(r#"{"timeout":60,"count":2}"#).unwrap();
        assert_eq!((f.timeout, f.count), (Some(60), Some(2)));
        let info = SnapshotInfo {
            snapshot_id: "snap_x".into(),
            names: vec!["snap_x".into()],
        };
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["snapshotID"], "snap_x");
        let r = ForkResult {
            sandbox: None,
            error: Some(Error {
                code: 503,
                message: "m".into(),
            }),
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"error":{"code":503,"message":"m"}}"#
        );
        let q: SnapshotQuery =
            serde_json::from_value(serde_json::json!({"sandboxID": "a", "limit": 5})).unwrap();
        assert_eq!(q.sandbox_id.as_deref(), Some("a"));
    }
}
