//! `kruntimes-scheduler`: the CLI. Everything else lives in the library.
#![deny(clippy::unwrap_used, clippy::expect_used)]

use clap::{Parser, Subcommand, ValueEnum};
use kruntimes_scheduler::agent::{self, AgentArgs};
use kruntimes_scheduler::serve::{self, ServeArgs};
use kruntimes_scheduler::workload::cli::WorkloadCommand;
use std::process::ExitCode;

/// mimalloc (the default feature `mimalloc`): the served decisions' tail
/// latency and the caches' memory are lower than on the system allocator
/// (docs/benchmarks.md). `--no-default-features` uses the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "kruntimes-scheduler",
    version,
    about = "Run placement and workload-aware scheduling for kruntimes on Kubernetes"
)]
struct Cli {
    /// Log format.
    #[arg(long, env = "KRS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API and run the Run scheduling loop.
    Serve(Box<ServeArgs>),
    /// Admit Runs on one Runtime Pod, over HTTP on a unix socket.
    Agent(Box<AgentArgs>),
    /// Compile and validate workload trees into Workload and PodGroups.
    #[command(subcommand)]
    Workload(WorkloadCommand),
    /// Write a CA and a serving certificate for the webhook Service; print the caBundle.
    Certs(kruntimes_scheduler::certs::CertsArgs),
    /// Ask a running service why a pod or a Run is pending.
    #[command(subcommand)]
    Explain(kruntimes_scheduler::explain::cli::ExplainCommand),
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    let command = match cli.command {
        Command::Workload(cmd) => {
            return kruntimes_scheduler::workload::cli::run(cmd).unwrap_or_else(|e| {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            });
        }
        Command::Certs(args) => return report(kruntimes_scheduler::certs::run(args)),
        other => other,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    report(runtime.block_on(async move {
        match command {
            Command::Serve(args) => serve::run(*args).await,
            Command::Agent(args) => agent::run(*args).await,
            Command::Explain(cmd) => kruntimes_scheduler::explain::cli::run(cmd).await,
            // Handled above, without an async runtime.
            Command::Workload(_) | Command::Certs(_) => Ok(()),
        }
    }))
}
