//! The client commands of the `lizard` binary: `sandbox`, `run`, `context`, `usage`. They talk to a
//! running server through `lizard-client` (`--api-url`/`LIZARD_API_URL`, `--api-key`/`LIZARD_API_KEY`,
//! else the admin key file of the local data dir). Output is a table or one line for humans, or JSON
//! with `--json`.

use crate::table::Table;
use anyhow::{bail, Context as _, Result};
use futures_util::StreamExt;
use lizard_client::{Client, ListSandboxes};
use lizard_proto::{
    ContextLimits, CreateContextRequest, CreateSandboxRequest, ExecuteRequest, ExecutionEvent,
    ExecutionStatus, Language, LimitsRequest,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Conn {
    /// Server URL.
    #[arg(long, env = "LIZARD_API_URL", default_value = lizard_client::DEFAULT_API_URL, global = true)]
    api_url: String,
    /// API key (default: the admin key in the local data dir, if readable).
    #[arg(long, env = "LIZARD_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
    /// Data dir whose admin key is used when no key is given.
    #[arg(long, env = "LIZARD_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
}

impl Conn {
    /// The data dir named on the command line (or by `LIZARD_DATA_DIR`).
    pub fn data_dir(&self) -> Option<PathBuf> {
        self.data_dir.clone()
    }

    fn client(&self) -> Result<Client> {
        Ok(Client::new(&self.api_url, &self.key()?)?)
    }

    /// The server's URL.
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The API key: `--api-key`/`LIZARD_API_KEY`, else the local data dir's admin key.
    pub fn key(&self) -> Result<String> {
        Ok(match &self.api_key {
            Some(k) => k.clone(),
            None => {
                let dir = crate::data_dir(self.data_dir.clone())?;
                let path = dir.join("admin-key");
                std::fs::read_to_string(&path)
                    .map(|s| s.trim().to_string())
                    .with_context(|| {
                        format!(
                            "no API key: set LIZARD_API_KEY or pass --api-key (no admin key at {})",
                            path.display()
                        )
                    })?
            }
        })
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox and print its id.
    Create {
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        template: Option<String>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Metadata label (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        /// Environment variable of every process in the sandbox (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        #[arg(long)]
        memory_mb: Option<u64>,
        #[arg(long)]
        cpu_millicores: Option<u64>,
        /// Size of the writable layer in MiB.
        #[arg(long)]
        disk_mb: Option<u64>,
        /// Internet egress for every public destination (the project needs `--allow-egress`).
        #[arg(long, conflicts_with_all = ["allow", "deny", "egress_closed"])]
        egress_all: bool,
        /// Egress allowed to this destination (repeatable): `example.com`, `*.example.com`,
        /// `api.example.com:443`, `1.2.3.4`, `1.2.3.4:8080`, `10.0.0.0/8[:port]`, `*`, `*:443`.
        /// Names are enforced by name at each connection.
        #[arg(long, value_name = "DEST")]
        allow: Vec<String>,
        /// Egress refused to this destination even if `--allow` names it (repeatable; same forms).
        /// Without `--allow`: everything public but these.
        #[arg(long, value_name = "DEST")]
        deny: Vec<String>,
        /// Egress set up but closed (`{"allow": []}`), so `lizard sandbox network` can open it
        /// later (a sandbox created without egress cannot be given any).
        #[arg(long, conflicts_with_all = ["allow", "deny"])]
        egress_closed: bool,
        /// Add a header to the sandbox's requests to HOST, with the project's secrets substituted
        /// (`${secret:NAME}`; `$$` is a `$`): `'api.example.com=Authorization: Bearer
        /// ${secret:example}'` (repeatable; several headers for one host merge). HOST is a name,
        /// `*.name`, optionally `:port` (443 without one); it must be allowed by the egress. The
        /// value never enters the sandbox: the host adds it on the way out (for HTTPS with a
        /// per-sandbox CA the sandbox trusts). Quote it so that the shell leaves `$` alone.
        #[arg(long = "inject", value_name = "HOST=HEADER: TEMPLATE")]
        inject: Vec<String>,
        /// Pause instead of kill when the timeout passes.
        #[arg(long)]
        pause_on_timeout: bool,
        /// Mount a volume of the project: NAME, NAME:/PATH or NAME:/PATH:ro (repeatable; the
        /// default path is /home/user/NAME).
        #[arg(long = "volume", value_name = "NAME[:/PATH[:ro]]")]
        volumes: Vec<String>,
        /// Start from this snapshot (a clone: its template, limits, env, network, volumes, files
        /// and kernels' state); prints what each context got back.
        #[arg(long, value_name = "SNAPSHOT_ID")]
        snapshot: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Fork a running sandbox: a new one with the same kernels' state and files; prints its id.
    Fork {
        id: String,
        #[arg(long)]
        timeout_ms: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// List sandboxes.
    List {
        #[arg(long)]
        project: Option<String>,
        /// running, paused or hibernated
        #[arg(long)]
        state: Option<String>,
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one sandbox.
    Info {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Pause a sandbox (its processes are frozen, its state kept).
    Pause { id: String },
    /// Resume a paused or hibernated sandbox (a hibernated one prints what was restored and lost).
    Resume {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Hibernate a sandbox: its contexts' state is saved to disk and its processes stopped, so it
    /// holds no memory and survives a server restart; `resume` brings it back.
    Hibernate {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Kill a sandbox.
    Kill { id: String },
    /// Set a sandbox's timeout to MS milliseconds from now.
    Timeout { id: String, ms: u64 },
    /// Print the URL of a service listening on PORT inside the sandbox (send the API key as a
    /// bearer token with each request).
    Host { id: String, port: u16 },
    /// Show a sandbox's egress, or replace its rules, live (the next connection and DNS query
    /// follow them). Only a sandbox created with egress can be changed (`create --egress-closed`
    /// makes one that starts closed).
    Network {
        id: String,
        /// Allow this destination (repeatable; the forms of `create --allow`).
        #[arg(long, value_name = "DEST", conflicts_with_all = ["all", "none"])]
        allow: Vec<String>,
        /// Refuse this destination even if allowed (repeatable). Without `--allow`: everything
        /// public but these.
        #[arg(long, value_name = "DEST", conflicts_with_all = ["all", "none"])]
        deny: Vec<String>,
        /// Every public destination.
        #[arg(long, conflicts_with = "none")]
        all: bool,
        /// Nothing (kept as `{"allow": []}`).
        #[arg(long)]
        none: bool,
        /// Replace the header injection rules (repeatable; the form of `create --inject`).
        /// Without it (and without `--no-inject`) a rule change keeps the current ones.
        #[arg(
            long = "inject",
            value_name = "HOST=HEADER: TEMPLATE",
            conflicts_with = "no_inject"
        )]
        inject: Vec<String>,
        /// Drop every header injection rule.
        #[arg(long)]
        no_inject: bool,
        #[arg(long)]
        json: bool,
    },
    /// What a sandbox did through the package registries' mirror and its egress, and the
    /// requests and connections refused (with why).
    NetworkLog {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

/// `--all`, `--none`, `--allow`/`--deny` → an egress (`None` when nothing was given).
fn egress_arg(
    all: bool,
    none: bool,
    allow: Vec<String>,
    deny: Vec<String>,
) -> Option<lizard_proto::Egress> {
    if all {
        Some(lizard_proto::Egress::All)
    } else if none {
        Some(lizard_proto::Egress::Rules(
            lizard_proto::EgressRules::allow(Vec::<String>::new()),
        ))
    } else if allow.is_empty() && deny.is_empty() {
        None
    } else {
        Some(lizard_proto::Egress::Rules(lizard_proto::EgressRules {
            allow: (!allow.is_empty()).then_some(allow),
            deny,
        }))
    }
}

/// `--inject HOST=HEADER: TEMPLATE` (repeatable) → `network.inject`, one rule per host (in the
/// order first named), its headers merged.
fn inject_arg(items: &[String]) -> Result<Vec<lizard_proto::InjectRequest>> {
    let mut out: Vec<lizard_proto::InjectRequest> = Vec::new();
    for item in items {
        let parsed = item.split_once('=').and_then(|(host, header)| {
            let (name, value) = header.split_once(':')?;
            let (host, name) = (host.trim(), name.trim());
            (!host.is_empty() && !name.is_empty()).then(|| (host, name, value.trim_start()))
        });
        let Some((host, name, value)) = parsed else {
            bail!("--inject {item:?}: expected HOST=HEADER: TEMPLATE, e.g. 'api.example.com=Authorization: Bearer ${{secret:NAME}}'");
        };
        let i = match out.iter().position(|r| r.host == host) {
            Some(i) => i,
            None => {
                out.push(lizard_proto::InjectRequest {
                    host: host.to_string(),
                    headers: BTreeMap::new(),
                });
                out.len() - 1
            }
        };
        if out[i]
            .headers
            .insert(name.to_string(), value.to_string())
            .is_some()
        {
            bail!("--inject: header {name:?} given twice for {host:?}");
        }
    }
    Ok(out)
}

/// Injection rules for humans, one line each: `api.example.com: Authorization: Bearer ${secret:x}`
/// (templates only: the API never returns a value).
fn inject_lines(rules: &[lizard_proto::InjectRequest]) -> Vec<String> {
    rules
        .iter()
        .flat_map(|r| {
            r.headers
                .iter()
                .map(move |(k, v)| format!("{}: {k}: {v}", r.host))
        })
        .collect()
}

/// An egress for humans: `none (no egress)`, `all`, or `allow a, b; deny c`.
fn egress_text(e: &lizard_proto::Egress) -> String {
    match e {
        lizard_proto::Egress::None => "none (no egress)".into(),
        lizard_proto::Egress::All => "all".into(),
        lizard_proto::Egress::Rules(r) => {
            let mut parts = Vec::new();
            match &r.allow {
                Some(a) if a.is_empty() => parts.push("allow nothing".to_string()),
                Some(a) => parts.push(format!("allow {}", a.join(", "))),
                None => parts.push("allow everything public".to_string()),
            }
            if !r.deny.is_empty() {
                parts.push(format!("deny {}", r.deny.join(", ")));
            }
            parts.join("; ")
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum ContextCommand {
    /// Create a context (a kernel) in a sandbox and print its id.
    Create {
        #[arg(long)]
        sandbox: String,
        #[arg(long, default_value = "python")]
        language: Language,
        #[arg(long)]
        cwd: Option<String>,
        /// Memory limit of the context (its kernel and the kernel's children), MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU limit of the context, thousandths of a CPU.
        #[arg(long)]
        cpu_millicores: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// List a sandbox's contexts.
    List {
        #[arg(long)]
        sandbox: String,
        #[arg(long)]
        json: bool,
    },
    /// Restart a context's kernel (state cleared).
    Restart {
        #[arg(long)]
        sandbox: String,
        id: String,
    },
    /// Delete a context.
    Delete {
        #[arg(long)]
        sandbox: String,
        id: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Sandbox to run in (default: a new sandbox, killed afterwards).
    #[arg(long)]
    sandbox: Option<String>,
    #[arg(long, conflicts_with = "context")]
    language: Option<Language>,
    #[arg(long)]
    context: Option<String>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Environment variable for this run (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Print the events as JSON lines instead.
    #[arg(long)]
    json: bool,
    /// The code, or `-` to read it from stdin.
    code: String,
}

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    #[arg(long)]
    sandbox: String,
    #[arg(long)]
    cwd: Option<String>,
    /// Environment variable for this command (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// The shell command (run with `bash -c` as the sandbox user).
    command: String,
}

#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    #[arg(long)]
    sandbox: String,
    /// Program to run on the terminal (default: an interactive bash).
    #[arg(long)]
    cmd: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum FilesCommand {
    /// List a directory.
    Ls {
        #[arg(long)]
        sandbox: String,
        #[arg(default_value = ".")]
        path: String,
        #[arg(long, default_value_t = 1)]
        depth: u32,
        #[arg(long)]
        json: bool,
    },
    /// Write a file's bytes to stdout.
    Cat {
        #[arg(long)]
        sandbox: String,
        path: String,
    },
    /// Write stdin (or --from FILE) into a file in the sandbox.
    Put {
        #[arg(long)]
        sandbox: String,
        path: String,
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Remove a file or directory.
    Rm {
        #[arg(long)]
        sandbox: String,
        path: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// Project (default: the key's own; required for an admin key).
    #[arg(long)]
    project: Option<String>,
    /// From, in milliseconds since the epoch.
    #[arg(long)]
    from: Option<u64>,
    /// To, in milliseconds since the epoch.
    #[arg(long)]
    to: Option<u64>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// From, in milliseconds since the epoch.
    #[arg(long)]
    from: Option<u64>,
    /// To, in milliseconds since the epoch.
    #[arg(long)]
    to: Option<u64>,
    /// At most this many events (server default 1000, at most 10000).
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub fn audit(conn: &Conn, args: AuditArgs) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        let events = c.audit(args.from, args.to, args.limit).await?;
        if args.json {
            return print_json(&events);
        }
        let mut t = Table::new(&[
            "ID", "AT ms", "ACTOR", "KEY", "PROJECT", "ACTION", "OBJECT", ">STATUS", "CLIENT",
        ]);
        for e in &events {
            t.row(vec![
                e.id.to_string(),
                e.at_ms.to_string(),
                e.actor.clone(),
                e.key_prefix.clone().unwrap_or_else(|| "-".into()),
                e.project.clone().unwrap_or_else(|| "-".into()),
                e.action.clone(),
                e.object.clone().unwrap_or_else(|| "-".into()),
                e.status.to_string(),
                e.client.clone(),
            ]);
        }
        t.print();
        Ok(())
    })
}

fn pairs(items: &[String], what: &str) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => bail!("{what} {s:?} is not KEY=VALUE"),
        })
        .collect()
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn ms_to_age(ms: u64) -> String {
    let now = lizard_server::store::now_ms();
    let d = now.saturating_sub(ms) / 1000;
    match d {
        0..=119 => format!("{d}s ago"),
        120..=7199 => format!("{}m ago", d / 60),
        _ => format!("{}h ago", d / 3600),
    }
}

pub fn sandbox(conn: &Conn, cmd: SandboxCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            SandboxCommand::Create {
                project,
                template,
                timeout_ms,
                metadata,
                env,
                memory_mb,
                cpu_millicores,
                disk_mb,
                egress_all,
                allow,
                deny,
                egress_closed,
                inject,
                pause_on_timeout,
                volumes,
                snapshot,
                json,
            } => {
                let limits = (memory_mb.is_some() || cpu_millicores.is_some() || disk_mb.is_some())
                    .then(|| LimitsRequest {
                        memory_mb,
                        cpu_millicores,
                        disk_mb,
                        ..Default::default()
                    });
                let inject = inject_arg(&inject)?;
                let network = match egress_arg(egress_all, egress_closed, allow, deny) {
                    Some(egress) => Some(lizard_proto::NetworkRequest {
                        egress,
                        inject,
                        ..Default::default()
                    }),
                    None if inject.is_empty() => None,
                    None => bail!(
                        "--inject needs egress to its hosts (--allow HOST, or --egress-all)"
                    ),
                };
                let info = c
                    .create_sandbox(&CreateSandboxRequest {
                        project,
                        template,
                        timeout_ms,
                        metadata: pairs(&metadata, "metadata")?,
                        env: pairs(&env, "env")?,
                        limits,
                        on_timeout: pause_on_timeout.then_some(lizard_proto::TimeoutAction::Pause),
                        volumes: volumes
                            .iter()
                            .map(|v| parse_volume_arg(v))
                            .collect::<Result<_>>()?,
                        network,
                        snapshot_id: snapshot,
                    })
                    .await?;
                if json {
                    print_json(&info)
                } else {
                    if let Some(r) = &info.restore {
                        print_report(r, "restored");
                    }
                    println!("{}", info.sandbox_id);
                    Ok(())
                }
            }
            SandboxCommand::Fork {
                id,
                timeout_ms,
                json,
            } => {
                let info = c
                    .fork_sandbox(
                        &id,
                        &lizard_proto::ForkSandboxRequest {
                            timeout_ms,
                            ..Default::default()
                        },
                    )
                    .await?;
                if json {
                    return print_json(&info);
                }
                if let Some(r) = &info.restore {
                    print_report(r, "restored");
                }
                println!("{}", info.sandbox_id);
                Ok(())
            }
            SandboxCommand::List {
                project,
                state,
                metadata,
                json,
            } => {
                let list = c
                    .list_sandboxes(&ListSandboxes {
                        project,
                        state,
                        metadata: pairs(&metadata, "metadata")?.into_iter().collect(),
                    })
                    .await?;
                if json {
                    return print_json(&list);
                }
                let mut t = Table::new(&["SANDBOX", "PROJECT", "STATE", "CREATED", "TEMPLATE"]);
                for s in list {
                    t.row(vec![
                        s.sandbox_id,
                        s.project,
                        wire_name(s.state),
                        ms_to_age(s.created_at_ms),
                        s.template,
                    ]);
                }
                t.print();
                Ok(())
            }
            SandboxCommand::Info { id, json } => {
                let s = c.get_sandbox(&id).await?;
                if json {
                    return print_json(&s);
                }
                println!("sandbox   {}", s.sandbox_id);
                println!("project   {}", s.project);
                println!("template  {}", s.template);
                println!(
                    "state     {}",
                    serde_json::to_value(s.state)?.as_str().unwrap_or("")
                );
                println!("created   {}", ms_to_age(s.created_at_ms));
                println!(
                    "timeout   in {}s",
                    s.timeout_at_ms
                        .saturating_sub(lizard_server::store::now_ms())
                        / 1000
                );
                println!(
                    "limits    {} MiB, {} millicores, {} pids",
                    s.limits.memory_mb, s.limits.cpu_millicores, s.limits.pids
                );
                for (k, v) in &s.metadata {
                    println!("metadata  {k}={v}");
                }
                for v in &s.volumes {
                    println!(
                        "volume    {} ({}) at {}{}",
                        v.name,
                        v.volume_id,
                        v.mount_path,
                        if v.read_only { " read-only" } else { "" }
                    );
                }
                println!("egress    {}", egress_text(&s.network.egress));
                for line in inject_lines(&s.network.inject) {
                    println!("inject    {line}");
                }
                Ok(())
            }
            SandboxCommand::Pause { id } => {
                c.pause(&id).await?;
                Ok(())
            }
            SandboxCommand::Resume { id, json } => {
                let info = c.resume(&id).await?;
                if json {
                    return print_json(&info);
                }
                if let Some(r) = &info.restore {
                    print_report(r, "restored");
                }
                Ok(())
            }
            SandboxCommand::Hibernate { id, json } => {
                let info = c.hibernate(&id).await?;
                if json {
                    return print_json(&info);
                }
                match &info.hibernation {
                    Some(r) => print_report(r, "saved"),
                    None => println!("{id} was already hibernated"),
                }
                Ok(())
            }
            SandboxCommand::Kill { id } => Ok(c.kill_sandbox(&id).await?),
            SandboxCommand::Timeout { id, ms } => {
                c.set_timeout(&id, ms).await?;
                Ok(())
            }
            SandboxCommand::Network {
                id,
                allow,
                deny,
                all,
                none,
                inject,
                no_inject,
                json,
            } => {
                let inject = inject_arg(&inject)?;
                let egress = egress_arg(all, none, allow, deny);
                let info = if egress.is_none() && inject.is_empty() && !no_inject {
                    c.get_sandbox(&id).await?
                } else {
                    // The server keeps what is not given.
                    let update = lizard_proto::UpdateNetworkRequest {
                        egress,
                        inject: (no_inject || !inject.is_empty()).then_some(inject),
                        public_ports: None,
                        auto_resume: None,
                    };
                    c.set_network(&id, &update).await?
                };
                if json {
                    return print_json(&info.network);
                }
                println!("{}", egress_text(&info.network.egress));
                for line in inject_lines(&info.network.inject) {
                    println!("inject  {line}");
                }
                Ok(())
            }
            SandboxCommand::NetworkLog { id, json } => {
                let log = c.network_log(&id).await?;
                if json {
                    return print_json(&log);
                }
                let m = &log.mirror;
                println!(
                    "mirror  {} requests, {} cache hits, {} misses, {} refused, {} bytes from registries, {} bytes served",
                    m.requests, m.cache_hits, m.cache_misses, m.refused, m.upstream_bytes, m.served_bytes
                );
                let e = &log.egress;
                println!(
                    "egress  {} connections, {} bytes out, {} bytes in, {} refused",
                    e.connections, e.bytes_out, e.bytes_in, e.refused
                );
                if !log.refused.is_empty() {
                    let mut t = Table::new(&["WHEN", "METHOD", "DESTINATION", "WHY"]);
                    for r in &log.refused {
                        t.row(vec![
                            ms_to_age(r.at_ms),
                            r.method.to_string(),
                            r.destination.clone(),
                            r.reason.clone().unwrap_or_else(|| "-".into()),
                        ]);
                    }
                    t.print();
                }
                Ok(())
            }
            SandboxCommand::Host { id, port } => {
                c.get_sandbox(&id).await?;
                println!(
                    "{}/v1/sandboxes/{id}/ports/{port}",
                    conn.api_url.trim_end_matches('/')
                );
                Ok(())
            }
        }
    })
}

/// `NAME`, `NAME:/PATH` or `NAME:/PATH:ro` (or `:rw`).
fn parse_volume_arg(s: &str) -> Result<lizard_proto::VolumeMountRequest> {
    let mut parts = s.splitn(3, ':');
    let name = parts.next().unwrap_or_default().to_string();
    let mount_path = parts.next().filter(|p| !p.is_empty()).map(String::from);
    let read_only = match parts.next() {
        None | Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            anyhow::bail!("--volume {s:?}: expected :ro or :rw at the end, got {other:?}")
        }
    };
    if name.is_empty() {
        anyhow::bail!("--volume {s:?}: expected NAME[:/PATH[:ro]]");
    }
    Ok(lizard_proto::VolumeMountRequest {
        name,
        mount_path,
        read_only,
    })
}

/// `lizard snapshot ...`.
#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a running or paused sandbox (its kernels' state and its disk; it keeps running)
    /// and print the snapshot's id.
    Create {
        sandbox_id: String,
        /// Metadata label (repeatable).
        #[arg(long = "metadata", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// List snapshots (of one sandbox with --sandbox).
    List {
        #[arg(long)]
        sandbox: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Delete a snapshot (its clones keep running).
    Delete { snapshot_id: String },
}

pub fn snapshot(conn: &Conn, cmd: SnapshotCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            SnapshotCommand::Create {
                sandbox_id,
                metadata,
                json,
            } => {
                let s = c
                    .create_snapshot(
                        &sandbox_id,
                        &lizard_proto::CreateSnapshotRequest {
                            metadata: pairs(&metadata, "metadata")?,
                        },
                    )
                    .await?;
                if json {
                    return print_json(&s);
                }
                print_report(
                    &lizard_proto::HibernationReport {
                        method: s.method,
                        method_reason: s.method_reason.clone(),
                        contexts: s.contexts.clone(),
                    },
                    "saved",
                );
                println!("{}", s.snapshot_id);
                Ok(())
            }
            SnapshotCommand::List { sandbox, json } => {
                let list = c.list_snapshots(sandbox.as_deref()).await?;
                if json {
                    return print_json(&list);
                }
                let mut t = Table::new(&[
                    "SNAPSHOT", "SANDBOX", "PROJECT", "CREATED", ">MIB", "TEMPLATE",
                ]);
                for s in list {
                    t.row(vec![
                        s.snapshot_id,
                        s.sandbox_id,
                        s.project,
                        ms_to_age(s.created_at_ms),
                        s.size_bytes.div_ceil(1024 * 1024).to_string(),
                        s.template,
                    ]);
                }
                t.print();
                Ok(())
            }
            SnapshotCommand::Delete { snapshot_id } => Ok(c.delete_snapshot(&snapshot_id).await?),
        }
    })
}

#[derive(Debug, clap::Subcommand)]
pub enum SecretCommand {
    /// Set (create or replace) a secret of PROJECT. The value is read from standard input (one
    /// trailing newline dropped; at a terminal it is asked for without echo) or from
    /// `--value-file`, never from the command line. It cannot be read back: sandboxes use it
    /// through `sandbox create --inject`, and it never enters them.
    Set {
        project: String,
        /// 1-64 letters, digits, `_` or `-`.
        name: String,
        /// Read the value from this file (one trailing newline dropped) instead of stdin.
        #[arg(long, value_name = "FILE")]
        value_file: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List a project's secrets: names and times, never values.
    List {
        project: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a secret (running sandboxes keep using its value until their next start or rule
    /// change; new ones that name it are refused).
    Delete { project: String, name: String },
}

/// A secret's value: all of `r` with one trailing newline (`\n` or `\r\n`) dropped.
fn read_value(mut r: impl Read, what: &str) -> Result<String> {
    let mut buf = Vec::new();
    r.by_ref()
        .take(64 * 1024)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading the secret's value from {what}"))?;
    if buf.ends_with(b"\n") {
        buf.pop();
        if buf.ends_with(b"\r") {
            buf.pop();
        }
    }
    String::from_utf8(buf).with_context(|| format!("the secret's value from {what} is not UTF-8"))
}

/// A value typed at the terminal without echo, up to Enter (Ctrl-C or Ctrl-D with nothing typed
/// aborts; Backspace deletes).
fn prompt_value(name: &str) -> Result<String> {
    eprint!("value of secret {name} (not shown): ");
    std::io::stderr().flush().ok();
    let mut value = Vec::new();
    {
        let _raw = lizard_jail::pty::RawMode::stdin().context("terminal mode")?;
        let mut stdin = std::io::stdin().lock();
        let mut b = [0u8; 1];
        loop {
            if stdin.read(&mut b).context("reading the terminal")? == 0 {
                break;
            }
            match b[0] {
                b'\r' | b'\n' => break,
                3 => {
                    eprintln!("\r");
                    bail!("interrupted");
                }
                4 if value.is_empty() => {
                    eprintln!("\r");
                    bail!("no value given");
                }
                0x7f | 8 => {
                    value.pop();
                }
                c => value.push(c),
            }
        }
    }
    eprintln!();
    String::from_utf8(value).context("the value typed is not UTF-8")
}

pub fn secret(conn: &Conn, cmd: SecretCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            SecretCommand::Set {
                project,
                name,
                value_file,
                json,
            } => {
                use std::io::IsTerminal;
                let value = match &value_file {
                    Some(path) => read_value(
                        std::fs::File::open(path)
                            .with_context(|| format!("opening {}", path.display()))?,
                        &path.display().to_string(),
                    )?,
                    None if std::io::stdin().is_terminal() => prompt_value(&name)?,
                    None => read_value(std::io::stdin().lock(), "stdin")?,
                };
                let (info, created) = c.set_secret(&project, &name, &value).await?;
                if json {
                    return print_json(&info);
                }
                println!(
                    "{} secret {} of project {}",
                    if created { "created" } else { "replaced" },
                    info.name,
                    info.project
                );
                Ok(())
            }
            SecretCommand::List { project, json } => {
                let list = c.list_secrets(&project).await?;
                if json {
                    return print_json(&list);
                }
                let mut t = Table::new(&["NAME", "CREATED", "UPDATED"]);
                for s in list {
                    t.row(vec![
                        s.name,
                        ms_to_age(s.created_at_ms),
                        ms_to_age(s.updated_at_ms),
                    ]);
                }
                t.print();
                Ok(())
            }
            SecretCommand::Delete { project, name } => Ok(c.delete_secret(&project, &name).await?),
        }
    })
}

#[derive(Debug, clap::Subcommand)]
pub enum VolumeCommand {
    /// Create a volume and print its id.
    Create {
        name: String,
        #[arg(long)]
        project: Option<String>,
        /// Capacity, e.g. 1073741824, 512M or 10G (default 10G).
        #[arg(long, value_name = "BYTES")]
        size: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List volumes.
    List {
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one volume (by name or id).
    Info {
        volume: String,
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Delete a volume (refused while a sandbox mounts it unless --force, which kills those
    /// sandboxes first).
    Delete {
        volume: String,
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        force: bool,
    },
}

/// `123`, `512K`, `512M`, `10G`, `1T` (powers of 1024).
fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => anyhow::bail!("size {s:?}: unknown unit {c:?} (K, M, G or T)"),
            };
            (&s[..i], mul)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("size {s:?} is not a number"))?;
    n.checked_mul(mul)
        .with_context(|| format!("size {s:?} is too large"))
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

pub fn volume(conn: &Conn, cmd: VolumeCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            VolumeCommand::Create {
                name,
                project,
                size,
                json,
            } => {
                let size_limit_bytes = size.as_deref().map(parse_size).transpose()?;
                let v = c
                    .create_volume(&lizard_proto::CreateVolumeRequest {
                        project,
                        name,
                        size_limit_bytes,
                    })
                    .await?;
                if json {
                    return print_json(&v);
                }
                println!("{}", v.volume_id);
                Ok(())
            }
            VolumeCommand::List { project, json } => {
                let list = c.list_volumes(project.as_deref()).await?;
                if json {
                    return print_json(&list);
                }
                let mut t =
                    Table::new(&["VOLUME", "PROJECT", "NAME", ">SIZE", ">USED", "MOUNTED BY"]);
                for v in list {
                    t.row(vec![
                        v.volume_id,
                        v.project,
                        v.name,
                        human_bytes(v.size_limit_bytes),
                        human_bytes(v.used_bytes),
                        v.mounted_by.join(","),
                    ]);
                }
                t.print();
                Ok(())
            }
            VolumeCommand::Info {
                volume,
                project,
                json,
            } => {
                let v = c.get_volume(&volume, project.as_deref()).await?;
                if json {
                    return print_json(&v);
                }
                println!("volume    {}", v.volume_id);
                println!("name      {}", v.name);
                println!("project   {}", v.project);
                println!("size      {}", human_bytes(v.size_limit_bytes));
                println!("used      {}", human_bytes(v.used_bytes));
                println!("created   {}", ms_to_age(v.created_at_ms));
                for sb in &v.mounted_by {
                    println!("mounted   {sb}");
                }
                Ok(())
            }
            VolumeCommand::Delete {
                volume,
                project,
                force,
            } => Ok(c.delete_volume(&volume, project.as_deref(), force).await?),
        }
    })
}

/// `lizard template build --dockerfile`.
pub struct TemplateBuildArgs {
    pub name: String,
    pub dockerfile: PathBuf,
    pub context: Option<PathBuf>,
    pub build_args: BTreeMap<String, String>,
    pub project: Option<String>,
    pub public: bool,
}

/// The context directory as a tar.gz (made by the host's `tar`, at most the API's limit).
fn context_archive(dir: &std::path::Path) -> Result<Vec<u8>> {
    let out = std::process::Command::new("tar")
        .arg("-czf")
        .arg("-")
        .arg("-C")
        .arg(dir)
        .arg(".")
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running tar for the build context")?;
    if !out.status.success() {
        bail!("tar of the build context {} failed", dir.display());
    }
    if out.stdout.len() > lizard_proto::template::MAX_CONTEXT_BYTES {
        bail!(
            "the build context {} is larger than {} (compressed)",
            dir.display(),
            human_bytes(lizard_proto::template::MAX_CONTEXT_BYTES as u64)
        );
    }
    Ok(out.stdout)
}

/// Build a user template through the API, streaming its progress to stderr and its log to
/// stdout; exit status 1 when the build fails.
pub fn template_build(conn: &Conn, args: TemplateBuildArgs) -> Result<i32> {
    use base64::Engine as _;
    let dockerfile = std::fs::read_to_string(&args.dockerfile)
        .with_context(|| format!("reading {}", args.dockerfile.display()))?;
    let context = args
        .context
        .as_deref()
        .map(context_archive)
        .transpose()?
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b));
    let c = conn.client()?;
    runtime()?.block_on(async move {
        let mut events = c
            .build_template(&lizard_proto::BuildTemplateRequest {
                name: args.name.clone(),
                dockerfile: Some(dockerfile),
                context,
                build_args: args.build_args,
                project: args.project,
                public: args.public,
                ..Default::default()
            })
            .await?;
        let mut out = std::io::stdout();
        while let Some(ev) = events.next().await {
            match ev? {
                lizard_proto::TemplateBuildEvent::Step { index, total, name } => {
                    eprintln!("[{index}/{total}] {name}");
                }
                lizard_proto::TemplateBuildEvent::Log { text, .. } => {
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                }
                lizard_proto::TemplateBuildEvent::Done { template } => {
                    eprintln!(
                        "template {} ready ({}, {})",
                        template.name,
                        template.key.as_deref().unwrap_or("-"),
                        human_bytes(template.size_bytes)
                    );
                    return Ok(0);
                }
                lizard_proto::TemplateBuildEvent::Error { error } => {
                    eprintln!("build failed: {}", error.message);
                    return Ok(1);
                }
            }
        }
        eprintln!("build failed: the server's stream ended early");
        Ok(1)
    })
}

pub fn template_list(conn: &Conn, project: Option<String>, json: bool) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        let list = c.list_templates(project.as_deref()).await?;
        if json {
            return print_json(&list);
        }
        let mut table = Table::new(&["NAME", "PROJECT", "STATE", "BASE", ">SIZE", "KEY"]);
        for t in list.templates {
            let project = t
                .project
                .unwrap_or_else(|| if t.builtin { "(built-in)" } else { "-" }.into());
            table.row(vec![
                t.name,
                project,
                wire_name(t.state),
                t.base.unwrap_or_else(|| "-".into()),
                human_bytes(t.size_bytes),
                t.key.unwrap_or_else(|| "-".into()),
            ]);
        }
        table.print();
        Ok(())
    })
}

