//! `lizard bench`: measures Lizard on this machine next to a Jupyter baseline measured in the same
//! run, and prints medians, p95 and ratios (plus a JSON file).
//!
//! It starts its own `lizard serve` (a temporary data dir, the templates of `--templates-from`) and
//! drives it through `lizard-client`, exactly like a user's program would. The Jupyter figures come
//! from `jupyter_client` + `ipykernel` in a venv the bench prepares (`target/bench-venv` by default).
//! Not a test: nothing here passes or fails; targets are printed next to the numbers.

use anyhow::{bail, Context as _, Result};
use futures_util::StreamExt;
use lizard_client::Client;
use lizard_proto::{
    CreateContextRequest, CreateSandboxRequest, ExecuteRequest, ExecutionEvent, Language,
};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Data dir holding the built templates (default: the usual data dir).
    #[arg(long, env = "LIZARD_TEMPLATES_FROM")]
    templates_from: Option<PathBuf>,
    /// Samples per latency figure.
    #[arg(long, default_value_t = 30)]
    samples: usize,
    /// Idle sandboxes (each with a live Python context) for the memory figure.
    #[arg(long, default_value_t = 20)]
    idle_sandboxes: usize,
    /// Write the results as JSON here.
    #[arg(long, default_value = "target/bench.json")]
    json_out: PathBuf,
    /// Python interpreter with jupyter_client and ipykernel (default: a venv prepared under target/).
    #[arg(long)]
    jupyter_python: Option<PathBuf>,
    /// The TypeScript SDK's entry module, for the create → first result figure through it
    /// (skipped when missing).
    #[arg(long, default_value = "sdk/typescript/dist/index.js")]
    ts_sdk: PathBuf,
    /// A Python interpreter with the Python SDK installed (`pip install ./sdk/python`), for its
    /// figures (skipped when missing).
    #[arg(long, default_value = "target/sdk-venv/bin/python")]
    python_sdk: PathBuf,
    /// Skip the Jupyter baseline.
    #[arg(long)]
    no_jupyter: bool,
    /// Measure only pause/resume in memory and hibernate/resume from disk (a minute instead of
    /// several).
    #[arg(long)]
    only_hibernation: bool,
    /// Measure only create → first result (warm pool), createContext per language and memory per
    /// idle sandbox (a minute or two).
    #[arg(long)]
    only_contexts: bool,
    /// Measure only snapshots, clones, sandbox forks and context forks (a minute or two).
    #[arg(long)]
    only_checkpoints: bool,
    /// Measure only the warm round trip through the Rust client, the TypeScript SDK and the
    /// Python SDK (a minute).
    #[arg(long)]
    only_round_trips: bool,
    /// Measure only create → first result under load through the TypeScript SDK: a burst of
    /// creates at once, then creates at a sustained rate (a minute or two).
    #[arg(long)]
    only_load: bool,
    /// Measure only trivial executions a second: 4 contexts in 2 sandboxes, then 16 in 4 (a
    /// minute).
    #[arg(long)]
    only_throughput: bool,
    /// Creates at once in the burst figure.
    #[arg(long, default_value_t = 20)]
    burst: usize,
    /// Creates a second in the sustained figure.
    #[arg(long, default_value_t = 10)]
    sustained_rate: usize,
    /// Seconds of the sustained figure.
    #[arg(long, default_value_t = 60)]
    sustained_s: usize,
    /// The load figures' server's `--pool-max`; by default it has none (its pool is the
    /// default's, sized from the host's memory).
    #[arg(long)]
    pool_max: Option<usize>,
    /// Agent settings (`KEY=VALUE`, repeatable) of every sandbox of the bench's servers (`lizard
    /// serve --agent-env`), e.g. `LIZARD_PYTHON_ZYGOTE=false` to measure without the zygote.
    #[arg(long, value_name = "KEY=VALUE", value_parser = crate::serve::parse_env_pair)]
    agent_env: Vec<(String, String)>,
    /// The bench's servers' `--host-zygotes` (one shared Python zygote on the host whose forks
    /// join new sandboxes; on by default): with it, each server is measured once its zygote is
    /// ready.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    host_zygotes: bool,
}

/// Whether the bench's servers run with `--host-zygotes` (`BenchArgs::host_zygotes`).
static HOST_ZYGOTES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug, Clone, Serialize)]
struct Figure {
    name: String,
    unit: String,
    median: f64,
    p95: f64,
    p99: f64,
    samples: usize,
    target: Option<String>,
    jupyter_median: Option<f64>,
    /// The same figure through the Rust client in the same run (the SDKs' round trips).
    rust_median: Option<f64>,
}

fn stats(name: &str, unit: &str, mut v: Vec<f64>, target: Option<&str>) -> Figure {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let pick = |q: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            v[((v.len() as f64 - 1.0) * q).round() as usize]
        }
    };
    Figure {
        name: name.to_string(),
        unit: unit.to_string(),
        median: pick(0.5),
        p95: pick(0.95),
        p99: pick(0.99),
        samples: v.len(),
        target: target.map(str::to_string),
        jupyter_median: None,
        rust_median: None,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct BenchServer {
    child: std::process::Child,
    client: Client,
    url: String,
    key: String,
    _dir: tempfile::TempDir,
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        // Sandboxes outlive their server: a bench that stopped half-way (an error) must not leave
        // its sandboxes running. Killed through the API, from a thread of its own (this may run
        // inside the bench's runtime, which cannot block on another future).
        let client = self.client.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                // Creates a client left in flight finish after a first list: again until the
                // server has none twice in a row (at most 30 rounds).
                let mut empty = 0;
                for _ in 0..30 {
                    let all = client.list_sandboxes(&Default::default()).await.ok()?;
                    empty = if all.is_empty() { empty + 1 } else { 0 };
                    if empty == 2 {
                        break;
                    }
                    for sb in all {
                        let _ = client.kill_sandbox(&sb.sandbox_id).await;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Some(())
            })
        })
        .join();
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn start_server(
    templates_from: &std::path::Path,
    pool_size: usize,
    agent_env: &[(String, String)],
) -> Result<BenchServer> {
    start_server_with(templates_from, Some(pool_size), agent_env, &[])
}

