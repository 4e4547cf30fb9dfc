use std::process::ExitCode;

use clap::Parser;
use kruntimes_scheduler::workload::cli::{WorkloadCommand, run};

#[derive(Parser)]
#[command(name = "kruntimes-scheduler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Compile and validate workload trees.
    #[command(subcommand)]
    Workload(WorkloadCommand),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Workload(cmd) => run(cmd).unwrap_or_else(|e| {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }),
    }
}
