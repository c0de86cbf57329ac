//! The command line: clap definitions, and the one place where raw
//! arguments become validated options.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, ArgMatches, Args, Parser, Subcommand};

use crate::error::{Error, Result};
use crate::plan::{self, ProxySpec};

const AFTER_HELP: &str = "\
Exit codes: 0 success; 2 bad usage or an invalid profile (nothing was started);
1 a failure at run time (a busy port, a missing privilege, an unreachable kernel feature).

Environment: NETCHAOS_THREADS=N sets the relay's worker threads (default: one per two
CPUs); NETCHAOS_PEER_TIMEOUT how long a vanished peer may hold an idle connection;
NETCHAOS_HTTP_MEMORY the HTTP layer's memory budget (default 256MiB); NETCHAOS_LOG the
log filter.

Examples:
  netchaos demo
  netchaos run -p flaky -- pytest tests/
  sudo netchaos attach --pid $(pgrep -o my-service) -p slow-network
  netchaos proxy --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379 --fault latency:delay=100ms
  netchaos proxy -p http-503 --listen 8080 --upstream 127.0.0.1:80
  netchaos check my-profile.toml
  netchaos profiles";

/// Network-level fault injection for real, unmodified clients: a transparent
/// TCP relay that misbehaves on purpose.
#[derive(Debug, Parser)]
#[command(name = "netchaos", version = env!("NETCHAOS_VERSION"), after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Less output: -q warnings and errors only (no seed line, no summary:
    /// nothing at all on success; the seed is in the event log), -qq
    /// errors only.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub quiet: u8,
    /// Seed for every random choice; printed at start, so a run can be replayed.
    #[arg(long, value_name = "N", global = true)]
    pub seed: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command with every TCP connection it makes passing through the faults.
    #[command(long_about = RUN_ABOUT, after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Apply faults to a running container's or process's network namespace (root).
    #[command(long_about = ATTACH_ABOUT, after_help = ATTACH_AFTER_HELP)]
    Attach(AttachArgs),
    /// Remove what a killed netchaos left in a network namespace (table, gate, qdiscs).
    #[command(after_help = CLEAN_AFTER_HELP)]
    Clean(CleanArgs),
    /// Relay explicit listen → upstream pairs through the faults.
    Proxy(ProxyArgs),
    /// A Toxiproxy-compatible server: the control API, and proxies made through it.
    Server(ServerArgs),
    /// Talk to a running netchaos (or Toxiproxy) control API.
    Ctl(CtlArgs),
    /// Shape a network device's traffic with tc/netem: delay, loss, rate, … (root).
    Netem(NetemArgs),
    /// Validate profiles (and --fault flags) and print the resolved plan.
    Check(CheckArgs),
    /// List the built-in profiles with their descriptions.
    Profiles,
    /// List every fault type with its parameters, units and defaults.
    Faults {
        /// Only this fault type.
        #[arg(value_name = "TYPE")]
        name: Option<String>,
        /// Print the reference as Markdown (docs/faults-reference.md is this output).
        #[arg(long)]
        markdown: bool,
    },
    /// Answer LLM requests in the providers' wire formats (Anthropic, OpenAI): a hermetic upstream.
    #[command(long_about = MOCK_ABOUT)]
    Mock(MockArgs),
    /// Show the faults hitting a real client, against a built-in server.
    Demo(DemoArgs),
    /// Turn an event log (--events) into one self-contained HTML page: a timeline of every connection.
    Report(ReportArgs),
    /// Print an event log's HTTP request records: every attempt, grouped into logical requests; judge them with --expect.
    #[command(after_help = RECORDS_AFTER_HELP)]
    Records(RecordsArgs),
    /// Print the event log's JSON Schema: every line `--events` writes (docs/events.schema.json is this output).
    Schema,
    /// Run a drill: the commands under test without faults, then under each scenario's fault, judged by checks.
    #[command(after_help = DRILL_AFTER_HELP)]
    Drill(DrillArgs),
    /// Print a shell's completion script: `netchaos completions bash > /etc/bash_completion.d/netchaos`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `netchaos man | man -l -`; with a command, that command's.
    Man {
        /// A command (run, proxy, …) for its own page.
        #[arg(conflicts_with = "dir")]
        command: Option<String>,
        /// Write every page (netchaos.1, netchaos-run.1, …) into DIR
        /// instead, as packages install them.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
    /// The demo's client (run by `netchaos demo` under `netchaos run`).
    #[command(hide = true)]
    DemoClient {
        /// The demo server's address.
        addr: String,
        /// Send this many requests over one HTTPS keep-alive connection.
        #[arg(long, value_name = "N")]
        pooled: Option<u32>,
    },
}

/// The event log, for the commands that relay.
#[derive(Debug, Args, Clone)]
pub struct EventsArg {
    /// Write one JSON line per connection open/close and per injected fault
    /// (a new file is made 0600; a symbolic link is followed only when it
    /// belongs to this user or root).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// The event log's largest size: then one `truncated` line, and later
    /// events are only counted (the exit summary and /metrics stay whole).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = size_arg)]
    pub events_max: u64,
    /// At exit (Ctrl-C and SIGTERM too), write an HTML report of the run:
    /// a timeline of every connection, its faults and retries (see
    /// `netchaos report`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// At exit, judge the run's request records by CHECK (repeatable:
    /// `max_attempts=3`, `retry_after_honoured`, …; see `netchaos
    /// records` and docs/drills.md): exit 3, saying which requests broke
    /// it, when the command succeeded but a check failed.
    #[arg(long = "expect", value_name = "CHECK")]
    pub expect: Vec<String>,
    /// Record every HTTP attempt (`attempt` lines, for `netchaos records`
    /// and drills): connections without HTTP faults are followed by the
    /// HTTP layer too. Implied by --expect and --stop-if. HTTPS is seen
    /// under --tls or --mock only.
    #[arg(long)]
    pub records: bool,
    /// Record what real upstreams answer into DIR (made if need be), one
    /// JSON file per exchange with the moments of its bytes, credentials
    /// redacted: a cassette for --mock-from to replay. Only an exchange
    /// no fault acted on is recorded; HTTPS under --tls only. Implies
    /// --records.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// How --expect groups HTTP attempts into logical requests: auto,
    /// body, retry-count, attempt or header:NAME.
    #[arg(long, value_name = "RULE", default_value = "auto")]
    pub group_by: String,
    /// The guard-rail: remove every fault at once when the HTTP attempts'
    /// error rate crosses a line, e.g. "error_rate > 0.2 over 30s" (an
    /// attempt is an error when it got no whole answer or a status of 400
    /// or more; judged once 5 attempts are in the window).
    #[arg(long, value_name = "CONDITION")]
    pub stop_if: Option<String>,
}

impl Default for EventsArg {
    fn default() -> EventsArg {
        EventsArg {
            events: None,
            events_max: crate::events::DEFAULT_MAX,
            report: None,
            expect: Vec::new(),
            records: false,
            record: None,
            group_by: "auto".into(),
            stop_if: None,
        }
    }
}

/// `netchaos records`.
#[derive(Debug, Args, Clone)]
pub struct RecordsArgs {
    /// Event logs written with --events (or --report, --expect).
    #[arg(value_name = "EVENTS.jsonl", required = true)]
    pub logs: Vec<PathBuf>,
    /// Print JSON: one object per attempt, with its logical request.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV, a header line first.
    #[arg(long)]
    pub csv: bool,
    /// How attempts are grouped into logical requests: auto, body,
    /// retry-count, attempt or header:NAME.
    #[arg(long, value_name = "RULE", default_value = "auto")]
    pub group_by: String,
    /// Judge the records by CHECK (repeatable); exit 3 when one fails.
    #[arg(long = "expect", value_name = "CHECK")]
    pub expect: Vec<String>,
}

