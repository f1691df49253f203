//! `lizard`: one binary for the whole product.
//!
//! `lizard serve` runs the server (building the default template first if it is missing, with a
//! progress bar); `lizard agent` runs the in-sandbox agent (the server bind-mounts this very binary
//! into each sandbox); `lizard template build` builds a template; `lizard project create|list`
//! manages projects and keys directly in the data dir. `lizard sandbox-init` is internal: the server
//! runs it to launch a sandbox from a single-threaded process.

mod bench;
mod cli;
mod serve;
mod table;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(version, about = "Self-hosted code-interpreter sandboxes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (HTTP API on --listen, state in --data-dir).
    Serve(Box<serve::ServeArgs>),
    /// Run the execution agent (normally inside a sandbox, started by the server).
    Agent(lizard_agent::cli::AgentArgs),
    /// Build and manage sandbox templates.
    Template {
        #[command(subcommand)]
        command: TemplateCommand,
    },
    /// Manage projects and their API keys (works on the data dir, server running or not).
    Project {
        #[command(subcommand)]
        command: ProjectCommand,
    },
    /// Create, list, inspect, pause, resume and kill sandboxes.
    Sandbox {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::SandboxCommand,
    },
    /// Snapshots of running sandboxes: create, list, delete (start one with `sandbox create
    /// --snapshot ID`).
    Snapshot {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::SnapshotCommand,
    },
    /// A project's secrets: set (value from stdin or a file), list (names only), delete. Used by
    /// `sandbox create --inject`; never read back, never inside a sandbox.
    Secret {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::SecretCommand,
    },
    /// Create, list, inspect and delete persistent volumes (mounted with `sandbox create --volume`).
    Volume {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::VolumeCommand,
    },
    /// Run code in a sandbox (a new one, killed afterwards, unless --sandbox), streaming output.
    Run {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::RunArgs,
    },
    /// Run one shell command in a sandbox, streaming its output; exits with its status.
    Exec {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::ExecArgs,
    },
    /// An interactive terminal in a sandbox.
    Shell {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::ShellArgs,
    },
    /// Files in a sandbox: ls, cat, put, rm.
    Files {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::FilesCommand,
    },
    /// Manage a sandbox's contexts.
    Context {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(subcommand)]
        command: cli::ContextCommand,
    },
    /// Show a project's usage as a table.
    Usage {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::UsageArgs,
    },
    /// Show the audit log (lifecycle calls and authentication failures), newest first.
    Audit {
        #[command(flatten)]
        conn: cli::Conn,
        #[command(flatten)]
        args: cli::AuditArgs,
    },
    /// Measure Lizard on this machine next to a Jupyter baseline (medians, p95, ratios; JSON too).
    Bench(bench::BenchArgs),
    /// Serve Lizard as an MCP server on stdin/stdout (for assistants that launch a command): its
    /// tools call the server at LIZARD_API_URL with LIZARD_API_KEY. `lizard serve` also serves
    /// MCP over Streamable HTTP at /mcp.
    Mcp {
        #[command(flatten)]
        conn: cli::Conn,
        /// Keep the sandbox the session made for itself when the session ends (killed otherwise).
        #[arg(long)]
        keep_sandbox: bool,
    },
    /// Print the API's OpenAPI document (generated from the wire types; the server serves the same
    /// at /v1/openapi.json, and crates/lizard-server/openapi.json is a committed copy).
    Openapi,
    /// Internal: launch one sandbox from a JSON spec on stdin (used by the server).
    #[command(hide = true)]
    SandboxInit,
    /// Internal: run a shared Python zygote in its jail from a JSON spec on stdin (used by the
    /// server, `lizard serve --host-zygotes`).
    #[command(hide = true)]
    ZygoteInit,
    /// Internal: CRIU's action during a sandbox's restore (configures its network namespace).
    #[command(hide = true, name = lizard_jail::sandbox::NETNS_SETUP_COMMAND)]
    SandboxNetnsSetup,
    /// Internal: fork one process tree of a running sandbox with CRIU, from a JSON spec on stdin
    /// (used by the server for an exact fork of a context).
    #[command(hide = true)]
    ContextFork,
}