/// A server of the bench's own; its pool `pool_size`, or the default (sized from memory).
fn start_server_with(
    templates_from: &std::path::Path,
    pool_size: Option<usize>,
    agent_env: &[(String, String)],
    extra: &[&str],
) -> Result<BenchServer> {
    let dir = tempfile::tempdir()?;
    let pool = pool_size.map(|n| n.to_string());
    let mut child = Command::new(std::env::current_exe()?)
        .env_remove("LIZARD_POOL_SIZE")
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            // The throughput figure is thousands of requests a second from one key on purpose.
            "--rate-limit-rps",
            "0",
        ])
        .args(pool.iter().flat_map(|n| ["--pool-size", n]))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--templates-from")
        .arg(templates_from)
        .args(
            agent_env
                .iter()
                .flat_map(|(k, v)| ["--agent-env".to_string(), format!("{k}={v}")]),
        )
        .args(extra)
        .args([
            "--host-zygotes",
            match HOST_ZYGOTES.load(std::sync::atomic::Ordering::Relaxed) {
                true => "true",
                false => "false",
            },
        ])
        .env("LIZARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting lizard serve")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("server stdout")?).read_line(&mut line)?;
    let ready: serde_json::Value =
        serde_json::from_str(&line).with_context(|| format!("server said {line:?}"))?;
    let addr = ready["addr"].as_str().context("no addr")?.to_string();
    let key = std::fs::read_to_string(dir.path().join("admin-key"))?;
    if HOST_ZYGOTES.load(std::sync::atomic::Ordering::Relaxed) {
        // Started in the background: measured sandboxes must be launched with it.
        let ready = dir
            .path()
            .join("zygotes/code-interpreter-v1")
            .join(lizard_server::sandboxes::zygote::READY_FILE);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !ready.exists() {
            anyhow::ensure!(
                std::time::Instant::now() < until,
                "the host zygote was not ready within 120 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(BenchServer {
        child,
        client: Client::new(&format!("http://{addr}"), key.trim())?,
        url: format!("http://{addr}"),
        key: key.trim().to_string(),
        _dir: dir,
    })
}

fn exec(code: &str) -> ExecuteRequest {
    ExecuteRequest {
        code: code.to_string(),
        ..Default::default()
    }
}

/// Proportional set size (shared pages split between their users) of every process of the sandbox
/// `id`, found through `/proc/<pid>/cgroup`. Needs to run as root, like the server.
fn sandbox_pss_kib(id: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let needle = format!("/lizard/{id}");
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .map(|c| {
                    c.lines()
                        .any(|l| l.ends_with(&needle) || l.contains(&format!("{needle}/")))
                })
                .unwrap_or(false)
        })
        .map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Pss:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                })
                .unwrap_or(0)
        })
        .sum()
}

async fn lizard_figures(
    args: &BenchArgs,
    c: &Client,
    cold: Option<&Client>,
) -> Result<Vec<Figure>> {
    let n = args.samples;
    let mut out = Vec::new();

    // 1. create → first result of 1+1. Creates arrive slower than the warm pool refills (a pause
    // before each), so this is the pooled path; `cold` below is the same without a pool.
    let mut create_first = Vec::new();
    let mut create_only = Vec::new();
    for _ in 0..n {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (create, first) = create_first_result(c).await?;
        create_only.push(create);
        create_first.push(first);
    }
    out.push(stats(
        "create sandbox (API, warm pool)",
        "ms",
        create_only,
        None,
    ));
    out.push(stats(
        "create → first runCode('1+1') (Rust client, warm pool)",
        "ms",
        create_first,
        Some("≤ 50 ms"),
    ));
    if let Some(cold) = cold {
        let mut v = Vec::new();
        for _ in 0..n.min(15) {
            v.push(create_first_result(cold).await?.1);
        }
        out.push(stats(
            "create → first runCode('1+1') (no pool: cold start)",
            "ms",
            v,
            None,
        ));
    }

    let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
    let id = sb.sandbox_id.clone();
    c.run(&id, &exec("1+1")).await?;

    // 2. trivial round trip in a warm context.
    out.push(round_trip_figure(c, &id, n).await?);

    // 3. createContext per language.
    out.extend(create_context_figures(c, &id, n).await?);

    // 4. print inside a running cell → chunk at the client.
    let mut p2c = Vec::new();
    for _ in 0..n {
        let req = exec("import time\nfor _ in range(5):\n    print(time.time(), flush=True)\n    time.sleep(0.01)");
        let mut s = c.execute(&id, &req).await?;
        while let Some(f) = s.next().await {
            if let ExecutionEvent::Stdout { text } = f?.event {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs_f64();
                for line in text.lines() {
                    if let Ok(sent) = line.trim().parse::<f64>() {
                        p2c.push((now - sent) * 1000.0);
                    }
                }
            }
        }
    }
    out.push(stats(
        "print → chunk at the client",
        "ms",
        p2c,
        Some("≤ 5 ms"),
    ));

    // 5. pause → resume (in memory) and hibernate → resume (from disk).
    out.extend(hibernation_figures(args, c).await?);

    // 6. snapshots, clones, forks.
    out.extend(checkpoint_figures(args, c).await?);

    // 7. throughput over several contexts and sandboxes, all cores.
    c.kill_sandbox(&id).await?;
    out.push(throughput_figure(c, 2, 2, Some("≥ 3000/s")).await?);
    out.push(throughput_figure(c, 4, 4, None).await?);

    // 8. memory per idle sandbox with a live Python context.
    out.extend(memory_figures(args, c, &CreateSandboxRequest::default()).await?);
    Ok(out)
}

