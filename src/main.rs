//! The `netchaos` binary: parse the command line, set up logging, run the
//! command, and turn its result into an exit code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use netchaos::cli::{Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The demo's output is its table; its fault log lines only with -v.
    let quiet = cli.global.quiet + u8::from(matches!(cli.command, Command::Demo(_)));
    init_logging(cli.global.verbose, quiet);
    match netchaos::commands::run(cli, &matches) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("netchaos: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_logging(verbose: u8, quiet: u8) {
    let level = match i16::from(verbose) - i16::from(quiet) {
        i16::MIN..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    // NETCHAOS_LOG overrides, in tracing's filter syntax.
    let filter = EnvFilter::try_from_env("NETCHAOS_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("netchaos={level},warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .compact()
        .init();
}