pub fn template_delete(conn: &Conn, name: &str, project: Option<String>) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move { Ok(c.delete_template(name, project.as_deref()).await?) })
}

pub fn context(conn: &Conn, cmd: ContextCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            ContextCommand::Create {
                sandbox,
                language,
                cwd,
                memory_mb,
                cpu_millicores,
                json,
            } => {
                let limits = ContextLimits {
                    memory_mb,
                    cpu_millicores,
                };
                let ctx = c
                    .create_context(
                        &sandbox,
                        &CreateContextRequest {
                            language: Some(language),
                            cwd,
                            limits: (!limits.is_empty()).then_some(limits),
                        },
                    )
                    .await?;
                if json {
                    print_json(&ctx)
                } else {
                    println!("{}", ctx.id);
                    Ok(())
                }
            }
            ContextCommand::List { sandbox, json } => {
                let list = c.list_contexts(&sandbox).await?;
                if json {
                    return print_json(&list);
                }
                let mut t = Table::new(&["CONTEXT", "LANGUAGE", "STATE", ">RUNS", "CWD"]);
                for ctx in list {
                    t.row(vec![
                        ctx.id.to_string(),
                        ctx.language.to_string(),
                        wire_name(ctx.state),
                        ctx.execution_count.to_string(),
                        format!(
                            "{}{}",
                            ctx.cwd,
                            if ctx.is_default { " (default)" } else { "" }
                        ),
                    ]);
                }
                t.print();
                Ok(())
            }
            ContextCommand::Restart { sandbox, id } => {
                c.restart_context(&sandbox, &id).await?;
                Ok(())
            }
            ContextCommand::Delete { sandbox, id } => Ok(c.delete_context(&sandbox, &id).await?),
        }
    })
}