/// Trivial executions a second: `per_sandbox` contexts in each of `n_sandboxes` sandboxes, each
/// sent `1+1` one after the other by its own task, so that the server, the agents and the kernels
/// share both cores. The target is on 4 contexts in 2 sandboxes (the figure since session 19);
/// 16 in 4 shows how it scales.
async fn throughput_figure(
    c: &Client,
    n_sandboxes: usize,
    per_sandbox: usize,
    target: Option<&str>,
) -> Result<Figure> {
    let mut sandboxes = Vec::new();
    let mut targets = Vec::new();
    for _ in 0..n_sandboxes {
        let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
        for _ in 0..per_sandbox {
            let ctx = c
                .create_context(&sb.sandbox_id, &CreateContextRequest::default())
                .await?;
            targets.push((sb.sandbox_id.clone(), ctx.id));
        }
        sandboxes.push(sb.sandbox_id);
    }
    // A warm-up round, so that the first cells' one-off costs are not counted.
    for (sbid, ctx) in &targets {
        c.run(sbid, &in_context("1+1", ctx.as_str())).await?;
    }
    // Rounds of 800 runs: the VM's speed drifts within seconds, so the figure is the median
    // round, and its p95/p99 are the slow rounds (a lower rate is worse).
    let (rounds, per) = (10, 800 / targets.len());
    let mut rates = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut tasks = Vec::new();
        for (sbid, ctx) in &targets {
            let (c, sbid) = (c.clone(), sbid.clone());
            let req = in_context("1+1", ctx.as_str());
            tasks.push(tokio::spawn(async move {
                for _ in 0..per {
                    c.run(&sbid, &req).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        rates.push((targets.len() * per) as f64 / t.elapsed().as_secs_f64());
    }
    let mut f = stats(
        &format!(
            "throughput, {} contexts in {n_sandboxes} sandboxes",
            targets.len()
        ),
        "exec/s",
        rates.iter().map(|r| -r).collect(),
        target,
    );
    (f.median, f.p95, f.p99) = (-f.median, -f.p95, -f.p99);
    for sb in sandboxes {
        c.kill_sandbox(&sb).await?;
    }
    Ok(f)
}

/// createContext per language in the sandbox `id` (each context deleted again).
async fn create_context_figures(c: &Client, id: &str, n: usize) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    for lang in Language::ALL {
        let v = time_create_contexts(c, id, lang, n.min(20), Duration::ZERO).await?;
        out.push(stats(
            &format!("createContext({lang})"),
            "ms",
            v,
            Some("≤ 20 ms"),
        ));
    }
    // JavaScript creates spaced apart: with the zygote (default) both figures are a fork; with
    // `--agent-env LIZARD_JAVASCRIPT_ZYGOTE=false` (the spare kernel) this one leaves the agent
    // time to start its spare in between, while the back-to-back one waits for a spare starting.
    let apart = Duration::from_millis(300);
    let v = time_create_contexts(c, id, Language::Javascript, n.min(20), apart).await?;
    out.push(stats(
        "createContext(javascript), 300 ms apart",
        "ms",
        v,
        Some("≤ 20 ms"),
    ));
    Ok(out)
}

/// `n` timed creates of a `lang` context in sandbox `id`, `pause` before each (each context
/// deleted again): their times in ms.
async fn time_create_contexts(
    c: &Client,
    id: &str,
    lang: Language,
    n: usize,
    pause: Duration,
) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    for _ in 0..n {
        tokio::time::sleep(pause).await;
        let t = Instant::now();
        let req = CreateContextRequest {
            language: Some(lang),
            cwd: None,
            limits: None,
        };
        let ctx = c.create_context(id, &req).await?;
        v.push(ms(t.elapsed()));
        c.delete_context(id, ctx.id.as_str()).await?;
    }
    Ok(v)
}

/// Memory per idle sandbox with a live Python context (PSS: shared pages counted once), and how
/// many such sandboxes fit.
async fn memory_figures(
    args: &BenchArgs,
    c: &Client,
    req: &CreateSandboxRequest,
) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..args.idle_sandboxes {
        let sb = c.create_sandbox(req).await?;
        c.run(&sb.sandbox_id, &exec("x = 1")).await?;
        ids.push(sb.sandbox_id);
    }
    let pss: Vec<f64> = ids
        .iter()
        .map(|id| sandbox_pss_kib(id) as f64 / 1024.0)
        .collect();
    let per_mib = pss.iter().sum::<f64>() / pss.len().max(1) as f64;
    let available = lizard_server::sandboxes::meminfo_mb("MemAvailable").unwrap_or(0);
    let fit = available as f64 / per_mib + args.idle_sandboxes as f64;
    for sbid in &ids {
        c.kill_sandbox(sbid).await?;
    }
    out.push(stats(
        "memory per idle sandbox (PSS, Python context live)",
        "MiB",
        pss,
        Some("≤ 40 MiB"),
    ));
    let mut f = stats(
        "idle sandboxes that fit in available memory",
        "sandboxes",
        vec![fit],
        Some("≥ 300"),
    );
    f.p95 = fit;
    out.push(f);
    Ok(out)
}

/// `n × 10` runs of `1+1` in the warm default context of `id`, through the Rust client.
async fn round_trip_figure(c: &Client, id: &str, n: usize) -> Result<Figure> {
    Ok(stats(
        RUST_ROUND_TRIP,
        "ms",
        round_trips(c, id, n * 10).await?,
        Some("≤ 2 ms, ≤ 1.0× Jupyter"),
    ))
}

/// `n` warm round trips of `1+1` in sandbox `id` through the Rust client, in ms.
async fn round_trips(c: &Client, id: &str, n: usize) -> Result<Vec<f64>> {
    let mut rt = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.run(id, &exec("1+1")).await?;
        rt.push(ms(t.elapsed()));
    }
    Ok(rt)
}

/// The name of the Rust client's round-trip figure, which the SDKs' are compared with.
const RUST_ROUND_TRIP: &str = "runCode('1+1') round trip, warm";

/// Rounds of `--only-round-trips`: each client measures a share of its samples in turn, so that
/// the machine's drift (a shared VM's speed changes over minutes) weighs on all of them alike and
/// the "vs rust" ratios compare like with like.
const ROUND_TRIP_ROUNDS: usize = 5;

/// `--only-round-trips`: the round trip through the Rust client, the TypeScript SDK and the
/// Python SDK, on one server and one sandbox, in [`ROUND_TRIP_ROUNDS`] interleaved rounds. Each
/// SDK runs as one program for the whole figure ([`SdkRounds`]: warmed up once, as a long-lived
/// agent would be), told when to measure its share of each round. An SDK that cannot run is
/// skipped with a note.
fn round_trip_figures(args: &BenchArgs, server: &BenchServer) -> Result<Vec<Figure>> {
    let rt = runtime()?;
    let c = &server.client;
    let per_round = (args.samples * 10).div_ceil(ROUND_TRIP_ROUNDS);
    let id = rt.block_on(async {
        let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
        c.run(&sb.sandbox_id, &exec("1+1")).await?;
        anyhow::Ok(sb.sandbox_id)
    })?;
    let ts_module = std::path::absolute(&args.ts_sdk)?;
    let ts = || -> Result<SdkRounds> {
        if !ts_module.exists() {
            bail!("{} not found", ts_module.display());
        }
        SdkRounds::start(
            Command::new("node")
                .args([
                    "--input-type=module",
                    "-e",
                    &format!("{TS_POOL}{TS_ROUND_TRIP}"),
                ])
                .arg(&ts_module),
            server,
            &id,
        )
    };
    let py = || -> Result<SdkRounds> {
        if !args.python_sdk.exists() {
            bail!("{} not found", args.python_sdk.display());
        }
        SdkRounds::start(
            Command::new(&args.python_sdk).args(["-c", &format!("{PY_POOL}{PY_ROUND_TRIP}")]),
            server,
            &id,
        )
    };
    let mut sdks: Vec<(&str, Option<SdkRounds>, Vec<f64>)> = Vec::new();
    for (name, started) in [
        ("runCode('1+1') round trip, warm (TypeScript SDK)", ts()),
        ("runCode('1+1') round trip, warm (Python SDK)", py()),
    ] {
        match started {
            Ok(p) => sdks.push((name, Some(p), Vec::new())),
            Err(e) => eprintln!("{name} skipped: {e:#}"),
        }
    }
    let mut rust = Vec::new();
    for _ in 0..ROUND_TRIP_ROUNDS {
        for (name, program, samples) in sdks.iter_mut() {
            let Some(p) = program else { continue };
            match p.round(per_round) {
                Ok(v) => samples.extend(v),
                Err(e) => {
                    eprintln!("{name} skipped: {e:#}");
                    *program = None;
                    samples.clear();
                }
            }
        }
        rust.extend(rt.block_on(round_trips(c, &id, per_round))?);
    }
    // The SDKs' programs end (their stdin closed) before their sandbox goes.
    for (_, program, _) in sdks.iter_mut() {
        *program = None;
    }
    rt.block_on(c.kill_sandbox(&id))?;
    let mut figures = vec![stats(
        RUST_ROUND_TRIP,
        "ms",
        rust,
        Some("≤ 2 ms, ≤ 1.0× Jupyter"),
    )];
    let rust_median = figures[0].median;
    for (name, _, samples) in sdks {
        if samples.is_empty() {
            continue;
        }
        let mut f = stats(name, "ms", samples, Some("≤ 1.15× the Rust client's"));
        f.rust_median = Some(rust_median);
        figures.push(f);
    }
    Ok(figures)
}