const RECORDS_AFTER_HELP: &str = "\
Every HTTP attempt the HTTP layer followed is one `attempt` line of the event
log: its target (host, and the JSON body's model), method, path, the status
or error the client met, time to the head and to the first body byte, the
faults that acted on it, the retry-after it was given, and the headers that
tie retries together (Idempotency-Key, x-stainless-retry-count, traceparent;
more with NETCHAOS_RECORD_HEADERS=name,name).

Checks: success_rate[=0.95], latency_p50|p95|p99=DUR, ttft_p95=DUR,
deadline=DUR, max_attempts=N, retry_after_honoured, backoff[=MIN,factor=F],
jitter, no_retry_on[=400,401,…], fallback=TARGET, fallback_share=SHARE,
breaker=N[,cooloff=DUR], idempotent_retries, no_duplicate_work[=N].

Examples:
  netchaos run --events ev.jsonl --mock anthropic -p llm-overloaded -- python agent.py
  netchaos records ev.jsonl
  netchaos records ev.jsonl --expect max_attempts=3 --expect retry_after_honoured";

/// `netchaos drill`.
#[derive(Debug, Args, Clone)]
pub struct DrillArgs {
    /// The drill file (TOML); or none with --builtin.
    #[arg(value_name = "DRILL.toml", required_unless_present = "builtin")]
    pub file: Option<PathBuf>,
    /// A built-in drill instead of a file (see --list).
    #[arg(long, value_name = "NAME", conflicts_with = "file")]
    pub builtin: Option<String>,
    /// List the built-in drills and exit.
    #[arg(long, exclusive = true)]
    pub list: bool,
    /// Print a built-in drill's TOML (a template to copy) and exit.
    #[arg(long, value_name = "NAME", exclusive = true)]
    pub show: Option<String>,
    /// Write the verdicts as JSON to FILE (- for standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write JUnit XML to FILE: one test case per scenario × client × check.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write an HTML report: the drill's table, and each run's timeline.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Keep each run's event log in DIR (else they are removed).
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
    /// Seeds per scenario (overrides the file's `repeat`).
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// The command under test (with --builtin, or to replace the file's).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

const DRILL_AFTER_HELP: &str = "\
A drill runs the commands under test (your load script or test suite) under
`netchaos run`: first without faults (the steady state: its checks must hold,
or the drill is invalid), then under each scenario's one fault, and judges
each run's request records by the scenario's checks. It exits 0 only when
every check holds.

Examples:
  netchaos drill --list
  netchaos drill --builtin llm-failover -- python my_agent.py
  netchaos drill --show llm-failover > my-drill.toml
  netchaos drill my-drill.toml --junit drill.xml";

/// `netchaos report`.
#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// Event logs written with --events; several are drawn on one time
    /// axis, by their wall-clock times.
    #[arg(value_name = "EVENTS.jsonl", required = true)]
    pub logs: Vec<PathBuf>,
    /// Where to write the HTML page.
    #[arg(short = 'o', long, value_name = "FILE", default_value = "report.html")]
    pub output: PathBuf,
}

/// Where faults come from: profiles and `--fault` flags.
#[derive(Debug, Args, Clone, Default)]
pub struct FaultArgs {
    /// A profile: a built-in name (see `netchaos profiles`) or a TOML file. Repeatable.
    #[arg(short = 'p', long = "profile", value_name = "NAME|PATH", value_parser = Offered::profiles(), hide_possible_values = true)]
    pub profiles: Vec<String>,
    /// Add a fault to a catch-all rule: TYPE:key=value,... (e.g.
    /// latency:delay=100ms,jitter=20ms; `netchaos faults` lists every type
    /// with its parameters). Repeatable.
    #[arg(long = "fault", value_name = "SPEC", value_parser = Offered::fault_types(), hide_possible_values = true)]
    pub faults: Vec<String>,
}

/// Any text, with the values shell completions offer for it (the built-in
/// profiles' names, the fault types): a file or a whole spec is as good.
#[derive(Clone)]
pub struct Offered(&'static [&'static str]);

impl Offered {
    fn profiles() -> Offered {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        Offered(NAMES.get_or_init(|| crate::profile::builtin::names().to_vec()))
    }

    fn fault_types() -> Offered {
        // Made once, for the life of the process.
        static TYPES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        Offered(TYPES.get_or_init(|| {
            crate::fault::KINDS
                .iter()
                .map(|k| &*Box::leak(format!("{}:", k.name).into_boxed_str()))
                .collect()
        }))
    }
}

impl clap::builder::TypedValueParser for Offered {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|v| clap::builder::PossibleValue::new(*v)),
        ))
    }
}

/// How the relay treats connections: the same for every command that relays.
#[derive(Debug, Args, Clone)]
pub struct RelayArgs {
    /// How long to wait for a destination to accept. Then an intercepted
    /// client's connect() times out, as it would have; an explicit proxy's
    /// client (already connected) is reset.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_arg)]
    pub dial_timeout: Duration,
    /// Most connections open at once; beyond it new ones are refused at
    /// connect (RST) until one closes [default: from the open-files limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// When netchaos stops (Ctrl-C, SIGTERM, the command's exit, the end of
    /// --duration for attach), how long open connections may finish
    /// (HTTP ones between requests close at once, as a server stopping
    /// closes them: HTTP/2 with a GOAWAY).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_arg)]
    pub drain: Duration,
}

impl RelayArgs {
    /// The relay's options, with the environment's (`NETCHAOS_PEER_TIMEOUT`).
    pub(crate) fn options(&self) -> Result<crate::relay::RelayOptions> {
        crate::relay::RelayOptions::new(self.dial_timeout, self.max_connections)
            .map_err(|e| Error::Usage(e.to_string()))
    }
}

/// TLS for the HTTP layer: whose CA signs, and which upstreams are trusted.
#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// Also trust the CA certificates in FILE (PEM) when verifying HTTPS
    /// upstreams, beside the host's trust store (a staging CA). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// Sign with this CA certificate (PEM) instead of a CA made for the run:
    /// one the clients already trust (a container's, under attach).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_ca: Option<PathBuf>,
    /// The private key of --tls-ca (PKCS#8 PEM).
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    pub tls_key: Option<PathBuf>,
    /// Write the signing CA's certificate (PEM) to FILE, for clients
    /// netchaos does not set up itself.
    #[arg(long, value_name = "FILE")]
    pub tls_ca_out: Option<PathBuf>,
}

/// The control API's address, and who may use it.
#[derive(Debug, Args, Clone, Default)]
pub struct ApiArgs {
    /// Serve the Toxiproxy-compatible control API (and /metrics) on ADDR, like 127.0.0.1:8474.
    #[arg(long, value_name = "ADDR", value_parser = listen_arg)]
    pub api: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub access: ApiAccess,
}