/// `lizard run`: streams output live; exits non-zero when the cell fails.
pub fn run(conn: &Conn, args: RunArgs) -> Result<i32> {
    let c = conn.client()?;
    let code = if args.code == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading code from stdin")?;
        s
    } else {
        args.code.clone()
    };
    runtime()?.block_on(async move {
        let (sandbox, temporary) = match &args.sandbox {
            Some(id) => (id.clone(), false),
            None => (
                c.create_sandbox(&CreateSandboxRequest::default())
                    .await?
                    .sandbox_id,
                true,
            ),
        };
        let result = stream_run(&c, &sandbox, &args, code).await;
        if temporary {
            let _ = c.kill_sandbox(&sandbox).await;
        }
        result
    })
}

async fn stream_run(c: &Client, sandbox: &str, args: &RunArgs, code: String) -> Result<i32> {
    let req = ExecuteRequest {
        code,
        context: args.context.clone().map(lizard_proto::ContextId),
        language: args.language,
        env: pairs(&args.env, "env")?,
        timeout_ms: args.timeout_ms,
    };
    let mut events = c.execute(sandbox, &req).await?;
    let mut status = None;
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    while let Some(frame) = events.next().await {
        let frame = frame?;
        if let ExecutionEvent::End { status: s, .. } = &frame.event {
            status = Some(*s);
        }
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&frame)?)?;
            out.flush()?;
            continue;
        }
        match frame.event {
            ExecutionEvent::Stdout { text } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            ExecutionEvent::Stderr { text } => {
                err.write_all(text.as_bytes())?;
                err.flush()?;
            }
            ExecutionEvent::Result(r) => {
                let text = r.data.get("text/plain").and_then(|v| v.as_str());
                let others: Vec<&str> = r
                    .data
                    .keys()
                    .map(String::as_str)
                    .filter(|k| *k != "text/plain")
                    .collect();
                match (text, others.is_empty()) {
                    (Some(t), true) => writeln!(out, "{t}")?,
                    (Some(t), false) => writeln!(out, "{t}  [{}]", others.join(", "))?,
                    (None, _) => writeln!(out, "[{}]", others.join(", "))?,
                }
                out.flush()?;
            }
            ExecutionEvent::Error(e) => {
                // A traceback already names the error; without one, say it.
                if e.traceback.is_empty() {
                    writeln!(err, "{}: {}", e.name, e.value)?;
                } else {
                    writeln!(err, "{}", e.traceback)?;
                }
            }
            ExecutionEvent::Start { .. } | ExecutionEvent::End { .. } => {}
        }
    }
    Ok(match status {
        Some(ExecutionStatus::Ok) => 0,
        _ => 1,
    })
}