/// An SDK's round-trip program ([`TS_ROUND_TRIP`], [`PY_ROUND_TRIP`]) connected to one sandbox:
/// each line `N` written to it measures `N` round trips, answered with one JSON line; its stdin's
/// end ends it.
struct SdkRounds {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl SdkRounds {
    fn start(cmd: &mut Command, server: &BenchServer, sandbox: &str) -> Result<SdkRounds> {
        let mut child = cmd
            .arg(sandbox)
            .env("LIZARD_API_URL", &server.url)
            .env("LIZARD_API_KEY", &server.key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the SDK's benchmark")?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .context("the SDK's benchmark has no stdout")?;
        Ok(SdkRounds {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
        })
    }

    fn round(&mut self, n: usize) -> Result<Vec<f64>> {
        use std::io::{BufRead, Write};
        let stdin = self.stdin.as_mut().context("ended")?;
        writeln!(stdin, "{n}")?;
        stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the SDK's benchmark ended ({:?})", self.child.wait()?);
        }
        samples_of(&serde_json::from_str(&line)?, "round_trip")
    }
}

impl Drop for SdkRounds {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Adds the SDKs' figures (the TypeScript SDK's at `ts_at`), their round trips compared with the
/// Rust client's in `figures`. An SDK that cannot run is skipped with a note.
fn sdk_figures(args: &BenchArgs, server: &BenchServer, figures: &mut Vec<Figure>, ts_at: usize) {
    match ts_figures(args, server) {
        Ok(f) => figures.splice(ts_at..ts_at, f).for_each(drop),
        Err(e) => eprintln!("TypeScript SDK figures skipped: {e:#}"),
    }
    match python_figures(args, server) {
        Ok(f) => figures.extend(f),
        Err(e) => eprintln!("Python SDK figure skipped: {e:#}"),
    }
    let rust = figures
        .iter()
        .find(|f| f.name == RUST_ROUND_TRIP)
        .map(|f| f.median);
    for f in figures.iter_mut() {
        if f.name.starts_with(RUST_ROUND_TRIP) && f.name != RUST_ROUND_TRIP {
            f.rust_median = rust;
        }
    }
}

/// One sandbox created, `1+1` run in it (checked) and killed: (ms to the create's answer, ms to
/// the first result).
async fn create_first_result(c: &Client) -> Result<(f64, f64)> {
    let t = Instant::now();
    let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
    let created = ms(t.elapsed());
    let ex = c.run(&sb.sandbox_id, &exec("1+1")).await?;
    let first = ms(t.elapsed());
    if ex.main_result().is_none() {
        bail!("1+1 gave no result: {ex:?}");
    }
    c.kill_sandbox(&sb.sandbox_id).await?;
    Ok((created, first))
}

/// `--only-contexts`: create → first result (warm pool), createContext per language and memory per
/// idle sandbox: the figures the Python zygote changes.
async fn context_only_figures(args: &BenchArgs, c: &Client) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let mut create_first = Vec::new();
    for _ in 0..args.samples {
        tokio::time::sleep(Duration::from_millis(400)).await;
        create_first.push(create_first_result(c).await?.1);
    }
    out.push(stats(
        "create → first runCode('1+1') (Rust client, warm pool)",
        "ms",
        create_first,
        Some("≤ 50 ms"),
    ));
    let req = CreateSandboxRequest::default();
    let sb = c.create_sandbox(&req).await?;
    c.run(&sb.sandbox_id, &exec("1+1")).await?;
    out.extend(create_context_figures(c, &sb.sandbox_id, args.samples).await?);
    c.kill_sandbox(&sb.sandbox_id).await?;
    out.extend(memory_figures(args, c, &req).await?);
    Ok(out)
}

/// What the TypeScript benchmarks share: waiting until the server's warm pool holds what it aims
/// at (its `/metrics` gauges; the bench's key is an admin's), at most a minute, so that no refill
/// runs beside what is measured next.
const TS_POOL: &str = r#"
async function pool() {
  const res = await fetch(`${process.env.LIZARD_API_URL}/metrics`, {
    headers: { authorization: `Bearer ${process.env.LIZARD_API_KEY}` },
  });
  const text = await res.text();
  const g = (name) => Number(text.match(new RegExp(`^${name} (\\d+)$`, 'm'))?.[1] ?? 0);
  return { ready: g('lizard_pool_ready'), target: g('lizard_pool_target') };
}
async function refilled() {
  const until = performance.now() + 60_000;
  for (;;) {
    const p = await pool();
    if (p.ready >= p.target || performance.now() > until) return;
    await new Promise((r) => setTimeout(r, 200));
  }
}
"#;

const TS_BENCH: &str = r#"
const { CodeSandbox } = await import(process.argv[1]);
const n = Number(process.argv[2]);
const createFirst = [], roundTrip = [];
// The round trip first, once the pool has refilled: nothing else runs beside it.
const sandbox = await CodeSandbox.create({ project: 'bench' });
for (let i = 0; i < 20; i++) await sandbox.runCode('1+1');
await refilled();
for (let i = 0; i < n * 10; i++) {
  const t = performance.now();
  await sandbox.runCode('1+1');
  roundTrip.push(performance.now() - t);
}
await sandbox.kill();
for (let i = 0; i < n; i++) {
  await new Promise((r) => setTimeout(r, 400));
  const t = performance.now();
  const sandbox = await CodeSandbox.create({ project: 'bench' });
  const r = await sandbox.runCode('1+1');
  createFirst.push(performance.now() - t);
  if (r.results[0]?.data !== '2') throw new Error('unexpected result');
  await sandbox.kill();
}
console.log(JSON.stringify({ create_first: createFirst, round_trip: roundTrip }));
"#;

/// The TypeScript SDK's program of `--only-round-trips` ([`SdkRounds`]): connect to sandbox
/// `argv[2]`, warm up, then for each line `N` on stdin wait for the pool and measure `N` round trips.
const TS_ROUND_TRIP: &str = r#"
const { CodeSandbox } = await import(process.argv[1]);
const { createInterface } = await import('node:readline');
const sandbox = await CodeSandbox.connect(process.argv[2]);
for (let i = 0; i < 50; i++) await sandbox.runCode('1+1');
for await (const line of createInterface({ input: process.stdin })) {
  await refilled();
  const roundTrip = [];
  for (let i = 0; i < Number(line); i++) {
    const t = performance.now();
    await sandbox.runCode('1+1');
    roundTrip.push(performance.now() - t);
  }
  console.log(JSON.stringify({ round_trip: roundTrip }));
}
"#;