/// Who may use the control API, and what it may touch.
#[derive(Debug, Args, Clone, Default)]
pub struct ApiAccess {
    /// Require `Authorization: Bearer TOKEN` on every API request (required
    /// when the API listens on a non-loopback address). Visible to every
    /// user in `ps`: prefer --api-token-file or NETCHAOS_API_TOKEN.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "NETCHAOS_API_TOKEN",
        hide_env_values = true
    )]
    pub api_token: Option<String>,
    /// Read the API token from the first line of FILE (takes precedence
    /// over --api-token and NETCHAOS_API_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
    /// Let API toxics read files (a respond toxic's "file") beneath DIR;
    /// without it the API reads no file at all.
    #[arg(long, value_name = "DIR")]
    pub api_files: Option<PathBuf>,
    /// As root: let API clients of this host that are not root make
    /// netchaos listen on privileged ports (below 1024) and on addresses
    /// beyond the API's own interface (0.0.0.0, a public address). Without
    /// it such a request from another local user is refused (403): the
    /// API would otherwise hand every local user root's power to listen.
    #[arg(long)]
    pub api_listen_allow: bool,
}

impl ApiAccess {
    /// The token, from the file or the flag; a blank one is refused.
    pub(crate) fn token(&self) -> Result<Option<String>> {
        let (token, from) = match &self.api_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Usage(format!("--api-token-file {}: {e}", path.display()))
                })?;
                let first = text.lines().next().unwrap_or("").trim().to_string();
                (Some(first), format!("--api-token-file {}", path.display()))
            }
            None => (
                self.api_token.clone(),
                "--api-token (or NETCHAOS_API_TOKEN)".into(),
            ),
        };
        match token {
            Some(t) if t.trim().is_empty() => Err(Error::Usage(format!(
                "{from}: the API token is blank; give a token of visible characters (or none)"
            ))),
            Some(t) if t.chars().any(|c| c.is_control() || c == ' ') => Err(Error::Usage(format!(
                "{from}: the API token holds spaces or control characters, which an HTTP header cannot carry"
            ))),
            t => Ok(t),
        }
    }

    /// Where toxics made through the API may read files.
    pub(crate) fn files(&self) -> Result<crate::settings::files::FilePolicy> {
        use crate::settings::files::{ApiFiles, FilePolicy};
        match &self.api_files {
            None => Ok(FilePolicy::Nowhere),
            Some(dir) => ApiFiles::open(dir)
                .map(|f| FilePolicy::Beneath(std::sync::Arc::new(f)))
                .map_err(|e| Error::Usage(e.to_string())),
        }
    }
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub log: EventsArg,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Where the control API listens [default: 127.0.0.1:8474]; off
    /// loopback only with a token.
    #[arg(long, value_name = "ADDR", value_parser = listen_arg, conflicts_with_all = ["host", "port"])]
    pub api: Option<std::net::SocketAddr>,
    /// toxiproxy-server's -host: the API's host [default: localhost]. As
    /// with toxiproxy-server, any host is accepted without a token (a
    /// warning says so off loopback): give --api-token-file to require one.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// toxiproxy-server's -port: the API's port [default: 8474].
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// toxiproxy-server's -config: proxies to create at start, as a JSON
    /// array in /populate's form. As with toxiproxy-server, a bad file is
    /// reported and the server starts anyway.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// toxiproxy-server's -proxy-metrics. netchaos serves /metrics always,
    /// Toxiproxy's toxiproxy_proxy_* series included, so it changes nothing.
    /// (`=true`/`=false` as Go's flags take.)
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub proxy_metrics: bool,
    /// toxiproxy-server's -runtime-metrics: /metrics also shows the
    /// process's series (process_*, and go_goroutines and go_info, which
    /// count netchaos's tasks: netchaos is not Go).
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub runtime_metrics: bool,
    /// toxiproxy-server's -version: print the Toxiproxy version netchaos
    /// answers as, and exit.
    #[arg(long = "toxiproxy-version", hide = true)]
    pub toxiproxy_version: bool,
    /// Run as toxiproxy-server (the binary invoked by that name): a busy or
    /// bad API address is logged and the server keeps running, as
    /// Toxiproxy's does, instead of ending it.
    #[arg(long = "toxiproxy-compat", hide = true)]
    pub toxiproxy_compat: bool,
    /// Arguments after the flags, which toxiproxy-server ignores (Go's flag
    /// parsing stops at the first): ignored, with a warning.
    #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub ignored: Vec<String>,
    #[command(flatten)]
    pub access: ApiAccess,
    /// How a client's connection ends when netchaos gives up on it (upstream
    /// unreachable; proxy disabled, deleted or repointed): fin, as Toxiproxy
    /// does (the default), or rst.
    #[arg(long, value_enum, value_name = "fin|rst")]
    pub end: Option<crate::relay::EndStyle>,
    #[command(flatten)]
    pub relay: RelayArgs,
}

/// toxiproxy-server's flags, for a drop-in: `-host X`, `-port=8474`, `-config
/// FILE` … become `--host X`, `--port=8474`, `--config FILE` … after the
/// `server` subcommand, and a binary named `toxiproxy-server` (or
/// `toxiproxy`, as in Toxiproxy's image) is `netchaos server`.
pub fn toxiproxy_argv(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    const GO_FLAGS: &[&str] = &[
        "host",
        "port",
        "config",
        "seed",
        "proxy-metrics",
        "runtime-metrics",
        "version",
        "help",
    ];
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let invoked = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    if matches!(invoked.as_str(), "toxiproxy" | "toxiproxy-server") {
        args.insert(1, "server".into());
        args.insert(2, "--toxiproxy-compat".into());
    }
    if invoked == "toxiproxy-cli" {
        args.insert(1, "ctl".into());
        args.insert(2, "--toxiproxy-cli".into());
    }
    // The subcommand: the first argument that is no global flag (nor the
    // value of `--seed`); a `ctl` or `server` further on is an argument
    // of another command's (`run ./app ctl …`, `proxy --name server`).
    let mut at = 1;
    while let Some(a) = args.get(at).and_then(|a| a.to_str()) {
        match a {
            "--seed" => at += 2,
            _ if a.starts_with('-') => at += 1,
            _ => break,
        }
    }
    let subcommand = args.get(at).and_then(|a| a.to_str());
    if subcommand == Some("ctl") {
        let cli = args.iter().any(|a| a == "--toxiproxy-cli");
        return ctl_argv(args, at, cli);
    }
    if subcommand != Some("server") {
        return args;
    }
    let server = at;
    for a in &mut args[server + 1..] {
        let Some(text) = a.to_str() else { continue };
        // Go takes --flag as -flag; --version is toxiproxy-server's.
        if text == "--version" {
            *a = "--toxiproxy-version".into();
            continue;
        }
        let Some(flag) = text.strip_prefix('-').filter(|f| !f.starts_with('-')) else {
            continue;
        };
        let name = flag.split('=').next().unwrap_or("");
        if GO_FLAGS.contains(&name) {
            *a = match name {
                "version" => "--toxiproxy-version".into(),
                _ => format!("--{flag}").into(),
            };
        }
    }
    args
}

