//! netchaos — network-level fault injection for real, unmodified clients.
//!
//! # Layout
//!
//! Data flows in one direction through the modules, in this order:
//!
//! * [`cli`] — clap definitions; raw arguments become validated options.
//! * [`profile`] — the TOML profile format, built-in profiles, `--fault`
//!   strings, with located errors ([`profile::node`]); human units in
//!   [`units`].
//! * [`plan`] — validated rules and per-connection, seeded fault decisions;
//!   pure, no I/O.
//! * [`ruleset`] — the rules in force at run time: the plan's, changeable by
//!   the control API, and each connection's live view of its faults.
//! * [`intercept`] — where transparent connections come from: the network
//!   namespace of `netchaos run`, its agent process, the nftables table, the
//!   DNS forwarder.
//! * [`fault`] — the fault interface and one file per fault kind; each stream
//!   fault is a pipeline stage that knows nothing of sockets.
//! * [`relay`] — listeners and the accept loop ([`relay`]), one task per
//!   connection ([`relay::conn`]), a `splice(2)` fast path for fault-free
//!   directions ([`relay::splice`]) and fault pipelines
//!   ([`relay::pipeline`]).
//! * [`events`] — the event log, counters and the exit summary.
//! * [`control`] — the Toxiproxy-compatible HTTP API and Prometheus metrics.
//! * [`netem`] — host-level tc/netem shaping (separate from the relay).
//! * [`commands`] — each subcommand wiring the above together; [`error`]
//!   maps failures to exit codes.
//! * `fuzzing` — entry points for the fuzz targets in `fuzz/`.

pub mod cli;
pub mod commands;
pub(crate) mod control;
pub mod error;
pub(crate) mod events;
pub(crate) mod fault;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod intercept;
pub(crate) mod netem;
pub(crate) mod plan;
pub(crate) mod profile;
pub(crate) mod relay;
pub(crate) mod ruleset;
pub mod settings;
pub(crate) mod tool;
pub(crate) mod units;