pub fn usage(conn: &Conn, args: UsageArgs) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        let project = match args.project {
            Some(p) => p,
            None => {
                let mut projects = c.list_projects().await?;
                if projects.len() != 1 {
                    bail!("pass --project: this key sees {} projects", projects.len());
                }
                projects.remove(0)
            }
        };
        let u = c.usage(&project, args.from, args.to).await?;
        if args.json {
            return print_json(&u);
        }
        let mut table = Table::new(&[
            "SANDBOX",
            ">RUNNING s",
            ">PAUSED s",
            ">HIBER. s",
            ">CPU s",
            ">MEM GiB·s",
            ">EXECUTIONS",
        ]);
        let t = &u.totals;
        let total = format!("total ({} sandboxes)", t.sandboxes);
        let rows = u.sandboxes.iter().map(|r| {
            (
                r.sandbox_id.as_str(),
                [r.running_seconds, r.paused_seconds, r.hibernated_seconds],
                (r.cpu_seconds, r.memory_gib_seconds, r.executions),
            )
        });
        let totals = (
            total.as_str(),
            [t.running_seconds, t.paused_seconds, t.hibernated_seconds],
            (t.cpu_seconds, t.memory_gib_seconds, t.executions),
        );
        for (name, [running, paused, hibernated], (cpu, mem, executions)) in
            rows.chain(std::iter::once(totals))
        {
            table.row(vec![
                name.to_string(),
                format!("{running:.1}"),
                format!("{paused:.1}"),
                format!("{hibernated:.1}"),
                format!("{cpu:.2}"),
                format!("{mem:.3}"),
                executions.to_string(),
            ]);
        }
        table.print();
        if !u.volumes.is_empty() {
            println!();
            let mut table = Table::new(&["VOLUME", "NAME", ">USED", ">GiB·h", ""]);
            for v in &u.volumes {
                table.row(vec![
                    v.volume_id.clone(),
                    v.name.clone(),
                    human_bytes(v.used_bytes),
                    format!("{:.6}", v.gib_hours),
                    if v.deleted { "(deleted)" } else { "" }.into(),
                ]);
            }
            table.row(vec![
                "total".into(),
                String::new(),
                String::new(),
                format!("{:.6}", t.volume_gib_hours),
            ]);
            table.print();
        }
        Ok(())
    })
}

