//! The `netchaos` binary: parse the command line, set up logging, run the
//! command, and turn its result into an exit code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use netchaos::cli::{Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2.
    let matches =
        Cli::command().get_matches_from(netchaos::cli::toxiproxy_argv(std::env::args_os()));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if prints_only(&cli.command) {
        // `netchaos faults | head` ends quietly, as other Unix tools do: Rust
        // ignores SIGPIPE, and print! panics on the broken pipe. Only for
        // commands that print and relay nothing: a relay's splice() into a
        // closed socket must get EPIPE, not the signal.
        // SAFETY: no other thread exists yet, and SIG_DFL is a valid disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // The demo's output is its table; its fault log lines only with -v.
    let quiet = cli.global.quiet + u8::from(matches!(cli.command, Command::Demo(_)));
    init_logging(
        cli.global.verbose,
        quiet,
        matches!(cli.command, Command::Server(_)),
    );
    match netchaos::commands::run(cli, &matches) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("netchaos: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Commands whose whole work is printing to stdout.
fn prints_only(command: &Command) -> bool {
    matches!(
        command,
        Command::Check(_)
            | Command::Profiles
            | Command::Faults { .. }
            | Command::Records(_)
            | Command::Schema
            | Command::Completions { .. }
            | Command::Man { .. }
    )
}

fn init_logging(verbose: u8, quiet: u8, server: bool) {
    let level = match i16::from(verbose) - i16::from(quiet) {
        i16::MIN..=-2 => "error",
        -1 => "warn",
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    // For `server`, Toxiproxy's LOG_LEVEL sets the level; NETCHAOS_LOG overrides both, in
    // tracing's filter syntax.
    let toxiproxy_level = std::env::var("LOG_LEVEL").ok().filter(|_| server);
    let level = match toxiproxy_level.as_deref() {
        Some("trace") => "trace",
        Some("debug") => "debug",
        Some("info") => "info",
        Some("warn") => "warn",
        Some("error" | "fatal" | "panic") => "error",
        _ => level,
    };
    let filter = EnvFilter::try_from_env("NETCHAOS_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("netchaos={level},warn")));
    // Colour only for a person at a terminal, and never with NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(false)
        .compact()
        .init();
}
