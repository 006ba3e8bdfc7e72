//! `pollfs`: the command-line front door.

mod bench;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "pollfs",
    version,
    about = "A user-space file engine for NVMe, polled, with no kernel on the data path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Random 4 KiB read/write mix on one cached file: pollfs against the
    /// kernel's page cache (pread/pwrite on tmpfs) in the same run.
    Bench(bench::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pollfs: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