/// How a unit enum is spelled on the wire (`running`, `python`, …), for tables.
fn wire_name(v: impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A hibernation report, one context per line and one line per lost item.
fn print_report(r: &lizard_proto::HibernationReport, verb: &str) {
    println!("method    {}", r.method_reason);
    for c in &r.contexts {
        let names: Vec<&str> = c
            .restored
            .iter()
            .filter(|i| {
                i.kind != "variable"
                    || !i
                        .name
                        .chars()
                        .all(|ch| ch.is_ascii_uppercase() || ch == '_')
            })
            .map(|i| i.name.as_str())
            .collect();
        println!(
            "context   {} ({}): {} {} item(s): {}",
            c.id,
            c.language,
            verb,
            c.restored.len(),
            names.join(", ")
        );
        for l in &c.lost {
            println!("  lost    {}: {}", l.name, l.reason);
        }
    }
}

/// `lizard exec`: one shell command; output streams; exits with the command's status.
pub fn exec(conn: &Conn, args: ExecArgs) -> Result<i32> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        let req = lizard_proto::StartCommandRequest {
            cmd: Some(args.command.clone()),
            cwd: args.cwd.clone(),
            env: pairs(&args.env, "env")?,
            timeout_ms: args.timeout_ms,
            base64: true,
            ..Default::default()
        };
        let mut events = c.run_command(&args.sandbox, &req).await?;
        let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
        let mut code = 1;
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        while let Some(ev) = events.next().await {
            match ev? {
                lizard_proto::CommandEvent::Stdout { text, data_b64 } => {
                    let bytes = data_b64
                        .and_then(|d| b64.decode(d).ok())
                        .unwrap_or_else(|| text.into_bytes());
                    out.write_all(&bytes)?;
                    out.flush()?;
                }
                lizard_proto::CommandEvent::Stderr { text, data_b64 } => {
                    let bytes = data_b64
                        .and_then(|d| b64.decode(d).ok())
                        .unwrap_or_else(|| text.into_bytes());
                    err.write_all(&bytes)?;
                    err.flush()?;
                }
                lizard_proto::CommandEvent::End(end) => {
                    if end.timed_out {
                        eprintln!("lizard: the command timed out");
                    }
                    code = end.exit_code.unwrap_or(128 + 9);
                }
                lizard_proto::CommandEvent::Start { .. } => {}
            }
        }
        Ok(code)
    })
}