const TS_LOAD_BENCH: &str = r#"
const { CodeSandbox } = await import(process.argv[1]);
const [burst, rate, seconds] = process.argv.slice(2).map(Number);
async function first() {
  const t = performance.now();
  const sandbox = await CodeSandbox.create({ project: 'bench' });
  const r = await sandbox.runCode('1+1');
  const ms = performance.now() - t;
  if (r.results[0]?.data !== '2') throw new Error('unexpected result');
  return { sandbox, ms };
}
async function burstOf(n) {
  await refilled();
  const b = await Promise.all(Array.from({ length: n }, first));
  await Promise.all(b.map(({ sandbox }) => sandbox.kill()));
  return b.map(({ ms }) => ms);
}
// A burst: `burst` creates at once, as a fleet of agents starting together; then another, once
// the pool has been sized by the first.
const b = await burstOf(burst);
const again = await burstOf(burst);
await refilled();
// Sustained: `rate` creates a second for `seconds`, each sandbox killed once it answered.
const sustained = [];
const pending = [];
const start = performance.now();
for (let i = 0; i < rate * seconds; i++) {
  const wait = start + (i * 1000) / rate - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  pending.push(first().then(async ({ sandbox, ms }) => {
    sustained.push(ms);
    await sandbox.kill();
  }));
}
await Promise.all(pending);
console.log(JSON.stringify({ burst: b, again, sustained }));
"#;

/// What the Python benchmarks share: `refilled()` waits until the server's warm pool holds what it
/// aims at (its `/metrics` gauges; the bench's key is an admin's), at most a minute (as
/// [`TS_POOL`]).
const PY_POOL: &str = r#"
import os, re, time, urllib.request
def refilled():
    req = urllib.request.Request(os.environ["LIZARD_API_URL"] + "/metrics",
                                 headers={"authorization": "Bearer " + os.environ["LIZARD_API_KEY"]})
    until = time.monotonic() + 60
    while time.monotonic() < until:
        text = urllib.request.urlopen(req).read().decode()
        g = {k: int(v) for k, v in re.findall(r"^(lizard_pool_\w+) (\d+)$", text, re.M)}
        if g.get("lizard_pool_ready", 0) >= g.get("lizard_pool_target", 0):
            return
        time.sleep(0.2)
"#;

const PY_BENCH: &str = r#"
import json, sys, time
from lizard import CodeSandbox
n = int(sys.argv[1])
sandbox = CodeSandbox.create(project="bench")
for _ in range(20):
    sandbox.run_code("1+1")
# Once the pool has refilled: nothing else runs beside.
refilled()
rts = []
for _ in range(n * 10):
    t = time.perf_counter()
    sandbox.run_code("1+1")
    rts.append((time.perf_counter() - t) * 1000)
sandbox.kill()
print(json.dumps({"round_trip": rts}))
"#;

/// The Python SDK's program of `--only-round-trips` (as [`TS_ROUND_TRIP`]).
const PY_ROUND_TRIP: &str = r#"
import json, sys, time
from lizard import CodeSandbox
sandbox = CodeSandbox.connect(sys.argv[1])
for _ in range(50):
    sandbox.run_code("1+1")
for line in sys.stdin:
    refilled()
    rts = []
    for _ in range(int(line)):
        t = time.perf_counter()
        sandbox.run_code("1+1")
        rts.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"round_trip": rts}), flush=True)
"#;

/// A new sandbox holding 200 MB of numpy state (`state`) in its Python context.
async fn sandbox_with_200_mb(c: &Client) -> Result<String> {
    let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
    let ex = c
        .run(
            &sb.sandbox_id,
            &exec("import numpy as np\nstate = np.ones(25_000_000)  # 200 MB\nstate.nbytes"),
        )
        .await?;
    if ex.error.is_some() {
        bail!("setting up 200 MB of state failed: {:?}", ex.error);
    }
    Ok(sb.sandbox_id)
}

/// Ten clones of snapshot `snap`, each with every page of `state` touched.
async fn ten_clones(c: &Client, snap: &str, touch: &str) -> Result<Vec<String>> {
    let mut clones = Vec::new();
    for _ in 0..10 {
        let cl = c.create_from_snapshot(snap, None).await?;
        c.run(&cl.sandbox_id, &exec(touch)).await?;
        clones.push(cl.sandbox_id);
    }
    Ok(clones)
}

/// MiB (PSS) that `clones` hold beyond the one copy `source` holds, as a one-sample figure.
fn beyond_one_copy(name: &str, source: &str, clones: &[String]) -> Figure {
    let one = sandbox_pss_kib(source) as f64 / 1024.0;
    let all: f64 = clones
        .iter()
        .map(|c| sandbox_pss_kib(c) as f64)
        .sum::<f64>()
        / 1024.0;
    stats(
        name,
        "MiB",
        vec![all - one],
        Some("report; share pages where possible"),
    )
}

/// Pause → resume → first result in memory, and hibernate → resume → first result from disk, of a
/// sandbox holding 200 MB of numpy state in its Python context.
async fn hibernation_figures(args: &BenchArgs, c: &Client) -> Result<Vec<Figure>> {
    let n = args.samples;
    let mut out = Vec::new();
    let id = sandbox_with_200_mb(c).await?;
    let mut resume = Vec::new();
    let mut pause = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        c.pause(&id).await?;
        pause.push(ms(t.elapsed()));
        let t = Instant::now();
        c.resume(&id).await?;
        c.run(&id, &exec("1+1")).await?;
        resume.push(ms(t.elapsed()));
    }
    out.push(stats("pause (freeze), 200 MB state", "ms", pause, None));
    out.push(stats(
        "resume → first result (memory), 200 MB state",
        "ms",
        resume,
        Some("≤ 10 ms"),
    ));

    let mut hibernate = Vec::new();
    let mut wake = Vec::new();
    let mut method = String::from("?");
    for _ in 0..n {
        let t = Instant::now();
        let h = c.hibernate(&id).await?;
        hibernate.push(ms(t.elapsed()));
        if h.state != lizard_proto::SandboxState::Hibernated {
            bail!("hibernate answered state {:?}", h.state);
        }
        if let Some(r) = &h.hibernation {
            method = serde_json::to_value(r.method)?
                .as_str()
                .unwrap_or("?")
                .to_string();
        }
        let t = Instant::now();
        let r = c.resume(&id).await?;
        let ex = c.run(&id, &exec("int(state.sum())")).await?;
        wake.push(ms(t.elapsed()));
        let lost: usize = r
            .restore
            .iter()
            .flat_map(|r| &r.contexts)
            .map(|c| c.lost.len())
            .sum();
        if ex.main_result().is_none() || lost > 0 {
            bail!(
                "the state did not survive hibernation: {ex:?} {:?}",
                r.restore
            );
        }
    }
    // Targets: issue #17's for the exact method, the earlier ones for per-language saves.
    let exact = method == "criu";
    out.push(stats(
        &format!("hibernate (save to disk, stop), 200 MB state, {method}"),
        "ms",
        hibernate,
        exact.then_some("≤ 300 ms"),
    ));
    out.push(stats(
        &format!("resume → first result (disk), 200 MB state, {method}"),
        "ms",
        wake,
        Some(if exact { "≤ 300 ms" } else { "≤ 500 ms" }),
    ));
    c.kill_sandbox(&id).await?;
    Ok(out)
}

