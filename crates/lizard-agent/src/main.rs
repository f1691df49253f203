//! `lizard-agent`: the in-sandbox execution agent as a standalone binary (the same agent also runs as
//! `lizard agent`). See `lizard_agent::cli` for its flags.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(version, about = "Lizard's in-sandbox execution agent")]
struct Cli {
    #[command(flatten)]
    agent: lizard_agent::cli::AgentArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "--build-fingerprint") {
        println!("{}", lizard_agent::BUILD_FINGERPRINT);
        return Ok(());
    }
    // `lizard-agent agent …` is `lizard agent …`: the server gives either binary the same
    // arguments.
    if args.get(1).is_some_and(|a| a == "agent") {
        args.remove(1);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIZARD_LOG")
                .unwrap_or_else(|_| "lizard_agent=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    lizard_agent::cli::run(Cli::parse_from(args).agent).await
}