pub fn files(conn: &Conn, cmd: FilesCommand) -> Result<()> {
    let c = conn.client()?;
    runtime()?.block_on(async move {
        match cmd {
            FilesCommand::Ls {
                sandbox,
                path,
                depth,
                json,
            } => {
                let entries = c.list_files(&sandbox, &path, depth).await?;
                if json {
                    return print_json(&entries);
                }
                for e in entries {
                    let kind = serde_json::to_value(e.file_type)?;
                    println!(
                        "{:<10} {:>10} {:<8} {}",
                        e.permissions,
                        e.size,
                        kind.as_str().unwrap_or(""),
                        e.path
                    );
                }
                Ok(())
            }
            FilesCommand::Cat { sandbox, path } => {
                let mut s = c.read_file(&sandbox, &path).await?;
                let mut out = std::io::stdout();
                while let Some(chunk) = s.next().await {
                    out.write_all(&chunk?)?;
                }
                out.flush()?;
                Ok(())
            }
            FilesCommand::Put {
                sandbox,
                path,
                from,
            } => {
                let data = match from {
                    Some(f) => {
                        std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?
                    }
                    None => {
                        let mut v = Vec::new();
                        std::io::stdin().read_to_end(&mut v)?;
                        v
                    }
                };
                c.write_file(&sandbox, &path, data).await?;
                Ok(())
            }
            FilesCommand::Rm { sandbox, path } => Ok(c.remove_file(&sandbox, &path).await?),
        }
    })
}