#[derive(Debug, Subcommand)]
enum TemplateCommand {
    /// Build a template. With --dockerfile: a user template, built by the server inside a build
    /// sandbox (streams the build; exit status 1 when it fails). Without: a built-in template from
    /// its spec, on this host as root (cached: a no-op when an up-to-date build exists); that build
    /// records the exact versions it installed and reports how they differ from the spec's lock.
    Build {
        /// Template name, or the path of a spec file.
        #[arg(default_value = "code-interpreter-v1")]
        name: String,
        /// The Dockerfile of a user template (see templates/README.md for the subset).
        #[arg(long, value_name = "FILE")]
        dockerfile: Option<PathBuf>,
        /// The build context directory (what COPY and ADD take), sent as a tar.gz.
        #[arg(long, value_name = "DIR", requires = "dockerfile")]
        context: Option<PathBuf>,
        /// A value for one of the Dockerfile's ARGs.
        #[arg(long = "build-arg", value_name = "KEY=VALUE", value_parser = serve::parse_env_pair, requires = "dockerfile")]
        build_args: Vec<(String, String)>,
        /// The project (admin keys; a project key's own otherwise).
        #[arg(long, requires = "dockerfile")]
        project: Option<String>,
        /// Let every project use it (admin keys only).
        #[arg(long, requires = "dockerfile")]
        public: bool,
        /// Rebuild even if an up-to-date build exists (host-side builds).
        #[arg(long)]
        force: bool,
        /// Fail when an installed version differs from the spec's lock (host-side builds; Debian
        /// testing moves daily).
        #[arg(long, conflicts_with_all = ["update_lock", "dockerfile"])]
        locked: bool,
        /// Rebuild and write the installed versions as the spec's new lock (host-side builds; NAME
        /// must be the spec file's path, e.g. templates/code-interpreter-v1.toml).
        #[arg(long, conflicts_with = "dockerfile")]
        update_lock: bool,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// List the templates the key sees (its project's, public ones, built-ins).
    List {
        #[arg(long)]
        project: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: cli::Conn,
    },
    /// Delete a user template (sandboxes running on it keep working).
    Delete {
        name: String,
        #[arg(long)]
        project: Option<String>,
        #[command(flatten)]
        conn: cli::Conn,
    },
}

#[derive(Debug, Subcommand)]
enum ProjectCommand {
    /// Create a project and print an API key scoped to it.
    Create {
        name: String,
        /// Let the project's sandboxes be created with internet egress (`network.egress`).
        #[arg(long)]
        allow_egress: bool,
        /// Keep the project's sandboxes away from the package registries' mirror (`pip install`
        /// and `npm install` without egress are then refused).
        #[arg(long)]
        no_package_registries: bool,
        /// Print `{"project": …, "api_key": …}`.
        #[arg(long)]
        json: bool,
        #[arg(long, env = "LIZARD_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// List projects.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long, env = "LIZARD_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

/// The data directory: `--data-dir`, else `$LIZARD_DATA_DIR`, else `$XDG_DATA_HOME/lizard`, else
/// `~/.local/share/lizard`.
pub fn data_dir(flag: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match flag {
        Some(d) => d,
        None => match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            Some(x) => PathBuf::from(x).join("lizard"),
            None => {
                PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --data-dir")?)
                    .join(".local/share/lizard")
            }
        },
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::path::absolute(&dir).with_context(|| format!("resolving {}", dir.display()))
}

fn init_tracing(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIZARD_LOG")
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

fn main() {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line: the error and its causes.
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("lizard: error: {}", chain.join(": "));
            std::process::exit(1);
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32> {
    let ok = |r: Result<()>| r.map(|()| 0);
    match cli.command {
        Command::Sandbox { conn, command } => ok(cli::sandbox(&conn, command)),
        Command::Volume { conn, command } => ok(cli::volume(&conn, command)),
        Command::Secret { conn, command } => ok(cli::secret(&conn, command)),
        Command::Snapshot { conn, command } => ok(cli::snapshot(&conn, command)),
        Command::Run { conn, args } => cli::run(&conn, args),
        Command::Exec { conn, args } => cli::exec(&conn, args),
        Command::Shell { conn, args } => cli::shell(&conn, args),
        Command::Files { conn, command } => ok(cli::files(&conn, command)),
        Command::Context { conn, command } => ok(cli::context(&conn, command)),
        Command::Usage { conn, args } => ok(cli::usage(&conn, args)),
        Command::Audit { conn, args } => ok(cli::audit(&conn, args)),
        Command::Openapi => {
            print!("{}", lizard_server::openapi::document_text());
            Ok(0)
        }
        Command::Bench(args) => {
            init_tracing("warn");
            ok(bench::bench(args))
        }
        // Single-threaded on purpose: it forks/clones into namespaces.
        Command::SandboxInit => lizard_jail::sandbox::init_main(),
        // Single-threaded too: it unshares namespaces and becomes the zygote.
        Command::ZygoteInit => lizard_jail::host_zygote::init_main(),
        // Single-threaded on purpose too: it enters namespaces.
        Command::ContextFork => lizard_jail::subtree::fork_main(),
        Command::SandboxNetnsSetup => ok(lizard_jail::checkpoint::setup_restored_netns()
            .map_err(|e| anyhow::anyhow!(lizard_jail::error_chain(&e)))),
        Command::Agent(args) => {
            init_tracing("lizard_agent=info");
            ok(tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(lizard_agent::cli::run(args)))
        }
        Command::Serve(args) => {
            init_tracing("lizard=info,lizard_server=info");
            ok(serve::serve(*args))
        }
        Command::Mcp { conn, keep_sandbox } => {
            // stdout is the protocol's: logs go to stderr.
            init_tracing("warn");
            let server = lizard_mcp::LizardMcp::with_key(conn.api_url(), &conn.key()?)
                .keep_session_sandbox(keep_sandbox);
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(lizard_mcp::serve_stdio(server))
                .map_err(|e| anyhow::anyhow!("the MCP session failed: {e}"))?;
            Ok(0)
        }
        Command::Template { command } => match command {
            TemplateCommand::Build {
                name,
                dockerfile: Some(dockerfile),
                context,
                build_args,
                project,
                public,
                conn,
                ..
            } => cli::template_build(
                &conn,
                cli::TemplateBuildArgs {
                    name,
                    dockerfile,
                    context,
                    build_args: build_args.into_iter().collect(),
                    project,
                    public,
                },
            ),
            TemplateCommand::Build {
                name,
                force,
                locked,
                update_lock,
                conn,
                ..
            } => {
                init_tracing("warn");
                let d = data_dir(conn.data_dir())?;
                let lock = if update_lock {
                    lizard_template::lock::LockMode::Update
                } else if locked {
                    lizard_template::lock::LockMode::Locked
                } else {
                    lizard_template::lock::LockMode::Report
                };
                let t = serve::build_template_with(&d, &name, force, lock)?;
                println!("{}", t.rootfs.display());
                Ok(0)
            }
            TemplateCommand::List {
                project,
                json,
                conn,
            } => ok(cli::template_list(&conn, project, json)),
            TemplateCommand::Delete {
                name,
                project,
                conn,
            } => ok(cli::template_delete(&conn, &name, project)),
        },
        Command::Project { command } => ok(project(command)),
    }
}

fn project(command: ProjectCommand) -> Result<()> {
    match command {
        ProjectCommand::Create {
            name,
            allow_egress,
            no_package_registries,
            json,
            data_dir: d,
        } => {
            let store = serve::open_store(&data_dir(d)?)?;
            anyhow::ensure!(
                lizard_server::auth::valid_project_name(&name),
                "invalid project name {name:?}: use 1-63 letters, digits, '.', '_' or '-'"
            );
            store
                .create_project(&name, allow_egress, !no_package_registries)
                .with_context(|| format!("creating project {name}"))?;
            let key = lizard_server::auth::issue_key(&store, Some(&name))?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&lizard_proto::ProjectCreated {
                        project: name,
                        api_key: key,
                    })?
                );
            } else {
                println!("project {name} created; its API key (shown once):\n{key}");
            }
            Ok(())
        }
        ProjectCommand::List { json, data_dir: d } => {
            let store = serve::open_store(&data_dir(d)?)?;
            let projects = store.list_projects()?;
            if json {
                println!("{}", serde_json::to_string(&projects)?);
            } else {
                for p in projects {
                    println!("{p}");
                }
            }
            Ok(())
        }
    }
}