/// Snapshot of a sandbox holding 200 MB of Python state, clone → first result from it, sandbox
/// fork, and context fork → first result in the new context per language.
async fn checkpoint_figures(args: &BenchArgs, c: &Client) -> Result<Vec<Figure>> {
    let n = args.samples.min(10);
    let mut out = Vec::new();
    let id = sandbox_with_200_mb(c).await?;
    let (mut snap, mut frozen, mut clone) = (Vec::new(), Vec::new(), Vec::new());
    let mut method = String::new();
    for _ in 0..n {
        let t = Instant::now();
        let s = c.create_snapshot(&id, &Default::default()).await?;
        snap.push(ms(t.elapsed()));
        frozen.extend(s.frozen_ms.map(|f| f as f64));
        method = serde_json::to_value(s.method)?
            .as_str()
            .unwrap_or("?")
            .to_string();
        let t = Instant::now();
        let cl = c.create_from_snapshot(&s.snapshot_id, None).await?;
        let ex = c.run(&cl.sandbox_id, &exec("int(state.sum())")).await?;
        clone.push(ms(t.elapsed()));
        if ex.main_result().is_none() {
            bail!("a clone lost the state: {ex:?}");
        }
        c.kill_sandbox(&cl.sandbox_id).await?;
        c.delete_snapshot(&s.snapshot_id).await?;
    }
    out.push(stats(
        &format!("snapshot (memory + disk), 200 MB state, {method}: the whole call"),
        "ms",
        snap,
        None,
    ));
    out.push(stats(
        "snapshot, 200 MB state: source frozen",
        "ms",
        frozen,
        Some("≤ 300 ms"),
    ));
    out.push(stats(
        "clone from a snapshot → first result, 200 MB state",
        "ms",
        clone,
        Some("≤ 300 ms"),
    ));
    // 10 clones of one snapshot: what they hold beyond one copy of the state (PSS: pages shared
    // between them, e.g. a common page cache, counted once).
    let s = c.create_snapshot(&id, &Default::default()).await?;
    let clones = ten_clones(c, &s.snapshot_id, "int(state.sum())").await?;
    out.push(beyond_one_copy(
        "10 clones of one snapshot (200 MB state): memory beyond one copy",
        &id,
        &clones,
    ));
    for cl in clones {
        c.kill_sandbox(&cl).await?;
    }
    c.delete_snapshot(&s.snapshot_id).await?;

    let mut fork = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let f = c.fork_sandbox(&id, &Default::default()).await?;
        c.run(&f.sandbox_id, &exec("1+1")).await?;
        fork.push(ms(t.elapsed()));
        c.kill_sandbox(&f.sandbox_id).await?;
    }
    out.push(stats(
        "fork a sandbox → first result, 200 MB state",
        "ms",
        fork,
        None,
    ));
    c.kill_sandbox(&id).await?;

    let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
    let id = sb.sandbox_id;
    for lang in Language::ALL {
        let src = c
            .create_context(
                &id,
                &CreateContextRequest {
                    language: Some(lang),
                    cwd: None,
                    limits: None,
                },
            )
            .await?;
        let warm = match lang {
            Language::Python => "x = 1",
            Language::Javascript => "let x = 1",
            Language::Bash => "x=1",
        };
        c.run(&id, &in_context(warm, src.id.as_str())).await?;
        let v = fork_samples(c, &id, src.id.as_str(), lang, args.samples.min(20), None).await?;
        out.push(stats(
            &format!("fork a context({lang}) → first result"),
            "ms",
            v,
            Some("≤ 10 ms"),
        ));
        // With something a live fork loses (a thread, a listening server, a background job):
        // the exact fork (a CRIU checkpoint of the kernel's processes), where the server has CRIU.
        let busy = match lang {
            Language::Python => {
                "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()"
            }
            Language::Javascript => "globalThis.srv = require('net').createServer().listen(0)",
            Language::Bash => "sleep 3600 &",
        };
        c.run(&id, &in_context(busy, src.id.as_str())).await?;
        let v = fork_samples(
            c,
            &id,
            src.id.as_str(),
            lang,
            args.samples.min(20),
            Some(lizard_proto::ForkMethod::Checkpoint),
        )
        .await?;
        if !v.is_empty() {
            out.push(stats(
                &format!("exact fork of a context({lang}) → first result"),
                "ms",
                v,
                None,
            ));
        }
        c.delete_context(&id, src.id.as_str()).await?;
    }
    c.kill_sandbox(&id).await?;
    Ok(out)
}

/// `n` times: fork context `src` of sandbox `id` and run a probe of `x` in the fork (ms each);
/// with `method`, stop at the first fork made otherwise (then fewer samples, maybe none).
async fn fork_samples(
    c: &lizard_client::Client,
    id: &str,
    src: &str,
    lang: Language,
    n: usize,
    method: Option<lizard_proto::ForkMethod>,
) -> Result<Vec<f64>> {
    let probe = if lang == Language::Bash {
        "echo $x"
    } else {
        "x"
    };
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let f = c.fork_context(id, src, &Default::default()).await?;
        if method.is_some_and(|m| m != f.method) {
            c.delete_context(id, f.context.id.as_str()).await?;
            break;
        }
        c.run(id, &in_context(probe, f.context.id.as_str())).await?;
        v.push(ms(t.elapsed()));
        c.delete_context(id, f.context.id.as_str()).await?;
    }
    Ok(v)
}

fn in_context(code: &str, ctx: &str) -> ExecuteRequest {
    ExecuteRequest {
        context: Some(ctx.into()),
        ..exec(code)
    }
}

/// create → first result and the round trip through the TypeScript SDK, as a user's Node
/// program would see them.
fn ts_figures(args: &BenchArgs, server: &BenchServer) -> Result<Vec<Figure>> {
    let module = std::path::absolute(&args.ts_sdk)?;
    if !module.exists() {
        bail!("{} not found", module.display());
    }
    let v = sdk_bench(
        Command::new("node")
            .args(["--input-type=module", "-e", &format!("{TS_POOL}{TS_BENCH}")])
            .arg(&module),
        args,
        server,
    )?;
    Ok(vec![
        stats(
            "create → first runCode('1+1') (TypeScript SDK, warm pool)",
            "ms",
            samples_of(&v, "create_first")?,
            Some("≤ 50 ms"),
        ),
        stats(
            "runCode('1+1') round trip, warm (TypeScript SDK)",
            "ms",
            samples_of(&v, "round_trip")?,
            Some("≤ 1.15× the Rust client's"),
        ),
    ])
}