/// `lizard shell`: an interactive terminal in a sandbox (raw mode when stdin is a terminal; piped
/// stdin is sent as typed, then Ctrl-D). Exits with the terminal program's status.
pub fn shell(conn: &Conn, args: ShellArgs) -> Result<i32> {
    use std::io::IsTerminal;
    let c = conn.client()?;
    let tty = std::io::stdin().is_terminal();
    let (cols, rows) = if tty {
        use std::os::fd::AsFd;
        lizard_jail::pty::window_size(std::io::stdin().as_fd()).unwrap_or((80, 24))
    } else {
        (80, 24)
    };
    runtime()?.block_on(async move {
        let req = lizard_proto::StartPtyRequest {
            cols,
            rows,
            cmd: args.cmd.clone(),
            ..Default::default()
        };
        let mut events = c.start_pty(&args.sandbox, &req).await?;
        let pid = match events.next().await {
            Some(Ok(lizard_proto::CommandEvent::Start { pid, .. })) => pid,
            Some(Err(e)) => return Err(e.into()),
            _ => bail!("the terminal did not start"),
        };
        let _raw = if tty {
            Some(lizard_jail::pty::RawMode::stdin().context("raw mode")?)
        } else {
            None
        };
        // Keystrokes → the terminal.
        let (input_c, sandbox) = (c.clone(), args.sandbox.clone());
        let input = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut stdin = tokio::io::stdin();
            let mut buf = vec![0u8; 4096];
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        if !tty {
                            let _ = input_c.pty_input(&sandbox, pid, b"\x04").await;
                        }
                        return;
                    }
                    Ok(n) => {
                        if input_c.pty_input(&sandbox, pid, &buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        // Window size changes → the terminal.
        if tty {
            let (c, sandbox) = (c.clone(), args.sandbox.clone());
            tokio::spawn(async move {
                use std::os::fd::AsFd;
                let Ok(mut winch) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
                else {
                    return;
                };
                while winch.recv().await.is_some() {
                    if let Ok((cols, rows)) =
                        lizard_jail::pty::window_size(std::io::stdin().as_fd())
                    {
                        let _ = c.pty_resize(&sandbox, pid, cols, rows).await;
                    }
                }
            });
        }
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = std::io::stdout();
        let mut code = 1;
        while let Some(ev) = events.next().await {
            match ev? {
                lizard_proto::CommandEvent::Stdout { text, data_b64 }
                | lizard_proto::CommandEvent::Stderr { text, data_b64 } => {
                    let bytes = data_b64
                        .and_then(|d| b64.decode(d).ok())
                        .unwrap_or_else(|| text.into_bytes());
                    out.write_all(&bytes)?;
                    out.flush()?;
                }
                lizard_proto::CommandEvent::End(end) => {
                    code = end.exit_code.unwrap_or(128 + 9);
                }
                lizard_proto::CommandEvent::Start { .. } => {}
            }
        }
        input.abort();
        Ok(code)
    })
}