/// toxiproxy-cli's flags after `ctl`, as Go's flag package takes them:
/// `-toxicName x` is `--toxicName x`, `-tox`/`--tox` is `--toxicity`,
/// `-h URL` and `-host URL` the API's address, `--version` (and, invoked
/// as toxiproxy-cli, `-v`) the version.
fn ctl_argv(
    mut args: Vec<std::ffi::OsString>,
    ctl: usize,
    toxiproxy_cli: bool,
) -> Vec<std::ffi::OsString> {
    const GO_FLAGS: &[&str] = &[
        "toxicName",
        "type",
        "toxicity",
        "attribute",
        "upstream",
        "downstream",
        "listen",
        "url",
        "token",
    ];
    const COMMANDS: &[&str] = &[
        "list", "ls", "l", "li", "show", "inspect", "i", "ins", "create", "c", "new", "toggle",
        "tog", "delete", "d", "add", "update", "remove", "toxic", "t", "enable", "disable",
        "reset", "metrics", "help",
    ];
    let mut i = ctl + 1;
    while i < args.len() {
        let Some(text) = args[i].to_str().map(str::to_string) else {
            i += 1;
            continue;
        };
        if text == "--" {
            break;
        }
        let (flag, value) = match text.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (text.clone(), None),
        };
        let name = flag.trim_start_matches('-');
        let dashes = flag.len() - name.len();
        let renamed = match (dashes, name) {
            (1 | 2, "host") => Some("--url"),
            (1 | 2, "tox") => Some("--toxicity"),
            (1 | 2, "version") => Some("--ctl-version"),
            // toxiproxy-cli's `-v` is its version; netchaos's, verbose.
            (1, "v") if toxiproxy_cli => Some("--ctl-version"),
            // `-h URL` is toxiproxy-cli's host; `-h` alone is help.
            (1, "h")
                if value.is_some()
                    || args
                        .get(i + 1)
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| !n.starts_with('-') && !COMMANDS.contains(&n)) =>
            {
                Some("--url")
            }
            (1, n) if GO_FLAGS.contains(&n) => None,
            _ => {
                i += 1;
                continue;
            }
        };
        let long = renamed.map_or_else(|| format!("--{name}"), str::to_string);
        args[i] = match value {
            Some(v) => format!("{long}={v}").into(),
            None => long.into(),
        };
        i += 1;
    }
    args
}

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The API's base URL [default: http://127.0.0.1:8474; env NETCHAOS_URL, then TOXIPROXY_URL]
    /// (`--host` and `-h URL`, as toxiproxy-cli names it, too).
    #[arg(long, visible_alias = "host", value_name = "URL")]
    pub url: Option<String>,
    /// Bearer token for the API.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "NETCHAOS_API_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print as toxiproxy-cli does (set when netchaos is invoked by that
    /// name).
    #[arg(long = "toxiproxy-cli", hide = true)]
    pub toxiproxy_cli: bool,
    /// Print the version.
    #[arg(long = "ctl-version", hide = true)]
    pub version: bool,
    #[command(subcommand)]
    pub action: Option<CtlAction>,
}

#[derive(Debug, Subcommand)]
pub enum CtlAction {
    /// List the proxies and their toxics.
    #[command(visible_aliases = ["ls", "l", "li"])]
    List,
    /// Show one proxy.
    #[command(visible_aliases = ["inspect", "i", "ins"])]
    Show { proxy: String },
    /// Create a proxy.
    #[command(visible_aliases = ["c", "new"])]
    Create {
        proxy: String,
        #[arg(short, long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(short, long, value_name = "HOST:PORT")]
        upstream: String,
    },
    /// Enable a disabled proxy, disable an enabled one.
    #[command(visible_alias = "tog")]
    Toggle { proxy: String },
    /// Delete a proxy.
    #[command(visible_alias = "d")]
    Delete { proxy: String },
    /// Add a fault to a proxy: SPEC as for --fault (netchaos types and units),
    /// e.g. latency:delay=100ms.
    Add {
        proxy: String,
        spec: String,
        /// The toxic's name [default: TYPE_STREAM].
        #[arg(long)]
        name: Option<String>,
    },
    /// Change a fault's attributes: key=value,... (`probability` and
    /// `stream` are the toxic's own).
    Update {
        proxy: String,
        toxic: String,
        attributes: String,
    },
    /// Remove a fault.
    Remove { proxy: String, toxic: String },
    /// Add, update or remove a toxic, as toxiproxy-cli does.
    #[command(subcommand, visible_alias = "t")]
    Toxic(ToxicAction),
    /// Enable a proxy (listen again).
    Enable { proxy: String },
    /// Disable a proxy (stop listening, end its connections).
    Disable { proxy: String },
    /// Enable every proxy and remove every fault.
    Reset,
    /// Print the metrics.
    Metrics,
}