/// create → first result under load, through the TypeScript SDK, on a server of its own with
/// the default pool: a burst of `--burst` creates at once, then `--sustained-rate` creates a
/// second for `--sustained-s`. Its disks may promise 8× the free space (a burst of 1 GiB disks on
/// a small test disk would otherwise be refused; nothing is written to them).
fn load_figures(args: &BenchArgs, templates_from: &std::path::Path) -> Result<Vec<Figure>> {
    let module = std::path::absolute(&args.ts_sdk)?;
    if !module.exists() {
        bail!("{} not found", module.display());
    }
    let pool_max = args.pool_max.map(|n| n.to_string());
    let mut extra = vec!["--disk-overcommit", "8"];
    extra.extend(pool_max.iter().flat_map(|n| ["--pool-max", n.as_str()]));
    let server = start_server_with(templates_from, None, &args.agent_env, &extra)?;
    let v = sdk_bench(
        Command::new("node")
            .args([
                "--input-type=module",
                "-e",
                &format!("{TS_POOL}{TS_LOAD_BENCH}"),
            ])
            .arg(&module)
            .arg(args.burst.to_string())
            .arg(args.sustained_rate.to_string())
            .arg(args.sustained_s.to_string()),
        args,
        &server,
    )?;
    Ok(vec![
        stats(
            &format!(
                "create → first result, TypeScript SDK, {} creates at once",
                args.burst
            ),
            "ms",
            samples_of(&v, "burst")?,
            Some("p95 ≤ 50 ms"),
        ),
        stats(
            &match args.pool_max {
                Some(max) => format!(
                    "… {} at once again, the pool refilled (and sized by the first, --pool-max {max})",
                    args.burst
                ),
                None => format!("… {} at once again, the pool refilled", args.burst),
            },
            "ms",
            samples_of(&v, "again")?,
            Some("p95 ≤ 50 ms"),
        ),
        stats(
            &format!(
                "create → first result, TypeScript SDK, {}/s for {} s",
                args.sustained_rate, args.sustained_s
            ),
            "ms",
            samples_of(&v, "sustained")?,
            Some("p95 ≤ 25 ms"),
        ),
    ])
}

/// The round trip through the Python SDK (its synchronous client).
fn python_figures(args: &BenchArgs, server: &BenchServer) -> Result<Vec<Figure>> {
    if !args.python_sdk.exists() {
        bail!("{} not found", args.python_sdk.display());
    }
    let v = sdk_bench(
        Command::new(&args.python_sdk).args(["-c", &format!("{PY_POOL}{PY_BENCH}")]),
        args,
        server,
    )?;
    Ok(vec![stats(
        "runCode('1+1') round trip, warm (Python SDK)",
        "ms",
        samples_of(&v, "round_trip")?,
        Some("≤ 1.15× the Rust client's"),
    )])
}

/// Runs an SDK's benchmark program against `server` (samples per figure as its last argument),
/// and reads the JSON it prints.
fn sdk_bench(
    cmd: &mut Command,
    args: &BenchArgs,
    server: &BenchServer,
) -> Result<serde_json::Value> {
    sdk_run(cmd.arg(args.samples.to_string()), server)
}

