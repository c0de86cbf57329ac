//! netchaos — network-level fault injection for real, unmodified clients.
//!
//! # Layout
//!
//! Data flows one way through the modules: each module may use those
//! listed before it, never one after. `scripts/modgraph.py` reads this
//! list, in this order, and fails the build (`scripts/test.sh`, also
//! `--quick`) on a module missing from it, an arrow back up, or a cycle.
//!
//! Leaves, used by all:
//!
//! * `units` — durations, sizes and rates with their human spellings.
//! * [`settings`] — settings as written (TOML, `--fault` strings, API JSON),
//!   located, read key by key with the human units; where files they name
//!   may be read from.
//! * [`error`] — failures as exit codes.
//! * `outfile` — the files netchaos writes: user-named outputs that follow
//!   no other user's symbolic link, and private files and directories of
//!   its own in `$TMPDIR`.
//! * `nofile` — the open-files limit: lifted for netchaos, given back to
//!   the commands it runs.
//! * `tool` — finding and running `ip`, `tc`, `nft`, `iptables-restore`,
//!   and classifying their failures once.
//! * `timer` — waiting to the tens of microseconds (the runtime's timer
//!   counts whole milliseconds).
//! * `protocol` — the wire vocabulary faults and reports name: gRPC's
//!   codes, the formats streamed answers come in, AWS's event-stream
//!   frames.
//! * `provider` — what netchaos knows of each LLM provider's API, one
//!   module each (Anthropic, OpenAI, Gemini, Bedrock, Ollama): how a
//!   request to it is told apart, its errors and its streams' errors.
//!
//! What to do:
//!
//! * `fault` — the fault kinds, one file each, registered in one place, in
//!   layers (connect, stream, packet, http, tls, dns), each saying what it
//!   does where its layer asks (`fault::acts`); stream faults are
//!   pipeline stages that know no socket; connect-phase decisions are pure
//!   functions (`fault::connect`).
//! * `mock` — the built-in upstream: the providers' wire formats
//!   (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini)
//!   answered with deterministic filler on a model of their timing
//!   (`netchaos mock`, and `--mock` in a provider's place).
//! * `netem` — host-level tc/netem shaping (beside the relay, not in it).
//! * `plan` — validated rules: matches, faults, explicit proxies, the seed.
//! * `profile` — the TOML profile schema and the built-in profiles;
//!   `--fault` flags; builds the plan.
//! * `ruleset` — the rules in force while netchaos runs (changeable by the
//!   API) and the one engine that decides each connection's faults, seeded.
//! * `events` — the event log (a writer thread), counters, the summary.
//! * `report` — an event log read back into a model of the run and drawn
//!   as one self-contained HTML page (`netchaos report`, `--report`).
//! * `drill` — an event log's `attempt` lines read back as request
//!   records, grouped into logical requests and judged by named checks
//!   (`netchaos records`, `--expect`); drill files run the commands under
//!   test with and without faults (`netchaos drill`).
//!
//! Where bytes move:
//!
//! * `tls` — the CA that signs (per run, or the user's) and its leaves,
//!   terminating and re-originating TLS, reading a ClientHello without
//!   consuming it, and a Java key store writer.
//! * `socket` — sockets as the engines use them: the options tokio lacks,
//!   and a peer as a direction writes to it (TCP, or TLS over it).
//! * `http` — the HTTP layer: HTTP/1.1 on the wire without rewriting
//!   (`http::wire`), each request's faults (`http::decide`, pure), the
//!   phases every request goes through on either engine (`http::phases`),
//!   server-sent events (`http::events`), heads edited in flight
//!   (`http::rewrite`), and the two sides that follow one connection's
//!   requests and responses (`http::exchange`); HTTP/2 (gRPC) ended and
//!   re-originated by hyper, stream by stream (`http::h2`); one memory
//!   budget for all of it (`http::budget`).
//! * `dns` — the DNS layer: each query of the namespace numbered and its
//!   faults decided (`dns::decide`, pure), answers made in the resolver's
//!   place (`dns::reply`), DNS over TCP (`dns::tcp`), and the names learned
//!   from answers (`dns::names`).
//! * `relay` — listeners and the accept loop, one task per connection
//!   (`relay::conn`), dialling (`relay::dial`), a fast path for fault-free
//!   bytes (`relay::fast`) and fault pipelines (`relay::pipeline`). What it
//!   needs from interception is a trait of its own
//!   (`relay::interception`); a connection with HTTP faults runs the HTTP
//!   layer's sides as its pipelines' readers (`relay::conn::http`).
//!
//! Where connections come from:
//!
//! * `intercept` — namespaces (the agent, its PID namespace's first
//!   process), nftables, the SYN gate (its memory, `intercept::gate`, and
//!   its NFQUEUE driver), the DNS forwarder, the command's trust in the
//!   run's CA (`intercept::trust`); implements the relay's `Interception`.
//!
//! Driving it:
//!
//! * `control` — the Toxiproxy-compatible HTTP API and Prometheus metrics.
//! * [`cli`] — clap definitions.
//! * [`commands`] — each subcommand wiring the above together, its command
//!   line checked first.
//! * `fuzzing` — entry points for the fuzz targets in `fuzz/`.

pub mod cli;
pub mod commands;
pub(crate) mod control;
pub(crate) mod dns;
pub(crate) mod drill;
pub mod error;
pub(crate) mod events;
pub(crate) mod fault;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod http;
pub(crate) mod intercept;
pub(crate) mod mock;
pub(crate) mod netem;
pub(crate) mod nofile;
pub(crate) mod outfile;
pub(crate) mod plan;
pub(crate) mod profile;
pub(crate) mod protocol;
pub(crate) mod provider;
pub(crate) mod relay;
pub(crate) mod report;
pub(crate) mod ruleset;
pub mod settings;
pub(crate) mod socket;
pub(crate) mod timer;
pub(crate) mod tls;
pub(crate) mod tool;
pub(crate) mod units;