/// `ctl toxic …`: toxiproxy-cli's toxic commands, with its flags.
#[derive(Debug, Subcommand)]
pub enum ToxicAction {
    /// Add a toxic: `toxic add -t latency -n slow -a latency=100 PROXY`.
    #[command(visible_alias = "a")]
    Add {
        proxy: String,
        /// The toxic's name [default: TYPE_STREAM].
        #[arg(short = 'n', long = "toxicName", value_name = "NAME")]
        name: Option<String>,
        /// Its type (Toxiproxy's or netchaos's).
        #[arg(short = 't', long = "type", value_name = "TYPE")]
        kind: String,
        /// The share of connections it acts on, from 0 to 1 [default: 1].
        #[arg(long, value_name = "FLOAT")]
        toxicity: Option<String>,
        /// An attribute, key=value (repeatable).
        #[arg(short = 'a', long = "attribute", value_name = "KEY=VALUE")]
        attributes: Vec<String>,
        /// On the client's stream to the upstream.
        #[arg(short = 'u', long)]
        upstream: bool,
        /// On the upstream's stream to the client (the default).
        #[arg(short = 'd', long)]
        downstream: bool,
    },
    /// Update a toxic's attributes and toxicity (1 unless given, as
    /// toxiproxy-cli sends it).
    #[command(visible_alias = "u")]
    Update {
        proxy: String,
        #[arg(short = 'n', long = "toxicName", value_name = "NAME")]
        name: String,
        #[arg(long, value_name = "FLOAT")]
        toxicity: Option<String>,
        #[arg(short = 'a', long = "attribute", value_name = "KEY=VALUE")]
        attributes: Vec<String>,
    },
    /// Remove a toxic.
    #[command(visible_aliases = ["r", "delete", "d"])]
    Remove {
        proxy: String,
        #[arg(short = 'n', long = "toxicName", value_name = "NAME")]
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct NetemArgs {
    #[command(subcommand)]
    pub action: NetemAction,
}

#[derive(Debug, Subcommand)]
pub enum NetemAction {
    /// Shape DEV's traffic (replacing a previous netchaos setup on it).
    Apply(Box<NetemApply>),
    /// Remove exactly the qdiscs and filters netchaos added to DEV.
    Clear {
        #[arg(long, value_name = "DEV")]
        dev: String,
        /// Print the tc commands instead of running them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show DEV's qdiscs and filters, netchaos's marked.
    Show {
        #[arg(long, value_name = "DEV")]
        dev: String,
    },
}

#[derive(Debug, Args)]
pub struct NetemApply {
    /// The network device, like eth0 (or from the profile's [netem] table).
    #[arg(long, value_name = "DEV")]
    pub dev: Option<String>,
    /// A profile with a [netem] table (flags override it).
    #[arg(short = 'p', long = "profile", value_name = "NAME|PATH")]
    pub profile: Option<String>,
    /// Delay every packet.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub delay: Option<Duration>,
    /// ± this much (needs --delay).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub jitter: Option<Duration>,
    /// How much each delay depends on the previous one, in percent (needs --jitter).
    #[arg(long, value_name = "PERCENT", value_parser = crate::netem::parse_percent_flag)]
    pub correlation: Option<f64>,
    /// Shape of the jitter: normal, pareto, paretonormal or uniform (needs --jitter).
    #[arg(long, value_name = "NAME")]
    pub distribution: Option<String>,
    /// Drop this share of packets, in percent.
    #[arg(long, value_name = "PERCENT", value_parser = crate::netem::parse_percent_flag)]
    pub loss: Option<f64>,
    /// Lose packets in runs of N on average (netem's Gilbert model; needs --loss).
    #[arg(long, value_name = "N")]
    pub loss_burst: Option<f64>,
    /// Duplicate this share of packets, in percent.
    #[arg(long, value_name = "PERCENT", value_parser = crate::netem::parse_percent_flag)]
    pub duplicate: Option<f64>,
    /// Corrupt (flip a bit in) this share of packets, in percent.
    #[arg(long, value_name = "PERCENT", value_parser = crate::netem::parse_percent_flag)]
    pub corrupt: Option<f64>,
    /// Send this share of packets at once, ahead of delayed ones, in percent (needs --delay).
    #[arg(long, value_name = "PERCENT", value_parser = crate::netem::parse_percent_flag)]
    pub reorder: Option<f64>,
    /// Reorder every Nth packet (needs --reorder).
    #[arg(long, value_name = "N")]
    pub gap: Option<u32>,
    /// Limit the rate, like 1mbit or 500KB/s (alone, this needs no netem: tbf).
    #[arg(long, value_name = "RATE", value_parser = rate_arg)]
    pub rate: Option<u64>,
    /// Packets netem may hold at once.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Only traffic to this destination (CIDR or address; repeatable; IPv4 and IPv6).
    #[arg(long, value_name = "CIDR", value_parser = crate::netem::parse_dst)]
    pub dst: Vec<ipnet::IpNet>,
    /// Only traffic to this destination port.
    #[arg(long, value_name = "PORT")]
    pub dport: Option<u16>,
    /// Only traffic from this source port.
    #[arg(long, value_name = "PORT")]
    pub sport: Option<u16>,
    /// Shape incoming instead of outgoing traffic (through an ifb device).
    #[arg(long)]
    pub ingress: bool,
    /// Print the tc commands instead of running them.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub log: EventsArg,
    #[command(flatten)]
    pub faults: FaultArgs,
    #[command(flatten)]
    pub api: ApiArgs,
    /// Accept clients on ADDR (127.0.0.1:8080, [::1]:8080, or a port meaning
    /// 127.0.0.1). Repeatable: each --listen starts a new proxy, completed by
    /// an --upstream (and optionally a --name).
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Relay that proxy's connections to HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: Vec<String>,
    /// Name the proxy (rules can match it with match.proxy).
    #[arg(long, value_name = "NAME")]
    pub name: Vec<String>,
    /// How a client's connection ends when netchaos gives up on it (upstream
    /// unreachable; proxy disabled, deleted or repointed through the API):
    /// rst (the default for --listen proxies: the nearest thing to a refused
    /// connect) or fin (as Toxiproxy does; the default for proxies the API
    /// makes).
    #[arg(long, value_enum, value_name = "fin|rst")]
    pub end: Option<crate::relay::EndStyle>,
    /// Relay that proxy's connections to HOST:PORT over TLS (verified as
    /// HOST), with Host: HOST in each request: a client given a plaintext
    /// local base URL reaches an HTTPS API, with HTTP faults in between.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream_tls: Vec<String>,
    /// Serve TLS on every --listen, with certificates from the run's CA
    /// (write it out with --tls-ca-out) or --tls-ca.
    #[arg(long)]
    pub tls: bool,
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub mock: MockFlags,
    #[command(flatten)]
    pub relay: RelayArgs,
}

const RUN_ABOUT: &str = "\
Run a command with every TCP connection it makes passing through the faults.

The command runs in a new network namespace (with a user namespace when
netchaos is not root), where one nftables table redirects each outbound TCP
connection, IPv4 and IPv6, to the relay, and UDP DNS queries to a forwarder.
The relay dials the real destination from the host's network namespace, so
the command reaches everything the host can, 127.0.0.1 and ::1 included
(unless the command itself listens on that port: then the connection stays
inside). Nothing about the command changes: not its code, configuration,
ports, environment, working directory or terminal.

What the command holds. Run by a user: that user's identity and no
capability at all (no_new_privs set). Run by root: uid 0 and root's access
to files, in a user namespace of its own that maps every uid to itself, so
that its capabilities reach only namespaces it makes itself. Either way it
holds no CAP_NET_ADMIN, cannot list or change the fault rules or the
namespace's sysctls (/proc/sys is read-only for it), set socket marks, open
raw sockets or enter another namespace; it sees a /proc of its own PID
namespace, where netchaos does not exist to be signalled or traced; it may
listen on any port, 80 included; NETCHAOS_API_TOKEN is removed from its
environment; and every process of it dies with netchaos, even after
SIGKILL. --privileged-command (root only) gives a trusted command every
capability but CAP_NET_ADMIN over the real system instead.";

const ATTACH_ABOUT: &str = "\
Apply faults to a running container's or process's network namespace (root).

A thread of netchaos enters the namespace (setns), creates the relay's
listeners there and installs one nftables table, `inet netchaos`, that
redirects the namespace's outbound TCP (IPv4 and IPv6) to the relay and its
UDP DNS to a forwarder; with --inbound, connections arriving for those local
ports pass through the relay too. The relay dials from inside the namespace;
the SYN gate knows its dials by address and port (never by a socket mark,
which the namespace's processes could forge), so interception skips only
them. Nothing in the namespace is restarted or reconfigured.

Needs CAP_SYS_ADMIN (to enter the namespace) and CAP_NET_ADMIN (for the
table): root, in practice. Checked before anything is touched.

Runs until Ctrl-C, SIGTERM or --duration, then removes exactly what it
added. If netchaos is killed with SIGKILL the table stays and would
black-hole the namespace's traffic: `netchaos clean` removes it, and attach
refuses to start over it unless --replace is given.";

const ATTACH_AFTER_HELP: &str = "\
Examples:
  sudo netchaos attach --pid $(docker inspect -f '{{.State.Pid}}' web) -p slow-network
  sudo netchaos attach --netns /run/netns/blue --fault latency:delay=200ms --duration 5m
  sudo netchaos attach --pid 4242 --inbound 8080 -p http-503 --api 127.0.0.1:8474";

const CLEAN_AFTER_HELP: &str = "\
Removes the nftables table `inet netchaos`, the iptables chain mangle NETCHAOS
(the SYN gate on kernels without nft_queue) and every qdisc and ifb device
netchaos added, in the given namespace. Idempotent: a second run does nothing.
Refuses while a running netchaos owns the table (it removes its own on exit),
unless --force.

Examples:
  sudo netchaos clean --pid 4242
  sudo netchaos clean --netns /run/netns/blue
  netchaos clean --here          # in a container or pod, with NET_ADMIN";

const RUN_AFTER_HELP: &str = "\
The exit code is the command's (128+N if a signal N ended it). SIGINT, SIGTERM
and SIGHUP sent to netchaos are forwarded to the command (a Ctrl-C from the
terminal reaches it directly). When it exits, open connections drain, the
summary prints, and the namespace and its rules disappear.

Examples:
  netchaos run -p flaky -- pytest tests/
  netchaos run --fault reset:after_bytes=4096 -- curl -s http://127.0.0.1:8000/
  netchaos run -p slow-network --expose 8080 -- ./my-service --port 8080
  netchaos run --in-place -p flaky -- ./entrypoint.sh   # container with NET_ADMIN

--in-place: no new namespace; the current one is intercepted (a container's
entrypoint, or a Kubernetes sidecar sharing the pod's namespace) and the
command runs without CAP_NET_ADMIN. Needs CAP_NET_ADMIN. The table is removed
when the command exits (`netchaos clean --here` after a SIGKILL).";

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub log: EventsArg,
    #[command(flatten)]
    pub faults: FaultArgs,
    #[command(flatten)]
    pub api: ApiArgs,
    /// Publish a port of the namespace on the host: [HOST_ADDR:]HOST_PORT[:NS_PORT]
    /// (8080 means host 127.0.0.1:8080 to the namespace's port 8080). Rules with
    /// direction = "inbound" apply to these connections. Repeatable.
    #[arg(long, value_name = "[ADDR:]PORT[:NS_PORT]")]
    pub expose: Vec<String>,
    /// Stop injecting faults after this long; traffic keeps flowing, unharmed.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Forward the namespace's DNS to the resolvers listed in FILE instead of
    /// /etc/resolv.conf (`nameserver IP` lines; `IP:PORT` also accepted).
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<PathBuf>,
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Intercept in the current network namespace instead of a new one (needs
    /// CAP_NET_ADMIN; the command runs without it).
    #[arg(long, conflicts_with = "expose")]
    pub in_place: bool,
    /// With --in-place: connections arriving for this local port pass through
    /// the relay (rules with direction = "inbound"). Repeatable.
    #[arg(long, value_name = "PORT", requires = "in_place", value_parser = port_arg)]
    pub inbound: Vec<u16>,
    /// With --in-place: remove a killed netchaos's leftover table first,
    /// instead of refusing to start.
    #[arg(long, requires = "in_place")]
    pub replace: bool,
    /// Terminate HTTPS (TLS) for connections whose rules have HTTP or TLS
    /// faults, so that HTTP faults act on each request and `tls_error`
    /// fails the handshake itself; re-originate it to the
    /// real destination, verified. The command trusts the run's CA through
    /// its own view of the system trust stores and the usual variables
    /// (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, …).
    #[arg(long, conflicts_with = "in_place")]
    pub tls: bool,
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub mock: MockFlags,
    /// As root: let the command keep every capability but CAP_NET_ADMIN
    /// over the real system (no user namespace of its own). It can then
    /// enter other namespaces, trace processes and leave the faults
    /// behind: only for commands you trust.
    #[arg(long, conflicts_with = "in_place")]
    pub privileged_command: bool,
    /// Let the command drive the control API (a test suite that switches
    /// faults per test, as Toxiproxy users' suites do). Without it the API
    /// and netchaos's proxies are unreachable from the command. The command
    /// gets NETCHAOS_API_URL and TOXIPROXY_URL (http://ADDR), and, when the
    /// API needs a token, NETCHAOS_API_TOKEN holding a token of its own
    /// (never the operator's).
    #[arg(long, requires = "api")]
    pub api_for_command: bool,
    /// The command to run, and its arguments (after --).
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("namespace").required(true).args(["pid", "netns", "container", "pod"]))]
pub struct AttachArgs {
    #[command(flatten)]
    pub log: EventsArg,
    /// The process whose network namespace to attach to (a container's
    /// main process, for instance).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// The network namespace file to attach to, like /run/netns/NAME or
    /// /proc/PID/ns/net.
    #[arg(long, value_name = "PATH")]
    pub netns: Option<PathBuf>,
    /// The container to attach to, by ID or its first 6+ digits (Docker,
    /// Podman, containerd, CRI-O): found from the node's /proc by its
    /// cgroup, with no runtime socket.
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// The Kubernetes pod to attach to, as NAMESPACE/NAME or its UID, from
    /// its node (a DaemonSet with hostPID: true, the node's /var/log/pods
    /// mounted to name pods).
    #[arg(long, value_name = "NAMESPACE/NAME|UID")]
    pub pod: Option<String>,
    #[command(flatten)]
    pub faults: FaultArgs,
    #[command(flatten)]
    pub api: ApiArgs,
    /// Also relay connections arriving for this local port (rules with
    /// direction = "inbound" apply). Repeatable.
    #[arg(long, value_name = "PORT", value_parser = port_arg)]
    pub inbound: Vec<u16>,
    /// Detach after this long (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Remove a killed netchaos's leftover table first, instead of refusing
    /// to start.
    #[arg(long)]
    pub replace: bool,
    /// Forward the namespace's DNS to the resolvers in FILE [default: the
    /// process's own /etc/resolv.conf with --pid, else /etc/resolv.conf].
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<PathBuf>,
    /// HTTPS under attach: with --tls-ca and --tls-key (a CA the container
    /// already trusts), HTTPS is terminated for HTTP and TLS faults as with
    /// `run --tls`. Without them, HTTP faults apply to plaintext HTTP only
    /// and `tls_error` is refused.
    #[command(flatten)]
    pub tls_args: TlsArgs,
    #[command(flatten)]
    pub relay: RelayArgs,
    #[command(flatten)]
    pub mock: MockFlags,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("namespace").required(true).args(["pid", "netns", "container", "pod", "here"]))]
pub struct CleanArgs {
    /// The network namespace of this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// The network namespace file, like /run/netns/NAME.
    #[arg(long, value_name = "PATH")]
    pub netns: Option<PathBuf>,
    /// The network namespace of this container (ID or its first 6+ digits).
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// The network namespace of this Kubernetes pod (NAMESPACE/NAME or UID).
    #[arg(long, value_name = "NAMESPACE/NAME|UID")]
    pub pod: Option<String>,
    /// netchaos's own network namespace (in a container or pod).
    #[arg(long)]
    pub here: bool,
    /// Remove the table even though the netchaos that owns it still runs.
    #[arg(long)]
    pub force: bool,
}

/// One `--expose`: a host listener that leads to a port of the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expose {
    pub(crate) host: std::net::SocketAddr,
    pub(crate) ns_port: u16,
}

impl Expose {
    /// Parses `[HOST_ADDR:]HOST_PORT[:NS_PORT]` (`[v6]:PORT[:NS_PORT]` for IPv6).
    pub(crate) fn parse(s: &str) -> std::result::Result<Expose, BadArg> {
        let bad = || {
            BadArg(format!(
                "--expose {s}: expected [HOST_ADDR:]HOST_PORT[:NS_PORT], like 8080, 8080:80 or 0.0.0.0:8080:80"
            ))
        };
        let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
        let (addr, rest): (std::net::IpAddr, &str) = if let Some(v6) = s.strip_prefix('[') {
            let (a, rest) = v6.split_once("]:").ok_or_else(bad)?;
            (a.parse().map_err(|_| bad())?, rest)
        } else {
            let parts: Vec<&str> = s.split(':').collect();
            match parts.as_slice() {
                [_] | [_, _] if parts[0].parse::<std::net::IpAddr>().is_err() => {
                    ([127, 0, 0, 1].into(), s)
                }
                [a, ..] => (a.parse().map_err(|_| bad())?, &s[a.len() + 1..]),
                [] => return Err(bad()),
            }
        };
        let (hp, np) = match rest.split_once(':') {
            Some((h, n)) => (port(h)?, port(n)?),
            None => (port(rest)?, port(rest)?),
        };
        Ok(Expose {
            host: std::net::SocketAddr::new(addr, hp),
            ns_port: np,
        })
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Profiles to check: files or built-in names.
    #[arg(value_name = "FILE|NAME")]
    pub files: Vec<String>,
    /// The same, as `run` and `proxy` take them (`check -p flaky` is
    /// `check flaky`). Repeatable.
    #[arg(short = 'p', long = "profile", value_name = "FILE|NAME")]
    pub profiles: Vec<String>,
    /// Also check these --fault specs.
    #[arg(long = "fault", value_name = "SPEC")]
    pub faults: Vec<String>,
}

const MOCK_ABOUT: &str = "\
Answer LLM requests in the providers' wire formats, as a standalone server: Anthropic
Messages (POST /v1/messages, JSON and streamed; /v1/messages/count_tokens) and OpenAI
Chat Completions and Responses (POST /v1/chat/completions, /v1/responses). Point a
client's base URL at it (ANTHROPIC_BASE_URL=http://127.0.0.1:8787,
OPENAI_BASE_URL=http://127.0.0.1:8787/v1) with any API key.

The answers are filler text derived from --seed and the request (the same request gets
the same text), as long as max_tokens allows, at the pace of a model: --ttft to the
first token, then --tokens-per-s. Malformed requests get the provider's own 4xx.
HTTP/1.1 and HTTP/2 with prior knowledge (h2c). SIGTERM or Ctrl-C ends it.";

/// `netchaos mock`'s own flags, and the mock's timing, shared with
/// `--mock` on `run` and `proxy`.
#[derive(Debug, Args, Clone)]
pub struct MockTiming {
    /// The time to the first token, with an optional uniform jitter
    /// (300ms±100ms, or 300ms+-100ms). A JSON answer arrives whole once
    /// its last token would have.
    #[arg(long, value_name = "DURATION[±JITTER]", default_value = "300ms±100ms")]
    pub ttft: String,
    /// Tokens per second after the first (a token is a word of filler).
    #[arg(long, value_name = "N", default_value = "80")]
    pub tokens_per_s: String,
    /// Another timing for the models a glob matches (repeatable; the first
    /// match wins): 'claude-opus-*:ttft=800ms±200ms,tokens_per_s=40'.
    #[arg(long = "model", value_name = "GLOB:TIMING")]
    pub models: Vec<String>,
}

impl MockTiming {
    pub(crate) fn timing(&self) -> Result<crate::mock::Timings> {
        mock_timing(&self.ttft, &self.tokens_per_s, &self.models, "")
    }
}

/// The mock's timing from its flags (named `--{prefix}ttft`, …).
fn mock_timing(
    ttft: &str,
    tokens_per_s: &str,
    models: &[String],
    prefix: &str,
) -> Result<crate::mock::Timings> {
    let (ttft, jitter) = crate::mock::timing::parse_ttft(ttft)
        .map_err(|e| Error::Usage(format!("--{prefix}ttft {e}")))?;
    let tokens_per_s = crate::mock::timing::parse_tokens_per_s(tokens_per_s)
        .map_err(|e| Error::Usage(format!("--{prefix}tokens-per-s {e}")))?;
    let base = crate::mock::Timing {
        ttft,
        jitter,
        tokens_per_s,
    };
    let flag = if prefix.is_empty() {
        "model"
    } else {
        "mock-model"
    };
    let models = models
        .iter()
        .map(|m| {
            crate::mock::timing::parse_model(m, base)
                .map_err(|e| Error::Usage(format!("--{flag} {e}")))
        })
        .collect::<Result<_>>()?;
    Ok(crate::mock::Timings { base, models })
}

/// `--mock` on `run`, `proxy` and `attach`: the built-in mock in
/// providers' places.
#[derive(Debug, Args, Clone, Default)]
pub struct MockFlags {
    /// Answer requests to these providers' API hosts with the built-in mock,
    /// never dialling them: anthropic (api.anthropic.com), openai
    /// (api.openai.com), gemini (generativelanguage.googleapis.com), or
    /// several (anthropic,openai). Faults apply as to the
    /// real upstream. Under `run` the hosts resolve with no network and
    /// HTTPS to them is terminated with the run's CA (as with --tls);
    /// under `attach` they resolve so too, and HTTPS needs --tls-ca (a CA
    /// the container trusts); under `proxy`, proxies whose upstream is
    /// such a host reach the mock.
    /// Profiles name other hosts with [[mocks]].
    #[arg(long, value_name = "API[,API]")]
    pub mock: Vec<String>,
    /// The mock's time to the first token (see `netchaos mock --ttft`).
    #[arg(long, value_name = "DURATION[±JITTER]", default_value = "300ms±100ms")]
    pub mock_ttft: String,
    /// The mock's tokens per second after the first.
    #[arg(long, value_name = "N", default_value = "80")]
    pub mock_tokens_per_s: String,
    /// The mock's timing for the models a glob matches (repeatable, first
    /// match wins): 'claude-opus-*:ttft=800ms±200ms,tokens_per_s=40'.
    #[arg(long, value_name = "GLOB:TIMING")]
    pub mock_model: Vec<String>,
    /// Answer from the recorded or canned answers in DIR first (a
    /// directory of JSON files, as --record writes them; repeatable). The
    /// hosts they name are mocked, never dialled: a request to one that
    /// nothing there matches gets a 404 marked `x-netchaos-mock:
    /// unrecorded` (or, for a host --mock names too, a made-up answer).
    #[arg(long, value_name = "DIR")]
    pub mock_from: Vec<PathBuf>,
}

impl MockFlags {
    /// Loads --mock-from's answers (and the profiles') into `plan`.
    pub(crate) fn load_cassette(&self, plan: &mut plan::Plan) -> Result<()> {
        Ok(plan.load_cassette(&self.mock_from)?)
    }

    pub(crate) fn timing(&self) -> Result<crate::mock::Timings> {
        mock_timing(
            &self.mock_ttft,
            &self.mock_tokens_per_s,
            &self.mock_model,
            "mock-",
        )
    }

    /// The hosts `--mock` names.
    pub(crate) fn specs(&self) -> Result<Vec<plan::MockSpec>> {
        let mut out = Vec::new();
        for m in &self.mock {
            out.extend(plan::MockSpec::from_flag(m)?);
        }
        Ok(out)
    }
}

#[derive(Debug, Args)]
pub struct MockArgs {
    /// Accept clients on ADDR (127.0.0.1:8787, [::1]:8787, or a port meaning
    /// 127.0.0.1; port 0 picks one, which is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// The APIs to answer: anthropic, openai, gemini, or several
    /// (anthropic,openai,gemini), told apart by path.
    #[arg(long, value_name = "API[,API]", default_value = "anthropic,openai")]
    pub api: String,
    /// Answer from the recorded or canned answers in DIR first (as
    /// --record writes them; repeatable); what they do not match is made
    /// up as usual.
    #[arg(long = "from", visible_alias = "mock-from", value_name = "DIR")]
    pub from: Vec<PathBuf>,
    #[command(flatten)]
    pub timing: MockTiming,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub log: EventsArg,
    /// Run only the scenarios whose names contain this text. Repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Run the client in this process behind a proxy, instead of wrapping a
    /// client process with `netchaos run`.
    #[arg(long)]
    pub in_process: bool,
}

/// A command-line value that does not parse: what was expected.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadArg(String);

fn expected(form: &str) -> BadArg {
    BadArg(format!("expected {form}"))
}

fn rate_arg(s: &str) -> std::result::Result<u64, BadArg> {
    crate::units::parse_rate(s).map_err(expected)
}

fn listen_arg(s: &str) -> std::result::Result<std::net::SocketAddr, BadArg> {
    plan::parse_listen(s).map_err(expected)
}

fn port_arg(s: &str) -> std::result::Result<u16, BadArg> {
    match s.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(expected(&format!(
            "a port number from 1 to 65535, got {s:?}"
        ))),
    }
}

fn size_arg(s: &str) -> std::result::Result<u64, BadArg> {
    match crate::units::parse_size(s) {
        Ok(n) if n < 4096 => Err(expected(&format!("a size of at least 4KiB, got {s:?}"))),
        r => r.map_err(expected),
    }
}

fn duration_arg(s: &str) -> std::result::Result<Duration, BadArg> {
    crate::units::parse_duration(s).map_err(expected)
}

/// Groups `--listen`, `--upstream` and `--name` into proxies by their
/// position on the command line: a flag that repeats within the current
/// group starts the next one.
pub(crate) fn proxy_pairs(m: &ArgMatches) -> Result<Vec<ProxySpec>> {
    let mut flags: Vec<(usize, &'static str, String)> = Vec::new();
    for id in ["listen", "upstream", "upstream_tls", "name"] {
        if let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
            flags.extend(idx.zip(vals).map(|(i, v)| (i, id, v.clone())));
        }
    }
    flags.sort_by_key(|f| f.0);
    let mut groups: Vec<Vec<(&str, String)>> = Vec::new();
    for (_, id, v) in flags {
        match groups.last_mut() {
            Some(g) if !g.iter().any(|(k, _)| *k == id) => g.push((id, v)),
            _ => groups.push(vec![(id, v)]),
        }
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let get = |k: &str| g.iter().find(|(id, _)| *id == k).map(|(_, v)| v.clone());
            if get("upstream").is_some() && get("upstream_tls").is_some() {
                return Err(Error::Usage(format!(
                    "proxy #{}: give --upstream or --upstream-tls, not both",
                    i + 1
                )));
            }
            let upstream_tls = get("upstream_tls").is_some();
            let (Some(listen), Some(upstream)) = (
                get("listen"),
                get("upstream").or_else(|| get("upstream_tls")),
            ) else {
                return Err(Error::Usage(format!(
                    "proxy #{} needs both --listen ADDR and --upstream HOST:PORT (got {})",
                    i + 1,
                    g.iter()
                        .map(|(k, v)| format!("--{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )));
            };
            let listen_addr = plan::parse_listen(&listen)
                .map_err(|e| Error::Usage(format!("--listen {listen}: expected {e}")))?;
            let upstream = plan::parse_upstream(&upstream)
                .map_err(|e| Error::Usage(format!("--upstream {upstream}: expected {e}")))?;
            Ok(ProxySpec {
                name: get("name").unwrap_or_else(|| format!("proxy-{}", i + 1)),
                listen: listen_addr,
                upstream,
                upstream_tls,
                serve_tls: m.get_flag("tls"),
                loc: format!("--listen {listen}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn pairs(args: &[&str]) -> Result<Vec<ProxySpec>> {
        let mut full = vec!["netchaos", "proxy"];
        full.extend_from_slice(args);
        let m = Cli::command().try_get_matches_from(full).unwrap();
        proxy_pairs(m.subcommand_matches("proxy").unwrap())
    }

    #[test]
    fn expose_forms() {
        let e = |s| Expose::parse(s).map(|e| (e.host.to_string(), e.ns_port));
        assert_eq!(e("8080"), Ok(("127.0.0.1:8080".into(), 8080)));
        assert_eq!(e("8080:80"), Ok(("127.0.0.1:8080".into(), 80)));
        assert_eq!(e("0.0.0.0:8080"), Ok(("0.0.0.0:8080".into(), 8080)));
        assert_eq!(e("0.0.0.0:8080:80"), Ok(("0.0.0.0:8080".into(), 80)));
        assert_eq!(e("[::1]:8080:80"), Ok(("[::1]:8080".into(), 80)));
        assert!(e("http").is_err());
        assert!(e("8080:0").is_err());
        assert!(e("1.2.3.4:x").is_err());
    }

    #[test]
    fn run_takes_the_command_after_its_options() {
        let m = Cli::try_parse_from([
            "netchaos",
            "run",
            "--fault",
            "latency:delay=1s",
            "--",
            "sh",
            "-c",
            "exit 7",
        ])
        .unwrap();
        let Command::Run(r) = m.command else { panic!() };
        assert_eq!(r.command, ["sh", "-c", "exit 7"]);
        // A missing command is `run`'s own error (it says where it goes).
        let m = Cli::try_parse_from(["netchaos", "run"]).unwrap();
        let Command::Run(r) = m.command else { panic!() };
        assert!(r.command.is_empty());
    }

    #[test]
    fn pairs_follow_the_order_of_flags() {
        let p = pairs(&[
            "--name",
            "a",
            "--listen",
            "1000",
            "--upstream",
            "h:1",
            "--listen",
            "2000",
            "--upstream",
            "h:2",
            "--name",
            "b",
        ])
        .unwrap();
        assert_eq!(
            (
                p[0].name.as_str(),
                p[0].listen.port(),
                p[0].upstream.as_str()
            ),
            ("a", 1000, "h:1")
        );
        assert_eq!(
            (
                p[1].name.as_str(),
                p[1].listen.port(),
                p[1].upstream.as_str()
            ),
            ("b", 2000, "h:2")
        );
        let e = pairs(&["--listen", "1000"]).unwrap_err();
        assert!(e.to_string().contains("needs both --listen"), "{e}");
        assert!(pairs(&["--listen", "nope", "--upstream", "h:1"]).is_err());
    }

    #[test]
    fn only_the_ctl_subcommand_takes_toxiproxy_clis_flags() {
        let argv = |a: &[&str]| -> Vec<String> {
            toxiproxy_argv(a.iter().map(std::ffi::OsString::from))
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect()
        };
        // Another command's arguments are left alone.
        for a in [
            &["netchaos", "run", "./app", "ctl", "-h", "db", "-v"][..],
            &["netchaos", "proxy", "--name", "ctl", "-v"][..],
            &["netchaos", "run", "--", "server", "-host", "x"][..],
        ] {
            assert_eq!(argv(a), a, "{a:?}");
        }
        assert_eq!(
            argv(&[
                "netchaos",
                "-v",
                "--seed",
                "3",
                "ctl",
                "-h",
                "u:1",
                "toxic",
                "a",
                "-toxicName",
                "n",
                "-tox",
                "0.5",
                "p"
            ]),
            [
                "netchaos",
                "-v",
                "--seed",
                "3",
                "ctl",
                "--url",
                "u:1",
                "toxic",
                "a",
                "--toxicName",
                "n",
                "--toxicity",
                "0.5",
                "p"
            ]
        );
        // netchaos's -v stays verbose; -h alone stays help.
        assert_eq!(
            argv(&["netchaos", "ctl", "list", "-v"]),
            ["netchaos", "ctl", "list", "-v"]
        );
        assert_eq!(argv(&["netchaos", "ctl", "-h"]), ["netchaos", "ctl", "-h"]);
        assert_eq!(
            argv(&["/bin/toxiproxy-cli", "-v"]),
            [
                "/bin/toxiproxy-cli",
                "ctl",
                "--toxiproxy-cli",
                "--ctl-version"
            ]
        );
        assert_eq!(
            argv(&["netchaos", "server", "-port=1"]),
            ["netchaos", "server", "--port=1"]
        );
    }
}