/// Runs an SDK's benchmark program against `server` and reads the JSON it prints.
fn sdk_run(cmd: &mut Command, server: &BenchServer) -> Result<serde_json::Value> {
    let out = cmd
        .env("LIZARD_API_URL", &server.url)
        .env("LIZARD_API_KEY", &server.key)
        .stderr(Stdio::inherit())
        .output()
        .context("running the SDK's benchmark")?;
    if !out.status.success() {
        bail!("the SDK benchmark failed ({})", out.status);
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn samples_of(v: &serde_json::Value, key: &str) -> Result<Vec<f64>> {
    Ok(serde_json::from_value(v[key].clone())?)
}

const JUPYTER_BENCH: &str = r#"
import json, sys, time
from jupyter_client.manager import start_new_kernel
n = int(sys.argv[1])
starts, rts = [], []
for i in range(max(3, n // 5)):
    t = time.perf_counter()
    km, kc = start_new_kernel(kernel_name="python3")
    kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: None)
    starts.append((time.perf_counter() - t) * 1000)
    if i == 0:
        for _ in range(n * 10):
            t = time.perf_counter()
            kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: None)
            rts.append((time.perf_counter() - t) * 1000)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps({"start_first": starts, "round_trip": rts}))
"#;

fn jupyter_python(args: &BenchArgs) -> Result<PathBuf> {
    if let Some(p) = &args.jupyter_python {
        return Ok(p.clone());
    }
    let venv = PathBuf::from("target/bench-venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        eprintln!("preparing {} (jupyter_client, ipykernel)", venv.display());
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?
            .success()
            && Command::new(&py)
                .args(["-m", "pip", "install", "-q", "jupyter_client", "ipykernel"])
                .status()?
                .success();
        if !ok {
            bail!("could not prepare the Jupyter baseline venv");
        }
    }
    Ok(py)
}

fn jupyter_figures(args: &BenchArgs) -> Result<(Vec<f64>, Vec<f64>)> {
    let py = jupyter_python(args)?;
    let out = Command::new(py)
        .args(["-c", JUPYTER_BENCH, &args.samples.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("the Jupyter baseline failed");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let get = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default()
    };
    Ok((get("start_first"), get("round_trip")))
}

/// 10 clones of one snapshot holding 200 MB of random bytes (no page of it like another, so only
/// pages alike between clones can merge), on a server with `--share-clone-memory`: memory (PSS)
/// beyond the source's one copy once same-page merging settled, and how long it took to settle.
/// KSM's scan rate is raised to 2,000 pages per wake-up for the measurement and put back after
/// (the kernel's default, 100 per 20 ms, takes minutes over 2 GB). Skipped without KSM.
fn shared_clone_memory_figures(
    templates_from: &std::path::Path,
    args: &BenchArgs,
) -> Result<Vec<Figure>> {
    if lizard_jail::ksm::stats().is_none() {
        eprintln!("shared clone memory figures skipped: this kernel has no KSM");
        return Ok(Vec::new());
    }
    let server = start_server_with(
        templates_from,
        Some(0),
        &args.agent_env,
        &["--share-clone-memory"],
    )?;
    struct ScanRate(u64);
    impl Drop for ScanRate {
        fn drop(&mut self) {
            let _ = lizard_jail::ksm::set_pages_to_scan(self.0);
        }
    }
    let rate = 2000;
    let _put_back = ScanRate(lizard_jail::ksm::set_pages_to_scan(rate)?);
    let c = &server.client;
    eprintln!("measuring shared clone memory (KSM, pages_to_scan {rate})…");
    runtime()?.block_on(async {
        let sb = c.create_sandbox(&CreateSandboxRequest::default()).await?;
        let id = sb.sandbox_id;
        let ex = c
            .run(
                &id,
                &exec(
                    "import numpy as np\n\
                     state = np.random.default_rng(7).random(25_000_000)  # 200 MB\n\
                     state.nbytes",
                ),
            )
            .await?;
        if ex.error.is_some() {
            bail!("setting up 200 MB of random state failed: {:?}", ex.error);
        }
        let s = c.create_snapshot(&id, &Default::default()).await?;
        let clones = ten_clones(c, &s.snapshot_id, "float(state.sum())").await?;
        // Settled: three full scans since the clones exist and nothing more merged over the last.
        let t = Instant::now();
        let start = lizard_jail::ksm::stats().unwrap_or_default();
        let mut last = start;
        let settled_ms = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = lizard_jail::ksm::stats().unwrap_or_default();
            if now.full_scans >= start.full_scans + 3
                && now.full_scans > last.full_scans
                && now.pages_sharing == last.pages_sharing
            {
                break ms(t.elapsed());
            }
            if now.full_scans > last.full_scans {
                last = now;
            }
            if t.elapsed() > Duration::from_secs(600) {
                eprintln!("KSM had not settled after 600 s");
                break ms(t.elapsed());
            }
        };
        let beyond = beyond_one_copy(
            "10 clones, 200 MB random state, --share-clone-memory: memory beyond one copy once merged",
            &id,
            &clones,
        );
        let mut settle = stats(
            &format!("… same-page merging settled after (KSM pages_to_scan {rate})"),
            "ms",
            vec![settled_ms],
            None,
        );
        settle.p95 = settle.median;
        for cl in clones {
            c.kill_sandbox(&cl).await?;
        }
        c.delete_snapshot(&s.snapshot_id).await?;
        c.kill_sandbox(&id).await?;
        Ok(vec![beyond, settle])
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn bench(args: BenchArgs) -> Result<()> {
    HOST_ZYGOTES.store(args.host_zygotes, std::sync::atomic::Ordering::Relaxed);
    let templates_from = crate::data_dir(args.templates_from.clone())?;
    if args.only_hibernation {
        let server = start_server(&templates_from, 2, &args.agent_env)?;
        let rt = runtime()?;
        eprintln!(
            "measuring pause and hibernation ({} samples per figure)…",
            args.samples
        );
        let figures = rt.block_on(hibernation_figures(&args, &server.client))?;
        return report(&args, &figures);
    }
    if args.only_checkpoints {
        let server = start_server(&templates_from, 2, &args.agent_env)?;
        let rt = runtime()?;
        eprintln!("measuring snapshots and forks…");
        let mut figures = rt.block_on(checkpoint_figures(&args, &server.client))?;
        drop(server);
        figures.extend(shared_clone_memory_figures(&templates_from, &args)?);
        return report(&args, &figures);
    }
    if args.only_round_trips {
        let server = start_server(&templates_from, 2, &args.agent_env)?;
        eprintln!("measuring round trips ({} samples × 10)…", args.samples);
        let figures = round_trip_figures(&args, &server)?;
        return report(&args, &figures);
    }
    if args.only_load {
        eprintln!(
            "measuring creates under load ({} at once, {}/s for {} s)…",
            args.burst, args.sustained_rate, args.sustained_s
        );
        let figures = load_figures(&args, &templates_from)?;
        return report(&args, &figures);
    }
    if args.only_throughput {
        let server = start_server(&templates_from, 2, &args.agent_env)?;
        let rt = runtime()?;
        eprintln!("measuring trivial executions a second…");
        let figures = rt.block_on(async {
            Ok::<_, anyhow::Error>(vec![
                throughput_figure(&server.client, 2, 2, Some("≥ 3000/s")).await?,
                throughput_figure(&server.client, 4, 4, None).await?,
            ])
        })?;
        return report(&args, &figures);
    }
    if args.only_contexts {
        let server = start_server(&templates_from, 2, &args.agent_env)?;
        let rt = runtime()?;
        eprintln!(
            "measuring contexts and memory ({} samples per figure)…",
            args.samples
        );
        let figures = rt.block_on(context_only_figures(&args, &server.client))?;
        return report(&args, &figures);
    }
    let server = start_server(&templates_from, 2, &args.agent_env)?;
    let cold = start_server(&templates_from, 0, &args.agent_env)?;
    let rt = runtime()?;
    eprintln!("measuring Lizard ({} samples per figure)…", args.samples);
    let mut figures = rt.block_on(lizard_figures(&args, &server.client, Some(&cold.client)))?;
    sdk_figures(&args, &server, &mut figures, 2);
    drop(server);
    drop(cold);
    match load_figures(&args, &templates_from) {
        Ok(f) => figures.extend(f),
        Err(e) => eprintln!("load figures skipped: {e:#}"),
    }
    figures.extend(shared_clone_memory_figures(&templates_from, &args)?);

    if !args.no_jupyter {
        eprintln!("measuring the Jupyter baseline…");
        match jupyter_figures(&args) {
            Ok((start, round)) => {
                let js = stats("jupyter", "ms", start, None).median;
                let jr = stats("jupyter", "ms", round, None).median;
                for f in &mut figures {
                    if f.name.starts_with("create → first") && f.name.contains("warm pool") {
                        f.jupyter_median = Some(js);
                    } else if f.name.starts_with("runCode('1+1') round trip") {
                        f.jupyter_median = Some(jr);
                    }
                }
            }
            Err(e) => eprintln!("Jupyter baseline skipped: {e:#}"),
        }
    }

    report(&args, &figures)
}

/// Print the table and write the JSON file.
fn report(args: &BenchArgs, figures: &[Figure]) -> Result<()> {
    println!(
        "{:<60} {:>10} {:>10} {:>10} {:>9} {:>12} {:>8} {:>8}  target",
        "figure", "median", "p95", "p99", "unit", "jupyter", "ratio", "vs rust"
    );
    for f in figures {
        let (j, r) = match f.jupyter_median {
            Some(j) => (format!("{j:.2}"), format!("{:.2}×", f.median / j)),
            None => (String::from("-"), String::from("-")),
        };
        let vs_rust = f
            .rust_median
            .map_or(String::from("-"), |m| format!("{:.2}×", f.median / m));
        println!(
            "{:<60} {:>10.2} {:>10.2} {:>10.2} {:>9} {:>12} {:>8} {:>8}  {}",
            f.name,
            f.median,
            f.p95,
            f.p99,
            f.unit,
            j,
            r,
            vs_rust,
            f.target.as_deref().unwrap_or("")
        );
    }
    if let Some(parent) = args.json_out.parent() {
        std::fs::create_dir_all(parent).ok();
    }
    std::fs::write(
        &args.json_out,
        serde_json::to_vec_pretty(&serde_json::json!({
            "machine": {"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
            "figures": figures,
        }))?,
    )
    .with_context(|| format!("writing {}", args.json_out.display()))?;
    eprintln!("wrote {}", args.json_out.display());
    Ok(())
}
