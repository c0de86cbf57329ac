//! Drills: netchaos judges the client. The event log's `attempt` lines
//! (one per HTTP attempt, [`crate::http::attempt`]) are read back as
//! request records and grouped into logical requests ([`records`]); a
//! catalogue of named checks judges them ([`checks`]); a drill file runs
//! the user's commands without faults (the steady state) and under each
//! scenario's fault, and gives a verdict per scenario, client, seed and
//! check ([`spec`], [`run`]), on the terminal, as JSON and as JUnit XML
//! ([`output`]). Built-in drills are TOML files in `profiles/drills/`
//! ([`builtin`]).

pub(crate) mod builtin;
pub(crate) mod checks;
pub(crate) mod output;
pub(crate) mod records;
pub(crate) mod run;
pub(crate) mod spec;
pub(crate) mod stop;
